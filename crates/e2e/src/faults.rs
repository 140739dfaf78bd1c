//! A fault-injecting network for in-process clusters: the broker's network seam
//! (`syncline_broker::net::Network`) over TCP, with links between brokers that a
//! test can cut and heal. A cut link refuses new connections, and a connection on
//! it fails at its next read or write: a response in flight is never delivered.
//! Clients of the test (plain TCP connections) are never affected.

use std::collections::{HashMap, HashSet};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use syncline_broker::net::{BoxStream, Listener, Network, Tcp};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The cut links and who listens where.
#[derive(Debug, Default)]
pub struct Faults {
    cut: Mutex<HashSet<(i32, i32)>>,
    nodes: Mutex<HashMap<String, i32>>,
}

fn link(a: i32, b: i32) -> (i32, i32) {
    (a.min(b), a.max(b))
}

impl Faults {
    pub fn new() -> Arc<Faults> {
        Arc::new(Faults::default())
    }

    /// Records that broker `id` listens on `addr`.
    pub fn register(&self, id: i32, addr: &str) {
        self.nodes.lock().insert(addr.to_string(), id);
    }

    /// Cuts the link between brokers `a` and `b`, both ways.
    pub fn cut(&self, a: i32, b: i32) {
        self.cut.lock().insert(link(a, b));
    }

    /// Cuts broker `a` off from every other broker.
    pub fn isolate(&self, a: i32) {
        let ids: Vec<i32> = self.nodes.lock().values().copied().collect();
        for b in ids.into_iter().filter(|b| *b != a) {
            self.cut(a, b);
        }
    }

    pub fn heal(&self, a: i32, b: i32) {
        self.cut.lock().remove(&link(a, b));
    }

    pub fn heal_all(&self) {
        self.cut.lock().clear();
    }

    pub fn is_cut(&self, a: i32, b: i32) -> bool {
        self.cut.lock().contains(&link(a, b))
    }

    /// The network seam of broker `me`.
    pub fn network(self: &Arc<Self>, me: i32) -> Arc<dyn Network> {
        Arc::new(FaultyNetwork {
            me,
            faults: self.clone(),
        })
    }
}

/// Broker `me`'s view of the network.
#[derive(Debug)]
struct FaultyNetwork {
    me: i32,
    faults: Arc<Faults>,
}

fn cut_error() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "link cut by the test")
}

impl Network for FaultyNetwork {
    fn bind<'a>(
        &'a self,
        addr: &'a str,
    ) -> Pin<Box<dyn std::future::Future<Output = io::Result<Box<dyn Listener>>> + Send + 'a>> {
        Tcp.bind(addr)
    }

    fn connect<'a>(
        &'a self,
        addr: &'a str,
    ) -> Pin<Box<dyn std::future::Future<Output = io::Result<BoxStream>> + Send + 'a>> {
        Box::pin(async move {
            let peer = self.faults.nodes.lock().get(addr).copied();
            if peer.is_some_and(|p| self.faults.is_cut(self.me, p)) {
                return Err(cut_error());
            }
            let inner = Tcp.connect(addr).await?;
            Ok(match peer {
                Some(peer) => Box::new(FaultyStream {
                    inner,
                    me: self.me,
                    peer,
                    faults: self.faults.clone(),
                }) as BoxStream,
                None => inner,
            })
        })
    }
}

/// A connection between two brokers that fails once its link is cut.
struct FaultyStream {
    inner: BoxStream,
    me: i32,
    peer: i32,
    faults: Arc<Faults>,
}

impl FaultyStream {
    fn check(&self) -> io::Result<()> {
        if self.faults.is_cut(self.me, self.peer) {
            Err(cut_error())
        } else {
            Ok(())
        }
    }
}

impl AsyncRead for FaultyStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check()?;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            // Bytes that arrive on a cut link are dropped with the connection.
            Poll::Ready(Ok(())) if buf.filled().len() > before && this.check().is_err() => {
                buf.set_filled(before);
                Poll::Ready(Err(cut_error()))
            }
            other => other,
        }
    }
}

impl AsyncWrite for FaultyStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check()?;
        Pin::new(&mut this.inner).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check()?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

//! The network seams of the broker ([`Network`]) and of the client
//! ([`syncline_client::dial`]) over turmoil's simulated TCP: messages are
//! delivered, delayed, held and dropped by the simulation, on its clock.
//!
//! Every stream also passes a one-way gate ([`hold_oneway`]): turmoil holds a
//! link both ways only, and its one-way partition drops segments inside live
//! streams (which then hang for ever, as no TCP connection does). A gated
//! direction keeps what is written, as a send buffer does while TCP
//! retransmits into a cut, and delivers it once released; the other direction
//! flows. A new connection across a gated link (either way: the handshake
//! needs both) waits for the release.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use syncline_broker::net::{BoxStream, Listener, Network};

type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The broker's network inside a simulated host.
#[derive(Debug, Default, Clone, Copy)]
pub struct SimNet;

/// A simulated listener, bound on every address of its host (turmoil's
/// only choice) and answering for the address it was asked for.
struct SimListener {
    inner: turmoil::net::TcpListener,
    addr: std::net::SocketAddr,
}

impl Listener for SimListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxStream, String)>> {
        Box::pin(async move {
            let (s, peer) = self.inner.accept().await?;
            Ok((Box::new(Gated::new(s)?) as BoxStream, peer.to_string()))
        })
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        Ok(self.addr)
    }
}

impl Network for SimNet {
    fn bind<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let addr: std::net::SocketAddr = addr
                .parse()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{addr}: {e}")))?;
            let any = std::net::SocketAddr::new([0, 0, 0, 0].into(), addr.port());
            let inner = turmoil::net::TcpListener::bind(any).await?;
            Ok(Box::new(SimListener { inner, addr }) as Box<dyn Listener>)
        })
    }

    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<BoxStream>> {
        Box::pin(async move { Ok(Box::new(connect(addr.to_string()).await?) as BoxStream) })
    }
}

/// Installs the simulated network as this thread's client dialer until
/// dropped.
#[derive(Debug)]
pub struct Dialer(());

impl Dialer {
    pub fn install() -> Dialer {
        let dialer: syncline_client::dial::Dialer = Arc::new(|addr: String| {
            Box::pin(async move {
                Ok(Box::new(connect(addr).await?) as syncline_client::dial::BoxStream)
            })
        });
        syncline_client::dial::set_thread_dialer(Some(dialer));
        Dialer(())
    }
}

impl Drop for Dialer {
    fn drop(&mut self) {
        syncline_client::dial::set_thread_dialer(None);
    }
}

/// The held directions (from, to), counted (faults overlap), and the tasks
/// waiting for a release. The simulation runs on one thread.
#[derive(Debug, Default)]
struct Gates {
    held: BTreeMap<(IpAddr, IpAddr), u32>,
    waiting: Vec<Waker>,
}

thread_local! {
    static GATES: RefCell<Gates> = RefCell::new(Gates::default());
}

fn held(from: IpAddr, to: IpAddr) -> bool {
    GATES.with(|g| g.borrow().held.contains_key(&(from, to)))
}

fn wait_for_release(cx: &Context<'_>) {
    GATES.with(|g| {
        let waiting = &mut g.borrow_mut().waiting;
        if !waiting.iter().any(|w| w.will_wake(cx.waker())) {
            waiting.push(cx.waker().clone());
        }
    });
}

/// Holds what `from` sends to `to` until as many [`release_oneway`] calls.
pub fn hold_oneway(from: IpAddr, to: IpAddr) {
    GATES.with(|g| *g.borrow_mut().held.entry((from, to)).or_default() += 1);
}

/// Ends one [`hold_oneway`] of the direction; the last delivers what it held.
pub fn release_oneway(from: IpAddr, to: IpAddr) {
    let woken = GATES.with(|g| {
        let mut g = g.borrow_mut();
        if let Some(n) = g.held.get_mut(&(from, to)) {
            *n -= 1;
            if *n == 0 {
                g.held.remove(&(from, to));
            }
        }
        std::mem::take(&mut g.waiting)
    });
    woken.into_iter().for_each(Waker::wake);
}

/// Opens every gate (a new run).
pub fn open_all_gates() {
    let woken = GATES.with(|g| std::mem::take(&mut *g.borrow_mut()).waiting);
    woken.into_iter().for_each(Waker::wake);
}

/// Connects through the gates: the handshake waits while either direction of
/// the link is held.
async fn connect(addr: String) -> io::Result<Gated> {
    let s = turmoil::net::TcpStream::connect(addr).await?;
    let (from, to) = (s.local_addr()?.ip(), s.peer_addr()?.ip());
    std::future::poll_fn(|cx| {
        if held(from, to) || held(to, from) {
            wait_for_release(cx);
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    Gated::new(s)
}

/// What a gated direction keeps at most (a send buffer's size).
const SEND_BUFFER: usize = 1 << 16;

/// The bytes written to a gated stream and not yet sent: a send buffer,
/// emptied by the stream's pump task whenever its direction is open.
#[derive(Debug, Default)]
struct SendBuffer {
    bytes: Vec<u8>,
    /// The stream was shut down or dropped: the pump sends the rest, then a
    /// FIN.
    closed: bool,
    failed: Option<io::ErrorKind>,
    pump: Option<Waker>,
    writer: Option<Waker>,
}

/// A simulated stream behind its one-way gate. Reads come straight from the
/// stream; writes go to a [`SendBuffer`] that a task of the stream's host
/// pumps into it, so that what a held direction kept leaves at the release
/// whatever the writer is doing then (as a kernel's send buffer does).
struct Gated {
    read: turmoil::net::tcp::OwnedReadHalf,
    send: Arc<std::sync::Mutex<SendBuffer>>,
    from: IpAddr,
    to: IpAddr,
}

fn lock(send: &std::sync::Mutex<SendBuffer>) -> std::sync::MutexGuard<'_, SendBuffer> {
    send.lock().unwrap_or_else(|e| e.into_inner())
}

impl Gated {
    fn new(inner: turmoil::net::TcpStream) -> io::Result<Gated> {
        let (from, to) = (inner.local_addr()?.ip(), inner.peer_addr()?.ip());
        let (read, write) = inner.into_split();
        let send = Arc::new(std::sync::Mutex::new(SendBuffer::default()));
        tokio::spawn(pump(write, send.clone(), from, to));
        Ok(Gated {
            read,
            send,
            from,
            to,
        })
    }
}

/// Moves a stream's buffered bytes into it while its direction is open.
async fn pump(
    mut write: turmoil::net::tcp::OwnedWriteHalf,
    send: Arc<std::sync::Mutex<SendBuffer>>,
    from: IpAddr,
    to: IpAddr,
) {
    use tokio::io::AsyncWriteExt;
    loop {
        let next = std::future::poll_fn(|cx| {
            let mut b = lock(&send);
            if b.bytes.is_empty() {
                if b.closed {
                    return Poll::Ready(None);
                }
                b.pump = Some(cx.waker().clone());
                return Poll::Pending;
            }
            if held(from, to) {
                wait_for_release(cx);
                return Poll::Pending;
            }
            Poll::Ready(Some(std::mem::take(&mut b.bytes)))
        })
        .await;
        let Some(bytes) = next else {
            let _ = write.shutdown().await;
            return;
        };
        let result = write.write_all(&bytes).await;
        let mut b = lock(&send);
        if let Err(e) = result {
            b.failed = Some(e.kind());
        }
        if let Some(w) = b.writer.take() {
            w.wake();
        }
        if b.failed.is_some() {
            return;
        }
    }
}

impl Drop for Gated {
    fn drop(&mut self) {
        let mut b = lock(&self.send);
        b.closed = true;
        if let Some(w) = b.pump.take() {
            w.wake();
        }
    }
}

impl AsyncRead for Gated {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.read).poll_read(cx, buf)
    }
}

impl AsyncWrite for Gated {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut b = lock(&self.send);
        if let Some(kind) = b.failed {
            return Poll::Ready(Err(kind.into()));
        }
        if b.closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let room = SEND_BUFFER.saturating_sub(b.bytes.len());
        if room == 0 {
            b.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = room.min(buf.len());
        b.bytes.extend_from_slice(&buf[..n]);
        if let Some(w) = b.pump.take() {
            w.wake();
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut b = lock(&self.send);
        if let Some(kind) = b.failed {
            return Poll::Ready(Err(kind.into()));
        }
        // What a held direction keeps is in the send buffer: flushed, as far
        // as a writer can know.
        if b.bytes.is_empty() || held(self.from, self.to) {
            return Poll::Ready(Ok(()));
        }
        b.writer = Some(cx.waker().clone());
        Poll::Pending
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut b = lock(&self.send);
        b.closed = true;
        if let Some(w) = b.pump.take() {
            w.wake();
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-way gate holds one direction of a live connection and lets the
    /// other flow; what it held arrives on release, in order.
    #[test]
    fn a_one_way_gate_holds_one_direction_until_released() {
        let mut sim = turmoil::Builder::new()
            .simulation_duration(Duration::from_secs(60))
            .build();
        open_all_gates();
        let released = Arc::new(AtomicBool::new(false));
        sim.host("server", || async {
            let mut listener = SimNet.bind("0.0.0.0:9000").await?;
            let (mut s, _) = listener.accept().await?;
            // "a" came before the hold; "x" goes back through it; "b" was held.
            let mut got = [0u8; 1];
            s.read_exact(&mut got).await?;
            assert_eq!(&got, b"a");
            s.write_all(b"x").await?;
            s.read_exact(&mut got).await?;
            assert_eq!(&got, b"b");
            s.write_all(b"done").await?;
            s.flush().await?;
            std::future::pending::<()>().await;
            Ok(())
        });
        let flag = released.clone();
        sim.client("client", async move {
            let mut s = connect("server:9000".into()).await?;
            let (from, to) = (s.from, s.to);
            s.write_all(b"a").await?;
            // Sent before the hold: flushed out of the send buffer first.
            s.flush().await?;
            hold_oneway(from, to);
            s.write_all(b"b").await?;
            s.flush().await?;
            let mut other_way = [0u8; 1];
            s.read_exact(&mut other_way).await?;
            assert_eq!(&other_way, b"x", "the other direction flows");
            let mut answer = [0u8; 4];
            let early = tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut answer));
            assert!(early.await.is_err(), "the held request went through");
            flag.store(true, Ordering::SeqCst);
            release_oneway(from, to);
            s.read_exact(&mut answer).await?;
            assert_eq!(&answer, b"done");
            Ok(())
        });
        sim.run().unwrap();
        assert!(released.load(Ordering::SeqCst));
    }
}

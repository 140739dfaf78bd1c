//! The network seams of the broker ([`Network`]) and of the client
//! ([`syncline_client::dial`]) over turmoil's simulated TCP: messages are
//! delivered, delayed, held and dropped by the simulation, on its clock.

use std::io;
use std::sync::Arc;

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
            Ok((Box::new(s) as BoxStream, peer.to_string()))
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
        Box::pin(async move {
            let s = turmoil::net::TcpStream::connect(addr.to_string()).await?;
            Ok(Box::new(s) as BoxStream)
        })
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
                let s = turmoil::net::TcpStream::connect(addr).await?;
                Ok(Box::new(s) as syncline_client::dial::BoxStream)
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

//! The network seam: everything the broker does on the network goes through
//! [`Network`], so a whole cluster can run over a simulated or fault-injecting
//! network instead of TCP.

use std::any::Any;
use std::future::Future;
use std::io;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream to a peer.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {
    /// For [`into_tcp`]: the stream as `Any`.
    fn as_any(&self) -> &dyn Any;
    /// For [`into_tcp`]: the stream, boxed as `Any`.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// The TCP socket under `stream` when it is a plain one (a stream of [`Tcp`]
/// or [`BoundTcp`]), for what only a socket can do (`sendfile`); anything else
/// (TLS, a simulated or fault-injecting network) comes back as it was.
pub fn into_tcp(stream: BoxStream) -> Result<tokio::net::TcpStream, BoxStream> {
    // (`&*stream`: the boxed stream's own method, not the box's.)
    if !<dyn Stream>::as_any(&*stream).is::<tokio::net::TcpStream>() {
        return Err(stream);
    }
    match <dyn Stream>::into_any(stream).downcast::<tokio::net::TcpStream>() {
        Ok(tcp) => Ok(*tcp),
        Err(_) => unreachable!("the stream was checked to be a TcpStream"),
    }
}

/// A boxed byte stream.
pub type BoxStream = Box<dyn Stream>;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Accepts incoming streams.
pub trait Listener: Send + 'static {
    /// Waits for the next connection: (stream, peer address).
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxStream, String)>>;
    /// The address actually bound (port 0 resolved).
    fn local_addr(&self) -> io::Result<std::net::SocketAddr>;
}

/// Binds listeners and opens connections.
pub trait Network: Send + Sync + std::fmt::Debug + 'static {
    /// Listens on `addr` (`host:port`; port 0 picks a free one).
    fn bind<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Box<dyn Listener>>>;
    /// Opens a stream to `addr` (`host:port`).
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<BoxStream>>;
}

/// Plain TCP.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tcp;

struct TcpListener(tokio::net::TcpListener);

impl Listener for TcpListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxStream, String)>> {
        Box::pin(async move {
            let (s, peer) = self.0.accept().await?;
            let _ = s.set_nodelay(true);
            Ok((Box::new(s) as BoxStream, peer.to_string()))
        })
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.0.local_addr()
    }
}

impl Network for Tcp {
    fn bind<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let l = tokio::net::TcpListener::bind(addr).await?;
            Ok(Box::new(TcpListener(l)) as Box<dyn Listener>)
        })
    }

    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<BoxStream>> {
        Box::pin(async move {
            let s = tokio::net::TcpStream::connect(addr).await?;
            let _ = s.set_nodelay(true);
            Ok(Box::new(s) as BoxStream)
        })
    }
}

/// Plain TCP whose outgoing connections leave from one source address (the
/// broker's `outgoing_bind_address`); listeners as [`Tcp`].
#[derive(Debug, Clone, Copy)]
pub struct BoundTcp(pub std::net::IpAddr);

impl Network for BoundTcp {
    fn bind<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Box<dyn Listener>>> {
        Tcp.bind(addr)
    }

    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<BoxStream>> {
        Box::pin(async move {
            let mut last = None;
            for peer in tokio::net::lookup_host(addr).await? {
                let socket = match peer {
                    std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
                    std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
                };
                socket.bind(std::net::SocketAddr::new(self.0, 0))?;
                match socket.connect(peer).await {
                    Ok(s) => {
                        let _ = s.set_nodelay(true);
                        return Ok(Box::new(s) as BoxStream);
                    }
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{addr} resolves to nothing"),
                )
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_a_plain_tcp_stream_is_taken_for_tcp() {
        let mut listener = Tcp.bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (accepted, connected) = tokio::join!(listener.accept(), Tcp.connect(&addr));
        let (accepted, _) = accepted.unwrap();
        let Ok(tcp) = into_tcp(accepted) else {
            panic!("a TCP stream is taken for one");
        };
        assert_eq!(tcp.local_addr().unwrap().to_string(), addr);
        drop(connected);
        // A stream that is not a socket (as the simulation's, or TLS) stays what it was.
        let (a, _b) = tokio::io::duplex(8);
        let boxed: BoxStream = Box::new(a);
        let Err(back) = into_tcp(boxed) else {
            panic!("a duplex stream is not TCP");
        };
        assert!(<dyn Stream>::as_any(&*back).is::<tokio::io::DuplexStream>());
    }

    #[tokio::test]
    async fn bound_tcp_connects_from_its_source_address() {
        let mut listener = Tcp.bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let source: std::net::IpAddr = "127.0.0.7".parse().unwrap();
        let network = BoundTcp(source);
        let connect = network.connect(&addr);
        let (accepted, connected) = tokio::join!(listener.accept(), connect);
        connected.unwrap();
        let (_, peer) = accepted.unwrap();
        assert!(peer.starts_with("127.0.0.7:"), "peer {peer}");
    }
}

//! Where the client's connections come from: TCP, unless this thread has a
//! dialer installed. A deterministic simulation runs a whole cluster and its
//! clients on one thread over a simulated network (`crates/sim`); it installs
//! a dialer there, and every [`Connection`](crate::Connection),
//! [`Producer`](crate::Producer) and [`Consumer`](crate::Consumer) on that
//! thread connects through it.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream to a broker.
pub trait DialStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> DialStream for T {}

/// A boxed stream, as a dialer returns it.
pub type BoxStream = Box<dyn DialStream>;

/// Opens a stream to `host:port`.
pub type Dialer = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = io::Result<BoxStream>> + Send>> + Send + Sync,
>;

thread_local! {
    static DIALER: RefCell<Option<Dialer>> = const { RefCell::new(None) };
}

/// Installs `dialer` for the connections this thread opens from now on
/// (`None`: TCP again).
pub fn set_thread_dialer(dialer: Option<Dialer>) {
    DIALER.with(|d| *d.borrow_mut() = dialer);
}

/// Connects to `addr` through this thread's dialer, or over TCP with
/// `TCP_NODELAY` (requests are small and latency matters more than packet
/// count).
pub(crate) async fn dial(addr: &str) -> io::Result<BoxStream> {
    if let Some(dialer) = DIALER.with(|d| d.borrow().clone()) {
        return dialer(addr.to_string()).await;
    }
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let _ = stream.set_nodelay(true);
    Ok(Box::new(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_thread_dialer_replaces_tcp_and_can_be_removed() {
        let dialer: Dialer = Arc::new(|addr| {
            Box::pin(async move {
                Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("dialer asked for {addr}"),
                ))
            })
        });
        set_thread_dialer(Some(dialer));
        let e = dial("broker-9:9092")
            .await
            .err()
            .expect("the dialer refuses");
        assert_eq!(e.to_string(), "dialer asked for broker-9:9092");
        set_thread_dialer(None);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        assert!(dial(&addr).await.is_ok(), "TCP again");
    }
}

//! The metrics endpoint: `GET /metrics` in the Prometheus text format.
//!
//! Anyone who can reach `metrics_listen` can connect, so the endpoint bounds
//! what a client can hold: at most [`MAX_CONNECTIONS`] connections at a time
//! (one more is closed as soon as it is accepted), and a request's headers
//! must arrive within [`HEADER_READ_TIMEOUT`] (a connection trickling them,
//! or idle between requests, is closed after it).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::dispatch::Dispatch;

/// The metrics endpoint's open connections at most: a scraper or two, and
/// people with curl.
pub(crate) const MAX_CONNECTIONS: usize = 64;

/// How long a connection may take to send a request's headers (and how long
/// it may stay idle between requests).
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The endpoint's bounds.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    max_connections: usize,
    header_read_timeout: Duration,
}

/// What a scrape answers.
type Scrape = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves `/metrics` on `listener` until `shutdown`.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    broker: Arc<dyn Dispatch>,
    shutdown: CancellationToken,
) {
    let bounds = Bounds {
        max_connections: MAX_CONNECTIONS,
        header_read_timeout: HEADER_READ_TIMEOUT,
    };
    serve_with(
        listener,
        Arc::new(move || broker.scrape_metrics()),
        bounds,
        shutdown,
    )
    .await
}

async fn serve_with(
    listener: tokio::net::TcpListener,
    scrape: Scrape,
    bounds: Bounds,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(bounds.max_connections));
    // Whether the refusals of the current spell of being full were logged.
    let mut full_logged = false;
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if !std::mem::replace(&mut full_logged, true) {
                tracing::warn!(
                    %peer,
                    max_connections = bounds.max_connections,
                    "the metrics endpoint has as many connections as it serves: closing new ones until one closes (logged once until then)"
                );
            }
            drop(stream);
            continue;
        };
        full_logged = false;
        let scrape = scrape.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let service = service_fn(move |req: Request<Incoming>| {
                let scrape = scrape.clone();
                async move { Ok::<_, Infallible>(respond(&*scrape, &req)) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(bounds.header_read_timeout)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = conn => {}
            }
        });
    }
}

fn respond(scrape: &dyn Fn() -> String, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (req.method().as_str(), req.uri().path()) {
        ("GET", "/metrics") => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            scrape(),
        ),
        ("GET", "/") => (
            StatusCode::OK,
            "text/plain; charset=utf-8",
            "syncline broker: metrics at /metrics\n".to_string(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: try /metrics\n".to_string(),
        ),
    };
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpStream;
    use tokio::time::Instant;

    use super::*;

    /// Bounds a test's wait for something that must happen far sooner: a
    /// hang guard, not a measure.
    const GUARD: Duration = Duration::from_secs(20);

    /// The first line of a request, and a header: not yet a whole request.
    const PARTIAL: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: broker\r\n";
    /// What completes [`PARTIAL`]: the server answers and closes.
    const REST: &[u8] = b"Connection: close\r\n\r\n";

    async fn endpoint(bounds: Bounds) -> (SocketAddr, CancellationToken) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        tokio::spawn(serve_with(
            listener,
            Arc::new(|| "syncline_up 1\n".to_string()),
            bounds,
            shutdown.clone(),
        ));
        (addr, shutdown)
    }

    /// Everything the server sends until it closes (a reset ends it too).
    async fn until_closed(c: &mut TcpStream) -> String {
        let mut got = Vec::new();
        let read = tokio::time::timeout(GUARD, async {
            let mut buf = [0u8; 4096];
            loop {
                match c.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        assert!(read.is_ok(), "the connection is still open after {GUARD:?}");
        String::from_utf8_lossy(&got).into_owned()
    }

    /// The answer to a whole request on a new connection ("" when it is
    /// closed unanswered).
    async fn scrape(addr: SocketAddr) -> String {
        let mut c = TcpStream::connect(addr).await.unwrap();
        // The server may have closed it already: what it answered tells.
        let _ = c.write_all(&[PARTIAL, REST].concat()).await;
        until_closed(&mut c).await
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_are_closed_unanswered() {
        let (addr, shutdown) = endpoint(Bounds {
            max_connections: 2,
            header_read_timeout: Duration::from_secs(600),
        })
        .await;
        // Two connections in the middle of their headers hold both slots
        // (accepted first: the listener takes connections in order).
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(PARTIAL).await.unwrap();
            held.push(c);
        }
        for _ in 0..3 {
            assert_eq!(scrape(addr).await, "", "a connection beyond the cap");
        }
        // The two held are served when they finish their requests...
        for c in &mut held {
            c.write_all(REST).await.unwrap();
            let answer = until_closed(c).await;
            assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
            assert!(answer.ends_with("syncline_up 1\n"), "{answer}");
        }
        // ... and once they are closed, new connections are served again
        // (as soon as the server has seen them close).
        let deadline = Instant::now() + GUARD;
        loop {
            let answer = scrape(addr).await;
            if answer.starts_with("HTTP/1.1 200 OK") {
                break;
            }
            assert!(Instant::now() < deadline, "no slot came free: {answer:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.cancel();
    }

    #[tokio::test]
    async fn a_connection_that_does_not_finish_its_headers_in_time_is_closed() {
        let timeout = Duration::from_millis(300);
        let (addr, shutdown) = endpoint(Bounds {
            max_connections: 64,
            header_read_timeout: timeout,
        })
        .await;
        // Half a request, then nothing; and nothing at all.
        let start = Instant::now();
        let mut trickling = TcpStream::connect(addr).await.unwrap();
        trickling.write_all(PARTIAL).await.unwrap();
        let mut silent = TcpStream::connect(addr).await.unwrap();
        assert_eq!(until_closed(&mut trickling).await, "");
        assert_eq!(until_closed(&mut silent).await, "");
        assert!(start.elapsed() >= timeout, "closed before the timeout");
        // A whole request is still answered.
        let answer = scrape(addr).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        shutdown.cancel();
    }
}

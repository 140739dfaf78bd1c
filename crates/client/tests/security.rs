//! `Connector` and `Admin` against a tiny in-test broker that speaks TLS and
//! SASL PLAIN and answers Metadata: what connects, and what each
//! misconfiguration reads like.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use syncline_client::{ClientConfig, ClientError, Connector};
use syncline_proto::{frame, pb, ErrorCode};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::Framed;

const PASSWORD: &str = "alice-secret";

/// Answers SaslHandshake (PLAIN only), SaslAuthenticate (alice/PASSWORD) and
/// Metadata on one connection, until it closes.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(stream: S) {
    let mut framed = Framed::new(stream, frame::codec(1 << 20));
    while let Some(Ok(bytes)) = framed.next().await {
        let Ok(request) = frame::decode_request(bytes.freeze()) else {
            return;
        };
        let (body, close) = match request.body {
            Some(pb::request::Body::SaslHandshake(r)) => (
                pb::response::Body::SaslHandshake(pb::SaslHandshakeResponse {
                    error_code: if r.mechanism == "PLAIN" {
                        ErrorCode::None
                    } else {
                        ErrorCode::UnsupportedSaslMechanism
                    } as i32,
                    mechanisms: vec!["PLAIN".into()],
                }),
                false,
            ),
            Some(pb::request::Body::SaslAuthenticate(r)) => {
                let ok = syncline_auth::plain::decode(&r.auth_bytes)
                    .is_ok_and(|m| m.username == "alice" && m.password == PASSWORD);
                (
                    pb::response::Body::SaslAuthenticate(pb::SaslAuthenticateResponse {
                        error_code: if ok {
                            ErrorCode::None
                        } else {
                            ErrorCode::SaslAuthenticationFailed
                        } as i32,
                        error_message: String::new(),
                        auth_bytes: Default::default(),
                    }),
                    !ok,
                )
            }
            _ => (
                pb::response::Body::Metadata(pb::MetadataResponse {
                    cluster_id: "tiny".into(),
                    ..Default::default()
                }),
                false,
            ),
        };
        let response = pb::Response {
            correlation_id: request.correlation_id,
            body: Some(body),
        };
        if framed.send(frame::encode(&response)).await.is_err() || close {
            return;
        }
    }
}

/// A loopback listener serving every connection, over TLS when `tls` is set.
async fn broker(tls: Option<Arc<syncline_tls::ServerConfig>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    None => serve(tcp).await,
                    Some(config) => {
                        if let Ok(stream) = syncline_tls::accept(&config, tcp).await {
                            serve(stream).await;
                        }
                    }
                }
            });
        }
    });
    addr
}

fn certificates(dir: &Path) -> Arc<syncline_tls::ServerConfig> {
    syncline_tls::create_ca(dir).unwrap();
    syncline_tls::create_cert(dir, "broker", &["127.0.0.1".to_string()], dir).unwrap();
    syncline_tls::server_config(
        &dir.join("broker.pem"),
        &dir.join("broker.key"),
        None,
        syncline_tls::ClientAuth::None,
    )
    .unwrap()
}

fn config(addr: &str, settings: &[(&str, &str)]) -> ClientConfig {
    let mut config = ClientConfig::new(addr);
    config.connect_timeout_ms = 5_000;
    config.request_timeout_ms = 5_000;
    for (key, value) in settings {
        config.set(key, value).unwrap();
    }
    config
}

async fn metadata(config: &ClientConfig, addr: &str) -> Result<String, ClientError> {
    let connector = Connector::new(config)?;
    let conn = connector.connect(addr).await?;
    let body = pb::request::Body::Metadata(pb::MetadataRequest::default());
    match tokio::time::timeout(Duration::from_secs(10), conn.send(body))
        .await
        .expect("an answer or an error in time")?
    {
        pb::response::Body::Metadata(m) => Ok(m.cluster_id),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn sasl_ssl_connects_and_each_misconfiguration_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let addr = broker(Some(certificates(dir.path()))).await;
    let ca = dir.path().join("ca.pem");
    let ca = ca.to_str().unwrap();
    let good = [
        ("security.protocol", "SASL_SSL"),
        ("sasl.mechanism", "PLAIN"),
        ("sasl.username", "alice"),
        ("sasl.password", PASSWORD),
        ("ssl.ca.location", ca),
    ];
    assert_eq!(
        metadata(&config(&addr, &good), &addr).await.unwrap(),
        "tiny"
    );

    // Through the Admin (Cluster::open), too.
    let admin = syncline_client::Admin::new(config(&addr, &good)).unwrap();
    assert!(admin.list_topics().await.unwrap().is_empty());

    let mut wrong = config(&addr, &good);
    wrong.set("sasl.password", "guess").unwrap();
    let err = metadata(&wrong, &addr).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "authentication failed for user alice: wrong username or password \
         (SASL_AUTHENTICATION_FAILED, PLAIN)"
    );
    assert!(err.is_security() && !err.is_retriable());

    let mut scram = config(&addr, &good);
    scram.set("sasl.mechanism", "SCRAM-SHA-256").unwrap();
    let err = metadata(&scram, &addr).await.unwrap_err().to_string();
    assert!(
        err.contains("does not accept sasl.mechanism SCRAM-SHA-256 (it offers: PLAIN)"),
        "{err}"
    );

    let plaintext = config(&addr, &[]);
    let err = metadata(&plaintext, &addr).await.unwrap_err();
    assert!(matches!(err, ClientError::ClosedBeforeAnswer(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("closed the connection before answering")
            && err.to_string().contains("check security.protocol"),
        "{err}"
    );

    let sasl_plaintext = config(
        &addr,
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "alice"),
            ("sasl.password", PASSWORD),
        ],
    );
    let err = metadata(&sasl_plaintext, &addr).await.unwrap_err();
    assert!(matches!(err, ClientError::ClosedBeforeAnswer(_)), "{err:?}");

    let other = tempfile::tempdir().unwrap();
    syncline_tls::create_ca(other.path()).unwrap();
    let mut unknown_ca = config(&addr, &good);
    unknown_ca
        .set(
            "ssl.ca.location",
            other.path().join("ca.pem").to_str().unwrap(),
        )
        .unwrap();
    let err = metadata(&unknown_ca, &addr).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("TLS with {addr}: "))
            && err.contains("not signed by a CA in ssl.ca.location (unknown issuer)"),
        "{err}"
    );
}

#[tokio::test]
async fn a_tls_client_to_a_plaintext_broker_is_told_to_check_security_protocol() {
    let addr = broker(None).await;
    let dir = tempfile::tempdir().unwrap();
    syncline_tls::create_ca(dir.path()).unwrap();
    let ca = dir.path().join("ca.pem");
    let tls = config(
        &addr,
        &[
            ("security.protocol", "SSL"),
            ("ssl.ca.location", ca.to_str().unwrap()),
        ],
    );
    let err = metadata(&tls, &addr).await.unwrap_err();
    assert!(err.is_security(), "{err:?}");
    // Retried (a broker going down hangs up the same way), with the hint.
    assert!(err.is_retriable(), "{err:?}");
    assert!(
        err.to_string()
            .contains("closed the connection during the TLS handshake")
            && err.to_string().contains("check security.protocol"),
        "{err}"
    );
    // The plaintext client is fine there.
    assert_eq!(metadata(&config(&addr, &[]), &addr).await.unwrap(), "tiny");
}

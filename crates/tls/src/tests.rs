//! Handshakes between configurations made from generated files, over in-memory
//! streams and loopback TCP: what succeeds, and what each failure says.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;

/// A CA, a broker certificate for localhost and 127.0.0.1, a client
/// certificate for alice, and a second, unrelated CA.
struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn new() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca");
        create_ca(&ca).unwrap();
        let hosts = ["localhost".to_string(), "127.0.0.1".to_string()];
        create_cert(&ca, "broker", &hosts, dir.path()).unwrap();
        create_cert(&ca, "alice", &[], dir.path()).unwrap();
        create_ca(&dir.path().join("other")).unwrap();
        Certs { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ca(&self) -> PathBuf {
        self.path("ca/ca.pem")
    }

    fn server(&self, auth: ClientAuth) -> Arc<ServerConfig> {
        let ca = self.ca();
        server_config(
            &self.path("broker.pem"),
            &self.path("broker.key"),
            Some(&ca),
            auth,
        )
        .unwrap()
    }

    fn client(&self, with_cert: bool) -> Arc<ClientConfig> {
        let (cert, key) = (self.path("alice.pem"), self.path("alice.key"));
        if with_cert {
            client_config(Some(&self.ca()), Some(&cert), Some(&key)).unwrap()
        } else {
            client_config(Some(&self.ca()), None, None).unwrap()
        }
    }
}

/// Fails the test instead of hanging it.
async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("the test took too long")
}

/// Runs a server that answers `ping` with `pong` on one end of a duplex and
/// connects a client on the other; returns both sides' outcomes.
async fn ping(
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    host: &str,
) -> (Result<Option<String>, TlsError>, Result<(), TlsError>) {
    let (a, b) = tokio::io::duplex(1 << 16);
    let server_side = tokio::spawn(async move {
        let mut stream = accept(&server, b).await?;
        let subject = peer_subject(&stream);
        let mut buf = [0u8; 4];
        stream
            .read_exact(&mut buf)
            .await
            .map_err(|e| TlsError::Io(e.to_string()))?;
        assert_eq!(&buf, b"ping");
        stream
            .write_all(b"pong")
            .await
            .map_err(|e| TlsError::Io(e.to_string()))?;
        stream
            .shutdown()
            .await
            .map_err(|e| TlsError::Io(e.to_string()))?;
        Ok(subject)
    });
    let client_side = async {
        let mut stream: ClientStream<DuplexStream> = connect(&client, host, a).await?;
        let mut buf = [0u8; 4];
        let exchanged = match stream.write_all(b"ping").await {
            Ok(()) => stream.read_exact(&mut buf).await.map(|_| ()),
            Err(e) => Err(e),
        };
        match exchanged {
            Ok(()) => {
                assert_eq!(&buf, b"pong");
                Ok(())
            }
            Err(e) => Err(TlsError::from_client_io(&e).unwrap_or(TlsError::Io(e.to_string()))),
        }
    };
    let client_result = bounded(client_side).await;
    let server_result = bounded(server_side).await.unwrap();
    (server_result, client_result)
}

#[tokio::test]
async fn server_and_client_talk_both_ways() {
    let certs = Certs::new();
    for host in ["localhost", "127.0.0.1"] {
        let (server, client) =
            ping(certs.server(ClientAuth::None), certs.client(false), host).await;
        assert_eq!(server, Ok(None), "{host}");
        assert_eq!(client, Ok(()), "{host}");
    }
}

#[tokio::test]
async fn a_required_client_certificate_names_the_client() {
    let certs = Certs::new();
    let (server, client) = ping(
        certs.server(ClientAuth::Required),
        certs.client(true),
        "localhost",
    )
    .await;
    assert_eq!(server, Ok(Some("CN=alice".to_string())));
    assert_eq!(client, Ok(()));
    assert_eq!(
        certificate_subject(&certs.path("alice.pem")).unwrap(),
        "CN=alice"
    );
}

#[tokio::test]
async fn requested_client_auth_lets_clients_without_a_certificate_in() {
    let certs = Certs::new();
    let (server, client) = ping(
        certs.server(ClientAuth::Requested),
        certs.client(false),
        "localhost",
    )
    .await;
    assert_eq!((server, client), (Ok(None), Ok(())));
    let (server, _) = ping(
        certs.server(ClientAuth::Requested),
        certs.client(true),
        "localhost",
    )
    .await;
    assert_eq!(server, Ok(Some("CN=alice".to_string())));
}

#[tokio::test]
async fn a_required_client_certificate_that_is_missing_is_reported_on_both_sides() {
    let certs = Certs::new();
    let (server, client) = ping(
        certs.server(ClientAuth::Required),
        certs.client(false),
        "localhost",
    )
    .await;
    assert_eq!(server, Err(TlsError::ClientCertMissing));
    let err = client.unwrap_err();
    assert_eq!(err, TlsError::ClientCertRequired);
    assert!(
        err.to_string()
            .contains("requires a client certificate (set ssl.certificate.location"),
        "{err}"
    );
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused() {
    let certs = Certs::new();
    let other = certs.path("other");
    create_cert(&other, "mallory", &[], &other).unwrap();
    let client = client_config(
        Some(&certs.ca()),
        Some(&other.join("mallory.pem")),
        Some(&other.join("mallory.key")),
    )
    .unwrap();
    let (server, client) = ping(certs.server(ClientAuth::Required), client, "localhost").await;
    assert_eq!(server, Err(TlsError::UnknownIssuer { peer: Peer::Client }));
    let err = client.unwrap_err();
    assert!(
        matches!(err, TlsError::CertificateRefused { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_broker_signed_by_another_ca_is_an_unknown_issuer() {
    let certs = Certs::new();
    let client = client_config(Some(&certs.path("other/ca.pem")), None, None).unwrap();
    let (_, client) = ping(certs.server(ClientAuth::None), client, "localhost").await;
    let err = client.unwrap_err();
    assert_eq!(err, TlsError::UnknownIssuer { peer: Peer::Broker });
    assert!(
        err.to_string()
            .contains("not signed by a CA in ssl.ca.location (unknown issuer)"),
        "{err}"
    );
}

#[tokio::test]
async fn a_host_the_certificate_does_not_name_lists_its_names() {
    let certs = Certs::new();
    let (_, client) = ping(
        certs.server(ClientAuth::None),
        certs.client(false),
        "kafka-1.example",
    )
    .await;
    let err = client.unwrap_err().to_string();
    assert!(
        err.contains("does not name kafka-1.example (its SANs: ")
            && err.contains("localhost")
            && err.contains("127.0.0.1"),
        "{err}"
    );
}

#[tokio::test]
async fn an_expired_broker_certificate_says_so() {
    let certs = Certs::new();
    let now = time::OffsetDateTime::now_utc();
    generate::issue(
        &certs.path("ca"),
        "old",
        &["localhost".to_string()],
        certs.dir.path(),
        now - time::Duration::days(30),
        now - time::Duration::days(2),
    )
    .unwrap();
    let server = server_config(
        &certs.path("old.pem"),
        &certs.path("old.key"),
        None,
        ClientAuth::None,
    )
    .unwrap();
    let (_, client) = ping(server, certs.client(false), "localhost").await;
    let err = client.unwrap_err();
    assert!(
        matches!(
            err,
            TlsError::Expired {
                peer: Peer::Broker,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("expired 2 days ago"), "{err}");
}

#[tokio::test]
async fn plaintext_bytes_to_a_tls_server_are_not_tls() {
    let certs = Certs::new();
    let server = certs.server(ClientAuth::None);
    let (mut a, b) = tokio::io::duplex(1 << 16);
    // What a plaintext client sends first: a length-prefixed frame.
    a.write_all(&[0, 0, 0, 12, 0x08, 0x01, 0x10, 0x00, 0, 0, 0, 0, 0, 0, 0, 0])
        .await
        .unwrap();
    let err = bounded(accept(&server, b)).await.unwrap_err();
    assert_eq!(err, TlsError::NotTls { peer: Peer::Client });
    assert!(
        err.to_string()
            .contains("security.protocol must be SSL or SASL_SSL"),
        "{err}"
    );
}

/// A loopback plaintext server running `serve` on its first connection.
async fn plaintext_server<F, Fut>(serve: F) -> String
where
    F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        serve(stream).await;
    });
    addr
}

#[tokio::test]
async fn a_tls_client_to_a_plaintext_server_says_the_peer_did_not_speak_tls() {
    let certs = Certs::new();
    let client = certs.client(false);
    // An echo server, and one that reads a frame length, finds it absurd and
    // hangs up (a plaintext broker).
    let echo = plaintext_server(|mut s| async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    })
    .await;
    let hang_up = plaintext_server(|mut s| async move {
        let mut len = [0u8; 4];
        let _ = s.read_exact(&mut len).await;
        drop(s);
    })
    .await;
    // The echo answers with what is not TLS; the hang-up answers nothing, as a
    // broker going down would (so the client retries it), with the same hint.
    for (addr, want) in [
        (echo, TlsError::NotTls { peer: Peer::Broker }),
        (hang_up, TlsError::HungUp),
    ] {
        let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let err = bounded(connect(&client, "127.0.0.1", tcp))
            .await
            .unwrap_err();
        assert_eq!(err, want, "{addr}");
        assert!(
            err.to_string()
                .contains("(a plaintext port? check security.protocol"),
            "{err}"
        );
    }
}

#[test]
fn file_errors_name_the_path_and_what_it_holds() {
    let certs = Certs::new();
    let missing = certs.path("nope.pem");
    let err = client_config(Some(&missing), None, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&missing.display().to_string()) && err.contains("no such file"),
        "{err}"
    );

    let (cert, key) = (certs.path("broker.pem"), certs.path("broker.key"));
    // The two files swapped.
    let err = server_config(&key, &cert, None, ClientAuth::None).unwrap_err();
    assert!(
        matches!(
            err,
            TlsError::NoCertificate {
                holds_key: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("it holds a private key"), "{err}");
    let err = server_config(&cert, &cert, None, ClientAuth::None).unwrap_err();
    assert!(
        matches!(
            err,
            TlsError::NoPrivateKey {
                holds_certificate: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&cert.display().to_string()),
        "{err}"
    );

    // Someone else's key.
    let err = server_config(&cert, &certs.path("alice.key"), None, ClientAuth::None).unwrap_err();
    assert_eq!(
        err,
        TlsError::KeyMismatch {
            cert: cert.clone(),
            key: certs.path("alice.key")
        }
    );
    assert!(err.to_string().contains("does not match the certificate"));

    // Not PEM at all.
    let junk = certs.path("junk.pem");
    std::fs::write(&junk, "hello\n").unwrap();
    let err = client_config(Some(&junk), None, None).unwrap_err();
    assert!(
        matches!(
            err,
            TlsError::NoCertificate {
                holds_key: false,
                ..
            }
        ),
        "{err:?}"
    );

    // Settings that do not go together.
    let err = client_config(Some(&certs.ca()), Some(&cert), None).unwrap_err();
    assert!(err.to_string().contains("go together"), "{err}");
    let err = server_config(&cert, &key, None, ClientAuth::Required).unwrap_err();
    assert!(err.to_string().contains("needs ssl_ca_location"), "{err}");
}

#[test]
fn client_auth_parses_its_three_values() {
    for auth in [
        ClientAuth::None,
        ClientAuth::Requested,
        ClientAuth::Required,
    ] {
        assert_eq!(auth.to_string().parse::<ClientAuth>(), Ok(auth));
    }
    assert_eq!("REQUIRED".parse::<ClientAuth>(), Ok(ClientAuth::Required));
    assert!("want".parse::<ClientAuth>().is_err());
}

#[tokio::test]
async fn a_bad_host_is_refused_before_the_handshake() {
    let certs = Certs::new();
    let (a, _b) = tokio::io::duplex(64);
    let err = connect(&certs.client(false), "not a host!", a)
        .await
        .unwrap_err();
    assert_eq!(err, TlsError::BadHost("not a host!".into()));
}

//! A secure cluster end to end: SASL_SSL client and Kafka listeners, mutual
//! TLS between brokers, the `admin` super user from the bootstrap file, users
//! and ACLs made with the CLI.
//!
//! - the admin produces and consumes with `--command-config`;
//! - a plaintext client on the TLS port, a client trusting another CA and a
//!   wrong password are each refused with an error that says which;
//! - a user without a Write ACL gets TOPIC_AUTHORIZATION_FAILED and writes
//!   nothing, and writes once the ACL is added;
//! - deleting a user closes its open connections;
//! - the inter-broker listener refuses a client without a certificate;
//! - kcat (librdkafka) produces and consumes over SASL_SSL with SCRAM.

use std::process::Output;
use std::time::Duration;

use syncline_client::{ClientConfig, Connector};
use syncline_e2e::kcat::kcat;
use syncline_e2e::{cli_with, wait_for, Cluster};
use syncline_proto::pb;

const TOPIC: &str = "orders";

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn ok(what: &str, out: Output) -> String {
    assert!(out.status.success(), "{what}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The CLI with a properties file of `settings`.
fn cli_as(
    cluster: &Cluster,
    settings: &[(String, String)],
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Output {
    let file = cluster
        .dir
        .path()
        .join(format!("client-{}.properties", rand::random::<u32>()));
    let body: String = settings.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    std::fs::write(&file, body).unwrap();
    let file = file.display().to_string();
    let mut all = vec!["--command-config", file.as_str()];
    all.extend_from_slice(args);
    cli_with(&cluster.bootstrap(), &all, stdin)
}

fn consume_all(cluster: &Cluster, n: usize) -> Vec<String> {
    let n = n.to_string();
    let out = ok(
        "consume",
        cluster.cli(
            &[
                "consume",
                TOPIC,
                "--from-beginning",
                "--max-messages",
                &n,
                "--timeout-ms",
                "15000",
            ],
            None,
        ),
    );
    out.lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secure_cluster_authenticates_authorizes_and_refuses_with_reasons() {
    let cluster = Cluster::start_secure(3, 3, "").await;
    let security = cluster.security.clone().expect("secure");

    // The admin (a super user) creates a topic, produces and consumes.
    ok(
        "create",
        cluster.cli(
            &[
                "topic",
                "create",
                TOPIC,
                "--partitions",
                "1",
                "--replication-factor",
                "3",
            ],
            None,
        ),
    );
    ok(
        "produce",
        cluster.cli(&["produce", TOPIC, "--acks", "all"], Some(b"a1\na2\n")),
    );
    assert_eq!(consume_all(&cluster, 2), ["a1", "a2"]);

    // A plaintext client on the TLS port.
    let plain = text(&cli_with(&cluster.bootstrap(), &["topic", "list"], None));
    assert!(plain.contains("security.protocol"), "plaintext: {plain}");
    // A client that trusts another CA.
    let other = cluster.dir.path().join("other-ca");
    syncline_tls::create_ca(&other).unwrap();
    let mut settings = security.client_settings(false);
    for (k, v) in &mut settings {
        if k == "ssl.ca.location" {
            *v = syncline_tls::ca_cert_path(&other).display().to_string();
        }
    }
    let unknown_ca = text(&cli_as(&cluster, &settings, &["topic", "list"], None));
    assert!(
        unknown_ca.contains("ssl.ca.location"),
        "unknown CA: {unknown_ca}"
    );
    // A wrong password.
    let wrong = security.user_settings("admin", "not-the-password", false);
    let wrong = text(&cli_as(&cluster, &wrong, &["topic", "list"], None));
    assert!(
        wrong.contains("SASL_AUTHENTICATION_FAILED") || wrong.contains("invalid credentials"),
        "wrong password: {wrong}"
    );
    assert!(wrong.contains("password"), "wrong password: {wrong}");

    // bob: a user without any ACL. Each client is told why at once, not after
    // its timeouts.
    ok(
        "user create bob",
        cluster.cli(
            &[
                "user",
                "create",
                "bob",
                "--mechanism",
                "SCRAM-SHA-512",
                "--password-stdin",
            ],
            Some(b"bob-secret\n"),
        ),
    );
    let bob = security.user_settings("bob", "bob-secret", false);
    let refused = |settings: &[(String, String)], what: &str, args: &[&str], code: &str| {
        let out = cli_as(&cluster, settings, args, Some(b"b1\n"));
        assert!(!out.status.success(), "bob, {what}: {}", text(&out));
        assert!(text(&out).contains(code), "bob, {what}: {}", text(&out));
    };
    let started = std::time::Instant::now();
    let taf = "TOPIC_AUTHORIZATION_FAILED";
    refused(
        &bob,
        "a producer",
        &["produce", TOPIC, "--acks", "all"],
        taf,
    );
    refused(
        &bob,
        "a consumer",
        &["consume", TOPIC, "--from-beginning", "--timeout-ms", "5000"],
        taf,
    );
    refused(&bob, "topic describe", &["topic", "describe", TOPIC], taf);
    refused(
        &bob,
        "acl list",
        &["acl", "list"],
        "CLUSTER_AUTHORIZATION_FAILED",
    );
    // With Read on orders (so Describe) but Write nowhere: his idempotent
    // producer may not get an id, a plain one may not write.
    ok(
        "acl add bob",
        cluster.cli(
            &[
                "acl",
                "add",
                "--allow-principal",
                "User:bob",
                "--operation",
                "Read",
                "--topic",
                TOPIC,
            ],
            None,
        ),
    );
    wait_for(
        "bob's Read ACL on every broker",
        Duration::from_secs(20),
        || {
            let out = cli_as(&cluster, &bob, &["topic", "describe", TOPIC], None);
            async move { out.status.success() }
        },
    )
    .await;
    refused(
        &bob,
        "an idempotent producer",
        &["produce", TOPIC, "--acks", "all"],
        "CLUSTER_AUTHORIZATION_FAILED",
    );
    refused(
        &bob,
        "a plain producer",
        &[
            "produce",
            TOPIC,
            "--acks",
            "all",
            "--enable-idempotence",
            "false",
        ],
        taf,
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "bob's refusals took {:?}",
        started.elapsed()
    );

    // The admin's group committed offsets on orders and on a topic bob may
    // not see. With Read on the group (so Describe), bob describes it: its
    // offsets (all of them fetched at once) are those of orders alone.
    ok(
        "create secret",
        cluster.cli(
            &[
                "topic",
                "create",
                "secret",
                "--partitions",
                "1",
                "--replication-factor",
                "3",
            ],
            None,
        ),
    );
    ok(
        "produce secret",
        cluster.cli(&["produce", "secret", "--acks", "all"], Some(b"s1\n")),
    );
    for (topic, n) in [(TOPIC, "2"), ("secret", "1")] {
        ok(
            "consume in group g",
            cluster.cli(
                &[
                    "consume",
                    topic,
                    "--group",
                    "g",
                    "--from-beginning",
                    "--max-messages",
                    n,
                    "--timeout-ms",
                    "15000",
                ],
                None,
            ),
        );
    }
    let admins: serde_json::Value = serde_json::from_str(&ok(
        "admin describes g",
        cluster.cli(&["group", "describe", "g", "--json"], None),
    ))
    .unwrap();
    let topics = |d: &serde_json::Value| {
        let mut t: Vec<String> = d["offsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["topic"].as_str().unwrap().to_string())
            .collect();
        t.sort();
        t
    };
    assert_eq!(topics(&admins), ["orders", "secret"], "{admins}");
    ok(
        "acl add bob group",
        cluster.cli(
            &[
                "acl",
                "add",
                "--allow-principal",
                "User:bob",
                "--operation",
                "Read",
                "--group",
                "g",
            ],
            None,
        ),
    );
    let mut described = None;
    wait_for("bob's Read ACL on group g", Duration::from_secs(20), || {
        let out = cli_as(&cluster, &bob, &["group", "describe", "g", "--json"], None);
        let success = out.status.success();
        described = Some(out);
        async move { success }
    })
    .await;
    let described = described.unwrap();
    let bobs: serde_json::Value = serde_json::from_slice(&described.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&described)));
    assert_eq!(topics(&bobs), ["orders"], "{bobs}");

    // alice: a user with Write on a topic of her own only (so that her
    // idempotent producer gets an id), not on orders.
    let password = cluster.dir.path().join("alice.password");
    std::fs::write(&password, "alice-secret\n").unwrap();
    let password_file = password.display().to_string();
    ok(
        "user create",
        cluster.cli(
            &[
                "user",
                "create",
                "alice",
                "--mechanism",
                "SCRAM-SHA-512",
                "--password-file",
                &password_file,
            ],
            None,
        ),
    );
    let users = ok("user list", cluster.cli(&["user", "list"], None));
    assert!(
        users.contains("alice") && users.contains("admin"),
        "{users}"
    );
    ok(
        "acl add",
        cluster.cli(
            &[
                "acl",
                "add",
                "--allow-principal",
                "User:alice",
                "--operation",
                "Write",
                "--topic",
                "alice-own",
            ],
            None,
        ),
    );
    let alice = security.user_settings("alice", "alice-secret", false);
    let denied = cli_as(
        &cluster,
        &alice,
        &["produce", TOPIC, "--acks", "all"],
        Some(b"x1\n"),
    );
    assert!(!denied.status.success(), "alice wrote: {}", text(&denied));
    assert!(
        text(&denied).contains("TOPIC_AUTHORIZATION_FAILED"),
        "{}",
        text(&denied)
    );
    // Nothing was written: the topic still holds the admin's two records.
    let partition = cluster.describe_partition(TOPIC, 0).await.unwrap();
    assert_eq!(partition.high_watermark, 2, "{partition:?}");

    ok(
        "acl add",
        cluster.cli(
            &[
                "acl",
                "add",
                "--allow-principal",
                "User:alice",
                "--operation",
                "Write",
                "--topic",
                TOPIC,
            ],
            None,
        ),
    );
    let acls = ok(
        "acl list",
        cluster.cli(&["acl", "list", "--topic", TOPIC], None),
    );
    assert!(
        acls.contains("User:alice") && acls.contains("Write"),
        "{acls}"
    );
    // Brokers learn the ACL from the controller: retry until it took effect.
    let mut written = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::time::Instant::now() < deadline {
        let out = cli_as(
            &cluster,
            &alice,
            &["produce", TOPIC, "--acks", "all"],
            Some(b"x2\n"),
        );
        if out.status.success() {
            written = true;
            break;
        }
        assert!(
            text(&out).contains("TOPIC_AUTHORIZATION_FAILED"),
            "{}",
            text(&out)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(written, "alice could not write after the ACL was added");
    assert_eq!(consume_all(&cluster, 3), ["a1", "a2", "x2"]);

    // Deleting alice closes her open connections.
    let mut config = ClientConfig::new(&cluster.bootstrap());
    for (k, v) in &alice {
        config.set(k, v).unwrap();
    }
    let conn = Connector::new(&config)
        .unwrap()
        .connect(&cluster.node(2).addr())
        .await
        .expect("alice connects");
    conn.send(pb::request::Body::Metadata(pb::MetadataRequest::default()))
        .await
        .expect("served");
    ok(
        "user delete",
        cluster.cli(
            &["user", "delete", "alice", "--mechanism", "SCRAM-SHA-512"],
            None,
        ),
    );
    wait_for(
        "alice's connection to close",
        Duration::from_secs(20),
        || {
            let closed = conn.is_closed();
            async move { closed }
        },
    )
    .await;

    // The inter-broker listener wants a certificate of the CA.
    let no_cert = syncline_tls::client_config(Some(&security.ca()), None, None).unwrap();
    let internal = cluster.internal_addr(1);
    let tcp = tokio::net::TcpStream::connect(&internal).await.unwrap();
    let refusal = async {
        let mut tls = match syncline_tls::connect(&no_cert, "127.0.0.1", tcp).await {
            Ok(tls) => tls,
            Err(e) => return e.to_string(),
        };
        // TLS 1.3: the broker's verdict on the certificate comes with the
        // first read.
        match syncline_client::sasl::authenticate(
            &mut tls,
            syncline_auth::Mechanism::ScramSha256,
            std::sync::Arc::new(syncline_auth::ClientCredential::new("admin", "x")),
            "e2e",
        )
        .await
        {
            Ok(()) => "served without a certificate".to_string(),
            Err(e) => format!("{e:?}"),
        }
    };
    let refusal = tokio::time::timeout(Duration::from_secs(15), refusal)
        .await
        .expect("refused in time");
    assert!(
        refusal.to_lowercase().contains("certificate"),
        "the inter-broker listener without a client certificate: {refusal}"
    );

    // librdkafka over SASL_SSL with SCRAM-SHA-512.
    let ca = security.ca().display().to_string();
    let sasl_password = format!("sasl.password={}", security.admin_password);
    let bootstrap = cluster.kafka_bootstrap();
    let common = [
        "-b",
        bootstrap.as_str(),
        "-X",
        "security.protocol=SASL_SSL",
        "-X",
        "sasl.mechanisms=SCRAM-SHA-512",
        "-X",
        "sasl.username=admin",
        "-X",
        sasl_password.as_str(),
    ];
    let ca_setting = format!("ssl.ca.location={ca}");
    let mut produce: Vec<&str> = common.to_vec();
    produce.extend(["-X", ca_setting.as_str(), "-P", "-t", TOPIC, "-p", "0"]);
    kcat(&produce, Some("k1\nk2\n".to_string())).await;
    let mut consume: Vec<&str> = common.to_vec();
    consume.extend([
        "-X",
        ca_setting.as_str(),
        "-C",
        "-t",
        TOPIC,
        "-p",
        "0",
        "-o",
        "beginning",
        "-c",
        "5",
        "-e",
    ]);
    let read = kcat(&consume, None).await;
    assert_eq!(
        read.lines().collect::<Vec<_>>(),
        ["a1", "a2", "x2", "k1", "k2"],
        "{read}"
    );
}

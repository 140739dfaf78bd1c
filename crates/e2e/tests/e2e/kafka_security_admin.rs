//! Kafka's security admin APIs through a secure cluster's Kafka listeners
//! (SASL_SSL): confluent-kafka's AdminClient (librdkafka), logged in as the
//! `admin` super user with SCRAM-SHA-512, creates, describes and deletes ACLs
//! and upserts, describes and deletes SCRAM credentials
//! (crates/e2e/python/kafka_security_admin.py).
//!
//! - a user bob made by AlterUserScramCredentials logs in with his password,
//!   and once CreateAcls allowed him, lists the topic and produces to it;
//! - bob, no super user, is refused CreateAcls and AlterUserScramCredentials
//!   with CLUSTER_AUTHORIZATION_FAILED (and sees no ACLs: librdkafka does not
//!   report DescribeAcls' error code);
//! - DeleteAcls returns what it deleted; after bob's credentials are deleted
//!   his login fails.

use std::process::Output;
use std::time::Duration;

use syncline_e2e::checks::create_topic;
use syncline_e2e::kcat::kafka_python;
use syncline_e2e::{wait_for, Cluster};
use syncline_proto::pb;
use syncline_proto::pb::request::Body;
use syncline_proto::pb::response::Body as Resp;
use tokio::process::Command;

const TOPIC: &str = "payments";
const BOB: &str = "bob";
const BOB_PASSWORD: &str = "bob's secret";

/// Bound on one run of the script (each of its calls has 30 s).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

/// Bound on a change reaching every broker.
const PROPAGATION: Duration = Duration::from_secs(20);

/// Runs `kafka_security_admin.py COMMAND BOOTSTRAP CA USER PASSWORD ARGS...`;
/// its stdout lines, after checking it succeeded.
async fn script(
    cluster: &Cluster,
    command: &str,
    user: &str,
    password: &str,
    args: &[&str],
) -> Vec<String> {
    let security = cluster.security.as_ref().expect("a secure cluster");
    let ca = security.ca().display().to_string();
    let path = format!(
        "{}/python/kafka_security_admin.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let child = Command::new(kafka_python())
        .arg(path)
        .args([command, &cluster.kafka_bootstrap(), &ca, user, password])
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out: Output = tokio::time::timeout(SCRIPT_TIMEOUT, child)
        .await
        .unwrap_or_else(|_| panic!("{command} did not finish within {SCRIPT_TIMEOUT:?}"))
        .expect("the Kafka clients' venv is made by scripts/test.sh");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{command} as {user} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().map(str::to_string).collect()
}

/// The script as the admin.
async fn as_admin(cluster: &Cluster, command: &str, args: &[&str]) -> Vec<String> {
    let password = cluster.security.as_ref().unwrap().admin_password.clone();
    script(cluster, command, "admin", &password, args).await
}

/// Whether broker `id` knows `user`'s credentials (`count` of them).
async fn credentials_known(cluster: &Cluster, id: i32, user: &str, count: usize) -> bool {
    let asked = Body::DescribeUserScramCredentials(pb::DescribeUserScramCredentialsRequest {
        users: vec![user.to_string()],
    });
    match cluster.request(id, asked).await {
        Ok(Resp::DescribeUserScramCredentials(d)) => match d.results.first() {
            Some(u) if count == 0 => u.error_code != pb::ErrorCode::None as i32,
            Some(u) => u.error_code == pb::ErrorCode::None as i32 && u.credentials.len() == count,
            None => false,
        },
        _ => false,
    }
}

/// How many ACLs of `principal` broker `id` knows.
async fn acls_known(cluster: &Cluster, id: i32, principal: &str) -> Option<usize> {
    let asked = Body::DescribeAcls(pb::DescribeAclsRequest {
        filter: Some(pb::AclBindingFilter {
            resource_type: 1,
            pattern_type: 1,
            principal: principal.to_string(),
            operation: 1,
            permission_type: 1,
            ..Default::default()
        }),
    });
    match cluster.request(id, asked).await {
        Ok(Resp::DescribeAcls(d)) if d.error_code == 0 => Some(d.acls.len()),
        _ => None,
    }
}

/// Waits until every broker knows `user` with `count` credentials (0: none).
async fn wait_credentials(cluster: &Cluster, user: &str, count: usize) {
    for id in 1..=cluster.nodes.len() as i32 {
        wait_for(
            &format!("broker {id} to know {count} credential(s) of {user}"),
            PROPAGATION,
            || credentials_known(cluster, id, user, count),
        )
        .await;
    }
}

/// Waits until every broker knows `count` ACLs of `principal`.
async fn wait_acls(cluster: &Cluster, principal: &str, count: usize) {
    for id in 1..=cluster.nodes.len() as i32 {
        wait_for(
            &format!("broker {id} to know {count} ACL(s) of {principal}"),
            PROPAGATION,
            || async move { acls_known(cluster, id, principal).await == Some(count) },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_admin_manages_users_and_acls_through_the_kafka_listeners() {
    let cluster = Cluster::start_secure(3, 3, "").await;
    create_topic(&cluster, TOPIC, 2, 3, 2);
    let principal = format!("User:{BOB}");

    // CreateAcls, then (once every broker has them) DescribeAcls finds them,
    // grouped by resource on the wire.
    let lines = as_admin(&cluster, "create-acls", &[TOPIC, &principal]).await;
    assert_eq!(lines, ["CREATED 2"]);
    wait_acls(&cluster, &principal, 2).await;
    let bob_acls = [
        format!("ACL TOPIC {TOPIC} LITERAL {principal} * WRITE ALLOW"),
        format!("ACL TOPIC {TOPIC} LITERAL {principal} * DESCRIBE ALLOW"),
    ];
    let lines = as_admin(&cluster, "describe-acls", &[TOPIC]).await;
    assert_eq!(lines[..], [&bob_acls[..], &["ACLS 2".to_string()]].concat());

    // AlterUserScramCredentials upserts bob from librdkafka's salted
    // passwords; DescribeUserScramCredentials answers Kafka's mechanisms.
    let lines = as_admin(&cluster, "upsert-user", &[BOB, BOB_PASSWORD]).await;
    assert_eq!(lines, ["UPSERTED bob"]);
    wait_credentials(&cluster, BOB, 2).await;
    let lines = as_admin(&cluster, "describe-user", &[BOB]).await;
    assert_eq!(
        lines,
        [
            "CREDENTIAL bob SCRAM_SHA_256 4096",
            "CREDENTIAL bob SCRAM_SHA_512 8192",
            "USERS admin,bob",
        ],
    );

    // bob logs in with his password (the verifier syncline made of the salted
    // one matches it), lists the topic and writes to it.
    let lines = script(&cluster, "produce", BOB, BOB_PASSWORD, &[TOPIC, "5"]).await;
    assert_eq!(
        lines.first().map(String::as_str),
        Some("METADATA payments 2")
    );
    let acks = lines.iter().filter(|l| l.starts_with("ACK ")).count();
    assert_eq!(acks, 5, "{lines:?}");
    assert_eq!(
        lines.last().map(String::as_str),
        Some("DONE 0"),
        "{lines:?}"
    );

    // bob is no super user: the cluster's users and ACLs are not his to
    // change (his own password included) or see. librdkafka drops
    // DescribeAcls' error code: the refusal reads as no ACLs. (Refusing
    // DescribeUserScramCredentials crashes librdkafka, which frees memory it
    // does not own when that response has a request-level error: the
    // translation's unit test covers that answer.)
    let lines = script(&cluster, "refused", BOB, BOB_PASSWORD, &[]).await;
    assert_eq!(
        lines,
        [
            "REFUSED CreateAcls CLUSTER_AUTHORIZATION_FAILED",
            "REFUSED AlterUserScramCredentials CLUSTER_AUTHORIZATION_FAILED",
            "DESCRIBED DescribeAcls 0",
        ],
    );

    // DeleteAcls answers what it deleted; none is left on the topic.
    let lines = as_admin(&cluster, "delete-acls", &[TOPIC, &principal]).await;
    assert_eq!(
        lines[..],
        [&["DELETED 2".to_string()], &bob_acls[..]].concat()
    );
    wait_acls(&cluster, &principal, 0).await;
    let lines = as_admin(&cluster, "describe-acls", &[TOPIC]).await;
    assert_eq!(lines, ["ACLS 0"]);

    // Deleting bob's credentials: he is described no more, and cannot log in.
    let lines = as_admin(&cluster, "delete-user", &[BOB]).await;
    assert_eq!(lines, ["DELETED-USER bob"]);
    wait_credentials(&cluster, BOB, 0).await;
    let lines = as_admin(&cluster, "describe-user", &[BOB]).await;
    assert_eq!(lines, ["NO-USER bob RESOURCE_NOT_FOUND", "USERS admin"]);
    let lines = script(&cluster, "login-fails", BOB, BOB_PASSWORD, &[]).await;
    assert_eq!(lines, ["LOGIN-FAILED _AUTHENTICATION"]);
}

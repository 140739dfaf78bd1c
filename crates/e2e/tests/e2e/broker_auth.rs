//! Broker credentials on real processes: a broker whose credential its peers do
//! not hold is refused, with a clear error in both brokers' logs, and never
//! joins; installing its verifier (a rotation) lets it in without restarting
//! the peers. Credentials are made on first start, or by `synclined
//! credentials create`.

use std::process::Command;
use std::time::Duration;

use syncline_e2e::{bin, wait_for, Cluster};

const WAIT: Duration = Duration::from_secs(30);

fn log(cluster: &Cluster, id: i32) -> String {
    std::fs::read_to_string(&cluster.node(id).log).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_with_a_credential_its_peers_do_not_hold_is_refused_until_its_verifier_is_installed(
) {
    let mut cluster = Cluster::start(3, "broker_heartbeat_interval_ms = 200\n").await;
    let shared = cluster.credentials_dir();
    // First start made one credential per broker, the secret private.
    for id in 1..=3 {
        let secret = syncline_auth::credentials::secret_path(&shared, id);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&secret).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{}", secret.display());
        assert!(syncline_auth::credentials::verifier_path(&shared, id).exists());
    }

    // Broker 3 gets a new credential of its own (as on another host) that the
    // others' directory does not know.
    let epoch_of_3 = |d: &syncline_proto::pb::DescribeClusterResponse| {
        d.brokers
            .iter()
            .find(|b| b.endpoint.as_ref().unwrap().node_id == 3)
            .map(|b| (b.broker_epoch, b.fenced))
    };
    let (before, _) = epoch_of_3(&cluster.describe_cluster(1).await.unwrap()).unwrap();
    cluster.kill(3);
    let own = cluster.dir.path().join("credentials-3");
    let out = Command::new(bin("synclined"))
        .args(["credentials", "create", "--dir"])
        .arg(&own)
        .args(["--brokers", "3"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Its host holds its peers' verifiers (it must check them too).
    for peer in [1, 2] {
        std::fs::copy(
            syncline_auth::credentials::verifier_path(&shared, peer),
            syncline_auth::credentials::verifier_path(&own, peer),
        )
        .unwrap();
    }
    let config = &cluster.node(3).config;
    let mut text = std::fs::read_to_string(config).unwrap();
    text.push_str(&format!("broker_credentials_dir = \"{}\"\n", own.display()));
    std::fs::write(config, text).unwrap();
    let (log1, log3) = (log(&cluster, 1).len(), log(&cluster, 3).len());
    cluster.restart(3);

    wait_for("both sides to log the refusal", WAIT, || async {
        let (one, three) = (log(&cluster, 1), log(&cluster, 3));
        one[log1..].contains("refused an authentication")
            && one[log1..].contains("wrong password for \"broker-3\"")
            && three[log3..].contains("authentication as broker-3 failed")
            && three[log3..].contains("refused the credential of broker-3")
    })
    .await;
    // It never got in: the registration is still the killed process's.
    let d = cluster.describe_cluster(1).await.unwrap();
    assert_eq!(epoch_of_3(&d).unwrap().0, before, "{d:?}");
    assert!(
        cluster
            .metric(1, "syncline_authentication_failures_total")
            .unwrap()
            >= 1.0
    );

    // Rotation: install broker 3's new verifier where its peers read it. They
    // take it on the next attempt, without a restart.
    std::fs::copy(
        syncline_auth::credentials::verifier_path(&own, 3),
        syncline_auth::credentials::verifier_path(&shared, 3),
    )
    .unwrap();
    wait_for("broker 3 to register anew and unfence", WAIT, || async {
        cluster
            .describe_cluster(1)
            .await
            .ok()
            .and_then(|d| epoch_of_3(&d))
            .is_some_and(|(epoch, fenced)| epoch != before && !fenced)
    })
    .await;
}

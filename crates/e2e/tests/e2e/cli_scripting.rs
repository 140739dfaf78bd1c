//! The CLI features the scripts in scripts/ are built on, against real brokers:
//! `syncline cluster wait-ready` and `--field` reads of the `--json` output.

use std::time::Duration;

use serde_json::Value;
use syncline_e2e::{checks, cli_with, free_port, wait_for, Cluster};

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_ready_succeeds_on_a_ready_cluster_and_names_the_broker_that_is_not() {
    // Nothing listening: fails within the timeout, naming the address.
    let nowhere = format!("127.0.0.1:{}", free_port());
    let out = cli_with(
        &nowhere,
        &["cluster", "wait-ready", "--timeout-ms", "300"],
        None,
    );
    assert!(!out.status.success());
    assert_eq!(stdout(&out), "", "no broker id to blame");
    assert!(
        stderr(&out).contains(&format!("not ready after 300 ms: cannot reach {nowhere}")),
        "{}",
        stderr(&out)
    );

    let mut cluster = Cluster::start(3, "").await;
    let out = cluster.cli(
        &[
            "cluster",
            "wait-ready",
            "--brokers",
            "3",
            "--timeout-ms",
            "30000",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "ready: brokers 1,2,3 are registered, unfenced and answer Metadata\n"
    );
    // Without --brokers: every registered broker.
    let out = cluster.cli(&["cluster", "wait-ready", "--timeout-ms", "30000"], None);
    assert!(out.status.success(), "{}", stderr(&out));

    // More brokers awaited than registered: nobody registered is to blame.
    let out = cluster.cli(
        &[
            "cluster",
            "wait-ready",
            "--brokers",
            "4",
            "--timeout-ms",
            "300",
        ],
        None,
    );
    assert!(!out.status.success());
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).contains("3 of 4 brokers are registered ([1,2,3])"),
        "{}",
        stderr(&out)
    );

    // A dead broker is named (on stdout, for scripts) before the controller has
    // even fenced it, then once it has.
    cluster.kill(3);
    let wait_3 = |cluster: &Cluster| {
        cluster.cli(
            &[
                "cluster",
                "wait-ready",
                "--brokers",
                "3",
                "--timeout-ms",
                "300",
            ],
            None,
        )
    };
    let out = wait_3(&cluster);
    assert!(!out.status.success());
    assert_eq!(stdout(&out), "3\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("broker 3") && stderr(&out).contains("look at broker 3's log"),
        "{}",
        stderr(&out)
    );
    wait_for(
        "the controller to fence broker 3",
        Duration::from_secs(30),
        || async {
            checks::registration(&cluster, 3)
                .await
                .is_ok_and(|(_, fenced)| fenced)
        },
    )
    .await;
    let out = wait_3(&cluster);
    assert_eq!(stdout(&out), "3\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("broker 3 is registered but fenced"),
        "{}",
        stderr(&out)
    );
    // Two of the three are enough when two are awaited.
    let out = cluster.cli(
        &[
            "cluster",
            "wait-ready",
            "--brokers",
            "2",
            "--timeout-ms",
            "30000",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("ready: brokers 1,2 "),
        "{}",
        stdout(&out)
    );

    // Restarted, it is waited for until it is back.
    cluster.restart(3);
    let out = cluster.cli(
        &[
            "cluster",
            "wait-ready",
            "--brokers",
            "3",
            "--timeout-ms",
            "60000",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_print_the_json_values_one_word_each() {
    let cluster = Cluster::start(2, "").await;
    checks::create_topic(&cluster, "orders", 2, 2, 1);
    wait_for(
        "orders-1 to have an ISR of 2",
        Duration::from_secs(30),
        || async {
            cluster
                .partition(1, "orders", 1)
                .await
                .is_ok_and(|p| p.isr.len() == 2)
        },
    )
    .await;

    let out = cluster.cli(&["topic", "describe", "orders", "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: Value = serde_json::from_str(&stdout(&out)).expect("describe --json is JSON");
    let p1 = &json["partitions"][1];
    let list = |v: &Value| {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let out = cluster.cli(
        &[
            "topic",
            "describe",
            "orders",
            "--partition",
            "1",
            "--field",
            "leader",
            "--field",
            "leader_epoch",
            "--field",
            "replicas",
            "--field",
            "isr",
            "--field",
            "high_watermark",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "{} {} {} {} {}\n",
            p1["leader"],
            p1["leader_epoch"],
            list(&p1["replicas"]),
            list(&p1["isr"]),
            p1["high_watermark"]
        )
    );

    // Bad input names the problem and the choices.
    let out = cluster.cli(
        &[
            "topic",
            "describe",
            "orders",
            "--partition",
            "7",
            "--field",
            "leader",
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("topic orders has no partition 7 (it has partitions 0 to 1)"),
        "{}",
        stderr(&out)
    );
    let out = cluster.cli(
        &[
            "topic",
            "describe",
            "orders",
            "--partition",
            "0",
            "--field",
            "leedr",
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("has no field \"leedr\": choose one of"),
        "{}",
        stderr(&out)
    );

    let out = cluster.cli(&["cluster", "describe", "--field", "controller_id"], None);
    assert_eq!(stdout(&out), "1\n", "{}", stderr(&out));
    let out = cluster.cli(
        &[
            "cluster", "describe", "--broker", "2", "--field", "status", "--field", "endpoint",
        ],
        None,
    );
    assert_eq!(
        stdout(&out),
        format!("alive {}\n", cluster.node(2).addr()),
        "{}",
        stderr(&out)
    );
    let out = cluster.cli(
        &["cluster", "describe", "--broker", "5", "--field", "status"],
        None,
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no broker 5 is registered (registered: 1,2)"),
        "{}",
        stderr(&out)
    );
}

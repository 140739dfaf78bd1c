//! `syncline cluster wait-ready`: waits until the cluster can serve clients,
//! for scripts that start brokers (scripts/cluster.sh, compose.sh, demo.sh).
//!
//! A broker is ready when the cluster lists it as registered and unfenced, and
//! it answers DescribeCluster and Metadata on its own endpoint, seeing at least
//! as many unfenced brokers as are awaited (each broker answers from its own
//! metadata cache, which can lag the controller's).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use syncline_client::{Admin, ClientConfig, ClientError, ClusterDescription};
use tokio::time::Instant;

use crate::errors::{explain, Ctx};

/// How often the cluster is asked again.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Bound on one question to one broker, so a paused broker cannot hold the wait.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Args)]
pub(crate) struct WaitReadyArgs {
    /// How many brokers must be ready (default: every registered broker, and
    /// at least one).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) brokers: Option<u32>,
    /// Give up after this long (0: ask once).
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub(crate) timeout_ms: u64,
}

/// What one broker answered on its own endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Probe {
    /// DescribeCluster and Metadata answered; the unfenced brokers it knows.
    Answered { unfenced_seen: Vec<i32> },
    /// No answer to DescribeCluster (the reason).
    NoAnswer(String),
    /// DescribeCluster answered, Metadata not (the reason).
    NoMetadata(String),
}

/// Whether the cluster is ready, and if not, whom to blame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// These brokers (ascending) are ready, at least as many as awaited.
    Ready(Vec<i32>),
    /// `broker` is the first one to look at (None: no registered broker is at
    /// fault, e.g. one has not registered at all).
    NotReady { broker: Option<i32>, reason: String },
}

fn ids(ids: &[i32]) -> String {
    if ids.is_empty() {
        "none".into()
    } else {
        ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
    }
}

/// Decides readiness from the cluster's registrations (`view`, as a bootstrap
/// broker answered) and each unfenced broker's own answers (`probes`).
///
/// Blame goes, in order, to: a registered broker that is fenced or does not
/// answer; then nobody, when fewer brokers are registered than awaited (the
/// missing one never registered); then a broker that sees too few unfenced
/// brokers or does not answer Metadata.
pub(crate) fn judge(
    view: &ClusterDescription,
    probes: &BTreeMap<i32, Probe>,
    want: Option<usize>,
) -> Verdict {
    let mut registered: Vec<(i32, bool)> = view
        .brokers
        .iter()
        .map(|b| (b.endpoint.id, b.fenced))
        .collect();
    registered.sort_unstable();
    let want = want.unwrap_or(registered.len()).max(1);

    let mut ready = Vec::new();
    let mut first_down = None;
    let mut first_lagging = None;
    for &(id, fenced) in &registered {
        let probe = probes.get(&id);
        let problem = match (fenced, probe) {
            (true, _) => Some((
                true,
                format!(
                    "broker {id} is registered but fenced (not yet caught up with the \
                     cluster's metadata, or it stopped heartbeating)"
                ),
            )),
            (false, None) => Some((true, format!("broker {id} was not asked"))),
            (false, Some(Probe::NoAnswer(why))) => {
                Some((true, format!("broker {id} does not answer: {why}")))
            }
            (false, Some(Probe::NoMetadata(why))) => Some((
                false,
                format!("broker {id} does not answer Metadata: {why}"),
            )),
            (false, Some(Probe::Answered { unfenced_seen })) if unfenced_seen.len() < want => {
                Some((
                    false,
                    format!(
                        "broker {id} sees unfenced brokers [{}], waiting for {want}",
                        ids(unfenced_seen)
                    ),
                ))
            }
            (false, Some(Probe::Answered { .. })) => None,
        };
        match problem {
            None => ready.push(id),
            Some((true, reason)) => {
                first_down.get_or_insert((id, reason));
            }
            Some((false, reason)) => {
                first_lagging.get_or_insert((id, reason));
            }
        }
    }
    if ready.len() >= want {
        return Verdict::Ready(ready);
    }
    if let Some((id, reason)) = first_down {
        return Verdict::NotReady {
            broker: Some(id),
            reason,
        };
    }
    if registered.len() < want {
        let registered: Vec<i32> = registered.iter().map(|&(id, _)| id).collect();
        return Verdict::NotReady {
            broker: None,
            reason: format!(
                "{} of {want} brokers are registered ([{}]): start the missing one(s), or \
                 look in their logs for why they do not register",
                registered.len(),
                ids(&registered)
            ),
        };
    }
    match first_lagging {
        Some((id, reason)) => Verdict::NotReady {
            broker: Some(id),
            reason,
        },
        // Unreachable: fewer ready than awaited means one of the above holds.
        None => Verdict::NotReady {
            broker: None,
            reason: format!("only brokers [{}] are ready", ids(&ready)),
        },
    }
}

fn config(bootstrap: &str, timeout: Duration) -> ClientConfig {
    let ms = (timeout.as_millis() as u64).max(1);
    let mut config = crate::security::client_config(bootstrap);
    config.request_timeout_ms = ms;
    config.connect_timeout_ms = ms;
    config
}

/// Asks broker `address` for its view of the cluster, then for Metadata.
async fn probe(address: &str) -> Probe {
    let ctx = Ctx {
        bootstrap: address,
        topic: None,
    };
    // The generic timeout message speaks of "the cluster"; this is one broker.
    let why = |e: &ClientError| match e {
        ClientError::Timeout(_) => silent(address),
        other => explain(other, ctx),
    };
    let asked = async {
        let admin =
            Admin::new(config(address, PROBE_TIMEOUT)).map_err(|e| Probe::NoAnswer(why(&e)))?;
        let view = admin
            .describe_cluster()
            .await
            .map_err(|e| Probe::NoAnswer(why(&e)))?;
        admin
            .list_topics()
            .await
            .map_err(|e| Probe::NoMetadata(why(&e)))?;
        let mut unfenced_seen: Vec<i32> = view
            .brokers
            .iter()
            .filter(|b| !b.fenced)
            .map(|b| b.endpoint.id)
            .collect();
        unfenced_seen.sort_unstable();
        Ok(Probe::Answered { unfenced_seen })
    };
    match tokio::time::timeout(PROBE_TIMEOUT, asked).await {
        Ok(Ok(p) | Err(p)) => p,
        Err(_) => Probe::NoAnswer(silent(address)),
    }
}

fn silent(address: &str) -> String {
    format!(
        "no answer from {address} within {} ms (is it paused or overloaded?)",
        PROBE_TIMEOUT.as_millis()
    )
}

/// One look at the cluster.
async fn check(bootstrap: &str, want: Option<usize>) -> Verdict {
    let ctx = Ctx {
        bootstrap,
        topic: None,
    };
    let view = match Admin::new(config(bootstrap, PROBE_TIMEOUT)) {
        Ok(admin) => tokio::time::timeout(PROBE_TIMEOUT, admin.describe_cluster()).await,
        Err(e) => Ok(Err(e)),
    };
    let view = match view {
        Ok(Ok(view)) => view,
        Ok(Err(e)) => {
            return Verdict::NotReady {
                broker: None,
                reason: explain(&e, ctx),
            }
        }
        Err(_) => {
            return Verdict::NotReady {
                broker: None,
                reason: format!(
                    "no answer from {bootstrap} within {} ms",
                    PROBE_TIMEOUT.as_millis()
                ),
            }
        }
    };
    let asked = view
        .brokers
        .iter()
        .filter(|b| !b.fenced)
        .map(|b| async { (b.endpoint.id, probe(&b.endpoint.address()).await) });
    let probes: BTreeMap<i32, Probe> = futures::future::join_all(asked).await.into_iter().collect();
    judge(&view, &probes, want)
}

/// Waits; on success prints the ready brokers. On failure prints the id of the
/// broker to look at on stdout (for scripts: nothing when no registered broker
/// is at fault), and returns the reason.
pub(crate) async fn run(args: WaitReadyArgs, bootstrap: &str) -> Result<()> {
    let want = args.brokers.map(|n| n as usize);
    let timeout = Duration::from_millis(args.timeout_ms);
    let deadline = Instant::now() + timeout;
    loop {
        match check(bootstrap, want).await {
            Verdict::Ready(ready) => {
                println!(
                    "ready: brokers {} are registered, unfenced and answer Metadata",
                    ids(&ready)
                );
                return Ok(());
            }
            Verdict::NotReady { broker, reason } if Instant::now() >= deadline => {
                let mut message = format!("not ready after {} ms: {reason}", args.timeout_ms);
                if let Some(id) = broker {
                    println!("{id}");
                    let _ = write!(message, "; look at broker {id}'s log");
                }
                message.push_str("; raise --timeout-ms if the machine is just slow");
                anyhow::bail!(message);
            }
            Verdict::NotReady { .. } => tokio::time::sleep(POLL_INTERVAL).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncline_client::{BrokerDescription, BrokerEndpoint};

    fn view(brokers: &[(i32, bool)]) -> ClusterDescription {
        ClusterDescription {
            cluster_id: "c".into(),
            controller_id: Some(1),
            brokers: brokers
                .iter()
                .map(|&(id, fenced)| BrokerDescription {
                    endpoint: BrokerEndpoint {
                        id,
                        host: "127.0.0.1".into(),
                        port: 9091 + id,
                        rack: None,
                    },
                    broker_epoch: 1,
                    fenced,
                    metrics_address: None,
                    load: None,
                })
                .collect(),
        }
    }

    fn sees(ids: &[i32]) -> Probe {
        Probe::Answered {
            unfenced_seen: ids.to_vec(),
        }
    }

    fn probes(p: &[(i32, Probe)]) -> BTreeMap<i32, Probe> {
        p.iter().cloned().collect()
    }

    #[test]
    fn ready_once_every_awaited_broker_answers_and_sees_them_all() {
        let all = probes(&[
            (1, sees(&[1, 2, 3])),
            (2, sees(&[1, 2, 3])),
            (3, sees(&[1, 2, 3])),
        ]);
        let v = view(&[(3, false), (1, false), (2, false)]);
        assert_eq!(judge(&v, &all, Some(3)), Verdict::Ready(vec![1, 2, 3]));
        // Without --brokers: every registered broker.
        assert_eq!(judge(&v, &all, None), Verdict::Ready(vec![1, 2, 3]));
        // A fenced fourth broker does not hold up a wait for three.
        let v4 = view(&[(1, false), (2, false), (3, false), (4, true)]);
        assert_eq!(judge(&v4, &all, Some(3)), Verdict::Ready(vec![1, 2, 3]));
        assert!(matches!(
            judge(&v4, &all, None),
            Verdict::NotReady {
                broker: Some(4),
                ..
            }
        ));
    }

    #[test]
    fn a_fenced_or_silent_broker_is_named() {
        let v = view(&[(1, false), (2, true), (3, false)]);
        let p = probes(&[(1, sees(&[1, 3])), (3, sees(&[1, 3]))]);
        let Verdict::NotReady { broker, reason } = judge(&v, &p, Some(3)) else {
            panic!()
        };
        assert_eq!(broker, Some(2));
        assert!(
            reason.starts_with("broker 2 is registered but fenced"),
            "{reason}"
        );

        let v = view(&[(1, false), (2, false), (3, false)]);
        let p = probes(&[
            (1, sees(&[1, 2])),
            (2, sees(&[1, 2, 3])),
            (3, Probe::NoAnswer("cannot reach 127.0.0.1:9094".into())),
        ]);
        // The silent broker, not broker 1 whose view merely lags.
        assert_eq!(
            judge(&v, &p, Some(3)),
            Verdict::NotReady {
                broker: Some(3),
                reason: "broker 3 does not answer: cannot reach 127.0.0.1:9094".into()
            }
        );
    }

    #[test]
    fn a_broker_that_never_registered_is_reported_without_blaming_another() {
        let v = view(&[(1, false), (3, false)]);
        let p = probes(&[(1, sees(&[1, 3])), (3, sees(&[1, 3]))]);
        let Verdict::NotReady { broker, reason } = judge(&v, &p, Some(3)) else {
            panic!()
        };
        assert_eq!(broker, None);
        assert!(
            reason.starts_with("2 of 3 brokers are registered ([1,3])"),
            "{reason}"
        );
        // No broker at all: still waiting for one.
        assert!(matches!(
            judge(&view(&[]), &BTreeMap::new(), None),
            Verdict::NotReady { broker: None, .. }
        ));
    }

    #[test]
    fn lagging_views_and_missing_metadata_are_named() {
        let v = view(&[(1, false), (2, false)]);
        let p = probes(&[(1, sees(&[1, 2])), (2, sees(&[2]))]);
        assert_eq!(
            judge(&v, &p, None),
            Verdict::NotReady {
                broker: Some(2),
                reason: "broker 2 sees unfenced brokers [2], waiting for 2".into()
            }
        );
        let p = probes(&[
            (1, Probe::NoMetadata("timed out".into())),
            (2, sees(&[1, 2])),
        ]);
        assert_eq!(
            judge(&v, &p, None),
            Verdict::NotReady {
                broker: Some(1),
                reason: "broker 1 does not answer Metadata: timed out".into()
            }
        );
        // One ready broker is enough when one is awaited.
        assert_eq!(judge(&v, &p, Some(1)), Verdict::Ready(vec![2]));
    }

    #[test]
    fn arguments_and_defaults() {
        use crate::args::{Cli, ClusterCommand, Command};
        use clap::Parser;
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("syncline").chain(args.iter().copied()))
        };
        let Command::Cluster(ClusterCommand::WaitReady(a)) =
            parse(&["cluster", "wait-ready"]).unwrap().command
        else {
            panic!()
        };
        assert_eq!((a.brokers, a.timeout_ms), (None, 60_000));
        let Command::Cluster(ClusterCommand::WaitReady(a)) = parse(&[
            "cluster",
            "wait-ready",
            "--brokers",
            "3",
            "--timeout-ms",
            "0",
        ])
        .unwrap()
        .command
        else {
            panic!()
        };
        assert_eq!((a.brokers, a.timeout_ms), (Some(3), 0));
        let err = parse(&["cluster", "wait-ready", "--brokers", "0"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("0 is not in 1.."), "{err}");
    }

    #[tokio::test]
    async fn nothing_listening_is_reported_with_the_address_and_no_broker_id() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let Verdict::NotReady { broker, reason } = check(&address, Some(1)).await else {
            panic!()
        };
        assert_eq!(broker, None);
        assert!(
            reason.starts_with(&format!("cannot reach {address}")),
            "{reason}"
        );
    }
}

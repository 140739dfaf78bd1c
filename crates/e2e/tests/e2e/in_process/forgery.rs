//! A client that forges the cluster's internal requests — a follower's fetch, a
//! controller's LeaderAndIsr, a leader's AlterPartition, a broker's registration
//! or heartbeat, each with real ids and broker epochs (DescribeCluster makes them
//! public), a controller voter's Raft heartbeat sent as another voter — is refused with CLUSTER_AUTHORIZATION_FAILED and changes nothing.
//! Each forgery is also run with broker authentication switched off (a switch
//! only tests can reach), where it must take effect: so these tests can fail.

use std::sync::Arc;
use std::time::Duration;

use syncline_client::Connection;
use syncline_e2e::faults::Faults;
use syncline_e2e::inprocess::{batch, produce_request, Options, TestCluster};
use syncline_e2e::wait_for;
use syncline_proto::pb::{self, request::Body, response::Body as Resp};
use syncline_proto::ErrorCode;

const TOPIC: &str = "t";
const WAIT: Duration = Duration::from_secs(15);
/// Long enough that no ISR shrinks (and no session expires) during a test on its
/// own: every change the tests see comes from the forgery.
const QUIET: &str = "replica_lag_time_max_ms = 60000\nbroker_session_timeout_ms = 60000\nbroker_heartbeat_interval_ms = 500\n";

async fn start(authenticated: bool, faults: Option<Arc<Faults>>) -> TestCluster {
    let cluster = TestCluster::start_with(
        3,
        QUIET,
        Options {
            faults,
            unauthenticated_internal_apis: !authenticated,
            ..Options::default()
        },
    )
    .await;
    cluster
        .create_topic(TOPIC, 1, 3, &[("min.insync.replicas", "2")])
        .await;
    // (A new partition's ISR is its replica set from the start: wait until every
    // broker has applied its state, so the replicas exist.)
    wait_for("every replica, and its leader", WAIT, || async {
        (1..=3).all(|id| cluster.try_replica(id, TOPIC, 0).is_some())
            && (1..=3).any(|id| {
                cluster
                    .try_replica(id, TOPIC, 0)
                    .is_some_and(|r| r.is_leader())
            })
            && cluster.partition_metadata(1, TOPIC, 0).await.isr.len() == 3
    })
    .await;
    cluster
}

async fn describe(conn: &Connection) -> pb::DescribeClusterResponse {
    match conn
        .send(Body::DescribeCluster(pb::DescribeClusterRequest {}))
        .await
        .unwrap()
    {
        Resp::DescribeCluster(r) => r,
        other => panic!("unexpected {other:?}"),
    }
}

async fn broker_info(cluster: &TestCluster, id: i32) -> pb::BrokerInfo {
    let r = describe(&cluster.connect(1).await).await;
    r.brokers
        .into_iter()
        .find(|b| b.endpoint.as_ref().is_some_and(|e| e.node_id == id))
        .expect("registered")
}

/// Sends a forged request on a plain client connection: Ok(response) if the
/// broker served it, Err if it refused with CLUSTER_AUTHORIZATION_FAILED.
async fn forge(conn: &Connection, body: Body) -> Result<Resp, String> {
    match conn.send_any(body).await.unwrap() {
        Resp::Error(e) => {
            assert_eq!(
                ErrorCode::from_wire(e.error_code),
                ErrorCode::ClusterAuthorizationFailed,
                "{e:?}"
            );
            Err(e.error_message)
        }
        other => Ok(other),
    }
}

fn others(leader: i32) -> Vec<i32> {
    (1..=3).filter(|b| *b != leader).collect()
}

/// Both followers are cut off; records written with acks=1 stay above the high
/// watermark. Forged follower fetches at the leader's log end, with the
/// followers' real ids and broker epochs, then claim the records replicated.
async fn forged_follower_fetch(authenticated: bool) {
    let faults = Faults::new();
    let cluster = start(authenticated, Some(faults.clone())).await;
    let leader = cluster.leader_in_role(TOPIC, 0).await;
    for f in others(leader) {
        faults.cut(leader, f);
    }
    let conn = cluster.connect(leader).await;
    match conn
        .send(produce_request(TOPIC, 0, 1, batch(&[b"a", b"b", b"c"])))
        .await
        .unwrap()
    {
        Resp::Produce(r) => assert_eq!(r.topics[0].partitions[0].error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    let replica = cluster.replica(leader, TOPIC, 0);
    let (hw, leo, epoch) = (
        replica.high_watermark(),
        replica.log_end_offset(),
        replica.leader_epoch(),
    );
    assert!(hw < leo, "nothing replicated yet: hw {hw} < leo {leo}");
    let brokers = describe(&conn).await;
    let mut refusals = Vec::new();
    for f in others(leader) {
        let broker_epoch = brokers
            .brokers
            .iter()
            .find(|b| b.endpoint.as_ref().unwrap().node_id == f)
            .unwrap()
            .broker_epoch;
        let fetch = Body::Fetch(pb::FetchRequest {
            replica_id: f,
            replica_epoch: broker_epoch,
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: 1 << 20,
            session_id: 0,
            session_epoch: -1,
            topics: vec![pb::FetchTopic {
                topic: TOPIC.into(),
                partitions: vec![pb::FetchPartition {
                    partition: 0,
                    current_leader_epoch: Some(epoch),
                    fetch_offset: leo,
                    last_fetched_epoch: Some(epoch),
                    partition_max_bytes: 1 << 20,
                    ..Default::default()
                }],
            }],
            ..Default::default()
        });
        if let Err(e) = forge(&conn, fetch).await {
            refusals.push(e);
        }
    }
    if authenticated {
        assert_eq!(refusals.len(), 2, "both forged fetches refused");
        assert!(
            refusals[0].contains("authenticated as broker"),
            "{refusals:?}"
        );
        assert_eq!(
            replica.high_watermark(),
            hw,
            "the high watermark did not move"
        );
    } else {
        assert!(refusals.is_empty());
        wait_for(
            "the forged fetches to move the high watermark",
            WAIT,
            || async { replica.high_watermark() == leo },
        )
        .await;
    }
    faults.heal_all();
}

/// A fetch session belongs to the principal that opened it. With internal
/// APIs unauthenticated (so that nothing else stands in the way), a client
/// that names a follower's session, with the follower's replica id, is told
/// FETCH_SESSION_ID_NOT_FOUND, as for an unknown id; and its closes (epoch
/// -1), as the follower or as a consumer, leave the session open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_authentication_a_client_still_cannot_use_or_close_a_followers_session() {
    let cluster = start(false, None).await;
    let leader = cluster.leader_in_role(TOPIC, 0).await;
    let rm = cluster.broker(leader).broker().replica_manager();
    let conn = cluster.connect(leader).await;
    // An acks=all write: both followers fetch in their sessions by now.
    match conn
        .send(produce_request(TOPIC, 0, -1, batch(&[b"a"])))
        .await
        .unwrap()
    {
        Resp::Produce(r) => assert_eq!(r.topics[0].partitions[0].error_code, 0),
        other => panic!("unexpected {other:?}"),
    }
    wait_for("both followers' fetch sessions", WAIT, || async {
        rm.fetch_session_count() == 2
    })
    .await;
    let mut sessions = rm.fetch_session_ids();
    sessions.sort();
    let fetch = |replica_id, session_id, session_epoch| {
        Body::Fetch(pb::FetchRequest {
            replica_id,
            replica_epoch: -1,
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: 1 << 20,
            session_id,
            session_epoch,
            ..Default::default()
        })
    };
    for &id in &sessions {
        for f in others(leader) {
            for epoch in [1, 2, 3] {
                match forge(&conn, fetch(f, id, epoch)).await {
                    Ok(Resp::Fetch(r)) => assert_eq!(
                        ErrorCode::from_wire(r.error_code),
                        ErrorCode::FetchSessionIdNotFound,
                        "session {id} as follower {f}, epoch {epoch}: {r:?}"
                    ),
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    }
    for &id in &sessions {
        for replica_id in [-1, others(leader)[0], others(leader)[1]] {
            match forge(&conn, fetch(replica_id, id, -1)).await {
                Ok(Resp::Fetch(r)) => assert_eq!(r.error_code, 0, "{r:?}"),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    let mut after = rm.fetch_session_ids();
    after.sort();
    assert_eq!(after, sessions, "the followers' sessions are still open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_follower_fetch_does_not_move_the_high_watermark() {
    forged_follower_fetch(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_authentication_a_forged_follower_fetch_would_move_the_high_watermark() {
    forged_follower_fetch(false).await;
}

/// A LeaderAndIsr "from the controller" with the highest controller epoch,
/// making a follower leader of the partition at a higher leader epoch.
async fn forged_leader_and_isr(authenticated: bool) {
    let cluster = start(authenticated, None).await;
    let meta = cluster.partition_metadata(1, TOPIC, 0).await;
    let target = others(meta.leader_id)[0];
    let replica = cluster.replica(target, TOPIC, 0);
    let epoch = replica.leader_epoch();
    let broker_epoch = broker_info(&cluster, target).await.broker_epoch;
    let topic_id = syncline_broker::partition::read_topic_id(&cluster.log_dir(target).join("t-0"))
        .expect("the replica's topic id");
    let forged = Body::LeaderAndIsr(pb::LeaderAndIsrRequest {
        controller_id: 1,
        controller_epoch: i32::MAX,
        broker_epoch,
        metadata_offset: i64::MAX / 2,
        full: false,
        partition_states: vec![pb::PartitionState {
            topic: TOPIC.into(),
            partition: 0,
            leader: target,
            leader_epoch: epoch + 10,
            isr: vec![target],
            partition_epoch: 1000,
            replicas: vec![1, 2, 3],
            topic_id,
            ..Default::default()
        }],
        ..Default::default()
    });
    let conn = cluster.connect(target).await;
    let answer = forge(&conn, forged).await;
    if authenticated {
        assert!(answer.is_err(), "refused: {answer:?}");
        assert!(!replica.is_leader(), "still a follower");
        assert_eq!(
            replica.leader_epoch(),
            epoch,
            "its leader epoch is the controller's"
        );
    } else {
        assert!(answer.is_ok(), "{answer:?}");
        wait_for("the forged announcement to take effect", WAIT, || async {
            replica.is_leader() && replica.leader_epoch() == epoch + 10
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_leader_and_isr_changes_no_leader() {
    forged_leader_and_isr(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_authentication_a_forged_leader_and_isr_would_make_a_leader() {
    forged_leader_and_isr(false).await;
}

/// An AlterPartition "from the leader" shrinking the ISR to the leader alone.
async fn forged_alter_partition(authenticated: bool) {
    let cluster = start(authenticated, None).await;
    let meta = cluster.partition_metadata(1, TOPIC, 0).await;
    let leader = meta.leader_id;
    let replica = cluster.replica(leader, TOPIC, 0);
    let info = broker_info(&cluster, leader).await;
    // The partition epoch as the leader has applied it.
    let leaders_partition_epoch = || async {
        match cluster
            .connect(leader)
            .await
            .send(Body::DescribeTopics(pb::DescribeTopicsRequest {
                topics: vec![TOPIC.into()],
            }))
            .await
            .unwrap()
        {
            Resp::DescribeTopics(r) => r.topics[0].partitions[0].partition_epoch,
            other => panic!("unexpected {other:?}"),
        }
    };
    let partition_epoch = leaders_partition_epoch().await;
    let forged = Body::AlterPartition(pb::AlterPartitionRequest {
        broker_id: leader,
        broker_epoch: info.broker_epoch,
        topics: vec![pb::AlterPartitionTopic {
            name: TOPIC.into(),
            partitions: vec![pb::AlterPartitionPartition {
                partition: 0,
                leader_epoch: replica.leader_epoch(),
                new_isr_with_epochs: vec![pb::BrokerState {
                    broker_id: leader,
                    broker_epoch: info.broker_epoch,
                }],
                partition_epoch,
            }],
        }],
    });
    // Broker 1 hosts the controller.
    let answer = forge(&cluster.connect(1).await, forged).await;
    if authenticated {
        assert!(answer.is_err(), "refused: {answer:?}");
        assert_eq!(cluster.partition_metadata(1, TOPIC, 0).await.isr.len(), 3);
    } else {
        // The controller commits the forged ISR of the leader alone...
        let Ok(Resp::AlterPartition(r)) = answer else {
            panic!("{answer:?}")
        };
        let committed = &r.topics[0].partitions[0];
        assert_eq!(
            (committed.error_code, committed.isr.clone()),
            (0, vec![leader]),
            "{r:?}"
        );
        assert!(committed.partition_epoch > partition_epoch, "{r:?}");
        // ...and the leader applies it. (Its followers being caught up, it may
        // expand the ISR back at once: the ISR of one lasts only until then.)
        wait_for("the leader to apply the forged shrink", WAIT, || async {
            leaders_partition_epoch().await >= committed.partition_epoch
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_alter_partition_does_not_shrink_the_isr() {
    forged_alter_partition(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_authentication_a_forged_alter_partition_would_shrink_the_isr() {
    forged_alter_partition(false).await;
}

/// A registration of broker 3 under a new incarnation with another endpoint,
/// and a heartbeat of broker 2 asking to be fenced.
async fn forged_registration_and_heartbeat(authenticated: bool) {
    let cluster = start(authenticated, None).await;
    let conn = cluster.connect(1).await;
    let (two, three) = (
        broker_info(&cluster, 2).await,
        broker_info(&cluster, 3).await,
    );
    let registration = Body::BrokerRegistration(pb::BrokerRegistrationRequest {
        broker_id: 3,
        cluster_id: describe(&conn).await.cluster_id,
        incarnation_id: bytes::Bytes::from_static(b"forged-incarnation"),
        endpoint: Some(pb::BrokerEndpoint {
            node_id: 3,
            host: "forged.invalid".into(),
            port: 1,
            rack: String::new(),
        }),
        ..Default::default()
    });
    let heartbeat = Body::BrokerHeartbeat(pb::BrokerHeartbeatRequest {
        broker_id: 2,
        broker_epoch: two.broker_epoch,
        current_metadata_offset: i64::MAX / 2,
        want_fence: true,
        want_shutdown: false,
    });
    let registered = forge(&conn, registration).await;
    let beat = forge(&conn, heartbeat).await;
    if authenticated {
        assert!(
            registered.is_err() && beat.is_err(),
            "{registered:?} {beat:?}"
        );
        let (two_after, three_after) = (
            broker_info(&cluster, 2).await,
            broker_info(&cluster, 3).await,
        );
        assert_eq!(three_after, three, "broker 3's registration is untouched");
        assert_eq!(two_after.broker_epoch, two.broker_epoch);
        assert!(!two_after.fenced, "broker 2 is not fenced");
    } else {
        match beat {
            Ok(Resp::BrokerHeartbeat(r)) => assert!(r.is_fenced, "{r:?}"),
            other => panic!("heartbeat served: {other:?}"),
        }
        match registered {
            Ok(Resp::BrokerRegistration(r)) => {
                assert_eq!(r.error_code, 0, "{r:?}");
                assert_ne!(r.broker_epoch, three.broker_epoch, "a new incarnation");
            }
            other => panic!("registration served: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_registrations_and_heartbeats_fence_nobody_and_move_no_endpoint() {
    forged_registration_and_heartbeat(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_authentication_forged_registrations_and_heartbeats_would_fence_brokers() {
    forged_registration_and_heartbeat(false).await;
}

/// A connection authenticated as one broker cannot speak for another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_cannot_speak_for_another() {
    let cluster = start(true, None).await;
    let two = broker_info(&cluster, 2).await;
    let conn = syncline_e2e::connect_as_broker(&cluster.addrs[0], &cluster.credentials_dir(), 3)
        .await
        .unwrap();
    let heartbeat = Body::BrokerHeartbeat(pb::BrokerHeartbeatRequest {
        broker_id: 2,
        broker_epoch: two.broker_epoch,
        current_metadata_offset: i64::MAX / 2,
        want_fence: true,
        want_shutdown: false,
    });
    let refused = forge(&conn, heartbeat).await.unwrap_err();
    assert!(refused.contains("not broker 3"), "{refused}");
    assert!(!broker_info(&cluster, 2).await.fenced);
    // Its own heartbeat, on the same connection, is served.
    let three = broker_info(&cluster, 3).await;
    let own = Body::BrokerHeartbeat(pb::BrokerHeartbeatRequest {
        broker_id: 3,
        broker_epoch: three.broker_epoch,
        current_metadata_offset: 0,
        want_fence: false,
        want_shutdown: false,
    });
    assert!(matches!(
        forge(&conn, own).await,
        Ok(Resp::BrokerHeartbeat(_))
    ));
}

/// The controller quorum's leader and term, as DescribeQuorum reports them.
async fn quorum_leader(cluster: &TestCluster) -> (i32, i64) {
    let conn = cluster.connect(1).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let body = Body::DescribeQuorum(pb::DescribeQuorumRequest { forwarded: false });
        match conn.send_any(body).await {
            Ok(Resp::DescribeQuorum(r)) if r.error_code == 0 => {
                return (r.leader_id, r.leader_epoch)
            }
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "no controller quorum leader within {WAIT:?}: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A Raft heartbeat in the active controller's name, 100 terms ahead, sent to a
/// follower voter on a connection authenticated as the third voter. Served, it
/// would make the follower reject the real leader's heartbeats, and push the
/// quorum into the forged term (the leader, seeing a vote of that term, stands
/// for it again).
async fn forged_quorum_heartbeat(authenticated: bool) {
    let cluster = TestCluster::start_with(
        3,
        QUIET,
        Options {
            voters: 3,
            unauthenticated_internal_apis: !authenticated,
            ..Options::default()
        },
    )
    .await;
    let (leader, term) = quorum_leader(&cluster).await;
    let [follower, bystander] = others(leader)[..] else {
        unreachable!("three voters")
    };
    let forged_term = term + 100;
    let payload =
        syncline_controller::raft_heartbeat_request(leader, u64::try_from(forged_term).unwrap())
            .unwrap();
    let conn = syncline_e2e::connect_as_broker(
        &cluster.addrs[follower as usize - 1],
        &cluster.credentials_dir(),
        bystander,
    )
    .await
    .unwrap();
    let forged = forge(&conn, Body::Raft(pb::RaftRequest { payload })).await;
    if authenticated {
        let refused = forged.unwrap_err();
        assert!(
            refused.contains(&format!("as broker {leader} needs"))
                && refused.contains(&format!("not broker {bystander}")),
            "{refused}"
        );
        let (_, now) = quorum_leader(&cluster).await;
        assert!(now < forged_term, "term {now}: the forged term took effect");
    } else {
        match forged {
            Ok(Resp::Raft(r)) => assert_eq!(r.error_code, 0, "{r:?}"),
            other => panic!("the forged heartbeat was not served: {other:?}"),
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (_, now) = quorum_leader(&cluster).await;
            if now >= forged_term {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "term {now} after {WAIT:?}: the quorum never reached the forged term {forged_term}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_cannot_send_controller_quorum_traffic_as_another_voter() {
    forged_quorum_heartbeat(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_authentication_a_forged_quorum_heartbeat_would_move_the_controller_term() {
    forged_quorum_heartbeat(false).await;
}

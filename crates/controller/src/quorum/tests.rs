//! Three voters in one runtime over an in-memory transport that can cut a voter off,
//! on temporary directories; and openraft's storage suite against the stores.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::{ErrorSubject, ErrorVerb, StorageError};
use syncline_proto::pb::{self, metadata_record::Record};

use super::log_store::{LogStore, LOG_FILE};
use super::state_machine::{StateMachine, SNAPSHOT_FILE};
use super::types::TypeConfig;
use super::*;

/// Longer than any election here (timeouts of 1-2 s) even on a loaded machine.
const WAIT: Duration = Duration::from_secs(15);
const PROPOSE: Duration = Duration::from_secs(3);

#[derive(Debug, Default)]
struct Router {
    nodes: Mutex<BTreeMap<i32, Quorum>>,
    cut: Mutex<BTreeSet<i32>>,
}

impl Router {
    fn set_cut(&self, id: i32, cut: bool) {
        let mut set = self.cut.lock().unwrap();
        if cut {
            set.insert(id);
        } else {
            set.remove(&id);
        }
    }
}

/// One voter's end of the router: a cut voter neither sends nor receives.
#[derive(Debug)]
struct Link {
    from: i32,
    router: Arc<Router>,
}

impl QuorumTransport for Link {
    fn call(
        &self,
        target: i32,
        _address: &str,
        request: Bytes,
    ) -> BoxFuture<'static, Result<Bytes, String>> {
        let node = {
            let cut = self.router.cut.lock().unwrap();
            if cut.contains(&self.from) || cut.contains(&target) {
                None
            } else {
                self.router.nodes.lock().unwrap().get(&target).cloned()
            }
        };
        Box::pin(async move {
            match node {
                Some(node) => node.handle_rpc(request).await,
                None => Err(format!("voter {target} unreachable")),
            }
        })
    }
}

struct Cluster {
    router: Arc<Router>,
    _base: tempfile::TempDir,
    dirs: BTreeMap<i32, PathBuf>,
    snapshot_every_entries: u64,
}

impl Cluster {
    async fn start(ids: &[i32], snapshot_every_entries: u64) -> Cluster {
        let base = tempfile::tempdir().unwrap();
        let dirs = ids
            .iter()
            .map(|&id| (id, base.path().join(format!("voter-{id}"))))
            .collect();
        let cl = Cluster {
            router: Arc::default(),
            _base: base,
            dirs,
            snapshot_every_entries,
        };
        for &id in ids {
            cl.start_voter(id).await;
        }
        cl
    }

    async fn start_voter(&self, id: i32) -> Quorum {
        let voters = self
            .dirs
            .keys()
            .map(|&v| (v, format!("voter-{v}:9093")))
            .collect();
        // Election timeouts ten heartbeats long and at least a second: a voter
        // starved of CPU by a loaded machine does not call a needless election, which
        // would move leadership under a test that needs it to stay.
        let config = QuorumConfig {
            heartbeat_interval_ms: 100,
            election_timeout_min_ms: 1000,
            election_timeout_max_ms: 2000,
            snapshot_every_entries: self.snapshot_every_entries,
            ..QuorumConfig::new(id, voters, self.dirs[&id].clone())
        };
        let link = Arc::new(Link {
            from: id,
            router: Arc::clone(&self.router),
        });
        let q = Quorum::start(config, link).await.expect("starts");
        self.router.nodes.lock().unwrap().insert(id, q.clone());
        q
    }

    async fn stop_voter(&self, id: i32) {
        let q = self.router.nodes.lock().unwrap().remove(&id);
        if let Some(q) = q {
            q.shutdown().await;
        }
    }

    fn nodes(&self) -> Vec<Quorum> {
        self.router
            .nodes
            .lock()
            .unwrap()
            .values()
            .cloned()
            .collect()
    }

    fn node(&self, id: i32) -> Quorum {
        self.router.nodes.lock().unwrap()[&id].clone()
    }

    /// The one leader among the running, uncut voters, once there is one.
    async fn leader(&self) -> Quorum {
        let cut = self.router.cut.lock().unwrap().clone();
        let mut found = None;
        eventually("a leader is elected", || {
            found = self
                .nodes()
                .into_iter()
                .find(|q| q.status().is_leader && !cut.contains(&q.status().node_id));
            found.is_some()
        })
        .await;
        found.unwrap()
    }

    async fn shutdown(&self) {
        for q in self.nodes() {
            q.shutdown().await;
        }
    }
}

/// Polls `cond` every 10 ms until it holds; fails the test after [`WAIT`].
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until `voter` has taken a snapshot and purged the log it covers.
async fn snapshotted_and_purged(voter: &Quorum) {
    eventually("the voter snapshotted and purged", || {
        voter.inner.raft.metrics().borrow_watched().purged.is_some()
    })
    .await;
}

/// `n` records that apply to any image whose controller epoch is below `epoch`.
fn starts(epoch: i32, n: i32) -> Vec<pb::MetadataRecord> {
    (epoch..epoch + n)
        .map(|e| pb::MetadataRecord {
            record: Some(Record::ControllerStart(pb::ControllerStartRecord {
                controller_id: 1,
                controller_epoch: e,
            })),
        })
        .collect()
}

/// Proposes on whoever leads until it commits (leadership may move meanwhile).
async fn propose_somewhere(cl: &Cluster, epoch: i32, n: i32) -> i64 {
    let deadline = Instant::now() + WAIT;
    loop {
        let leader = cl.leader().await;
        match leader.propose(starts(epoch, n), PROPOSE).await {
            Ok(offset) => return offset,
            Err(e) => assert!(Instant::now() < deadline, "no proposal committed: {e}"),
        }
    }
}

/// Proposes one start record on whoever leads until one commits, each attempt with
/// an epoch above `after` and above every earlier attempt's (an attempt that failed
/// may still commit). Returns the epoch that committed.
async fn propose_above(cl: &Cluster, after: i32) -> i32 {
    let deadline = Instant::now() + WAIT;
    let mut epoch = after;
    loop {
        epoch += 1;
        let leader = cl.leader().await;
        match leader.propose(starts(epoch, 1), PROPOSE).await {
            Ok(_) => return epoch,
            Err(e) => assert!(Instant::now() < deadline, "no proposal committed: {e}"),
        }
    }
}

async fn converged(cl: &Cluster, expected: &MetadataImage) {
    for q in cl.nodes() {
        eventually("every voter applied everything", || &q.image() == expected).await;
    }
}

#[tokio::test]
async fn a_leader_is_elected_and_proposals_get_consecutive_offsets_everywhere() {
    let cl = Cluster::start(&[1, 2, 3], 1000).await;
    let leader = cl.leader().await;
    assert_eq!(leader.propose(starts(1, 2), PROPOSE).await.unwrap(), 0);
    assert_eq!(leader.propose(starts(3, 1), PROPOSE).await.unwrap(), 2);
    assert_eq!(leader.propose(starts(4, 3), PROPOSE).await.unwrap(), 3);
    let image = leader.image();
    assert_eq!((image.next_offset(), image.controller_epoch()), (6, 6));
    converged(&cl, &image).await;

    let status = leader.status();
    assert_eq!(status.leader_id, Some(status.node_id));
    assert_eq!(
        status.voters.iter().map(|v| v.id).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    eventually("the leader sees every voter caught up", || {
        leader.status().voters.iter().all(|v| v.lag == 0)
    })
    .await;
    let published = leader.subscribe().borrow().clone();
    assert!(published.is_leader && published.term >= 1);
    cl.shutdown().await;
}

#[tokio::test]
async fn a_follower_refuses_to_propose_and_names_the_leader() {
    let cl = Cluster::start(&[1, 2, 3], 1000).await;
    let leader = cl.leader().await;
    let leader_id = leader.status().node_id;
    let follower = cl
        .nodes()
        .into_iter()
        .find(|q| q.status().node_id != leader_id)
        .unwrap();
    eventually("the follower knows the leader", || {
        follower.status().leader_id == Some(leader_id)
    })
    .await;
    match follower.propose(starts(1, 1), PROPOSE).await {
        Err(ProposeError::NotLeader { leader }) => assert_eq!(leader, Some(leader_id)),
        other => panic!("expected NotLeader, got {other:?}"),
    }
    match follower.barrier(PROPOSE).await {
        Err(ProposeError::NotLeader { leader }) => assert_eq!(leader, Some(leader_id)),
        other => panic!("expected NotLeader, got {other:?}"),
    }
    cl.shutdown().await;
}

#[tokio::test]
async fn a_new_leader_takes_over_and_its_barrier_sees_everything_committed_before() {
    let cl = Cluster::start(&[1, 2, 3], 1000).await;
    let old = cl.leader().await;
    for epoch in 1..=5 {
        old.propose(starts(epoch, 1), PROPOSE).await.unwrap();
    }
    let committed = old.image();
    let old_id = old.status().node_id;
    let stopped = Instant::now();
    cl.stop_voter(old_id).await;
    let new = cl.leader().await;
    assert_ne!(new.status().node_id, old_id);
    assert!(stopped.elapsed() < WAIT);
    new.barrier(PROPOSE).await.unwrap();
    assert_eq!(
        new.image(),
        committed,
        "the barrier returned before the old leader's records applied"
    );
    assert_eq!(new.propose(starts(6, 1), PROPOSE).await.unwrap(), 5);
    cl.shutdown().await;
}

#[tokio::test]
async fn without_a_majority_propose_times_out_and_works_again_after_healing() {
    let cl = Cluster::start(&[1, 2, 3], 1000).await;
    let leader = cl.leader().await;
    leader.propose(starts(1, 1), PROPOSE).await.unwrap();
    let leader_id = leader.status().node_id;
    let others: Vec<i32> = [1, 2, 3].into_iter().filter(|&i| i != leader_id).collect();
    for &id in &others {
        cl.router.set_cut(id, true);
    }
    let timeout = Duration::from_millis(500);
    let started = Instant::now();
    match leader.propose(starts(2, 1), timeout).await {
        Err(e @ ProposeError::Timeout { .. }) => {
            assert!(e.to_string().contains("500 ms"), "{e}");
        }
        Err(ProposeError::NotLeader { .. }) => {} // it may notice the lost quorum first
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < timeout + Duration::from_millis(500));
    for &id in &others {
        cl.router.set_cut(id, false);
    }
    // The timed-out entry may or may not have committed: only order is checked.
    let offset = propose_somewhere(&cl, 10, 1).await;
    assert!(offset >= 1);
    let image = cl.leader().await.image();
    converged(&cl, &image).await;
    cl.shutdown().await;
}

/// A leader whose proposal timed out and that takes office again in the same
/// term decides on an image with that entry in it: the barrier commits behind
/// everything in the leader's log, not only up to the commit index it knew.
///
/// The scenario needs the leadership to stay through a short cut. A loaded
/// machine can starve the voters past an election timeout (it did, once in a run
/// with a fuzz build beside it): then the leadership moves and the case did not
/// happen, so it is set up again on a fresh cluster, up to three times. What is
/// asserted of the barrier holds on every attempt that reaches it.
#[tokio::test]
async fn the_barrier_applies_an_entry_of_the_same_term_whose_proposal_timed_out() {
    for attempt in 1..=3 {
        match same_term_barrier_attempt().await {
            Ok(()) => return,
            Err(moved) => eprintln!("attempt {attempt}: {moved}; setting the case up again"),
        }
    }
    panic!("the leadership moved in three attempts: the case never happened");
}

/// One attempt of the test above: `Err` when the leadership moved (the case did
/// not happen), a panic when the barrier broke its promise.
async fn same_term_barrier_attempt() -> Result<(), String> {
    let cl = Cluster::start(&[1, 2, 3], 1000).await;
    let outcome = same_term_barrier_case(&cl).await;
    cl.shutdown().await;
    outcome
}

async fn same_term_barrier_case(cl: &Cluster) -> Result<(), String> {
    let leader = cl.leader().await;
    leader.propose(starts(1, 1), PROPOSE).await.unwrap();
    let (leader_id, term) = (leader.status().node_id, leader.status().term);
    let others: Vec<i32> = [1, 2, 3].into_iter().filter(|&i| i != leader_id).collect();
    for &id in &others {
        cl.router.set_cut(id, true);
    }
    // Far shorter than an election timeout (1-2 s): the leadership stays.
    match leader
        .propose(starts(2, 1), Duration::from_millis(200))
        .await
    {
        Err(ProposeError::Timeout { .. }) => {}
        Err(ProposeError::NotLeader { .. }) => return Err("the leader stepped down".into()),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert_eq!(
        leader.image().controller_epoch(),
        1,
        "applied without a majority"
    );
    for &id in &others {
        cl.router.set_cut(id, false);
    }
    let barrier = leader.barrier(PROPOSE).await;
    let now = (leader.status().node_id, leader.status().term);
    if !leader.status().is_leader || now.1 != term {
        return Err(format!(
            "the leadership moved (voter {leader_id} in term {term}, now {now:?}; barrier: {barrier:?})"
        ));
    }
    barrier.unwrap();
    assert_eq!(now, (leader_id, term));
    assert_eq!(
        leader.image().controller_epoch(),
        2,
        "the barrier returned before the timed-out entry of its own term applied"
    );
    Ok(())
}

#[tokio::test]
async fn restarting_every_voter_keeps_the_image() {
    let cl = Cluster::start(&[1, 2, 3], 1000).await;
    let leader = cl.leader().await;
    for epoch in 1..=4 {
        leader
            .propose(starts(2 * epoch - 1, 2), PROPOSE)
            .await
            .unwrap();
    }
    let image = leader.image();
    converged(&cl, &image).await;
    for id in [1, 2, 3] {
        cl.stop_voter(id).await;
    }
    for id in [1, 2, 3] {
        cl.start_voter(id).await;
    }
    // The committed index was persisted: each voter re-applies on its own.
    converged(&cl, &image).await;
    let leader = cl.leader().await;
    leader.barrier(PROPOSE).await.unwrap();
    assert_eq!(leader.image(), image);
    assert_eq!(leader.propose(starts(20, 1), PROPOSE).await.unwrap(), 8);
    cl.shutdown().await;
}

#[tokio::test]
async fn a_voter_that_lost_its_disk_catches_up_from_a_snapshot() {
    let cl = Cluster::start(&[1, 2, 3], 3).await;
    let leader = cl.leader().await;
    let leader_id = leader.status().node_id;
    let lost = [1, 2, 3].into_iter().find(|&i| i != leader_id).unwrap();
    cl.stop_voter(lost).await;
    std::fs::remove_dir_all(&cl.dirs[&lost]).unwrap();
    // A loaded machine may move leadership between the two voters left.
    let mut epoch = 0;
    for _ in 0..10 {
        epoch = propose_above(&cl, epoch).await;
    }
    let leader = cl.leader().await;
    snapshotted_and_purged(&leader).await;
    let image = leader.image();
    let back = cl.start_voter(lost).await;
    eventually("the wiped voter caught up", || back.image() == image).await;
    assert!(cl.dirs[&lost].join(SNAPSHOT_FILE).exists());
    cl.shutdown().await;
}

/// The quorum's directory, log, vote and snapshots hold the users' SCRAM
/// verifiers: only the broker's own user may read them, whatever the umask.
#[tokio::test]
async fn what_a_quorum_writes_only_its_owner_may_read() {
    use std::os::unix::fs::PermissionsExt as _;
    let cl = Cluster::start(&[1], 3).await;
    let leader = cl.leader().await;
    let mut epoch = 0;
    for _ in 0..6 {
        epoch = propose_above(&cl, epoch).await;
    }
    snapshotted_and_purged(&leader).await;
    cl.shutdown().await;
    let dir = &cl.dirs[&1];
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let modes = || {
        let mut found: Vec<(String, String)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                (name, format!("{:o}", mode(&e.path())))
            })
            .collect();
        found.sort();
        found
    };
    let found = modes();
    let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
    for file in [LOG_FILE, SNAPSHOT_FILE, log_store::STATE_FILE] {
        assert!(names.contains(&file), "{file} written: {names:?}");
    }
    assert_eq!(format!("{:o}", mode(dir)), "700", "the quorum directory");
    for (name, m) in &found {
        assert_eq!(m, "600", "{name}");
    }

    // What an older version left readable by all is narrowed at start.
    let widen = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    widen(dir, 0o755);
    for (name, _) in &found {
        widen(&dir.join(name), 0o644);
    }
    cl.start_voter(1).await;
    cl.shutdown().await;
    assert_eq!(format!("{:o}", mode(dir)), "700", "the quorum directory");
    for (name, m) in modes() {
        assert_eq!(m, "600", "{name}, after a start");
    }
}

#[tokio::test]
async fn a_torn_log_tail_is_cut_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let voters = BTreeMap::from([(1, "self:9093".to_owned())]);
    let config = QuorumConfig {
        heartbeat_interval_ms: 50,
        election_timeout_min_ms: 300,
        election_timeout_max_ms: 600,
        ..QuorumConfig::new(1, voters, dir.path())
    };
    let router = Arc::new(Router::default());
    let link = || {
        Arc::new(Link {
            from: 1,
            router: Arc::clone(&router),
        })
    };
    let q = Quorum::start(config.clone(), link()).await.unwrap();
    eventually("the single voter leads", || q.status().is_leader).await;
    q.propose(starts(1, 3), PROPOSE).await.unwrap();
    let image = q.image();
    q.shutdown().await;

    let path = dir.path().join(LOG_FILE);
    let len = std::fs::metadata(&path).unwrap().len();
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(&[0, 0, 0, 40, 1, 2, 3, 4, 5]).unwrap(); // a frame header and half a payload
    drop(file);

    let q = Quorum::start(config, link()).await.unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        len,
        "the torn tail was cut"
    );
    eventually("the committed entries re-applied", || q.image() == image).await;
    eventually("the single voter leads", || q.status().is_leader).await;
    assert_eq!(q.propose(starts(10, 1), PROPOSE).await.unwrap(), 3);
    q.shutdown().await;
}

#[tokio::test]
async fn handle_rpc_refuses_garbage() {
    let cl = Cluster::start(&[1], 1000).await;
    let q = cl.node(1);
    assert!(q.handle_rpc(Bytes::new()).await.is_err());
    assert!(q
        .handle_rpc(Bytes::from_static(b"\xff\xff\xff\xff"))
        .await
        .is_err());
    // A cheap deterministic byte soup: none of it may panic.
    let mut x: u32 = 0x9e37_79b9;
    for len in 0..300 {
        let bytes: Vec<u8> = (0..len % 40)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x & 0xff) as u8
            })
            .collect();
        let _ = q.handle_rpc(Bytes::from(bytes)).await;
    }
    cl.shutdown().await;
}

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<TypeConfig>> {
        let read = |e| StorageError::from_io_error(ErrorSubject::Store, ErrorVerb::Read, e);
        let dir = tempfile::tempdir().map_err(read)?;
        let log = LogStore::open(dir.path()).map_err(read)?;
        let sm = StateMachine::open(dir.path()).map_err(read)?;
        Ok((dir, log, sm))
    }
}

#[tokio::test]
async fn openraft_storage_suite() {
    Suite::test_all(Builder).await.unwrap();
}

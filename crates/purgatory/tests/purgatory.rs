//! Delayed operations: completion by event, expiry, cancel, their races, and
//! the purge that keeps watcher lists bounded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, OnceLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use syncline_purgatory::{
    Completion, DelayedOperation, OpHandle, Purgatory, PurgatoryConfig, Watched,
};
use tokio::sync::Notify;
use tokio::time::Instant;

/// An operation that completes once `ready` is set, recording every call.
#[derive(Default)]
struct Probe {
    ready: AtomicBool,
    /// Makes the first `tries_before_ready` calls to try_complete fail
    /// whatever `ready` says (to stage an event between two tries).
    ready_after_tries: Option<usize>,
    tries: AtomicUsize,
    in_try: AtomicBool,
    completions: Mutex<Vec<(Completion, Instant)>>,
    completed: Notify,
}

impl Probe {
    fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn open(&self) {
        self.ready.store(true, Ordering::Release);
    }

    fn completions(&self) -> Vec<Completion> {
        self.completions
            .lock()
            .iter()
            .map(|&(how, _)| how)
            .collect()
    }

    /// Waits for the (first) completion; paused time advances meanwhile.
    async fn completion(&self) -> (Completion, Instant) {
        loop {
            if let Some(&first) = self.completions.lock().first() {
                return first;
            }
            self.completed.notified().await;
        }
    }
}

impl DelayedOperation for Probe {
    fn try_complete(&self) -> bool {
        assert!(
            !self.in_try.swap(true, Ordering::AcqRel),
            "try_complete ran concurrently for one operation"
        );
        assert!(
            self.completions.lock().is_empty(),
            "try_complete after completion"
        );
        let tries = self.tries.fetch_add(1, Ordering::Relaxed) + 1;
        let ready = match self.ready_after_tries {
            Some(n) => tries > n,
            None => self.ready.load(Ordering::Acquire),
        };
        self.in_try.store(false, Ordering::Release);
        ready
    }

    fn on_complete(&self, how: Completion) {
        self.completions.lock().push((how, Instant::now()));
        self.completed.notify_one();
    }
}

type Probes = Purgatory<u32, Arc<Probe>>;

fn waiting(watched: Watched<Arc<Probe>>) -> OpHandle<Arc<Probe>> {
    match watched {
        Watched::Waiting(handle) => handle,
        Watched::Completed(how) => panic!("completed at once: {how:?}"),
    }
}

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn expires_at_the_deadline() {
    let purgatory = Probes::new("expiry");
    let probe = Probe::new();
    let start = Instant::now();
    let handle = waiting(purgatory.try_complete_else_watch(probe.clone(), SECOND / 2, &[1]));
    assert_eq!((purgatory.delayed(), purgatory.watched()), (1, 1));

    let (how, at) = probe.completion().await;
    assert_eq!(how, Completion::Expired);
    assert_eq!(at - start, SECOND / 2);
    assert!(handle.is_completed());
    assert_eq!(purgatory.delayed(), 0);
    // The expired operation's entry goes at the next event on its key.
    assert_eq!(purgatory.check_and_complete(&1), 0);
    assert_eq!(purgatory.watched(), 0);
    assert_eq!(probe.completions(), vec![Completion::Expired]);
}

#[tokio::test(start_paused = true)]
async fn an_event_before_the_deadline_completes_and_cancels_the_timer() {
    let purgatory = Probes::new("event");
    let probe = Probe::new();
    let start = Instant::now();
    let handle = waiting(purgatory.try_complete_else_watch(probe.clone(), SECOND, &[1]));
    tokio::time::advance(SECOND / 10).await;
    assert_eq!(purgatory.check_and_complete(&1), 0, "not ready yet");
    assert!(!handle.is_completed());

    probe.open();
    assert_eq!(purgatory.check_and_complete(&1), 1);
    assert_eq!(purgatory.delayed(), 0, "timer entry not cancelled at once");
    assert_eq!(purgatory.watched(), 0);
    let (how, at) = probe.completion().await;
    assert_eq!((how, at - start), (Completion::Satisfied, SECOND / 10));

    tokio::time::sleep(2 * SECOND).await;
    assert_eq!(probe.completions(), vec![Completion::Satisfied]);
    assert_eq!(purgatory.check_and_complete(&1), 0);
}

#[tokio::test(start_paused = true)]
async fn a_ready_operation_completes_at_once() {
    let purgatory = Probes::new("ready");
    let probe = Probe::new();
    probe.open();
    assert!(matches!(
        purgatory.try_complete_else_watch(probe.clone(), SECOND, &[1]),
        Watched::Completed(Completion::Satisfied)
    ));
    assert_eq!((purgatory.delayed(), purgatory.watched()), (0, 0));
    assert_eq!(probe.completions(), vec![Completion::Satisfied]);
}

#[tokio::test(start_paused = true)]
async fn a_zero_timeout_expires_at_once() {
    let purgatory = Probes::new("zero");
    let probe = Probe::new();
    assert!(matches!(
        purgatory.try_complete_else_watch(probe.clone(), Duration::ZERO, &[1]),
        Watched::Completed(Completion::Expired)
    ));
    assert_eq!(purgatory.delayed(), 0);
    assert_eq!(probe.completions(), vec![Completion::Expired]);
}

/// An event lands between the first try and the watch: the second try, made
/// once the operation is watched, must catch it.
#[tokio::test(start_paused = true)]
async fn the_second_try_catches_an_event_missed_by_the_first() {
    let purgatory = Probes::new("second-try");
    let probe = Arc::new(Probe {
        ready_after_tries: Some(1),
        ..Probe::default()
    });
    assert!(matches!(
        purgatory.try_complete_else_watch(probe.clone(), SECOND, &[1, 2]),
        Watched::Completed(Completion::Satisfied)
    ));
    assert_eq!(probe.tries.load(Ordering::Relaxed), 2);
    assert_eq!(purgatory.delayed(), 0);
    // Its entries stay until the keys are checked (or a purge).
    assert_eq!(purgatory.watched(), 2);
    assert_eq!(
        purgatory.check_and_complete(&1) + purgatory.check_and_complete(&2),
        0
    );
    assert_eq!(purgatory.watched(), 0);
    assert_eq!(probe.completions(), vec![Completion::Satisfied]);
}

#[tokio::test(start_paused = true)]
async fn an_operation_on_several_keys_completes_once() {
    let purgatory = Probes::new("multi-key");
    let probe = Probe::new();
    let _handle = waiting(purgatory.try_complete_else_watch(probe.clone(), SECOND, &[1, 2, 3]));
    assert_eq!(purgatory.watched(), 3);
    probe.open();
    assert_eq!(purgatory.check_and_complete(&2), 1);
    assert_eq!(purgatory.check_and_complete(&1), 0);
    assert_eq!(purgatory.check_and_complete(&3), 0);
    assert_eq!(purgatory.watched(), 0);
    tokio::time::sleep(2 * SECOND).await;
    assert_eq!(probe.completions(), vec![Completion::Satisfied]);
}

#[tokio::test(start_paused = true)]
async fn cancel_completes_once_and_removes_the_timer_entry() {
    let purgatory = Probes::new("cancel");
    let probe = Probe::new();
    let handle = waiting(purgatory.try_complete_else_watch(probe.clone(), SECOND, &[1]));
    assert!(purgatory.cancel(&handle));
    assert!(!purgatory.cancel(&handle));
    assert_eq!(purgatory.delayed(), 0);
    probe.open();
    assert_eq!(purgatory.check_and_complete(&1), 0);
    tokio::time::sleep(2 * SECOND).await;
    assert_eq!(probe.completions(), vec![Completion::Cancelled]);
}

#[tokio::test(start_paused = true)]
async fn a_handle_cancels_only_in_its_own_purgatory() {
    let first = Probes::new("first");
    let second = Probes::new("second");
    let probe = Probe::new();
    let other = Probe::new();
    let handle = waiting(first.try_complete_else_watch(probe.clone(), SECOND, &[1]));
    let _other = waiting(second.try_complete_else_watch(other.clone(), SECOND, &[1]));
    assert!(!second.cancel(&handle));
    assert_eq!(second.delayed(), 1);
    assert!(first.cancel(&handle));
    assert!(other.completions().is_empty());
}

#[tokio::test(start_paused = true)]
async fn cancel_key_cancels_every_operation_watching_it() {
    let purgatory = Probes::new("cancel-key");
    let probes: Vec<_> = (0..3).map(|_| Probe::new()).collect();
    let elsewhere = Probe::new();
    for (i, probe) in probes.iter().enumerate() {
        let keys: &[u32] = if i == 0 { &[1, 2] } else { &[1] };
        waiting(purgatory.try_complete_else_watch(probe.clone(), SECOND, keys));
    }
    waiting(purgatory.try_complete_else_watch(elsewhere.clone(), SECOND, &[2]));
    assert_eq!(purgatory.cancel_key(&1), 3);
    assert_eq!(purgatory.cancel_key(&1), 0);
    assert_eq!(purgatory.delayed(), 1);
    for probe in &probes {
        assert_eq!(probe.completions(), vec![Completion::Cancelled]);
    }
    assert!(elsewhere.completions().is_empty());
}

#[tokio::test(start_paused = true)]
async fn checking_a_key_nobody_watches_returns_zero() {
    let purgatory = Probes::new("empty");
    for key in 0..10_000 {
        assert_eq!(purgatory.check_and_complete(&key), 0);
    }
    assert_eq!((purgatory.delayed(), purgatory.watched()), (0, 0));
}

/// An operation whose `on_complete` re-enters the purgatory: completion runs
/// without the purgatory's locks held, so this must not deadlock.
#[tokio::test(start_paused = true)]
async fn on_complete_may_call_back_into_the_purgatory() {
    /// Set once the purgatory exists; weak, as the purgatory holds the ops.
    type Back = Arc<OnceLock<Weak<Purgatory<u32, Chain>>>>;
    struct Chain {
        purgatory: Back,
        next_key: u32,
        ready: Arc<AtomicBool>,
        completions: Arc<AtomicUsize>,
    }
    impl DelayedOperation for Chain {
        fn try_complete(&self) -> bool {
            self.ready.load(Ordering::Acquire)
        }
        fn on_complete(&self, _how: Completion) {
            self.completions.fetch_add(1, Ordering::Relaxed);
            let purgatory = self.purgatory.get().and_then(Weak::upgrade).expect("alive");
            purgatory.check_and_complete(&self.next_key);
        }
    }
    let back: Back = Arc::default();
    let purgatory = Arc::new(Purgatory::<u32, Chain>::new("chain"));
    back.set(Arc::downgrade(&purgatory)).expect("set once");
    let ready = Arc::new(AtomicBool::new(false));
    let completions = Arc::new(AtomicUsize::new(0));
    for key in 0..100 {
        let op = Chain {
            purgatory: Arc::clone(&back),
            next_key: key + 1,
            ready: Arc::clone(&ready),
            completions: Arc::clone(&completions),
        };
        let watched = purgatory.try_complete_else_watch(op, SECOND, &[key]);
        assert!(matches!(watched, Watched::Waiting(_)));
    }
    ready.store(true, Ordering::Release);
    // Completing key 0 completes 1 from its on_complete, and so on.
    assert_eq!(purgatory.check_and_complete(&0), 1);
    assert_eq!(completions.load(Ordering::Relaxed), 100);
    assert_eq!(purgatory.delayed(), 0);
}

/// The event arrives on another OS thread while the reaper expires the
/// operation at its deadline: exactly one completion either way.
#[tokio::test(start_paused = true)]
async fn an_event_racing_expiry_completes_exactly_once() {
    let purgatory = Arc::new(Probes::new("race"));
    let mut probes = Vec::new();
    let mut outcomes: HashMap<Completion, usize> = HashMap::new();
    for _ in 0..1000 {
        let probe = Probe::new();
        waiting(purgatory.try_complete_else_watch(probe.clone(), Duration::from_millis(1), &[1]));
        // Both sides leave the barrier together, so that thread start-up
        // does not decide the race (and nobody spins on a busy machine).
        let start = Arc::new(Barrier::new(2));
        let event = std::thread::spawn({
            let (purgatory, probe, start) = (purgatory.clone(), probe.clone(), start.clone());
            move || {
                start.wait();
                probe.open();
                purgatory.check_and_complete(&1)
            }
        });
        start.wait();
        // Runs the reaper, which expires the operation, while the thread
        // tries to complete it.
        tokio::time::advance(Duration::from_millis(1)).await;
        let satisfied = event.join().expect("event thread");
        let (how, _) = probe.completion().await;
        assert_eq!(satisfied == 1, how == Completion::Satisfied);
        *outcomes.entry(how).or_default() += 1;
        probes.push(probe);
    }
    tokio::time::sleep(SECOND).await;
    for probe in &probes {
        assert_eq!(probe.completions().len(), 1, "{:?}", probe.completions());
    }
    assert_eq!(outcomes.values().sum::<usize>(), 1000);
    assert_eq!(purgatory.delayed(), 0);
    println!("outcomes of the race: {outcomes:?}");
}

/// Events, cancels and expiry race on a multi-thread runtime (real time: the
/// timeouts are a few milliseconds, and the test awaits completions, not a
/// sleep).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_cancels_and_expiry_race_on_a_multi_thread_runtime() {
    const OPS: usize = 4000;
    const KEYS: u32 = 8;
    let purgatory = Arc::new(Probes::new("race-mt"));
    let mut probes = Vec::with_capacity(OPS);
    let mut handles = Vec::with_capacity(OPS);
    for i in 0..OPS {
        let probe = Probe::new();
        let timeout = Duration::from_millis(1 + (i % 3) as u64);
        let keys = [i as u32 % KEYS, (i as u32 + 1) % KEYS];
        match purgatory.try_complete_else_watch(probe.clone(), timeout, &keys) {
            Watched::Waiting(handle) => handles.push(handle),
            // Real time: on a loaded machine this task can lose the CPU for
            // longer than the timeout between reading the clock and arming the
            // timer, while the reaper moves the wheel past the deadline. Then
            // it has passed, and expiring at once is right.
            Watched::Completed(how) => assert_eq!(how, Completion::Expired, "op {i}"),
        }
        probes.push(probe);
    }
    let probes = Arc::new(probes);
    let events: Vec<_> = (0..2)
        .map(|worker| {
            let (purgatory, probes) = (purgatory.clone(), probes.clone());
            tokio::spawn(async move {
                for (i, probe) in probes.iter().enumerate() {
                    if i % 2 == worker {
                        probe.open();
                    }
                    purgatory.check_and_complete(&(i as u32 % KEYS));
                }
            })
        })
        .collect();
    let canceller = tokio::spawn({
        let purgatory = purgatory.clone();
        async move {
            handles
                .iter()
                .step_by(7)
                .filter(|handle| purgatory.cancel(handle))
                .count()
        }
    });
    for task in events {
        task.await.expect("event task");
    }
    let cancelled = canceller.await.expect("cancel task");

    let all_done = async {
        for probe in probes.iter() {
            probe.completion().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), all_done)
        .await
        .expect("every operation completes");
    let mut outcomes: HashMap<Completion, usize> = HashMap::new();
    for probe in probes.iter() {
        let completions = probe.completions();
        assert_eq!(completions.len(), 1, "{completions:?}");
        *outcomes.entry(completions[0]).or_default() += 1;
    }
    assert_eq!(
        outcomes.get(&Completion::Cancelled).copied().unwrap_or(0),
        cancelled
    );
    assert_eq!(purgatory.delayed(), 0);
    println!("outcomes on the multi-thread runtime: {outcomes:?}");
}

fn small_purge_interval(name: &str) -> Probes {
    Purgatory::with_config(
        name,
        PurgatoryConfig {
            purge_interval_requests: 100,
            ..PurgatoryConfig::default()
        },
    )
}

/// Each operation also watches a key no event ever comes for: without the
/// periodic purge that list would keep every completed operation.
#[tokio::test(start_paused = true)]
async fn purge_keeps_watched_bounded_under_completions_by_event() {
    const HOT: u32 = 0;
    const COLD: u32 = 1;
    let purgatory = small_purge_interval("purge-event");
    let mut peak = 0;
    for _ in 0..100_000 {
        let probe = Probe::new();
        waiting(purgatory.try_complete_else_watch(probe.clone(), 30 * SECOND, &[HOT, COLD]));
        probe.open();
        assert_eq!(purgatory.check_and_complete(&HOT), 1);
        peak = peak.max(purgatory.watched());
    }
    assert!(peak <= 100 + 2, "watched() peaked at {peak}");
    assert_eq!(purgatory.delayed(), 0);
}

#[tokio::test(start_paused = true)]
async fn purge_keeps_watched_bounded_under_cancels() {
    let purgatory = small_purge_interval("purge-cancel");
    let mut peak = 0;
    for _ in 0..100_000 {
        let handle = waiting(purgatory.try_complete_else_watch(Probe::new(), 30 * SECOND, &[0]));
        assert!(purgatory.cancel(&handle));
        peak = peak.max(purgatory.watched());
    }
    assert!(peak <= 100 + 1, "watched() peaked at {peak}");
}

/// A mass expiry leaves stale entries of every operation; the sweep must
/// bring them back down, and not once per expired operation.
#[tokio::test(start_paused = true)]
async fn purge_after_a_mass_expiry() {
    let purgatory = small_purge_interval("purge-expiry");
    for i in 0..20_000 {
        waiting(purgatory.try_complete_else_watch(Probe::new(), SECOND, &[i % 10]));
    }
    assert_eq!(purgatory.watched(), 20_000);
    tokio::time::sleep(2 * SECOND).await;
    assert_eq!(purgatory.delayed(), 0);
    assert!(purgatory.watched() <= 100, "{} left", purgatory.watched());
}

//! The pause the simulation's `pause` faults use (turmoil's `Sim::pause` and
//! `Sim::resume`, patched in: vendor/turmoil/SYNCLINE.md): a paused host runs
//! nothing and answers nothing while the others go on, and wakes with its
//! clock jumped, every timer due in the pause firing at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

fn run_until(sim: &mut turmoil::Sim<'_>, at: Duration) {
    while sim.elapsed() < at {
        sim.step().expect("the simulation steps");
    }
}

#[test]
fn a_paused_host_misses_time_and_wakes_with_every_timer_due() {
    let mut sim = turmoil::Builder::new()
        .rng_seed(1)
        .simulation_duration(Duration::from_secs(30))
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(1))
        .build();
    // The host's ticks (every 100 ms of its own time), and when its 2 s timer
    // fired: (its own elapsed time, the simulation's).
    let ticks = Arc::new(AtomicU64::new(0));
    let woke: Arc<Mutex<Option<(Duration, Duration)>>> = Arc::new(Mutex::new(None));
    let (t, w) = (ticks.clone(), woke.clone());
    sim.host("a", move || {
        let (ticks, woke) = (t.clone(), w.clone());
        async move {
            let start = Instant::now();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let sim_now = turmoil::sim_elapsed().expect("in the simulation");
                *woke.lock().unwrap() = Some((start.elapsed(), sim_now));
            });
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    ticks.fetch_add(1, Ordering::SeqCst);
                }
            });
            let listener = turmoil::net::TcpListener::bind("0.0.0.0:9000").await?;
            loop {
                let (mut s, _) = listener.accept().await?;
                let mut byte = [0u8; 1];
                s.read_exact(&mut byte).await?;
                s.write_all(&byte).await?;
            }
        }
    });
    let answered: Arc<Mutex<Option<Duration>>> = Arc::new(Mutex::new(None));
    let a = answered.clone();
    sim.client("client", async move {
        // Sent at 2 s, into the pause.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut s = turmoil::net::TcpStream::connect("a:9000").await?;
        s.write_all(b"x").await?;
        let mut byte = [0u8; 1];
        s.read_exact(&mut byte).await?;
        *a.lock().unwrap() = turmoil::sim_elapsed();
        Ok(())
    });

    run_until(&mut sim, Duration::from_secs(1));
    sim.pause("a");
    let before = ticks.load(Ordering::SeqCst);
    assert!(before >= 8, "the host ran before the pause: {before} ticks");
    run_until(&mut sim, Duration::from_secs(4));
    assert_eq!(ticks.load(Ordering::SeqCst), before, "the paused host ran");
    assert!(woke.lock().unwrap().is_none(), "a timer fired in the pause");
    assert!(
        answered.lock().unwrap().is_none(),
        "the paused host answered"
    );

    sim.resume("a");
    run_until(&mut sim, Duration::from_millis(4_050));
    let (own, at) = woke
        .lock()
        .unwrap()
        .expect("the overdue timer fired on resume");
    assert!(
        at >= Duration::from_secs(4) && at < Duration::from_millis(4_010),
        "it fired at {at:?}, not at the resume"
    );
    assert!(
        own >= Duration::from_secs(4),
        "the host's clock did not jump: it saw {own:?} pass"
    );
    let answer = answered.lock().unwrap().expect("answered after the resume");
    assert!(answer >= Duration::from_secs(4), "answered at {answer:?}");
    // Time missed is not run later: ticks go on at the host's pace.
    let after = ticks.load(Ordering::SeqCst);
    assert!(
        after <= before + 2,
        "{after} ticks after resuming at {before}"
    );
}

//! Named scenarios: one scripted sequence of faults each, run alone and
//! deterministically, with the outcome the settings promise.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use syncline_client::Acks;
use syncline_proto::pb;
use tokio::time::Instant;

use crate::checker::{Kind, Verdict};
use crate::net::Link;
use crate::run::{Rig, Session, Settings, Setup, TOPIC};

/// The scenarios, by name.
pub const NAMES: [&str; 7] = [
    "jepsen-2013",
    "last-replica-standing",
    "kip-101",
    "kip-101-power",
    "kip-279",
    "zombie-controller",
    "power-loss",
];

/// The scenarios with one variant, and the settings of it.
const ONE_VARIANT: [(&str, Settings); 3] = [
    ("kip-101", Settings::Safe),
    ("kip-279", Settings::Unsafe),
    ("zombie-controller", Settings::Safe),
];

/// Why scenario `name` cannot run with `settings`, if it cannot: an unknown
/// name, or settings it has no variant for.
pub fn refused(name: &str, settings: Settings) -> Option<String> {
    if !NAMES.contains(&name) {
        return Some(format!(
            "unknown scenario {name:?}: choose from {}",
            NAMES.join(", ")
        ));
    }
    ONE_VARIANT
        .iter()
        .find(|(n, s)| *n == name && *s != settings)
        .map(|(_, only)| format!("scenario {name} has one variant: run it with --settings {only}"))
}

/// What a scenario is expected to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// Every promise holds.
    Valid,
    /// Acknowledged records are lost (and the checker says so).
    Loss,
}

/// A scenario's outcome.
#[derive(Debug)]
pub struct ScenarioReport {
    pub name: &'static str,
    pub settings: Settings,
    pub expected: Expected,
    /// What was done, step by step.
    pub steps: Vec<String>,
    pub verdict: Verdict,
    pub healed: Result<Duration, String>,
}

impl ScenarioReport {
    /// True when the outcome is the expected one. A loss that is expected
    /// still leaves the replicas identical, one leader per epoch, and the
    /// cluster healed.
    pub fn as_expected(&self) -> bool {
        let counts = self.verdict.counts();
        match self.expected {
            Expected::Valid => self.verdict.valid(),
            Expected::Loss => {
                counts.contains_key(&Kind::LostWrite)
                    && [Kind::ReplicasDiffer, Kind::Leadership, Kind::NotHealed]
                        .iter()
                        .all(|k| !counts.contains_key(k))
            }
        }
    }
}

impl fmt::Display for ScenarioReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "scenario {} ({} settings), expected: {}",
            self.name,
            self.settings,
            match self.expected {
                Expected::Valid => "every promise holds",
                Expected::Loss => "acknowledged records lost",
            }
        )?;
        for s in &self.steps {
            writeln!(f, "  {s}")?;
        }
        let v = &self.verdict;
        writeln!(
            f,
            "sends: {} (acknowledged {}, failed {}, unknown {}); polls {}; records {}",
            v.sends, v.acked, v.failed, v.unknown, v.polls, v.records
        )?;
        if let Err(e) = &self.healed {
            writeln!(f, "healed: NO: {e}")?;
        }
        let counts: Vec<String> = v.counts().iter().map(|(k, n)| format!("{k} {n}")).collect();
        writeln!(
            f,
            "verdict: {}{}",
            if v.valid() { "VALID" } else { "INVALID: " },
            counts.join(", ")
        )?;
        for violation in v.violations.iter().take(5) {
            writeln!(f, "  {}: {}", violation.kind, violation.detail)?;
        }
        writeln!(
            f,
            "scenario {}: {}",
            self.name,
            if self.as_expected() {
                "outcome as expected"
            } else {
                "UNEXPECTED outcome"
            }
        )
    }
}

/// A partition as any running broker but those in `not` knows it.
async fn state(rig: &Rig, partition: i32, not: &[i32]) -> Option<pb::PartitionMetadata> {
    for node in rig.cluster.nodes.iter().filter(|n| !not.contains(&n.id)) {
        if let Ok(meta) = syncline_e2e::checks::topic_metadata(&rig.cluster, node.id, TOPIC).await {
            if let Some(p) = meta.into_iter().find(|p| p.partition == partition) {
                return Some(p);
            }
        }
    }
    None
}

/// Waits until partition 0 is as `ok` wants (as the controller announced it
/// to the first broker that answers, but those in `not`).
async fn wait_state(
    rig: &Rig,
    what: &str,
    timeout: Duration,
    not: &[i32],
    ok: impl Fn(&pb::PartitionMetadata) -> bool,
) -> anyhow::Result<pb::PartitionMetadata> {
    let start = Instant::now();
    loop {
        let s = state(rig, 0, not).await;
        if let Some(s) = s.as_ref().filter(|s| ok(s)) {
            return Ok(s.clone());
        }
        anyhow::ensure!(
            start.elapsed() < timeout,
            "partition 0 not {what} within {timeout:?} (last seen: {s:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Script {
    steps: Vec<String>,
    epoch: Instant,
}

impl Script {
    fn new() -> Script {
        Script {
            steps: Vec::new(),
            epoch: Instant::now(),
        }
    }

    fn step(&mut self, s: impl Into<String>) {
        self.steps.push(format!(
            "{:6.1}s {}",
            self.epoch.elapsed().as_secs_f64(),
            s.into()
        ));
    }
}

fn cut_between(links: &mut BTreeMap<(i32, i32), Link>, a: i32, others: &[i32]) {
    for b in others {
        links.insert((a, *b), Link::Cut);
        links.insert((*b, a), Link::Cut);
    }
}

fn firewall(rig: &Rig) -> anyhow::Result<&crate::net::Firewall> {
    rig.firewall
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("this scenario needs network faults: {}", why_not_net()))
}

fn why_not_net() -> String {
    crate::net::unavailable().unwrap_or_else(|| "the rig has no firewall".into())
}

/// Runs scenario `name` with `settings`.
pub async fn run_scenario(name: &str, settings: Settings) -> anyhow::Result<ScenarioReport> {
    if let Some(e) = refused(name, settings) {
        anyhow::bail!("{e}");
    }
    let mut script = Script::new();
    let (name, (expected, session)) = match name {
        "jepsen-2013" => ("jepsen-2013", jepsen_2013(&mut script, settings).await?),
        "last-replica-standing" => (
            "last-replica-standing",
            last_replica_standing(&mut script, settings).await?,
        ),
        "kip-101" => ("kip-101", kip_101(&mut script, settings).await?),
        "kip-101-power" => ("kip-101-power", kip_101_power(&mut script, settings).await?),
        "kip-279" => ("kip-279", kip_279(&mut script).await?),
        "zombie-controller" => (
            "zombie-controller",
            zombie_controller(&mut script, settings).await?,
        ),
        "power-loss" => ("power-loss", power_loss(&mut script, settings).await?),
        other => anyhow::bail!("unknown scenario {other:?}"),
    };
    let (verdict, healed) = session.finish().await?;
    Ok(ScenarioReport {
        name,
        settings,
        expected,
        steps: script.steps,
        verdict,
        healed,
    })
}

/// Five brokers, partition 0 on brokers 4 and 5 (RF 2, min ISR 1), outside
/// the controller quorum (brokers 1 to 3): its replicas can fail without the
/// quorum losing its majority.
async fn outside_the_quorum(script: &mut Script) -> anyhow::Result<Session> {
    let mut setup = Setup::new(Settings::Safe, 5, 1);
    setup.replication_factor = 2;
    setup.min_isr = 1;
    let rig = Rig::start(&setup).await?;
    reassign(&rig, &[4, 5]).await?;
    script.step("replicas of partition 0 moved to [4, 5]");
    Session::on(rig, setup).await
}

/// Moves partition 0's replicas to `replicas` and waits until they are its
/// replicas, all in its ISR.
async fn reassign(rig: &Rig, replicas: &[i32]) -> anyhow::Result<()> {
    let list: Vec<String> = replicas.iter().map(i32::to_string).collect();
    let out = rig.cluster.cli(
        &[
            "topic",
            "reassign",
            TOPIC,
            "--partition",
            "0",
            "--replicas",
            &list.join(","),
        ],
        None,
    );
    anyhow::ensure!(
        out.status.success(),
        "reassign failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut want = replicas.to_vec();
    want.sort_unstable();
    wait_state(rig, "reassigned", Duration::from_secs(60), &[], |s| {
        let (mut r, mut i) = (s.replicas.clone(), s.isr.clone());
        r.sort_unstable();
        i.sort_unstable();
        r == want && i == want && s.leader_id > 0
    })
    .await?;
    Ok(())
}

async fn jepsen_2013(
    script: &mut Script,
    settings: Settings,
) -> anyhow::Result<(Expected, Session)> {
    let safe = settings == Settings::Safe;
    // A leader cut from its followers but still reaching the controller
    // shrinks its ISR to itself; then it is cut off entirely and a
    // follower takes over. min.insync.replicas=2 refuses the writes the
    // leader alone would have acknowledged; min ISR 1 and unclean
    // election lose them.
    let mut setup = Setup::new(settings, 5, 1);
    setup.network = true;
    setup.acks = Acks::All;
    let rig = Rig::start(&setup).await?;
    firewall(&rig)?;
    let controller = rig
        .cluster
        .wait_active_controller(&[], Duration::from_secs(30))
        .await;
    let replicas: Vec<i32> = (1..=5).filter(|b| *b != controller).take(3).collect();
    reassign(&rig, &replicas).await?;
    script.step(format!(
        "replicas of partition 0 moved to {replicas:?} (active controller {controller})"
    ));
    let session = Session::on(rig, setup).await?;
    let s = wait_state(&session.rig, "led", Duration::from_secs(30), &[], |s| {
        s.leader_id > 0 && s.isr.len() == 3
    })
    .await?;
    let leader = s.leader_id;
    let followers: Vec<i32> = replicas.iter().copied().filter(|r| *r != leader).collect();
    let mut links = BTreeMap::new();
    cut_between(&mut links, leader, &followers);
    firewall(&session.rig)?.set(&links)?;
    script.step(format!(
        "leader {leader} cut from its followers {followers:?}, controller {controller} reachable"
    ));
    wait_state(&session.rig, "shrunk", Duration::from_secs(30), &[], |s| {
        s.isr == vec![leader]
    })
    .await?;
    script.step(format!("ISR shrank to [{leader}]"));
    let acked = session.workload.acked();
    tokio::time::sleep(Duration::from_secs(4)).await;
    script.step(format!(
        "{} records acknowledged in 4 s with the ISR [{leader}]",
        session.workload.acked() - acked
    ));
    let others: Vec<i32> = (1..=5).filter(|b| *b != leader).collect();
    cut_between(&mut links, leader, &others);
    firewall(&session.rig)?.set(&links)?;
    script.step(format!("leader {leader} cut from every broker"));
    let outcome = wait_state(
        &session.rig,
        "led by another",
        Duration::from_secs(15),
        &[leader],
        |s| s.leader_id > 0 && s.leader_id != leader,
    )
    .await;
    match outcome {
        Ok(s) => script.step(format!(
            "broker {} leads in epoch {} (an unclean election)",
            s.leader_id, s.leader_epoch
        )),
        Err(_) => script.step("no other leader within 15 s (no unclean election)"),
    }
    firewall(&session.rig)?.set(&BTreeMap::new())?;
    script.step("healed");
    let expected = if safe {
        Expected::Valid
    } else {
        Expected::Loss
    };
    Ok((expected, session))
}

async fn last_replica_standing(
    script: &mut Script,
    settings: Settings,
) -> anyhow::Result<(Expected, Session)> {
    let safe = settings == Settings::Safe;
    // Both followers crash; the leader alone is the ISR; then it is lost
    // for good (its disk replaced) and a follower is elected uncleanly.
    // min.insync.replicas=2 refused what the last replica alone would
    // have acknowledged; min ISR 1 acknowledged it and loses it.
    // Five brokers, the replicas on [1, 4, 5]: two voters of the
    // controller quorum stay up whichever replicas are down.
    let mut setup = Setup::new(settings, 5, 1);
    setup.acks = Acks::All;
    setup.idempotent = true;
    setup.unclean = true;
    let rig = Rig::start(&setup).await?;
    reassign(&rig, &[1, 4, 5]).await?;
    script.step("replicas of partition 0 moved to [1, 4, 5]");
    let mut session = Session::on(rig, setup).await?;
    let s = wait_state(&session.rig, "led", Duration::from_secs(30), &[], |s| {
        s.leader_id > 0 && s.isr.len() == 3
    })
    .await?;
    let leader = s.leader_id;
    let followers: Vec<i32> = s
        .replicas
        .iter()
        .copied()
        .filter(|r| *r != leader)
        .collect();
    for f in &followers {
        session.rig.cluster.kill(*f);
    }
    script.step(format!("followers {followers:?} killed"));
    wait_state(&session.rig, "shrunk", Duration::from_secs(30), &[], |s| {
        s.isr == vec![leader]
    })
    .await?;
    let acked = session.workload.acked();
    tokio::time::sleep(Duration::from_secs(4)).await;
    script.step(format!(
        "ISR [{leader}]: {} records acknowledged in 4 s",
        session.workload.acked() - acked
    ));
    session.rig.cluster.kill(leader);
    std::fs::remove_dir_all(session.rig.cluster.data_dir(leader))?;
    script.step(format!("leader {leader} killed and its disk lost"));
    for f in &followers {
        session.rig.cluster.restart(*f);
    }
    let s = wait_state(
        &session.rig,
        "led again",
        Duration::from_secs(30),
        &[],
        |s| s.leader_id > 0 && s.leader_id != leader,
    )
    .await?;
    script.step(format!(
        "followers restarted; broker {} elected uncleanly (epoch {})",
        s.leader_id, s.leader_epoch
    ));
    session.rig.cluster.restart(leader);
    script.step(format!("broker {leader} back with an empty disk"));
    let expected = if safe {
        Expected::Valid
    } else {
        Expected::Loss
    };
    Ok((expected, session))
}

async fn kip_101(script: &mut Script, _settings: Settings) -> anyhow::Result<(Expected, Session)> {
    // KIP-101's first case: a follower restarts, and the leader crashes
    // before the follower fetched again. Truncating to the high
    // watermark would lose what both had; truncation by leader epoch
    // keeps it.
    let mut session = outside_the_quorum(script).await?;
    let s = wait_state(&session.rig, "led", Duration::from_secs(30), &[], |s| {
        s.leader_id > 0 && s.isr.len() == 2
    })
    .await?;
    let leader = s.leader_id;
    let follower = s
        .replicas
        .iter()
        .copied()
        .find(|r| *r != leader)
        .unwrap_or(leader);
    session.rig.cluster.kill(follower);
    session.rig.cluster.restart(follower);
    session.rig.cluster.kill(leader);
    script.step(format!(
        "follower {follower} restarted, leader {leader} killed at once"
    ));
    // Either the follower leads (it was still in the ISR) with every
    // record it had, or, as syncline takes a restarted follower out of
    // the ISR until it caught up, the partition waits offline for its
    // last ISR member. Never the follower with a log cut to its HW.
    let s = wait_state(
        &session.rig,
        "led by the follower or offline",
        Duration::from_secs(30),
        &[leader],
        |s| s.leader_id == follower || (s.leader_id <= 0 && s.isr == vec![leader]),
    )
    .await?;
    if s.leader_id == follower {
        script.step(format!(
            "broker {follower} leads in epoch {}",
            s.leader_epoch
        ));
    } else {
        script.step(format!(
            "partition 0 offline: its ISR is [{leader}], the follower was taken out \
             when it restarted"
        ));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    session.rig.cluster.restart(leader);
    script.step(format!("broker {leader} restarted"));
    Ok((Expected::Valid, session))
}

async fn zombie_controller(
    script: &mut Script,
    _settings: Settings,
) -> anyhow::Result<(Expected, Session)> {
    // The active controller freezes past the election timeout, a
    // partition leader crashes meanwhile (the new controller acts), and
    // the old controller wakes with its stale view.
    // With one voter frozen and the leader crashed, two voters remain.
    let mut session = outside_the_quorum(script).await?;
    let controller = session
        .rig
        .cluster
        .wait_active_controller(&[], Duration::from_secs(30))
        .await;
    session.rig.cluster.pause(controller);
    script.step(format!("active controller {controller} paused"));
    let new = session
        .rig
        .cluster
        .wait_active_controller(&[controller], Duration::from_secs(30))
        .await;
    script.step(format!("broker {new} is the active controller"));
    let s = state(&session.rig, 0, &[controller])
        .await
        .ok_or_else(|| anyhow::anyhow!("no metadata"))?;
    let victim = s.leader_id;
    if victim != controller && victim > 0 {
        session.rig.cluster.kill(victim);
        script.step(format!("leader {victim} of partition 0 killed"));
        wait_state(
            &session.rig,
            "failed over",
            Duration::from_secs(30),
            &[controller],
            |s| s.leader_id > 0 && s.leader_id != victim,
        )
        .await?;
        script.step("partition 0 failed over");
        session.rig.cluster.restart(victim);
    }
    session.rig.cluster.resume(controller);
    script.step(format!("broker {controller} resumed"));
    Ok((Expected::Valid, session))
}

async fn power_loss(
    script: &mut Script,
    settings: Settings,
) -> anyhow::Result<(Expected, Session)> {
    let safe = settings == Settings::Safe;
    // Every broker loses power at once. With flush.messages=1 nothing
    // acknowledged is lost; with the default flush policy (never) the
    // unsynced tail of every ISR member is, as documented.
    let mut setup = Setup::new(Settings::Safe, 3, 1);
    setup.power = true;
    setup.flush_each = safe;
    if let Some(why) = crate::power::unavailable() {
        anyhow::bail!("this scenario needs power faults: {why}");
    }
    let mut session = Session::start(setup).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for id in 1..=3 {
        session.rig.cluster.kill(id);
        if let Some(d) = session.rig.disks.get_mut(&id) {
            d.cut_power()?;
        }
    }
    script.step(format!(
        "every broker lost power ({} acknowledged so far; flush.messages={})",
        session.workload.acked(),
        if safe { "1" } else { "never" }
    ));
    for id in 1..=3 {
        if let Some(d) = session.rig.disks.get_mut(&id) {
            d.power_on()?;
        }
        session.rig.cluster.restart(id);
    }
    script.step("power back, every broker restarted");
    let expected = if safe {
        Expected::Valid
    } else {
        Expected::Loss
    };
    Ok((expected, session))
}

async fn kip_101_power(
    script: &mut Script,
    settings: Settings,
) -> anyhow::Result<(Expected, Session)> {
    // KIP-101's second case, with real power loss: both replicas lose power at
    // once, the follower comes back first and leads (an unclean election if
    // it had left the ISR), takes writes in a new epoch, then the old leader
    // comes back with a tail of its own at the same offsets and must truncate
    // it away (by leader epoch), not keep it. With flush.messages=1 nothing
    // acknowledged is lost; with the default flush the unsynced tails are.
    let safe = settings == Settings::Safe;
    if let Some(why) = crate::power::unavailable() {
        anyhow::bail!("this scenario needs power faults: {why}");
    }
    let mut setup = Setup::new(Settings::Safe, 5, 1);
    setup.replication_factor = 2;
    setup.min_isr = 1;
    setup.unclean = true;
    setup.power = true;
    setup.flush_each = safe;
    let rig = Rig::start(&setup).await?;
    reassign(&rig, &[4, 5]).await?;
    script.step("replicas of partition 0 moved to [4, 5]");
    let mut session = Session::on(rig, setup).await?;
    let s = wait_state(&session.rig, "led", Duration::from_secs(30), &[], |s| {
        s.leader_id > 0 && s.isr.len() == 2
    })
    .await?;
    let leader = s.leader_id;
    let follower = if leader == 4 { 5 } else { 4 };
    tokio::time::sleep(Duration::from_secs(2)).await;
    for id in [leader, follower] {
        session.rig.cluster.kill(id);
        if let Some(d) = session.rig.disks.get_mut(&id) {
            d.cut_power()?;
        }
    }
    script.step(format!(
        "leader {leader} and follower {follower} lost power at once (flush.messages={})",
        if safe { "1" } else { "never" }
    ));
    if let Some(d) = session.rig.disks.get_mut(&follower) {
        d.power_on()?;
    }
    session.rig.cluster.restart(follower);
    let s = wait_state(
        &session.rig,
        "led by the follower",
        Duration::from_secs(30),
        &[leader],
        |s| s.leader_id == follower,
    )
    .await?;
    let acked = session.workload.acked();
    session
        .workload
        .wait_acked(20, Duration::from_secs(30))
        .await
        .map_err(anyhow::Error::msg)?;
    script.step(format!(
        "broker {follower} back first, leads in epoch {}, {} more records acknowledged",
        s.leader_epoch,
        session.workload.acked() - acked
    ));
    if let Some(d) = session.rig.disks.get_mut(&leader) {
        d.power_on()?;
    }
    session.rig.cluster.restart(leader);
    script.step(format!("broker {leader} back"));
    let expected = if safe {
        Expected::Valid
    } else {
        Expected::Loss
    };
    Ok((expected, session))
}

async fn kip_279(script: &mut Script) -> anyhow::Result<(Expected, Session)> {
    // KIP-279: leaders failing over fast, one after another, each with a tail
    // its followers never fetched, in epochs of their own. acks=1 loses those
    // tails; the logs must still end identical (each follower truncating to
    // where its epochs and the leader's diverge, over several epochs).
    let mut setup = Setup::new(Settings::Unsafe, 3, 1);
    setup.network = true;
    let mut session = Session::start(setup).await?;
    firewall(&session.rig)?;
    let mut links = BTreeMap::new();
    for round in 0..2 {
        let s = wait_state(&session.rig, "led", Duration::from_secs(30), &[], |s| {
            s.leader_id > 0
        })
        .await?;
        let leader = s.leader_id;
        let others: Vec<i32> = (1..=3).filter(|b| *b != leader).collect();
        for o in &others {
            links.insert((leader, *o), Link::Cut);
        }
        firewall(&session.rig)?.set(&links)?;
        let acked = session.workload.acked();
        tokio::time::sleep(Duration::from_secs(1)).await;
        session.rig.cluster.kill(leader);
        script.step(format!(
            "round {round}: leader {leader} (epoch {}) wrote {} records its followers could \
             not fetch, then was killed",
            s.leader_epoch,
            session.workload.acked() - acked
        ));
        links.retain(|(from, _), _| *from != leader);
        firewall(&session.rig)?.set(&links)?;
        wait_state(
            &session.rig,
            "led again",
            Duration::from_secs(30),
            &[leader],
            |s| s.leader_id > 0 && s.leader_id != leader,
        )
        .await?;
        session.rig.cluster.restart(leader);
    }
    firewall(&session.rig)?.set(&BTreeMap::new())?;
    script.step("healed");
    Ok((Expected::Loss, session))
}

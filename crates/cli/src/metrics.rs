//! `syncline metrics`: each broker's replication health, read from its Prometheus
//! endpoint, as a table for people or JSON for scripts, once or live (`--watch`).
//!
//! The brokers and their endpoints come from the cluster itself: DescribeCluster
//! gives each broker's `metrics_address` (its `metrics_listen`). Every scrape is
//! parsed with a real Prometheus text parser (prometheus-parse).
//!
//! IsrShrinks and IsrExpands are shown as totals and, as Kafka's meters show them, as
//! per-second rates over the last minute: the counter's increase from the oldest
//! scrape of the last 60 s to the newest, divided by the time between the two (a
//! sliding window rather than Kafka's exponentially weighted one, so the number is
//! exactly "shrinks in the window / window"). `--watch` builds that history from its
//! successive scrapes. A one-shot run has no history: it scrapes twice,
//! [`ONE_SHOT_RATE_INTERVAL`] apart, and its rates cover that interval only (the
//! window is printed with the rates, and is `rate_window_seconds` in JSON).

use std::collections::{BTreeMap, VecDeque};
use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Empty};
use serde_json::{json, Value};
use syncline_client::{Admin, ClusterDescription};
use syncline_proto::wall_clock_ms;
use tokio::time::Instant;

use crate::errors::{explain, Ctx};
use crate::output::Table;

/// Window of the per-second rates (Kafka's one-minute rate).
const RATE_WINDOW: Duration = Duration::from_secs(60);
/// A one-shot run's two scrapes are this far apart.
pub(crate) const ONE_SHOT_RATE_INTERVAL: Duration = Duration::from_secs(1);
/// Longest a scrape may take: a frozen broker must not stall the others' rows.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest a `--watch` refresh of the broker list may take before the previous
/// list is used again.
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Shortest `--watch` interval: scraping faster only loads the brokers.
const MIN_WATCH: Duration = Duration::from_millis(100);
/// Largest scrape body accepted (a broker's exposition is a few hundred KiB at most
/// with its 1000 per-partition series).
const MAX_SCRAPE_BYTES: usize = 16 << 20;

/// `syncline metrics` arguments.
#[derive(Debug, Args)]
pub(crate) struct MetricsArgs {
    /// Only this broker.
    #[arg(long, value_name = "ID")]
    pub(crate) broker: Option<i32>,
    /// Print JSON (with --watch: one JSON object per line, per refresh).
    #[arg(long)]
    pub(crate) json: bool,
    /// Refresh every SECONDS until interrupted; rates then cover the last minute.
    #[arg(long, value_name = "SECONDS", value_parser = parse_watch)]
    pub(crate) watch: Option<Duration>,
}

fn parse_watch(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("expected a number of seconds, e.g. 1 or 0.5 (got {s:?})"))?;
    if !secs.is_finite() || secs < MIN_WATCH.as_secs_f64() || secs > 86_400.0 {
        return Err(format!(
            "the interval must be between {} and 86400 seconds (got {s})",
            MIN_WATCH.as_secs_f64()
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// One broker's replication health, from one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Health {
    pub(crate) active_controller: bool,
    pub(crate) leader_count: i64,
    pub(crate) partition_count: i64,
    pub(crate) under_replicated_partitions: i64,
    pub(crate) under_min_isr_partition_count: i64,
    pub(crate) at_min_isr_partition_count: i64,
    pub(crate) offline_partitions_count: i64,
    pub(crate) isr_shrinks_total: u64,
    pub(crate) isr_expands_total: u64,
    pub(crate) failed_isr_updates_total: u64,
    pub(crate) unclean_leader_elections_total: u64,
    pub(crate) replica_fetcher_max_lag: i64,
}

/// Reads a broker's exposition. Every metric shown must be there: anything else is
/// not a (compatible) syncline broker.
pub(crate) fn parse_health(text: &str) -> Result<Health> {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .context("the metrics text does not parse")?;
    // Sums over label sets; none of these has labels today.
    let mut values: BTreeMap<&str, f64> = BTreeMap::new();
    for s in &scrape.samples {
        let v = match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => continue,
        };
        *values.entry(s.metric.as_str()).or_default() += v;
    }
    let get = |name: &str| -> Result<f64> {
        values
            .get(name)
            .copied()
            .with_context(|| format!("{name} is missing: is this a syncline broker's endpoint?"))
    };
    // Counters and gauges are integers; the text format writes them as floats.
    let int = |name: &str| get(name).map(|v| v as i64);
    let count = |name: &str| get(name).map(|v| v.max(0.0) as u64);
    Ok(Health {
        active_controller: get("syncline_active_controller")? > 0.0,
        leader_count: int("syncline_leader_count")?,
        partition_count: int("syncline_partition_count")?,
        under_replicated_partitions: int("syncline_under_replicated_partitions")?,
        under_min_isr_partition_count: int("syncline_under_min_isr_partition_count")?,
        at_min_isr_partition_count: int("syncline_at_min_isr_partition_count")?,
        offline_partitions_count: int("syncline_offline_partitions_count")?,
        isr_shrinks_total: count("syncline_isr_shrinks_total")?,
        isr_expands_total: count("syncline_isr_expands_total")?,
        failed_isr_updates_total: count("syncline_failed_isr_updates_total")?,
        unclean_leader_elections_total: count("syncline_unclean_leader_elections_total")?,
        replica_fetcher_max_lag: int("syncline_replica_fetcher_max_lag")?,
    })
}

/// Per-second rates of one broker's ISR counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rates {
    pub(crate) isr_shrinks_per_sec: f64,
    pub(crate) isr_expands_per_sec: f64,
    /// The time between the two scrapes the rates come from.
    pub(crate) window: Duration,
}

/// Recent (time, shrinks, expands) samples of one broker, newest last.
#[derive(Debug, Default)]
pub(crate) struct RateTracker {
    samples: VecDeque<(Instant, u64, u64)>,
}

impl RateTracker {
    /// Records a scrape taken at `now` and returns the rates over the last minute
    /// (none until two scrapes of the same broker process are apart in time).
    pub(crate) fn record(&mut self, now: Instant, shrinks: u64, expands: u64) -> Option<Rates> {
        if let Some(&(_, s, e)) = self.samples.back() {
            // A counter that went down belongs to a new broker process: the history
            // before its restart says nothing about it.
            if shrinks < s || expands < e {
                self.samples.clear();
            }
        }
        self.samples.push_back((now, shrinks, expands));
        while let Some(&(t, _, _)) = self.samples.front() {
            if now.saturating_duration_since(t) > RATE_WINDOW {
                self.samples.pop_front();
            } else {
                break;
            }
        }
        let (Some(&(t0, s0, e0)), Some(&(t1, s1, e1))) =
            (self.samples.front(), self.samples.back())
        else {
            return None;
        };
        let window = t1.saturating_duration_since(t0);
        if window.is_zero() {
            return None;
        }
        let per_sec = |a: u64, b: u64| (b - a) as f64 / window.as_secs_f64();
        Some(Rates {
            isr_shrinks_per_sec: per_sec(s0, s1),
            isr_expands_per_sec: per_sec(e0, e1),
            window,
        })
    }
}

/// A broker whose endpoint is to be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) broker: i32,
    /// `host:port`; None when the broker has no metrics endpoint.
    pub(crate) address: Option<String>,
}

/// The brokers to read (all, or `only`), with their metrics endpoints. A broker
/// listening on a wildcard address (`0.0.0.0:9101`) is reached at its advertised
/// host.
pub(crate) fn targets(cluster: &ClusterDescription, only: Option<i32>) -> Result<Vec<Target>> {
    if let Some(id) = only {
        if !cluster.brokers.iter().any(|b| b.endpoint.id == id) {
            let known: Vec<String> = cluster
                .brokers
                .iter()
                .map(|b| b.endpoint.id.to_string())
                .collect();
            bail!(
                "broker {id} is not registered (brokers: {}); see `syncline cluster describe`",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            );
        }
    }
    let mut out: Vec<Target> = cluster
        .brokers
        .iter()
        .filter(|b| only.is_none_or(|id| id == b.endpoint.id))
        .map(|b| Target {
            broker: b.endpoint.id,
            address: b
                .metrics_address
                .as_deref()
                .filter(|a| !a.is_empty())
                .map(|a| reachable_address(a, &b.endpoint.host)),
        })
        .collect();
    out.sort_by_key(|t| t.broker);
    Ok(out)
}

/// `addr` with a wildcard host replaced by `host`.
fn reachable_address(addr: &str, host: &str) -> String {
    match addr.rsplit_once(':') {
        Some(("" | "0.0.0.0" | "::" | "[::]", port)) => {
            if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        }
        _ => addr.to_string(),
    }
}

/// GET http://`addr`/metrics.
async fn fetch_text(addr: &str) -> Result<String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot connect to {addr}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    let request = hyper::Request::get("/metrics")
        .header(hyper::header::HOST, addr)
        .body(Empty::<Bytes>::new())?;
    let response = async move {
        let response = sender.send_request(request).await?;
        let status = response.status();
        let body = http_body_util::Limited::new(response.into_body(), MAX_SCRAPE_BYTES)
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("reading the body: {e}"))?
            .to_bytes();
        if !status.is_success() {
            bail!("GET /metrics answered {status}");
        }
        String::from_utf8(body.to_vec()).context("the metrics text is not UTF-8")
    };
    tokio::pin!(response);
    // The connection task moves the bytes; the response future gets them. Whichever
    // ends first, the other is dropped with this function, so nothing outlives it.
    tokio::select! {
        biased;
        r = &mut response => return r,
        c = conn => c.context("connection failed")?,
    }
    // The connection closed cleanly: what it read is buffered for the response.
    response.await
}

/// Scrapes one broker within [`SCRAPE_TIMEOUT`].
async fn scrape(target: &Target) -> Result<Health, String> {
    let Some(addr) = &target.address else {
        return Err("no metrics endpoint (metrics_listen is not set)".into());
    };
    match tokio::time::timeout(SCRAPE_TIMEOUT, fetch_text(addr)).await {
        Err(_) => Err(format!(
            "http://{addr}/metrics did not answer within {}s",
            SCRAPE_TIMEOUT.as_secs()
        )),
        Ok(Err(e)) => Err(format!("http://{addr}/metrics: {e:#}")),
        Ok(Ok(text)) => parse_health(&text).map_err(|e| format!("http://{addr}/metrics: {e:#}")),
    }
}

/// One broker's row of a frame.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub(crate) broker: i32,
    pub(crate) address: Option<String>,
    pub(crate) health: Result<(Health, Option<Rates>), String>,
}

/// One refresh: every broker's row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Frame {
    /// When it was taken, ms since the Unix epoch.
    pub(crate) at_ms: i64,
    pub(crate) rows: Vec<Row>,
}

/// Scrapes every target at once and updates the rate history.
async fn take_frame(targets: &[Target], trackers: &mut BTreeMap<i32, RateTracker>) -> Frame {
    let results = futures::future::join_all(targets.iter().map(scrape)).await;
    let now = Instant::now();
    let rows = targets
        .iter()
        .zip(results)
        .map(|(t, r)| Row {
            broker: t.broker,
            address: t.address.clone(),
            health: r.map(|h| {
                let rates = trackers.entry(t.broker).or_default().record(
                    now,
                    h.isr_shrinks_total,
                    h.isr_expands_total,
                );
                (h, rates)
            }),
        })
        .collect();
    Frame {
        at_ms: wall_clock_ms(),
        rows,
    }
}

fn rate(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.3}"))
}

/// "14:02:07" (UTC) from ms since the Unix epoch.
fn clock(at_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(at_ms)
        .unwrap_or_default()
        .format("%H:%M:%S")
        .to_string()
}

/// The columns of the table and of `--watch` lines.
const COLUMNS: [&str; 14] = [
    "BROKER",
    "LEADERS",
    "PARTITIONS",
    "URP",
    "UNDER_MIN_ISR",
    "AT_MIN_ISR",
    "OFFLINE",
    "ISR_SHRINKS",
    "/S",
    "ISR_EXPANDS",
    "/S",
    "FAILED_ISR",
    "UNCLEAN",
    "MAX_LAG",
];

/// One broker's cells under [`COLUMNS`]; an unreadable broker has its id and "?".
fn cells(row: &Row) -> Vec<String> {
    let Ok((h, r)) = &row.health else {
        return vec![row.broker.to_string(), "?".into()];
    };
    vec![
        format!(
            "{}{}",
            row.broker,
            if h.active_controller { "*" } else { "" }
        ),
        h.leader_count.to_string(),
        h.partition_count.to_string(),
        h.under_replicated_partitions.to_string(),
        h.under_min_isr_partition_count.to_string(),
        h.at_min_isr_partition_count.to_string(),
        h.offline_partitions_count.to_string(),
        h.isr_shrinks_total.to_string(),
        rate(r.map(|r| r.isr_shrinks_per_sec)),
        h.isr_expands_total.to_string(),
        rate(r.map(|r| r.isr_expands_per_sec)),
        h.failed_isr_updates_total.to_string(),
        h.unclean_leader_elections_total.to_string(),
        h.replica_fetcher_max_lag.to_string(),
    ]
}

const LEGEND: &str = "\
* active controller; OFFLINE and UNCLEAN are the controller's counts.
URP: under-replicated partitions led by the broker. MAX_LAG: its replica fetchers' largest lag (offsets).
";

/// The table for people (a one-shot run, and `--watch` on a terminal).
pub(crate) fn render_table(frame: &Frame) -> String {
    let window = frame
        .rows
        .iter()
        .filter_map(|r| {
            r.health
                .as_ref()
                .ok()
                .and_then(|(_, rates)| rates.map(|r| r.window))
        })
        .max();
    let mut out = format!(
        "Brokers: {}  At: {} UTC  ISR rates: {}\n\n",
        frame.rows.len(),
        clock(frame.at_ms),
        window.map_or_else(
            || "need two scrapes".to_string(),
            |w| format!("per second over the last {:.1}s", w.as_secs_f64())
        )
    );
    let mut table = Table::new(&COLUMNS);
    for row in &frame.rows {
        table.row(cells(row));
    }
    out.push_str(&table.render());
    out.push('\n');
    out.push_str(LEGEND);
    for row in &frame.rows {
        if let Err(e) = &row.health {
            out.push_str(&format!("broker {}: {e}\n", row.broker));
        }
    }
    out
}

/// Narrowest column of [`render_lines`]: fits a rate up to "999.999".
const MIN_LINE_COLUMN: usize = 7;

/// `--watch` into a pipe or a file: plain lines, a header once, then one line per
/// broker and refresh, each stamped with its time, in fixed-width columns (stable
/// from one refresh to the next, so the output reads as a log).
pub(crate) fn render_lines(frame: &Frame, header: bool) -> String {
    let mut columns = vec!["TIME(UTC)"];
    columns.extend(COLUMNS);
    let line = |cells: Vec<String>| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            let width = columns.get(i).map_or(0, |h| h.len().max(MIN_LINE_COLUMN));
            l.push_str(&format!("{c:<width$}  "));
        }
        format!("{}\n", l.trim_end())
    };
    let mut out = String::new();
    if header {
        out.push_str(&line(columns.iter().map(|c| c.to_string()).collect()));
    }
    let time = clock(frame.at_ms);
    for row in &frame.rows {
        let mut c = vec![time.clone()];
        match &row.health {
            Ok(_) => c.extend(cells(row)),
            Err(e) => c.extend([row.broker.to_string(), format!("? {e}")]),
        }
        out.push_str(&line(c));
    }
    out
}

/// Clears the screen (first frame only) and moves the cursor home.
const TTY_HOME: &str = "\x1b[H";
const TTY_CLEAR_SCREEN: &str = "\x1b[2J";
/// Clears the rest of the line / of the screen.
const TTY_CLEAR_LINE: &str = "\x1b[K";
const TTY_CLEAR_BELOW: &str = "\x1b[J";

/// One `--watch` refresh as written to stdout. On a terminal the table is drawn
/// over the previous one: cursor home, each line cleared to its end, and whatever
/// the previous (longer) frame left below erased, so nothing scrolls and nothing
/// flickers. Elsewhere (a pipe, a file): [`render_lines`], no escape codes.
pub(crate) fn render_watch(frame: &Frame, tty: bool, first: bool) -> String {
    if !tty {
        return render_lines(frame, first);
    }
    let text = render_table(frame);
    let mut out = String::with_capacity(text.len() + 64);
    if first {
        out.push_str(TTY_CLEAR_SCREEN);
    }
    out.push_str(TTY_HOME);
    for line in text.lines() {
        out.push_str(line);
        out.push_str(TTY_CLEAR_LINE);
        out.push('\n');
    }
    out.push_str(TTY_CLEAR_BELOW);
    out
}

/// JSON for scripts: pretty for a one-shot run; one object per line with
/// `--watch` (JSON Lines).
fn json_text(frame: &Frame, pretty: bool) -> Result<String> {
    let v = render_json(frame);
    Ok(format!(
        "{}\n",
        if pretty {
            serde_json::to_string_pretty(&v)?
        } else {
            serde_json::to_string(&v)?
        }
    ))
}

/// The JSON for scripts: keys are the metric names without their `syncline_`
/// prefix.
pub(crate) fn render_json(frame: &Frame) -> Value {
    json!({
        "time_ms": frame.at_ms,
        "brokers": frame.rows.iter().map(|row| match &row.health {
            Ok((h, r)) => json!({
                "broker": row.broker,
                "metrics_address": row.address,
                "error": Value::Null,
                "active_controller": h.active_controller,
                "leader_count": h.leader_count,
                "partition_count": h.partition_count,
                "under_replicated_partitions": h.under_replicated_partitions,
                "under_min_isr_partition_count": h.under_min_isr_partition_count,
                "at_min_isr_partition_count": h.at_min_isr_partition_count,
                "offline_partitions_count": h.offline_partitions_count,
                "isr_shrinks_total": h.isr_shrinks_total,
                "isr_shrinks_per_sec": r.map(|r| r.isr_shrinks_per_sec),
                "isr_expands_total": h.isr_expands_total,
                "isr_expands_per_sec": r.map(|r| r.isr_expands_per_sec),
                "rate_window_seconds": r.map(|r| r.window.as_secs_f64()),
                "failed_isr_updates_total": h.failed_isr_updates_total,
                "unclean_leader_elections_total": h.unclean_leader_elections_total,
                "replica_fetcher_max_lag": h.replica_fetcher_max_lag,
            }),
            Err(e) => json!({
                "broker": row.broker,
                "metrics_address": row.address,
                "error": e,
            }),
        }).collect::<Vec<_>>(),
    })
}

/// Writes and flushes; a closed stdout (`| head`) ends the command quietly.
fn emit(text: &str) -> Result<bool> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e.into()),
    }
}

pub(crate) async fn run(args: MetricsArgs, bootstrap: &str) -> Result<()> {
    let ctx = Ctx {
        bootstrap,
        topic: None,
    };
    let fail = |e: syncline_client::ClientError| anyhow::anyhow!(explain(&e, ctx));
    let admin = Admin::new(crate::security::client_config(bootstrap)).map_err(fail)?;
    let cluster = admin.describe_cluster().await.map_err(fail)?;
    let mut targets = targets(&cluster, args.broker)?;
    let mut trackers = BTreeMap::new();

    let Some(interval) = args.watch else {
        take_frame(&targets, &mut trackers).await;
        tokio::time::sleep(ONE_SHOT_RATE_INTERVAL).await;
        let frame = take_frame(&targets, &mut trackers).await;
        emit(&if args.json {
            json_text(&frame, true)?
        } else {
            render_table(&frame)
        })?;
        let failed: Vec<String> = frame
            .rows
            .iter()
            .filter(|r| r.health.is_err())
            .map(|r| r.broker.to_string())
            .collect();
        if !failed.is_empty() {
            bail!(
                "could not read the metrics of broker(s) {}",
                failed.join(", ")
            );
        }
        return Ok(());
    };

    let tty = std::io::stdout().is_terminal();
    let mut ticks = tokio::time::interval(interval);
    // A slow scrape (a frozen broker) delays the next refresh instead of bunching.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut first = true;
    loop {
        tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            _ = ticks.tick() => {}
        }
        let refresh = async {
            if !first {
                // Brokers come and go; keep the last list if the cluster does not
                // answer in time.
                let described = tokio::time::timeout(DESCRIBE_TIMEOUT, admin.describe_cluster());
                if let Ok(Ok(c)) = described.await {
                    if let Ok(t) = self::targets(&c, args.broker) {
                        targets = t;
                    }
                }
            }
            take_frame(&targets, &mut trackers).await
        };
        let frame = tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            f = refresh => f,
        };
        let out = if args.json {
            json_text(&frame, false)?
        } else {
            render_watch(&frame, tty, first)
        };
        if !emit(&out)? {
            return Ok(());
        }
        first = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncline_client::{BrokerDescription, BrokerEndpoint};

    #[test]
    fn watch_lines_carry_the_utc_time_of_day() {
        assert_eq!(clock(1_700_000_000_999), "22:13:20");
    }

    const EXPOSITION: &str = "\
# HELP syncline_isr_shrinks ISR shrinks.
# TYPE syncline_isr_shrinks counter
syncline_isr_shrinks_total 3
# TYPE syncline_isr_expands counter
syncline_isr_expands_total 2
# TYPE syncline_failed_isr_updates counter
syncline_failed_isr_updates_total 1
# TYPE syncline_under_replicated_partitions gauge
syncline_under_replicated_partitions 1
# TYPE syncline_under_min_isr_partition_count gauge
syncline_under_min_isr_partition_count 0
# TYPE syncline_at_min_isr_partition_count gauge
syncline_at_min_isr_partition_count 1
# TYPE syncline_leader_count gauge
syncline_leader_count 2
# TYPE syncline_partition_count gauge
syncline_partition_count 6
# TYPE syncline_offline_partitions_count gauge
syncline_offline_partitions_count 0
# TYPE syncline_unclean_leader_elections counter
syncline_unclean_leader_elections_total 0
# TYPE syncline_active_controller gauge
syncline_active_controller 1
# TYPE syncline_replica_fetcher_max_lag gauge
syncline_replica_fetcher_max_lag 12
# TYPE syncline_request_duration_seconds histogram
syncline_request_duration_seconds_sum{api=\"Produce\"} 0.5
syncline_request_duration_seconds_count{api=\"Produce\"} 4
syncline_request_duration_seconds_bucket{le=\"0.1\",api=\"Produce\"} 4
syncline_request_duration_seconds_bucket{le=\"+Inf\",api=\"Produce\"} 4
# EOF
";

    fn health() -> Health {
        Health {
            active_controller: true,
            leader_count: 2,
            partition_count: 6,
            under_replicated_partitions: 1,
            under_min_isr_partition_count: 0,
            at_min_isr_partition_count: 1,
            offline_partitions_count: 0,
            isr_shrinks_total: 3,
            isr_expands_total: 2,
            failed_isr_updates_total: 1,
            unclean_leader_elections_total: 0,
            replica_fetcher_max_lag: 12,
        }
    }

    #[test]
    fn parses_a_broker_exposition() {
        assert_eq!(parse_health(EXPOSITION).unwrap(), health());
    }

    #[test]
    fn a_missing_metric_is_named() {
        let text = EXPOSITION.replace("syncline_leader_count 2\n", "");
        let err = parse_health(&text).unwrap_err().to_string();
        assert!(err.contains("syncline_leader_count is missing"), "{err}");
        assert!(parse_health("<html>not metrics</html>").is_err());
    }

    #[test]
    fn rates_cover_the_last_minute_and_survive_restarts() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut r = RateTracker::default();
        assert_eq!(r.record(t0, 0, 0), None, "one scrape: no rate");
        assert_eq!(r.record(t0, 0, 0), None, "no time between scrapes: no rate");
        let rates = r.record(t0 + s(10), 5, 1).unwrap();
        assert_eq!(rates.window, s(10));
        assert_eq!(rates.isr_shrinks_per_sec, 0.5);
        assert_eq!(rates.isr_expands_per_sec, 0.1);
        // 70 s after the first scrape it has left the window: the rate is over the
        // 60 s from the scrape at +10 s.
        let rates = r.record(t0 + s(70), 11, 1).unwrap();
        assert_eq!(rates.window, s(60));
        assert_eq!(rates.isr_shrinks_per_sec, 0.1);
        assert_eq!(rates.isr_expands_per_sec, 0.0);
        // The broker restarted (counters went down): history starts over.
        assert_eq!(r.record(t0 + s(71), 0, 0), None);
        assert_eq!(
            r.record(t0 + s(73), 2, 0).map(|r| r.isr_shrinks_per_sec),
            Some(1.0),
            "rates resume from the restart"
        );
    }

    fn frame(rates: Option<Rates>) -> Frame {
        Frame {
            at_ms: (3600 * 14 + 62) * 1000,
            rows: vec![
                Row {
                    broker: 1,
                    address: Some("127.0.0.1:9101".into()),
                    health: Ok((health(), rates)),
                },
                Row {
                    broker: 2,
                    address: Some("127.0.0.1:9102".into()),
                    health: Err("http://127.0.0.1:9102/metrics did not answer within 2s".into()),
                },
            ],
        }
    }

    #[test]
    fn table_shows_totals_rates_and_unreadable_brokers() {
        let rates = Some(Rates {
            isr_shrinks_per_sec: 0.05,
            isr_expands_per_sec: 0.0,
            window: Duration::from_secs(60),
        });
        let text = render_table(&frame(rates));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "Brokers: 2  At: 14:01:02 UTC  ISR rates: per second over the last 60.0s"
        );
        let cells: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(
            cells,
            ["1*", "2", "6", "1", "0", "1", "0", "3", "0.050", "2", "0.000", "1", "0", "12"]
        );
        assert_eq!(lines[4].split_whitespace().collect::<Vec<_>>(), ["2", "?"]);
        assert!(text.contains("broker 2: http://127.0.0.1:9102/metrics did not answer"));
        assert!(text.contains("* active controller"));
        let one_scrape = render_table(&frame(None));
        assert!(one_scrape.contains("ISR rates: need two scrapes"));
        assert!(one_scrape.lines().nth(3).unwrap().contains("  -  "));
    }

    #[test]
    fn json_uses_metric_names_and_reports_errors() {
        let rates = Some(Rates {
            isr_shrinks_per_sec: 0.5,
            isr_expands_per_sec: 0.0,
            window: Duration::from_secs(2),
        });
        let v = render_json(&frame(rates));
        assert_eq!(v["time_ms"], 50_462_000);
        let b1 = &v["brokers"][0];
        assert_eq!(b1["broker"], 1);
        assert_eq!(b1["error"], Value::Null);
        assert_eq!(b1["isr_shrinks_total"], 3);
        assert_eq!(b1["isr_shrinks_per_sec"], 0.5);
        assert_eq!(b1["rate_window_seconds"], 2.0);
        assert_eq!(b1["under_replicated_partitions"], 1);
        assert_eq!(b1["active_controller"], true);
        let b2 = &v["brokers"][1];
        assert_eq!(b2["broker"], 2);
        assert!(b2["error"].as_str().unwrap().contains("did not answer"));
        assert!(b2.get("isr_shrinks_total").is_none());
    }

    #[test]
    fn watch_redraws_in_place_on_a_terminal_only() {
        let f = frame(Some(Rates {
            isr_shrinks_per_sec: 0.05,
            isr_expands_per_sec: 0.0,
            window: Duration::from_secs(60),
        }));
        let table = render_table(&f);
        // A terminal: cleared once, then every frame is the table drawn from the
        // top over the previous one, each line cleared to its end and the rest of
        // the screen below erased (a shorter frame leaves nothing behind).
        let first = render_watch(&f, true, true);
        assert!(first.starts_with("\x1b[2J\x1b[H"), "{first:?}");
        let again = render_watch(&f, true, false);
        assert!(
            again.starts_with("\x1b[HBrokers: 2  At: 14:01:02 UTC"),
            "{again:?}"
        );
        assert!(again.ends_with("\x1b[K\n\x1b[J"), "{again:?}");
        assert!(
            !again.contains("\x1b[2J"),
            "no full clear: it would flicker"
        );
        let plain: String = again
            .trim_start_matches("\x1b[H")
            .trim_end_matches("\x1b[J")
            .replace("\x1b[K", "");
        assert_eq!(plain, table, "the same table, line for line");

        // Not a terminal: no escape codes; a header once, then one time-stamped
        // line per broker and refresh, in columns that do not move.
        let first = render_lines(&f, true);
        let next = render_watch(&f, false, false);
        assert!(!first.contains('\x1b') && !next.contains('\x1b'));
        let lines: Vec<&str> = first.lines().collect();
        assert_eq!(lines.len(), 3, "{first}");
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>()[..6],
            [
                "TIME(UTC)",
                "BROKER",
                "LEADERS",
                "PARTITIONS",
                "URP",
                "UNDER_MIN_ISR"
            ]
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            [
                "14:01:02", "1*", "2", "6", "1", "0", "1", "0", "3", "0.050", "2", "0.000", "1",
                "0", "12"
            ]
        );
        assert_eq!(
            lines[1].find("URP"),
            None,
            "values, not headers: {}",
            lines[1]
        );
        // Columns line up with the header.
        let starts = |l: &str| -> Vec<usize> {
            let b = l.as_bytes();
            (0..b.len())
                .filter(|&i| b[i] != b' ' && (i == 0 || b[i - 1] == b' '))
                .collect()
        };
        assert_eq!(starts(lines[0]), starts(lines[1]), "\n{first}");
        let error: Vec<&str> = lines[2].split_whitespace().take(4).collect();
        assert_eq!(
            error,
            ["14:01:02", "2", "?", "http://127.0.0.1:9102/metrics"]
        );
        assert_eq!(next.lines().count(), 2, "no header again: {next}");
        assert_eq!(
            next,
            first
                .lines()
                .skip(1)
                .map(|l| format!("{l}\n"))
                .collect::<String>()
        );
    }

    fn cluster(metrics: &[(i32, Option<&str>)]) -> ClusterDescription {
        ClusterDescription {
            cluster_id: "c".into(),
            controller_id: Some(1),
            brokers: metrics
                .iter()
                .map(|&(id, m)| BrokerDescription {
                    endpoint: BrokerEndpoint {
                        id,
                        host: "broker.example".into(),
                        port: 9092,
                        rack: None,
                    },
                    broker_epoch: 1,
                    fenced: false,
                    metrics_address: m.map(String::from),
                    load: None,
                })
                .collect(),
        }
    }

    #[test]
    fn targets_come_from_the_cluster_description() {
        let c = cluster(&[
            (2, Some("0.0.0.0:9102")),
            (1, Some("10.1.2.3:9101")),
            (3, None),
        ]);
        let all = targets(&c, None).unwrap();
        assert_eq!(
            all,
            [
                Target {
                    broker: 1,
                    address: Some("10.1.2.3:9101".into())
                },
                Target {
                    broker: 2,
                    address: Some("broker.example:9102".into())
                },
                Target {
                    broker: 3,
                    address: None
                },
            ]
        );
        assert_eq!(targets(&c, Some(2)).unwrap(), all[1..2]);
        let err = targets(&c, Some(7)).unwrap_err().to_string();
        assert!(
            err.contains("broker 7 is not registered (brokers: 2, 1, 3)"),
            "{err}"
        );
    }

    #[test]
    fn watch_interval_values() {
        assert_eq!(parse_watch("1").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_watch("0.5").unwrap(), Duration::from_millis(500));
        assert!(parse_watch("0").is_err());
        assert!(parse_watch("-1").is_err());
        assert!(parse_watch("soon").is_err());
        assert!(parse_watch("NaN").is_err());
    }
}

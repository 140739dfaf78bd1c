//! What the perf commands share: latency histograms, Kafka's wording of the
//! figures, the JSON report, the progress bar and the send-rate throttle.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};
use tokio::time::Instant;

/// Kafka's tools count MB as 2^20 bytes.
pub(crate) const KAFKA_MB: f64 = 1024.0 * 1024.0;

/// Latencies in microseconds: 3 significant digits from 1 µs to an hour, so
/// percentiles keep sub-millisecond detail on loopback.
pub(crate) fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// Records `d` (clamped into the histogram's range).
pub(crate) fn record_latency(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record((d.as_micros() as u64).max(1));
}

/// Milliseconds at quantile `q` (0.5 = median).
pub(crate) fn ms_at(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// The latency figures of a histogram, as JSON (milliseconds).
pub(crate) fn latency_json(h: &Histogram<u64>) -> Value {
    json!({
        "avg": h.mean() / 1000.0,
        "max": h.max() as f64 / 1000.0,
        "p50": ms_at(h, 0.50),
        "p95": ms_at(h, 0.95),
        "p99": ms_at(h, 0.99),
        "p99_9": ms_at(h, 0.999),
        "count": h.len(),
    })
}

/// The distribution for a CDF plot: `[latency_ms, cumulative fraction]` points,
/// dense in the tail (HdrHistogram's quantile iteration, 20 ticks per halving).
pub(crate) fn cdf_json(h: &Histogram<u64>) -> Value {
    if h.is_empty() {
        return json!([]);
    }
    let points: Vec<Value> = h
        .iter_quantiles(20)
        .map(|v| {
            json!([
                v.value_iterated_to() as f64 / 1000.0,
                v.quantile_iterated_to()
            ])
        })
        .collect();
    Value::Array(points)
}

/// Writes `report` to `path` (pretty JSON).
pub(crate) fn write_json(path: &Path, report: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(report).expect("JSON values serialize");
    std::fs::write(path, text + "\n")
        .with_context(|| format!("cannot write the JSON report to {}", path.display()))
}

/// A progress bar of `len` steps on standard error, or a hidden one when standard
/// error is not a terminal (a pipe or a CI log gets the plain lines only).
pub(crate) fn progress_bar(len: u64, unit: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let template = format!("{{bar:40.cyan/blue}} {{human_pos}}/{{human_len}} {unit} (eta {{eta}})");
    bar.set_style(
        ProgressStyle::with_template(&template)
            .expect("valid progress template")
            .progress_chars("=> "),
    );
    bar
}

/// Prints a line to standard output without tearing the progress bar.
pub(crate) fn print_line(bar: &ProgressBar, line: &str) {
    bar.suspend(|| println!("{line}"));
}

/// Paces sends at `per_second` records (Kafka's ThroughputThrottler): record `i`
/// is not sent before `start + i / per_second`. A negative or zero rate means no
/// throttle. (Kafka's throttler sleeps only once it is 2 ms ahead: here that
/// sent records in bursts that raised the acks=all p99 at a fixed rate from
/// about 4 to 6 ms, so every record waits for its own time.)
#[derive(Debug)]
pub(crate) struct Throttle {
    start: Instant,
    per_second: f64,
}

impl Throttle {
    pub(crate) fn new(per_second: f64, start: Instant) -> Self {
        Throttle { start, per_second }
    }

    /// When record number `i` (from 0) may be sent, if it must wait at all.
    pub(crate) fn due(&self, i: u64) -> Option<Instant> {
        (self.per_second > 0.0)
            .then(|| self.start + Duration::from_secs_f64(i as f64 / self.per_second))
    }

    /// Waits until record `i` may be sent.
    pub(crate) async fn wait(&self, i: u64) {
        if let Some(due) = self.due(i) {
            if due > Instant::now() {
                tokio::time::sleep_until(due).await;
            }
        }
    }
}

/// `yyyy-MM-dd HH:mm:ss:SSS` in UTC, the time format of Kafka's consumer perf
/// test.
pub(crate) fn format_wall_clock(at: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(at)
        .format("%Y-%m-%d %H:%M:%S:%3f")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_keep_sub_millisecond_detail() {
        let mut h = latency_histogram();
        for us in 1..=1000u64 {
            record_latency(&mut h, Duration::from_micros(us * 10));
        }
        assert!((ms_at(&h, 0.5) - 5.0).abs() < 0.01, "{}", ms_at(&h, 0.5));
        assert!((ms_at(&h, 0.99) - 9.9).abs() < 0.01);
        let j = latency_json(&h);
        assert_eq!(j["count"], 1000);
        let cdf = cdf_json(&h);
        let last = cdf.as_array().unwrap().last().unwrap();
        assert_eq!(last[1], 1.0);
    }

    #[test]
    fn throttle_spaces_records_by_the_rate() {
        let start = Instant::now();
        let t = Throttle::new(1000.0, start);
        assert_eq!(t.due(0), Some(start));
        assert_eq!(t.due(500), Some(start + Duration::from_millis(500)));
        assert_eq!(Throttle::new(-1.0, start).due(5), None);
    }

    #[test]
    fn wall_clock_in_kafkas_format() {
        let at = std::time::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(format_wall_clock(at), "2023-11-14 22:13:20:123");
        assert_eq!(
            format_wall_clock(std::time::UNIX_EPOCH),
            "1970-01-01 00:00:00:000"
        );
    }
}

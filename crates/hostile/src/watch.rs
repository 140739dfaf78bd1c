//! What is watched on the brokers during a phase: each one's resident
//! memory (from /proc), and from their metrics the cluster's health (fenced
//! brokers, controller elections, ISR shrinks).

use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A broker's resident set in bytes (VmRSS), `None` once it is gone.
pub(crate) fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The sum of every series of each family in `names`, from the metrics
/// endpoint at `addr` (absent families count 0).
pub(crate) async fn metrics(addr: &str, names: &[&str]) -> anyhow::Result<Vec<f64>> {
    let text = tokio::time::timeout(Duration::from_secs(5), get(addr))
        .await
        .with_context(|| format!("{addr}: no metrics within 5 s"))??;
    let mut sums = vec![0.0; names.len()];
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let family = series.split('{').next().unwrap_or(series);
        if let Some(i) = names.iter().position(|n| *n == family) {
            sums[i] += value.parse::<f64>().unwrap_or(0.0);
        }
    }
    Ok(sums)
}

async fn get(addr: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).await?;
    let Some((head, body)) = answer.split_once("\r\n\r\n") else {
        bail!("{addr}: not an HTTP answer");
    };
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("{addr}: {}", head.lines().next().unwrap_or(""));
    }
    Ok(body.to_string())
}

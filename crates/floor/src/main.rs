//! The machine's floor for RF=3 replication on loopback, measured now: raw bytes
//! producer -> leader -> 2 followers over TCP, the leader and each follower
//! appending every byte to a file (page cache, no fsync), as a broker would. No
//! protocol, no framing: a broker can only approach it. `scripts/bench.sh` uses it
//! when the shared `rf3-floor` tool is not beside the repository; it does the same
//! thing, so the figures compare.
//!
//! Usage: rf3-floor [TOTAL_BYTES] [CHUNK_BYTES] [DIR]   (defaults 2 GB, 1 MiB, $TMPDIR)
//! Prints one line: `baseline_rf3_loopback_MBps N (...)`, MB = 10^6 bytes.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Read buffer of every hop.
const BUF_BYTES: usize = 1 << 20;

/// A follower: accepts the leader's stream, appends it to `path`, and answers one
/// byte once it has `total` bytes (the acknowledgement).
async fn follower(listener: TcpListener, path: PathBuf, total: u64) -> Result<()> {
    let (mut stream, _) = listener.accept().await?;
    let mut file = std::fs::File::create(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let mut buf = vec![0u8; BUF_BYTES];
    let mut got = 0u64;
    while got < total {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        file.write_all(&buf[..n])?;
        got += n as u64;
    }
    stream.write_all(&[1]).await?;
    Ok(())
}

/// The leader: appends what the producer sends, forwards it to both followers,
/// and acknowledges once both have acknowledged.
async fn leader(
    listener: TcpListener,
    followers: [std::net::SocketAddr; 2],
    path: PathBuf,
    total: u64,
) -> Result<()> {
    let (mut producer, _) = listener.accept().await?;
    let mut f1 = TcpStream::connect(followers[0]).await?;
    let mut f2 = TcpStream::connect(followers[1]).await?;
    let mut file = std::fs::File::create(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let mut buf = vec![0u8; BUF_BYTES];
    let mut got = 0u64;
    while got < total {
        let n = producer.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        file.write_all(&buf[..n])?;
        f1.write_all(&buf[..n]).await?;
        f2.write_all(&buf[..n]).await?;
        got += n as u64;
    }
    let mut ack = [0u8; 1];
    f1.read_exact(&mut ack).await?;
    f2.read_exact(&mut ack).await?;
    producer.write_all(&[1]).await?;
    Ok(())
}

async fn measure(total: u64, chunk: usize, dir: &Path) -> Result<(u64, f64)> {
    let lf1 = TcpListener::bind("127.0.0.1:0").await?;
    let lf2 = TcpListener::bind("127.0.0.1:0").await?;
    let ll = TcpListener::bind("127.0.0.1:0").await?;
    let followers = [lf1.local_addr()?, lf2.local_addr()?];
    let leader_addr = ll.local_addr()?;
    let f1 = tokio::spawn(follower(lf1, dir.join("rf3-floor-f1"), total));
    let f2 = tokio::spawn(follower(lf2, dir.join("rf3-floor-f2"), total));
    let l = tokio::spawn(leader(ll, followers, dir.join("rf3-floor-l"), total));

    let start = Instant::now();
    let mut producer = TcpStream::connect(leader_addr).await?;
    let data = vec![7u8; chunk];
    let mut sent = 0u64;
    while sent < total {
        let n = chunk.min((total - sent) as usize);
        producer.write_all(&data[..n]).await?;
        sent += n as u64;
    }
    let mut ack = [0u8; 1];
    producer.read_exact(&mut ack).await?;
    let secs = start.elapsed().as_secs_f64();
    for task in [l, f1, f2] {
        task.await.context("a hop panicked")??;
    }
    Ok((sent, secs))
}

fn arg<T: std::str::FromStr>(n: usize, name: &str, default: T) -> Result<T> {
    match std::env::args().nth(n) {
        None => Ok(default),
        Some(s) => s
            .parse()
            .map_err(|_| anyhow::anyhow!("{name} must be a positive whole number (got {s:?})")),
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let total: u64 = arg(1, "TOTAL_BYTES", 2_000_000_000)?;
    let chunk: usize = arg(2, "CHUNK_BYTES", 1 << 20)?;
    anyhow::ensure!(
        total > 0 && chunk > 0,
        "TOTAL_BYTES and CHUNK_BYTES must be positive"
    );
    let dir = std::env::args()
        .nth(3)
        .map_or_else(std::env::temp_dir, PathBuf::from);
    // The files are only there to be written: in a directory of this run's own
    // (two runs never share files), removed with it on every path.
    let files = tempfile::Builder::new()
        .prefix("rf3-floor")
        .tempdir_in(&dir)
        .map_err(|e| anyhow::anyhow!("cannot create a directory in {}: {e}", dir.display()))?;
    let (sent, secs) = measure(total, chunk, files.path()).await?;
    println!(
        "baseline_rf3_loopback_MBps {:.1} ({sent} bytes in {secs:.2}s, chunk {chunk})",
        sent as f64 / secs / 1e6
    );
    Ok(())
}

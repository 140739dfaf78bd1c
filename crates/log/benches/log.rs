//! Append and read throughput of the log, next to plain `std::fs::File` I/O of the
//! same bytes, with the ratios printed at the end. 16 KiB batches of 1 KiB records,
//! default config (no fsync per append, as Kafka's default): this measures the
//! log's own overhead over the page cache, not the disk.
//!
//! `cargo bench -p syncline-log` (a few seconds); criterion's usual flags apply.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput};
use syncline_log::{Log, LogConfig};
use syncline_proto::batch::BatchBuilder;

const RECORD_BYTES: usize = 1024;
const RECORDS_PER_BATCH: usize = 16;
const READ_BYTES: usize = 1 << 20;
/// Data the read benchmarks cycle through.
const READ_SET_BYTES: usize = 64 << 20;
const TS: i64 = 1_700_000_000_000;

fn record_batch() -> Bytes {
    let mut b = BatchBuilder::with_capacity(TS, RECORDS_PER_BATCH * (RECORD_BYTES + 16));
    let value = vec![0xab; RECORD_BYTES];
    for _ in 0..RECORDS_PER_BATCH {
        b.push(TS, None, Some(&value), &[]);
    }
    b.finish()
}

/// Bytes moved and time spent over every measured iteration of one benchmark.
#[derive(Default)]
struct Totals {
    bytes: u64,
    time: Duration,
}

impl Totals {
    fn add(&mut self, bytes: u64, time: Duration) {
        self.bytes += bytes;
        self.time += time;
    }

    fn mb_per_s(&self) -> f64 {
        if self.time.is_zero() {
            return 0.0;
        }
        self.bytes as f64 / 1e6 / self.time.as_secs_f64()
    }
}

fn main() {
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(10)
        .configure_from_args();
    let batch = record_batch();
    let batch_len = batch.len() as u64;
    let totals: [RefCell<Totals>; 4] = Default::default();
    let [log_append, file_write, log_read, file_read] = &totals;

    let mut group = criterion.benchmark_group("write");
    group.throughput(Throughput::Bytes(batch_len));
    group.bench_function("log_append", |b| {
        b.iter_custom(|iters| {
            let dir = tempfile::tempdir().unwrap();
            let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
            // The first append of an epoch checkpoints the epoch cache (two
            // fsyncs): a once-per-leadership cost, kept out of the steady state.
            log.assign_epoch(0, 0).unwrap();
            let start = Instant::now();
            for _ in 0..iters {
                black_box(log.append_as_leader(&batch, 0, TS).unwrap());
            }
            let elapsed = start.elapsed();
            log_append.borrow_mut().add(iters * batch_len, elapsed);
            elapsed
        })
    });
    group.bench_function("file_write", |b| {
        b.iter_custom(|iters| {
            let dir = tempfile::tempdir().unwrap();
            let mut file = File::create(dir.path().join("plain")).unwrap();
            let start = Instant::now();
            for _ in 0..iters {
                file.write_all(&batch).unwrap();
            }
            let elapsed = start.elapsed();
            file_write.borrow_mut().add(iters * batch_len, elapsed);
            elapsed
        })
    });
    group.finish();

    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    let mut plain = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(dir.path().join("plain"))
        .unwrap();
    for _ in 0..READ_SET_BYTES as u64 / batch_len {
        log.append_as_leader(&batch, 0, TS).unwrap();
        plain.write_all(&batch).unwrap();
    }
    let (log_end, plain_len) = (log.log_end_offset(), plain.metadata().unwrap().len());

    let mut group = criterion.benchmark_group("read");
    group.throughput(Throughput::Bytes(READ_BYTES as u64));
    group.bench_function("log_read", |b| {
        let mut offset = 0;
        b.iter_custom(|iters| {
            let mut bytes = 0;
            let start = Instant::now();
            for _ in 0..iters {
                let read = log.read(offset, READ_BYTES, log_end, true).unwrap();
                bytes += read.records.len() as u64;
                offset = if read.next_offset >= log_end {
                    0
                } else {
                    read.next_offset
                };
                black_box(read);
            }
            let elapsed = start.elapsed();
            log_read.borrow_mut().add(bytes, elapsed);
            elapsed
        })
    });
    group.bench_function("file_read", |b| {
        let mut position = 0;
        let mut buf = vec![0; READ_BYTES];
        b.iter_custom(|iters| {
            let mut bytes = 0;
            let start = Instant::now();
            for _ in 0..iters {
                let n = plain.read_at(&mut buf, position).unwrap();
                bytes += n as u64;
                position = if position + READ_BYTES as u64 >= plain_len {
                    0
                } else {
                    position + n as u64
                };
                black_box(&buf);
            }
            let elapsed = start.elapsed();
            file_read.borrow_mut().add(bytes, elapsed);
            elapsed
        })
    });
    group.finish();
    criterion.final_summary();

    let ratio = |a: &RefCell<Totals>, b: &RefCell<Totals>| {
        let base = b.borrow().mb_per_s();
        if base == 0.0 {
            0.0
        } else {
            a.borrow().mb_per_s() / base
        }
    };
    println!(
        "\nsyncline-log, {RECORDS_PER_BATCH} x {RECORD_BYTES} B records per batch ({batch_len} B), page cache, no fsync"
    );
    println!(
        "  append {:8.0} MB/s   plain file write {:8.0} MB/s   log/file {:.2}",
        log_append.borrow().mb_per_s(),
        file_write.borrow().mb_per_s(),
        ratio(log_append, file_write)
    );
    println!(
        "  read   {:8.0} MB/s   plain file read  {:8.0} MB/s   log/file {:.2}   ({} KiB reads)",
        log_read.borrow().mb_per_s(),
        file_read.borrow().mb_per_s(),
        ratio(log_read, file_read),
        READ_BYTES >> 10
    );
}

//! The partition log of syncline: what a broker stores for each partition replica.
//!
//! # Layout
//!
//! One directory per partition (`<log_dir>/<topic>-<partition>/`) holds:
//!
//! - segments `00000000000000000000.log`, named by the offset of their first
//!   batch, holding record batches exactly as they travel (Kafka's RecordBatch v2,
//!   see [`syncline_proto::batch`]); the last segment is the active one;
//! - per segment, a sparse index (`.index`: relative offset and file position every
//!   `index_interval_bytes`) and its timestamp companion (`.timeindex`: largest
//!   timestamp so far at the same points), used to find batches and to apply
//!   time retention without reading segments;
//! - `leader-epoch-checkpoint` (Kafka's text format), `recovery-point`,
//!   `high-watermark`, each replaced atomically, and `clean-shutdown` after
//!   [`Log::close`].
//!
//! # Guarantees
//!
//! - Appends are all or nothing: a failed write is cut off the segment before the
//!   error is returned. When even that fails, or an fsync fails, the log is
//!   *failed* and refuses every operation until it is reopened, which recovers it.
//! - fsync follows `flush_messages`/`flush_ms` (by default never: as in Kafka,
//!   durability comes from replication, and a crash may lose the unflushed tail).
//!   Rolling a segment fsyncs the outgoing one.
//! - Opening after a crash validates the segments not wholly below the recovery
//!   point and cuts the log at the first torn or corrupt batch (with a warning);
//!   see `recovery`. The epoch cache is then truncated to the recovered log end.
//!
//! # Concurrency
//!
//! Reads take `&self` and use positional reads; appends and truncations take
//! `&mut self`. A broker keeps each `Log` behind a read-write lock.
//!
//! # Modules
//!
//! - `log`: [`Log`] — appends, reads, truncation, retention, flushing.
//! - `segment`: one segment file and its index; appending, locating, recovering.
//! - `index`: the sparse index in memory and its files.
//! - `recovery`: opening a directory.
//! - `region`: [`FileRegion`], a read's batches left in the segment files
//!   (zero-copy fetches), and the truncation count that invalidates them.
//! - `epoch_cache`: [`LeaderEpochCache`], a pure state machine.
//! - `checkpoint`: atomic small files.
//! - [`disk`]: the storage seam a simulated disk plugs into.
//! - [`planted`]: bugs the simulation plants (feature `planted-bugs`).

mod checkpoint;
mod config;
pub mod disk;
mod epoch_cache;
mod error;
mod index;
mod log;
pub mod planted;
mod producer_state;
mod recovery;
mod region;
mod segment;

pub use config::LogConfig;
pub use epoch_cache::{EpochEntry, LeaderEpochCache};
pub use error::LogError;
pub use log::{attention, AppendInfo, Log, ReadInfo, RetentionInfo, TimestampOffset};
pub use producer_state::{
    BatchRef, ProducerEntry, ProducerStates, SequenceCheck, SequenceError, BATCHES_PER_PRODUCER,
};
pub use region::{stale_region, FileRegion, Records, RegionRead};

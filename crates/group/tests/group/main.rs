//! The coordinator driven through its public API, as the broker glue drives it.

mod deadlines;
mod describe;
mod heartbeat;
mod join;
mod leave;
mod load;
mod offsets;
mod records;
mod support;
mod sync;

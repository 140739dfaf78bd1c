//! The process's randomness, from a seed: a simulation is replayable only if
//! every random choice in it is. The brokers draw random ids and Raft's
//! election timeouts (`rand`, seeded from the OS), std's `HashMap`s iterate
//! in an order keyed at random (from the OS), and tokio's `select!` picks
//! among ready branches with a generator seeded the same way. All of them ask
//! libc's `getrandom`; a simulation binary replaces that function with
//! [`replace_os_randomness!`], which serves this module's seeded stream.
//!
//! One process, one stream: a replay is exact when it runs in a fresh process
//! with the same arguments (`syncline-sim` runs every seed in a process of its
//! own for that reason).

use std::sync::atomic::{AtomicU64, Ordering};

/// The stream's state (SplitMix64), set by [`reseed`].
static STATE: AtomicU64 = AtomicU64::new(0x5eed_5eed_5eed_5eed);

const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

fn next() -> u64 {
    let z = STATE
        .fetch_add(GAMMA, Ordering::Relaxed)
        .wrapping_add(GAMMA);
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Starts the stream again from `seed`.
pub fn reseed(seed: u64) {
    STATE.store(seed ^ 0x5eed_5eed_5eed_5eed, Ordering::Relaxed);
}

/// Fills `out` from the stream.
pub fn fill(out: &mut [u8]) {
    for chunk in out.chunks_mut(8) {
        let bytes = next().to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

/// Defines libc's `getrandom` in the calling binary (a simulation's `main`
/// or test file), serving [`fill`]. The executable's definition wins over
/// libc's for every caller in the process: std, `rand`'s `getrandom`, tokio.
#[macro_export]
macro_rules! replace_os_randomness {
    () => {
        /// libc's `getrandom(2)`, served from the simulation's seeded stream.
        ///
        /// # Safety
        /// `buf` must be valid for writes of `len` bytes, as for libc's.
        #[allow(unsafe_code)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn getrandom(buf: *mut u8, len: usize, _flags: u32) -> isize {
            if buf.is_null() || len == 0 {
                return 0;
            }
            // SAFETY: the caller passes a buffer of `len` writable bytes.
            let out = unsafe { ::std::slice::from_raw_parts_mut(buf, len) };
            $crate::entropy::fill(out);
            len as isize
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_one_stream() {
        let draw = |seed| {
            reseed(seed);
            let mut b = [0u8; 20];
            fill(&mut b);
            b
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }
}

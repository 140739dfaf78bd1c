//! The quorum's files: CRC-32C frames.
//!
//! A frame is `[u32 BE length][u32 BE CRC-32C of the payload][payload]`. A file
//! replaced whole (vote, snapshot, a rewritten log) is replaced with
//! [`syncline_durable::write_atomic`]: after a crash either the old or the new file is
//! there, never a mix.

use std::fs;
use std::io;
use std::path::Path;

use bytes::{Buf, BufMut};

/// The largest frame payload accepted: a bound that keeps a corrupt length field from
/// meaning "read 4 GiB". Snapshots of very large clusters are the biggest payloads.
pub(crate) const MAX_FRAME_BYTES: usize = 256 << 20;

const HEADER_BYTES: usize = 8;

/// Appends one frame holding `payload` to `buf`.
pub(crate) fn put_frame(buf: &mut Vec<u8>, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|_| payload.len() <= MAX_FRAME_BYTES)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a {}-byte frame exceeds the {MAX_FRAME_BYTES}-byte limit",
                    payload.len()
                ),
            )
        })?;
    buf.put_u32(len);
    buf.put_u32(crc32c::crc32c(payload));
    buf.extend_from_slice(payload);
    Ok(())
}

/// The frame at the start of `buf`: its payload and the frame's whole length, or why
/// the bytes there are not a valid frame.
pub(crate) fn next_frame(mut buf: &[u8]) -> Result<(&[u8], usize), &'static str> {
    if buf.len() < HEADER_BYTES {
        return Err("torn frame header");
    }
    let len = usize::try_from(buf.get_u32()).unwrap_or(usize::MAX);
    let crc = buf.get_u32();
    if len > MAX_FRAME_BYTES {
        return Err("frame length beyond the limit");
    }
    let payload = buf.get(..len).ok_or("torn frame")?;
    if crc32c::crc32c(payload) != crc {
        return Err("checksum mismatch");
    }
    Ok((payload, HEADER_BYTES + len))
}

/// Reads a file that holds exactly one frame; `None` if the file does not exist.
/// A damaged file is an error: these files are replaced atomically, so damage is not
/// a torn write but a disk that lost data.
pub(crate) fn read_single_frame(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let data = match fs::read(path) {
        Ok(data) => data,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match next_frame(&data) {
        Ok((payload, len)) if len == data.len() => Ok(Some(payload.to_vec())),
        Ok(_) => Err(corrupt(path, "trailing bytes after the frame")),
        Err(reason) => Err(corrupt(path, reason)),
    }
}

/// An `InvalidData` error naming the file.
pub(crate) fn corrupt(path: &Path, reason: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {reason}", path.display()),
    )
}

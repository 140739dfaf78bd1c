//! Small checkpoint files, in Kafka's text format (a version line, a count line,
//! then one entry per line), each replaced atomically with
//! [`syncline_durable::write_atomic`]: a crash leaves the old file or the new one,
//! never a mix.

use std::fs;
use std::io;
use std::path::Path;

use crate::error::{IoContext, LogError};

/// The leader-epoch cache, in Kafka's format.
pub(crate) const LEADER_EPOCH_FILE: &str = "leader-epoch-checkpoint";
/// Offset below which every batch is fsynced: recovery validates only the segments
/// that are not wholly below it.
pub(crate) const RECOVERY_POINT_FILE: &str = "recovery-point";
/// The high watermark, written by the broker and read at startup.
pub(crate) const HIGH_WATERMARK_FILE: &str = "high-watermark";
/// Present after a clean shutdown: the files are trusted without recovery.
pub(crate) const CLEAN_SHUTDOWN_FILE: &str = "clean-shutdown";

/// The only checkpoint format version.
const VERSION: u32 = 0;
/// Suffix of a checkpoint being written; leftovers are deleted at open.
pub(crate) use syncline_durable::TMP_SUFFIX;

/// Replaces `dir/name` with `contents`.
pub(crate) fn write_atomic(dir: &Path, name: &str, contents: &[u8]) -> Result<(), LogError> {
    let path = dir.join(name);
    syncline_durable::write_atomic(&path, contents).ctx(&path)
}

/// Makes creations, renames and deletions in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), LogError> {
    syncline_durable::sync_dir(dir).ctx(dir)
}

/// Encodes entries as a checkpoint file.
pub(crate) fn encode<I>(entries: I) -> String
where
    I: ExactSizeIterator,
    I::Item: std::fmt::Display,
{
    let mut out = format!("{VERSION}\n{}\n", entries.len());
    for entry in entries {
        out.push_str(&format!("{entry}\n"));
    }
    out
}

/// Decodes a checkpoint file into its entry lines, checking version and count.
pub(crate) fn decode(text: &str) -> Result<Vec<&str>, String> {
    let mut lines = text.lines();
    let version = lines.next().ok_or("empty file")?;
    if version.trim() != VERSION.to_string() {
        return Err(format!("unknown version {version:?}"));
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or("missing or bad entry count")?;
    let entries: Vec<&str> = lines.filter(|l| !l.trim().is_empty()).collect();
    if entries.len() != count {
        return Err(format!(
            "count line says {count} entries, file has {}",
            entries.len()
        ));
    }
    Ok(entries)
}

/// Reads `dir/name`: `Ok(None)` when the file does not exist.
pub(crate) fn read(dir: &Path, name: &str) -> Result<Option<String>, LogError> {
    let path = dir.join(name);
    match fs::read(&path) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).ctx(&path),
    }
}

/// Writes a checkpoint holding one offset.
pub(crate) fn write_offset(dir: &Path, name: &str, offset: i64) -> Result<(), LogError> {
    write_atomic(dir, name, encode(std::iter::once(offset)).as_bytes())
}

/// Reads a checkpoint holding one offset. A missing file is `None`; a garbled one is
/// `None` with a warning, as every such checkpoint has a safe fallback.
pub(crate) fn read_offset(dir: &Path, name: &str) -> Result<Option<i64>, LogError> {
    let Some(text) = read(dir, name)? else {
        return Ok(None);
    };
    let parsed = decode(&text).and_then(|entries| match entries.as_slice() {
        [one] => one
            .trim()
            .parse::<i64>()
            .map_err(|e| format!("bad offset {one:?}: {e}")),
        _ => Err(format!("expected one entry, found {}", entries.len())),
    });
    match parsed {
        Ok(offset) => Ok(Some(offset)),
        Err(reason) => {
            tracing::warn!(file = %dir.join(name).display(), %reason, "ignoring garbled checkpoint");
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_round_trip_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_offset(dir.path(), "x").unwrap(), None);
        write_offset(dir.path(), "x", 42).unwrap();
        assert_eq!(read_offset(dir.path(), "x").unwrap(), Some(42));
        assert_eq!(
            fs::read_to_string(dir.path().join("x")).unwrap(),
            "0\n1\n42\n"
        );
        assert!(!dir.path().join("x.tmp").exists());
        for garbage in ["", "1\n1\n5\n", "0\n2\n5\n", "0\n1\nfive\n", "\u{0}\u{1}"] {
            fs::write(dir.path().join("x"), garbage).unwrap();
            assert_eq!(read_offset(dir.path(), "x").unwrap(), None, "{garbage:?}");
        }
    }
}

//! Durable files: the one way syncline replaces a checkpoint or metadata file, and
//! the directory fsync that makes a created, renamed or deleted entry survive a
//! crash.
//!
//! [`write_atomic`] replaces a file whole: it writes a temporary file beside it
//! (`<name>.tmp`, [`TMP_SUFFIX`]), fsyncs it, renames it over the file and fsyncs
//! the directory. A crash at any point leaves the old file or the new one, never a
//! mix; a crash before the rename can leave the temporary file behind, which the
//! next write of the same file replaces.
//!
//! A new, renamed or removed directory is not durable until the directory that
//! holds it is synced: [`create_dir_all`] creates directories durably, and
//! [`sync_parent`] follows a rename or a removal.
//!
//! One writer per file at a time: two concurrent writes of the same file share its
//! temporary name. Callers serialize them (a lock, or one owner per file).

#![warn(missing_docs)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The suffix of the temporary file [`write_atomic`] writes beside its target.
pub const TMP_SUFFIX: &str = ".tmp";

/// Replaces the file at `path` with `bytes`, atomically and durably: temporary
/// file in the same directory, write, fsync it, rename it over `path`, fsync the
/// directory. On success the new content is on disk, under its name.
///
/// On an error before the rename, `path` is untouched (and the temporary file
/// removed); an error from the directory's fsync comes after the rename, so the
/// new content is in place but may not survive a crash.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace(path, bytes, None)
}

/// [`write_atomic`] for a file that must have exactly `mode` (say `0o600` for a
/// secret): the temporary file is created with it, and set to it regardless of
/// the umask, before any byte is written, so the content is never readable more
/// widely than `mode` allows.
#[cfg(unix)]
pub fn write_atomic_with_mode(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    replace(path, bytes, Some(mode))
}

/// Makes the entries of `dir` durable: a file or directory created, renamed or
/// removed in it survives a crash once this returns.
///
/// On platforms other than unix this does nothing: there a directory cannot be
/// opened as a file to be synced (Windows makes the entries durable with the
/// files' own metadata).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Makes `path`'s own entry durable: fsyncs the directory it is in, after `path`
/// was created, renamed (both names, when they share the directory) or removed.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    sync_dir(parent_dir(path))
}

/// Creates `dir` and its missing parents, as [`fs::create_dir_all`] does, and
/// makes each new directory durable: fsyncs the directory it was created in.
/// Nothing is synced when `dir` already exists.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    let missing = missing_dirs(dir)?;
    fs::create_dir_all(dir)?;
    for d in missing.iter().rev() {
        sync_parent(d)?;
    }
    Ok(())
}

/// `dir` and those of its parents that do not exist, `dir` first.
fn missing_dirs(dir: &Path) -> io::Result<Vec<&Path>> {
    let mut missing = Vec::new();
    let mut next = Some(dir);
    while let Some(d) = next.filter(|d| !d.as_os_str().is_empty()) {
        if d.try_exists()? {
            break;
        }
        missing.push(d);
        next = d.parent();
    }
    Ok(missing)
}

/// [`create_dir_all`] for a directory only its owner may enter: each
/// directory it creates has exactly `mode` (say `0o700`), regardless of the
/// umask, and so has `dir` itself when it already exists (a directory created
/// wider by an older version is narrowed). Parents that already exist are
/// left alone.
#[cfg(unix)]
pub fn create_private_dir_all(dir: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let missing = missing_dirs(dir)?;
    for d in missing.iter().rev() {
        match fs::DirBuilder::new().mode(mode).create(d) {
            Ok(()) => {}
            // Created meanwhile by someone else: narrowed below like `dir`.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        // The umask may have cleared bits of `mode`.
        fs::set_permissions(d, fs::Permissions::from_mode(mode))?;
        sync_parent(d)?;
    }
    if fs::metadata(dir)?.permissions().mode() & 0o7777 != mode {
        fs::set_permissions(dir, fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// `mode`: the exact permissions of the new file (unix only); `None` for the
/// defaults of a new file.
fn replace(path: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let dir = parent_dir(path);
    let tmp = tmp_path(path)?;
    // A leftover of a write a crash interrupted. Removed rather than reused, so
    // the file written is always a new one, created by this call with its mode.
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if let Some(mode) = mode {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(&tmp)?;
    let written = (|| {
        #[cfg(unix)]
        if let Some(mode) = mode {
            // The umask may have cleared bits of `mode` (0644 under umask 077).
            use std::os::unix::fs::PermissionsExt as _;
            file.set_permissions(fs::Permissions::from_mode(mode))?;
        }
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    drop(file);
    if let Err(e) = written {
        // Best effort: the error to report is the one that stopped the write.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// The directory `path` is in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// `<name>.tmp` beside `path`.
fn tmp_path(path: &Path) -> io::Result<PathBuf> {
    let mut name = path
        .file_name()
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} names no file", path.display()),
            )
        })?
        .to_os_string();
    name.push(TMP_SUFFIX);
    Ok(path.with_file_name(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn creates_then_replaces_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        write_atomic(&path, b"first\n").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"first\n");
        write_atomic(&path, b"second, longer\n").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second, longer\n");
        write_atomic(&path, b"").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"");
    }

    #[test]
    fn leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        write_atomic(&path, b"old").unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(names(dir.path()), ["checkpoint"]);
    }

    #[test]
    fn a_leftover_temporary_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        fs::write(
            dir.path().join("checkpoint.tmp"),
            b"torn by a crash, and long",
        )
        .unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(names(dir.path()), ["checkpoint"]);
    }

    #[test]
    fn a_missing_directory_is_an_error_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let e = write_atomic(&missing.join("checkpoint"), b"new").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(!missing.exists());
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_intact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        write_atomic(&path, b"old").unwrap();
        // Something that is no leftover file holds the temporary name: the write
        // cannot start, and it must not touch the file it was to replace.
        let blocker = dir.path().join("checkpoint.tmp");
        fs::create_dir(&blocker).unwrap();
        fs::write(blocker.join("inside"), b"kept").unwrap();
        write_atomic(&path, b"new").unwrap_err();
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(fs::read(blocker.join("inside")).unwrap(), b"kept");
    }

    #[test]
    fn a_failed_rename_leaves_the_target_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // A non-empty directory where the file should be: the rename fails after
        // the temporary file is written and synced.
        let path = dir.path().join("checkpoint");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("inside"), b"kept").unwrap();
        write_atomic(&path, b"new").unwrap_err();
        assert_eq!(fs::read(path.join("inside")).unwrap(), b"kept");
        assert_eq!(names(dir.path()), ["checkpoint"]);
    }

    #[test]
    fn a_bare_file_name_is_written_in_the_current_directory() {
        assert_eq!(parent_dir(Path::new("checkpoint")), Path::new("."));
        assert_eq!(
            tmp_path(Path::new("checkpoint")).unwrap(),
            Path::new("checkpoint.tmp")
        );
        assert_eq!(parent_dir(Path::new("/d/checkpoint")), Path::new("/d"));
        assert_eq!(
            tmp_path(Path::new("/d/checkpoint")).unwrap(),
            Path::new("/d/checkpoint.tmp")
        );
        assert!(tmp_path(Path::new("/")).is_err());
    }

    #[test]
    fn sync_dir_of_a_missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        sync_dir(dir.path()).unwrap();
        #[cfg(unix)]
        assert_eq!(
            sync_dir(&dir.path().join("missing")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn sync_parent_syncs_the_directory_a_path_is_in() {
        let dir = tempfile::tempdir().unwrap();
        let moved = dir.path().join("orders-0.0123-delete");
        fs::create_dir(&moved).unwrap();
        sync_parent(&moved).unwrap();
        // The entry itself need not exist (a removal), its directory must.
        sync_parent(&dir.path().join("removed")).unwrap();
        sync_parent(Path::new("in-the-current-directory")).unwrap();
        #[cfg(unix)]
        assert_eq!(
            sync_parent(&dir.path().join("missing/x"))
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn create_dir_all_creates_every_missing_level_once() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("logs/orders-0");
        create_dir_all(&deep).unwrap();
        assert!(deep.is_dir());
        fs::write(deep.join("00000000000000000000.log"), b"").unwrap();
        // Again: nothing to create, nothing removed.
        create_dir_all(&deep).unwrap();
        assert_eq!(names(&deep), ["00000000000000000000.log"]);
        create_dir_all(&dir.path().join("logs/orders-1")).unwrap();
        assert_eq!(names(&dir.path().join("logs")), ["orders-0", "orders-1"]);
    }

    #[test]
    fn create_dir_all_under_a_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("file"), b"").unwrap();
        create_dir_all(&dir.path().join("file/orders-0")).unwrap_err();
    }

    #[cfg(unix)]
    #[test]
    fn a_private_dir_and_its_new_parents_are_owner_only_and_an_old_one_is_narrowed() {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let quorum = dir.path().join("logs/__cluster_metadata");
        create_private_dir_all(&quorum, 0o700).unwrap();
        assert_eq!(mode(&quorum), 0o700);
        assert_eq!(mode(&dir.path().join("logs")), 0o700);
        assert_eq!(mode(dir.path()), 0o755, "an existing parent is left alone");
        fs::set_permissions(&quorum, fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir_all(&quorum, 0o700).unwrap();
        assert_eq!(mode(&quorum), 0o700);
    }

    #[cfg(unix)]
    #[test]
    fn the_mode_is_exact_even_over_a_wider_leftover() {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broker-1.secret");
        write_atomic_with_mode(&path, b"old", 0o644).unwrap();
        let leftover = dir.path().join("broker-1.secret.tmp");
        fs::write(&leftover, b"").unwrap();
        fs::set_permissions(&leftover, fs::Permissions::from_mode(0o666)).unwrap();
        write_atomic_with_mode(&path, b"secret", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"secret");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(names(dir.path()), ["broker-1.secret"]);
    }
}

//! Power loss of one broker's disk.
//!
//! Each broker's data directory is the mount point of a small ext4 filesystem
//! on its own loop device (a [`Disk`]). Cutting the power is
//! `EXT4_IOC_SHUTDOWN` with `EXT4_GOING_FLAGS_NOLOGFLUSH` on the mounted
//! filesystem: ext4 aborts its journal without committing the running
//! transaction and fails every later operation with `EIO`, so that nothing
//! more reaches the disk and every write not yet fsynced is lost; the
//! filesystem is then unmounted. Power comes back with a new mount, on which
//! ext4 replays its journal, as after a real crash. The harness kills the
//! broker's process (`SIGKILL`) before cutting the power.
//!
//! Everything here needs root (loop devices, `mount`, the shutdown ioctl):
//! [`unavailable`] tells whether it can run, and why not.
//!
//! The workspace forbids `unsafe` code (`unsafe_code = "forbid"`, which no
//! `#[allow]` can lift), and calling `ioctl(2)` from Rust needs an `unsafe`
//! block, so the ioctl is issued by a three-line script run by `python3`
//! (its standard `fcntl.ioctl`), the way `losetup`, `mkfs.ext4` and `mount`
//! are run for the rest. The request number is still computed here, by nix's
//! `request_code_read!`, so that it is right for the target's ioctl encoding.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::Duration;

/// `EXT4_GOING_FLAGS_NOLOGFLUSH`: shut down without flushing the journal.
const EXT4_GOING_FLAGS_NOLOGFLUSH: u32 = 2;

/// Issues `ioctl(fd, request, &flags)` on an fd of the directory `argv[1]`,
/// `request` being `argv[2]` and the `__u32` flags `argv[3]`.
const SHUTDOWN_SCRIPT: &str = "import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.ioctl(fd, int(sys.argv[2]), struct.pack('I', int(sys.argv[3])))";

/// The programs this module runs.
const TOOLS: [&str; 5] = ["losetup", "mkfs.ext4", "mount", "umount", "python3"];

/// Directories searched for those programs before `PATH` (a test's `PATH`
/// may lack the `sbin` ones, and `/usr/bin/python3` starts faster than a
/// version manager's shim).
const SYSTEM_DIRS: [&str; 4] = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/// The ballast file of [`Disk::fill`], in the filesystem's root directory.
const BALLAST: &str = ".chaos-ballast";

/// Size of one write of ballast.
const BALLAST_CHUNK: usize = 1 << 20;

/// Rounds of writing and syncing ballast before [`Disk::fill`] gives up.
const FILL_ROUNDS: usize = 64;

/// How long [`Disk::cut_power`] retries an `umount` that finds the filesystem
/// busy (a killed process's files are closed a moment after the kill).
const BUSY_RETRIES: usize = 40;
const BUSY_WAIT: Duration = Duration::from_millis(50);

/// Why power loss cannot be simulated here, if it cannot (not root, a tool
/// missing, no loop device); `None` when it can.
///
/// Asks `losetup -f` for a free loop device, so it costs a process start.
pub fn unavailable() -> Option<String> {
    match effective_uid() {
        Some(0) => {}
        Some(uid) => return Some(format!("power loss needs root (running as uid {uid})")),
        None => return Some("cannot read the effective uid from /proc/self/status".into()),
    }
    if let Some(missing) = TOOLS.iter().find(|name| find_tool(name).is_none()) {
        return Some(format!("{missing} not found"));
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no /dev/loop-control: loop devices are not available".into());
    }
    match run(Command::new(tool("losetup")).arg("-f")) {
        Ok(device) => {
            let device = device.trim();
            if Path::new(device).exists() {
                None
            } else {
                Some(format!("free loop device {device} has no device node"))
            }
        }
        Err(err) => Some(format!("no free loop device: {err}")),
    }
}

/// A small ext4 filesystem on a loop device, mounted on a directory, whose
/// power can be cut.
///
/// Dropping it unmounts the filesystem, detaches the loop device and removes
/// the image file (the mount point directory stays).
#[derive(Debug)]
pub struct Disk {
    /// The sparse image file backing the loop device.
    image: PathBuf,
    /// The loop device, `/dev/loopN`.
    device: PathBuf,
    /// Where the filesystem is mounted while the power is on.
    mount: PathBuf,
    /// Whether it is mounted (power on).
    mounted: bool,
}

impl Disk {
    /// Creates a sparse image file of `size_mb` MiB at `image` (replacing any
    /// file there), attaches it to a free loop device (`losetup -f --show`),
    /// makes ext4 on it (`mkfs.ext4 -q -F`), creates `mount` if needed and
    /// mounts it there.
    ///
    /// The filesystem has no blocks reserved for root (`-m 0`), so that
    /// [`fill`](Self::fill) runs a root process out of space too, and its inode
    /// tables and journal are written by `mkfs` rather than by a kernel thread
    /// after mounting. On an error, whatever was set up is undone.
    pub fn create(image: &Path, mount: &Path, size_mb: u64) -> io::Result<Disk> {
        let bytes = size_mb.checked_mul(1 << 20).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("disk size {size_mb} MiB is too large"),
            )
        })?;
        File::create(image)
            .and_then(|file| file.set_len(bytes))
            .map_err(|err| annotate(err, format!("creating image {}", image.display())))?;
        let device = match run(Command::new(tool("losetup"))
            .args(["-f", "--show"])
            .arg(image))
        {
            Ok(out) => PathBuf::from(out.trim()),
            Err(err) => {
                let _ = fs::remove_file(image);
                return Err(err);
            }
        };
        // From here on an error drops `disk`, which detaches the device and
        // removes the image.
        let mut disk = Disk {
            image: image.to_path_buf(),
            device,
            mount: mount.to_path_buf(),
            mounted: false,
        };
        run(Command::new(tool("mkfs.ext4"))
            .args([
                "-q",
                "-F",
                "-m",
                "0",
                "-E",
                "lazy_itable_init=0,lazy_journal_init=0",
            ])
            .arg(&disk.device))?;
        fs::create_dir_all(mount)
            .map_err(|err| annotate(err, format!("creating mount point {}", mount.display())))?;
        disk.mount()?;
        Ok(disk)
    }

    /// The directory the filesystem is mounted on (while the power is on).
    pub fn mount_point(&self) -> &Path {
        &self.mount
    }

    /// The loop device, `/dev/loopN`.
    pub fn device(&self) -> &Path {
        &self.device
    }

    /// Whether the filesystem is mounted, i.e. the power is on.
    pub fn is_mounted(&self) -> bool {
        self.mounted
    }

    /// Cuts the power: `EXT4_IOC_SHUTDOWN` with `EXT4_GOING_FLAGS_NOLOGFLUSH`
    /// on the mount, then unmounts it. Writes not yet fsynced are lost.
    ///
    /// The processes using the filesystem must be dead already: an `umount`
    /// that still finds it busy is retried for a couple of seconds, then
    /// reported as an error (the filesystem stays mounted, and shut down). It
    /// is not unmounted lazily then: a new mount of the device would get the
    /// old, shut-down filesystem back while that one is still in use.
    pub fn cut_power(&mut self) -> io::Result<()> {
        self.require_mounted("cut_power")?;
        shutdown_nologflush(&self.mount)?;
        let mut attempt = 0;
        loop {
            match run(Command::new(tool("umount")).arg(&self.mount)) {
                Ok(_) => break,
                Err(err) if attempt < BUSY_RETRIES && err.to_string().contains("busy") => {
                    attempt += 1;
                    thread::sleep(BUSY_WAIT);
                }
                Err(err) => return Err(err),
            }
        }
        self.mounted = false;
        Ok(())
    }

    /// Turns the power back on: mounts the filesystem again, and ext4 replays
    /// its journal.
    pub fn power_on(&mut self) -> io::Result<()> {
        if self.mounted {
            return Err(io::Error::other(format!(
                "power_on: {} is mounted already",
                self.mount.display()
            )));
        }
        self.mount()
    }

    /// Fills the filesystem with a ballast file so that at most `leave_bytes`
    /// remain free (for `ENOSPC` faults), or until a write fails with
    /// `ENOSPC`; [`drain`](Self::drain) removes the ballast. The ballast is
    /// fsynced, so it survives a power cut. Calling it again adds ballast.
    pub fn fill(&self, leave_bytes: u64) -> io::Result<()> {
        self.require_mounted("fill")?;
        let path = self.mount.join(BALLAST);
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|err| annotate(err, format!("opening {}", path.display())))?;
        let zeros = vec![0u8; BALLAST_CHUNK];
        for _ in 0..FILL_ROUNDS {
            let (free, block) = free_space(&self.mount)?;
            if free <= leave_bytes {
                return Ok(());
            }
            // Whole blocks, so that every write takes new blocks.
            let mut left = (free - leave_bytes).div_ceil(block) * block;
            let mut full = false;
            while left > 0 {
                let len = usize::try_from(left).map_or(BALLAST_CHUNK, |l| l.min(BALLAST_CHUNK));
                match file.write(&zeros[..len]) {
                    Ok(0) => {
                        full = true;
                        break;
                    }
                    Ok(written) => left = left.saturating_sub(written as u64),
                    Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                    Err(err) if err.kind() == io::ErrorKind::StorageFull => {
                        full = true;
                        break;
                    }
                    Err(err) => {
                        return Err(annotate(err, format!("writing {}", path.display())));
                    }
                }
            }
            match file.sync_all() {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::StorageFull => full = true,
                Err(err) => return Err(annotate(err, format!("fsync of {}", path.display()))),
            }
            if full {
                return Ok(());
            }
        }
        Err(io::Error::other(format!(
            "fill: {} still has more than {leave_bytes} bytes free after {FILL_ROUNDS} rounds",
            self.mount.display()
        )))
    }

    /// Removes the ballast of [`fill`](Self::fill), if any, and commits the
    /// removal so that the freed space can be allocated at once.
    pub fn drain(&self) -> io::Result<()> {
        self.require_mounted("drain")?;
        let path = self.mount.join(BALLAST);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(annotate(err, format!("removing {}", path.display()))),
        }
        File::open(&self.mount)
            .and_then(|dir| dir.sync_all())
            .map_err(|err| annotate(err, format!("fsync of {}", self.mount.display())))
    }

    fn mount(&mut self) -> io::Result<()> {
        run(Command::new(tool("mount"))
            .args(["-t", "ext4"])
            .arg(&self.device)
            .arg(&self.mount))?;
        self.mounted = true;
        Ok(())
    }

    fn require_mounted(&self, what: &str) -> io::Result<()> {
        if self.mounted {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "{what}: {} is not mounted (power is off)",
                self.mount.display()
            )))
        }
    }
}

impl Drop for Disk {
    /// Unmounts the filesystem if mounted (lazily if it is busy), detaches the
    /// loop device and removes the image; problems are printed, never raised.
    fn drop(&mut self) {
        if self.mounted {
            unmount_or_detach_lazily(&self.mount);
            self.mounted = false;
        }
        // A device still in use (after a lazy unmount) is detached by the
        // kernel once it is released.
        if let Err(err) = run(Command::new(tool("losetup")).arg("-d").arg(&self.device)) {
            warn(&err.to_string());
        }
        if let Err(err) = fs::remove_file(&self.image) {
            if err.kind() != io::ErrorKind::NotFound {
                warn(&format!("removing {}: {err}", self.image.display()));
            }
        }
    }
}

/// Detaches loop devices (and unmounts their mounts) whose backing file
/// `stale` says is a stale one, left behind by a killed earlier run. `stale`
/// sees the kernel's view of the path (absolute, symbolic links resolved); it
/// must not claim disks in use: they would be detached too. Image files are not
/// removed. Returns how many were detached.
pub fn remove_stale(stale: impl Fn(&Path) -> bool) -> usize {
    let Ok(entries) = fs::read_dir("/sys/block") else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.as_bytes().starts_with(b"loop") {
            continue;
        }
        // Present only while a file is attached.
        let Ok(backing) = fs::read(entry.path().join("loop/backing_file")) else {
            continue;
        };
        let backing = Path::new(OsStr::from_bytes(backing.trim_ascii_end()));
        if !stale(backing) {
            continue;
        }
        let device = Path::new("/dev").join(&name);
        for mount in mounts_of(&device).iter().rev() {
            unmount_or_detach_lazily(mount);
        }
        match run(Command::new(tool("losetup")).arg("-d").arg(&device)) {
            Ok(_) => removed += 1,
            Err(err) => warn(&err.to_string()),
        }
    }
    removed
}

/// `EXT4_IOC_SHUTDOWN` (`_IOR('X', 125, __u32)`, the number of XFS's
/// `XFS_IOC_GOINGDOWN`) with `EXT4_GOING_FLAGS_NOLOGFLUSH`, on an fd of the
/// directory `mount`.
fn shutdown_nologflush(mount: &Path) -> io::Result<()> {
    let request = nix::request_code_read!(b'X', 125, std::mem::size_of::<u32>());
    let out = Command::new(tool("python3"))
        .args(["-c", SHUTDOWN_SCRIPT])
        .arg(mount)
        .arg(request.to_string())
        .arg(EXT4_GOING_FLAGS_NOLOGFLUSH.to_string())
        .output()
        .map_err(|err| annotate(err, "running python3 for EXT4_IOC_SHUTDOWN".into()))?;
    if out.status.success() {
        return Ok(());
    }
    // A Python traceback: its last line names the error.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let reason = stderr
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .map_or_else(|| out.status.to_string(), |line| line.trim().to_string());
    Err(io::Error::other(format!(
        "EXT4_IOC_SHUTDOWN on {} failed: {reason}",
        mount.display()
    )))
}

/// Unmounts `mount`, falling back to a lazy unmount; problems are printed.
fn unmount_or_detach_lazily(mount: &Path) {
    if let Err(err) = run(Command::new(tool("umount")).arg(mount)) {
        warn(&err.to_string());
        if let Err(err) = run(Command::new(tool("umount")).arg("-l").arg(mount)) {
            warn(&err.to_string());
        }
    }
}

/// Bytes free for an unprivileged writer on the filesystem of `path`, and its
/// block size.
fn free_space(path: &Path) -> io::Result<(u64, u64)> {
    let stat = nix::sys::statvfs::statvfs(path).map_err(|errno| {
        annotate(
            io::Error::from(errno),
            format!("statvfs of {}", path.display()),
        )
    })?;
    // `c_ulong` and `fsblkcnt_t`: `u64` on 64-bit Linux, `u32` on some 32-bit.
    let block = (stat.fragment_size() as u64).max(1);
    Ok((
        (stat.blocks_available() as u64).saturating_mul(block),
        block,
    ))
}

/// The mount points of `device`, in the order they were mounted.
fn mounts_of(device: &Path) -> Vec<PathBuf> {
    let Ok(table) = fs::read("/proc/self/mounts") else {
        return Vec::new();
    };
    table
        .split(|&byte| byte == b'\n')
        .filter_map(|line| {
            let mut fields = line.split(|&byte| byte == b' ');
            let source = fields.next()?;
            let target = fields.next()?;
            (unescape_mount_field(source) == device.as_os_str().as_bytes())
                .then(|| PathBuf::from(OsStr::from_bytes(&unescape_mount_field(target))))
        })
        .collect()
}

/// Undoes the octal escapes (`\040` for a space) of a `/proc/self/mounts`
/// field.
fn unescape_mount_field(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field.get(i + 1..i + 4).filter(|digits| {
            field[i] == b'\\' && digits.iter().all(|digit| (b'0'..=b'7').contains(digit))
        });
        match octal {
            Some(digits) => {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, digit| acc * 8 + u32::from(digit - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

/// The effective uid, from `/proc/self/status` (nix's `geteuid` needs its
/// `user` feature).
fn effective_uid() -> Option<u32> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("Uid:"))?;
    // Real, effective, saved and filesystem uid.
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Where the program `name` is: the system directories first, then `PATH`.
fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    SYSTEM_DIRS
        .iter()
        .map(PathBuf::from)
        .chain(std::env::split_paths(&path))
        .map(|dir| dir.join(name))
        .find(|candidate| {
            fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

/// The program to run for `name`: where [`find_tool`] found it, else the bare
/// name (and running it fails with a clear error).
fn tool(name: &str) -> PathBuf {
    find_tool(name).unwrap_or_else(|| PathBuf::from(name))
}

/// Runs `command` and returns its standard output; an error names the
/// command and gives its standard error.
fn run(command: &mut Command) -> io::Result<String> {
    let shown = show(command);
    let out = command
        .output()
        .map_err(|err| annotate(err, format!("running {shown}")))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let reason = match stderr.trim() {
        "" => out.status.to_string(),
        text => text.to_string(),
    };
    Err(io::Error::other(format!("{shown} failed: {reason}")))
}

/// `command` as a shell line, with the program's bare name.
fn show(command: &Command) -> String {
    let program = Path::new(command.get_program());
    let program = program.file_name().unwrap_or(program.as_os_str());
    let mut line = program.to_string_lossy().into_owned();
    for arg in command.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    line
}

/// `err` with `context` before its message, keeping its kind.
fn annotate(err: io::Error, context: String) -> io::Error {
    io::Error::new(err.kind(), format!("{context}: {err}"))
}

/// Prints a problem that cannot be returned (in `Drop`); never panics.
fn warn(message: &str) {
    let _ = writeln!(io::stderr(), "chaos power: {message}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Whether to skip a test that needs root and loop devices (and why).
    fn skip() -> bool {
        match unavailable() {
            Some(why) => {
                eprintln!("skipping: power loss unavailable: {why}");
                true
            }
            None => false,
        }
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i % 251) as u8 ^ seed)
            .collect::<Vec<u8>>()
    }

    fn fsync_dir(dir: &Path) {
        File::open(dir).unwrap().sync_all().unwrap();
    }

    /// The backing file of `device`, if one is attached.
    fn backing_file(device: &Path) -> Option<String> {
        let name = device.file_name()?.to_str()?;
        fs::read_to_string(format!("/sys/block/{name}/loop/backing_file")).ok()
    }

    #[test]
    fn power_loss_discards_unsynced_writes() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("disk.img");
        let started = Instant::now();
        let mut disk = Disk::create(&image, &dir.path().join("mnt"), 32).unwrap();
        let created = started.elapsed();
        let mount = disk.mount_point().to_path_buf();
        assert!(mounts_of(disk.device()).contains(&mount));

        let a = mount.join("a");
        let data_a = pattern(64 << 10, 1);
        let mut file = File::create(&a).unwrap();
        file.write_all(&data_a).unwrap();
        file.sync_all().unwrap();
        drop(file);
        fsync_dir(&mount);

        let b = mount.join("b");
        let data_b = pattern(256 << 10, 2);
        let mut file = File::create(&b).unwrap();
        file.write_all(&data_b).unwrap();
        drop(file);
        assert_eq!(fs::metadata(&b).unwrap().len(), data_b.len() as u64);

        let started = Instant::now();
        disk.cut_power().unwrap();
        let cut = started.elapsed();
        assert!(!disk.is_mounted());
        assert!(!mounts_of(disk.device()).contains(&mount));
        let started = Instant::now();
        disk.power_on().unwrap();
        let powered = started.elapsed();

        assert_eq!(fs::read(&a).unwrap(), data_a, "fsynced file A changed");
        let outcome = match fs::read(&b) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => "missing".to_string(),
            Err(err) => panic!("reading B: {err}"),
            Ok(bytes) => {
                assert!(
                    bytes.len() < data_b.len(),
                    "unsynced file B survived whole ({} bytes)",
                    bytes.len()
                );
                format!("{} of {} bytes", bytes.len(), data_b.len())
            }
        };
        eprintln!(
            "create {created:?}, cut_power {cut:?}, power_on {powered:?}; unsynced B: {outcome}"
        );

        let device = disk.device().to_path_buf();
        let started = Instant::now();
        drop(disk);
        eprintln!("drop {:?}", started.elapsed());
        assert!(!mounts_of(&device).contains(&mount));
        assert!(
            backing_file(&device).is_none_or(|file| !file.starts_with(&*image.to_string_lossy())),
            "{} still attached",
            device.display()
        );
        assert!(!image.exists());
    }

    #[test]
    fn fill_runs_out_of_space_until_drained() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::create(&dir.path().join("disk.img"), &dir.path().join("mnt"), 32).unwrap();
        let mount = disk.mount_point().to_path_buf();
        let leave = 64 << 10;
        let started = Instant::now();
        disk.fill(leave).unwrap();
        let filled = started.elapsed();
        let (free, _) = free_space(&mount).unwrap();
        assert!(free <= leave, "{free} bytes free after fill({leave})");

        let write = |name: &str| -> io::Result<()> {
            let mut file = File::create(mount.join(name))?;
            file.write_all(&pattern(1 << 20, 3))?;
            file.sync_all()
        };
        let err = write("full").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull, "{err}");

        disk.drain().unwrap();
        disk.drain().unwrap(); // nothing left to drain
        let (free_after, _) = free_space(&mount).unwrap();
        assert!(free_after > 16 << 20, "{free_after} bytes free after drain");
        write("roomy").unwrap();
        eprintln!("fill {filled:?}: {free} bytes free, {free_after} after drain");
    }

    #[test]
    fn remove_stale_detaches_what_a_killed_run_left() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::create(&dir.path().join("disk.img"), &dir.path().join("mnt"), 16).unwrap();
        let device = disk.device().to_path_buf();
        let mount = disk.mount_point().to_path_buf();
        // As if the process had been killed: no Drop.
        std::mem::forget(disk);
        let prefix = dir.path().canonicalize().unwrap();
        assert_eq!(remove_stale(|p| p.starts_with(&prefix)), 1);
        assert!(!mounts_of(&device).contains(&mount));
        assert!(
            backing_file(&device).is_none_or(|file| !file.starts_with(&*prefix.to_string_lossy()))
        );
        assert_eq!(remove_stale(|p| p.starts_with(&prefix)), 0);
    }

    #[test]
    fn errors_name_the_command_and_its_stderr() {
        let Some(losetup) = find_tool("losetup") else {
            eprintln!("skipping: no losetup");
            return;
        };
        let err = run(Command::new(losetup).args(["-d", "/nonexistent/loop"])).unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("losetup -d /nonexistent/loop failed: "),
            "{message}"
        );
        assert!(message.len() > "losetup -d /nonexistent/loop failed: ".len());
    }

    #[test]
    fn unescapes_mount_fields() {
        assert_eq!(unescape_mount_field(br"/mnt/a\040b"), b"/mnt/a b");
        assert_eq!(unescape_mount_field(br"/x\134y\01"), b"/x\\y\\01");
        assert_eq!(unescape_mount_field(b"/dev/loop3"), b"/dev/loop3");
    }
}

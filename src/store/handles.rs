//! File-system access through directory handles: the one way cleanup, validation and the
//! staging-root marker reach the staging tree.
//!
//! A path under the staging root is never resolved as a whole. Each directory is opened
//! relative to its already-checked parent with `O_DIRECTORY | O_NOFOLLOW` (so a symlink, or
//! anything that is not a directory, fails to open instead of being followed), and the final
//! entry is inspected (`fstatat` with `AT_SYMLINK_NOFOLLOW`), opened (`O_NOFOLLOW`) or removed
//! (`unlinkat`) relative to the handle of the directory that holds it. So a directory swapped
//! for a symlink at any moment can make an operation fail or skip, never reach outside the
//! root: check and act happen on the same object.
//!
//! Invariant: no function here follows a symlink below the root, and every name passed to the
//! kernel is one plain component (no `/`, not empty, not `.` or `..`).

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// The name of the staging-root marker file, directly in the root (see
/// [`crate::STAGING_ROOT_MARKER`]).
pub(crate) const MARKER_NAME: &str = crate::STAGING_ROOT_MARKER;
/// The first line of a marker file; the second names the store's staging identity.
const MARKER_HEADER: &str = "manifestdb staging root";
/// Largest marker file read, in bytes: a marker is two short lines.
pub(crate) const MARKER_BYTES_MAX: u64 = 4096;

/// Whether `name` is one plain path component.
pub(crate) fn is_plain_component(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

fn bad_component(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{name:?} is not a plain path component"))
}

/// Opens a directory by path (the staging root itself), refusing a symlink as its last
/// component.
pub(crate) fn open_root(root: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(root, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?)
}

/// Opens the directory `name` inside `parent`, refusing a symlink or a non-directory.
pub(crate) fn open_dir_at(parent: BorrowedFd<'_>, name: &str) -> io::Result<OwnedFd> {
    if !is_plain_component(name) {
        return Err(bad_component(name));
    }
    Ok(rustix::fs::openat(parent, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?)
}

/// Opens the regular file `name` inside `parent` for reading, refusing a symlink. The caller
/// checks the type of what it opened with [`fstat`] (a FIFO or device opens too).
pub(crate) fn open_file_at(parent: BorrowedFd<'_>, name: &str) -> io::Result<std::fs::File> {
    if !is_plain_component(name) {
        return Err(bad_component(name));
    }
    let fd = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    Ok(std::fs::File::from(fd))
}

/// Opens the directory at `components` below `root`, one handle at a time.
pub(crate) fn open_dir_chain(root: BorrowedFd<'_>, components: &[&str]) -> io::Result<OwnedFd> {
    let mut current = rustix::fs::openat(root, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    for component in components {
        current = open_dir_at(current.as_fd(), component)?;
    }
    Ok(current)
}

/// What one entry is, from `fstatat` without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) kind: Kind,
    pub(crate) device: u64,
    pub(crate) inode: u64,
    pub(crate) size_bytes: u64,
    /// Modification time, nanoseconds since the Unix epoch (0 before it).
    pub(crate) modified_at_ns: u64,
    /// Status-change time (ctime), nanoseconds since the Unix epoch (0 before it).
    pub(crate) changed_at_ns: u64,
}

/// The kinds of entry the staging tree cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

impl Stat {
    /// Modification time in milliseconds since the Unix epoch.
    pub(crate) fn modified_at_ms(&self) -> u64 {
        self.modified_at_ns / 1_000_000
    }
}

fn ns(seconds: i64, nanos: u64) -> u64 {
    u64::try_from(seconds).map_or(0, |s| s.saturating_mul(1_000_000_000).saturating_add(nanos))
}

// The field types of `struct stat` differ between architectures; every one converts without loss
// into the widths used here on the 64-bit Linux targets manifestdb supports.
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)] // reason: the casts are no-ops on some targets only
fn from_raw(st: &rustix::fs::Stat) -> Stat {
    let kind = match FileType::from_raw_mode(st.st_mode as _) {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    };
    Stat {
        kind,
        device: st.st_dev as u64,
        inode: st.st_ino as u64,
        size_bytes: u64::try_from(st.st_size as i64).unwrap_or(0),
        modified_at_ns: ns(st.st_mtime as i64, st.st_mtime_nsec as u64),
        changed_at_ns: ns(st.st_ctime as i64, st.st_ctime_nsec as u64),
    }
}

/// Describes the entry `name` of `parent` itself (a symlink is described, not followed).
pub(crate) fn stat_at(parent: BorrowedFd<'_>, name: &str) -> io::Result<Stat> {
    if !is_plain_component(name) {
        return Err(bad_component(name));
    }
    Ok(from_raw(&rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?))
}

/// Describes an open file.
pub(crate) fn fstat(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    Ok(from_raw(&rustix::fs::fstat(fd)?))
}

/// Removes the file or symlink `name` of `parent` (a symlink's target is untouched).
pub(crate) fn unlink_at(parent: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    if !is_plain_component(name) {
        return Err(bad_component(name));
    }
    Ok(rustix::fs::unlinkat(parent, name, AtFlags::empty())?)
}

/// Creates the directory `name` inside `parent` (mode `0777` before the umask, as
/// `std::fs::create_dir`). The kernel never follows a symlink named `name`: an existing entry
/// of any kind is `EEXIST`.
pub(crate) fn mkdir_at(parent: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    if !is_plain_component(name) {
        return Err(bad_component(name));
    }
    Ok(rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o777))?)
}

/// Removes the empty directory `name` of `parent`; the kernel refuses a non-empty one and a
/// symlink.
pub(crate) fn rmdir_at(parent: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    if !is_plain_component(name) {
        return Err(bad_component(name));
    }
    Ok(rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?)
}

/// The plain names in a directory (`.` and `..` left out), in no particular order. Names that
/// are not UTF-8 come back as `Err(lossy rendering)`.
pub(crate) fn list(dir: BorrowedFd<'_>) -> io::Result<Vec<std::result::Result<String, String>>> {
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        out.push(std::str::from_utf8(name).map(str::to_owned).map_err(|_| String::from_utf8_lossy(name).into_owned()));
    }
    Ok(out)
}

/// Whether the directory holds nothing but (optionally) the entries named in `except`.
pub(crate) fn is_empty_except(dir: BorrowedFd<'_>, except: &[&str]) -> io::Result<bool> {
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." || except.iter().any(|e| e.as_bytes() == name) {
            continue;
        }
        return Ok(false);
    }
    Ok(true)
}

/// Whether the root holds nothing but its marker, or a marker's temporary file left by a
/// writer killed while writing it (see [`write_marker`]).
pub(crate) fn is_empty_but_marker(root: BorrowedFd<'_>) -> io::Result<bool> {
    let tmp_prefix = format!("{MARKER_NAME}.tmp-");
    for entry in rustix::fs::Dir::read_from(root)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." || name == MARKER_NAME.as_bytes() || name.starts_with(tmp_prefix.as_bytes()) {
            continue;
        }
        return Ok(false);
    }
    Ok(true)
}

/// What the root's marker file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Marker {
    /// No marker file.
    Absent,
    /// A marker naming this staging identity.
    Present(String),
    /// Something named like the marker that is not one (a symlink, a directory, garbage).
    Damaged(String),
}

/// Reads the marker file of the root held by `root`.
pub(crate) fn read_marker(root: BorrowedFd<'_>) -> io::Result<Marker> {
    let mut file = match open_file_at(root, MARKER_NAME) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Marker::Absent),
        // ELOOP: the marker's name is a symlink, which is never followed.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Ok(Marker::Damaged("it is a symlink".into()));
        }
        Err(e) => return Err(e),
    };
    let stat = fstat(file.as_fd())?;
    if stat.kind != Kind::File {
        return Ok(Marker::Damaged("it is not a regular file".into()));
    }
    let mut text = String::new();
    if Read::by_ref(&mut file).take(MARKER_BYTES_MAX).read_to_string(&mut text).is_err() {
        return Ok(Marker::Damaged("it is not text".into()));
    }
    Ok(parse_marker(&text))
}

/// What a marker's text says (a local root's marker file or an object root's marker object).
pub(crate) fn parse_marker(text: &str) -> Marker {
    let mut lines = text.lines();
    match (lines.next(), lines.next().and_then(|l| l.strip_prefix("identity "))) {
        (Some(MARKER_HEADER), Some(id)) if !id.is_empty() => Marker::Present(id.to_owned()),
        _ => Marker::Damaged("it does not name a staging identity".into()),
    }
}

/// The text of a marker naming `identity`.
pub(crate) fn marker_text(identity: &str) -> String {
    format!("{MARKER_HEADER}\nidentity {identity}\n")
}

/// Writes the marker naming `identity` into the root durably: a temporary file, synced,
/// renamed into place, the root synced.
pub(crate) fn write_marker(root: BorrowedFd<'_>, identity: &str) -> io::Result<()> {
    let tmp = format!("{MARKER_NAME}.tmp-{}", std::process::id());
    match rustix::fs::unlinkat(root, tmp.as_str(), AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = rustix::fs::openat(
        root,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )?;
    let mut file = std::fs::File::from(fd);
    file.write_all(marker_text(identity).as_bytes())?;
    file.sync_all()?;
    drop(file);
    rustix::fs::renameat(root, tmp.as_str(), root, MARKER_NAME)?;
    rustix::fs::fsync(root)?;
    Ok(())
}

/// A new random staging identity: 128 bits from the kernel, in hex.
pub(crate) fn new_identity() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        filled += rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty())?;
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether an error means "no regular file there": absent (`ENOENT`), a symlink refused by
/// `O_NOFOLLOW` (`ELOOP`), or a component that is not a directory (`ENOTDIR`). Every other
/// error (permission denied, an I/O error) is a fault the caller may retry.
pub(crate) fn is_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || [rustix::io::Errno::LOOP, rustix::io::Errno::NOTDIR].iter().any(|errno| e.raw_os_error() == Some(errno.raw_os_error()))
}

/// Opens a reported file for reading through handles, as [`observe_file`] finds it: every
/// directory from `root` without following symlinks, the file itself with `O_NOFOLLOW`, its
/// type and size from the same descriptor. `Ok(None)`: no regular file there.
///
/// # Errors
/// Any other I/O error, for the caller to retry: never a verdict.
pub(crate) fn open_regular_file(root: &Path, dirs: &str, file_path: &str) -> io::Result<Option<(std::fs::File, u64)>> {
    let absent = |e: io::Error| if is_absent(&e) { Ok(None) } else { Err(e) };
    let mut components: Vec<&str> = dirs.split('/').filter(|c| !c.is_empty()).collect();
    components.extend(file_path.split('/'));
    let Some(leaf) = components.pop() else { return Ok(None) };
    let root_fd = match open_root(root) {
        Ok(fd) => fd,
        Err(e) => return absent(e),
    };
    let parent = match open_dir_chain(root_fd.as_fd(), &components) {
        Ok(fd) => fd,
        Err(e) => return absent(e),
    };
    let file = match open_file_at(parent.as_fd(), leaf) {
        Ok(file) => file,
        Err(e) => return absent(e),
    };
    let stat = fstat(file.as_fd())?;
    if stat.kind != Kind::File {
        return Ok(None);
    }
    Ok(Some((file, stat.size_bytes)))
}

/// What was seen of a reported file, through handles: `root` opened by path, then every
/// directory of `dirs` (`/`-separated, may be empty) and of `file_path` relative to its parent
/// without following symlinks, the file described (and with `checksum`, read) through one
/// descriptor, so its size and its content come from the same object.
///
/// `Ok(None)`: no regular file there (missing, a symlink on the way, not a regular file).
///
/// # Errors
/// Any other I/O error, for the caller to retry: never a verdict.
pub(crate) fn observe_file(root: &Path, dirs: &str, file_path: &str, checksum: bool) -> io::Result<Option<(u64, Option<u32>)>> {
    let absent = |e: io::Error| if is_absent(&e) { Ok(None) } else { Err(e) };
    let mut components: Vec<&str> = dirs.split('/').filter(|c| !c.is_empty()).collect();
    components.extend(file_path.split('/'));
    let Some(leaf) = components.pop() else { return Ok(None) };
    let root_fd = match open_root(root) {
        Ok(fd) => fd,
        Err(e) => return absent(e),
    };
    let parent = match open_dir_chain(root_fd.as_fd(), &components) {
        Ok(fd) => fd,
        Err(e) => return absent(e),
    };
    if !checksum {
        return match stat_at(parent.as_fd(), leaf) {
            Ok(stat) if stat.kind == Kind::File => Ok(Some((stat.size_bytes, None))),
            Ok(_) => Ok(None),
            Err(e) => absent(e),
        };
    }
    let mut file = match open_file_at(parent.as_fd(), leaf) {
        Ok(file) => file,
        Err(e) => return absent(e),
    };
    let stat = fstat(file.as_fd())?;
    if stat.kind != Kind::File {
        return Ok(None);
    }
    let crc = crc32_of(&mut file)?;
    Ok(Some((stat.size_bytes, Some(crc))))
}

/// The CRC32 (IEEE) of everything `reader` yields, read in 64 KiB chunks.
pub(crate) fn crc32_of(reader: &mut impl Read) -> io::Result<u32> {
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok(hasher.finalize());
        }
        hasher.update(&buf[..n]);
    }
}

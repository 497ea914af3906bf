//! File-system side of the store: file observation for validation, and the syncs that make
//! data, creation, renames and removals durable (a begin's directories are made in
//! `begin_dirs`).
//!
//! Invariant: nothing here follows a symlink inside the staging root. A path whose component
//! is a symlink is treated as missing (observation) or refused (durability syncs), so a
//! planted link cannot make the store read anything outside the root.
//!
//! Invariant (DOMAIN 11): every fsync the store makes of staging data goes through
//! [`sync_handle`], once per file or directory per operation, on the handle that was opened
//! (without following symlinks) and checked. With the `testing` feature each sync is first
//! reported to the calling thread's observer (`testing::observe_syncs`), which may record it or
//! fail it; that is the seam the durability tests observe.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::error::{Error, Result};
use crate::model::{FileCheck, FileEntry};
use crate::rules::validate::{FileObservation, NotDurable};

/// Computes the CRC32 (IEEE) of a file's content, as [`FileEntry::crc32`] expects.
///
/// # Errors
/// [`Error::Io`] if the file cannot be read.
pub fn file_crc32(path: &Path) -> Result<u32> {
    let mut file = File::open(path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    crc32_of(&mut file).map_err(|e| Error::io(format!("reading {}", path.display()), e))
}

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

/// Describes a file for a candidate: its path relative to `staging_dir`, size and CRC32.
///
/// Never follows a symlink, as validation does not: every directory of `relative` is opened
/// relative to its parent with `O_NOFOLLOW`, and the size and the checksum come from one
/// descriptor of the file itself.
///
/// # Errors
/// [`Error::InvalidInput`] if `relative` is not a plain relative path, or names a symlink, passes
/// through one, or is not a regular file; [`Error::Io`] if the file is missing or cannot be read.
pub fn describe_file(staging_dir: &Path, relative: &str) -> Result<FileEntry> {
    crate::rules::ids::check_file_path(relative)?;
    let path = staging_dir.join(relative);
    match super::handles::observe_file(staging_dir, "", relative, true) {
        Ok(Some((size_bytes, Some(crc32)))) => Ok(FileEntry { path: relative.to_owned(), size_bytes, crc32 }),
        Ok(_) => match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Error::io(format!("describing {}", path.display()), e)),
            _ => Err(Error::invalid(
                "file path",
                relative,
                "is a symlink, passes through one, or is not a regular file; manifestdb never follows symlinks in staging",
            )),
        },
        Err(e) => Err(Error::io(format!("reading {}", path.display()), e)),
    }
}

/// Observes a reported file under a staging directory without following symlinks (through
/// directory handles, see `handles::observe_file`). For `verify`, which reports an I/O error
/// as a finding; validation and publish use `handles::observe_file` and treat one as an error.
pub(crate) fn observe(staging_dir: &Path, file: &FileEntry, check: FileCheck) -> FileObservation {
    match super::handles::observe_file(staging_dir, "", &file.path, check == FileCheck::SizeAndChecksum) {
        Ok(Some((size_bytes, crc32))) => FileObservation::Present { size_bytes, crc32 },
        Ok(None) => FileObservation::Missing,
        Err(e) => FileObservation::Unreadable(e.to_string()),
    }
}

/// What one sync makes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyncTarget {
    /// A regular file's content and size (`fdatasync`).
    File,
    /// A directory's entries (`fsync`).
    Dir,
    /// The whole file system the handle is on (`syncfs`): every dirty inode, its journal, the
    /// device's cache.
    FileSystem,
}

/// The one place the store syncs staging data: the observer seam (feature `testing`), then
/// `fdatasync` for a file, `fsync` for a directory, on the handle the caller opened and checked.
pub(crate) fn sync_handle(fd: BorrowedFd<'_>, path: &Path, target: SyncTarget) -> io::Result<()> {
    #[cfg(feature = "testing")]
    crate::testing::before_sync(path, target != SyncTarget::File, target == SyncTarget::FileSystem)?;
    #[cfg(not(feature = "testing"))]
    let _ = path;
    match target {
        SyncTarget::File => rustix::fs::fdatasync(fd)?,
        SyncTarget::Dir => rustix::fs::fsync(fd)?,
        SyncTarget::FileSystem => rustix::fs::syncfs(fd)?,
    }
    Ok(())
}

fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?)
}

fn open_dir_at(parent: BorrowedFd<'_>, name: &str) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(parent, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?)
}

/// Flushes a directory's entries (a created, renamed or removed entry in it) to disk. The
/// directory itself is opened without following a symlink.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    let handle = open_dir(dir).map_err(|e| Error::io(format!("opening directory {} to sync it", dir.display()), e))?;
    sync_handle(handle.as_fd(), dir, SyncTarget::Dir).map_err(|e| Error::io(format!("syncing directory {}", dir.display()), e))
}

/// Flushes a regular file's content to disk (the new store file before it is linked in).
pub(crate) fn sync_file(path: &Path) -> Result<()> {
    let handle = File::open(path).map_err(|e| Error::io(format!("opening {} to sync it", path.display()), e))?;
    sync_handle(handle.as_fd(), path, SyncTarget::File).map_err(|e| Error::io(format!("syncing {}", path.display()), e))
}

/// Creates `path` and every missing ancestor, one directory at a time, syncing the parent of
/// each directory it creates (and the directory itself), so that a power loss cannot take away
/// a directory an acknowledged operation relies on. An existing `path` costs no sync.
pub(crate) fn create_dir_all_durable(path: &Path, mode: u32) -> Result<()> {
    let mut missing = Vec::new();
    let mut probe = Some(path);
    while let Some(dir) = probe.filter(|d| !d.as_os_str().is_empty()) {
        match fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => break,
            Ok(_) => {
                return Err(Error::io(format!("creating directory {}", dir.display()), io::Error::other("exists and is not a directory")));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => missing.push(dir.to_path_buf()),
            Err(e) => return Err(Error::io(format!("inspecting {}", dir.display()), e)),
        }
        probe = dir.parent();
    }
    for dir in missing.iter().rev() {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        // Made with `mode` (the umask may take bits away, never add any), then given exactly
        // `mode`, so no moment exists where it is more open than asked.
        match fs::DirBuilder::new().mode(mode).create(dir) {
            Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(mode))
                .map_err(|e| Error::io(format!("setting the mode of {}", dir.display()), e))?,
            // Another process made it in between; it syncs what it made.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => continue,
            Err(e) => return Err(Error::io(format!("creating directory {}", dir.display()), e)),
        }
        sync_dir(dir)?;
        let parent = match dir.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        sync_dir(parent)?;
    }
    Ok(())
}

/// The directories a begin needs durable: each one it created, its attempt directory `leaf`
/// (whether this begin or a crashed earlier one created it), and the parent of each, every
/// directory once, deepest first.
fn begin_dirs<'a>(leaf: &'a Path, created: &'a [PathBuf]) -> Vec<&'a Path> {
    let mut dirs: Vec<&Path> = Vec::new();
    for dir in created.iter().map(PathBuf::as_path).chain([leaf]) {
        dirs.push(dir);
        dirs.extend(dir.parent());
    }
    dirs.sort();
    dirs.dedup();
    // Deepest first: a child's entry is flushed before its parent's.
    dirs.reverse();
    dirs
}

/// Makes the directories a `begin_attempt` created durable: each one and its parent, every
/// directory once. `leaf` is the attempt's own directory, synced with its parent whether this
/// call or a crashed earlier begin created it. A directory in `synced` is skipped, and each one
/// synced here is added to it: a batch passes one set for all its begins, because every
/// directory of the batch was created (inside its transaction) before the first of these syncs,
/// so one sync of a shared parent covers the entries of all of them. Gives the number synced.
pub(crate) fn sync_created_dirs(leaf: &Path, created: &[PathBuf], synced: &mut BTreeSet<PathBuf>) -> Result<usize> {
    let mut count = 0;
    for dir in begin_dirs(leaf, created) {
        if synced.contains(dir) {
            continue;
        }
        sync_dir(dir)?;
        synced.insert(dir.to_path_buf());
        count += 1;
    }
    Ok(count)
}

/// One sync of the whole file system of the staging root (`syncfs`), for a batch of many
/// begins: instead of an `fsync` of each of its directories (two per begin of a new
/// partition), one call writes back every dirty inode and the journal of that file system and
/// flushes the device's cache, so every directory the batch created (all of them before the
/// call) is durable when it returns 0: what the per-directory syncs promise, for the whole
/// batch at once.
///
/// Two conditions keep that promise, and this type holds both:
/// - the handle is opened *before* the batch creates any directory: `syncfs` reports a
///   write-back error of the file system that happened since the handle was opened (the
///   kernel samples the file system's error sequence at open), so an error while the batch's
///   directories were written back cannot be missed;
/// - it covers only directories on the root's own file system ([`FileSystemSync::covers`]
///   compares each one's device); a begin with a directory on another mount is synced
///   directory by directory.
pub(crate) struct FileSystemSync {
    root: PathBuf,
    handle: OwnedFd,
    device: u64,
}

impl FileSystemSync {
    /// A later file-system sync through `handle`, the staging root `root` opened (without
    /// following a symlink) before the batch creates anything.
    pub(crate) fn new(root: &Path, handle: OwnedFd) -> Result<FileSystemSync> {
        let device = rustix::fs::fstat(&handle).map_err(|e| Error::io(format!("inspecting {}", root.display()), e.into()))?.st_dev;
        Ok(FileSystemSync { root: root.to_path_buf(), handle, device })
    }

    /// Whether every directory a begin needs durable ([`sync_created_dirs`]'s) lies on the
    /// root's file system, so [`FileSystemSync::sync`] makes it durable: `devices` as the
    /// begin's directories recorded them (see `begin_dirs`).
    pub(crate) fn covers(&self, devices: super::begin_dirs::Devices) -> bool {
        devices == super::begin_dirs::Devices::One(self.device)
    }

    /// `syncfs` of the root's file system, through the store's one sync seam.
    pub(crate) fn sync(&self) -> Result<()> {
        sync_handle(self.handle.as_fd(), &self.root, SyncTarget::FileSystem)
            .map_err(|e| Error::io(format!("syncing the file system of the staging root {}", self.root.display()), e))
    }
}

/// Makes a candidate durable before its Valid verdict is stored: `fdatasync` of every reported
/// file, then `fsync` of every directory from the files' own directories up through the
/// attempt directory to the staging root, each once. Every handle is opened from its parent's
/// handle without following symlinks, so what is synced is what was walked.
///
/// A sync that fails is returned as [`NotDurable`] (the content may not be on disk, and a
/// retried sync would prove nothing), for the validation rule to refuse the candidate. Failing
/// to open a file or directory (it vanished or changed since it was observed) is an error:
/// nothing was decided, and validating again observes the change.
pub(crate) fn make_candidate_durable(root: &Path, staging_rel: &str, files: &[FileEntry]) -> Result<Vec<NotDurable>> {
    let opening = |path: &Path, e: io::Error| Error::io(format!("opening {} to make it durable", path.display()), e);
    // (path, handle) from the root down to the attempt directory.
    let mut chain: Vec<(PathBuf, OwnedFd)> = vec![(root.to_path_buf(), open_dir(root).map_err(|e| opening(root, e))?)];
    for component in staging_rel.split('/') {
        let (parent_path, parent) =
            chain.last().map(|(p, fd)| (p.clone(), fd.as_fd())).ok_or_else(|| opening(root, io::Error::other("no root")))?;
        let path = parent_path.join(component);
        let fd = open_dir_at(parent, component).map_err(|e| opening(&path, e))?;
        chain.push((path, fd));
    }
    let attempt = chain.len() - 1;
    // Directories inside the attempt directory, by their path relative to it.
    let mut inner: BTreeMap<String, (PathBuf, OwnedFd)> = BTreeMap::new();
    let mut failures = Vec::new();
    for file in files {
        let (dir_rel, leaf) = file.path.rsplit_once('/').unwrap_or(("", &file.path));
        let mut rel = String::new();
        for component in dir_rel.split('/').filter(|c| !c.is_empty()) {
            let parent_rel = rel.clone();
            if !rel.is_empty() {
                rel.push('/');
            }
            rel.push_str(component);
            if inner.contains_key(&rel) {
                continue;
            }
            let (parent_path, parent) = match inner.get(&parent_rel) {
                Some((p, fd)) => (p.clone(), fd.as_fd()),
                None => (chain[attempt].0.clone(), chain[attempt].1.as_fd()),
            };
            let path = parent_path.join(component);
            let fd = open_dir_at(parent, component).map_err(|e| opening(&path, e))?;
            inner.insert(rel.clone(), (path, fd));
        }
        let (dir_path, dir) = match inner.get(dir_rel) {
            Some((p, fd)) if !dir_rel.is_empty() => (p.clone(), fd.as_fd()),
            _ => (chain[attempt].0.clone(), chain[attempt].1.as_fd()),
        };
        let path = dir_path.join(leaf);
        let fd = rustix::fs::openat(dir, leaf, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| opening(&path, e.into()))?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| opening(&path, e.into()))?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(opening(&path, io::Error::other("is no longer a regular file")));
        }
        if let Err(e) = sync_handle(fd.as_fd(), &path, SyncTarget::File) {
            failures.push(NotDurable { path: file.path.clone(), message: format!("fdatasync of {} failed: {e}", path.display()) });
        }
    }
    // Deepest first: the attempt's inner directories (longest paths first), then the chain up.
    let dirs = inner.values().rev().map(|(p, fd)| (p, fd)).chain(chain.iter().rev().map(|(p, fd)| (p, fd)));
    for (path, fd) in dirs {
        if let Err(e) = sync_handle(fd.as_fd(), path, SyncTarget::Dir) {
            let rel = path.strip_prefix(&chain[attempt].0).ok().map(|r| r.display().to_string()).filter(|r| !r.is_empty());
            failures.push(NotDurable {
                path: rel.unwrap_or_else(|| ".".to_owned()),
                message: format!("fsync of directory {} failed: {e}", path.display()),
            });
        }
    }
    Ok(failures)
}

/// Makes removals durable: syncs, once each, the deepest directory still on the way to each
/// removed path (the directory whose entry for it, or for its removed parent, is gone). The way
/// is walked with directory handles from the root, never through a symlink: a component that
/// is gone, or is no longer a real directory, ends the walk there, and the handle synced is the
/// one the walk opened. Returns how many directories were synced.
pub(crate) fn sync_after_removal<'a>(root: &Path, removed: impl IntoIterator<Item = &'a str>) -> Result<usize> {
    let root_fd = open_dir(root).map_err(|e| Error::io(format!("opening staging root {} to sync it", root.display()), e))?;
    // The deepest directory reached, by its path relative to the root ("" for the root).
    let mut deepest: BTreeMap<String, Option<OwnedFd>> = BTreeMap::new();
    for rel in removed {
        let components: Vec<&str> = rel.split('/').filter(|c| !c.is_empty() && *c != "." && *c != "..").collect();
        let mut reached = String::new();
        let mut fd: Option<OwnedFd> = None;
        for component in components.iter().take(components.len().saturating_sub(1)) {
            let parent = fd.as_ref().map_or(root_fd.as_fd(), |fd| fd.as_fd());
            match open_dir_at(parent, component) {
                Ok(next) => {
                    fd = Some(next);
                    if !reached.is_empty() {
                        reached.push('/');
                    }
                    reached.push_str(component);
                }
                Err(e)
                    if matches!(e.raw_os_error(), Some(code) if code == rustix::io::Errno::NOENT.raw_os_error()
                    || code == rustix::io::Errno::NOTDIR.raw_os_error()
                    || code == rustix::io::Errno::LOOP.raw_os_error()) =>
                {
                    break;
                }
                Err(e) => return Err(Error::io(format!("opening {} to sync it", root.join(&reached).join(component).display()), e)),
            }
        }
        deepest.entry(reached).or_insert(fd);
    }
    // Deepest first: a child's entry is flushed before its parent's.
    for (rel, fd) in deepest.iter().rev() {
        let path = root.join(rel);
        let fd = fd.as_ref().map_or(root_fd.as_fd(), |fd| fd.as_fd());
        sync_handle(fd, &path, SyncTarget::Dir).map_err(|e| Error::io(format!("syncing directory {}", path.display()), e))?;
    }
    Ok(deepest.len())
}

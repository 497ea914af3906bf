//! File-system side of the store: file observation for validation, and the syncs that make
//! data, creation, renames and removals durable, and a declared run's task directories (a
//! begin's directories are made in `begin_dirs`).
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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File};
use std::io;
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
    super::handles::crc32_of(&mut file).map_err(|e| Error::io(format!("reading {}", path.display()), e))
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
///
/// With the `s3` feature, `staging_dir` may be an attempt's URL on object storage
/// (`s3://bucket/prefix/...`, as [`crate::AttemptTicket::staging_dir`] gives it for a staging
/// root there): the object's size and the CRC32 of its content, read whole (streamed).
pub fn describe_file(staging_dir: &Path, relative: &str) -> Result<FileEntry> {
    crate::rules::ids::check_file_path(relative)?;
    #[cfg(feature = "s3")]
    if crate::objects::is_object_url(staging_dir) {
        let root = super::StagingRoot::resolve(staging_dir)?;
        return match root.observe_file("", relative, true) {
            Ok(Some((size_bytes, Some(crc32)))) => Ok(FileEntry { path: relative.to_owned(), size_bytes, crc32 }),
            Ok(_) => Err(Error::io(
                format!("describing {}/{relative}", staging_dir.display()),
                io::Error::new(io::ErrorKind::NotFound, "no such object"),
            )),
            Err(e) => Err(Error::io(format!("reading {}/{relative}", staging_dir.display()), e)),
        };
    }
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

/// Every file an attempt wrote into its staging directory, as `/`-separated paths relative to
/// it, in sorted order: what `attempt finish --scan` reports. Symlinks and anything but regular
/// files and directories are refused rather than followed or skipped: a candidate must not
/// silently differ from what the worker meant to report.
///
/// With the `s3` feature, `staging_dir` may be an attempt's URL on object storage: every object
/// below its prefix.
///
/// # Errors
/// [`Error::InvalidInput`] for a symlink, a special file or a name that is not UTF-8;
/// [`Error::Io`] if the directory (or the prefix) cannot be listed.
pub fn list_staged_files(staging_dir: &Path) -> Result<Vec<String>> {
    #[cfg(feature = "s3")]
    if crate::objects::is_object_url(staging_dir) {
        let root = super::StagingRoot::resolve(staging_dir)?;
        let Some(object) = root.object() else { return Ok(Vec::new()) };
        let listed = object.list("").map_err(|e| Error::io(format!("listing {}", staging_dir.display()), e))?;
        return Ok(listed.into_iter().map(|o| o.rel).collect());
    }
    let mut found = Vec::new();
    let mut pending = vec![(staging_dir.to_path_buf(), String::new())];
    let listing = |path: &Path, e: io::Error| Error::io(format!("listing {}", path.display()), e);
    while let Some((path, rel)) = pending.pop() {
        for entry in fs::read_dir(&path).map_err(|e| listing(&path, e))? {
            let entry = entry.map_err(|e| listing(&path, e))?;
            let name = entry.file_name();
            let shown = entry.path().display().to_string();
            let Some(name) = name.to_str() else {
                return Err(Error::invalid("staged file", &shown, "has a name that is not UTF-8"));
            };
            let child_rel = if rel.is_empty() { name.to_owned() } else { format!("{rel}/{name}") };
            let file_type = entry.file_type().map_err(|e| Error::io(format!("inspecting {shown}"), e))?;
            if file_type.is_symlink() {
                return Err(Error::invalid("staged file", &shown, "is a symlink; manifestdb never follows symlinks in staging"));
            } else if file_type.is_dir() {
                pending.push((entry.path(), child_rel));
            } else if file_type.is_file() {
                found.push(child_rel);
            } else {
                return Err(Error::invalid("staged file", &shown, "is not a regular file or directory"));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Observes a reported file of the attempt at `staging_rel` under a staging root (a local one
/// through directory handles without following symlinks, see `handles::observe_file`; an object
/// root by a HEAD, and a streamed read for its checksum). For `verify`, which reports an I/O error
/// as a finding; validation and publish use `handles::observe_file` and treat one as an error.
pub(crate) fn observe(root: &super::StagingRoot, staging_rel: &str, file: &FileEntry, check: FileCheck) -> FileObservation {
    match root.observe_file(staging_rel, &file.path, check == FileCheck::SizeAndChecksum) {
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
}

/// The one place the store syncs staging data: the observer seam (feature `testing`), then
/// `fdatasync` for a file, `fsync` for a directory, on the handle the caller opened and checked.
pub(crate) fn sync_handle(fd: BorrowedFd<'_>, path: &Path, target: SyncTarget) -> io::Result<()> {
    #[cfg(feature = "testing")]
    crate::testing::before_sync(path, target == SyncTarget::Dir)?;
    #[cfg(not(feature = "testing"))]
    let _ = path;
    match target {
        SyncTarget::File => rustix::fs::fdatasync(fd)?,
        SyncTarget::Dir => rustix::fs::fsync(fd)?,
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

/// The most directories a [`DurableDirs`] remembers (about 100 bytes each, so at most some
/// 26 MB); past it the record starts afresh (the next validations sync their chains again, as a
/// fresh handle's do). Above the task directories of a declared run of 100,000 tasks.
const DURABLE_DIRS_MAX: usize = 262_144;

/// The directories below the staging root whose entry in their parent this handle made durable,
/// so that each is synced once: a declare makes its run's task directories and syncs their
/// parents ([`make_task_dirs_durable`]), so the first validation of a task syncs only its file,
/// its attempt directory and the task's directory (naming the attempt's); a validation of a task
/// whose directories this handle did not make durable (a run declared by another process, or
/// before this handle's open) syncs the chain up to the root, once per directory (DOMAIN 11
/// needs a directory's entry durable before a Valid verdict names a file below it, not again
/// for every file).
///
/// Each is recorded with the identity of the directory that was synced ([`DirId`]: device,
/// inode and birth time): a directory removed (by cleanup, by an operator, by another process)
/// and made again is another directory even where the file system reuses its inode number, so
/// it is synced again. A file system that reports no birth time gives no identity, and then
/// nothing is remembered: every validation syncs the whole chain. Cleanup run through this
/// handle also clears the record.
#[derive(Debug, Default)]
pub(crate) struct DurableDirs {
    /// Path relative to the staging root -> the directory whose entry there is durable.
    known: parking_lot::Mutex<HashMap<String, DirId>>,
}

/// What tells one directory from another made later at the same path: its device, its inode
/// number and its birth time (`statx`), which a reused inode number does not share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirId {
    device: (u32, u32),
    inode: u64,
    born: (i64, u32),
}

impl DirId {
    /// The identity of the directory open at `fd`, or `None` if its file system reports no
    /// birth time.
    fn of(fd: BorrowedFd<'_>) -> io::Result<Option<DirId>> {
        use rustix::fs::{AtFlags, StatxFlags};
        let stat = rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, StatxFlags::INO | StatxFlags::BTIME)?;
        let has = |flag: StatxFlags| stat.stx_mask & flag.bits() == flag.bits();
        if !has(StatxFlags::INO) || !has(StatxFlags::BTIME) {
            return Ok(None);
        }
        Ok(Some(DirId {
            device: (stat.stx_dev_major, stat.stx_dev_minor),
            inode: stat.stx_ino,
            born: (stat.stx_btime.tv_sec, stat.stx_btime.tv_nsec),
        }))
    }
}

impl DurableDirs {
    fn is_durable(&self, rel: &str, id: Option<DirId>) -> bool {
        id.is_some_and(|id| self.known.lock().get(rel) == Some(&id))
    }

    fn record(&self, dirs: impl IntoIterator<Item = (String, Option<DirId>)>) {
        let mut known = self.known.lock();
        for (rel, id) in dirs {
            let Some(id) = id else { continue };
            if known.len() >= DURABLE_DIRS_MAX {
                known.clear();
            }
            known.insert(rel, id);
        }
    }

    /// Forgets everything (after a cleanup removed directories).
    pub(crate) fn clear(&self) {
        self.known.lock().clear();
    }
}

/// An open directory on the way down of [`make_task_dirs_durable`].
struct Descent {
    fd: OwnedFd,
    path: PathBuf,
    /// Relative to the staging root ("" for the root).
    rel: String,
    /// Its name in its parent ("" for the root).
    name: String,
    /// Whether an entry in it is not known durable yet, so it must be synced.
    dirty: bool,
}

/// Makes the task directories `task_rels` of a declared run (each `dataset/run/<partition
/// components>`, as `ids::staging_parent_rel` gives them) and every missing directory above
/// them, and makes the entry of each durable: the parent of every directory whose entry
/// `durable` does not hold already is `fsync`ed, once, after all its children were made (each
/// directory is synced when the walk leaves it, so a child's entry is flushed before its
/// parent's). Then `durable` records them all, so the first validation of each task syncs only
/// what its attempt added. Returns how many directories were synced.
///
/// Every directory is opened from its parent's handle without following a symlink and made with
/// `mkdirat` in that handle (as a begin's are); the task paths are walked in sorted order, so at
/// most one handle per level is open at a time, whatever the number of tasks.
///
/// # Errors
/// [`Error::InvalidInput`] for a symlink or a non-directory on the way; [`Error::Io`] if a
/// directory cannot be made, opened or synced (nothing is recorded then).
pub(crate) fn make_task_dirs_durable(root: &Path, root_fd: OwnedFd, task_rels: &[String], durable: &DurableDirs) -> Result<usize> {
    let mut paths: Vec<Vec<&str>> = task_rels.iter().map(|rel| rel.split('/').collect()).collect();
    paths.sort_unstable();
    paths.dedup();
    let mut stack = vec![Descent { fd: root_fd, path: root.to_path_buf(), rel: String::new(), name: String::new(), dirty: false }];
    let mut made: Vec<(String, Option<DirId>)> = Vec::new();
    let mut synced = 0;
    // Leaves the deepest open directory, syncing it if an entry in it is new.
    let leave = |stack: &mut Vec<Descent>, synced: &mut usize| -> Result<()> {
        let Some(dir) = stack.pop() else { return Ok(()) };
        if dir.dirty {
            sync_handle(dir.fd.as_fd(), &dir.path, SyncTarget::Dir)
                .map_err(|e| Error::io(format!("syncing directory {}", dir.path.display()), e))?;
            *synced += 1;
        }
        Ok(())
    };
    for components in paths {
        // The open directories below the root that are on this path stay open.
        let shared = stack.iter().skip(1).zip(&components).take_while(|(dir, name)| dir.name == **name).count();
        while stack.len() > shared + 1 {
            leave(&mut stack, &mut synced)?;
        }
        for name in &components[shared..] {
            let Some(parent) = stack.last_mut() else { break };
            let path = parent.path.join(name);
            let rel = if parent.rel.is_empty() { (*name).to_owned() } else { format!("{}/{name}", parent.rel) };
            let fd = super::begin_dirs::open_or_make_dir(parent.fd.as_fd(), name, &path, &rel)?;
            let id = DirId::of(fd.as_fd()).map_err(|e| Error::io(format!("inspecting {}", path.display()), e))?;
            if !durable.is_durable(&rel, id) {
                parent.dirty = true;
            }
            made.push((rel.clone(), id));
            stack.push(Descent { fd, path, rel, name: (*name).to_owned(), dirty: false });
        }
    }
    while !stack.is_empty() {
        leave(&mut stack, &mut synced)?;
    }
    durable.record(made);
    Ok(synced)
}

/// One directory on the way to a candidate's files, opened from its parent's handle.
struct ChainDir {
    path: PathBuf,
    /// Relative to the staging root ("" for the root).
    rel: String,
    fd: OwnedFd,
    /// Index of the parent in the chain (`None` for the root).
    parent: Option<usize>,
    /// Its identity, read from the handle.
    id: Option<DirId>,
}

/// Makes a candidate durable before its Valid verdict is stored: `fdatasync` of every reported
/// file, `fsync` of every directory holding one (its new entries), and `fsync` of the parent of
/// every directory on the way (from the staging root down through the attempt directory to the
/// files' own) whose entry `durable` does not hold already, each directory once. So the first
/// attempt below a new run syncs the whole chain, a retry the file, its attempt directory and
/// the task's directory (the attempt directory's new entry). Every handle is opened from its
/// parent's handle without following symlinks, so what is synced is what was walked. A
/// candidate without files names no path: nothing is synced.
///
/// A sync that fails is returned as [`NotDurable`] (the content may not be on disk, and a
/// retried sync would prove nothing), for the validation rule to refuse the candidate; nothing
/// is recorded in `durable` then. Failing to open a file or directory (it vanished or changed
/// since it was observed) is an error: nothing was decided, and validating again observes the
/// change. `file_synced` is told of each file once its sync returned (failed or not).
pub(crate) fn make_candidate_durable(
    root: &Path,
    staging_rel: &str,
    files: &[FileEntry],
    durable: &DurableDirs,
    mut file_synced: impl FnMut(&FileEntry),
) -> Result<Vec<NotDurable>> {
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let opening = |path: &Path, e: io::Error| Error::io(format!("opening {} to make it durable", path.display()), e);
    let identity = |fd: &OwnedFd, path: &Path| DirId::of(fd.as_fd()).map_err(|e| opening(path, e));
    let root_fd = open_dir(root).map_err(|e| opening(root, e))?;
    let root_id = identity(&root_fd, root)?;
    let mut chain = vec![ChainDir { path: root.to_path_buf(), rel: String::new(), fd: root_fd, parent: None, id: root_id }];
    // Opens `component` in chain[parent] and appends it; returns its index.
    let descend = |chain: &mut Vec<ChainDir>, parent: usize, component: &str| -> Result<usize> {
        let path = chain[parent].path.join(component);
        let fd = open_dir_at(chain[parent].fd.as_fd(), component).map_err(|e| opening(&path, e))?;
        let id = identity(&fd, &path)?;
        let rel = if chain[parent].rel.is_empty() { component.to_owned() } else { format!("{}/{component}", chain[parent].rel) };
        chain.push(ChainDir { path, rel, fd, parent: Some(parent), id });
        Ok(chain.len() - 1)
    };
    let mut attempt = 0;
    for component in staging_rel.split('/') {
        attempt = descend(&mut chain, attempt, component)?;
    }
    // Directories inside the attempt directory, by their path relative to it.
    let mut inner: HashMap<String, usize> = HashMap::new();
    let mut holding: BTreeSet<usize> = BTreeSet::new();
    let mut failures = Vec::new();
    for file in files {
        let (dir_rel, leaf) = file.path.rsplit_once('/').unwrap_or(("", &file.path));
        let mut dir = attempt;
        let mut rel = String::new();
        for component in dir_rel.split('/').filter(|c| !c.is_empty()) {
            if !rel.is_empty() {
                rel.push('/');
            }
            rel.push_str(component);
            dir = match inner.get(&rel) {
                Some(&known) => known,
                None => {
                    let opened = descend(&mut chain, dir, component)?;
                    inner.insert(rel.clone(), opened);
                    opened
                }
            };
        }
        holding.insert(dir);
        let path = chain[dir].path.join(leaf);
        let fd = rustix::fs::openat(chain[dir].fd.as_fd(), leaf, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| opening(&path, e.into()))?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| opening(&path, e.into()))?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(opening(&path, io::Error::other("is no longer a regular file")));
        }
        if let Err(e) = sync_handle(fd.as_fd(), &path, SyncTarget::File) {
            failures.push(NotDurable { path: file.path.clone(), message: format!("fdatasync of {} failed: {e}", path.display()) });
        }
        file_synced(file);
    }
    // The directories to sync: those holding the files, and the parent of every directory whose
    // entry is not known durable (the root's own entry was made durable when it was created).
    let mut to_sync = holding;
    for dir in chain.iter().skip(1) {
        if let Some(parent) = dir.parent
            && !durable.is_durable(&dir.rel, dir.id)
        {
            to_sync.insert(parent);
        }
    }
    // Deepest first: a child's entry is flushed before its parent's.
    let mut order: Vec<usize> = to_sync.into_iter().collect();
    order.sort_by_key(|&i| std::cmp::Reverse(chain[i].path.components().count()));
    let attempt_path = chain[attempt].path.clone();
    for i in order {
        let dir = &chain[i];
        if let Err(e) = sync_handle(dir.fd.as_fd(), &dir.path, SyncTarget::Dir) {
            let rel = dir.path.strip_prefix(&attempt_path).ok().map(|r| r.display().to_string()).filter(|r| !r.is_empty());
            failures.push(NotDurable {
                path: rel.unwrap_or_else(|| ".".to_owned()),
                message: format!("fsync of directory {} failed: {e}", dir.path.display()),
            });
        }
    }
    if failures.is_empty() {
        durable.record(chain.into_iter().skip(1).map(|dir| (dir.rel, dir.id)));
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

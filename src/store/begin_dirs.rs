//! The directories a begin makes: the task's directory (`dataset/run/<partition components>`)
//! before the write transaction, the attempt's own directory inside it during the write, every
//! one reached and created through directory handles (see `handles`): each component is opened
//! relative to its already-opened parent without following a symlink, and each directory is
//! made with `mkdirat` in the handle that was checked. So a directory swapped for a symlink
//! makes a begin fail, never create anything outside the root, and the check and the creation
//! act on the same directory.
//!
//! A batch of begins shares one [`BeginDirs`]: the handle of each run directory it reached is
//! kept (up to [`RUN_DIRS_HELD`] of them), so a begin of a new partition of a run already
//! reached costs one `mkdirat` before the write and an `openat`, an `fstat` and a `mkdirat` in
//! it, where a walk by path stats every component of the path (each resolved from `/`) again.
//!
//! Invariant: every directory is made with `mkdirat` in a handle opened without following a
//! symlink, so what was checked is what the directory is made in. A begin syncs nothing: the
//! directories on the way to a candidate's files are made durable by its validation
//! (`files::make_candidate_durable`), before a Valid verdict names them.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::handles::{self, Kind};
use crate::error::{Error, Result};

/// The most run directories whose handles one [`BeginDirs`] keeps open; begins of further runs
/// walk from the root (a batch holds at most this many descriptors for its begins).
const RUN_DIRS_HELD: usize = 64;

/// An open directory at or below the staging root.
struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// The begins' way into the staging tree: the root's handle (opened and its marker checked by
/// the caller) and the run directories reached so far.
pub(crate) struct BeginDirs {
    root: Arc<Dir>,
    runs: HashMap<String, Arc<Dir>>,
}

impl BeginDirs {
    /// Begins below the staging root `root`, whose handle `handle` the caller opened (without
    /// following a symlink) and whose marker it checked.
    pub(crate) fn new(root: &Path, handle: OwnedFd) -> Result<BeginDirs> {
        Ok(BeginDirs { root: Arc::new(Dir { fd: handle, path: root.to_path_buf() }), runs: HashMap::new() })
    }

    /// Makes (or checks) the task's directory `root/parent_rel` (as `ids::staging_parent_rel`
    /// gives it: dataset, run, then the partition's components), refusing a symlink or a
    /// non-directory on the way. Idempotent, so it runs before the write transaction.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a symlink or a non-directory in the path; I/O errors.
    pub(crate) fn prepare(&mut self, parent_rel: &str) -> Result<TaskDir> {
        let components = components(parent_rel);
        if components.len() < 3 {
            return Err(Error::invalid("staging path", parent_rel, "names no task directory below a dataset and a run"));
        }
        let mut task =
            TaskDir { root: Arc::clone(&self.root), base: Arc::clone(&self.root), below: components, rel: parent_rel.to_owned() };
        let key = format!("{}/{}", task.below[0], task.below[1]);
        let held = match self.runs.get(&key) {
            Some(run_dir) => Some(Arc::clone(run_dir)),
            None if self.runs.len() < RUN_DIRS_HELD => {
                let dataset_dir = task.ensure_dir(&self.root, 0)?;
                let run_dir = Arc::new(task.ensure_dir(&dataset_dir, 1)?);
                self.runs.insert(key.clone(), Arc::clone(&run_dir));
                Some(run_dir)
            }
            None => None,
        };
        if let Some(run_dir) = held {
            task.base = run_dir;
            task.below.drain(..2);
            if task.make()? {
                return Ok(task);
            }
            // The run directory held went away (a cleanup removed it as empty): from the root.
            self.runs.remove(&key);
            task.walk_from_root();
        }
        if task.make()? { Ok(task) } else { Err(vanished(&self.root.path.join(parent_rel))) }
    }
}

/// A task's directory made before the write: the handle it is reached from and the plain
/// components below that handle.
pub(crate) struct TaskDir {
    root: Arc<Dir>,
    base: Arc<Dir>,
    /// The components from `base` down to the task's directory (at least one).
    below: Vec<String>,
    /// The task's directory relative to the root.
    rel: String,
}

impl TaskDir {
    /// Creates the attempt's own directory `leaf` in the task's directory with one `mkdirat`,
    /// inside the write transaction. An existing `leaf` must be an empty real directory (left by
    /// a begin that crashed before it committed, so no worker ever had it). If the task's
    /// directory was removed since it was made (a concurrent cleanup removed it as empty), it is
    /// made again from the root, once.
    ///
    /// # Errors
    /// [`Error::StagingPathTaken`] for a symlink, a non-directory or a non-empty `leaf`;
    /// [`Error::InvalidInput`] for a symlink or a non-directory on the way to it; I/O errors.
    pub(crate) fn create_attempt_dir(&mut self, leaf: &str) -> Result<PathBuf> {
        if let Some(dir) = self.try_create(leaf)? {
            return Ok(dir);
        }
        self.walk_from_root();
        if self.make()?
            && let Some(dir) = self.try_create(leaf)?
        {
            return Ok(dir);
        }
        Err(vanished(&self.root.path.join(&self.rel)))
    }

    /// Walks from the root again, through every component of the task's directory.
    fn walk_from_root(&mut self) {
        self.base = Arc::clone(&self.root);
        self.below = components(&self.rel);
    }

    fn try_create(&mut self, leaf: &str) -> Result<Option<PathBuf>> {
        let mut dir: Option<Dir> = None;
        for i in 0..self.below.len() {
            let parent = dir.as_ref().unwrap_or(&self.base);
            let path = parent.path.join(&self.below[i]);
            match handles::open_dir_at(parent.fd.as_fd(), &self.below[i]) {
                Ok(fd) => dir = Some(Dir { fd, path }),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(self.refusal(parent, i, e)),
            }
        }
        let Some(dir) = dir else { return Err(vanished(&self.base.path)) };
        let path = dir.path.join(leaf);
        match handles::mkdir_at(dir.fd.as_fd(), leaf) {
            Ok(()) => Ok(Some(path)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let inspect = |e| Error::io(format!("inspecting {}", path.display()), e);
                let stat = handles::stat_at(dir.fd.as_fd(), leaf).map_err(inspect)?;
                if stat.kind != Kind::Dir {
                    let what = if stat.kind == Kind::Symlink { "a symlink" } else { "not a directory" };
                    return Err(Error::StagingPathTaken { path, detail: format!("it exists and is {what}") });
                }
                let existing = handles::open_dir_at(dir.fd.as_fd(), leaf).map_err(inspect)?;
                let empty =
                    handles::is_empty_except(existing.as_fd(), &[]).map_err(|e| Error::io(format!("listing {}", path.display()), e))?;
                if !empty {
                    return Err(Error::StagingPathTaken {
                        path,
                        detail: "it is a directory that already holds files of an unknown writer".into(),
                    });
                }
                Ok(Some(path))
            }
            Err(e) => Err(Error::io(format!("creating staging directory {}", path.display()), e)),
        }
    }

    /// Makes the directories `below` under `base`: each but the last opened (made if missing),
    /// the last made. `Ok(false)` if `base` itself is gone.
    fn make(&mut self) -> Result<bool> {
        let base = Arc::clone(&self.base);
        let last = self.below.len() - 1;
        let mut opened: Option<Dir> = None;
        for i in 0..last {
            let parent = opened.as_ref().unwrap_or(&base);
            match self.ensure_dir(parent, i) {
                Ok(dir) => opened = Some(dir),
                Err(err) if i == 0 && is_not_found(&err) => return Ok(false),
                Err(err) => return Err(err),
            }
        }
        let parent = opened.as_ref().unwrap_or(&base);
        match handles::mkdir_at(parent.fd.as_fd(), &self.below[last]) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let path = parent.path.join(&self.below[last]);
                match handles::stat_at(parent.fd.as_fd(), &self.below[last]) {
                    Ok(stat) if stat.kind == Kind::Dir => Ok(true),
                    Ok(stat) => Err(self.not_a_directory(&path, stat.kind)),
                    // Removed again in between: the write's open finds it missing and makes it.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
                    Err(e) => Err(Error::io(format!("inspecting {}", path.display()), e)),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && last == 0 => Ok(false),
            Err(e) => Err(Error::io(format!("creating staging directory {}", parent.path.join(&self.below[last]).display()), e)),
        }
    }

    /// Opens the directory `below[i]` in `parent`, making it if it is missing.
    fn ensure_dir(&mut self, parent: &Dir, i: usize) -> Result<Dir> {
        let path = parent.path.join(&self.below[i]);
        let fd = open_or_make_dir(parent.fd.as_fd(), &self.below[i], &path, &self.rel)?;
        Ok(Dir { fd, path })
    }

    /// The error for a failed open of `below[i]` in `parent`: a symlink or a non-directory is
    /// refused by name; anything else is an I/O error.
    fn refusal(&self, parent: &Dir, i: usize, e: io::Error) -> Error {
        refusal(parent.fd.as_fd(), &self.below[i], &parent.path.join(&self.below[i]), &self.rel, e)
    }

    fn not_a_directory(&self, path: &Path, kind: Kind) -> Error {
        not_a_directory(path, kind, &self.rel)
    }
}

/// Opens the directory `name` in `parent` (at `path`; `rel` is the staging path the caller
/// makes, for errors), making it first if it is missing; another writer may make it in
/// between. Never follows a symlink: a symlink or a non-directory named `name` is refused
/// ([`Error::InvalidInput`]).
pub(super) fn open_or_make_dir(parent: BorrowedFd<'_>, name: &str, path: &Path, rel: &str) -> Result<OwnedFd> {
    match handles::open_dir_at(parent, name) {
        Ok(fd) => return Ok(fd),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(refusal(parent, name, path, rel, e)),
    }
    match handles::mkdir_at(parent, name) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::io(format!("creating staging directory {}", path.display()), e)),
    }
    handles::open_dir_at(parent, name).map_err(|e| refusal(parent, name, path, rel, e))
}

/// The error for a failed open of `name` in `parent`: a symlink or a non-directory is refused
/// by name; anything else is an I/O error.
fn refusal(parent: BorrowedFd<'_>, name: &str, path: &Path, rel: &str, e: io::Error) -> Error {
    let refused = [rustix::io::Errno::LOOP, rustix::io::Errno::NOTDIR].iter().any(|errno| e.raw_os_error() == Some(errno.raw_os_error()));
    match handles::stat_at(parent, name) {
        Ok(stat) if refused && stat.kind != Kind::Dir => not_a_directory(path, stat.kind, rel),
        _ => Error::io(format!("opening staging directory {}", path.display()), e),
    }
}

fn not_a_directory(path: &Path, kind: Kind, rel: &str) -> Error {
    let why = if kind == Kind::Symlink { "is a symlink; refusing to follow it" } else { "exists and is not a directory" };
    Error::invalid("staging path", rel, format!("{} {why}", path.display()))
}

/// The plain components of a path relative to the root.
fn components(rel: &str) -> Vec<String> {
    rel.split('/').map(str::to_owned).collect()
}

fn is_not_found(err: &Error) -> bool {
    matches!(err, Error::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
}

fn vanished(dir: &Path) -> Error {
    Error::io(
        format!("creating staging directory in {}", dir.display()),
        io::Error::new(io::ErrorKind::NotFound, "the directory vanished while it was being created"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(root: &Path) -> BeginDirs {
        BeginDirs::new(root, handles::open_root(root).unwrap()).unwrap()
    }

    #[test]
    fn a_task_directory_is_made_with_every_missing_ancestor() {
        let tmp = tempfile::tempdir().unwrap();
        let mut begin = dirs(tmp.path());
        let mut task = begin.prepare("d/r/date=1/region=eu").unwrap();
        for made in ["d", "d/r", "d/r/date=1", "d/r/date=1/region=eu"] {
            assert!(tmp.path().join(made).is_dir(), "{made}");
        }
        let dir = task.create_attempt_dir("@attempt-1").unwrap();
        assert_eq!(dir, tmp.path().join("d/r/date=1/region=eu/@attempt-1"));
        assert!(dir.is_dir());
        // A sibling below the same run.
        begin.prepare("d/r/date=1/region=us").unwrap();
        assert!(tmp.path().join("d/r/date=1/region=us").is_dir());
    }

    #[test]
    fn a_held_run_directory_or_a_task_directory_removed_meanwhile_is_made_again_from_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let mut begin = dirs(tmp.path());
        let mut first = begin.prepare("d/r/p=1").unwrap();
        // A cleanup removes the empty task and run directories while the batch holds the run's.
        std::fs::remove_dir(tmp.path().join("d/r/p=1")).unwrap();
        std::fs::remove_dir(tmp.path().join("d/r")).unwrap();
        let dir = first.create_attempt_dir("@attempt-1").unwrap();
        assert!(dir.is_dir(), "the task's directory was made again for the attempt's");
        std::fs::remove_dir(&dir).unwrap();
        std::fs::remove_dir(tmp.path().join("d/r/p=1")).unwrap();
        std::fs::remove_dir(tmp.path().join("d/r")).unwrap();
        begin.prepare("d/r/p=2").unwrap();
        assert!(tmp.path().join("d/r/p=2").is_dir(), "the held run directory was gone: made from the root");
    }

    #[test]
    fn a_symlink_or_a_file_on_the_way_is_refused_and_nothing_is_made_through_it() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("d/r")).unwrap();
        std::os::unix::fs::symlink(outside.path(), tmp.path().join("d/r/p=1")).unwrap();
        std::fs::write(tmp.path().join("d/r/p=2"), b"x").unwrap();
        std::os::unix::fs::symlink(outside.path(), tmp.path().join("d/link")).unwrap();
        let mut begin = dirs(tmp.path());
        for (rel, why) in [("d/r/p=1", "symlink"), ("d/r/p=2", "not a directory"), ("d/link/p=1", "symlink"), ("d/r/p=1/x", "symlink")] {
            let err = begin.prepare(rel).err().unwrap_or_else(|| panic!("{rel} was prepared"));
            assert!(matches!(err, Error::InvalidInput { .. }) && err.to_string().contains(why), "{rel}: {err}");
        }
        // Swapped for a symlink after it was made, before the write: the write refuses it.
        let mut task = begin.prepare("d/r/p=3").unwrap();
        std::fs::remove_dir(tmp.path().join("d/r/p=3")).unwrap();
        std::os::unix::fs::symlink(outside.path(), tmp.path().join("d/r/p=3")).unwrap();
        let err = task.create_attempt_dir("@attempt-1").unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none(), "nothing was created outside the root");
    }

    #[test]
    fn an_existing_attempt_directory_is_taken_only_when_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let mut begin = dirs(tmp.path());
        std::fs::create_dir_all(tmp.path().join("d/r/p/@attempt-1")).unwrap();
        std::fs::create_dir_all(tmp.path().join("d/r/p/@attempt-2")).unwrap();
        std::fs::write(tmp.path().join("d/r/p/@attempt-2/part.csv"), b"x").unwrap();
        let mut task = begin.prepare("d/r/p").unwrap();
        assert!(task.create_attempt_dir("@attempt-1").is_ok(), "an empty leftover is reused");
        let err = task.create_attempt_dir("@attempt-2").unwrap_err();
        assert!(matches!(err, Error::StagingPathTaken { .. }) && err.to_string().contains("unknown writer"), "{err}");
    }

    /// Issue 32, item 8: a file or a symlink planted at the next attempt's path is a conflict
    /// naming the path (exit 5), never a usage error.
    #[test]
    fn a_file_or_symlink_at_the_attempt_path_is_a_conflict_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let mut begin = dirs(tmp.path());
        std::fs::create_dir_all(tmp.path().join("d/r/p")).unwrap();
        std::fs::write(tmp.path().join("d/r/p/@attempt-1"), b"x").unwrap();
        std::os::unix::fs::symlink(tmp.path(), tmp.path().join("d/r/p/@attempt-2")).unwrap();
        let mut task = begin.prepare("d/r/p").unwrap();
        for (leaf, what) in [("@attempt-1", "not a directory"), ("@attempt-2", "a symlink")] {
            let err = task.create_attempt_dir(leaf).unwrap_err();
            let path = tmp.path().join("d/r/p").join(leaf);
            assert!(matches!(&err, Error::StagingPathTaken { path: p, .. } if *p == path), "{leaf}: {err:?}");
            assert!(err.to_string().contains(what) && err.to_string().contains(&path.display().to_string()), "{err}");
            assert_eq!((err.kind(), err.kind().exit_code()), (crate::ErrorKind::Conflict, 5));
        }
    }
}

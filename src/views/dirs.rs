//! File-system handles for the views: every path is opened one component at a time from a
//! directory handle with `O_NOFOLLOW`, so a symlink planted under the view root or the staging
//! root is refused, never followed; directory listings and the walk of a view.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use crate::rules::views::{self as rule, Found};

pub(super) fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from(e)
}

pub(super) fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Opens `name` (one component) under `parent` as a directory, never following a symlink.
pub(super) fn open_dir_at(parent: BorrowedFd<'_>, name: &str) -> io::Result<OwnedFd> {
    rustix::fs::openat(parent, name, dir_flags(), Mode::empty()).map_err(errno)
}

/// Opens the directory `rel` (components joined by `/`) under `base`, one component at a time.
pub(super) fn open_dirs(base: BorrowedFd<'_>, rel: &str) -> io::Result<OwnedFd> {
    let mut fd = rustix::fs::openat(base, ".", dir_flags(), Mode::empty()).map_err(errno)?;
    for component in rel.split('/').filter(|c| !c.is_empty()) {
        if component == "." || component == ".." {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "path component '.' or '..'"));
        }
        fd = open_dir_at(fd.as_fd(), component)?;
    }
    Ok(fd)
}

pub(super) fn split_parent(rel: &str) -> (&str, &str) {
    rel.rsplit_once('/').unwrap_or(("", rel))
}

/// The directories last opened from the staging root down to one staging directory, each
/// opened from its parent without following a symlink. Opening the next directory reuses the
/// longest common prefix: consecutive files of a plan mostly share all but the last one or two
/// components (the run's directory, the partition's), so a file costs an `openat` or two, not
/// one per component.
#[derive(Default)]
pub(super) struct DirChain {
    /// `(component, handle)` from the root down.
    open: Vec<(String, OwnedFd)>,
}

impl DirChain {
    /// The handle of `staging_rel/dir_rel` under `root` (`dir_rel` may be empty).
    pub(super) fn open<'a>(&'a mut self, root: BorrowedFd<'a>, staging_rel: &str, dir_rel: &str) -> io::Result<BorrowedFd<'a>> {
        let components: Vec<&str> = staging_rel.split('/').chain(dir_rel.split('/')).filter(|c| !c.is_empty()).collect();
        let common = self.open.iter().zip(&components).take_while(|((have, _), want)| have == *want).count();
        self.open.truncate(common);
        for component in &components[common..] {
            if *component == "." || *component == ".." {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "path component '.' or '..'"));
            }
            let parent = self.open.last().map_or(root, |(_, fd)| fd.as_fd());
            let fd = open_dir_at(parent, component)?;
            self.open.push(((*component).to_owned(), fd));
        }
        Ok(self.open.last().map_or(root, |(_, fd)| fd.as_fd()))
    }
}

pub(super) fn is_errno(e: &io::Error, code: rustix::io::Errno) -> bool {
    e.raw_os_error() == Some(code.raw_os_error())
}

pub(super) fn stat_kind(parent: BorrowedFd<'_>, name: &str) -> io::Result<(FileType, rustix::fs::Stat)> {
    let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
    Ok((FileType::from_raw_mode(st.st_mode), st))
}

/// Whether `path` lies inside `base` (both canonical).
pub(super) fn inside(path: &Path, base: &Path) -> bool {
    path.starts_with(base)
}

/// Every entry of a directory but `.` and `..`, with its type as the directory reports it
/// (`Unknown` on file systems that do not).
pub(super) fn list_entries(dir: BorrowedFd<'_>) -> io::Result<Vec<(String, FileType)>> {
    let mut out = Vec::new();
    for entry in Dir::read_from(dir).map_err(errno)? {
        let entry = entry.map_err(errno)?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        out.push((OsStr::from_bytes(name).to_string_lossy().into_owned(), entry.file_type()));
    }
    Ok(out)
}

/// Every entry name of a directory but `.` and `..`. Names that are not UTF-8 are returned
/// lossily (views only ever create UTF-8 names; anything else is reported, never deleted by
/// name).
pub(super) fn list_names(dir: BorrowedFd<'_>) -> io::Result<Vec<String>> {
    Ok(list_entries(dir)?.into_iter().map(|(name, _)| name).collect())
}

/// Walks a view directory without following symlinks: every path (relative) and what it is.
pub(super) fn walk_view(view: BorrowedFd<'_>) -> io::Result<BTreeMap<String, Found>> {
    let mut out = BTreeMap::new();
    let mut stack: Vec<(OwnedFd, String)> =
        vec![(rustix::fs::openat(view, ".", dir_flags(), Mode::empty()).map_err(errno)?, String::new())];
    while let Some((dir, rel)) = stack.pop() {
        for name in list_names(dir.as_fd())? {
            let child = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            let (kind, st) = stat_kind(dir.as_fd(), &name)?;
            match kind {
                FileType::Directory => {
                    out.insert(child.clone(), Found::Dir);
                    if child.len() < rule::VIEW_PATH_BYTES_MAX {
                        stack.push((open_dir_at(dir.as_fd(), &name)?, child));
                    }
                }
                FileType::RegularFile => {
                    out.insert(child, Found::File { size_bytes: u64::try_from(st.st_size).unwrap_or(0) });
                }
                _ => {
                    out.insert(child, Found::Other);
                }
            }
        }
    }
    Ok(out)
}

//! The staging-root walk of cleanup, and the per-path re-observation and deletion of apply,
//! all through directory handles (`handles.rs`).
//!
//! Invariant: nothing here follows a symlink or leaves the staging root, even while the tree
//! changes underneath. The walk opens each directory relative to its parent's handle with
//! `O_NOFOLLOW | O_DIRECTORY`; a symlink is reported as itself. Apply reaches a planned path
//! the same way, describes the entry relative to the handle of the directory holding it, and
//! deletes it with `unlinkat` on that same handle: a directory swapped for a symlink (even
//! between the check and the deletion) makes the path skipped, never followed. Paths are
//! rebuilt from plain components, each checked: no empty, `.` or `..` component can reach the
//! file system. The staging-root marker is never listed.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::handles::{self, Kind, MARKER_NAME};
use crate::error::{Error, Result};
use crate::rules::cleanup::Observed;

/// Deepest directory nesting the walk descends into; deeper entries are reported, not read.
const WALK_DEPTH_MAX: usize = 256;

/// What the walk found.
#[derive(Debug, Default)]
pub(crate) struct Walk {
    /// Regular files and symlinks, with their identity, size and times.
    pub(crate) found: Vec<Observed>,
    /// Entries that could not be considered (unreadable, not UTF-8, special files, too deep).
    pub(crate) unconsidered: Vec<String>,
}

fn observed(rel: String, stat: &handles::Stat) -> Observed {
    Observed {
        rel,
        symlink: stat.kind == Kind::Symlink,
        size_bytes: stat.size_bytes,
        modified_at_ms: stat.modified_at_ms(),
        device: stat.device,
        inode: stat.inode,
        modified_at_ns: stat.modified_at_ns,
        changed_at_ns: stat.changed_at_ns,
    }
}

fn join(rel: &str, name: &str) -> String {
    if rel.is_empty() { name.to_owned() } else { format!("{rel}/{name}") }
}

/// Walks everything under the root held by `root` without following symlinks.
pub(crate) fn walk(root: BorrowedFd<'_>, root_display: &std::path::Path) -> Result<Walk> {
    let mut out = Walk::default();
    let names = handles::list(root).map_err(|e| Error::io(format!("listing staging root {}", root_display.display()), e))?;
    visit(root, "", names, 0, &mut out);
    Ok(out)
}

fn visit(dir: BorrowedFd<'_>, rel: &str, names: Vec<std::result::Result<String, String>>, depth: usize, out: &mut Walk) {
    for name in names {
        let name = match name {
            Ok(name) => name,
            Err(lossy) => {
                out.unconsidered.push(format!("{} (name is not UTF-8)", join(rel, &lossy)));
                continue;
            }
        };
        if rel.is_empty() && name == MARKER_NAME {
            continue;
        }
        let child_rel = join(rel, &name);
        let stat = match handles::stat_at(dir, &name) {
            Ok(stat) => stat,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                out.unconsidered.push(format!("{child_rel} (unreadable: {e})"));
                continue;
            }
        };
        match stat.kind {
            Kind::Dir if depth + 1 >= WALK_DEPTH_MAX => {
                out.unconsidered.push(format!("{child_rel} (nested deeper than {WALK_DEPTH_MAX})"));
            }
            Kind::Dir => {
                // Opened relative to this directory's handle, refusing a symlink: if the entry
                // was swapped since it was described, it is not entered.
                let child = match handles::open_dir_at(dir, &name) {
                    Ok(child) => child,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        out.unconsidered.push(format!("{child_rel} (unreadable: {e})"));
                        continue;
                    }
                };
                match handles::list(child.as_fd()) {
                    Ok(names) => visit(child.as_fd(), &child_rel, names, depth + 1, out),
                    Err(e) => out.unconsidered.push(format!("{child_rel} (unreadable: {e})")),
                }
            }
            Kind::File | Kind::Symlink => out.found.push(observed(child_rel, &stat)),
            Kind::Other => out.unconsidered.push(format!("{child_rel} (not a regular file, directory or symlink)")),
        }
    }
}

/// What a planned path is now.
#[derive(Debug)]
pub(crate) enum Now {
    /// Nothing there.
    Missing,
    /// Something that is no longer a plain file or symlink reached through real directories
    /// (or a path that is not a plain relative path at all).
    Other,
    /// A file or symlink.
    Found(Observed),
}

/// Splits a planned path into its directories and its leaf, refusing anything but plain
/// components.
fn split(rel: &str) -> Option<(Vec<&str>, &str)> {
    let mut components: Vec<&str> = rel.split('/').collect();
    if components.iter().any(|c| !handles::is_plain_component(c)) {
        return None;
    }
    let leaf = components.pop()?;
    if components.is_empty() && leaf == MARKER_NAME {
        return None;
    }
    Some((components, leaf))
}

fn now_of_error(e: &io::Error) -> Now {
    if e.kind() == io::ErrorKind::NotFound { Now::Missing } else { Now::Other }
}

/// Reaches planned paths under one root handle, keeping the handles of the directories of the
/// last path so that consecutive paths of one directory reuse them.
pub(crate) struct Applier<'r> {
    root: BorrowedFd<'r>,
    /// The directories of the last path reached: `(name, handle)`, outermost first.
    chain: Vec<(String, OwnedFd)>,
}

impl<'r> Applier<'r> {
    pub(crate) fn new(root: BorrowedFd<'r>) -> Applier<'r> {
        Applier { root, chain: Vec::new() }
    }

    /// Forgets the cached handles (after directories were removed).
    pub(crate) fn forget(&mut self) {
        self.chain.clear();
    }

    /// The handle of the directory holding a path with these directories.
    fn parent(&mut self, dirs: &[&str]) -> io::Result<BorrowedFd<'_>> {
        let common = self.chain.iter().zip(dirs).take_while(|((name, _), want)| name == *want).count();
        self.chain.truncate(common);
        for name in &dirs[common..] {
            let parent = self.chain.last().map_or(self.root, |(_, fd)| fd.as_fd());
            let fd = match handles::open_dir_at(parent, name) {
                Ok(fd) => fd,
                Err(e) => {
                    self.chain.clear();
                    return Err(e);
                }
            };
            self.chain.push(((*name).to_owned(), fd));
        }
        Ok(self.chain.last().map_or(self.root, |(_, fd)| fd.as_fd()))
    }

    /// Observes one path again, as the walk would have seen it.
    pub(crate) fn observe(&mut self, rel: &str) -> Now {
        let Some((dirs, leaf)) = split(rel) else { return Now::Other };
        let parent = match self.parent(&dirs) {
            Ok(parent) => parent,
            Err(e) => return now_of_error(&e),
        };
        match handles::stat_at(parent, leaf) {
            Ok(stat) if matches!(stat.kind, Kind::File | Kind::Symlink) => Now::Found(observed(rel.to_owned(), &stat)),
            Ok(_) => Now::Other,
            Err(e) => now_of_error(&e),
        }
    }

    /// Deletes one file or symlink (the link itself) with `unlinkat` on the handle of the
    /// directory [`Applier::observe`] just described it in.
    pub(crate) fn delete(&mut self, rel: &str) -> io::Result<()> {
        let (dirs, leaf) = split(rel).ok_or_else(|| io::Error::other("not a plain relative path"))?;
        let parent = self.parent(&dirs)?;
        handles::unlink_at(parent, leaf)
    }
}

/// Removes the now-empty directories containing `rel`, deepest first, never the root itself
/// and never through a symlink. Returns how many were removed.
pub(crate) fn remove_empty_parents(root: BorrowedFd<'_>, rel: &str) -> u64 {
    let mut removed = 0;
    let mut rel = rel;
    while let Some((parent, _)) = rel.rsplit_once('/') {
        if remove_empty_dir(root, parent) {
            removed += 1;
            rel = parent;
        } else {
            break;
        }
    }
    removed
}

/// Removes `root/rel` if it is a real, empty directory (the kernel refuses a non-empty
/// directory and a symlink).
pub(crate) fn remove_empty_dir(root: BorrowedFd<'_>, rel: &str) -> bool {
    let Some((dirs, leaf)) = split(rel) else { return false };
    match handles::open_dir_chain(root, &dirs) {
        Ok(parent) => handles::rmdir_at(parent.as_fd(), leaf).is_ok(),
        Err(_) => false,
    }
}

/// Whether `root/rel` is absent, or is a real directory holding nothing.
pub(crate) fn dir_is_gone_or_empty(root: BorrowedFd<'_>, rel: &str) -> bool {
    let Some((dirs, leaf)) = split(rel) else { return false };
    let mut all = dirs;
    all.push(leaf);
    match handles::open_dir_chain(root, &all) {
        Ok(dir) => handles::is_empty_except(dir.as_fd(), &[]).unwrap_or(false),
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn traversal_in_a_planned_path_reaches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("a")).unwrap();
        fs::write(dir.path().join("victim"), "outside").unwrap();
        fs::write(root.join("a/x"), "inside").unwrap();
        let fd = handles::open_root(&root).unwrap();
        let mut applier = Applier::new(fd.as_fd());
        for bad in ["../victim", "a/../../victim", "/victim", "a//x", "./a/x", "a/./x", "", MARKER_NAME] {
            assert!(matches!(applier.observe(bad), Now::Other), "{bad:?} observed");
            assert!(applier.delete(bad).is_err(), "{bad:?} deleted");
        }
        assert!(dir.path().join("victim").exists());
        assert!(matches!(applier.observe("a/x"), Now::Found(_)));
        assert!(!remove_empty_dir(fd.as_fd(), ".."));
        assert_eq!(remove_empty_parents(fd.as_fd(), "../x"), 0);
        assert!(root.is_dir() && dir.path().is_dir());
    }

    #[test]
    fn the_walk_reports_links_as_themselves() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(&root).unwrap();
        fs::write(dir.path().join("outside"), "x").unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("up")).unwrap();
        let fd = handles::open_root(&root).unwrap();
        let walked = walk(fd.as_fd(), &root).unwrap();
        assert_eq!(walked.found.len(), 1);
        assert!(walked.found[0].symlink && walked.found[0].rel == "up");
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_is_neither_entered_nor_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        fs::create_dir_all(root.join("a")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("x"), "precious").unwrap();
        fs::remove_dir(root.join("a")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("a")).unwrap();
        let fd = handles::open_root(&root).unwrap();
        let mut applier = Applier::new(fd.as_fd());
        assert!(matches!(applier.observe("a/x"), Now::Other));
        assert!(applier.delete("a/x").is_err());
        assert!(!dir_is_gone_or_empty(fd.as_fd(), "a"));
        assert!(!remove_empty_dir(fd.as_fd(), "a/x"));
        assert!(outside.join("x").exists());
    }
}

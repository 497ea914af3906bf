//! The staging-root walk of cleanup, and the per-path re-observation and deletion of apply.
//!
//! Invariant: nothing here follows a symlink or leaves the staging root. The walk descends
//! only into real directories found by `read_dir` under the root (entry types come from the
//! directory entry, never from following a link); a symlink is reported as itself. Paths are
//! rebuilt from plain components, each checked: no empty, `.` or `..` component can reach the
//! file system. Before a deletion, every directory on the way is re-checked to be a real
//! directory, so a directory swapped for a symlink after planning makes the path skipped.

use std::fs::{self, Metadata};
use std::io;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use crate::error::{Error, Result};
use crate::rules::cleanup::Observed;

/// Deepest directory nesting the walk descends into; deeper entries are reported, not read.
const WALK_DEPTH_MAX: usize = 256;

/// What the walk found.
#[derive(Debug, Default)]
pub(crate) struct Walk {
    /// Regular files and symlinks, with their size and modification time.
    pub(crate) found: Vec<Observed>,
    /// Entries that could not be considered (unreadable, not UTF-8, special files, too deep).
    pub(crate) unconsidered: Vec<String>,
}

fn modified_ms(meta: &Metadata) -> Option<u64> {
    let modified = meta.modified().ok()?;
    Some(modified.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
}

fn observed(rel: String, meta: &Metadata) -> Option<Observed> {
    Some(Observed { rel, symlink: meta.file_type().is_symlink(), size_bytes: meta.len(), modified_at_ms: modified_ms(meta)? })
}

/// Walks everything under `root` without following symlinks.
pub(crate) fn walk(root: &Path) -> Result<Walk> {
    let mut out = Walk::default();
    let mut stack: Vec<(PathBuf, String, usize)> = vec![(root.to_path_buf(), String::new(), 0)];
    while let Some((dir, rel, depth)) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if rel.is_empty() => return Err(Error::io(format!("listing staging root {}", dir.display()), e)),
            Err(e) => {
                out.unconsidered.push(format!("{rel} (unreadable: {e})"));
                continue;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    out.unconsidered.push(format!("{rel} (listing failed: {e})"));
                    continue;
                }
            };
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                out.unconsidered.push(format!("{rel}/{} (name is not UTF-8)", name.to_string_lossy()));
                continue;
            };
            let child_rel = if rel.is_empty() { name.to_owned() } else { format!("{rel}/{name}") };
            let path = entry.path();
            // `symlink_metadata` describes the entry itself; a symlink is never resolved.
            let meta = match fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => {
                    out.unconsidered.push(format!("{child_rel} (unreadable: {e})"));
                    continue;
                }
            };
            let kind = meta.file_type();
            if kind.is_dir() {
                if depth + 1 >= WALK_DEPTH_MAX {
                    out.unconsidered.push(format!("{child_rel} (nested deeper than {WALK_DEPTH_MAX})"));
                } else {
                    stack.push((path, child_rel, depth + 1));
                }
            } else if kind.is_file() || kind.is_symlink() {
                match observed(child_rel.clone(), &meta) {
                    Some(found) => out.found.push(found),
                    None => out.unconsidered.push(format!("{child_rel} (no modification time)")),
                }
            } else {
                out.unconsidered.push(format!("{child_rel} (not a regular file, directory or symlink)"));
            }
        }
    }
    Ok(out)
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

/// Resolves `rel` under `root` component by component without following symlinks.
fn resolve(root: &Path, rel: &str) -> Result<PathBuf, Now> {
    let components: Vec<&str> = rel.split('/').collect();
    if components.iter().any(|c| c.is_empty() || *c == "." || *c == ".." || c.contains('\0')) {
        return Err(Now::Other);
    }
    let mut path = root.to_path_buf();
    for component in &components[..components.len() - 1] {
        path.push(component);
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_dir() => {}
            Ok(_) => return Err(Now::Other),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(Now::Missing),
            Err(_) => return Err(Now::Other),
        }
    }
    path.push(components[components.len() - 1]);
    Ok(path)
}

/// Observes one path again, as the walk would have seen it.
pub(crate) fn observe(root: &Path, rel: &str) -> Now {
    let path = match resolve(root, rel) {
        Ok(path) => path,
        Err(now) => return now,
    };
    match fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_file() || meta.file_type().is_symlink() => {
            observed(rel.to_owned(), &meta).map_or(Now::Other, Now::Found)
        }
        Ok(_) => Now::Other,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Now::Missing,
        Err(_) => Now::Other,
    }
}

/// Deletes one file or symlink (the link itself), re-checking the directories on its way.
pub(crate) fn delete(root: &Path, rel: &str) -> io::Result<()> {
    let path = resolve(root, rel).map_err(|_| io::Error::other("a directory on the path changed"))?;
    fs::remove_file(path)
}

/// Removes the now-empty directories containing `rel`, deepest first, never the root itself
/// and never through a symlink. Returns how many were removed.
pub(crate) fn remove_empty_parents(root: &Path, rel: &str) -> u64 {
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

/// Removes `root/rel` if it is a real, empty directory.
pub(crate) fn remove_empty_dir(root: &Path, rel: &str) -> bool {
    let Ok(path) = resolve(root, rel) else {
        return false;
    };
    match fs::symlink_metadata(&path) {
        // `remove_dir` refuses a non-empty directory, which is exactly the check wanted.
        Ok(meta) if meta.file_type().is_dir() => fs::remove_dir(&path).is_ok(),
        _ => false,
    }
}

/// Whether `root/rel` is absent, or is a real directory holding nothing.
pub(crate) fn dir_is_gone_or_empty(root: &Path, rel: &str) -> bool {
    let path = match resolve(root, rel) {
        Ok(path) => path,
        Err(Now::Missing) => return true,
        Err(_) => return false,
    };
    match fs::symlink_metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => true,
        Ok(meta) if meta.file_type().is_dir() => fs::read_dir(&path).is_ok_and(|mut entries| entries.next().is_none()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traversal_in_a_planned_path_reaches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("a")).unwrap();
        fs::write(dir.path().join("victim"), "outside").unwrap();
        fs::write(root.join("a/x"), "inside").unwrap();
        for bad in ["../victim", "a/../../victim", "/victim", "a//x", "./a/x", "a/./x", ""] {
            assert!(matches!(observe(&root, bad), Now::Other), "{bad:?} observed");
            assert!(delete(&root, bad).is_err(), "{bad:?} deleted");
        }
        assert!(dir.path().join("victim").exists());
        assert!(matches!(observe(&root, "a/x"), Now::Found(_)));
        assert!(!remove_empty_dir(&root, ".."));
        assert_eq!(remove_empty_parents(&root, "../x"), 0);
        assert!(root.is_dir() && dir.path().is_dir());
    }

    #[test]
    fn the_walk_reports_links_as_themselves() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(&root).unwrap();
        fs::write(dir.path().join("outside"), "x").unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("up")).unwrap();
        let walked = walk(&root).unwrap();
        assert_eq!(walked.found.len(), 1);
        assert!(walked.found[0].symlink && walked.found[0].rel == "up");
    }
}

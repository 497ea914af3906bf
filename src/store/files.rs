//! File-system side of the store: staging directories, file observation for validation, and
//! the syncs that make creation and renames durable.
//!
//! Invariant: nothing here follows a symlink inside the staging root. A path whose component
//! is a symlink is treated as missing (observation) or refused (staging directory creation),
//! so a planted link cannot make the store read or create anything outside the root.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::model::{FileCheck, FileEntry};
use crate::rules::validate::FileObservation;

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

/// Creates the attempt's staging directory `root/rel`, refusing to pass through a symlink.
/// The leaf is created fresh or must be an empty directory (left by a begin that crashed
/// before it committed, so no worker ever had it).
pub(crate) fn create_staging_dir(root: &Path, rel: &str) -> Result<PathBuf> {
    let (parent_rel, leaf) = rel.rsplit_once('/').unwrap_or(("", rel));
    let parent = if parent_rel.is_empty() { root.to_path_buf() } else { prepare_staging_parent(root, parent_rel)? };
    match create_attempt_dir(&parent, leaf, rel)? {
        Some(dir) => Ok(dir),
        None => Err(Error::io(
            format!("creating staging directory {}", parent.join(leaf).display()),
            io::Error::new(io::ErrorKind::NotFound, "its parent directory vanished while it was being created"),
        )),
    }
}

/// Creates (or checks) the directories `root/parent_rel`, refusing to pass through a symlink
/// or a non-directory. Idempotent, so it can run before the begin transaction, outside the
/// single writer's critical section.
pub(crate) fn prepare_staging_parent(root: &Path, parent_rel: &str) -> Result<PathBuf> {
    let mut dir = root.to_path_buf();
    for component in parent_rel.split('/') {
        dir.push(component);
        match fs::symlink_metadata(&dir) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(Error::invalid("staging path", parent_rel, format!("{} is a symlink; refusing to follow it", dir.display())));
            }
            Ok(meta) if !meta.is_dir() => {
                return Err(Error::invalid("staging path", parent_rel, format!("{} exists and is not a directory", dir.display())));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::create_dir(&dir) {
                // Another attempt of a sibling task may create the same directory in between.
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io(format!("creating staging directory {}", dir.display()), e)),
            },
            Err(e) => return Err(Error::io(format!("inspecting {}", dir.display()), e)),
        }
    }
    Ok(dir)
}

/// Creates an attempt's own directory `parent/leaf` with one `mkdir`. An existing leaf must be
/// an empty real directory. `Ok(None)` if the parent is gone (a concurrent cleanup removed it
/// as empty): the caller prepares the parent again.
pub(crate) fn create_attempt_dir(parent: &Path, leaf: &str, rel: &str) -> Result<Option<PathBuf>> {
    let dir = parent.join(leaf);
    match fs::create_dir(&dir) {
        Ok(()) => Ok(Some(dir)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let meta = fs::symlink_metadata(&dir).map_err(|e| Error::io(format!("inspecting {}", dir.display()), e))?;
            if meta.file_type().is_symlink() || !meta.is_dir() {
                return Err(Error::invalid("staging path", rel, format!("{} exists and is not a directory", dir.display())));
            }
            let mut entries = fs::read_dir(&dir).map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
            if entries.next().is_some() {
                return Err(Error::invalid("staging path", rel, format!("{} already holds files of an unknown writer", dir.display())));
            }
            Ok(Some(dir))
        }
        Err(e) => Err(Error::io(format!("creating staging directory {}", dir.display()), e)),
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

/// Flushes a directory's entries (a created or renamed file in it) to disk.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    let handle = File::open(dir).map_err(|e| Error::io(format!("opening directory {} to sync it", dir.display()), e))?;
    handle.sync_all().map_err(|e| Error::io(format!("syncing directory {}", dir.display()), e))
}

//! The staging root, local or on object storage: the one interface every operation that touches
//! an attempt's files goes through (observe a reported file, open it for reading at the grain,
//! make a valid candidate durable, the marker naming the store's staging identity, where the
//! key set spills).
//!
//! A local root is a directory reached through handles (`handles.rs`, `files.rs`); an object
//! root (feature `s3`) is a prefix of a bucket (`crate::objects`), where each attempt's
//! "directory" is the prefix `<root>/<staging_rel>/` and an object is durable once its PUT was
//! acknowledged. The rules that decide (`rules::staging`, `rules::validate`, `rules::cleanup`)
//! are the same for both: only the reads and writes differ, here.
//!
//! Invariant: a relative path reaches the store only after `rules::ids` checked it, for both
//! kinds; an object root never creates anything but its marker.

use std::io;
use std::path::{Path, PathBuf};
#[cfg(feature = "s3")]
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::model::FileEntry;
use crate::readers::Source;
use crate::rules::staging::MarkerSeen;
use crate::rules::validate::NotDurable;

use super::{files, handles};

/// A staging root: a local directory, or a prefix on object storage.
#[derive(Debug)]
pub(crate) enum StagingRoot {
    /// A directory (its canonical path).
    Local(PathBuf),
    /// `s3://bucket/prefix`; `shown` is the URL as a path, what [`crate::Store::staging_root`]
    /// returns and what joining a staging path to gives the attempt's URL.
    #[cfg(feature = "s3")]
    Object { root: Arc<crate::objects::ObjectRoot>, shown: PathBuf },
}

/// What was found at the staging root before the store was opened.
pub(crate) struct RootSeen {
    pub(crate) root: StagingRoot,
    pub(crate) marker: MarkerSeen,
    /// Nothing in the root besides the marker.
    pub(crate) empty_but_marker: bool,
}

/// Refuses an `s3://` root in a build without the `s3` feature, which would otherwise take it
/// for a relative directory named `s3:`.
#[cfg(not(feature = "s3"))]
fn refuse_object_url(location: &Path) -> Result<()> {
    match location.to_str() {
        Some(url) if url.starts_with("s3://") => Err(Error::invalid(
            "staging root",
            url,
            "this build of manifestdb has no object-storage staging; enable the crate's `s3` feature",
        )),
        _ => Ok(()),
    }
}

impl StagingRoot {
    /// Opens the staging root at `location` (a directory, created if missing, or with feature
    /// `s3` an `s3://bucket/prefix` URL) and reads its marker.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL; I/O errors.
    pub(crate) fn open(location: &Path, group_access: bool) -> Result<RootSeen> {
        #[cfg(not(feature = "s3"))]
        refuse_object_url(location)?;
        #[cfg(feature = "s3")]
        if crate::objects::is_object_url(location) {
            let url = location.to_str().unwrap_or_default();
            let root = Arc::new(crate::objects::ObjectRoot::connect(url)?);
            let shown = PathBuf::from(root.url());
            return StagingRoot::Object { root, shown }.look();
        }
        files::create_dir_all_durable(location, super::created_dir_mode(group_access))?;
        let path = std::fs::canonicalize(location).map_err(|e| Error::io(format!("resolving staging root {}", location.display()), e))?;
        StagingRoot::Local(path).look()
    }

    /// The staging root at `location` as a read-only handle names it: a directory made absolute
    /// (canonical if it exists; nothing is created), or an object root's URL.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL; [`Error::Io`] if the current directory cannot
    /// be read to make a relative path absolute.
    pub(crate) fn resolve(location: &Path) -> Result<StagingRoot> {
        #[cfg(not(feature = "s3"))]
        refuse_object_url(location)?;
        #[cfg(feature = "s3")]
        if crate::objects::is_object_url(location) {
            let root = Arc::new(crate::objects::ObjectRoot::connect(location.to_str().unwrap_or_default())?);
            let shown = PathBuf::from(root.url());
            return Ok(StagingRoot::Object { root, shown });
        }
        match std::fs::canonicalize(location) {
            Ok(path) => Ok(StagingRoot::Local(path)),
            Err(_) => std::path::absolute(location)
                .map(StagingRoot::Local)
                .map_err(|e| Error::io(format!("resolving staging root {}", location.display()), e)),
        }
    }

    /// Reads the marker and whether anything else is in the root.
    fn look(self) -> Result<RootSeen> {
        let (marker, empty_but_marker) = match &self {
            StagingRoot::Local(path) => {
                let fd = handles::open_root(path).map_err(|e| Error::io(format!("opening staging root {}", path.display()), e))?;
                super::inspect_root(&fd, path)?
            }
            #[cfg(feature = "s3")]
            StagingRoot::Object { root, .. } => {
                let failed = |e| Error::io(format!("reading the staging-root marker in {}", root.url()), e);
                let marker = match root.read_small(handles::MARKER_NAME, handles::MARKER_BYTES_MAX).map_err(failed)? {
                    None => MarkerSeen::Absent,
                    Some(bytes) => match handles::parse_marker(&String::from_utf8_lossy(&bytes)) {
                        handles::Marker::Present(id) => MarkerSeen::Present(id),
                        handles::Marker::Damaged(why) => MarkerSeen::Damaged(why),
                        handles::Marker::Absent => MarkerSeen::Absent,
                    },
                };
                let others = root
                    .holds_other_than(handles::MARKER_NAME)
                    .map_err(|e| Error::io(format!("listing staging root {}", root.url()), e))?;
                (marker, !others)
            }
        };
        Ok(RootSeen { root: self, marker, empty_but_marker })
    }

    /// Writes the marker naming `identity` (durably: a local file synced and renamed in, an
    /// acknowledged PUT).
    pub(crate) fn write_marker(&self, identity: &str) -> Result<()> {
        match self {
            StagingRoot::Local(path) => {
                let fd = handles::open_root(path).map_err(|e| Error::io(format!("opening staging root {}", path.display()), e))?;
                handles::write_marker(std::os::fd::AsFd::as_fd(&fd), identity)
                    .map_err(|e| Error::io(format!("writing the staging-root marker in {}", path.display()), e))
            }
            #[cfg(feature = "s3")]
            StagingRoot::Object { root, .. } => root.put(handles::MARKER_NAME, handles::marker_text(identity).into_bytes()),
        }
    }

    /// The root as a path: a local root's canonical path, or an object root's URL.
    pub(crate) fn path(&self) -> &Path {
        match self {
            StagingRoot::Local(path) => path,
            #[cfg(feature = "s3")]
            StagingRoot::Object { shown, .. } => shown,
        }
    }

    /// A local root's directory; `None` for an object root.
    pub(crate) fn local(&self) -> Option<&Path> {
        match self {
            StagingRoot::Local(path) => Some(path),
            #[cfg(feature = "s3")]
            StagingRoot::Object { .. } => None,
        }
    }

    /// The object root, if this is one.
    #[cfg(feature = "s3")]
    pub(crate) fn object(&self) -> Option<&Arc<crate::objects::ObjectRoot>> {
        match self {
            StagingRoot::Local(_) => None,
            StagingRoot::Object { root, .. } => Some(root),
        }
    }

    /// What is seen of the reported file `file_path` of the attempt at `staging_rel`: its size
    /// and, with `checksum`, its CRC32 (read whole); `None` if no regular file (no object) is
    /// there.
    ///
    /// # Errors
    /// Any other I/O failure (a fault to retry).
    pub(crate) fn observe_file(&self, staging_rel: &str, file_path: &str, checksum: bool) -> io::Result<Option<(u64, Option<u32>)>> {
        match self {
            StagingRoot::Local(path) => handles::observe_file(path, staging_rel, file_path, checksum),
            #[cfg(feature = "s3")]
            StagingRoot::Object { root, .. } => root.observe(&join_rel(staging_rel, file_path), checksum),
        }
    }

    /// Opens the reported file `file_path` of the attempt at `staging_rel` for reading at the
    /// grain, with its size; `None` if it is not there.
    ///
    /// # Errors
    /// As [`StagingRoot::observe_file`].
    pub(crate) fn open_file(&self, staging_rel: &str, file_path: &str) -> io::Result<Option<(Source, u64)>> {
        match self {
            StagingRoot::Local(path) => {
                Ok(handles::open_regular_file(path, staging_rel, file_path)?.map(|(f, size)| (Source::File(f), size)))
            }
            #[cfg(feature = "s3")]
            StagingRoot::Object { root, .. } => Ok(root.open(&join_rel(staging_rel, file_path))?.map(|o| {
                let size = o.len();
                (Source::Object(o), size)
            })),
        }
    }

    /// Where the grain-key set of a validation spills: a private directory is made inside. The
    /// local root itself (same file system as the data); for an object root, the system's
    /// temporary directory.
    pub(crate) fn spill_parent(&self) -> PathBuf {
        match self {
            StagingRoot::Local(path) => path.clone(),
            #[cfg(feature = "s3")]
            StagingRoot::Object { .. } => std::env::temp_dir(),
        }
    }

    /// Makes a valid candidate's files durable before its verdict is stored (DOMAIN 11): on a
    /// local root each file and each directory on its way is synced (`files.rs`); on object
    /// storage an object is durable once its PUT was acknowledged, which it was before it could
    /// be listed or read, so there is nothing to do (each file is reported done).
    pub(crate) fn make_candidate_durable(
        &self,
        staging_rel: &str,
        candidate_files: &[FileEntry],
        durable: &files::DurableDirs,
        #[cfg_attr(not(feature = "s3"), allow(unused_mut, reason = "only the object root's arm calls it by reference"))]
        mut file_synced: impl FnMut(&FileEntry),
    ) -> Result<Vec<NotDurable>> {
        match self {
            StagingRoot::Local(path) => files::make_candidate_durable(path, staging_rel, candidate_files, durable, file_synced),
            #[cfg(feature = "s3")]
            StagingRoot::Object { .. } => {
                let _ = (staging_rel, durable);
                candidate_files.iter().for_each(&mut file_synced);
                Ok(Vec::new())
            }
        }
    }
}

/// `staging_rel/file_path`, or `file_path` alone for an empty `staging_rel`.
#[cfg(feature = "s3")]
pub(crate) fn join_rel(staging_rel: &str, file_path: &str) -> String {
    if staging_rel.is_empty() { file_path.to_owned() } else { format!("{}/{file_path}", staging_rel.trim_end_matches('/')) }
}

//! Where things are under the view root: each dataset's directory (and the marker that makes it
//! manifestdb's), what it holds, and the generation `current` names.

use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use rustix::fs::{FileType, Mode, OFlags};

use super::Views;
use super::dirs::{errno, is_errno, list_names, open_dir_at, stat_kind};
use crate::error::{Error, Result};
use crate::rules::views as rule;

/// What a dataset directory holds.
#[derive(Debug, Default)]
pub(super) struct Listing {
    pub(super) views: Vec<u64>,
    pub(super) leftovers: Vec<String>,
}

impl Views {
    pub(super) fn dataset_path(&self, dataset: &str) -> PathBuf {
        self.root.join(dataset)
    }

    /// Opens (creating if missing) the dataset's view directory. An existing directory must
    /// carry the marker or be empty (then it is adopted); anything else is refused untouched.
    pub(super) fn open_dataset(&self, root: BorrowedFd<'_>, dataset: &str, create: bool) -> Result<Option<OwnedFd>> {
        if dataset.starts_with('.') {
            return Err(self.refused(dataset, self.dataset_path(dataset).display().to_string(), "a hidden dataset name cannot be a view"));
        }
        let path = self.dataset_path(dataset);
        let fd = match open_dir_at(root, dataset) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.op(&|| format!("creating {}", path.display()))?;
                match rustix::fs::mkdirat(root, dataset, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(Error::io(format!("creating {}", path.display()), errno(e))),
                }
                self.op(&|| format!("syncing {}", self.root.display()))?;
                rustix::fs::fsync(root).map_err(errno).map_err(self.io_err(format!("syncing {}", self.root.display())))?;
                open_dir_at(root, dataset).map_err(self.io_err(format!("opening {}", path.display())))?
            }
            Err(e) if is_errno(&e, rustix::io::Errno::LOOP) || is_errno(&e, rustix::io::Errno::NOTDIR) => {
                return Err(self.refused(
                    dataset,
                    path.display().to_string(),
                    "exists and is a symlink or not a directory; refusing to follow or replace it",
                ));
            }
            Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
        };
        match stat_kind(fd.as_fd(), rule::MARKER) {
            Ok((FileType::RegularFile, _)) => return Ok(Some(fd)),
            Ok(_) => {
                return Err(self.refused(dataset, path.display().to_string(), format!("{} is not a regular file", rule::MARKER)));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("inspecting {}", path.join(rule::MARKER).display()), e)),
        }
        if !create {
            return Err(self.refused(dataset, path.display().to_string(), "exists and is not a manifestdb view directory"));
        }
        let empty = list_names(fd.as_fd()).map_err(self.io_err(format!("listing {}", path.display())))?.is_empty();
        if !empty {
            return Err(self.refused(
                dataset,
                path.display().to_string(),
                format!(
                    "exists, is not empty and is not a manifestdb view directory (no {} marker); refusing to write into it or \
                     delete anything in it: move it away or choose another view root",
                    rule::MARKER
                ),
            ));
        }
        self.op(&|| format!("creating {}", path.join(rule::MARKER).display()))?;
        let marker = rustix::fs::openat(
            fd.as_fd(),
            rule::MARKER,
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(errno)
        .map_err(self.io_err(format!("creating {}", path.join(rule::MARKER).display())))?;
        let mut marker = std::fs::File::from(marker);
        marker
            .write_all(
                format!(
                    "manifestdb view directory of dataset {dataset}: its Delta table and, with directory trees, `current` and `v<N>`\n"
                )
                .as_bytes(),
            )
            .and_then(|()| marker.sync_all())
            .map_err(self.io_err(format!("writing {}", path.join(rule::MARKER).display())))?;
        self.op(&|| format!("syncing {}", path.display()))?;
        rustix::fs::fsync(&fd).map_err(errno).map_err(self.io_err(format!("syncing {}", path.display())))?;
        Ok(Some(fd))
    }

    pub(super) fn list(&self, ds: BorrowedFd<'_>, dataset: &str) -> Result<Listing> {
        let mut listing = Listing::default();
        for name in list_names(ds).map_err(self.io_err(format!("listing {}", self.dataset_path(dataset).display())))? {
            if let Some(n) = rule::parse_view_name(&name) {
                listing.views.push(n);
            } else if rule::is_leftover(&name) {
                listing.leftovers.push(name);
            }
        }
        listing.views.sort_unstable();
        Ok(listing)
    }

    /// The generation `current` names: `None` if there is no `current`.
    pub(super) fn current_target(&self, ds: BorrowedFd<'_>, dataset: &str) -> Result<Option<u64>> {
        let path = self.dataset_path(dataset).join(rule::CURRENT);
        match rustix::fs::readlinkat(ds, rule::CURRENT, Vec::new()) {
            Ok(target) => {
                let target = target.to_string_lossy().into_owned();
                rule::parse_view_name(&target).map(Some).ok_or_else(|| {
                    self.refused(dataset, path.display().to_string(), format!("is a symlink to {target:?}, not to a view v<N>"))
                })
            }
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(rustix::io::Errno::INVAL) => {
                Err(self.refused(dataset, path.display().to_string(), "exists and is not a symlink; refusing to replace it"))
            }
            Err(e) => Err(Error::io(format!("reading {}", path.display()), errno(e))),
        }
    }
}

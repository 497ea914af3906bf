//! Removing views: an expiry's views renamed away (synced) before the expiry commits, their
//! trees then removed by the [`Reaper`] in the background; leftovers of interrupted builds.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use rustix::fs::{AtFlags, FileType, RenameFlags};

use super::Views;
use super::dirs::{errno, list_entries, open_dir_at, stat_kind};
use crate::error::{Error, Result};
use crate::rules::views as rule;

/// Most views removed at once (each by a thread of its own) by one expiry or sync. A removal
/// mostly waits: on this project's ext4 machine an `rmdir` took 0.1 to 2 ms, most of it waiting
/// for the journal, and removals from several threads join the same journal transaction
/// (40 views of 1,000 partitions: 3.2 and 4.1 s on 16 threads, 4.4 to 7.7 s on 4, same load).
const REMOVE_THREADS_MAX: usize = 16;

/// The trees of expired views, removed on a thread of their own once their expiry renamed them
/// away (see [`Views::remove_views`]), so that the expiry, and the store's write it runs in,
/// does not wait for thousands of `unlink`s and `rmdir`s.
///
/// Invariant: a tree handed over has a leftover name (`.expired-v<N>`) whose rename was synced
/// before: no `current`, no retained view and no Delta version names anything in it, and a
/// crash before its removal ends leaves it for the next view sync, like any leftover. While
/// it is in `busy`, nothing else in this process removes it ([`Views::sync`] skips it; an
/// expiry needing its name waits). Dropping the [`Views`] (closing the store) waits for every
/// removal.
#[derive(Default)]
pub(super) struct Reaper {
    /// The trees not yet removed: the dataset directory's path joined with the leftover name.
    busy: std::sync::Arc<Mutex<std::collections::HashSet<PathBuf>>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Reaper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reaper").field("busy", &self.busy.lock().len()).finish_non_exhaustive()
    }
}

impl Reaper {
    pub(super) fn is_busy(&self, path: &Path) -> bool {
        self.busy.lock().contains(path)
    }

    /// Waits until every tree handed over is removed (or its removal failed, logged; the next
    /// view sync removes what is left).
    pub(super) fn wait(&self) {
        let threads = std::mem::take(&mut *self.threads.lock());
        for thread in threads {
            if thread.join().is_err() {
                tracing::warn!("a view removal thread panicked; the next view sync removes what it left");
            }
        }
    }

    /// Removes the trees `names` of the dataset directory `ds` (at `base`) on a thread of its
    /// own, several at a time. `Err` gives the names back if no thread could be started.
    pub(super) fn remove(&self, ds: BorrowedFd<'_>, base: &Path, names: Vec<String>) -> std::result::Result<(), Vec<String>> {
        let Ok(ds) = ds.try_clone_to_owned() else { return Err(names) };
        self.busy.lock().extend(names.iter().map(|name| base.join(name)));
        let busy = std::sync::Arc::clone(&self.busy);
        let (dir, work) = (base.to_path_buf(), names.clone());
        let spawned = std::thread::Builder::new().name("manifestdb-view-removal".into()).spawn(move || {
            remove_trees(ds.as_fd(), &dir, &work, &|_| Ok(()), &|path, result| {
                if let Err(err) = result {
                    tracing::warn!(path = %path.display(), error = %err, "an expired view's tree was not removed; the next view sync removes it");
                }
                busy.lock().remove(path);
            });
            tracing::info!(directory = %dir.display(), views = work.len(), "expired views' trees removed");
        });
        match spawned {
            Ok(thread) => {
                self.threads.lock().push(thread);
                Ok(())
            }
            Err(_) => {
                let mut busy = self.busy.lock();
                for name in &names {
                    busy.remove(&base.join(name));
                }
                Err(names)
            }
        }
    }
}

/// Removes the trees `names` of the dataset directory `ds` (at `base`), on up to
/// [`REMOVE_THREADS_MAX`] threads; `done` hears of each (its path), `op` of each file operation
/// (the failure seam). Needs no sync: a tree's name is a leftover's, renamed away and synced
/// before.
fn remove_trees(
    ds: BorrowedFd<'_>,
    base: &Path,
    names: &[String],
    op: &(dyn Fn(&dyn Fn() -> String) -> Result<()> + Sync),
    done: &(dyn Fn(&Path, Result<()>) + Sync),
) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = names.len().min(REMOVE_THREADS_MAX);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while let Some(name) = names.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let path = base.join(name);
                    done(&path, remove_tree(ds, name, &path, 0, op));
                }
            });
        }
    });
}

impl Views {
    /// Removes the views of `expired` generations, never the one `current` names; refused if
    /// `current` names one of them (sync the view first). Returns the generations removed.
    pub(crate) fn remove_expiring(&self, dataset: &str, expired: &[u64]) -> Result<Vec<u64>> {
        let _one_build = self.lock.lock();
        if self.on_objects() {
            // No view trees there; the table and the manifests let the expired generations go
            // at the sync after the expiry commits (the table's copies are not staging objects,
            // so cleanup never meets them).
            return Ok(Vec::new());
        }
        let root = self.open_root()?;
        let Some(ds) = self.open_dataset(root.as_fd(), dataset, false)? else {
            return Ok(Vec::new());
        };
        let listing = self.list(ds.as_fd(), dataset)?;
        let target = self.current_target(ds.as_fd(), dataset)?;
        let Some(doomed) = rule::views_expiring(&listing.views, expired, target) else {
            return Err(self.refused(
                dataset,
                self.dataset_path(dataset).join(rule::CURRENT).display().to_string(),
                format!(
                    "names v{}, a generation this expiry would remove; the view lags the store: run `manifestdb view sync` first",
                    target.unwrap_or(0)
                ),
            ));
        };
        self.remove_views(ds.as_fd(), dataset, &doomed)?;
        Ok(doomed)
    }

    /// Removes views `v<N>` of `generations`: each renamed away first (so no half-removed
    /// `v<N>` is ever seen), the renames synced at once; their trees are then removed by the
    /// [`Reaper`], on a thread of its own (inline if none could be started). Once this
    /// returns, no reader can reach those views.
    pub(super) fn remove_views(&self, ds: BorrowedFd<'_>, dataset: &str, generations: &[u64]) -> Result<()> {
        if generations.is_empty() {
            return Ok(());
        }
        let base = self.dataset_path(dataset);
        let mut doomed = Vec::with_capacity(generations.len());
        for &generation in generations {
            let name = rule::view_name(generation);
            let expired = rule::expired_name(generation);
            if self.reaper.is_busy(&base.join(&expired)) {
                // An earlier removal of that name (of an expiry that then did not commit) is
                // still under way: let it end first.
                self.reaper.wait();
            }
            match stat_kind(ds, &expired) {
                Ok(_) => self.remove_entry(ds, dataset, &expired)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(format!("inspecting {}", base.join(&expired).display()), e)),
            }
            self.op(&|| format!("renaming {} to {expired}", base.join(&name).display()))?;
            rustix::fs::renameat_with(ds, name.as_str(), ds, expired.as_str(), RenameFlags::NOREPLACE)
                .map_err(errno)
                .map_err(self.io_err(format!("renaming {} to {expired}", base.join(&name).display())))?;
            doomed.push(expired);
        }
        self.op(&|| format!("syncing {}", base.display()))?;
        rustix::fs::fsync(ds).map_err(errno).map_err(self.io_err(format!("syncing {}", base.display())))?;
        tracing::info!(dataset, views = generations.len(), "views removed: their generations expired (their trees go in the background)");
        // The trees now have leftover names: nothing reads them, and a crash leaves them for
        // the next sync. Removing them needs no sync of its own.
        if let Err(doomed) = self.reaper.remove(ds, &base, doomed) {
            let failure = Mutex::new(None);
            remove_trees(ds, &base, &doomed, &|what| self.op(what), &|_, result| {
                if let Err(err) = result {
                    failure.lock().get_or_insert(err);
                }
            });
            if let Some(err) = failure.into_inner() {
                return Err(err);
            }
        }
        Ok(())
    }

    #[cfg_attr(not(feature = "testing"), expect(dead_code, reason = "only the testing feature waits for them"))]
    /// Waits until the trees of expired views handed to the background are removed.
    pub(crate) fn wait_for_removals(&self) {
        self.reaper.wait();
    }

    /// Removes one leftover entry of the dataset directory (a tree or a symlink).
    pub(super) fn remove_entry(&self, ds: BorrowedFd<'_>, dataset: &str, name: &str) -> Result<()> {
        let path = self.dataset_path(dataset).join(name);
        let (kind, _) = match stat_kind(ds, name) {
            Ok(found) => found,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(format!("inspecting {}", path.display()), e)),
        };
        if kind == FileType::Directory {
            remove_tree(ds, name, &path, 0, &|what| self.op(what))?;
        } else {
            self.op(&|| format!("removing {}", path.display()))?;
            rustix::fs::unlinkat(ds, name, AtFlags::empty()).map_err(errno).map_err(self.io_err(format!("removing {}", path.display())))?;
        }
        self.op(&|| format!("syncing {}", self.dataset_path(dataset).display()))?;
        rustix::fs::fsync(ds).map_err(errno).map_err(self.io_err(format!("syncing {}", self.dataset_path(dataset).display())))
    }
}

/// Removes the tree `name` under `parent` (at `path`), depth first; `op` hears of each file
/// operation before it is made (the failure seam).
fn remove_tree(
    parent: BorrowedFd<'_>,
    name: &str,
    path: &Path,
    depth: usize,
    op: &(dyn Fn(&dyn Fn() -> String) -> Result<()> + Sync),
) -> Result<()> {
    if depth > rule::VIEW_PATH_BYTES_MAX / 2 {
        return Err(Error::io(format!("removing {}", path.display()), io::Error::other("nested too deep")));
    }
    let dir = open_dir_at(parent, name).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    for (child, kind) in list_entries(dir.as_fd()).map_err(|e| Error::io(format!("listing {}", path.display()), e))? {
        let kind = match kind {
            FileType::Unknown => {
                stat_kind(dir.as_fd(), &child).map_err(|e| Error::io(format!("inspecting {}", path.join(&child).display()), e))?.0
            }
            known => known,
        };
        if kind == FileType::Directory {
            remove_tree(dir.as_fd(), &child, &path.join(&child), depth + 1, op)?;
        } else {
            op(&|| format!("removing {}", path.join(&child).display()))?;
            rustix::fs::unlinkat(&dir, child.as_str(), AtFlags::empty())
                .map_err(errno)
                .map_err(|e| Error::io(format!("removing {}", path.join(&child).display()), e))?;
        }
    }
    drop(dir);
    op(&|| format!("removing directory {}", path.display()))?;
    rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR).map_err(errno).map_err(|e| Error::io(format!("removing {}", path.display()), e))
}

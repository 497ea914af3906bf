//! Building a view: `v<N>` made under a temporary name, every link or copy, the manifest and
//! every directory durable on its own, renamed into place; then `current` moved to it.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, RenameFlags};

use super::dirs::{DirChain, dir_flags, errno, open_dir_at, split_parent, stat_kind};
use super::{ViewManifest, ViewMode, Views};
use crate::error::{Error, Result};
use crate::model::Manifest;
use crate::rules::views::{self as rule, ViewPlan};

/// Objects of a view build at or above which the syncs run on threads. Below it they run
/// inline, one after another: a tiny build pays a journal commit per sync, and in exchange its
/// syncs happen in a fixed order on the building thread, which the test that kills `publish`
/// at each of its syncs relies on (strace counts injections per thread).
const SYNC_THREADED_MIN: usize = 16;
/// Most threads syncing one build at once. Each mostly waits on the device: concurrent fsyncs
/// on one file system join the same journal commit and device flush (on this project's ext4
/// machine 1,000 directory fsyncs took 4.1 s one after another, 66 ms on 32 threads: a
/// directory fsync there forces a journal commit whenever anything on the file system changed
/// since the last one).
const SYNC_THREADS_MAX: usize = 32;
/// Handles waiting to be synced at most (bounds the open descriptors of a build).
const SYNC_QUEUE_MAX: usize = 256;

/// The syncs of one view build: every handle handed to [`Syncer::sync`] is fsynced, and every
/// directory handed to [`Syncer::sync_dir`]; inline for a small build, else on worker threads
/// (the order among them does not matter: nothing names the building directory until all of
/// them are done). On threads, a directory's sync waits until the build made everything
/// ([`Syncer::finish`]): a directory fsync forces a journal commit whenever the file system
/// changed since the last one, so 1,000 of them made after the last `mkdir` and `link` share
/// one commit, where syncing each as the walk left it paid one per batch (50 ms for 1,000
/// partitions, against about 17 ms once everything is made, on this project's ext4 machine).
/// [`Syncer::finish`] waits for all of them and returns the first failure: a build whose syncs
/// did not all succeed is never renamed into place.
pub(super) struct Syncer<'scope> {
    queue: Option<std::sync::mpsc::SyncSender<SyncJob>>,
    workers: Vec<std::thread::ScopedJoinHandle<'scope, ()>>,
    failure: &'scope Mutex<Option<Error>>,
    /// Directories to sync once the build made everything: (path relative to the view, path).
    deferred: Mutex<Vec<(String, PathBuf)>>,
}

/// One sync for a worker: an open handle, or a directory of the view to open first.
enum SyncJob {
    Handle(OwnedFd, PathBuf),
    Dir(String, PathBuf),
}

impl<'scope> Syncer<'scope> {
    pub(super) fn new<'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        objects: usize,
        failure: &'scope Mutex<Option<Error>>,
        view: BorrowedFd<'scope>,
    ) -> Syncer<'scope> {
        if objects < SYNC_THREADED_MIN {
            return Syncer { queue: None, workers: Vec::new(), failure, deferred: Mutex::new(Vec::new()) };
        }
        let threads = (objects / 8).clamp(2, SYNC_THREADS_MAX);
        let (tx, rx) = std::sync::mpsc::sync_channel::<SyncJob>(SYNC_QUEUE_MAX);
        let rx = std::sync::Arc::new(Mutex::new(rx));
        let workers = (0..threads)
            .map(|_| {
                let rx = std::sync::Arc::clone(&rx);
                scope.spawn(move || {
                    loop {
                        let next = rx.lock().recv();
                        let (synced, path) = match next {
                            Err(_) => return,
                            Ok(SyncJob::Handle(fd, path)) => (rustix::fs::fsync(&fd), path),
                            Ok(SyncJob::Dir(rel, path)) => (
                                rustix::fs::openat(view, rel.as_str(), dir_flags(), Mode::empty()).and_then(|fd| rustix::fs::fsync(&fd)),
                                path,
                            ),
                        };
                        if let Err(e) = synced {
                            failure.lock().get_or_insert_with(|| Error::io(format!("syncing {}", path.display()), errno(e)));
                        }
                    }
                })
            })
            .collect();
        Syncer { queue: Some(tx), workers, failure, deferred: Mutex::new(Vec::new()) }
    }

    /// Syncs `fd` (now or on a worker). A failure so far stops the build at once.
    pub(super) fn sync(&self, fd: OwnedFd, path: PathBuf) -> Result<()> {
        if let Some(err) = self.failure.lock().take() {
            return Err(err);
        }
        match &self.queue {
            Some(queue) => {
                queue.send(SyncJob::Handle(fd, path)).map_err(|_| Error::io("syncing a view", io::Error::other("the sync workers stopped")))
            }
            None => rustix::fs::fsync(&fd).map_err(errno).map_err(|e| Error::io(format!("syncing {}", path.display()), e)),
        }
    }

    /// Syncs the directory `fd`, `rel` under the view: now for a small build, else (its handle
    /// closed, to be opened again) once [`Syncer::finish`] is called.
    pub(super) fn sync_dir(&self, fd: OwnedFd, rel: &str, path: PathBuf) -> Result<()> {
        if self.queue.is_none() {
            return self.sync(fd, path);
        }
        drop(fd);
        self.deferred.lock().push((rel.to_owned(), path));
        Ok(())
    }

    /// Syncs the deferred directories and waits until every sync asked for is done; the first
    /// failure, if any.
    pub(super) fn finish(mut self) -> Result<()> {
        if let Some(queue) = self.queue.take() {
            for (rel, path) in std::mem::take(&mut *self.deferred.lock()) {
                if queue.send(SyncJob::Dir(rel, path)).is_err() {
                    break;
                }
            }
        }
        for worker in self.workers.drain(..) {
            if worker.join().is_err() {
                return Err(Error::io("syncing a view", io::Error::other("a sync worker panicked")));
            }
        }
        match self.failure.lock().take() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}

impl Views {
    /// Builds `v<N>` under its temporary name, every object synced, and renames it into place
    /// (`replace`: exchanged with the damaged `v<N>` in one `renameat2(RENAME_EXCHANGE)`, so
    /// `current` never names a missing directory, and the damaged tree then removed).
    pub(super) fn build(
        &self,
        ds: BorrowedFd<'_>,
        dataset: &str,
        staging_root: &Path,
        plan: &ViewPlan,
        manifest: &Manifest,
        replace: bool,
    ) -> Result<()> {
        let building = rule::building_name(plan.generation);
        let base = self.dataset_path(dataset);
        let building_path = base.join(&building);
        let staging = rustix::fs::openat(CWD, staging_root, dir_flags(), Mode::empty())
            .map_err(errno)
            .map_err(self.io_err(format!("opening staging root {}", staging_root.display())))?;
        self.op(&|| format!("creating {}", building_path.display()))?;
        rustix::fs::mkdirat(ds, building.as_str(), Mode::from_raw_mode(0o755))
            .map_err(errno)
            .map_err(self.io_err(format!("creating {}", building_path.display())))?;
        let view = open_dir_at(ds, &building).map_err(self.io_err(format!("opening {}", building_path.display())))?;
        // Every object is synced on its own: each directory once every entry in it exists, the
        // manifest, and each copy (a hard link's content was synced when its attempt was
        // validated, DOMAIN 11; the link is a new entry of its directory, which is synced).
        let copies = if self.mode == ViewMode::Copy { plan.files.len() } else { 0 };
        let failure = Mutex::new(None);
        std::thread::scope(|scope| {
            let syncer = Syncer::new(scope, copies + plan.dirs.len() + 2, &failure, view.as_fd());
            let filled = self.fill(&syncer, view.as_fd(), staging.as_fd(), dataset, staging_root, &building_path, plan, manifest);
            let synced = syncer.finish();
            filled.and(synced)
        })?;
        let final_name = rule::view_name(plan.generation);
        self.op(&|| format!("renaming {} to {final_name}", building_path.display()))?;
        let flags = if replace { RenameFlags::EXCHANGE } else { RenameFlags::NOREPLACE };
        rustix::fs::renameat_with(ds, building.as_str(), ds, final_name.as_str(), flags)
            .map_err(errno)
            .map_err(self.io_err(format!("renaming {} to {final_name}", building_path.display())))?;
        self.op(&|| format!("syncing {}", base.display()))?;
        rustix::fs::fsync(ds).map_err(errno).map_err(self.io_err(format!("syncing {}", base.display())))?;
        if replace {
            // The damaged tree now has the temporary name: a leftover, removed like one.
            self.remove_entry(ds, dataset, &building)?;
        }
        Ok(())
    }

    /// Fills the (empty) building directory: every directory and file of the plan, then the
    /// manifest. Files come in path order, so the files under one directory are consecutive:
    /// the directories on the way to the current file stay open (a stack), each made when the
    /// first file under it comes, and handed to `syncer` once the walk leaves it (every entry
    /// in it then exists). Each copy and the manifest are handed over once written, the view
    /// directory itself last.
    #[allow(clippy::too_many_arguments)] // reason: one build's handles, paths and records, all needed for its messages
    fn fill(
        &self,
        syncer: &Syncer<'_>,
        view: BorrowedFd<'_>,
        staging: BorrowedFd<'_>,
        dataset: &str,
        staging_root: &Path,
        building_path: &Path,
        plan: &ViewPlan,
        manifest: &Manifest,
    ) -> Result<()> {
        // The open directories from the view down to the current file's: (path relative to the
        // view, handle). Sources likewise, from the staging root down to the current file's
        // staging directory (consecutive files of a partition, and the partitions of one run,
        // share most of that path).
        let mut dirs: Vec<(String, OwnedFd)> = Vec::new();
        let mut sources = DirChain::default();
        let mut made = 0usize;
        for file in &plan.files {
            let (dst_dir_rel, dst_name) = split_parent(&file.rel);
            // Leave (and sync) every open directory that is not on the way to this file's.
            while let Some((rel, _)) = dirs.last() {
                if dst_dir_rel == rel || dst_dir_rel.strip_prefix(rel.as_str()).is_some_and(|rest| rest.starts_with('/')) {
                    break;
                }
                let Some((rel, fd)) = dirs.pop() else { break };
                self.op(&|| format!("syncing {}", building_path.join(&rel).display()))?;
                syncer.sync_dir(fd, &rel, building_path.join(&rel))?;
            }
            // Make the rest of the way (directories the plan lists; each made exactly once,
            // because the walk never comes back to a directory it left).
            let made_len = match dirs.last() {
                Some((rel, _)) if rel == dst_dir_rel => dst_dir_rel.len(),
                Some((rel, _)) => rel.len() + 1,
                None => 0,
            };
            for component in dst_dir_rel[made_len..].split('/').filter(|c| !c.is_empty()) {
                let rel = match dirs.last() {
                    Some((parent, _)) => format!("{parent}/{component}"),
                    None => component.to_owned(),
                };
                let path = building_path.join(&rel);
                let parent = dirs.last().map_or(view, |(_, fd)| fd.as_fd());
                self.op(&|| format!("creating directory {}", path.display()))?;
                rustix::fs::mkdirat(parent, component, Mode::from_raw_mode(0o755))
                    .map_err(errno)
                    .map_err(self.io_err(format!("creating directory {}", path.display())))?;
                let fd = open_dir_at(parent, component).map_err(self.io_err(format!("opening {}", path.display())))?;
                dirs.push((rel, fd));
                made += 1;
            }
            let dst = dirs.last().map_or(view, |(_, fd)| fd.as_fd());
            let (src_dir_rel, src_name) = split_parent(&file.file);
            let source_path = staging_root.join(&file.staging_rel).join(&file.file);
            let src = sources.open(staging, &file.staging_rel, src_dir_rel).map_err(|e| {
                self.refused(
                    dataset,
                    source_path.display().to_string(),
                    format!("the accepted attempt's directory cannot be opened without following a symlink: {e}"),
                )
            })?;
            let dest_path = building_path.join(&file.rel);
            match self.mode {
                ViewMode::HardLink => {
                    self.op(&|| format!("linking {}", dest_path.display()))?;
                    match rustix::fs::linkat(src, src_name, dst, dst_name, AtFlags::empty()) {
                        Ok(()) => {}
                        Err(rustix::io::Errno::XDEV) => {
                            return Err(Error::ViewRoot {
                                root: self.root.clone(),
                                reason: format!(
                                    "is on another file system than the staging root {}: hard links cannot cross file systems; use copy mode",
                                    staging_root.display()
                                ),
                            });
                        }
                        Err(rustix::io::Errno::NOENT) => {
                            return Err(self.refused(dataset, source_path.display().to_string(), "the accepted file is missing"));
                        }
                        Err(e) => return Err(Error::io(format!("linking {} to {}", dest_path.display(), source_path.display()), errno(e))),
                    }
                    // Check the link just made, not the source before: the link is ours (in the
                    // building directory) and cannot be swapped under us.
                    let (kind, st) = stat_kind(dst, dst_name).map_err(self.io_err(format!("inspecting {}", dest_path.display())))?;
                    if kind != FileType::RegularFile || u64::try_from(st.st_size).ok() != Some(file.size_bytes) {
                        return Err(self.refused(
                            dataset,
                            source_path.display().to_string(),
                            format!(
                                "is not the regular file of {} bytes the generation records (found a {kind:?} of {} bytes)",
                                file.size_bytes, st.st_size
                            ),
                        ));
                    }
                }
                ViewMode::Copy => {
                    self.op(&|| format!("copying {}", dest_path.display()))?;
                    let written = self.copy(src, src_name, dst, dst_name, file, dataset, &source_path, &dest_path)?;
                    self.op(&|| format!("syncing {}", dest_path.display()))?;
                    syncer.sync(written, dest_path)?;
                }
            }
        }
        while let Some((rel, fd)) = dirs.pop() {
            self.op(&|| format!("syncing {}", building_path.join(&rel).display()))?;
            syncer.sync_dir(fd, &rel, building_path.join(&rel))?;
        }
        if made != plan.dirs.len() {
            return Err(self.refused(
                dataset,
                building_path.display().to_string(),
                format!("the build made {made} directories, the plan lists {}", plan.dirs.len()),
            ));
        }
        drop(sources);
        let manifest_path = building_path.join(rule::MANIFEST_FILE);
        let mut doc = serde_json::to_vec_pretty(&ViewManifest::of(manifest, self.mode))
            .map_err(|e| Error::io(format!("encoding {}", manifest_path.display()), io::Error::other(e)))?;
        doc.push(b'\n');
        self.op(&|| format!("writing {}", manifest_path.display()))?;
        let fd = rustix::fs::openat(
            view,
            rule::MANIFEST_FILE,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(errno)
        .map_err(self.io_err(format!("creating {}", manifest_path.display())))?;
        let mut out = std::fs::File::from(fd);
        out.write_all(&doc).map_err(self.io_err(format!("writing {}", manifest_path.display())))?;
        self.op(&|| format!("syncing {}", manifest_path.display()))?;
        syncer.sync(OwnedFd::from(out), manifest_path)?;
        // The view directory itself (its entries: the manifest and the top directories).
        let top = rustix::fs::openat(view, ".", dir_flags(), Mode::empty())
            .map_err(errno)
            .map_err(self.io_err(format!("opening {}", building_path.display())))?;
        self.op(&|| format!("syncing {}", building_path.display()))?;
        syncer.sync(top, building_path.to_path_buf())
    }

    #[allow(clippy::too_many_arguments)] // reason: one copy's source, destination and record, all needed for its messages
    pub(super) fn copy(
        &self,
        src: BorrowedFd<'_>,
        src_name: &str,
        dst: BorrowedFd<'_>,
        dst_name: &str,
        file: &rule::ViewFile,
        dataset: &str,
        source_path: &Path,
        dest_path: &Path,
    ) -> Result<OwnedFd> {
        let input = match rustix::fs::openat(src, src_name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::LOOP) => {
                return Err(self.refused(dataset, source_path.display().to_string(), "is a symlink; refusing to follow it"));
            }
            Err(rustix::io::Errno::NOENT) => {
                return Err(self.refused(dataset, source_path.display().to_string(), "the accepted file is missing"));
            }
            Err(e) => return Err(Error::io(format!("opening {}", source_path.display()), errno(e))),
        };
        let st = rustix::fs::fstat(&input).map_err(errno).map_err(self.io_err(format!("inspecting {}", source_path.display())))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(self.refused(dataset, source_path.display().to_string(), "is not a regular file"));
        }
        let output = rustix::fs::openat(
            dst,
            dst_name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(errno)
        .map_err(self.io_err(format!("creating {}", dest_path.display())))?;
        let mut input = std::fs::File::from(input);
        let mut output = std::fs::File::from(output);
        let mut hasher = crc32fast::Hasher::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut size = 0u64;
        loop {
            let n = input.read(&mut buf).map_err(self.io_err(format!("reading {}", source_path.display())))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            size += n as u64;
            output.write_all(&buf[..n]).map_err(self.io_err(format!("writing {}", dest_path.display())))?;
        }
        let crc = hasher.finalize();
        if size != file.size_bytes || crc != file.crc32 {
            return Err(self.refused(
                dataset,
                source_path.display().to_string(),
                format!(
                    "has {size} bytes and crc32 {crc:#010x}, the generation records {} bytes and crc32 {:#010x}",
                    file.size_bytes, file.crc32
                ),
            ));
        }
        // Synced by the build, like every object of the view.
        Ok(OwnedFd::from(output))
    }

    pub(super) fn swap(&self, ds: BorrowedFd<'_>, dataset: &str, generation: u64) -> Result<()> {
        let base = self.dataset_path(dataset);
        let target = rule::view_name(generation);
        self.op(&|| format!("creating {}", base.join(rule::CURRENT_NEW).display()))?;
        match rustix::fs::unlinkat(ds, rule::CURRENT_NEW, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(Error::io(format!("removing {}", base.join(rule::CURRENT_NEW).display()), errno(e))),
        }
        rustix::fs::symlinkat(target.as_str(), ds, rule::CURRENT_NEW)
            .map_err(errno)
            .map_err(self.io_err(format!("creating {}", base.join(rule::CURRENT_NEW).display())))?;
        self.op(&|| format!("renaming {} over {}", rule::CURRENT_NEW, base.join(rule::CURRENT).display()))?;
        rustix::fs::renameat(ds, rule::CURRENT_NEW, ds, rule::CURRENT)
            .map_err(errno)
            .map_err(self.io_err(format!("moving {} to {target}", base.join(rule::CURRENT).display())))?;
        self.op(&|| format!("syncing {}", base.display()))?;
        rustix::fs::fsync(ds).map_err(errno).map_err(self.io_err(format!("syncing {}", base.display())))
    }
}

//! The published view: each dataset's current generation as a plain directory tree that any
//! engine listing directories can read (DuckDB, Spark, Trino, pandas, polars), with a manifest
//! file beside the data.
//!
//! ```text
//! <views>/<dataset>/.manifestdb-view                 marker: this directory is manifestdb's
//! <views>/<dataset>/v<N>/_manifest.json              generation N's manifest (schema below)
//! <views>/<dataset>/v<N>/<partition path>/g<S>-a<A>-<file>
//!                                                    hard links to (or copies of) the accepted files,
//!                                                    named after the partition version S holding them
//! <views>/<dataset>/current -> v<N>                  symlink, replaced by one atomic rename
//! ```
//!
//! Invariant (DOMAIN.md 16): a data path in a view names one content in every generation
//! (`rules::views::tagged_name`), so a reader whose listing went stale reads the generation it
//! listed or gets "not found", never a mix; and every file and directory of a view is durable
//! on its own (its own `fsync`, never a `syncfs`) before `current` can name it.
//!
//! The view is derived from the store, never the truth: it is built after the publish (or
//! rollback) commit, from a read snapshot, and can be rebuilt from the store at any time
//! ([`crate::Store::sync_view`]). Building is plan, then apply: `rules::views::plan` decides
//! what the view holds and refuses paths that cannot be placed; this module creates it under a
//! temporary name (`.building-v<N>`), makes every link or copy, the manifest and every directory
//! durable (each its own `fsync`, many at once on a few threads so they share the file system's
//! journal commits), renames it to `v<N>` (so a `v<N>` directory is only ever complete), syncs
//! the dataset directory, and then moves `current` to it with one `rename` of a new symlink
//! over the old one, synced before the call returns. An explicit sync (and every writable open)
//! also checks the views it finds against the store (manifest present, parseable and right;
//! every file present with its size) and rebuilds a damaged one beside it, swapped in with one
//! `renameat2(RENAME_EXCHANGE)`.
//!
//! Invariant (DOMAIN.md 13): `current` names only a complete view of a generation the store
//! holds. A crash anywhere in a build leaves `current` on the previous complete view; `v<N>`
//! exists only complete; the view `current` names is never removed, and a view is removed only
//! once its generation left the store, or just before an expiry removes it.
//!
//! Every file operation goes through directory handles (rustix `*at` calls) opened with
//! `O_NOFOLLOW` one component at a time, so a symlink planted under the view root or the
//! staging root is refused, never followed; a hard link is checked after it is made (the new
//! link is the object we then own), not before.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, RenameFlags};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::{FileCheck, GenerationKind, Manifest};
use crate::rules::views::{self as rule, Found, ViewPlan};

#[cfg(feature = "delta")]
mod table;

/// What the views read of the store, as plain values of one consistent read. The store's
/// `Snapshot` implements it; views never name the store, so the store can own views without an
/// import circle.
pub(crate) trait Generations {
    /// Every dataset with a generation, in name order.
    fn dataset_names(&self) -> Result<Vec<String>>;
    /// The dataset's current generation number.
    fn current_number(&self, dataset: &str) -> Result<Option<u64>>;
    /// The numbers of the dataset's stored (retained) generations.
    fn stored_numbers(&self, dataset: &str) -> Result<BTreeSet<u64>>;
    /// Generation `number`'s manifest (`None`: the current one).
    fn generation_manifest(&self, dataset: &str, number: Option<u64>) -> Result<Option<Manifest>>;
    /// The data format of run `run`'s declared grain (`None`: no grain declared, or no such run).
    #[cfg_attr(not(feature = "delta"), allow(dead_code))] // reason: only the Delta table asks
    fn run_format(&self, dataset: &str, run: &str) -> Result<Option<crate::grain::DataFormat>>;
}

/// How a view holds its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ViewMode {
    /// Hard links to the accepted attempts' staging files: no data is copied. The view root
    /// must be on the staging root's file system (a store refuses to open otherwise). A link
    /// shares its file with the staging directory: a worker that rewrote its file in place
    /// after publishing would change the view too (validation with checksums and `verify`
    /// catch it).
    #[default]
    HardLink,
    /// Copies, written and synced by the view build, with each copy's CRC32 checked against
    /// the generation's record. Works across file systems; costs the data's size in space and
    /// in write time per publish.
    Copy,
}

impl ViewMode {
    /// `hard_link` or `copy`, as in the manifest's `file_mode`.
    pub fn name(self) -> &'static str {
        match self {
            ViewMode::HardLink => "hard_link",
            ViewMode::Copy => "copy",
        }
    }
}

/// Where a store publishes its views, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewOptions {
    /// The view root: `<root>/<dataset>/current` is the dataset's current view. Created if
    /// missing. It must not lie inside the staging root, nor the staging root inside it.
    pub root: PathBuf,
    /// Hard links (the default) or copies.
    pub mode: ViewMode,
}

impl ViewOptions {
    /// Views of hard links under `root`.
    pub fn hard_links(root: impl Into<PathBuf>) -> ViewOptions {
        ViewOptions { root: root.into(), mode: ViewMode::HardLink }
    }

    /// Views of copies under `root`.
    pub fn copies(root: impl Into<PathBuf>) -> ViewOptions {
        ViewOptions { root: root.into(), mode: ViewMode::Copy }
    }
}

/// What [`crate::Store::sync_view`] found and did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ViewStatus {
    /// The dataset.
    pub dataset: String,
    /// The generation `current` now names: the store's current generation.
    pub generation: u64,
    /// `<root>/<dataset>/current` (absolute).
    pub current: PathBuf,
    /// `<root>/<dataset>/v<N>` (absolute): the directory `current` names.
    pub path: PathBuf,
    /// The view was built by this call (it did not exist yet).
    pub built: bool,
    /// `current` was moved by this call (it named another view, or nothing).
    pub swapped: bool,
    /// Views found damaged (manifest missing, empty or wrong; a file missing or of the wrong
    /// size) and rebuilt by this call, oldest first.
    pub repaired: Vec<u64>,
    /// Views removed because their generation is no longer in the store, oldest first.
    pub removed: Vec<u64>,
    /// The Delta table's version after this call (`<root>/<dataset>/_delta_log`; version =
    /// generation - 1), `None` if the dataset has no table (its grain is not Parquet, or the
    /// library was built without the `delta` feature).
    pub table_version: Option<u64>,
}

/// Where one generation's view is: [`crate::Snapshot::view_path`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ViewPath {
    /// The dataset.
    pub dataset: String,
    /// The generation whose view this is.
    pub generation: u64,
    /// `<root>/<dataset>/v<N>` (absolute, `current` already resolved): it names this
    /// generation's files, and only them, for as long as the generation is retained. Read it,
    /// not `current`, to read one generation whatever publishes meanwhile.
    pub path: PathBuf,
    /// Whether it is the store's current generation.
    pub is_current: bool,
}

/// The view of generation `requested` (`None`: the store's current generation) under `root`.
pub(crate) fn locate_view(source: &dyn Generations, root: &Path, dataset: &str, requested: Option<u64>) -> Result<ViewPath> {
    let no_view = |reason: String| Error::NoView { dataset: dataset.to_owned(), generation: requested, reason };
    let current = source.current_number(dataset)?;
    let stored = source.stored_numbers(dataset)?;
    let generation = rule::locate(requested, current, &stored).map_err(|why| match why {
        rule::Locate::NothingPublished => no_view("the dataset has no generation".into()),
        rule::Locate::Never { current } => no_view(format!("no such generation (the current one is {current})")),
        rule::Locate::Expired { oldest_retained } => {
            Error::GenerationNotRetained { dataset: dataset.to_owned(), generation: requested.unwrap_or(0), oldest_retained }
        }
    })?;
    let path = root.join(dataset).join(rule::view_name(generation));
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(no_view(format!("{} is not a directory", path.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(no_view(format!(
                "generation {generation} has no view at {} (a generation published before views were enabled has none;                  `manifestdb view sync` builds the current generation's)",
                path.display()
            )));
        }
        Err(e) => return Err(Error::io(format!("inspecting {}", path.display()), e)),
    }
    Ok(ViewPath { dataset: dataset.to_owned(), generation, path, is_current: Some(generation) == current })
}

/// The `_manifest.json` of a view (schema `manifestdb.view.manifest`, version 2). Paths are
/// relative to the view directory (`v<N>/`), `/`-separated. Version 2 names every file after
/// the partition version holding it (`g<S>-a<A>-<file>`); version 1 used the attempt's own file
/// names, which two generations could share (a view of version 1 is rebuilt by `view sync`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewManifest {
    /// Always `manifestdb.view.manifest`.
    pub schema: String,
    /// Currently 2; bumped on any incompatible change.
    pub schema_version: u32,
    /// The dataset.
    pub dataset: String,
    /// The generation this view shows.
    pub generation: u64,
    /// The generation it was derived from (0 for none).
    pub parent: u64,
    /// `publish` or `rollback`.
    pub kind: String,
    /// For a rollback, the generation whose content it restores.
    pub restored: Option<u64>,
    /// The run whose content it is (for a rollback: the restored generation's run).
    pub run: String,
    /// That run's input snapshot.
    pub snapshot: String,
    /// When the generation was committed (ms since the Unix epoch).
    pub published_at_ms: u64,
    /// `hard_link` or `copy`.
    pub file_mode: String,
    /// Sums over the partitions.
    pub totals: ViewTotals,
    /// Every partition, in key order.
    pub partitions: Vec<ViewPartition>,
}

/// Sums over a view's partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewTotals {
    /// Partitions.
    pub partitions: u64,
    /// Files.
    pub files: u64,
    /// Rows.
    pub rows: u64,
    /// Sum of the partitions' totals; `null` if a partition reported none.
    pub total: Option<i64>,
    /// Bytes.
    pub bytes: u64,
}

/// One partition of a view's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewPartition {
    /// The partition key, also its directory inside the view.
    pub partition: String,
    /// The run of its accepted attempt.
    pub run: String,
    /// The accepted attempt's number.
    pub attempt: u32,
    /// The generation that wrote this partition's content.
    pub since_generation: u64,
    /// Input snapshot.
    pub snapshot: String,
    /// Rows.
    pub rows: u64,
    /// Total, if reported.
    pub total: Option<i64>,
    /// Canonical digest.
    pub digest: String,
    /// Its files.
    pub files: Vec<ViewFileEntry>,
}

/// One file of a view's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewFileEntry {
    /// Path relative to the view directory: `<partition>/<file dir>/g<S>-a<A>-<file name>`,
    /// where S is the partition's `since_generation` and A its attempt: the same path in two
    /// generations is always the same bytes.
    pub path: String,
    /// The path the attempt reported, relative to its staging directory.
    pub file: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// CRC32 (IEEE) of the content.
    pub crc32: u32,
}

impl ViewManifest {
    /// The manifest of `manifest`'s generation as its view shows it.
    pub(crate) fn of(manifest: &Manifest, mode: ViewMode) -> ViewManifest {
        let g = &manifest.generation;
        let (kind, restored) = match &g.kind {
            GenerationKind::Rollback { restored, .. } => ("rollback", Some(*restored)),
            _ => ("publish", None),
        };
        let partitions: Vec<ViewPartition> = manifest
            .partitions
            .iter()
            .map(|p| ViewPartition {
                partition: p.partition.clone(),
                run: p.run.clone(),
                attempt: p.attempt,
                since_generation: p.since_generation,
                snapshot: p.snapshot.clone(),
                rows: p.rows,
                total: p.total,
                digest: p.digest.clone(),
                files: p
                    .files
                    .iter()
                    .map(|f| ViewFileEntry {
                        path: format!("{}/{}", p.partition, rule::tagged_name(p.since_generation, p.attempt, &f.path)),
                        file: f.path.clone(),
                        size_bytes: f.size_bytes,
                        crc32: f.crc32,
                    })
                    .collect(),
            })
            .collect();
        let totals = ViewTotals {
            partitions: partitions.len() as u64,
            files: partitions.iter().map(|p| p.files.len() as u64).sum(),
            rows: partitions.iter().map(|p| p.rows).sum(),
            total: partitions.iter().try_fold(0i64, |sum, p| p.total.map(|t| sum.saturating_add(t))),
            bytes: partitions.iter().flat_map(|p| &p.files).map(|f| f.size_bytes).sum(),
        };
        ViewManifest {
            schema: rule::MANIFEST_SCHEMA.to_owned(),
            schema_version: rule::MANIFEST_SCHEMA_VERSION,
            dataset: g.dataset.clone(),
            generation: g.number,
            parent: g.parent,
            kind: kind.to_owned(),
            restored,
            run: g.run.clone(),
            snapshot: g.snapshot.clone(),
            published_at_ms: g.published_at_ms,
            file_mode: mode.name().to_owned(),
            totals,
            partitions,
        }
    }

    /// Reads and checks a view's `_manifest.json`.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be read; [`Error::ViewDamaged`] (corrupt, exit 7) if it is
    /// empty, not a manifest or of a schema version this build does not read: `view sync`
    /// rebuilds such a view.
    pub fn read(path: impl AsRef<Path>) -> Result<ViewManifest> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::io(format!("reading view manifest {}", path.display()), e))?;
        ViewManifest::parse(&bytes).map_err(|reason| Error::ViewDamaged { path: path.to_path_buf(), reason })
    }

    fn parse(bytes: &[u8]) -> std::result::Result<ViewManifest, String> {
        if bytes.is_empty() {
            return Err("is empty (a power loss before it was synced, or a truncation)".into());
        }
        let manifest: ViewManifest = serde_json::from_slice(bytes).map_err(|e| format!("is not a view manifest: {e}"))?;
        if manifest.schema != rule::MANIFEST_SCHEMA || manifest.schema_version != rule::MANIFEST_SCHEMA_VERSION {
            return Err(format!(
                "has schema {:?} version {}, this build reads {:?} version {}",
                manifest.schema,
                manifest.schema_version,
                rule::MANIFEST_SCHEMA,
                rule::MANIFEST_SCHEMA_VERSION
            ));
        }
        Ok(manifest)
    }
}

/// The failure seam of the view build: the crash tests make the N-th file operation fail, as
/// a crash at that point would stop the build. Costs one atomic load per operation otherwise.
#[derive(Debug)]
struct Seam {
    /// Operations since the seam was armed.
    count: AtomicU64,
    /// The operation (by count) that fails, or `u64::MAX` for none.
    fail_at: AtomicU64,
}

impl Default for Seam {
    fn default() -> Self {
        Seam { count: AtomicU64::new(0), fail_at: AtomicU64::new(u64::MAX) }
    }
}

/// A store's view root, opened: the settings, the seam, and the lock that keeps one build at
/// a time per store handle.
#[derive(Debug)]
pub(crate) struct Views {
    root: PathBuf,
    mode: ViewMode,
    seam: Seam,
    lock: Mutex<()>,
    /// Expired views' trees being removed in the background.
    reaper: Reaper,
    /// The Delta kernel's engine, made on first use.
    #[cfg(feature = "delta")]
    delta: std::sync::OnceLock<crate::delta::DeltaEngine>,
}

fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from(e)
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Opens `name` (one component) under `parent` as a directory, never following a symlink.
fn open_dir_at(parent: BorrowedFd<'_>, name: &str) -> io::Result<OwnedFd> {
    rustix::fs::openat(parent, name, dir_flags(), Mode::empty()).map_err(errno)
}

/// Opens the directory `rel` (components joined by `/`) under `base`, one component at a time.
fn open_dirs(base: BorrowedFd<'_>, rel: &str) -> io::Result<OwnedFd> {
    let mut fd = rustix::fs::openat(base, ".", dir_flags(), Mode::empty()).map_err(errno)?;
    for component in rel.split('/').filter(|c| !c.is_empty()) {
        if component == "." || component == ".." {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "path component '.' or '..'"));
        }
        fd = open_dir_at(fd.as_fd(), component)?;
    }
    Ok(fd)
}

fn split_parent(rel: &str) -> (&str, &str) {
    rel.rsplit_once('/').unwrap_or(("", rel))
}

/// The directories last opened from the staging root down to one staging directory, each
/// opened from its parent without following a symlink. Opening the next directory reuses the
/// longest common prefix: consecutive files of a plan mostly share all but the last one or two
/// components (the run's directory, the partition's), so a file costs an `openat` or two, not
/// one per component.
#[derive(Default)]
struct DirChain {
    /// `(component, handle)` from the root down.
    open: Vec<(String, OwnedFd)>,
}

impl DirChain {
    /// The handle of `staging_rel/dir_rel` under `root` (`dir_rel` may be empty).
    fn open<'a>(&'a mut self, root: BorrowedFd<'a>, staging_rel: &str, dir_rel: &str) -> io::Result<BorrowedFd<'a>> {
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

fn is_errno(e: &io::Error, code: rustix::io::Errno) -> bool {
    e.raw_os_error() == Some(code.raw_os_error())
}

fn stat_kind(parent: BorrowedFd<'_>, name: &str) -> io::Result<(FileType, rustix::fs::Stat)> {
    let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
    Ok((FileType::from_raw_mode(st.st_mode), st))
}

/// Whether `path` lies inside `base` (both canonical).
fn inside(path: &Path, base: &Path) -> bool {
    path.starts_with(base)
}

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
struct Reaper {
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
    fn is_busy(&self, path: &Path) -> bool {
        self.busy.lock().contains(path)
    }

    /// Waits until every tree handed over is removed (or its removal failed, logged; the next
    /// view sync removes what is left).
    fn wait(&self) {
        let threads = std::mem::take(&mut *self.threads.lock());
        for thread in threads {
            if thread.join().is_err() {
                tracing::warn!("a view removal thread panicked; the next view sync removes what it left");
            }
        }
    }

    /// Removes the trees `names` of the dataset directory `ds` (at `base`) on a thread of its
    /// own, several at a time. `Err` gives the names back if no thread could be started.
    fn remove(&self, ds: BorrowedFd<'_>, base: &Path, names: Vec<String>) -> std::result::Result<(), Vec<String>> {
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

impl Drop for Views {
    fn drop(&mut self) {
        self.reaper.wait();
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
struct Syncer<'scope> {
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
    fn new<'env>(
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
    fn sync(&self, fd: OwnedFd, path: PathBuf) -> Result<()> {
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
    fn sync_dir(&self, fd: OwnedFd, rel: &str, path: PathBuf) -> Result<()> {
        if self.queue.is_none() {
            return self.sync(fd, path);
        }
        drop(fd);
        self.deferred.lock().push((rel.to_owned(), path));
        Ok(())
    }

    /// Syncs the deferred directories and waits until every sync asked for is done; the first
    /// failure, if any.
    fn finish(mut self) -> Result<()> {
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

/// How much of the views already there a sync checks against the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Nothing (right after a commit: the view to build is new).
    None,
    /// The current generation's view's `_manifest.json` (every writable open: one small read
    /// per dataset catches the empty manifest a power loss leaves on a file system that lost
    /// unsynced data).
    CurrentManifest,
    /// Every view present of a stored generation, manifest and every file (`view sync`).
    Full,
}

/// What a dataset directory holds.
#[derive(Debug, Default)]
struct Listing {
    views: Vec<u64>,
    leftovers: Vec<String>,
}

impl Views {
    /// Checks and prepares the view root for a store whose staging root is `staging_root`
    /// (canonical): created if missing (by `create_dir_all`, which the store gives: its durable
    /// creation with the store's directory mode), canonicalised, not nested with the staging
    /// root, and for hard links on the staging root's file system.
    pub(crate) fn open(options: &ViewOptions, staging_root: &Path, create_dir_all: &dyn Fn(&Path) -> Result<()>) -> Result<Views> {
        let given = &options.root;
        let refuse = |reason: String| Error::ViewRoot { root: given.clone(), reason };
        if given.as_os_str().is_empty() {
            return Err(refuse("is empty".into()));
        }
        // Refuse a root inside the staging root before creating anything there.
        let absolute = std::path::absolute(given).map_err(|e| Error::io(format!("resolving view root {}", given.display()), e))?;
        if inside(&absolute, staging_root) {
            return Err(refuse(format!(
                "lies inside the staging root {}: cleanup walks the staging root, and readers of the staging tree would see the views twice",
                staging_root.display()
            )));
        }
        match std::fs::symlink_metadata(&absolute) {
            Ok(meta) if meta.file_type().is_symlink() => {}
            Ok(meta) if !meta.is_dir() => return Err(refuse("exists and is not a directory".into())),
            Ok(_) => {}
            // Made private unless the store grants its group access, every directory made
            // synced into its parent.
            Err(e) if e.kind() == io::ErrorKind::NotFound => create_dir_all(&absolute)?,
            Err(e) => return Err(Error::io(format!("inspecting view root {}", absolute.display()), e)),
        }
        let root = std::fs::canonicalize(&absolute).map_err(|e| Error::io(format!("resolving view root {}", absolute.display()), e))?;
        if inside(&root, staging_root) {
            return Err(refuse(format!("resolves to {}, inside the staging root {}", root.display(), staging_root.display())));
        }
        if inside(staging_root, &root) {
            return Err(refuse(format!(
                "contains the staging root {}: the views and the staging tree must be separate directories",
                staging_root.display()
            )));
        }
        if root.to_str().is_none() {
            return Err(refuse("is not valid UTF-8".into()));
        }
        if options.mode == ViewMode::HardLink {
            let view_dev = std::fs::metadata(&root).map_err(|e| Error::io(format!("inspecting view root {}", root.display()), e))?;
            let staging_dev =
                std::fs::metadata(staging_root).map_err(|e| Error::io(format!("inspecting staging root {}", staging_root.display()), e))?;
            use std::os::unix::fs::MetadataExt;
            if view_dev.dev() != staging_dev.dev() {
                return Err(refuse(format!(
                    "is on another file system than the staging root {} (device {} vs {}): hard links cannot cross file systems; \
                     put the view root on the staging root's file system, or use copy mode (ViewMode::Copy, `--view-mode copy`)",
                    staging_root.display(),
                    view_dev.dev(),
                    staging_dev.dev()
                )));
            }
        }
        Ok(Views {
            root,
            mode: options.mode,
            seam: Seam::default(),
            lock: Mutex::new(()),
            reaper: Reaper::default(),
            #[cfg(feature = "delta")]
            delta: std::sync::OnceLock::new(),
        })
    }

    /// The canonical view root.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Hard links or copies.
    pub(crate) fn mode(&self) -> ViewMode {
        self.mode
    }

    #[cfg_attr(not(feature = "testing"), expect(dead_code, reason = "only the testing feature arms the seam"))]
    /// Arms the failure seam: operation number `after_ops` (counting from 0 from now) fails,
    /// once. `None` disarms it. Either way the operation count restarts.
    pub(crate) fn arm(&self, after_ops: Option<u64>) {
        self.seam.count.store(0, Ordering::SeqCst);
        self.seam.fail_at.store(after_ops.unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    #[cfg_attr(not(feature = "testing"), expect(dead_code, reason = "only the testing feature reads the count"))]
    /// File operations since the seam was last armed.
    pub(crate) fn operations(&self) -> u64 {
        self.seam.count.load(Ordering::SeqCst)
    }

    /// Counts one file operation; fails it if the seam says so.
    fn op(&self, what: &dyn Fn() -> String) -> Result<()> {
        let n = self.seam.count.fetch_add(1, Ordering::SeqCst);
        if n == self.seam.fail_at.load(Ordering::Relaxed) {
            self.seam.fail_at.store(u64::MAX, Ordering::SeqCst);
            return Err(Error::io(format!("injected failure before {}", what()), io::Error::other("injected by the view failure seam")));
        }
        Ok(())
    }

    fn io_err(&self, what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
        let what = what.into();
        move |e| Error::io(what, e)
    }

    fn open_root(&self) -> Result<OwnedFd> {
        rustix::fs::openat(CWD, &self.root, dir_flags(), Mode::empty())
            .map_err(errno)
            .map_err(self.io_err(format!("opening view root {}", self.root.display())))
    }

    fn refused(&self, dataset: &str, path: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::ViewRefused { dataset: dataset.to_owned(), path: path.into(), reason: reason.into() }
    }

    fn dataset_path(&self, dataset: &str) -> PathBuf {
        self.root.join(dataset)
    }

    /// Opens (creating if missing) the dataset's view directory. An existing directory must
    /// carry the marker or be empty (then it is adopted); anything else is refused untouched.
    fn open_dataset(&self, root: BorrowedFd<'_>, dataset: &str, create: bool) -> Result<Option<OwnedFd>> {
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
            .write_all(format!("manifestdb view directory of dataset {dataset}; `current` names its current generation\n").as_bytes())
            .and_then(|()| marker.sync_all())
            .map_err(self.io_err(format!("writing {}", path.join(rule::MARKER).display())))?;
        self.op(&|| format!("syncing {}", path.display()))?;
        rustix::fs::fsync(&fd).map_err(errno).map_err(self.io_err(format!("syncing {}", path.display())))?;
        Ok(Some(fd))
    }

    fn list(&self, ds: BorrowedFd<'_>, dataset: &str) -> Result<Listing> {
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
    fn current_target(&self, ds: BorrowedFd<'_>, dataset: &str) -> Result<Option<u64>> {
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

    /// Brings the dataset's view up to date with the store as `source` reads it: builds the
    /// current generation's view if missing, moves `current` to it, removes leftovers of
    /// interrupted builds and the views of generations the store no longer holds. With
    /// `check` (see [`Check`]), views present are first checked against the store
    /// (`_manifest.json` present, parseable and describing that generation; for a full check
    /// every file present with its recorded size, nothing extra) and a damaged one is rebuilt
    /// and swapped in whole. `None` if nothing is published.
    pub(crate) fn sync(&self, source: &dyn Generations, staging_root: &Path, dataset: &str, check: Check) -> Result<Option<ViewStatus>> {
        let _one_build = self.lock.lock();
        let Some(manifest) = source.generation_manifest(dataset, None)? else {
            return Ok(None);
        };
        let stored = source.stored_numbers(dataset)?;
        let number = manifest.generation.number;
        let plan = rule::plan(&manifest).map_err(|r| self.refused(dataset, r.path, r.reason))?;
        let root = self.open_root()?;
        let Some(ds) = self.open_dataset(root.as_fd(), dataset, true)? else {
            return Err(self.refused(dataset, self.dataset_path(dataset).display().to_string(), "could not be created"));
        };
        let listing = self.list(ds.as_fd(), dataset)?;
        let target = self.current_target(ds.as_fd(), dataset)?;
        for leftover in &listing.leftovers {
            // A tree the background is removing is left to it.
            if !self.reaper.is_busy(&self.dataset_path(dataset).join(leftover)) {
                self.remove_entry(ds.as_fd(), dataset, leftover)?;
            }
        }
        let mut repaired = Vec::new();
        if check != Check::None {
            let checked: Vec<u64> = match check {
                Check::Full => listing.views.iter().copied().filter(|n| stored.contains(n)).collect(),
                _ => listing.views.iter().copied().filter(|&n| n == number).collect(),
            };
            for n in checked {
                let (found_plan, found_manifest) = if n == number {
                    (plan.clone(), manifest.clone())
                } else {
                    let Some(m) = source.generation_manifest(dataset, Some(n))? else { continue };
                    (rule::plan(&m).map_err(|r| self.refused(dataset, r.path, r.reason))?, m)
                };
                if let Some(reason) = self.damage(ds.as_fd(), n, &found_plan, &found_manifest, check == Check::Full) {
                    tracing::warn!(dataset, generation = n, %reason, "view damaged; rebuilding it");
                    self.build(ds.as_fd(), dataset, staging_root, &found_plan, &found_manifest, true)?;
                    repaired.push(n);
                }
            }
        }
        let built = !listing.views.contains(&number);
        if built {
            self.build(ds.as_fd(), dataset, staging_root, &plan, &manifest, false)?;
        }
        let swapped = target != Some(number);
        if swapped {
            self.swap(ds.as_fd(), dataset, number)?;
        }
        let removed = rule::views_to_remove(&listing.views, &stored, Some(number));
        self.remove_views(ds.as_fd(), dataset, &removed)?;
        // The Delta table follows the view (a Parquet dataset's only).
        #[cfg(feature = "delta")]
        let table_version = self.sync_table(ds.as_fd(), dataset, source, staging_root, &manifest, &stored)?.map(|t| t.version);
        #[cfg(not(feature = "delta"))]
        let table_version = None;
        if built || swapped || !repaired.is_empty() {
            tracing::info!(dataset, generation = number, built, swapped, repaired = repaired.len(), removed = removed.len(), "view synced");
        }
        let base = self.dataset_path(dataset);
        Ok(Some(ViewStatus {
            dataset: dataset.to_owned(),
            generation: number,
            current: base.join(rule::CURRENT),
            path: base.join(rule::view_name(number)),
            built,
            swapped,
            repaired,
            removed,
            table_version,
        }))
    }

    /// What is wrong with view `v<n>` as found on disk, if anything: its manifest missing,
    /// empty, unparseable or not this generation's; with `walk`, a file missing, of the wrong
    /// size or kind, or anything extra.
    fn damage(&self, ds: BorrowedFd<'_>, n: u64, plan: &ViewPlan, manifest: &Manifest, walk: bool) -> Option<String> {
        let name = rule::view_name(n);
        let view = match open_dir_at(ds, &name) {
            Ok(fd) => fd,
            Err(e) => return Some(format!("{name} cannot be opened: {e}")),
        };
        match read_manifest_at(view.as_fd()) {
            Ok(doc) => {
                let expected = ViewManifest::of(manifest, self.mode);
                if doc.dataset != expected.dataset || doc.generation != n || doc.partitions != expected.partitions {
                    return Some(format!("{name}/{} does not describe generation {n}", rule::MANIFEST_FILE));
                }
            }
            Err(reason) => return Some(format!("{name}/{}: {reason}", rule::MANIFEST_FILE)),
        }
        if !walk {
            return None;
        }
        match walk_view(view.as_fd()) {
            Ok(found) => rule::diff(plan, &found).into_iter().next().map(|(path, message)| format!("{name}/{path}: {message}")),
            Err(e) => Some(format!("{name} cannot be walked: {e}")),
        }
    }

    /// Removes the views of `expired` generations, never the one `current` names; refused if
    /// `current` names one of them (sync the view first). Returns the generations removed.
    pub(crate) fn remove_expiring(&self, dataset: &str, expired: &[u64]) -> Result<Vec<u64>> {
        let _one_build = self.lock.lock();
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

    /// Builds `v<N>` under its temporary name, every object synced, and renames it into place
    /// (`replace`: exchanged with the damaged `v<N>` in one `renameat2(RENAME_EXCHANGE)`, so
    /// `current` never names a missing directory, and the damaged tree then removed).
    fn build(
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
    fn copy(
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

    fn swap(&self, ds: BorrowedFd<'_>, dataset: &str, generation: u64) -> Result<()> {
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

    /// Removes views `v<N>` of `generations`: each renamed away first (so no half-removed
    /// `v<N>` is ever seen), the renames synced at once; their trees are then removed by the
    /// [`Reaper`], on a thread of its own (inline if none could be started). Once this
    /// returns, no reader can reach those views.
    fn remove_views(&self, ds: BorrowedFd<'_>, dataset: &str, generations: &[u64]) -> Result<()> {
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
    fn remove_entry(&self, ds: BorrowedFd<'_>, dataset: &str, name: &str) -> Result<()> {
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

/// Every entry of a directory but `.` and `..`, with its type as the directory reports it
/// (`Unknown` on file systems that do not).
fn list_entries(dir: BorrowedFd<'_>) -> io::Result<Vec<(String, FileType)>> {
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
fn list_names(dir: BorrowedFd<'_>) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in Dir::read_from(dir).map_err(errno)? {
        let entry = entry.map_err(errno)?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        out.push(OsStr::from_bytes(name).to_string_lossy().into_owned());
    }
    Ok(out)
}

/// Walks a view directory without following symlinks: every path (relative) and what it is.
fn walk_view(view: BorrowedFd<'_>) -> io::Result<BTreeMap<String, Found>> {
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

/// Reads and parses the `_manifest.json` of an open view directory; why not, in words.
fn read_manifest_at(view: BorrowedFd<'_>) -> std::result::Result<ViewManifest, String> {
    let fd = match rustix::fs::openat(view, rule::MANIFEST_FILE, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Err("is missing".into()),
        Err(e) => return Err(format!("cannot be opened: {}", errno(e))),
    };
    let mut bytes = Vec::new();
    std::fs::File::from(fd).read_to_end(&mut bytes).map_err(|e| format!("cannot be read: {e}"))?;
    ViewManifest::parse(&bytes)
}

fn crc_at(base: BorrowedFd<'_>, rel: &str) -> io::Result<u32> {
    let (dir_rel, name) = split_parent(rel);
    let dir = open_dirs(base, dir_rel)?;
    let fd = rustix::fs::openat(&dir, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).map_err(errno)?;
    let mut file = std::fs::File::from(fd);
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(hasher.finalize());
        }
        hasher.update(&buf[..n]);
    }
}

/// Verify's view check: every dataset's `current` names its current generation's view, every
/// view present is of a generation the store holds and matches it exactly (no missing link,
/// no extra file, sizes and, with checksums, CRC32s as recorded, a manifest that agrees).
/// Returns `(path, message)` findings and notes.
pub(crate) fn check(source: &dyn Generations, root: &Path, files: Option<FileCheck>) -> (Vec<(String, String)>, Vec<String>) {
    let mut findings = Vec::new();
    let mut notes = Vec::new();
    let root_fd = match rustix::fs::openat(CWD, root, dir_flags(), Mode::empty()) {
        Ok(fd) => fd,
        Err(e) => {
            findings.push((root.display().to_string(), format!("the view root cannot be opened: {}", errno(e))));
            return (findings, notes);
        }
    };
    let datasets = match source.dataset_names() {
        Ok(d) => d,
        Err(e) => {
            findings.push((root.display().to_string(), format!("datasets cannot be listed: {e}")));
            return (findings, notes);
        }
    };
    for dataset in &datasets {
        let base = root.join(dataset);
        let here = |rel: &str| base.join(rel).display().to_string();
        let Ok(Some(current)) = source.current_number(dataset) else { continue };
        let ds = match open_dir_at(root_fd.as_fd(), dataset) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                findings.push((here(""), format!("no view directory; generation {current} has no view (run `manifestdb view sync`)")));
                continue;
            }
            Err(e) => {
                findings.push((here(""), format!("cannot be opened as a directory: {e}")));
                continue;
            }
        };
        if !matches!(stat_kind(ds.as_fd(), rule::MARKER), Ok((FileType::RegularFile, _))) {
            findings.push((here(rule::MARKER), "missing: the directory is not marked as a manifestdb view".into()));
        }
        let stored: BTreeSet<u64> = source.stored_numbers(dataset).unwrap_or_default();
        match rustix::fs::readlinkat(ds.as_fd(), rule::CURRENT, Vec::new()) {
            Ok(target) => {
                let target = target.to_string_lossy().into_owned();
                match rule::parse_view_name(&target) {
                    Some(n) if n == current => {}
                    Some(n) if stored.contains(&n) => findings.push((
                        here(rule::CURRENT),
                        format!("names v{n}, but the store's current generation is {current} (the view lags: run `manifestdb view sync`)"),
                    )),
                    Some(n) => findings.push((here(rule::CURRENT), format!("names v{n}, a generation the store does not hold"))),
                    None => findings.push((here(rule::CURRENT), format!("is a symlink to {target:?}, not to a view"))),
                }
                if rule::parse_view_name(&target).is_some() && stat_kind(ds.as_fd(), &target).is_err() {
                    findings.push((here(rule::CURRENT), format!("names {target}, which does not exist")));
                }
            }
            Err(rustix::io::Errno::NOENT) => findings.push((here(rule::CURRENT), "missing (run `manifestdb view sync`)".into())),
            Err(e) => findings.push((here(rule::CURRENT), format!("is not a readable symlink: {}", errno(e)))),
        }
        let names = match list_names(ds.as_fd()) {
            Ok(names) => names,
            Err(e) => {
                findings.push((here(""), format!("cannot be listed: {e}")));
                continue;
            }
        };
        for name in names {
            if rule::is_leftover(&name) {
                notes.push(format!("{}: left by an interrupted view build or removal; the next view sync removes it", here(&name)));
                continue;
            }
            let Some(n) = rule::parse_view_name(&name) else {
                if name != rule::MARKER
                    && name != rule::CURRENT
                    && name != crate::rules::delta::LOG_DIR
                    && name != crate::rules::delta::DATA_DIR
                {
                    notes.push(format!("{}: not a view; left alone", here(&name)));
                }
                continue;
            };
            if !stored.contains(&n) {
                findings.push((
                    here(&name),
                    format!("view of generation {n}, which the store no longer holds (expired); view sync removes it"),
                ));
                continue;
            }
            let manifest = match source.generation_manifest(dataset, Some(n)) {
                Ok(Some(m)) => m,
                Ok(None) => continue,
                Err(e) => {
                    findings.push((here(&name), format!("generation {n} cannot be read: {e}")));
                    continue;
                }
            };
            let plan = match rule::plan(&manifest) {
                Ok(plan) => plan,
                Err(r) => {
                    findings.push((here(&name), format!("generation {n} cannot be placed in a view: {}: {}", r.path, r.reason)));
                    continue;
                }
            };
            let view = match open_dir_at(ds.as_fd(), &name) {
                Ok(fd) => fd,
                Err(e) => {
                    findings.push((here(&name), format!("cannot be opened: {e}")));
                    continue;
                }
            };
            match walk_view(view.as_fd()) {
                Ok(found) => {
                    for (path, message) in rule::diff(&plan, &found) {
                        findings.push((here(&format!("{name}/{path}")), message));
                    }
                }
                Err(e) => findings.push((here(&name), format!("cannot be walked: {e}"))),
            }
            if files == Some(FileCheck::SizeAndChecksum) {
                for file in &plan.files {
                    match crc_at(view.as_fd(), &file.rel) {
                        Ok(crc) if crc == file.crc32 => {}
                        Ok(crc) => findings.push((
                            here(&format!("{name}/{}", file.rel)),
                            format!("has crc32 {crc:#010x}, the generation records {:#010x}", file.crc32),
                        )),
                        // Missing files are already reported by the diff.
                        Err(_) => {}
                    }
                }
            }
            let manifest_path = base.join(&name).join(rule::MANIFEST_FILE);
            match ViewManifest::read(&manifest_path) {
                Ok(doc) if doc.generation == n && doc.dataset == *dataset => {
                    let expected = ViewManifest::of(&manifest, ViewMode::HardLink);
                    if doc.partitions != expected.partitions {
                        findings
                            .push((manifest_path.display().to_string(), format!("does not list generation {n}'s partitions and files")));
                    }
                }
                Ok(doc) => findings.push((
                    manifest_path.display().to_string(),
                    format!("describes generation {} of {:?}, not {n} of {dataset:?}", doc.generation, doc.dataset),
                )),
                Err(e) => findings.push((manifest_path.display().to_string(), e.to_string())),
            }
        }
    }
    (findings, notes)
}

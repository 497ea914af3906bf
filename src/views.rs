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

use std::collections::BTreeSet;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rustix::fs::{CWD, Mode};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::Manifest;
use crate::rules::views as rule;

mod build;
mod dirs;
mod expiry;
mod layout;
mod log;
mod manifest;
#[cfg(all(feature = "s3", feature = "delta"))]
mod object_table;
mod repair;
#[cfg(feature = "delta")]
mod table;

use dirs::{dir_flags, errno, inside};
use expiry::Reaper;
pub use manifest::{ViewFileEntry, ViewManifest, ViewPartition, ViewTotals};
pub(crate) use repair::check;

/// `verify`'s check of a view root on object storage (its Delta tables: damaged, foreign and
/// lagging versions, missing copies); a build without object storage says it cannot check it.
pub(crate) fn check_objects(source: &dyn Generations, root: &Path) -> Vec<(String, String)> {
    #[cfg(all(feature = "s3", feature = "delta"))]
    return object_table::check(source, &root.to_string_lossy());
    #[cfg(not(all(feature = "s3", feature = "delta")))]
    {
        let _ = source;
        vec![(
            root.display().to_string(),
            "is on object storage, which this build cannot read (the crate's `s3` and `delta` features)".to_owned(),
        )]
    }
}

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
    fn run_format(&self, dataset: &str, run: &str) -> Result<Option<crate::grain::DataFormat>>;
    /// The dataset's current generation (its record, not its partitions).
    fn current_generation(&self, dataset: &str) -> Result<Option<crate::model::Generation>>;
    /// The partitions run `run` declared, in partition order (`None`: no such run).
    #[cfg_attr(not(feature = "delta"), allow(dead_code, reason = "only the Delta table's change commit reads them"))]
    fn run_partitions(&self, dataset: &str, run: &str) -> Result<Option<Vec<String>>>;
    /// One partition as generation `number` holds it (`None`: it holds no such partition).
    #[cfg_attr(not(feature = "delta"), allow(dead_code, reason = "only the Delta table's change commit reads them"))]
    fn partition_at(&self, dataset: &str, partition: &str, number: u64) -> Result<Option<crate::model::PartitionEntry>>;
}

/// Why a view root on object storage has no directory trees (refused when asked for).
pub(crate) const NO_TREES_ON_OBJECTS: &str = "is on object storage, where directory views cannot exist (no directories to link into, \
     no symlink for `current`): a Parquet dataset is read through its Delta table, any dataset through the exact file list of \
     a generation (`manifestdb view DATASET --json` files, the table's `manifests/v<N>/_manifest.json`); drop --view-trees";

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
///
/// ```
/// use manifestdb::{ViewMode, ViewOptions};
///
/// // Hard links (no copy; the view root on the staging root's file system) ...
/// assert_eq!(ViewOptions::hard_links("data/views").mode, ViewMode::HardLink);
/// // ... or copies, each checked against its recorded CRC32 (any file system).
/// let copies = ViewOptions::copies("/mnt/lake/views");
/// assert_eq!((copies.mode, copies.mode.name()), (ViewMode::Copy, "copy"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewOptions {
    /// The view root: `<root>/<dataset>/` holds the dataset's Delta table (a Parquet
    /// dataset's) and, for a dataset with directory trees, `v<N>/` and `current`. Created if
    /// missing. It must not lie inside the staging root, nor the staging root inside it.
    pub root: PathBuf,
    /// Hard links (the default) or copies.
    pub mode: ViewMode,
    /// Which datasets get per-generation directory trees (see [`ViewTrees`]). `None` keeps
    /// what the store recorded: [`ViewTrees::Off`] for a view root recorded with this
    /// setting or new, [`ViewTrees::All`] for a view root recorded before the setting existed
    /// (its readers of `current` keep working). `Some` records the choice.
    pub trees: Option<ViewTrees>,
}

impl ViewOptions {
    /// Views of hard links under `root`.
    pub fn hard_links(root: impl Into<PathBuf>) -> ViewOptions {
        ViewOptions { root: root.into(), mode: ViewMode::HardLink, trees: None }
    }

    /// Views of copies under `root`.
    pub fn copies(root: impl Into<PathBuf>) -> ViewOptions {
        ViewOptions { root: root.into(), mode: ViewMode::Copy, trees: None }
    }

    /// The same options, recording `trees` as the store's choice of directory trees.
    #[must_use]
    pub fn with_trees(mut self, trees: ViewTrees) -> ViewOptions {
        self.trees = Some(trees);
        self
    }
}

/// Which datasets get a directory tree per generation (`<root>/<dataset>/v<N>/` and the
/// `current` symlink): a per-dataset choice the store records.
///
/// A directory tree is what an engine that only lists directories needs, and its cost grows
/// with the dataset, not with the change: every generation's tree is one directory per
/// partition and one link (or copy) per file, because directories cannot be shared between
/// generations without symlinks, which some readers do not follow (DuckDB's `**` and Python's
/// `Path.rglob` list nothing through them). At 10,000 partitions a one-partition publish spends
/// about a second building the tree and each retained generation holds about 46 MB of
/// directory blocks. Without trees a publish costs what it changes: a Parquet dataset is read
/// through its Delta table (`<root>/<dataset>/table`), any dataset through the exact file list
/// of a generation ([`crate::Snapshot::view_files`], `manifestdb view DATASET --files`).
///
/// ```
/// use manifestdb::{ViewOptions, ViewTrees};
///
/// // Trees for the small CSV dataset its dashboards list; the rest read the table or a list.
/// let options = ViewOptions::hard_links("data/views").with_trees(ViewTrees::only(["daily_units"]));
/// assert!(options.trees.as_ref().is_some_and(|t| t.includes("daily_units") && !t.includes("events")));
/// assert!(!ViewTrees::default().includes("daily_units"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ViewTrees {
    /// No dataset (the default for a new view root): every publish costs what it changes.
    #[default]
    Off,
    /// Every dataset (what a view root recorded before this setting existed keeps).
    All,
    /// The named datasets only.
    Only(BTreeSet<String>),
}

impl ViewTrees {
    /// Trees for the named datasets only.
    pub fn only<I, S>(datasets: I) -> ViewTrees
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ViewTrees::Only(datasets.into_iter().map(Into::into).collect())
    }

    /// Whether `dataset` gets directory trees.
    pub fn includes(&self, dataset: &str) -> bool {
        match self {
            ViewTrees::Off => false,
            ViewTrees::All => true,
            ViewTrees::Only(names) => names.contains(dataset),
        }
    }
}

/// What [`crate::Store::sync_view`] found and did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ViewStatus {
    /// The dataset.
    pub dataset: String,
    /// The store's current generation: what `current` now names and the table's latest version
    /// holds.
    pub generation: u64,
    /// Whether the dataset has directory trees ([`ViewTrees`]).
    pub trees: bool,
    /// `<root>/<dataset>/current` (absolute); `None` without directory trees.
    pub current: Option<PathBuf>,
    /// `<root>/<dataset>/v<N>` (absolute): the directory `current` names; `None` without
    /// directory trees.
    pub path: Option<PathBuf>,
    /// The view was built by this call (it did not exist yet).
    pub built: bool,
    /// `current` was moved by this call (it named another view, or nothing).
    pub swapped: bool,
    /// Views found damaged (manifest missing, empty or wrong; a file missing or of the wrong
    /// size) and rebuilt by this call, oldest first.
    pub repaired: Vec<u64>,
    /// Views removed because their generation is no longer in the store (or, for a dataset
    /// without directory trees, every view left from when it had them), oldest first.
    pub removed: Vec<u64>,
    /// The Delta table's latest version after this call, as its log holds it
    /// (`<root>/<dataset>/_delta_log`; it holds the current generation), `None` if the dataset
    /// has no table (its grain is not Parquet, or the library was built without the `delta`
    /// feature).
    pub table_version: Option<u64>,
    /// Delta versions found damaged (an empty, cut short or unparseable commit, or, for a full
    /// check, a version whose files are not exactly its generation's) and cut from the log by
    /// this call, which committed their generations again.
    pub table_repaired: Vec<u64>,
    /// Data files a retained generation names that were missing from the table (another
    /// writer's `vacuum`) and were placed again from staging by this call.
    pub table_restored: usize,
    /// The table's versions committed by other writers, oldest first (each reported, never
    /// absorbed: the store commits its generation's exact files on top of them). Listed by
    /// [`crate::Store::sync_view`] (and the writable open's sync).
    pub foreign_versions: Vec<u64>,
}

impl ViewStatus {
    /// The status of a sync of a dataset without directory trees that built, swapped, repaired
    /// and removed nothing: its table at `table_version` (`None`: no table).
    pub(crate) fn unchanged_without_trees(dataset: &str, generation: u64, table_version: Option<u64>) -> ViewStatus {
        ViewStatus {
            dataset: dataset.to_owned(),
            generation,
            trees: false,
            current: None,
            path: None,
            built: false,
            swapped: false,
            repaired: Vec::new(),
            removed: Vec::new(),
            table_version,
            table_repaired: Vec::new(),
            table_restored: 0,
            foreign_versions: Vec::new(),
        }
    }
}

/// What a sync did to the table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(not(feature = "delta"), allow(dead_code))] // reason: only the Delta table makes one
pub(crate) struct TableSync {
    /// The table's latest version after the sync, as the log holds it.
    pub(crate) version: u64,
    /// Versions committed by this sync.
    pub(crate) committed: Vec<u64>,
    /// Log entries and data files removed (the store's retention).
    pub(crate) removed: usize,
    /// Versions found damaged (empty, cut short, unparseable, or not holding their
    /// generation's files) and cut from the log; the sync committed their generations again.
    pub(crate) repaired: Vec<u64>,
    /// Data files a retained version names that were missing (another writer's `vacuum`) and
    /// were placed again from staging.
    pub(crate) restored: usize,
    /// Versions other writers committed, oldest first (reported, never absorbed: the store's
    /// next commit restores its generation's exact files on top of them); listed by a checking
    /// sync (an open, `view sync`), empty right after a commit.
    pub(crate) foreign: Vec<u64>,
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

/// A dataset's Delta table as its log holds it, read from disk (never computed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TableState {
    /// The newest version with a commit or checkpoint.
    pub(crate) latest: Option<u64>,
    /// The generation the newest version holds, if the store wrote it.
    pub(crate) latest_generation: Option<u64>,
    /// The version holding the generation asked about, if any.
    pub(crate) version: Option<u64>,
    /// Other writers' versions: `(version, operation, engine)`.
    pub(crate) foreign: Vec<(u64, Option<String>, Option<String>)>,
    /// Damaged versions: `(version, reason)`.
    pub(crate) damaged: Vec<(u64, String)>,
}

/// The Delta table at `<root>/<dataset>` as its log holds it, and the version holding
/// `generation` (`None`: no log).
pub(crate) fn table_state(root: &Path, dataset: &str, generation: Option<u64>) -> Result<Option<TableState>> {
    use crate::rules::delta as table_rule;
    #[cfg(all(feature = "s3", feature = "delta"))]
    if crate::objects::is_object_url(root) {
        return object_table::table_state(&root.to_string_lossy(), dataset, generation);
    }
    let table = root.join(dataset).join(table_rule::TABLE_DIR);
    let Some(read) =
        log::read_table_log(&table, log::Scope::All).map_err(|e| Error::io(format!("reading the Delta log of {}", table.display()), e))?
    else {
        return Ok(None);
    };
    Ok(Some(state_of(&read, generation)))
}

/// What a log as read says of the table: its latest version and generation, the version
/// holding `generation`, other writers' and damaged versions.
fn state_of(read: &log::LogRead, generation: Option<u64>) -> TableState {
    use crate::rules::delta::{self as table_rule, Commit};
    let mut state = TableState { latest: read.latest, ..TableState::default() };
    state.latest_generation = read.latest.and_then(|v| match read.log.get(&v) {
        Some(Commit::Ours { generation }) => Some(*generation),
        _ => None,
    });
    state.version = generation.and_then(|g| table_rule::version_of(&read.log, g));
    for (&v, commit) in &read.log {
        match commit {
            Commit::Foreign { operation, engine } => state.foreign.push((v, operation.clone(), engine.clone())),
            Commit::Damaged { reason } => state.damaged.push((v, reason.clone())),
            Commit::Ours { .. } => {}
        }
    }
    state
}

/// The exact files of one generation: [`crate::Snapshot::view_files`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileList {
    /// The dataset.
    pub dataset: String,
    /// The generation whose files these are.
    pub generation: u64,
    /// Whether it is the store's current generation.
    pub is_current: bool,
    /// Every file of the generation, absolute, in partition order: the accepted attempts'
    /// files where they were validated, under the staging root. They are durable (validation
    /// synced them), retained as long as the generation is (cleanup never touches an accepted
    /// attempt of a retained generation), and a path names one content for as long as it
    /// exists; the list never changes, whatever publishes meanwhile.
    pub files: Vec<PathBuf>,
}

/// The generation `requested` resolves to (`None`: the store's current one), or why none.
fn resolve_generation(source: &dyn Generations, dataset: &str, requested: Option<u64>) -> Result<(u64, bool)> {
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
    Ok((generation, Some(generation) == current))
}

/// The exact files of generation `requested` (`None`: the store's current generation).
pub(crate) fn generation_files(source: &dyn Generations, dataset: &str, requested: Option<u64>) -> Result<FileList> {
    let (generation, is_current) = resolve_generation(source, dataset, requested)?;
    let manifest = source.generation_manifest(dataset, Some(generation))?.ok_or_else(|| Error::NoView {
        dataset: dataset.to_owned(),
        generation: requested,
        reason: format!("generation {generation} left the store while it was read"),
    })?;
    let mut files = Vec::new();
    for entry in &manifest.partitions {
        let Some(dir) = &entry.staging_dir else {
            return Err(Error::NoView {
                dataset: dataset.to_owned(),
                generation: requested,
                reason: "the staging root is unknown to this handle (open the store with its staging root)".into(),
            });
        };
        files.extend(entry.files.iter().map(|f| dir.join(&f.path)));
    }
    Ok(FileList { dataset: dataset.to_owned(), generation, is_current, files })
}

/// The view of generation `requested` (`None`: the store's current generation) under `root`.
pub(crate) fn locate_view(source: &dyn Generations, root: &Path, dataset: &str, requested: Option<u64>) -> Result<ViewPath> {
    let no_view = |reason: String| Error::NoView { dataset: dataset.to_owned(), generation: requested, reason };
    let (generation, is_current) = resolve_generation(source, dataset, requested)?;
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
    Ok(ViewPath { dataset: dataset.to_owned(), generation, path, is_current })
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
    /// Which datasets get directory trees.
    trees: ViewTrees,
    seam: Seam,
    lock: Mutex<()>,
    /// Expired views' trees being removed in the background.
    reaper: Reaper,
    /// The Delta kernel's engine, made on first use.
    #[cfg(feature = "delta")]
    delta: std::sync::OnceLock<crate::delta::DeltaEngine>,
    /// A view root on object storage (`s3://bucket/prefix`): its Delta tables and manifests;
    /// `root` is then the URL as a path and nothing local is used.
    #[cfg(all(feature = "s3", feature = "delta"))]
    objects: Option<object_table::ObjectViews>,
}

impl Drop for Views {
    fn drop(&mut self) {
        self.reaper.wait();
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

impl Views {
    /// Why the dataset (as `manifest`, its current generation) gets no Delta table, if it does
    /// not: a partition published by a run whose grain is not Parquet (Delta data files are
    /// Parquet), or a partition key that is not hive `column=value` components.
    pub(crate) fn not_a_table(source: &dyn Generations, dataset: &str, manifest: &Manifest) -> Result<Option<String>> {
        let mut runs: BTreeSet<&str> = BTreeSet::new();
        for p in &manifest.partitions {
            runs.insert(&p.run);
        }
        for run in runs {
            match source.run_format(dataset, run)? {
                Some(crate::grain::DataFormat::Parquet) => {}
                other => {
                    let format = other.map_or("no declared grain".to_owned(), |f| format!("a {} grain", f.name().to_uppercase()));
                    return Ok(Some(format!(
                        "run {run:?} of generation {} has {format}; a Delta table's data files are Parquet, so the dataset keeps the \
                         directory view only",
                        manifest.generation.number
                    )));
                }
            }
        }
        if let Err(reason) = crate::rules::delta::partition_columns(manifest.partitions.iter().map(|p| p.partition.as_str())) {
            return Ok(Some(reason));
        }
        Ok(None)
    }
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
        if given.to_str().is_some_and(|s| s.starts_with("s3://")) {
            // Else taken for a relative directory named `s3:`.
            return Err(refuse(if cfg!(all(feature = "s3", feature = "delta")) {
                "is on object storage, which needs a staging root on object storage in the same bucket (the table's data files \
                 are server-side copies of the accepted objects); stage on s3:// too, or give a local view root"
                    .into()
            } else {
                "is on object storage, which this build of manifestdb does not support (the crate's `s3` and `delta` features)".into()
            }));
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
            trees: options.trees.clone().unwrap_or_default(),
            seam: Seam::default(),
            lock: Mutex::new(()),
            reaper: Reaper::default(),
            #[cfg(feature = "delta")]
            delta: std::sync::OnceLock::new(),
            #[cfg(all(feature = "s3", feature = "delta"))]
            objects: None,
        })
    }

    /// Opens a view root on object storage (`options.root` is `s3://bucket/prefix`) for a store
    /// staging on `staging`: Delta tables of server-side copies and generation manifests, no
    /// directory trees (see `object_table.rs`). Contacts nothing.
    ///
    /// # Errors
    /// [`Error::ViewRoot`] for a root that cannot serve: directory trees asked for, another
    /// bucket than the staging root's, nested prefixes.
    #[cfg(all(feature = "s3", feature = "delta"))]
    pub(crate) fn open_objects(options: &ViewOptions, staging: &std::sync::Arc<crate::objects::ObjectRoot>) -> Result<Views> {
        let url = options.root.to_string_lossy().into_owned();
        if let Some(trees) = &options.trees
            && *trees != ViewTrees::Off
        {
            return Err(Error::ViewRoot { root: options.root.clone(), reason: NO_TREES_ON_OBJECTS.into() });
        }
        let objects = object_table::ObjectViews::open(&url, staging)?;
        Ok(Views {
            root: PathBuf::from(objects.url()),
            mode: ViewMode::Copy,
            trees: ViewTrees::Off,
            seam: Seam::default(),
            lock: Mutex::new(()),
            reaper: Reaper::default(),
            delta: std::sync::OnceLock::new(),
            objects: Some(objects),
        })
    }

    /// Whether the view root is on object storage.
    pub(crate) fn on_objects(&self) -> bool {
        #[cfg(all(feature = "s3", feature = "delta"))]
        return self.objects.is_some();
        #[cfg(not(all(feature = "s3", feature = "delta")))]
        false
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

    /// Brings the dataset's view up to date with the store as `source` reads it: builds the
    /// current generation's view if missing, moves `current` to it, removes leftovers of
    /// interrupted builds and the views of generations the store no longer holds. With
    /// `check` (see [`Check`]), views present are first checked against the store
    /// (`_manifest.json` present, parseable and describing that generation; for a full check
    /// every file present with its recorded size, nothing extra) and a damaged one is rebuilt
    /// and swapped in whole. `None` if nothing is published.
    pub(crate) fn sync(&self, source: &dyn Generations, staging_root: &Path, dataset: &str, check: Check) -> Result<Option<ViewStatus>> {
        let _one_build = self.lock.lock();
        #[cfg(all(feature = "s3", feature = "delta"))]
        if let Some(objects) = &self.objects {
            return objects.sync(source, dataset, check);
        }
        if !self.trees.includes(dataset)
            && let Some(status) = self.sync_what_changed(source, staging_root, dataset, check)?
        {
            return Ok(Some(status));
        }
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
        if !self.trees.includes(dataset) {
            return self.sync_without_trees(ds.as_fd(), source, staging_root, dataset, &manifest, &stored, &listing, target, check);
        }
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
        let table = self.sync_table(ds.as_fd(), dataset, source, staging_root, &manifest, &stored, check)?;
        #[cfg(not(feature = "delta"))]
        let table: Option<TableSync> = None;
        if built || swapped || !repaired.is_empty() {
            tracing::info!(dataset, generation = number, built, swapped, repaired = repaired.len(), removed = removed.len(), "view synced");
        }
        let base = self.dataset_path(dataset);
        Ok(Some(ViewStatus {
            dataset: dataset.to_owned(),
            generation: number,
            trees: true,
            current: Some(base.join(rule::CURRENT)),
            path: Some(base.join(rule::view_name(number))),
            built,
            swapped,
            repaired,
            removed,
            table_version: table.as_ref().map(|t| t.version),
            table_repaired: table.as_ref().map(|t| t.repaired.clone()).unwrap_or_default(),
            table_restored: table.as_ref().map_or(0, |t| t.restored),
            foreign_versions: table.map(|t| t.foreign).unwrap_or_default(),
        }))
    }

    /// [`Views::sync`] for a dataset without directory trees, reading only what its newest
    /// generation changed: [`Views::sync_list_only`], or the Delta table's change commit
    /// (`Views::sync_table_change`). `None` when the full sync must decide.
    fn sync_what_changed(&self, source: &dyn Generations, staging_root: &Path, dataset: &str, check: Check) -> Result<Option<ViewStatus>> {
        if let Some(status) = self.sync_list_only(source, dataset)? {
            return Ok(Some(status));
        }
        #[cfg(feature = "delta")]
        let status = self.sync_table_change(source, staging_root, dataset, check)?;
        #[cfg(not(feature = "delta"))]
        let status = {
            let _ = (staging_root, check);
            None
        };
        Ok(status)
    }

    /// [`Views::sync`] for a dataset without directory trees whose newest generation cannot be
    /// a Delta table and that has nothing under the view root to remove: nothing to do, decided
    /// without reading the generation's partitions (so such a publish costs nothing here
    /// whatever the dataset's size). `None` when the full sync must decide: the newest
    /// generation's run has a Parquet grain, replaced nothing, or is a rollback (its partitions
    /// come from other runs), or the dataset directory holds a table, `current`, a view or a
    /// leftover.
    fn sync_list_only(&self, source: &dyn Generations, dataset: &str) -> Result<Option<ViewStatus>> {
        let Some(generation) = source.current_generation(dataset)? else {
            return Ok(None);
        };
        if !matches!(generation.kind, crate::model::GenerationKind::Publish)
            || generation.partitions_replaced == 0
            || source.run_format(dataset, &generation.run)? == Some(crate::grain::DataFormat::Parquet)
        {
            return Ok(None);
        }
        // The run's partitions are in the generation, and its grain is not Parquet: the
        // generation is no table (`not_a_table` would say so from every partition).
        let root = self.open_root()?;
        let Some(ds) = self.open_dataset(root.as_fd(), dataset, true)? else {
            return Ok(None);
        };
        let names = dirs::list_names(ds.as_fd()).map_err(self.io_err(format!("listing {}", self.dataset_path(dataset).display())))?;
        if names.iter().any(|n| n != rule::MARKER) {
            return Ok(None);
        }
        Ok(Some(ViewStatus::unchanged_without_trees(dataset, generation.number, None)))
    }

    /// [`Views::sync`] for a dataset without directory trees: removes what trees it had
    /// (`current` first, so no reader resolves it again, then every `v<N>` and leftover) and
    /// syncs its Delta table, so a publish costs what it changes.
    #[allow(clippy::too_many_arguments)] // reason: one sync's handles, source and generation
    fn sync_without_trees(
        &self,
        ds: BorrowedFd<'_>,
        source: &dyn Generations,
        staging_root: &Path,
        dataset: &str,
        manifest: &Manifest,
        stored: &BTreeSet<u64>,
        listing: &layout::Listing,
        target: Option<u64>,
        check: Check,
    ) -> Result<Option<ViewStatus>> {
        if target.is_some() {
            tracing::info!(dataset, "the dataset has no directory trees: removing `current` and its views");
            self.remove_entry(ds, dataset, rule::CURRENT)?;
        }
        for leftover in &listing.leftovers {
            if !self.reaper.is_busy(&self.dataset_path(dataset).join(leftover)) {
                self.remove_entry(ds, dataset, leftover)?;
            }
        }
        self.remove_views(ds, dataset, &listing.views)?;
        #[cfg(feature = "delta")]
        let table = self.sync_table(ds, dataset, source, staging_root, manifest, stored, check)?;
        #[cfg(not(feature = "delta"))]
        let table: Option<TableSync> = {
            let _ = (source, staging_root, stored, check);
            None
        };
        let unchanged = ViewStatus::unchanged_without_trees(dataset, manifest.generation.number, table.as_ref().map(|t| t.version));
        Ok(Some(ViewStatus {
            removed: listing.views.clone(),
            table_repaired: table.as_ref().map(|t| t.repaired.clone()).unwrap_or_default(),
            table_restored: table.as_ref().map_or(0, |t| t.restored),
            foreign_versions: table.map(|t| t.foreign).unwrap_or_default(),
            ..unchanged
        }))
    }
}

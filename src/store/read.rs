//! Read snapshots: a consistent view of the store, in the writer's process or another one.
//!
//! A [`Snapshot`] is one consistent read of the storage layer (`layer::ReadTxn`; redb: one read
//! transaction): everything read through it comes from one committed state, so a reader sees a
//! generation either entirely before or entirely after a publish, never a mix. Every read is
//! written once over `meta::MetaRead` and calls no engine.

use std::path::{Path, PathBuf};

use super::contain::Poison;
use super::layer::ReadTxn;
use crate::error::{Error, Result};
use crate::meta::MetaRead;
use crate::model::{
    AttemptInfo, AttemptKey, Effect, EffectStatus, Generation, Manifest, PartitionEntry, RunInfo, RunSummary, TaskKey, TaskSpec,
};
use crate::records::{AttemptRecord, EffectRecord, attempt_status, effect_from, generation_from};
use crate::schema::{FORMAT_VERSION, META, META_FORMAT_KEY, POINTERS, key};

/// A consistent, read-only view of the store at one moment.
///
/// Every read through one snapshot sees the same committed state, so a manifest, the pointer
/// and each partition looked up alone agree even while a publish commits. Holding a snapshot
/// keeps the pages it sees alive; drop it when done so the writer can reuse space.
///
/// ```
/// use manifestdb::Store;
///
/// # fn main() -> Result<(), manifestdb::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path().join("store.redb"), dir.path().join("staging"))?;
/// let snapshot = store.snapshot()?;
/// for dataset in snapshot.datasets()? {
///     if let Some(manifest) = snapshot.manifest(&dataset, None)? {
///         println!("{dataset}: generation {}, {} partitions", manifest.generation.number, manifest.partitions.len());
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub struct Snapshot {
    txn: ReadTxn,
    staging_root: Option<PathBuf>,
    /// The poison flag of the handle it came from (see `contain.rs`).
    poison: Poison,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").finish_non_exhaustive()
    }
}

fn no_format_record() -> Error {
    crate::ops::corrupted(META, META_FORMAT_KEY, "the store has no format record")
}

impl Snapshot {
    pub(crate) fn new(txn: ReadTxn, staging_root: Option<PathBuf>, poison: Poison) -> Snapshot {
        Snapshot { txn, staging_root, poison }
    }

    /// Runs `body` at the boundary with the engine (see `contain.rs`).
    pub(crate) fn contain<T>(&self, operation: &'static str, body: impl FnOnce() -> Result<T>) -> Result<T> {
        self.poison.contain(operation, body)
    }

    /// Runs `body` over this snapshot's reads, at the boundary with the engine: every read of
    /// the snapshot goes through here.
    pub(crate) fn read<T>(&self, operation: &'static str, body: impl FnOnce(&mut dyn MetaRead) -> Result<T>) -> Result<T> {
        self.poison.contain(operation, || self.txn.read(body))
    }

    /// Checks that the store has the format this build reads.
    pub(crate) fn check_format(&self) -> Result<()> {
        self.read("checking the store format", |meta| match meta.store_format()? {
            Some(record) if record.format_version == FORMAT_VERSION => Ok(()),
            Some(record) => Err(Error::UnsupportedFormat { found: record.format_version, supported: FORMAT_VERSION }),
            None => Err(no_format_record()),
        })
    }

    /// The staging root, when the snapshot comes from a writable [`crate::Store`].
    pub fn staging_root(&self) -> Option<&Path> {
        self.staging_root.as_deref()
    }

    /// Every dataset that has a current generation, in name order.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn datasets(&self) -> Result<Vec<String>> {
        self.read("reading datasets", |meta| meta.datasets())
    }

    /// The dataset's current generation, or `None` if nothing was published.
    ///
    /// # Errors
    /// Storage and corruption errors (including a pointer to a missing generation).
    pub fn current(&self, dataset: &str) -> Result<Option<Generation>> {
        self.read("reading current", |meta| current(meta, dataset))
    }

    /// A retained generation of the dataset, or `None` if it never existed or has expired.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn generation(&self, dataset: &str, number: u64) -> Result<Option<Generation>> {
        self.read("reading generation", |meta| Ok(meta.generation(dataset, number)?.map(|r| generation_from(dataset, number, r))))
    }

    /// The manifest of generation `number` (the current one if `None`): every partition with
    /// its accepted attempt, files, rows, total and digest.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn manifest(&self, dataset: &str, number: Option<u64>) -> Result<Option<Manifest>> {
        self.read("reading manifest", |meta| {
            let generation = match number {
                None => current(meta, dataset)?,
                Some(number) => meta.generation(dataset, number)?.map(|r| generation_from(dataset, number, r)),
            };
            let Some(generation) = generation else {
                return Ok(None);
            };
            let mut partitions =
                crate::ops::generation_partitions(meta, dataset, generation.number, &generation.kind, generation.partitions_replaced)?;
            let mut checked = FiguresChecked::default();
            for entry in &mut partitions {
                self.locate(entry);
                entry.figures_checked = checked.of(meta, dataset, &entry.run)?;
            }
            Ok(Some(Manifest { generation, partitions }))
        })
    }

    /// One partition as generation `number` (the current one if `None`) holds it.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn partition(&self, dataset: &str, partition: &str, number: Option<u64>) -> Result<Option<PartitionEntry>> {
        self.read("reading partition", |meta| {
            let number = match number {
                Some(number) => number,
                None => match meta.pointer(dataset)? {
                    Some(number) => number,
                    None => return Ok(None),
                },
            };
            let mut entry = meta.partition_at(dataset, partition, number)?;
            if let Some(entry) = &mut entry {
                self.locate(entry);
                entry.figures_checked = FiguresChecked::default().of(meta, dataset, &entry.run)?;
            }
            Ok(entry)
        })
    }

    fn locate(&self, entry: &mut PartitionEntry) {
        entry.staging_dir = self.staging_root.as_ref().map(|root| root.join(&entry.staging_rel));
    }

    /// The store's recorded view root, mode and choice of directory trees (`trees` is always
    /// `Some`: [`crate::ViewTrees::All`] for a root recorded before the choice existed), if it
    /// publishes views (see [`crate::StoreOptions::views`]).
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn views(&self) -> Result<Option<crate::ViewOptions>> {
        self.read("reading views", |meta| {
            let Some(r) = meta.views_config()? else { return Ok(None) };
            // A root recorded before the choice of trees existed keeps trees for every dataset.
            let trees = meta.view_trees()?.map_or(crate::ViewTrees::All, |t| t.trees());
            Ok(Some(crate::ViewOptions {
                root: PathBuf::from(r.root),
                mode: if r.copy { crate::ViewMode::Copy } else { crate::ViewMode::HardLink },
                trees: Some(trees),
            }))
        })
    }

    /// Where generation `generation`'s view is (`None`: the current generation's), under the
    /// store's recorded view root: `<root>/<dataset>/v<N>`, a directory that names exactly that
    /// generation's files for as long as it is retained. This is the path to give an engine
    /// that lists directories: unlike `current`, it cannot move to another generation while
    /// the engine reads.
    ///
    /// # Errors
    /// [`Error::NoView`] if the store publishes no views, the dataset has no directory trees
    /// ([`crate::ViewTrees`]), no such generation, or the generation has no view;
    /// [`Error::GenerationNotRetained`] (naming the oldest
    /// retained generation) if it expired; storage and corruption errors.
    pub fn view_path(&self, dataset: &str, generation: Option<u64>) -> Result<crate::ViewPath> {
        let Some(views) = self.views()? else {
            return Err(Error::NoView {
                dataset: dataset.to_owned(),
                generation,
                reason: "the store publishes no views (open it once with a view root: `--views DIR`)".into(),
            });
        };
        if views.root.to_str().is_some_and(|r| r.starts_with("s3://")) {
            return Err(Error::NoView {
                dataset: dataset.to_owned(),
                generation,
                reason: format!("the view root {} {}", views.root.display(), crate::views::NO_TREES_ON_OBJECTS),
            });
        }
        if views.trees.as_ref().is_some_and(|t| !t.includes(dataset)) {
            return Err(Error::NoView {
                dataset: dataset.to_owned(),
                generation,
                reason: "the dataset has no directory trees (the store's choice, `ViewTrees`; `--view-trees`): read its Delta \
                         table (a Parquet dataset's) or the generation's exact file list (`Snapshot::view_files`, `manifestdb view \
                         DATASET --files`)"
                    .into(),
            });
        }
        crate::views::locate_view(self, &views.root, dataset, generation)
    }

    /// The exact files of generation `generation` (`None`: the current one), absolute, for
    /// engines that take a list of files (DuckDB's `read_csv([...])`, polars, pyarrow): the
    /// accepted attempts' files where they were validated. The list is the generation's, so a
    /// reader given it reads exactly that generation whatever publishes meanwhile, every
    /// partition once; its files stay (cleanup never removes an accepted attempt of a retained
    /// generation) until the generation expires. It needs no views and no directory trees.
    ///
    /// # Errors
    /// [`Error::NoView`] if the dataset has no such generation or the handle does not know
    /// the staging root (a [`crate::ReadOnlyStore`] opened without it);
    /// [`Error::GenerationNotRetained`] if it expired; storage and corruption errors.
    pub fn view_files(&self, dataset: &str, generation: Option<u64>) -> Result<crate::FileList> {
        crate::views::generation_files(self, dataset, generation)
    }

    /// The dataset's Delta table: `<root>/<dataset>/table` under the store's recorded view root,
    /// whose `_delta_log` holds one version per generation (the version of generation N is read
    /// from the log: `manifestdb view DATASET --generation N --json`'s `table.version`; other
    /// writers' commits take versions too), for `DeltaTable(path)`, `polars.read_delta`,
    /// DuckDB's `delta_scan` or Spark's `format("delta")`. With or without directory trees.
    ///
    /// # Errors
    /// [`Error::NoView`] if the store publishes no views, the dataset has no generation, or the
    /// library was built without the `delta` feature; [`Error::ViewRefused`] if the dataset
    /// gets no table, saying why (its grain is not Parquet: Delta data files are Parquet; its
    /// partition keys are not hive `column=value`); storage and corruption errors.
    pub fn delta_table(&self, dataset: &str) -> Result<std::path::PathBuf> {
        let no_table = |reason: String| Error::NoView { dataset: dataset.to_owned(), generation: None, reason };
        let Some(views) = self.views()? else {
            return Err(no_table("the store publishes no views (open it once with a view root: `--views DIR`)".into()));
        };
        let Some(manifest) = self.manifest(dataset, None)? else {
            return Err(no_table("the dataset has no generation".into()));
        };
        let path = views.root.join(dataset).join(crate::rules::delta::TABLE_DIR);
        if let Some(reason) = crate::views::Views::not_a_table(self, dataset, &manifest)? {
            return Err(Error::ViewRefused { dataset: dataset.to_owned(), path: path.display().to_string(), reason });
        }
        if cfg!(feature = "delta") {
            Ok(path)
        } else {
            Err(no_table(
                "this build of manifestdb has no Delta tables (the `delta` feature): the Parquet dataset's table lags until a build \
                 with it (the CLI) opens the store for writing, publishes or runs `view sync`"
                    .into(),
            ))
        }
    }

    /// Every retained generation of the dataset, oldest first.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn history(&self, dataset: &str) -> Result<Vec<Generation>> {
        self.read("reading history", |meta| {
            Ok(meta.generations(dataset)?.into_iter().map(|(number, record)| generation_from(dataset, number, record)).collect())
        })
    }

    /// A declared run with its tasks.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn run(&self, dataset: &str, run: &str) -> Result<Option<RunInfo>> {
        self.read("reading run", |meta| {
            let Some(record) = meta.run(dataset, run)? else {
                return Ok(None);
            };
            let tasks = meta
                .run_tasks(dataset, run)?
                .into_iter()
                .map(|(partition, task)| TaskSpec { partition, expected_rows: task.expected_rows, expected_total: task.expected_total })
                .collect();
            Ok(Some(RunInfo {
                dataset: dataset.to_owned(),
                run: run.to_owned(),
                snapshot: record.snapshot,
                declared_at_ms: record.declared_at_ms,
                published_generation: record.published_generation,
                tasks,
                grain: record.grain,
            }))
        })
    }

    /// Every declared run of the dataset, in run-id order, with how many of its tasks have an
    /// accepted attempt. Empty for a dataset that never declared a run.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn runs(&self, dataset: &str) -> Result<Vec<RunSummary>> {
        self.read("reading runs", |meta| {
            let runs = meta.dataset_runs(dataset)?;
            let mut out = Vec::with_capacity(runs.len());
            for (run, record) in runs {
                let accepted_tasks = meta.accepted_count(dataset, &run)?;
                out.push(RunSummary {
                    dataset: dataset.to_owned(),
                    run,
                    snapshot: record.snapshot,
                    declared_at_ms: record.declared_at_ms,
                    published_generation: record.published_generation,
                    tasks: record.task_count,
                    accepted_tasks,
                });
            }
            Ok(out)
        })
    }

    /// Whether the dataset is known to the store: it declared a run or has a generation.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn has_dataset(&self, dataset: &str) -> Result<bool> {
        self.read("reading datasets", |meta| Ok(meta.has_runs(dataset)? || meta.pointer(dataset)?.is_some()))
    }

    /// The store's identity, as [`crate::Store::store_id`] gives it: the same through a
    /// read-only handle or a snapshot in another process.
    ///
    /// # Errors
    /// Storage and corruption errors (including a store without its format record).
    pub fn store_id(&self) -> Result<String> {
        self.read("reading the store's identity", store_id)
    }

    /// The attempt lease recorded in the store (ms): how long an unfinished attempt may go
    /// without a heartbeat before it may be recorded abandoned. Writers only ever raise it.
    ///
    /// # Errors
    /// Storage and corruption errors (including a store without its format record).
    pub fn attempt_lifetime_max_ms(&self) -> Result<u64> {
        self.read("reading the attempt lease", |meta| {
            meta.store_format()?.map(|record| record.attempt_lifetime_max_ms).ok_or_else(no_format_record)
        })
    }

    /// One attempt.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn attempt(&self, attempt: &AttemptKey) -> Result<Option<AttemptInfo>> {
        self.read("reading attempt", |meta| Ok(meta.attempt(attempt)?.map(|r| attempt_info(attempt.clone(), r))))
    }

    /// Every attempt of a task, in attempt order.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn attempts(&self, task: &TaskKey) -> Result<Vec<AttemptInfo>> {
        self.read("reading attempts", |meta| {
            Ok(meta.task_attempts(task)?.into_iter().map(|(number, record)| attempt_info(task.attempt(number), record)).collect())
        })
    }

    /// The attempts of a run that finished and await validation (a candidate recorded, no
    /// verdict yet), in (partition, attempt) order: what a coordinator validates next
    /// ([`crate::Store::validate_pending`] validates them all). Running, abandoned and
    /// validated attempts are not among them.
    ///
    /// # Errors
    /// [`Error::UnknownRun`] if the run was never declared; [`Error::InvalidInput`] for a bad
    /// name; storage and corruption errors.
    pub fn pending_attempts(&self, dataset: &str, run: &str) -> Result<Vec<AttemptKey>> {
        crate::rules::ids::check_name("dataset", dataset)?;
        crate::rules::ids::check_name("run id", run)?;
        self.read("reading the attempts awaiting validation", |meta| {
            if meta.run(dataset, run)?.is_none() {
                return Err(Error::UnknownRun { dataset: dataset.to_owned(), run: run.to_owned() });
            }
            let mut pending = Vec::new();
            for (partition, _) in meta.run_tasks(dataset, run)? {
                let task = TaskKey::new(dataset, run, &partition);
                for (number, record) in meta.task_attempts(&task)? {
                    if matches!(attempt_status(&record), crate::model::AttemptStatus::Finished) {
                        pending.push(task.attempt(number));
                    }
                }
            }
            Ok(pending)
        })
    }

    /// The task's accepted attempt: its lowest-numbered valid one (frozen once the run is
    /// published).
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn accepted(&self, task: &TaskKey) -> Result<Option<u32>> {
        self.read("reading accepted", |meta| meta.accepted(task))
    }

    /// Every side effect recorded for a run, in key order.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn effects(&self, dataset: &str, run: &str) -> Result<Vec<Effect>> {
        self.read("reading effects", |meta| {
            let found = meta.run_effects(dataset, run)?;
            effects_where(meta, found, |_| true)
        })
    }

    /// Every side effect of the dataset that is ready to emit (its run is published, it is not
    /// yet marked emitted), in key order.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn ready_effects(&self, dataset: &str) -> Result<Vec<Effect>> {
        self.read("reading ready effects", |meta| {
            let found = meta.dataset_effects(dataset)?;
            effects_where(meta, found, |status| matches!(status, EffectStatus::Ready { .. }))
        })
    }

    /// Every side effect recorded for the dataset, across its runs, in key order.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn dataset_effects(&self, dataset: &str) -> Result<Vec<Effect>> {
        self.read("reading dataset effects", |meta| {
            let found = meta.dataset_effects(dataset)?;
            effects_where(meta, found, |_| true)
        })
    }

    /// How many entries each table of the store holds, as `(table name, entries)` in schema
    /// order (table names carry their version, e.g. `runs_v1`). For operators' statistics.
    ///
    /// # Errors
    /// Storage errors.
    pub fn table_entries(&self) -> Result<Vec<(&'static str, u64)>> {
        self.read("reading table entries", |meta| meta.table_entries())
    }
}

/// The dataset's current generation: its pointer's, which must exist.
fn current(meta: &mut dyn MetaRead, dataset: &str) -> Result<Option<Generation>> {
    let Some(number) = meta.pointer(dataset)? else {
        return Ok(None);
    };
    meta.generation(dataset, number)?.map(|r| Some(generation_from(dataset, number, r))).ok_or_else(|| {
        crate::ops::corrupted(POINTERS, &key(&[dataset]), format!("pointer names generation {number}, which does not exist"))
    })
}

/// The effects whose status `keep` keeps, each with the store's identity (read from the meta
/// record in the same snapshot).
fn effects_where(
    meta: &mut dyn MetaRead,
    effects: Vec<(crate::model::EffectKey, EffectRecord)>,
    keep: impl Fn(&EffectStatus) -> bool,
) -> Result<Vec<Effect>> {
    let mut kept = effects.into_iter().filter(|(_, record)| keep(&record.status)).peekable();
    if kept.peek().is_none() {
        return Ok(Vec::new());
    }
    let store_id = store_id(meta)?;
    Ok(kept.map(|(key, record)| effect_from(&store_id, key, record)).collect())
}

/// The store's identity, from its meta record ([`crate::Store::store_id`]).
fn store_id(meta: &mut dyn MetaRead) -> Result<String> {
    let record = meta.store_format()?.ok_or_else(no_format_record)?;
    Ok(crate::rules::effects::store_id(&record.staging_identity, record.created_at_ms))
}

fn attempt_info(key: AttemptKey, record: AttemptRecord) -> AttemptInfo {
    let status = attempt_status(&record);
    AttemptInfo {
        key,
        started_at_ms: record.started_at_ms,
        heartbeat_at_ms: record.heartbeat_at_ms,
        abandoned_at_ms: record.abandoned_at_ms,
        staging_rel: record.staging_rel,
        candidate: record.candidate,
        status,
        reconciliation: record.reconciliation,
    }
}

/// What the views read of the store: a snapshot's plain values (`views.rs` never names the
/// store).
impl crate::views::Generations for Snapshot {
    fn dataset_names(&self) -> Result<Vec<String>> {
        self.datasets()
    }

    fn current_number(&self, dataset: &str) -> Result<Option<u64>> {
        Ok(self.current(dataset)?.map(|g| g.number))
    }

    fn stored_numbers(&self, dataset: &str) -> Result<std::collections::BTreeSet<u64>> {
        Ok(self.history(dataset)?.iter().map(|g| g.number).collect())
    }

    fn generation_manifest(&self, dataset: &str, number: Option<u64>) -> Result<Option<Manifest>> {
        self.manifest(dataset, number)
    }

    fn run_format(&self, dataset: &str, run: &str) -> Result<Option<crate::grain::DataFormat>> {
        Ok(self.run(dataset, run)?.and_then(|r| r.grain).map(|g| g.format))
    }

    fn current_generation(&self, dataset: &str) -> Result<Option<crate::model::Generation>> {
        self.current(dataset)
    }

    fn run_partitions(&self, dataset: &str, run: &str) -> Result<Option<Vec<String>>> {
        Ok(self.run(dataset, run)?.map(|r| r.tasks.into_iter().map(|t| t.partition).collect()))
    }

    fn partition_at(&self, dataset: &str, partition: &str, number: u64) -> Result<Option<crate::model::PartitionEntry>> {
        self.partition(dataset, partition, Some(number))
    }
}

/// Whether each run of a dataset declares a grain, read once per run: a partition's figures
/// are checked ([`PartitionEntry::figures_checked`]) when the run that filled it declares one.
/// A partition carried over from a run whose record is gone cannot say; its figures count as
/// reported (the weaker claim).
#[derive(Default)]
struct FiguresChecked {
    runs: std::collections::HashMap<String, bool>,
}

impl FiguresChecked {
    fn of(&mut self, meta: &mut dyn MetaRead, dataset: &str, run: &str) -> Result<bool> {
        if let Some(checked) = self.runs.get(run) {
            return Ok(*checked);
        }
        let checked = meta.run(dataset, run)?.is_some_and(|record| record.grain.is_some());
        self.runs.insert(run.to_owned(), checked);
        Ok(checked)
    }
}

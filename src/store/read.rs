//! Read snapshots: a consistent view of the store, in the writer's process or another one.
//!
//! A [`Snapshot`] is one redb read transaction: everything read through it comes from one
//! committed state, so a reader sees a generation either entirely before or entirely after a
//! publish, never a mix.

use std::path::{Path, PathBuf};

use redb::{ReadTransaction, ReadableTableMetadata};

use super::contain::Poison;
use super::tables::{self, Readable, first_key, get, last_at_or_before, scan};
use crate::error::{Error, Result};
use crate::model::{
    AttemptInfo, AttemptKey, Effect, EffectStatus, Generation, Manifest, PartitionEntry, RunInfo, RunSummary, TaskKey, TaskSpec,
};
use crate::records::{
    AcceptedRecord, AttemptRecord, EffectRecord, GenerationRecord, MetaRecord, PartitionVersionRecord, PointerRecord, RunRecord,
    TaskRecord, attempt_status, effect_from, generation_from,
};
use crate::schema::{
    self, ACCEPTED, ALL_TABLES, ATTEMPTS, Def, EFFECTS, FORMAT_VERSION, GENERATIONS, META, META_FORMAT_KEY, POINTERS, RUNS, TASKS,
    VERSIONS, key, key_u32, key_u64, prefix, prefix_end,
};

/// A consistent, read-only view of the store at one moment.
///
/// Holding a snapshot keeps the pages it sees alive; drop it when done so the writer can reuse
/// space.
pub struct Snapshot {
    txn: ReadTransaction,
    staging_root: Option<PathBuf>,
    /// The poison flag of the handle it came from (see `contain.rs`).
    poison: Poison,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").finish_non_exhaustive()
    }
}

fn open_ro(txn: &ReadTransaction, def: Def) -> Result<redb::ReadOnlyTable<&'static [u8], &'static [u8]>> {
    txn.open_table(def.def()).map_err(|e| Error::storage("opening a table for reading", e))
}

/// The partition entry a version record holds, or `None` for a removed partition.
fn entry_from(partition: &str, since_generation: u64, record: PartitionVersionRecord) -> Option<PartitionEntry> {
    record.entry.map(|e| PartitionEntry {
        partition: partition.to_owned(),
        since_generation,
        run: e.run,
        attempt: e.attempt,
        snapshot: e.snapshot,
        rows: e.rows,
        total: e.total,
        digest: e.digest,
        staging_rel: e.staging_rel,
        staging_dir: None,
        files: e.files,
    })
}

/// The version of `partition` visible in generation `generation`: the entry with the largest
/// generation number not above it. One reverse range lookup.
pub(crate) fn partition_at(versions: &impl Readable, dataset: &str, partition: &str, generation: u64) -> Result<Option<PartitionEntry>> {
    let start = key_u64(&[dataset, partition], 0);
    let end = key_u64(&[dataset, partition], generation);
    match last_at_or_before::<PartitionVersionRecord>(versions, VERSIONS, &start, &end)? {
        None => Ok(None),
        Some((version_key, record)) => {
            let since =
                schema::trailing_u64(&version_key).ok_or_else(|| tables::corrupted(VERSIONS, &version_key, "malformed version key"))?;
            Ok(entry_from(partition, since, record))
        }
    }
}

/// Every partition visible in generation `generation`, in key order.
///
/// A skip scan: for each distinct partition one seek to its newest version at or below
/// `generation`, then one seek past all its versions. The cost is O(P log n) for P partitions,
/// whatever the number of older versions.
pub(crate) fn partitions_at(versions: &impl Readable, dataset: &str, generation: u64) -> Result<Vec<PartitionEntry>> {
    let dataset_prefix = prefix(&[dataset]);
    let dataset_end = prefix_end(&dataset_prefix);
    let mut cursor = dataset_prefix.clone();
    let mut out = Vec::new();
    while let Some(found) = first_key(versions, VERSIONS, &cursor, &dataset_end)? {
        let rest = &found[dataset_prefix.len()..];
        let (partition, _) = schema::split_text_u64(rest).ok_or_else(|| tables::corrupted(VERSIONS, &found, "malformed version key"))?;
        let partition = partition.to_owned();
        if let Some(entry) = partition_at(versions, dataset, &partition, generation)? {
            out.push(entry);
        }
        cursor = prefix_end(&prefix(&[dataset, &partition]));
    }
    Ok(out)
}

pub(crate) fn read_generation(generations: &impl Readable, dataset: &str, number: u64) -> Result<Option<Generation>> {
    Ok(get::<GenerationRecord>(generations, GENERATIONS, &key_u64(&[dataset], number))?.map(|r| generation_from(dataset, number, r)))
}

pub(crate) fn read_pointer(pointers: &impl Readable, dataset: &str) -> Result<Option<u64>> {
    Ok(get::<PointerRecord>(pointers, POINTERS, &key(&[dataset]))?.map(|p| p.generation))
}

/// The stored generations of a dataset, `(number, published_at_ms)`, oldest first.
pub(crate) fn generation_list(generations: &impl Readable, dataset: &str) -> Result<Vec<(u64, u64)>> {
    let generation_prefix = prefix(&[dataset]);
    let mut out = Vec::new();
    scan::<GenerationRecord>(generations, GENERATIONS, &generation_prefix, &prefix_end(&generation_prefix), |k, record| {
        let number = schema::trailing_u64(k)
            .filter(|_| k.len() == generation_prefix.len() + 8)
            .ok_or_else(|| tables::corrupted(GENERATIONS, k, "malformed generation key"))?;
        out.push((number, record.published_at_ms));
        Ok(true)
    })?;
    Ok(out)
}

impl Snapshot {
    pub(crate) fn new(txn: ReadTransaction, staging_root: Option<PathBuf>, poison: Poison) -> Snapshot {
        Snapshot { txn, staging_root, poison }
    }

    /// Runs `body` at the boundary with redb (see `contain.rs`).
    pub(crate) fn contain<T>(&self, operation: &'static str, body: impl FnOnce() -> Result<T>) -> Result<T> {
        self.poison.contain(operation, body)
    }

    pub(crate) fn txn(&self) -> &ReadTransaction {
        &self.txn
    }

    /// Checks that the store has the format this build reads.
    pub(crate) fn check_format(&self) -> Result<()> {
        let meta = open_ro(&self.txn, META)?;
        match get::<MetaRecord>(&meta, META, META_FORMAT_KEY)? {
            Some(record) if record.format_version == FORMAT_VERSION => Ok(()),
            Some(record) => Err(Error::UnsupportedFormat { found: record.format_version, supported: FORMAT_VERSION }),
            None => Err(tables::corrupted(META, META_FORMAT_KEY, "the store has no format record")),
        }
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
        self.poison.contain("reading datasets", || {
            let pointers = open_ro(&self.txn, POINTERS)?;
            let mut out = Vec::new();
            scan::<PointerRecord>(&pointers, POINTERS, &[], &[0xff], |pointer_key, _| {
                out.push(
                    schema::text_after(pointer_key, &[])
                        .ok_or_else(|| tables::corrupted(POINTERS, pointer_key, "malformed dataset key"))?
                        .to_owned(),
                );
                Ok(true)
            })?;
            Ok(out)
        })
    }

    /// The dataset's current generation, or `None` if nothing was published.
    ///
    /// # Errors
    /// Storage and corruption errors (including a pointer to a missing generation).
    pub fn current(&self, dataset: &str) -> Result<Option<Generation>> {
        self.poison.contain("reading current", || {
            let pointers = open_ro(&self.txn, POINTERS)?;
            let Some(number) = read_pointer(&pointers, dataset)? else {
                return Ok(None);
            };
            let generations = open_ro(&self.txn, GENERATIONS)?;
            read_generation(&generations, dataset, number)?.map(Some).ok_or_else(|| {
                tables::corrupted(POINTERS, &key(&[dataset]), format!("pointer names generation {number}, which does not exist"))
            })
        })
    }

    /// A retained generation of the dataset, or `None` if it never existed or has expired.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn generation(&self, dataset: &str, number: u64) -> Result<Option<Generation>> {
        self.poison.contain("reading generation", || {
            let generations = open_ro(&self.txn, GENERATIONS)?;
            read_generation(&generations, dataset, number)
        })
    }

    /// The manifest of generation `number` (the current one if `None`): every partition with
    /// its accepted attempt, files, rows, total and digest.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn manifest(&self, dataset: &str, number: Option<u64>) -> Result<Option<Manifest>> {
        self.poison.contain("reading manifest", || {
            let generation = match number {
                None => self.current(dataset)?,
                Some(number) => self.generation(dataset, number)?,
            };
            let Some(generation) = generation else {
                return Ok(None);
            };
            let versions = open_ro(&self.txn, VERSIONS)?;
            let mut partitions = partitions_at(&versions, dataset, generation.number)?;
            for entry in &mut partitions {
                self.locate(entry);
            }
            Ok(Some(Manifest { generation, partitions }))
        })
    }

    /// One partition as generation `number` (the current one if `None`) holds it.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn partition(&self, dataset: &str, partition: &str, number: Option<u64>) -> Result<Option<PartitionEntry>> {
        self.poison.contain("reading partition", || {
            let number = match number {
                Some(number) => number,
                None => match read_pointer(&open_ro(&self.txn, POINTERS)?, dataset)? {
                    Some(number) => number,
                    None => return Ok(None),
                },
            };
            let mut entry = partition_at(&open_ro(&self.txn, VERSIONS)?, dataset, partition, number)?;
            if let Some(entry) = &mut entry {
                self.locate(entry);
            }
            Ok(entry)
        })
    }

    fn locate(&self, entry: &mut PartitionEntry) {
        entry.staging_dir = self.staging_root.as_ref().map(|root| root.join(&entry.staging_rel));
    }

    /// The store's recorded view root and mode, if it publishes views (see
    /// [`crate::StoreOptions::views`]).
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn views(&self) -> Result<Option<crate::ViewOptions>> {
        self.poison.contain("reading views", || {
            let meta = open_ro(&self.txn, META)?;
            Ok(get::<crate::records::ViewsRecord>(&meta, META, crate::schema::META_VIEWS_KEY)?.map(|r| crate::ViewOptions {
                root: PathBuf::from(r.root),
                mode: if r.copy { crate::ViewMode::Copy } else { crate::ViewMode::HardLink },
            }))
        })
    }

    /// Every retained generation of the dataset, oldest first.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn history(&self, dataset: &str) -> Result<Vec<Generation>> {
        self.poison.contain("reading history", || {
            let generations = open_ro(&self.txn, GENERATIONS)?;
            let generation_prefix = prefix(&[dataset]);
            let mut out = Vec::new();
            scan::<GenerationRecord>(
                &generations,
                GENERATIONS,
                &generation_prefix,
                &prefix_end(&generation_prefix),
                |generation_key, record| {
                    let number = schema::trailing_u64(generation_key)
                        .filter(|_| generation_key.len() == generation_prefix.len() + 8)
                        .ok_or_else(|| tables::corrupted(GENERATIONS, generation_key, "malformed generation key"))?;
                    out.push(generation_from(dataset, number, record));
                    Ok(true)
                },
            )?;
            Ok(out)
        })
    }

    /// A declared run with its tasks.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn run(&self, dataset: &str, run: &str) -> Result<Option<RunInfo>> {
        self.poison.contain("reading run", || {
            let runs = open_ro(&self.txn, RUNS)?;
            let Some(record) = get::<RunRecord>(&runs, RUNS, &key(&[dataset, run]))? else {
                return Ok(None);
            };
            let tasks = open_ro(&self.txn, TASKS)?;
            let task_prefix = prefix(&[dataset, run]);
            let mut specs = Vec::new();
            scan::<TaskRecord>(&tasks, TASKS, &task_prefix, &prefix_end(&task_prefix), |task_key, task| {
                let partition =
                    schema::text_after(task_key, &task_prefix).ok_or_else(|| tables::corrupted(TASKS, task_key, "malformed task key"))?;
                specs.push(TaskSpec {
                    partition: partition.to_owned(),
                    expected_rows: task.expected_rows,
                    expected_total: task.expected_total,
                });
                Ok(true)
            })?;
            Ok(Some(RunInfo {
                dataset: dataset.to_owned(),
                run: run.to_owned(),
                snapshot: record.snapshot,
                declared_at_ms: record.declared_at_ms,
                published_generation: record.published_generation,
                tasks: specs,
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
        self.poison.contain("reading runs", || self.runs_of(dataset))
    }

    fn runs_of(&self, dataset: &str) -> Result<Vec<RunSummary>> {
        let runs = open_ro(&self.txn, RUNS)?;
        let accepted = open_ro(&self.txn, ACCEPTED)?;
        let run_prefix = prefix(&[dataset]);
        let mut out = Vec::new();
        scan::<RunRecord>(&runs, RUNS, &run_prefix, &prefix_end(&run_prefix), |run_key, record| {
            let run = schema::text_after(run_key, &run_prefix).ok_or_else(|| tables::corrupted(RUNS, run_key, "malformed run key"))?;
            let task_prefix = prefix(&[dataset, run]);
            let mut accepted_tasks = 0u64;
            scan::<AcceptedRecord>(&accepted, ACCEPTED, &task_prefix, &prefix_end(&task_prefix), |_, _| {
                accepted_tasks += 1;
                Ok(true)
            })?;
            out.push(RunSummary {
                dataset: dataset.to_owned(),
                run: run.to_owned(),
                snapshot: record.snapshot,
                declared_at_ms: record.declared_at_ms,
                published_generation: record.published_generation,
                tasks: record.task_count,
                accepted_tasks,
            });
            Ok(true)
        })?;
        Ok(out)
    }

    /// Whether the dataset is known to the store: it declared a run or has a generation.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn has_dataset(&self, dataset: &str) -> Result<bool> {
        self.poison.contain("reading datasets", || {
            let dataset_prefix = prefix(&[dataset]);
            let end = prefix_end(&dataset_prefix);
            if first_key(&open_ro(&self.txn, RUNS)?, RUNS, &dataset_prefix, &end)?.is_some() {
                return Ok(true);
            }
            Ok(read_pointer(&open_ro(&self.txn, POINTERS)?, dataset)?.is_some())
        })
    }

    /// The attempt lease recorded in the store (ms): how long an unfinished attempt may go
    /// without a heartbeat before it may be recorded abandoned. Writers only ever raise it.
    ///
    /// # Errors
    /// Storage and corruption errors (including a store without its format record).
    pub fn attempt_lifetime_max_ms(&self) -> Result<u64> {
        self.poison.contain("reading the attempt lease", || {
            let meta = open_ro(&self.txn, META)?;
            get::<MetaRecord>(&meta, META, META_FORMAT_KEY)?
                .map(|record| record.attempt_lifetime_max_ms)
                .ok_or_else(|| tables::corrupted(META, META_FORMAT_KEY, "the store has no format record"))
        })
    }

    /// One attempt.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn attempt(&self, attempt: &AttemptKey) -> Result<Option<AttemptInfo>> {
        self.poison.contain("reading attempt", || {
            let attempts = open_ro(&self.txn, ATTEMPTS)?;
            let task = &attempt.task;
            let record: Option<AttemptRecord> =
                get(&attempts, ATTEMPTS, &key_u32(&[&task.dataset, &task.run, &task.partition], attempt.attempt))?;
            Ok(record.map(|r| attempt_info(attempt.clone(), r)))
        })
    }

    /// Every attempt of a task, in attempt order.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn attempts(&self, task: &TaskKey) -> Result<Vec<AttemptInfo>> {
        self.poison.contain("reading attempts", || {
            let attempts = open_ro(&self.txn, ATTEMPTS)?;
            let attempt_prefix = prefix(&[&task.dataset, &task.run, &task.partition]);
            let mut out = Vec::new();
            scan::<AttemptRecord>(&attempts, ATTEMPTS, &attempt_prefix, &prefix_end(&attempt_prefix), |attempt_key, record| {
                let number =
                    schema::trailing_u32(attempt_key).ok_or_else(|| tables::corrupted(ATTEMPTS, attempt_key, "malformed attempt key"))?;
                out.push(attempt_info(task.attempt(number), record));
                Ok(true)
            })?;
            Ok(out)
        })
    }

    /// The task's accepted attempt: its lowest-numbered valid one (frozen once the run is
    /// published).
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn accepted(&self, task: &TaskKey) -> Result<Option<u32>> {
        self.poison.contain("reading accepted", || {
            let accepted = open_ro(&self.txn, ACCEPTED)?;
            Ok(get::<AcceptedRecord>(&accepted, ACCEPTED, &key(&[&task.dataset, &task.run, &task.partition]))?.map(|r| r.attempt))
        })
    }

    /// Every side effect recorded for a run, in key order.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn effects(&self, dataset: &str, run: &str) -> Result<Vec<Effect>> {
        self.poison.contain("reading effects", || self.effects_in(&prefix(&[dataset, run]), |_| true))
    }

    /// Every side effect of the dataset that is ready to emit (its run is published, it is not
    /// yet marked emitted), in key order.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn ready_effects(&self, dataset: &str) -> Result<Vec<Effect>> {
        self.poison.contain("reading ready effects", || {
            self.effects_in(&prefix(&[dataset]), |status| matches!(status, EffectStatus::Ready { .. }))
        })
    }

    /// Every side effect recorded for the dataset, across its runs, in key order.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn dataset_effects(&self, dataset: &str) -> Result<Vec<Effect>> {
        self.poison.contain("reading dataset effects", || self.effects_in(&prefix(&[dataset]), |_| true))
    }

    /// How many entries each table of the store holds, as `(table name, entries)` in schema
    /// order (table names carry their version, e.g. `runs_v1`). For operators' statistics.
    ///
    /// # Errors
    /// Storage errors.
    pub fn table_entries(&self) -> Result<Vec<(&'static str, u64)>> {
        self.poison.contain("reading table entries", || {
            ALL_TABLES
                .iter()
                .map(|def| {
                    let table = open_ro(&self.txn, *def)?;
                    let entries = table.len().map_err(|e| Error::storage("counting a table's entries", e))?;
                    Ok((def.name, entries))
                })
                .collect()
        })
    }

    fn effects_in(&self, effect_prefix: &[u8], keep: impl Fn(&EffectStatus) -> bool) -> Result<Vec<Effect>> {
        let effects = open_ro(&self.txn, EFFECTS)?;
        let mut out = Vec::new();
        scan::<EffectRecord>(&effects, EFFECTS, effect_prefix, &prefix_end(effect_prefix), |effect_key, record| {
            if keep(&record.status) {
                let key =
                    schema::parse_effect_key(effect_key).ok_or_else(|| tables::corrupted(EFFECTS, effect_key, "malformed effect key"))?;
                out.push(effect_from(key, record));
            }
            Ok(true)
        })?;
        Ok(out)
    }
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

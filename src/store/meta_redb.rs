//! [`MetaRead`] and [`Meta`] for redb: [`RedbMeta`] over one write transaction, [`RedbRead`]
//! over one read transaction, their tables opened once each, on first use.
//!
//! Keys are `schema.rs`'s composite byte keys; every read goes through `tables` (decode,
//! check, and the neighbour checks that make a damaged key read as damage), every write
//! through `tables::put` (counted, so a grouped body that wrote and then refused is caught).
//! The reads are written once ([`MetaRead`] for every [`RawTables`]), over either kind of
//! table. Under redb's single writer, the pointer a transaction read is the pointer it moves,
//! so [`Meta::move_pointer`]'s compare uses the value this transaction read (reading it only if
//! it did not).

use redb::{ReadOnlyTable, ReadTransaction, ReadableTable, ReadableTableMetadata, Table, WriteTransaction};

use super::tables::{self, Readable, first_key, get, last_at_or_before, put, scan};
use crate::error::{Error, Result};
use crate::meta::{Meta, MetaRead, note_write};
use crate::model::{AttemptKey, EffectKey, PartitionEntry, TaskKey};
use crate::records::{
    AcceptedRecord, AttemptRecord, CleanupBatchRecord, CleanupPlanRecord, DigestRecord, EffectRecord, GenerationRecord, LazyBeginsRecord,
    MetaRecord, PartitionVersionRecord, PointerRecord, RunRecord, TaskRecord, ViewTreesRecord, ViewsRecord,
};
use crate::schema::{
    self, ACCEPTED, ALL_TABLES, ATTEMPTS, CLEANUP_BATCHES, CLEANUP_PLANS, DIGESTS, Def, EFFECTS, GENERATIONS, META, META_FORMAT_KEY,
    META_LAZY_BEGINS_KEY, META_VIEW_TREES_KEY, META_VIEWS_KEY, POINTERS, RUNS, TASKS, VERSIONS, key, key_u32, key_u64, prefix, prefix_end,
};

type RawTable<'t> = Table<'t, &'static [u8], &'static [u8]>;
type RawReadTable = ReadOnlyTable<&'static [u8], &'static [u8]>;

/// The position of a table in `ALL_TABLES`.
fn table_index(def: Def) -> usize {
    // A constant of this crate: every `Def` is one of `ALL_TABLES`.
    ALL_TABLES.iter().position(|d| d.name == def.name).unwrap_or_else(|| unreachable!("table {} is in ALL_TABLES", def.name))
}

/// The tables of one redb transaction, each opened once: what the reads of [`MetaRead`] are
/// written over.
pub(crate) trait RawTables {
    /// A table as this transaction opens it.
    type Table: Readable + ReadableTableMetadata;
    /// The table, opened on first use.
    fn table(&mut self, def: Def) -> Result<&Self::Table>;
    /// Called with every pointer read (0 for none), for [`Meta::move_pointer`]'s compare.
    fn pointer_read(&mut self, _dataset: &str, _generation: u64) {}
}

/// The operations' view of one redb write transaction.
pub(crate) struct RedbMeta<'t> {
    txn: &'t WriteTransaction,
    /// The tables opened so far, in `ALL_TABLES` order; closed when this is dropped, before
    /// the transaction commits.
    tables: [Option<RawTable<'t>>; ALL_TABLES.len()],
    /// The last pointer this transaction read or moved: (dataset, generation, 0 for none).
    pointer_seen: Option<(String, u64)>,
}

impl<'t> RedbMeta<'t> {
    pub(crate) fn new(txn: &'t WriteTransaction) -> RedbMeta<'t> {
        RedbMeta { txn, tables: std::array::from_fn(|_| None), pointer_seen: None }
    }

    fn table_mut(&mut self, def: Def) -> Result<&mut RawTable<'t>> {
        let txn = self.txn;
        let slot = &mut self.tables[table_index(def)];
        let table = match slot.take() {
            Some(table) => table,
            None => txn.open_table(tables::definition(def)).map_err(|e| Error::storage("opening a table", e))?,
        };
        Ok(slot.insert(table))
    }

    /// The runs begun in without a flush (`store::lazy`), if a writer recorded any.
    pub(crate) fn lazy_begins(&mut self) -> Result<Option<LazyBeginsRecord>> {
        get(self.table(META)?, META, META_LAZY_BEGINS_KEY)
    }

    /// Records the runs begun in without a flush.
    pub(crate) fn put_lazy_begins(&mut self, record: &LazyBeginsRecord) -> Result<()> {
        put(self.table_mut(META)?, META_LAZY_BEGINS_KEY, record)
    }

    /// Removes the record of runs begun in without a flush.
    pub(crate) fn remove_lazy_begins(&mut self) -> Result<()> {
        self.remove(META, META_LAZY_BEGINS_KEY, "removing the record of lazy begins")
    }

    /// Removes the record under `raw` from `def` (a counted write).
    fn remove(&mut self, def: Def, raw: &[u8], context: &'static str) -> Result<()> {
        note_write();
        self.table_mut(def)?.remove(raw).map_err(|e| Error::storage(context, e))?;
        Ok(())
    }
}

impl<'t> RawTables for RedbMeta<'t> {
    type Table = RawTable<'t>;

    fn table(&mut self, def: Def) -> Result<&RawTable<'t>> {
        self.table_mut(def).map(|t| &*t)
    }

    fn pointer_read(&mut self, dataset: &str, generation: u64) {
        self.pointer_seen = Some((dataset.to_owned(), generation));
    }
}

/// The readers' view of one redb read transaction (a `Snapshot`'s, for one of its reads).
pub(crate) struct RedbRead<'t> {
    txn: &'t ReadTransaction,
    /// The tables opened so far, in `ALL_TABLES` order.
    tables: [Option<RawReadTable>; ALL_TABLES.len()],
}

impl<'t> RedbRead<'t> {
    pub(crate) fn new(txn: &'t ReadTransaction) -> RedbRead<'t> {
        RedbRead { txn, tables: std::array::from_fn(|_| None) }
    }
}

impl RawTables for RedbRead<'_> {
    type Table = RawReadTable;

    fn table(&mut self, def: Def) -> Result<&RawReadTable> {
        let txn = self.txn;
        let slot = &mut self.tables[table_index(def)];
        let table = match slot.take() {
            Some(table) => table,
            None => txn.open_table(tables::definition(def)).map_err(|e| Error::storage("opening a table for reading", e))?,
        };
        Ok(slot.insert(table))
    }
}

fn task_key(task: &TaskKey) -> Vec<u8> {
    key(&[&task.dataset, &task.run, &task.partition])
}

/// The `attempts_v1` key of an attempt.
pub(crate) fn attempt_key(attempt: &AttemptKey) -> Vec<u8> {
    let task = &attempt.task;
    key_u32(&[&task.dataset, &task.run, &task.partition], attempt.attempt)
}

/// The `effects_v1` key of an effect.
pub(crate) fn effect_key(effect: &EffectKey) -> Vec<u8> {
    key(&[&effect.dataset, &effect.run, &effect.effect, effect.partition.as_deref().unwrap_or("")])
}

fn plan_key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

fn batch_key(plan: u64, batch: u32) -> Vec<u8> {
    let mut out = plan.to_be_bytes().to_vec();
    out.extend_from_slice(&batch.to_be_bytes());
    out
}

/// The version of `partition` visible in generation `generation`: the entry with the largest
/// generation number not above it. One reverse range lookup.
fn partition_at(versions: &impl Readable, dataset: &str, partition: &str, generation: u64) -> Result<Option<PartitionEntry>> {
    let start = key_u64(&[dataset, partition], 0);
    let end = key_u64(&[dataset, partition], generation);
    match last_at_or_before::<PartitionVersionRecord>(versions, VERSIONS, &start, &end)? {
        None => Ok(None),
        Some((version_key, record)) => {
            let since =
                schema::trailing_u64(&version_key).ok_or_else(|| tables::corrupted(VERSIONS, &version_key, "malformed version key"))?;
            Ok(record.into_entry(partition, since))
        }
    }
}

/// Every partition visible in generation `generation`, in key order.
///
/// A skip scan: for each distinct partition one seek to its newest version at or below
/// `generation`, then one seek past all its versions. The cost is O(P log n) for P partitions,
/// whatever the number of older versions.
fn partitions_at(versions: &impl Readable, dataset: &str, generation: u64) -> Result<Vec<PartitionEntry>> {
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

/// Visits the stored generations of a dataset with their records, oldest first.
fn each_generation(generations: &impl Readable, dataset: &str, mut visit: impl FnMut(u64, GenerationRecord)) -> Result<()> {
    let generation_prefix = prefix(&[dataset]);
    scan::<GenerationRecord>(generations, GENERATIONS, &generation_prefix, &prefix_end(&generation_prefix), |k, record| {
        let number = schema::trailing_u64(k)
            .filter(|_| k.len() == generation_prefix.len() + 8)
            .ok_or_else(|| tables::corrupted(GENERATIONS, k, "malformed generation key"))?;
        visit(number, record);
        Ok(true)
    })
}

/// Every effect whose key starts with `effect_prefix`, in key order.
fn effects_in(effects: &impl Readable, effect_prefix: &[u8]) -> Result<Vec<(EffectKey, EffectRecord)>> {
    let mut out = Vec::new();
    scan::<EffectRecord>(effects, EFFECTS, effect_prefix, &prefix_end(effect_prefix), |raw, record| {
        let key = schema::parse_effect_key(raw).ok_or_else(|| tables::corrupted(EFFECTS, raw, "malformed effect key"))?;
        out.push((key, record));
        Ok(true)
    })?;
    Ok(out)
}

impl<X: RawTables> MetaRead for X {
    fn now_ms(&mut self) -> u64 {
        super::now_ms()
    }

    fn store_format(&mut self) -> Result<Option<MetaRecord>> {
        get(self.table(META)?, META, META_FORMAT_KEY)
    }

    fn views_config(&mut self) -> Result<Option<ViewsRecord>> {
        get(self.table(META)?, META, META_VIEWS_KEY)
    }

    fn view_trees(&mut self) -> Result<Option<ViewTreesRecord>> {
        get(self.table(META)?, META, META_VIEW_TREES_KEY)
    }

    fn run(&mut self, dataset: &str, run: &str) -> Result<Option<RunRecord>> {
        get(self.table(RUNS)?, RUNS, &key(&[dataset, run]))
    }

    fn dataset_runs(&mut self, dataset: &str) -> Result<Vec<(String, RunRecord)>> {
        let run_prefix = prefix(&[dataset]);
        let mut out = Vec::new();
        scan::<RunRecord>(self.table(RUNS)?, RUNS, &run_prefix, &prefix_end(&run_prefix), |raw, record| {
            let run = schema::text_after(raw, &run_prefix).ok_or_else(|| tables::corrupted(RUNS, raw, "malformed run key"))?;
            out.push((run.to_owned(), record));
            Ok(true)
        })?;
        Ok(out)
    }

    fn has_runs(&mut self, dataset: &str) -> Result<bool> {
        let dataset_prefix = prefix(&[dataset]);
        Ok(first_key(self.table(RUNS)?, RUNS, &dataset_prefix, &prefix_end(&dataset_prefix))?.is_some())
    }

    fn task(&mut self, task: &TaskKey) -> Result<Option<TaskRecord>> {
        get(self.table(TASKS)?, TASKS, &task_key(task))
    }

    fn run_tasks(&mut self, dataset: &str, run: &str) -> Result<Vec<(String, TaskRecord)>> {
        let task_prefix = prefix(&[dataset, run]);
        let mut out = Vec::new();
        scan::<TaskRecord>(self.table(TASKS)?, TASKS, &task_prefix, &prefix_end(&task_prefix), |raw, task| {
            let partition = schema::text_after(raw, &task_prefix).ok_or_else(|| tables::corrupted(TASKS, raw, "malformed task key"))?;
            out.push((partition.to_owned(), task));
            Ok(true)
        })?;
        Ok(out)
    }

    fn attempt(&mut self, attempt: &AttemptKey) -> Result<Option<AttemptRecord>> {
        get(self.table(ATTEMPTS)?, ATTEMPTS, &attempt_key(attempt))
    }

    fn attempt_exists(&mut self, attempt: &AttemptKey) -> Result<bool> {
        let raw = attempt_key(attempt);
        Ok(self.table(ATTEMPTS)?.get(raw.as_slice()).map_err(|e| Error::storage("reading an attempt", e))?.is_some())
    }

    fn attempts_where(&mut self, keep: &mut dyn FnMut(&AttemptRecord) -> bool) -> Result<Vec<(AttemptKey, AttemptRecord)>> {
        let mut out = Vec::new();
        scan::<AttemptRecord>(self.table(ATTEMPTS)?, ATTEMPTS, &[], &[0xff], |raw, record| {
            if keep(&record) {
                let attempt = schema::parse_attempt_key(raw).ok_or_else(|| tables::corrupted(ATTEMPTS, raw, "malformed attempt key"))?;
                out.push((attempt, record));
            }
            Ok(true)
        })?;
        Ok(out)
    }

    fn each_attempt(&mut self, visit: &mut dyn FnMut(AttemptKey, AttemptRecord) -> Result<()>) -> Result<()> {
        scan::<AttemptRecord>(self.table(ATTEMPTS)?, ATTEMPTS, &[], &[0xff], |raw, record| {
            let attempt = schema::parse_attempt_key(raw).ok_or_else(|| tables::corrupted(ATTEMPTS, raw, "malformed attempt key"))?;
            visit(attempt, record)?;
            Ok(true)
        })
    }

    fn task_attempts(&mut self, task: &TaskKey) -> Result<Vec<(u32, AttemptRecord)>> {
        let attempt_prefix = prefix(&[&task.dataset, &task.run, &task.partition]);
        let mut out = Vec::new();
        scan::<AttemptRecord>(self.table(ATTEMPTS)?, ATTEMPTS, &attempt_prefix, &prefix_end(&attempt_prefix), |raw, record| {
            let number = schema::trailing_u32(raw).ok_or_else(|| tables::corrupted(ATTEMPTS, raw, "malformed attempt key"))?;
            out.push((number, record));
            Ok(true)
        })?;
        Ok(out)
    }

    fn accepted(&mut self, task: &TaskKey) -> Result<Option<u32>> {
        Ok(get::<AcceptedRecord>(self.table(ACCEPTED)?, ACCEPTED, &task_key(task))?.map(|r| r.attempt))
    }

    fn accepted_count(&mut self, dataset: &str, run: &str) -> Result<u64> {
        let task_prefix = prefix(&[dataset, run]);
        let mut count = 0u64;
        scan::<AcceptedRecord>(self.table(ACCEPTED)?, ACCEPTED, &task_prefix, &prefix_end(&task_prefix), |_, _| {
            count += 1;
            Ok(true)
        })?;
        Ok(count)
    }

    fn digest(&mut self, dataset: &str, snapshot: &str, partition: &str) -> Result<Option<DigestRecord>> {
        get(self.table(DIGESTS)?, DIGESTS, &key(&[dataset, snapshot, partition]))
    }

    fn effect(&mut self, effect: &EffectKey) -> Result<Option<EffectRecord>> {
        get(self.table(EFFECTS)?, EFFECTS, &effect_key(effect))
    }

    fn run_effects(&mut self, dataset: &str, run: &str) -> Result<Vec<(EffectKey, EffectRecord)>> {
        effects_in(self.table(EFFECTS)?, &prefix(&[dataset, run]))
    }

    fn dataset_effects(&mut self, dataset: &str) -> Result<Vec<(EffectKey, EffectRecord)>> {
        effects_in(self.table(EFFECTS)?, &prefix(&[dataset]))
    }

    fn pointer(&mut self, dataset: &str) -> Result<Option<u64>> {
        let found = get::<PointerRecord>(self.table(POINTERS)?, POINTERS, &key(&[dataset]))?.map(|p| p.generation);
        self.pointer_read(dataset, found.unwrap_or(0));
        Ok(found)
    }

    fn datasets(&mut self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        scan::<PointerRecord>(self.table(POINTERS)?, POINTERS, &[], &[0xff], |raw, _| {
            out.push(schema::text_after(raw, &[]).ok_or_else(|| tables::corrupted(POINTERS, raw, "malformed dataset key"))?.to_owned());
            Ok(true)
        })?;
        Ok(out)
    }

    fn generation(&mut self, dataset: &str, number: u64) -> Result<Option<GenerationRecord>> {
        get(self.table(GENERATIONS)?, GENERATIONS, &key_u64(&[dataset], number))
    }

    fn oldest_generation(&mut self, dataset: &str) -> Result<Option<u64>> {
        let generation_prefix = prefix(&[dataset]);
        Ok(first_key(self.table(GENERATIONS)?, GENERATIONS, &generation_prefix, &prefix_end(&generation_prefix))?
            .and_then(|k| schema::trailing_u64(&k)))
    }

    fn generation_times(&mut self, dataset: &str) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        each_generation(self.table(GENERATIONS)?, dataset, |number, record| out.push((number, record.published_at_ms)))?;
        Ok(out)
    }

    fn generations(&mut self, dataset: &str) -> Result<Vec<(u64, GenerationRecord)>> {
        let mut out = Vec::new();
        each_generation(self.table(GENERATIONS)?, dataset, |number, record| out.push((number, record)))?;
        Ok(out)
    }

    fn version(&mut self, dataset: &str, partition: &str, generation: u64) -> Result<Option<PartitionVersionRecord>> {
        get(self.table(VERSIONS)?, VERSIONS, &key_u64(&[dataset, partition], generation))
    }

    fn partition_at(&mut self, dataset: &str, partition: &str, generation: u64) -> Result<Option<PartitionEntry>> {
        partition_at(self.table(VERSIONS)?, dataset, partition, generation)
    }

    fn partitions_at(&mut self, dataset: &str, generation: u64) -> Result<Vec<PartitionEntry>> {
        partitions_at(self.table(VERSIONS)?, dataset, generation)
    }

    fn partition_versions(&mut self, dataset: &str, partition: &str, since: u64) -> Result<Vec<(u64, PartitionVersionRecord)>> {
        let partition_prefix = prefix(&[dataset, partition]);
        let mut out = Vec::new();
        scan::<PartitionVersionRecord>(
            self.table(VERSIONS)?,
            VERSIONS,
            &key_u64(&[dataset, partition], since),
            &prefix_end(&partition_prefix),
            |raw, record| {
                let generation = schema::trailing_u64(raw)
                    .filter(|_| raw.len() == partition_prefix.len() + 8)
                    .ok_or_else(|| tables::corrupted(VERSIONS, raw, "malformed version key"))?;
                out.push((generation, record));
                Ok(true)
            },
        )?;
        Ok(out)
    }

    fn version_keys(&mut self, dataset: &str) -> Result<Vec<(String, u64, bool)>> {
        let dataset_prefix = prefix(&[dataset]);
        let mut out: Vec<(String, u64, bool)> = Vec::new();
        scan::<PartitionVersionRecord>(self.table(VERSIONS)?, VERSIONS, &dataset_prefix, &prefix_end(&dataset_prefix), |raw, record| {
            let (partition, generation) = schema::split_text_u64(&raw[dataset_prefix.len()..])
                .ok_or_else(|| tables::corrupted(VERSIONS, raw, "malformed version key"))?;
            // Keys sort by partition: reuse the last partition's name when it repeats.
            let partition = match out.last() {
                Some((last, _, _)) if last == partition => last.clone(),
                _ => partition.to_owned(),
            };
            out.push((partition, generation, record.entry.is_none()));
            Ok(true)
        })?;
        Ok(out)
    }

    fn held_dirs(&mut self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        scan::<PartitionVersionRecord>(self.table(VERSIONS)?, VERSIONS, &[], &[0xff], |_, record| {
            if let Some(entry) = record.entry {
                out.push(entry.staging_rel);
            }
            Ok(true)
        })?;
        Ok(out)
    }

    fn cleanup_plan(&mut self, id: u64) -> Result<Option<CleanupPlanRecord>> {
        get(self.table(CLEANUP_PLANS)?, CLEANUP_PLANS, &plan_key(id))
    }

    fn last_cleanup_plan(&mut self) -> Result<Option<u64>> {
        let plans = self.table(CLEANUP_PLANS)?;
        let last = plans.last().map_err(|e| Error::storage("reading the last cleanup plan", e))?.map(|(k, _)| k.value().to_vec());
        match last {
            None => Ok(None),
            Some(k) => {
                let raw: [u8; 8] = k.as_slice().try_into().map_err(|_| tables::corrupted(CLEANUP_PLANS, &k, "malformed plan key"))?;
                Ok(Some(u64::from_be_bytes(raw)))
            }
        }
    }

    fn last_cleanup_batch(&mut self, plan: u64) -> Result<Option<u32>> {
        let batches = self.table(CLEANUP_BATCHES)?;
        let mut range = batches
            .range::<&[u8]>(&batch_key(plan, 0)[..]..=&batch_key(plan, u32::MAX)[..])
            .map_err(|e| Error::storage("reading cleanup batches", e))?;
        match range.next_back() {
            None => Ok(None),
            Some(item) => {
                let (k, _) = item.map_err(|e| Error::storage("reading cleanup batches", e))?;
                let n = schema::trailing_u32(k.value()).ok_or_else(|| tables::corrupted(CLEANUP_BATCHES, k.value(), "malformed key"))?;
                Ok(Some(n))
            }
        }
    }

    fn table_entries(&mut self) -> Result<Vec<(&'static str, u64)>> {
        ALL_TABLES
            .iter()
            .map(|def| {
                let entries = self.table(*def)?.len().map_err(|e| Error::storage("counting a table's entries", e))?;
                Ok((def.name, entries))
            })
            .collect()
    }

    fn each_frame(&mut self, def: Def, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        let read = |e: redb::StorageError| Error::storage("reading a table's records", e);
        for item in self.table(def)?.iter().map_err(read)? {
            let (key, value) = item.map_err(read)?;
            visit(key.value(), value.value());
        }
        Ok(())
    }
}

impl Meta for RedbMeta<'_> {
    fn lock(&mut self, _scope: crate::meta::Scope<'_>) -> Result<()> {
        // redb's single writer: no other write transaction runs while this one does.
        Ok(())
    }

    fn put_store_format(&mut self, record: &MetaRecord) -> Result<()> {
        put(self.table_mut(META)?, META_FORMAT_KEY, record)
    }

    fn put_views_config(&mut self, record: &ViewsRecord) -> Result<()> {
        put(self.table_mut(META)?, META_VIEWS_KEY, record)
    }

    fn put_view_trees(&mut self, record: &ViewTreesRecord) -> Result<()> {
        put(self.table_mut(META)?, META_VIEW_TREES_KEY, record)
    }

    fn put_run(&mut self, dataset: &str, run: &str, record: &RunRecord) -> Result<()> {
        put(self.table_mut(RUNS)?, &key(&[dataset, run]), record)
    }

    fn put_task(&mut self, task: &TaskKey, record: &TaskRecord) -> Result<()> {
        put(self.table_mut(TASKS)?, &task_key(task), record)
    }

    fn put_attempt(&mut self, attempt: &AttemptKey, record: &AttemptRecord) -> Result<()> {
        put(self.table_mut(ATTEMPTS)?, &attempt_key(attempt), record)
    }

    fn put_accepted(&mut self, task: &TaskKey, attempt: u32) -> Result<()> {
        put(self.table_mut(ACCEPTED)?, &task_key(task), &AcceptedRecord { attempt })
    }

    fn remove_accepted(&mut self, task: &TaskKey) -> Result<()> {
        self.remove(ACCEPTED, &task_key(task), "removing an accepted attempt")
    }

    fn put_digest(&mut self, dataset: &str, snapshot: &str, partition: &str, record: &DigestRecord) -> Result<()> {
        put(self.table_mut(DIGESTS)?, &key(&[dataset, snapshot, partition]), record)
    }

    fn put_effect(&mut self, effect: &EffectKey, record: &EffectRecord) -> Result<()> {
        put(self.table_mut(EFFECTS)?, &effect_key(effect), record)
    }

    fn update_run_effects(&mut self, dataset: &str, run: &str, update: &mut dyn FnMut(EffectRecord) -> Option<EffectRecord>) -> Result<()> {
        let effect_prefix = prefix(&[dataset, run]);
        let mut updates = Vec::new();
        scan::<EffectRecord>(self.table_mut(EFFECTS)?, EFFECTS, &effect_prefix, &prefix_end(&effect_prefix), |raw, record| {
            if let Some(new) = update(record) {
                updates.push((raw.to_vec(), new));
            }
            Ok(true)
        })?;
        let effects = self.table_mut(EFFECTS)?;
        for (raw, record) in updates {
            put(effects, &raw, &record)?;
        }
        Ok(())
    }

    fn put_version(&mut self, dataset: &str, partition: &str, generation: u64, record: &PartitionVersionRecord) -> Result<()> {
        put(self.table_mut(VERSIONS)?, &key_u64(&[dataset, partition], generation), record)
    }

    fn put_generation(&mut self, dataset: &str, number: u64, record: &GenerationRecord) -> Result<()> {
        put(self.table_mut(GENERATIONS)?, &key_u64(&[dataset], number), record)
    }

    fn move_pointer(&mut self, dataset: &str, from: u64, to: u64) -> Result<()> {
        let pointer_key = key(&[dataset]);
        let current = match &self.pointer_seen {
            Some((seen, generation)) if seen == dataset => *generation,
            _ => self.pointer(dataset)?.unwrap_or(0),
        };
        // The pointer only moves forward, from the generation this transaction built on.
        if to <= from || current != from {
            return Err(tables::corrupted(POINTERS, &pointer_key, format!("pointer at {current} cannot move from {from} to {to}")));
        }
        put(self.table_mut(POINTERS)?, &pointer_key, &PointerRecord { generation: to })?;
        self.pointer_seen = Some((dataset.to_owned(), to));
        Ok(())
    }

    fn remove_version(&mut self, dataset: &str, partition: &str, generation: u64) -> Result<()> {
        self.remove(VERSIONS, &key_u64(&[dataset, partition], generation), "removing a version entry")
    }

    fn remove_generation(&mut self, dataset: &str, number: u64) -> Result<()> {
        self.remove(GENERATIONS, &key_u64(&[dataset], number), "removing a generation")
    }

    fn remove_attempt(&mut self, attempt: &AttemptKey) -> Result<()> {
        self.remove(ATTEMPTS, &attempt_key(attempt), "removing an attempt record")
    }

    fn put_cleanup_plan(&mut self, id: u64, record: &CleanupPlanRecord) -> Result<()> {
        put(self.table_mut(CLEANUP_PLANS)?, &plan_key(id), record)
    }

    fn remove_cleanup_plans_before(&mut self, first_kept: u64) -> Result<()> {
        note_write();
        let end = plan_key(first_kept);
        self.table_mut(CLEANUP_PLANS)?
            .retain_in::<&[u8], _>(..&end[..], |_, _| false)
            .map_err(|e| Error::storage("pruning old plans", e))?;
        self.table_mut(CLEANUP_BATCHES)?
            .retain_in::<&[u8], _>(..&end[..], |_, _| false)
            .map_err(|e| Error::storage("pruning old plan batches", e))?;
        Ok(())
    }

    fn put_cleanup_batch(&mut self, plan: u64, batch: u32, record: &CleanupBatchRecord) -> Result<()> {
        put(self.table_mut(CLEANUP_BATCHES)?, &batch_key(plan, batch), record)
    }
}

//! [`Meta`] for redb: one write transaction, its tables opened once each, on first use.
//!
//! Keys are `schema.rs`'s composite byte keys; every read goes through `tables` (decode,
//! check, and the neighbour checks that make a damaged key read as damage), every write
//! through `tables::put` (counted, so a grouped body that wrote and then refused is caught).
//! Under redb's single writer, the pointer a transaction read is the pointer it moves, so
//! [`Meta::move_pointer`]'s compare uses the value this transaction read (reading it only if
//! it did not).

use redb::{Table, WriteTransaction};

use super::tables::{self, first_key, get, put, scan};
use crate::error::{Error, Result};
use crate::meta::Meta;
use crate::model::{AttemptKey, EffectKey, PartitionEntry, TaskKey};
use crate::records::{
    AcceptedRecord, AttemptRecord, DigestRecord, EffectRecord, GenerationRecord, PartitionVersionRecord, PointerRecord, RunRecord,
    TaskRecord,
};
use crate::schema::{
    self, ACCEPTED, ALL_TABLES, ATTEMPTS, DIGESTS, Def, EFFECTS, GENERATIONS, POINTERS, RUNS, TASKS, VERSIONS, key, key_u32, key_u64,
    prefix, prefix_end,
};

type RawTable<'t> = Table<'t, &'static [u8], &'static [u8]>;

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

    fn table(&mut self, def: Def) -> Result<&mut RawTable<'t>> {
        // A constant of this crate: every `Def` is one of `ALL_TABLES`.
        let index =
            ALL_TABLES.iter().position(|d| d.name == def.name).unwrap_or_else(|| unreachable!("table {} is in ALL_TABLES", def.name));
        let txn = self.txn;
        let slot = &mut self.tables[index];
        let table = match slot.take() {
            Some(table) => table,
            None => txn.open_table(def.def()).map_err(|e| Error::storage("opening a table", e))?,
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

impl Meta for RedbMeta<'_> {
    fn run(&mut self, dataset: &str, run: &str) -> Result<Option<RunRecord>> {
        get(self.table(RUNS)?, RUNS, &key(&[dataset, run]))
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
        use redb::ReadableTable;
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

    fn digest(&mut self, dataset: &str, snapshot: &str, partition: &str) -> Result<Option<DigestRecord>> {
        get(self.table(DIGESTS)?, DIGESTS, &key(&[dataset, snapshot, partition]))
    }

    fn effect(&mut self, effect: &EffectKey) -> Result<Option<EffectRecord>> {
        get(self.table(EFFECTS)?, EFFECTS, &effect_key(effect))
    }

    fn pointer(&mut self, dataset: &str) -> Result<Option<u64>> {
        let found = get::<PointerRecord>(self.table(POINTERS)?, POINTERS, &key(&[dataset]))?.map(|p| p.generation);
        self.pointer_seen = Some((dataset.to_owned(), found.unwrap_or(0)));
        Ok(found)
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
        super::read::generation_list(self.table(GENERATIONS)?, dataset)
    }

    fn version(&mut self, dataset: &str, partition: &str, generation: u64) -> Result<Option<PartitionVersionRecord>> {
        get(self.table(VERSIONS)?, VERSIONS, &key_u64(&[dataset, partition], generation))
    }

    fn partitions_at(&mut self, dataset: &str, generation: u64) -> Result<Vec<PartitionEntry>> {
        super::read::partitions_at(self.table(VERSIONS)?, dataset, generation)
    }

    fn put_run(&mut self, dataset: &str, run: &str, record: &RunRecord) -> Result<()> {
        put(self.table(RUNS)?, &key(&[dataset, run]), record)
    }

    fn put_task(&mut self, task: &TaskKey, record: &TaskRecord) -> Result<()> {
        put(self.table(TASKS)?, &task_key(task), record)
    }

    fn put_attempt(&mut self, attempt: &AttemptKey, record: &AttemptRecord) -> Result<()> {
        put(self.table(ATTEMPTS)?, &attempt_key(attempt), record)
    }

    fn put_accepted(&mut self, task: &TaskKey, attempt: u32) -> Result<()> {
        put(self.table(ACCEPTED)?, &task_key(task), &AcceptedRecord { attempt })
    }

    fn remove_accepted(&mut self, task: &TaskKey) -> Result<()> {
        let raw = task_key(task);
        self.table(ACCEPTED)?.remove(raw.as_slice()).map_err(|e| Error::storage("removing an accepted attempt", e))?;
        Ok(())
    }

    fn put_digest(&mut self, dataset: &str, snapshot: &str, partition: &str, record: &DigestRecord) -> Result<()> {
        put(self.table(DIGESTS)?, &key(&[dataset, snapshot, partition]), record)
    }

    fn put_effect(&mut self, effect: &EffectKey, record: &EffectRecord) -> Result<()> {
        put(self.table(EFFECTS)?, &effect_key(effect), record)
    }

    fn update_run_effects(&mut self, dataset: &str, run: &str, update: &mut dyn FnMut(EffectRecord) -> Option<EffectRecord>) -> Result<()> {
        let effect_prefix = prefix(&[dataset, run]);
        let mut updates = Vec::new();
        scan::<EffectRecord>(self.table(EFFECTS)?, EFFECTS, &effect_prefix, &prefix_end(&effect_prefix), |raw, record| {
            if let Some(new) = update(record) {
                updates.push((raw.to_vec(), new));
            }
            Ok(true)
        })?;
        let effects = self.table(EFFECTS)?;
        for (raw, record) in updates {
            put(effects, &raw, &record)?;
        }
        Ok(())
    }

    fn put_version(&mut self, dataset: &str, partition: &str, generation: u64, record: &PartitionVersionRecord) -> Result<()> {
        put(self.table(VERSIONS)?, &key_u64(&[dataset, partition], generation), record)
    }

    fn put_generation(&mut self, dataset: &str, number: u64, record: &GenerationRecord) -> Result<()> {
        put(self.table(GENERATIONS)?, &key_u64(&[dataset], number), record)
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
        put(self.table(POINTERS)?, &pointer_key, &PointerRecord { generation: to })?;
        self.pointer_seen = Some((dataset.to_owned(), to));
        Ok(())
    }
}

//! [`Meta`] for PostgreSQL: the reads and writes of one operation inside one SERIALIZABLE
//! transaction of one connection (the runner in `mod.rs` opens and ends it).
//!
//! Every statement is sent with its parameter types (`query_typed`): one round trip, no
//! prepared statement to keep per connection. Every value read goes through
//! `records::decode` (frame, checksum over table and key, the record's own checks), so a
//! damaged value is `Error::Corrupted` naming table and key, never absence. A failing
//! statement records how the runner should go on ([`Retry`]) before its error is returned.
//!
//! Two reads do more than read, on purpose:
//! - [`Meta::task`] locks the task's row (`FOR UPDATE`): a begin makes the attempt's directory
//!   between its read of the task's next number and its write, so a second begin of the same
//!   task must wait for the first to end and then fail to serialize (and run again on a fresh
//!   snapshot) rather than make the directory of a number the first one handed out.
//! - [`Meta::move_pointer`] is a compare-and-swap in the write itself, so it needs no read.

use postgres::Client;
use postgres::types::{ToSql, Type};

use super::error::{Retry, retry_of};
use crate::error::{Error, Result, StorageErrorKind};
use crate::meta::Meta;
use crate::model::{AttemptKey, EffectKey, PartitionEntry, TaskKey};
use crate::records::{
    AcceptedRecord, AttemptRecord, Checked, DigestRecord, EffectRecord, GenerationRecord, PartitionVersionRecord, PointerRecord, RunRecord,
    TaskRecord,
};
use crate::schema::{
    self, ACCEPTED, ATTEMPTS, DIGESTS, Def, EFFECTS, GENERATIONS, POINTERS, RUNS, TASKS, VERSIONS, key, key_u32, key_u64, prefix,
    prefix_end,
};

/// The operations' view of one PostgreSQL transaction.
pub(crate) struct PgMeta<'c> {
    client: &'c mut Client,
    /// How the runner goes on after the first statement that failed (`None`: none failed).
    pub(super) fault: Option<Retry>,
    /// Records written so far (a body that wrote and then refused is a bug; see `mod.rs`).
    pub(super) writes: u64,
}

fn task_key(task: &TaskKey) -> Vec<u8> {
    key(&[&task.dataset, &task.run, &task.partition])
}

fn attempt_key(attempt: &AttemptKey) -> Vec<u8> {
    let task = &attempt.task;
    key_u32(&[&task.dataset, &task.run, &task.partition], attempt.attempt)
}

fn effect_key(effect: &EffectKey) -> Vec<u8> {
    key(&[&effect.dataset, &effect.run, &effect.effect, effect.partition.as_deref().unwrap_or("")])
}

fn corrupted(def: Def, key: &[u8], message: impl Into<String>) -> Error {
    crate::ops::corrupted(def, key, message)
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

impl<'c> PgMeta<'c> {
    /// A view of the transaction `client` is in.
    pub(crate) fn new(client: &'c mut Client) -> PgMeta<'c> {
        PgMeta { client, fault: None, writes: 0 }
    }

    /// Runs one statement, recording how the runner goes on if it fails.
    fn query(&mut self, context: &'static str, sql: &str, params: &[(&(dyn ToSql + Sync), Type)]) -> Result<Vec<postgres::Row>> {
        match self.client.query_typed(sql, params) {
            Ok(rows) => Ok(rows),
            Err(e) => {
                self.fault.get_or_insert(retry_of(&e));
                Err(Error::postgres(context, &e))
            }
        }
    }

    /// Runs one statement that returns no rows; the number of rows it changed.
    fn execute(&mut self, context: &'static str, sql: &str, params: &[(&(dyn ToSql + Sync), Type)]) -> Result<u64> {
        match self.client.execute_typed(sql, params) {
            Ok(changed) => Ok(changed),
            Err(e) => {
                self.fault.get_or_insert(retry_of(&e));
                Err(Error::postgres(context, &e))
            }
        }
    }

    fn column<'r, T: postgres::types::FromSql<'r>>(&mut self, row: &'r postgres::Row, index: usize) -> Result<T> {
        row.try_get(index).map_err(|e| {
            self.fault.get_or_insert(Retry::No);
            Error::postgres("reading a column", &e)
        })
    }

    /// One record.
    pub(crate) fn get<R: Checked>(&mut self, def: Def, key: &[u8]) -> Result<Option<R>> {
        self.get_locked(def, key, "")
    }

    fn get_locked<R: Checked>(&mut self, def: Def, key: &[u8], lock: &str) -> Result<Option<R>> {
        let sql = format!("SELECT value FROM manifestdb.{} WHERE key = $1{lock}", def.name);
        let rows = self.query("reading a record", &sql, &[(&key, Type::BYTEA)])?;
        match rows.first() {
            None => Ok(None),
            Some(row) => {
                let value: &[u8] = self.column(row, 0)?;
                crate::records::decode(def.name, key, value).map(Some)
            }
        }
    }

    /// Every `(key, record)` whose key lies in `[start, end)`, in key order.
    pub(crate) fn range<R: Checked>(&mut self, def: Def, start: &[u8], end: &[u8]) -> Result<Vec<(Vec<u8>, R)>> {
        let sql = format!("SELECT key, value FROM manifestdb.{} WHERE key >= $1 AND key < $2 ORDER BY key", def.name);
        let rows = self.query("scanning a table", &sql, &[(&start, Type::BYTEA), (&end, Type::BYTEA)])?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let found: Vec<u8> = self.column(row, 0)?;
            let value: &[u8] = self.column(row, 1)?;
            let record = crate::records::decode(def.name, &found, value)?;
            out.push((found, record));
        }
        Ok(out)
    }

    /// Stores one record (inserted or replaced).
    pub(crate) fn put<R: Checked>(&mut self, def: Def, key: &[u8], record: &R) -> Result<()> {
        debug_assert_eq!(def, R::TABLE, "writing a record to another table than its own");
        // A record that fails its own check must never be stored: that is a bug here, and the
        // check on the way out would report it as corruption later.
        debug_assert!(record.check().is_ok(), "writing an inconsistent record");
        self.writes += 1;
        let value = crate::codec::encode(def.name, key, record);
        let sql = format!(
            "INSERT INTO manifestdb.{} (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            def.name
        );
        self.execute("writing a record", &sql, &[(&key, Type::BYTEA), (&value, Type::BYTEA)])?;
        Ok(())
    }

    /// Removes one record (nothing if it is absent).
    pub(crate) fn remove(&mut self, def: Def, key: &[u8]) -> Result<()> {
        self.writes += 1;
        let sql = format!("DELETE FROM manifestdb.{} WHERE key = $1", def.name);
        self.execute("removing a record", &sql, &[(&key, Type::BYTEA)])?;
        Ok(())
    }
}

/// A generation number as PostgreSQL's bigint. Generation numbers count publishes from 1;
/// one above `i64::MAX` is damage, never a number the store handed out.
fn as_bigint(def: Def, key: &[u8], number: u64) -> Result<i64> {
    i64::try_from(number).map_err(|_| corrupted(def, key, format!("generation number {number} is out of range")))
}

impl Meta for PgMeta<'_> {
    fn run(&mut self, dataset: &str, run: &str) -> Result<Option<RunRecord>> {
        self.get(RUNS, &key(&[dataset, run]))
    }

    fn task(&mut self, task: &TaskKey) -> Result<Option<TaskRecord>> {
        // Locked: see the module's documentation (a begin's directory).
        self.get_locked(TASKS, &task_key(task), " FOR UPDATE")
    }

    fn run_tasks(&mut self, dataset: &str, run: &str) -> Result<Vec<(String, TaskRecord)>> {
        let task_prefix = prefix(&[dataset, run]);
        let mut out = Vec::new();
        for (raw, task) in self.range::<TaskRecord>(TASKS, &task_prefix, &prefix_end(&task_prefix))? {
            let partition = schema::text_after(&raw, &task_prefix).ok_or_else(|| corrupted(TASKS, &raw, "malformed task key"))?;
            out.push((partition.to_owned(), task));
        }
        Ok(out)
    }

    fn attempt(&mut self, attempt: &AttemptKey) -> Result<Option<AttemptRecord>> {
        self.get(ATTEMPTS, &attempt_key(attempt))
    }

    fn attempt_exists(&mut self, attempt: &AttemptKey) -> Result<bool> {
        let raw = attempt_key(attempt);
        let rows = self.query("reading an attempt", "SELECT 1 FROM manifestdb.attempts_v1 WHERE key = $1", &[(&raw, Type::BYTEA)])?;
        Ok(!rows.is_empty())
    }

    fn attempts_where(&mut self, keep: &mut dyn FnMut(&AttemptRecord) -> bool) -> Result<Vec<(AttemptKey, AttemptRecord)>> {
        let context = "scanning the attempts";
        let rows = match self
            .client
            .query_typed_raw::<&(dyn postgres::types::ToSql + Sync), _>("SELECT key, value FROM manifestdb.attempts_v1 ORDER BY key", [])
        {
            Ok(rows) => rows,
            Err(e) => {
                self.fault.get_or_insert(retry_of(&e));
                return Err(Error::postgres(context, &e));
            }
        };
        let mut out = Vec::new();
        let mut failed = None;
        let mut rows = rows;
        loop {
            let row = match postgres::fallible_iterator::FallibleIterator::next(&mut rows) {
                Ok(Some(row)) => row,
                Ok(None) => break,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            let (raw, value): (Vec<u8>, Vec<u8>) = match (row.try_get(0), row.try_get(1)) {
                (Ok(raw), Ok(value)) => (raw, value),
                (Err(e), _) | (_, Err(e)) => {
                    failed = Some(e);
                    break;
                }
            };
            let record: AttemptRecord = crate::records::decode(ATTEMPTS.name, &raw, &value)?;
            if keep(&record) {
                let attempt = schema::parse_attempt_key(&raw).ok_or_else(|| corrupted(ATTEMPTS, &raw, "malformed attempt key"))?;
                out.push((attempt, record));
            }
        }
        if let Some(e) = failed {
            self.fault.get_or_insert(retry_of(&e));
            return Err(Error::postgres(context, &e));
        }
        Ok(out)
    }

    fn task_attempts(&mut self, task: &TaskKey) -> Result<Vec<(u32, AttemptRecord)>> {
        let attempt_prefix = prefix(&[&task.dataset, &task.run, &task.partition]);
        let mut out = Vec::new();
        for (raw, record) in self.range::<AttemptRecord>(ATTEMPTS, &attempt_prefix, &prefix_end(&attempt_prefix))? {
            let number = schema::trailing_u32(&raw)
                .filter(|_| raw.len() == attempt_prefix.len() + 4)
                .ok_or_else(|| corrupted(ATTEMPTS, &raw, "malformed attempt key"))?;
            out.push((number, record));
        }
        Ok(out)
    }

    fn accepted(&mut self, task: &TaskKey) -> Result<Option<u32>> {
        Ok(self.get::<AcceptedRecord>(ACCEPTED, &task_key(task))?.map(|r| r.attempt))
    }

    fn digest(&mut self, dataset: &str, snapshot: &str, partition: &str) -> Result<Option<DigestRecord>> {
        self.get(DIGESTS, &key(&[dataset, snapshot, partition]))
    }

    fn effect(&mut self, effect: &EffectKey) -> Result<Option<EffectRecord>> {
        self.get(EFFECTS, &effect_key(effect))
    }

    fn pointer(&mut self, dataset: &str) -> Result<Option<u64>> {
        let raw = key(&[dataset]);
        let rows =
            self.query("reading a pointer", "SELECT generation, value FROM manifestdb.pointers_v1 WHERE key = $1", &[(&raw, Type::BYTEA)])?;
        let Some(row) = rows.first() else { return Ok(None) };
        let column: i64 = self.column(row, 0)?;
        let value: &[u8] = self.column(row, 1)?;
        let record: PointerRecord = crate::records::decode(POINTERS.name, &raw, value)?;
        // The column is what the compare-and-swap compares; the frame is what the checksum
        // guards. They are written together and must agree.
        if u64::try_from(column).ok() != Some(record.generation) {
            return Err(corrupted(POINTERS, &raw, format!("pointer column {column} disagrees with its record {}", record.generation)));
        }
        Ok(Some(record.generation))
    }

    fn generation(&mut self, dataset: &str, number: u64) -> Result<Option<GenerationRecord>> {
        self.get(GENERATIONS, &key_u64(&[dataset], number))
    }

    fn oldest_generation(&mut self, dataset: &str) -> Result<Option<u64>> {
        let generation_prefix = prefix(&[dataset]);
        let end = prefix_end(&generation_prefix);
        let rows = self.query(
            "reading the oldest generation",
            "SELECT key, value FROM manifestdb.generations_v1 WHERE key >= $1 AND key < $2 ORDER BY key LIMIT 1",
            &[(&generation_prefix, Type::BYTEA), (&end, Type::BYTEA)],
        )?;
        let Some(row) = rows.first() else { return Ok(None) };
        let found: Vec<u8> = self.column(row, 0)?;
        let value: &[u8] = self.column(row, 1)?;
        crate::codec::check_frame(GENERATIONS.name, &found, value)?;
        schema::trailing_u64(&found)
            .filter(|_| found.len() == generation_prefix.len() + 8)
            .map(Some)
            .ok_or_else(|| corrupted(GENERATIONS, &found, "malformed generation key"))
    }

    fn generation_times(&mut self, dataset: &str) -> Result<Vec<(u64, u64)>> {
        let generation_prefix = prefix(&[dataset]);
        let mut out = Vec::new();
        for (raw, record) in self.range::<GenerationRecord>(GENERATIONS, &generation_prefix, &prefix_end(&generation_prefix))? {
            let number = schema::trailing_u64(&raw)
                .filter(|_| raw.len() == generation_prefix.len() + 8)
                .ok_or_else(|| corrupted(GENERATIONS, &raw, "malformed generation key"))?;
            out.push((number, record.published_at_ms));
        }
        Ok(out)
    }

    fn version(&mut self, dataset: &str, partition: &str, generation: u64) -> Result<Option<PartitionVersionRecord>> {
        self.get(VERSIONS, &key_u64(&[dataset, partition], generation))
    }

    fn partitions_at(&mut self, dataset: &str, generation: u64) -> Result<Vec<PartitionEntry>> {
        partitions_at(self, dataset, generation)
    }

    fn put_run(&mut self, dataset: &str, run: &str, record: &RunRecord) -> Result<()> {
        self.put(RUNS, &key(&[dataset, run]), record)
    }

    fn put_task(&mut self, task: &TaskKey, record: &TaskRecord) -> Result<()> {
        self.put(TASKS, &task_key(task), record)
    }

    fn put_attempt(&mut self, attempt: &AttemptKey, record: &AttemptRecord) -> Result<()> {
        self.put(ATTEMPTS, &attempt_key(attempt), record)
    }

    fn put_accepted(&mut self, task: &TaskKey, attempt: u32) -> Result<()> {
        self.put(ACCEPTED, &task_key(task), &AcceptedRecord { attempt })
    }

    fn remove_accepted(&mut self, task: &TaskKey) -> Result<()> {
        self.remove(ACCEPTED, &task_key(task))
    }

    fn put_digest(&mut self, dataset: &str, snapshot: &str, partition: &str, record: &DigestRecord) -> Result<()> {
        self.put(DIGESTS, &key(&[dataset, snapshot, partition]), record)
    }

    fn put_effect(&mut self, effect: &EffectKey, record: &EffectRecord) -> Result<()> {
        self.put(EFFECTS, &effect_key(effect), record)
    }

    fn update_run_effects(&mut self, dataset: &str, run: &str, update: &mut dyn FnMut(EffectRecord) -> Option<EffectRecord>) -> Result<()> {
        let effect_prefix = prefix(&[dataset, run]);
        for (raw, record) in self.range::<EffectRecord>(EFFECTS, &effect_prefix, &prefix_end(&effect_prefix))? {
            if let Some(new) = update(record) {
                self.put(EFFECTS, &raw, &new)?;
            }
        }
        Ok(())
    }

    fn put_version(&mut self, dataset: &str, partition: &str, generation: u64, record: &PartitionVersionRecord) -> Result<()> {
        self.put(VERSIONS, &key_u64(&[dataset, partition], generation), record)
    }

    fn put_generation(&mut self, dataset: &str, number: u64, record: &GenerationRecord) -> Result<()> {
        self.put(GENERATIONS, &key_u64(&[dataset], number), record)
    }

    fn move_pointer(&mut self, dataset: &str, from: u64, to: u64) -> Result<()> {
        let raw = key(&[dataset]);
        if to <= from {
            return Err(corrupted(POINTERS, &raw, format!("pointer cannot move backwards from {from} to {to}")));
        }
        let to_column = as_bigint(POINTERS, &raw, to)?;
        let value = crate::codec::encode(POINTERS.name, &raw, &PointerRecord { generation: to });
        self.writes += 1;
        // The compare is in the write: the row changes only if it still names `from` (or, for
        // a dataset's first generation, only if there is no row yet).
        let changed = if from == 0 {
            self.execute(
                "moving a pointer",
                "INSERT INTO manifestdb.pointers_v1 (key, generation, value) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING",
                &[(&raw, Type::BYTEA), (&to_column, Type::INT8), (&value, Type::BYTEA)],
            )?
        } else {
            let from_column = as_bigint(POINTERS, &raw, from)?;
            self.execute(
                "moving a pointer",
                "UPDATE manifestdb.pointers_v1 SET generation = $2, value = $3 WHERE key = $1 AND generation = $4",
                &[(&raw, Type::BYTEA), (&to_column, Type::INT8), (&value, Type::BYTEA), (&from_column, Type::INT8)],
            )?
        };
        if changed != 1 {
            // Another transaction moved it first (SERIALIZABLE reports most such races as a
            // serialization failure before this point): nothing of this one commits, and the
            // operation runs again on a snapshot that sees the new pointer.
            self.fault.get_or_insert(Retry::Rerun);
            return Err(Error::postgres_layer(
                "moving a pointer",
                StorageErrorKind::Conflict,
                format!("the pointer of dataset {dataset:?} no longer names generation {from}: another publish moved it first"),
            ));
        }
        Ok(())
    }
}

/// Every partition generation `generation` of the dataset holds, in partition order: a skip
/// scan in one statement. The recursive part finds each distinct partition's first version key
/// (one index seek per partition, jumping past the rest of its versions); the lateral part
/// takes, per partition, its newest version at or below `generation` (one backward seek). So
/// O(P log n) for P partitions whatever the history's length, as on redb.
fn partitions_at(meta: &mut PgMeta<'_>, dataset: &str, generation: u64) -> Result<Vec<PartitionEntry>> {
    let dataset_prefix = prefix(&[dataset]);
    let dataset_end = prefix_end(&dataset_prefix);
    let number = as_bigint(VERSIONS, &dataset_prefix, generation)?;
    // A version key is `dataset \0 partition \0 <8 bytes>`: without its last 8 bytes it is the
    // partition's prefix; with its last 9 replaced by 0x01 it is the end of that prefix.
    let sql = "WITH RECURSIVE parts(k) AS (
            (SELECT key FROM manifestdb.partition_versions_v1 WHERE key >= $1 AND key < $2 ORDER BY key LIMIT 1)
            UNION ALL
            SELECT (SELECT v.key FROM manifestdb.partition_versions_v1 v
                    WHERE v.key >= substring(parts.k FROM 1 FOR length(parts.k) - 9) || '\\x01'::bytea AND v.key < $2
                    ORDER BY v.key LIMIT 1)
            FROM parts WHERE parts.k IS NOT NULL AND length(parts.k) > 9
        )
        SELECT parts.k, found.key, found.value FROM parts
        LEFT JOIN LATERAL (
            SELECT v.key, v.value FROM manifestdb.partition_versions_v1 v
            WHERE length(parts.k) > 9
              AND v.key >= substring(parts.k FROM 1 FOR length(parts.k) - 8)
              AND v.key <= substring(parts.k FROM 1 FOR length(parts.k) - 8) || int8send($3)
            ORDER BY v.key DESC LIMIT 1
        ) found ON true
        WHERE parts.k IS NOT NULL
        ORDER BY parts.k";
    let rows = meta.query(
        "reading a generation's partitions",
        sql,
        &[(&dataset_prefix, Type::BYTEA), (&dataset_end, Type::BYTEA), (&number, Type::INT8)],
    )?;
    let mut out = Vec::new();
    for row in &rows {
        let first: Vec<u8> = meta.column(row, 0)?;
        let (partition, _) = first
            .strip_prefix(dataset_prefix.as_slice())
            .and_then(schema::split_text_u64)
            .ok_or_else(|| corrupted(VERSIONS, &first, "malformed version key"))?;
        let found: Option<Vec<u8>> = meta.column(row, 1)?;
        let Some(found) = found else { continue };
        let value: &[u8] = meta.column(row, 2)?;
        let record: PartitionVersionRecord = crate::records::decode(VERSIONS.name, &found, value)?;
        let (found_partition, since) = found
            .strip_prefix(dataset_prefix.as_slice())
            .and_then(schema::split_text_u64)
            .ok_or_else(|| corrupted(VERSIONS, &found, "malformed version key"))?;
        if found_partition != partition || since > generation {
            return Err(corrupted(VERSIONS, &found, format!("version found for partition {partition:?} is not one of its own")));
        }
        if let Some(entry) = entry_from(partition, since, record) {
            out.push(entry);
        }
    }
    Ok(out)
}

#[cfg(test)]
impl PgMeta<'_> {
    /// The backend process serving this transaction, for tests that end it.
    pub(crate) fn backend_pid(&mut self) -> Result<i32> {
        let rows = self.query("reading the backend", "SELECT pg_backend_pid()", &[])?;
        let row = rows.first().ok_or_else(|| Error::postgres_layer("reading the backend", StorageErrorKind::Other, "no row"))?;
        self.column(row, 0)
    }
}

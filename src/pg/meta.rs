//! [`MetaRead`] and [`Meta`] for PostgreSQL: the reads and writes of one operation inside one
//! transaction of one connection (the runner in `mod.rs` opens and ends it): a READ COMMITTED
//! read-write one under two-phase locking for an operation, a REPEATABLE READ read-only one for
//! a snapshot.
//!
//! Every statement is sent with its parameter types (`query_typed`): one round trip, no
//! prepared statement to keep per connection. Every value read goes through
//! `records::decode` (frame, checksum over table and key, the record's own checks), so a
//! damaged value, or a value stored under another key, is `Error::Corrupted` naming table and
//! key, never absence. A failing statement records how the runner should go on ([`Retry`])
//! before its error is returned.
//!
//! In a read-write transaction every read and write first makes the advisory locks held cover
//! it (`locks.rs`: the node of the tree it touches, and how), taking what is missing before
//! its statement runs; [`Meta::lock`] takes an operation's declared scope in one statement.
//! So a second begin of one task waits for the first to end and then reads its next number
//! (a begin makes the attempt's directory between its read of that number and its write), and
//! a verdict waits for a publish of its run, or the publish for it.
//!
//! [`Meta::move_pointer`] is still a compare-and-swap in the write itself
//! (`UPDATE ... WHERE generation = $from`, or an insert that must not find a row): the locks
//! already order two moves of one pointer, and the compare is the check that they did.

use tokio_postgres::types::{ToSql, Type};

use super::conn::{Conn, PgError};
use super::error::{Retry, retry_of};
use super::locks::{Access, Held, Mode, Node};
use crate::error::{Error, Result, StorageErrorKind};
use crate::meta::{Meta, MetaRead, Scope, note_write};
use crate::model::{AttemptKey, EffectKey, PartitionEntry, TaskKey};
use crate::records::{
    AcceptedRecord, AttemptRecord, Checked, CleanupBatchRecord, CleanupPlanRecord, DigestRecord, EffectRecord, GenerationRecord,
    MetaRecord, PartitionVersionRecord, PointerRecord, RunRecord, TaskRecord, ViewTreesRecord, ViewsRecord,
};
use crate::schema::{
    self, ACCEPTED, ALL_TABLES, ATTEMPTS, CLEANUP_BATCHES, CLEANUP_PLANS, DIGESTS, Def, EFFECTS, GENERATIONS, META, META_FORMAT_KEY,
    META_VIEW_TREES_KEY, META_VIEWS_KEY, POINTERS, RUNS, TASKS, VERSIONS, key, key_u32, key_u64, prefix, prefix_end,
};

type Params<'a> = &'a [(&'a (dyn ToSql + Sync), Type)];

#[cfg(test)]
thread_local! {
    /// Locks this thread's read-write transactions took outside their declared scope, for
    /// the tests that check an operation declares what it touches.
    pub(crate) static UNDECLARED_LOCKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The operations' (and a snapshot's) view of one PostgreSQL transaction.
pub(crate) struct PgMeta<'c> {
    conn: &'c mut Conn,
    /// A read-write transaction (locks the rows it reads to write them; see the module doc).
    writable: bool,
    /// How the runner goes on after the first statement that failed (`None`: none failed).
    pub(super) fault: Option<Retry>,
    /// Records written so far (a body that wrote and then refused is a bug; see `mod.rs`).
    pub(super) writes: u64,
    /// The transaction's clock reading: the server's `now()`, in milliseconds since the epoch.
    now_ms: u64,
    /// The advisory locks this read-write transaction holds (`locks.rs`).
    held: Held,
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

fn plan_key(id: u64) -> Vec<u8> {
    id.to_be_bytes().to_vec()
}

fn batch_key(plan: u64, batch: u32) -> Vec<u8> {
    let mut out = plan.to_be_bytes().to_vec();
    out.extend_from_slice(&batch.to_be_bytes());
    out
}

fn corrupted(def: Def, key: &[u8], message: impl Into<String>) -> Error {
    crate::ops::corrupted(def, key, message)
}

/// A generation number as PostgreSQL's bigint. Generation numbers count publishes from 1;
/// one above `i64::MAX` is damage, never a number the store handed out.
fn as_bigint(def: Def, key: &[u8], number: u64) -> Result<i64> {
    i64::try_from(number).map_err(|_| corrupted(def, key, format!("generation number {number} is out of range")))
}

impl<'c> PgMeta<'c> {
    /// A view of the read-write transaction `conn` is in, which began at the server's time
    /// `now_ms`.
    pub(crate) fn new(conn: &'c mut Conn, now_ms: u64) -> PgMeta<'c> {
        PgMeta { conn, writable: true, fault: None, writes: 0, now_ms, held: Held::default() }
    }

    /// A view of the read-only transaction `conn` is in, which began at the server's time
    /// `now_ms`.
    pub(crate) fn read_only(conn: &'c mut Conn, now_ms: u64) -> PgMeta<'c> {
        PgMeta { conn, writable: false, fault: None, writes: 0, now_ms, held: Held::default() }
    }

    fn failed(&mut self, context: &'static str, e: &PgError) -> Error {
        self.fault.get_or_insert(retry_of(e));
        Error::postgres(context, e)
    }

    /// In a read-write transaction, makes the locks held cover `access` to `node` before the
    /// statement that makes it runs (`locks.rs`): takes what is missing, in one statement.
    fn need(&mut self, node: impl FnOnce() -> Node, access: Access) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        let node = node();
        let missing = self.held.missing(&node, access);
        if missing.is_empty() {
            return Ok(());
        }
        #[cfg(test)]
        UNDECLARED_LOCKS.with(|n| n.set(n.get() + 1));
        tracing::debug!(?node, ?access, "an access outside the operation's declared scope: locking it");
        self.take(&missing)
    }

    /// Takes `locks` in order, in one statement, and records them as held.
    fn take(&mut self, locks: &[(Node, Mode)]) -> Result<()> {
        if locks.is_empty() {
            return Ok(());
        }
        let keys: Vec<i64> = locks.iter().map(|(node, _)| node.lock_key()).collect();
        let params: Vec<(&(dyn ToSql + Sync), Type)> = keys.iter().map(|k| (k as &(dyn ToSql + Sync), Type::INT8)).collect();
        self.execute("locking what the operation reads and writes", &super::locks::statement(locks), &params)?;
        self.held.record(locks);
        Ok(())
    }

    /// Runs one statement, recording how the runner goes on if it fails.
    fn query(&mut self, context: &'static str, sql: &str, params: Params<'_>) -> Result<Vec<tokio_postgres::Row>> {
        match self.conn.query(sql, params) {
            Ok(rows) => Ok(rows),
            Err(e) => Err(self.failed(context, &e)),
        }
    }

    /// Runs one statement that returns no rows; the number of rows it changed.
    fn execute(&mut self, context: &'static str, sql: &str, params: Params<'_>) -> Result<u64> {
        match self.conn.execute(sql, params) {
            Ok(changed) => Ok(changed),
            Err(e) => Err(self.failed(context, &e)),
        }
    }

    fn column<'r, T: tokio_postgres::types::FromSql<'r>>(&mut self, row: &'r tokio_postgres::Row, index: usize) -> Result<T> {
        row.try_get(index).map_err(|e| {
            self.fault.get_or_insert(Retry::No);
            Error::postgres("reading a column", &PgError::Client(e))
        })
    }

    /// One record.
    fn get<R: Checked>(&mut self, def: Def, key: &[u8]) -> Result<Option<R>> {
        let sql = format!("SELECT value FROM manifestdb.{} WHERE key = $1", def.name);
        let rows = self.query("reading a record", &sql, &[(&key, Type::BYTEA)])?;
        match rows.first() {
            None => Ok(None),
            Some(row) => {
                let value: &[u8] = self.column(row, 0)?;
                crate::records::decode(def.name, key, value).map(Some)
            }
        }
    }

    /// Visits every `(key, record)` whose key lies in `[start, end)` (to the end of the table
    /// for `end = None`), in key order, streaming the rows.
    fn scan<R: Checked>(
        &mut self,
        def: Def,
        start: &[u8],
        end: Option<&[u8]>,
        mut visit: impl FnMut(&[u8], R) -> Result<()>,
    ) -> Result<()> {
        let context = "scanning a table";
        let (sql, params): (String, Vec<&(dyn ToSql + Sync)>) = match &end {
            Some(end) => (
                format!("SELECT key, value FROM manifestdb.{} WHERE key >= $1::bytea AND key < $2::bytea ORDER BY key", def.name),
                vec![&start, end],
            ),
            None => (format!("SELECT key, value FROM manifestdb.{} WHERE key >= $1::bytea ORDER BY key", def.name), vec![&start]),
        };
        let typed: Vec<(&(dyn ToSql + Sync), Type)> = params.into_iter().map(|p| (p, Type::BYTEA)).collect();
        let mut result = Ok(());
        let mut column_error = None;
        let scanned = self.conn.scan(&sql, typed, |row| {
            let (raw, value): (&[u8], &[u8]) = match (row.try_get(0), row.try_get(1)) {
                (Ok(raw), Ok(value)) => (raw, value),
                (Err(e), _) | (_, Err(e)) => {
                    column_error = Some(e);
                    return false;
                }
            };
            match crate::records::decode::<R>(def.name, raw, value).and_then(|record| visit(raw, record)) {
                Ok(()) => true,
                Err(err) => {
                    result = Err(err);
                    false
                }
            }
        });
        if let Err(e) = scanned {
            return Err(self.failed(context, &e));
        }
        if let Some(e) = column_error {
            return Err(self.failed(context, &PgError::Client(e)));
        }
        result
    }

    /// Every `(key, record)` whose key lies in `[start, end)`, in key order.
    fn range<R: Checked>(&mut self, def: Def, start: &[u8], end: &[u8]) -> Result<Vec<(Vec<u8>, R)>> {
        let mut out = Vec::new();
        self.scan::<R>(def, start, Some(end), |raw, record| {
            out.push((raw.to_vec(), record));
            Ok(())
        })?;
        Ok(out)
    }

    /// The first (or, `last`, the last) key in `[start, end]` (`end` inclusive) with its frame
    /// checked, and its record if `R` is asked for.
    fn edge<R: Checked>(&mut self, def: Def, start: &[u8], end: &[u8], last: bool) -> Result<Option<(Vec<u8>, R)>> {
        let order = if last { "DESC" } else { "ASC" };
        let sql = format!("SELECT key, value FROM manifestdb.{} WHERE key >= $1 AND key <= $2 ORDER BY key {order} LIMIT 1", def.name);
        let rows = self.query("reading a table's edge", &sql, &[(&start, Type::BYTEA), (&end, Type::BYTEA)])?;
        let Some(row) = rows.first() else { return Ok(None) };
        let found: Vec<u8> = self.column(row, 0)?;
        let value: &[u8] = self.column(row, 1)?;
        let record = crate::records::decode::<R>(def.name, &found, value)?;
        Ok(Some((found, record)))
    }

    /// Stores one record (inserted or replaced).
    fn put<R: Checked>(&mut self, def: Def, key: &[u8], record: &R) -> Result<()> {
        debug_assert_eq!(def, R::TABLE, "writing a record to another table than its own");
        // A record that fails its own check must never be stored: that is a bug here, and the
        // check on the way out would report it as corruption later.
        debug_assert!(record.check().is_ok(), "writing an inconsistent record");
        self.note_write();
        let value = crate::codec::encode(def.name, key, record);
        let sql = format!(
            "INSERT INTO manifestdb.{} (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            def.name
        );
        self.execute("writing a record", &sql, &[(&key, Type::BYTEA), (&value, Type::BYTEA)])?;
        Ok(())
    }

    /// Removes one record (nothing if it is absent).
    fn remove(&mut self, def: Def, key: &[u8]) -> Result<()> {
        self.note_write();
        let sql = format!("DELETE FROM manifestdb.{} WHERE key = $1", def.name);
        self.execute("removing a record", &sql, &[(&key, Type::BYTEA)])?;
        Ok(())
    }

    fn note_write(&mut self) {
        debug_assert!(self.writable, "a write in a read-only transaction");
        self.writes += 1;
        note_write();
    }

    /// Every effect whose key starts with `effect_prefix`, in key order.
    fn effects_in(&mut self, effect_prefix: &[u8]) -> Result<Vec<(EffectKey, EffectRecord)>> {
        let mut out = Vec::new();
        self.scan::<EffectRecord>(EFFECTS, effect_prefix, Some(&prefix_end(effect_prefix)), |raw, record| {
            out.push((schema::parse_effect_key(raw).ok_or_else(|| corrupted(EFFECTS, raw, "malformed effect key"))?, record));
            Ok(())
        })?;
        Ok(out)
    }

    /// Visits the stored generations of a dataset with their records, oldest first.
    fn each_generation(&mut self, dataset: &str, mut visit: impl FnMut(u64, GenerationRecord)) -> Result<()> {
        let generation_prefix = prefix(&[dataset]);
        self.scan::<GenerationRecord>(GENERATIONS, &generation_prefix, Some(&prefix_end(&generation_prefix)), |raw, record| {
            let number = schema::trailing_u64(raw)
                .filter(|_| raw.len() == generation_prefix.len() + 8)
                .ok_or_else(|| corrupted(GENERATIONS, raw, "malformed generation key"))?;
            visit(number, record);
            Ok(())
        })
    }

    /// Visits every attempt, in key order.
    fn attempts(&mut self, mut visit: impl FnMut(AttemptKey, AttemptRecord) -> Result<()>) -> Result<()> {
        self.scan::<AttemptRecord>(ATTEMPTS, &[], None, |raw, record| {
            let attempt = schema::parse_attempt_key(raw).ok_or_else(|| corrupted(ATTEMPTS, raw, "malformed attempt key"))?;
            visit(attempt, record)
        })
    }
}

impl MetaRead for PgMeta<'_> {
    fn now_ms(&mut self) -> u64 {
        self.now_ms
    }

    fn store_format(&mut self) -> Result<Option<MetaRecord>> {
        self.need(|| Node::Store, Access::Read)?;
        self.get(META, META_FORMAT_KEY)
    }

    fn views_config(&mut self) -> Result<Option<ViewsRecord>> {
        self.need(|| Node::Store, Access::Read)?;
        self.get(META, META_VIEWS_KEY)
    }

    fn view_trees(&mut self) -> Result<Option<ViewTreesRecord>> {
        self.need(|| Node::Store, Access::Read)?;
        self.get(META, META_VIEW_TREES_KEY)
    }

    fn run(&mut self, dataset: &str, run: &str) -> Result<Option<RunRecord>> {
        self.need(|| Node::run(dataset, run), Access::Read)?;
        self.get(RUNS, &key(&[dataset, run]))
    }

    fn dataset_runs(&mut self, dataset: &str) -> Result<Vec<(String, RunRecord)>> {
        self.need(|| Node::dataset(dataset), Access::Below)?;
        let run_prefix = prefix(&[dataset]);
        let mut out = Vec::new();
        for (raw, record) in self.range::<RunRecord>(RUNS, &run_prefix, &prefix_end(&run_prefix))? {
            let run = schema::text_after(&raw, &run_prefix).ok_or_else(|| corrupted(RUNS, &raw, "malformed run key"))?;
            out.push((run.to_owned(), record));
        }
        Ok(out)
    }

    fn has_runs(&mut self, dataset: &str) -> Result<bool> {
        self.need(|| Node::dataset(dataset), Access::Below)?;
        let run_prefix = prefix(&[dataset]);
        let end = prefix_end(&run_prefix);
        // The end is exclusive for the prefix: no key of this dataset equals it.
        Ok(self.edge::<RunRecord>(RUNS, &run_prefix, &end, false)?.is_some_and(|(found, _)| found < end))
    }

    fn task(&mut self, task: &TaskKey) -> Result<Option<TaskRecord>> {
        self.need(|| Node::task(task), Access::Read)?;
        self.get(TASKS, &task_key(task))
    }

    fn run_tasks(&mut self, dataset: &str, run: &str) -> Result<Vec<(String, TaskRecord)>> {
        self.need(|| Node::run(dataset, run), Access::Below)?;
        let task_prefix = prefix(&[dataset, run]);
        let mut out = Vec::new();
        for (raw, task) in self.range::<TaskRecord>(TASKS, &task_prefix, &prefix_end(&task_prefix))? {
            let partition = schema::text_after(&raw, &task_prefix).ok_or_else(|| corrupted(TASKS, &raw, "malformed task key"))?;
            out.push((partition.to_owned(), task));
        }
        Ok(out)
    }

    fn attempt(&mut self, attempt: &AttemptKey) -> Result<Option<AttemptRecord>> {
        self.need(|| Node::attempt(attempt), Access::Read)?;
        self.get(ATTEMPTS, &attempt_key(attempt))
    }

    fn attempt_exists(&mut self, attempt: &AttemptKey) -> Result<bool> {
        self.need(|| Node::attempt(attempt), Access::Read)?;
        let raw = attempt_key(attempt);
        let rows = self.query("reading an attempt", "SELECT 1 FROM manifestdb.attempts_v1 WHERE key = $1", &[(&raw, Type::BYTEA)])?;
        Ok(!rows.is_empty())
    }

    fn attempts_where(&mut self, keep: &mut dyn FnMut(&AttemptRecord) -> bool) -> Result<Vec<(AttemptKey, AttemptRecord)>> {
        self.need(|| Node::Store, Access::Below)?;
        let mut out = Vec::new();
        self.attempts(|attempt, record| {
            if keep(&record) {
                out.push((attempt, record));
            }
            Ok(())
        })?;
        Ok(out)
    }

    fn each_attempt(&mut self, visit: &mut dyn FnMut(AttemptKey, AttemptRecord) -> Result<()>) -> Result<()> {
        self.need(|| Node::Store, Access::Below)?;
        self.attempts(visit)
    }

    fn task_attempts(&mut self, task: &TaskKey) -> Result<Vec<(u32, AttemptRecord)>> {
        self.need(|| Node::task(task), Access::Read)?;
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
        self.need(|| Node::task(task), Access::Read)?;
        Ok(self.get::<AcceptedRecord>(ACCEPTED, &task_key(task))?.map(|r| r.attempt))
    }

    fn accepted_count(&mut self, dataset: &str, run: &str) -> Result<u64> {
        self.need(|| Node::run(dataset, run), Access::Below)?;
        let task_prefix = prefix(&[dataset, run]);
        let mut count = 0u64;
        self.scan::<AcceptedRecord>(ACCEPTED, &task_prefix, Some(&prefix_end(&task_prefix)), |_, _| {
            count += 1;
            Ok(())
        })?;
        Ok(count)
    }

    fn digest(&mut self, dataset: &str, snapshot: &str, partition: &str) -> Result<Option<DigestRecord>> {
        self.need(|| Node::head(dataset), Access::Read)?;
        self.get(DIGESTS, &key(&[dataset, snapshot, partition]))
    }

    fn effect(&mut self, effect: &EffectKey) -> Result<Option<EffectRecord>> {
        self.need(|| Node::effect(effect), Access::Read)?;
        self.get(EFFECTS, &effect_key(effect))
    }

    fn run_effects(&mut self, dataset: &str, run: &str) -> Result<Vec<(EffectKey, EffectRecord)>> {
        self.need(|| Node::run(dataset, run), Access::Below)?;
        self.effects_in(&prefix(&[dataset, run]))
    }

    fn dataset_effects(&mut self, dataset: &str) -> Result<Vec<(EffectKey, EffectRecord)>> {
        self.need(|| Node::dataset(dataset), Access::Below)?;
        self.effects_in(&prefix(&[dataset]))
    }

    fn pointer(&mut self, dataset: &str) -> Result<Option<u64>> {
        self.need(|| Node::head(dataset), Access::Read)?;
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

    fn datasets(&mut self) -> Result<Vec<String>> {
        self.need(|| Node::Store, Access::Below)?;
        let mut out = Vec::new();
        self.scan::<PointerRecord>(POINTERS, &[], None, |raw, _| {
            out.push(schema::text_after(raw, &[]).ok_or_else(|| corrupted(POINTERS, raw, "malformed dataset key"))?.to_owned());
            Ok(())
        })?;
        Ok(out)
    }

    fn generation(&mut self, dataset: &str, number: u64) -> Result<Option<GenerationRecord>> {
        self.need(|| Node::head(dataset), Access::Read)?;
        self.get(GENERATIONS, &key_u64(&[dataset], number))
    }

    fn oldest_generation(&mut self, dataset: &str) -> Result<Option<u64>> {
        self.need(|| Node::head(dataset), Access::Read)?;
        let generation_prefix = prefix(&[dataset]);
        let end = prefix_end(&generation_prefix);
        match self.edge::<GenerationRecord>(GENERATIONS, &generation_prefix, &end, false)? {
            Some((found, _)) if found < end => schema::trailing_u64(&found)
                .filter(|_| found.len() == generation_prefix.len() + 8)
                .map(Some)
                .ok_or_else(|| corrupted(GENERATIONS, &found, "malformed generation key")),
            _ => Ok(None),
        }
    }

    fn generation_times(&mut self, dataset: &str) -> Result<Vec<(u64, u64)>> {
        self.need(|| Node::head(dataset), Access::Read)?;
        let mut out = Vec::new();
        self.each_generation(dataset, |number, record| out.push((number, record.published_at_ms)))?;
        Ok(out)
    }

    fn generations(&mut self, dataset: &str) -> Result<Vec<(u64, GenerationRecord)>> {
        self.need(|| Node::head(dataset), Access::Read)?;
        let mut out = Vec::new();
        self.each_generation(dataset, |number, record| out.push((number, record)))?;
        Ok(out)
    }

    fn version(&mut self, dataset: &str, partition: &str, generation: u64) -> Result<Option<PartitionVersionRecord>> {
        self.need(|| Node::head(dataset), Access::Read)?;
        self.get(VERSIONS, &key_u64(&[dataset, partition], generation))
    }

    fn partition_at(&mut self, dataset: &str, partition: &str, generation: u64) -> Result<Option<PartitionEntry>> {
        self.need(|| Node::head(dataset), Access::Read)?;
        let start = key_u64(&[dataset, partition], 0);
        let end = key_u64(&[dataset, partition], generation);
        match self.edge::<PartitionVersionRecord>(VERSIONS, &start, &end, true)? {
            None => Ok(None),
            Some((found, record)) => {
                let since = schema::trailing_u64(&found)
                    .filter(|_| found.len() == start.len())
                    .ok_or_else(|| corrupted(VERSIONS, &found, "malformed version key"))?;
                Ok(record.into_entry(partition, since))
            }
        }
    }

    fn partitions_at(&mut self, dataset: &str, generation: u64) -> Result<Vec<PartitionEntry>> {
        self.need(|| Node::head(dataset), Access::Read)?;
        partitions_at(self, dataset, generation)
    }

    fn partition_versions(&mut self, dataset: &str, partition: &str, since: u64) -> Result<Vec<(u64, PartitionVersionRecord)>> {
        self.need(|| Node::head(dataset), Access::Read)?;
        let partition_prefix = prefix(&[dataset, partition]);
        let mut out = Vec::new();
        for (raw, record) in
            self.range::<PartitionVersionRecord>(VERSIONS, &key_u64(&[dataset, partition], since), &prefix_end(&partition_prefix))?
        {
            let generation = schema::trailing_u64(&raw)
                .filter(|_| raw.len() == partition_prefix.len() + 8)
                .ok_or_else(|| corrupted(VERSIONS, &raw, "malformed version key"))?;
            out.push((generation, record));
        }
        Ok(out)
    }

    fn version_keys(&mut self, dataset: &str) -> Result<Vec<(String, u64, bool)>> {
        self.need(|| Node::head(dataset), Access::Read)?;
        let dataset_prefix = prefix(&[dataset]);
        let mut out: Vec<(String, u64, bool)> = Vec::new();
        self.scan::<PartitionVersionRecord>(VERSIONS, &dataset_prefix, Some(&prefix_end(&dataset_prefix)), |raw, record| {
            let (partition, generation) = raw
                .strip_prefix(dataset_prefix.as_slice())
                .and_then(schema::split_text_u64)
                .ok_or_else(|| corrupted(VERSIONS, raw, "malformed version key"))?;
            // Keys sort by partition: reuse the last partition's name when it repeats.
            let partition = match out.last() {
                Some((last, _, _)) if last == partition => last.clone(),
                _ => partition.to_owned(),
            };
            out.push((partition, generation, record.entry.is_none()));
            Ok(())
        })?;
        Ok(out)
    }

    fn held_dirs(&mut self) -> Result<Vec<String>> {
        self.need(|| Node::Store, Access::Below)?;
        let mut out = Vec::new();
        self.scan::<PartitionVersionRecord>(VERSIONS, &[], None, |_, record| {
            if let Some(entry) = record.entry {
                out.push(entry.staging_rel);
            }
            Ok(())
        })?;
        Ok(out)
    }

    fn cleanup_plan(&mut self, id: u64) -> Result<Option<CleanupPlanRecord>> {
        self.need(|| Node::Store, Access::Read)?;
        self.get(CLEANUP_PLANS, &plan_key(id))
    }

    fn last_cleanup_plan(&mut self) -> Result<Option<u64>> {
        self.need(|| Node::Store, Access::Read)?;
        match self.edge::<CleanupPlanRecord>(CLEANUP_PLANS, &[], &[0xff; 9], true)? {
            None => Ok(None),
            Some((found, _)) => {
                let raw: [u8; 8] = found.as_slice().try_into().map_err(|_| corrupted(CLEANUP_PLANS, &found, "malformed plan key"))?;
                Ok(Some(u64::from_be_bytes(raw)))
            }
        }
    }

    fn last_cleanup_batch(&mut self, plan: u64) -> Result<Option<u32>> {
        self.need(|| Node::Store, Access::Read)?;
        match self.edge::<CleanupBatchRecord>(CLEANUP_BATCHES, &batch_key(plan, 0), &batch_key(plan, u32::MAX), true)? {
            None => Ok(None),
            Some((found, _)) => schema::trailing_u32(&found)
                .filter(|_| found.len() == 12)
                .map(Some)
                .ok_or_else(|| corrupted(CLEANUP_BATCHES, &found, "malformed key")),
        }
    }

    fn table_entries(&mut self) -> Result<Vec<(&'static str, u64)>> {
        self.need(|| Node::Store, Access::Below)?;
        let sql = ALL_TABLES
            .iter()
            .enumerate()
            .map(|(i, def)| format!("SELECT {i}, count(*) FROM manifestdb.{}", def.name))
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        let rows = self.query("counting a table's entries", &sql, &[])?;
        let mut out: Vec<(&'static str, u64)> = ALL_TABLES.iter().map(|def| (def.name, 0)).collect();
        for row in &rows {
            let index: i32 = self.column(row, 0)?;
            let count: i64 = self.column(row, 1)?;
            if let Some(slot) = usize::try_from(index).ok().and_then(|i| out.get_mut(i)) {
                slot.1 = u64::try_from(count).unwrap_or(0);
            }
        }
        Ok(out)
    }

    fn each_frame(&mut self, def: Def, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        self.need(|| Node::Store, Access::Below)?;
        let context = "reading every record of a table";
        let sql = format!("SELECT key, value FROM manifestdb.{} ORDER BY key", def.name);
        let mut column_error = None;
        let scanned = self.conn.scan(&sql, Vec::new(), |row| match (row.try_get::<_, &[u8]>(0), row.try_get::<_, &[u8]>(1)) {
            (Ok(key), Ok(value)) => {
                visit(key, value);
                true
            }
            (Err(e), _) | (_, Err(e)) => {
                column_error = Some(e);
                false
            }
        });
        scanned.map_err(|e| Error::postgres(context, &e))?;
        match column_error {
            Some(e) => Err(Error::postgres(context, &PgError::Client(e))),
            None => Ok(()),
        }
    }
}

impl Meta for PgMeta<'_> {
    fn lock(&mut self, scope: Scope<'_>) -> Result<()> {
        let missing = self.held.missing_for(scope);
        self.take(&missing)
    }

    fn put_store_format(&mut self, record: &MetaRecord) -> Result<()> {
        self.need(|| Node::Store, Access::Write)?;
        self.put(META, META_FORMAT_KEY, record)
    }

    fn put_views_config(&mut self, record: &ViewsRecord) -> Result<()> {
        self.need(|| Node::Store, Access::Write)?;
        self.put(META, META_VIEWS_KEY, record)
    }

    fn put_view_trees(&mut self, record: &ViewTreesRecord) -> Result<()> {
        self.need(|| Node::Store, Access::Write)?;
        self.put(META, META_VIEW_TREES_KEY, record)
    }

    fn put_run(&mut self, dataset: &str, run: &str, record: &RunRecord) -> Result<()> {
        self.need(|| Node::run(dataset, run), Access::Write)?;
        self.put(RUNS, &key(&[dataset, run]), record)
    }

    fn put_task(&mut self, task: &TaskKey, record: &TaskRecord) -> Result<()> {
        self.need(|| Node::task(task), Access::Write)?;
        self.put(TASKS, &task_key(task), record)
    }

    fn put_attempt(&mut self, attempt: &AttemptKey, record: &AttemptRecord) -> Result<()> {
        self.need(|| Node::attempt(attempt), Access::Write)?;
        self.put(ATTEMPTS, &attempt_key(attempt), record)
    }

    fn put_accepted(&mut self, task: &TaskKey, attempt: u32) -> Result<()> {
        self.need(|| Node::task(task), Access::Write)?;
        self.put(ACCEPTED, &task_key(task), &AcceptedRecord { attempt })
    }

    fn remove_accepted(&mut self, task: &TaskKey) -> Result<()> {
        self.need(|| Node::task(task), Access::Write)?;
        self.remove(ACCEPTED, &task_key(task))
    }

    fn put_digest(&mut self, dataset: &str, snapshot: &str, partition: &str, record: &DigestRecord) -> Result<()> {
        self.need(|| Node::head(dataset), Access::Write)?;
        self.put(DIGESTS, &key(&[dataset, snapshot, partition]), record)
    }

    fn put_effect(&mut self, effect: &EffectKey, record: &EffectRecord) -> Result<()> {
        self.need(|| Node::effect(effect), Access::Write)?;
        self.put(EFFECTS, &effect_key(effect), record)
    }

    fn update_run_effects(&mut self, dataset: &str, run: &str, update: &mut dyn FnMut(EffectRecord) -> Option<EffectRecord>) -> Result<()> {
        self.need(|| Node::run(dataset, run), Access::Below)?;
        let effect_prefix = prefix(&[dataset, run]);
        for (raw, record) in self.range::<EffectRecord>(EFFECTS, &effect_prefix, &prefix_end(&effect_prefix))? {
            if let Some(new) = update(record) {
                self.put(EFFECTS, &raw, &new)?;
            }
        }
        Ok(())
    }

    fn put_version(&mut self, dataset: &str, partition: &str, generation: u64, record: &PartitionVersionRecord) -> Result<()> {
        self.need(|| Node::head(dataset), Access::Write)?;
        self.put(VERSIONS, &key_u64(&[dataset, partition], generation), record)
    }

    fn put_generation(&mut self, dataset: &str, number: u64, record: &GenerationRecord) -> Result<()> {
        self.need(|| Node::head(dataset), Access::Write)?;
        self.put(GENERATIONS, &key_u64(&[dataset], number), record)
    }

    fn move_pointer(&mut self, dataset: &str, from: u64, to: u64) -> Result<()> {
        self.need(|| Node::head(dataset), Access::Write)?;
        let raw = key(&[dataset]);
        if to <= from {
            return Err(corrupted(POINTERS, &raw, format!("pointer cannot move backwards from {from} to {to}")));
        }
        let to_column = as_bigint(POINTERS, &raw, to)?;
        let value = crate::codec::encode(POINTERS.name, &raw, &PointerRecord { generation: to });
        self.note_write();
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
            // Another transaction moved it first (the locks make this a bug of theirs: a move
            // without the dataset's head locked): nothing of this one commits, and the
            // operation runs again and reads the new pointer.
            self.fault.get_or_insert(Retry::Rerun);
            return Err(Error::postgres_layer(
                "moving a pointer",
                StorageErrorKind::Conflict,
                format!("the pointer of dataset {dataset:?} no longer names generation {from}: another publish moved it first"),
            ));
        }
        Ok(())
    }

    fn remove_version(&mut self, dataset: &str, partition: &str, generation: u64) -> Result<()> {
        self.need(|| Node::head(dataset), Access::Write)?;
        self.remove(VERSIONS, &key_u64(&[dataset, partition], generation))
    }

    fn remove_generation(&mut self, dataset: &str, number: u64) -> Result<()> {
        self.need(|| Node::head(dataset), Access::Write)?;
        self.remove(GENERATIONS, &key_u64(&[dataset], number))
    }

    fn remove_attempt(&mut self, attempt: &AttemptKey) -> Result<()> {
        self.need(|| Node::attempt(attempt), Access::Write)?;
        self.remove(ATTEMPTS, &attempt_key(attempt))
    }

    fn put_cleanup_plan(&mut self, id: u64, record: &CleanupPlanRecord) -> Result<()> {
        self.need(|| Node::Store, Access::Write)?;
        self.put(CLEANUP_PLANS, &plan_key(id), record)
    }

    fn remove_cleanup_plans_before(&mut self, first_kept: u64) -> Result<()> {
        self.need(|| Node::Store, Access::Write)?;
        self.note_write();
        // A batch key starts with its plan's id, so one bound serves both tables.
        let end = plan_key(first_kept);
        for def in [CLEANUP_PLANS, CLEANUP_BATCHES] {
            let sql = format!("DELETE FROM manifestdb.{} WHERE key < $1", def.name);
            self.execute("pruning old cleanup plans", &sql, &[(&end, Type::BYTEA)])?;
        }
        Ok(())
    }

    fn put_cleanup_batch(&mut self, plan: u64, batch: u32, record: &CleanupBatchRecord) -> Result<()> {
        self.need(|| Node::Store, Access::Write)?;
        self.put(CLEANUP_BATCHES, &batch_key(plan, batch), record)
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
        if let Some(entry) = record.into_entry(partition, since) {
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

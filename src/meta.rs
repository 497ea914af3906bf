//! The storage interface: the reads and writes one operation makes inside one transaction.
//!
//! An operation (`ops/`) reads what its rule needs through [`Meta`], calls the rule
//! (`rules/`), and writes what the rule decided through [`Meta`], all in the one transaction
//! the storage layer opened for it; it returns [`TxnEnd`] to say whether to commit. Readers
//! (`Snapshot`, the prepare steps, cleanup's facts) read through [`MetaRead`], the read half,
//! over one consistent read. A storage layer implements both over its own tables (the redb
//! layer: `store::meta_redb`, `RedbMeta` over a write transaction, `RedbRead` over a read
//! transaction) and only reads and writes: it decides nothing.
//!
//! The layer's invariants, which operations rely on:
//! - every read of one transaction sees what a serial execution of the committed transactions
//!   would show it (redb: one committed state plus its own writes, under the single writer;
//!   PostgreSQL: the latest committed value of records it holds locked, `pg::locks`), and the
//!   writes of a transaction become visible together or not at all;
//! - a read never turns damage into absence: a record that does not decode, fails its checks
//!   or is stored under a malformed key is `Error::Corrupted`;
//! - [`Meta::move_pointer`] is the only write of a dataset's pointer, and it is a
//!   compare-and-swap that only moves forward;
//! - nothing is written by a read, and an operation that returns an error or
//!   [`TxnEnd::Abort`] leaves the store as it was.

use crate::error::Result;
use crate::model::{AttemptKey, EffectKey, PartitionEntry, TaskKey};
use crate::records::{
    AttemptRecord, CleanupBatchRecord, CleanupPlanRecord, DigestRecord, EffectRecord, GenerationRecord, MetaRecord, PartitionVersionRecord,
    RunRecord, TaskRecord, ViewTreesRecord, ViewsRecord,
};
use crate::schema::Def;

/// How an operation ends its transaction.
#[derive(Debug)]
pub(crate) enum TxnEnd<T> {
    /// Commit what the operation wrote, then return the value.
    Commit(T),
    /// Write nothing (an idempotent repeat, a refusal returned as a value, a dry run).
    Abort(T),
}

impl<T> TxnEnd<T> {
    /// The same end with its value mapped.
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> TxnEnd<U> {
        match self {
            TxnEnd::Commit(value) => TxnEnd::Commit(f(value)),
            TxnEnd::Abort(value) => TxnEnd::Abort(f(value)),
        }
    }
}

/// The reads of one transaction (or one read snapshot) of the store's metadata, by key: each
/// one keyed lookup or one range of keys, returning plain values.
///
/// A storage layer implements it for its write transaction (as part of [`Meta`]) and for its
/// read snapshot (`Snapshot`, the readers' consistent view; also the prepare steps of begin and
/// validation, cleanup's facts, and verify). Every method may fail with a storage or corruption
/// error; after one, the caller returns it.
pub(crate) trait MetaRead {
    /// The clock of this transaction, in ms since the Unix epoch: every time an operation
    /// writes or compares with stored times (declared, started, heartbeat, lease expiry,
    /// claims, published) comes from it, so that times written through one host are judged
    /// through another on the same clock (redb: this host's clock; a shared database: its
    /// server's).
    fn now_ms(&mut self) -> u64;
    /// The store's format record (format version, creation time, the attempt lease, the
    /// staging identity); `None` only for a store being created.
    fn store_format(&mut self) -> Result<Option<MetaRecord>>;
    /// The store's recorded view root and mode, if a writer set one.
    fn views_config(&mut self) -> Result<Option<ViewsRecord>>;
    /// The store's recorded choice of directory trees, if one was recorded.
    fn view_trees(&mut self) -> Result<Option<ViewTreesRecord>>;

    /// A declared run.
    fn run(&mut self, dataset: &str, run: &str) -> Result<Option<RunRecord>>;
    /// Every declared run of a dataset with its id, in run-id order.
    fn dataset_runs(&mut self, dataset: &str) -> Result<Vec<(String, RunRecord)>>;
    /// Whether the dataset declared any run.
    fn has_runs(&mut self, dataset: &str) -> Result<bool>;
    /// A declared task.
    fn task(&mut self, task: &TaskKey) -> Result<Option<TaskRecord>>;
    /// Every task of a run with its partition, in partition order.
    fn run_tasks(&mut self, dataset: &str, run: &str) -> Result<Vec<(String, TaskRecord)>>;
    /// One attempt.
    fn attempt(&mut self, attempt: &AttemptKey) -> Result<Option<AttemptRecord>>;
    /// Whether any record is stored under the attempt's key (without decoding it).
    fn attempt_exists(&mut self, attempt: &AttemptKey) -> Result<bool>;
    /// Every attempt of the store for which `keep` holds, with its key, in key order (a scan of
    /// every attempt; only the kept ones are returned).
    fn attempts_where(&mut self, keep: &mut dyn FnMut(&AttemptRecord) -> bool) -> Result<Vec<(AttemptKey, AttemptRecord)>>;
    /// Visits every attempt of the store with its key, in key order (cleanup's facts).
    fn each_attempt(&mut self, visit: &mut dyn FnMut(AttemptKey, AttemptRecord) -> Result<()>) -> Result<()>;
    /// Every attempt of a task with its number, in attempt order.
    fn task_attempts(&mut self, task: &TaskKey) -> Result<Vec<(u32, AttemptRecord)>>;
    /// The task's accepted attempt.
    fn accepted(&mut self, task: &TaskKey) -> Result<Option<u32>>;
    /// How many tasks of a run have an accepted attempt.
    fn accepted_count(&mut self, dataset: &str, run: &str) -> Result<u64>;
    /// The digest a partition holds from a snapshot.
    fn digest(&mut self, dataset: &str, snapshot: &str, partition: &str) -> Result<Option<DigestRecord>>;
    /// One side effect.
    fn effect(&mut self, effect: &EffectKey) -> Result<Option<EffectRecord>>;
    /// Every side effect of a run, in key order (effect name, then partition).
    fn run_effects(&mut self, dataset: &str, run: &str) -> Result<Vec<(EffectKey, EffectRecord)>>;
    /// Every side effect of a dataset, in key order (run, effect name, partition).
    fn dataset_effects(&mut self, dataset: &str) -> Result<Vec<(EffectKey, EffectRecord)>>;
    /// The dataset's current generation (its pointer), if it published any.
    fn pointer(&mut self, dataset: &str) -> Result<Option<u64>>;
    /// Every dataset that has a pointer, in name order.
    fn datasets(&mut self) -> Result<Vec<String>>;
    /// A stored generation.
    fn generation(&mut self, dataset: &str, number: u64) -> Result<Option<GenerationRecord>>;
    /// The dataset's oldest stored generation.
    fn oldest_generation(&mut self, dataset: &str) -> Result<Option<u64>>;
    /// Every stored generation of the dataset, `(number, published_at_ms)`, oldest first.
    fn generation_times(&mut self, dataset: &str) -> Result<Vec<(u64, u64)>>;
    /// Every stored generation of the dataset with its record, oldest first.
    fn generations(&mut self, dataset: &str) -> Result<Vec<(u64, GenerationRecord)>>;
    /// A partition's version entry written by generation `generation`.
    fn version(&mut self, dataset: &str, partition: &str, generation: u64) -> Result<Option<PartitionVersionRecord>>;
    /// The partition as generation `generation` of the dataset holds it: its version entry with
    /// the largest generation not above `generation` (`None` if none, or a removal).
    fn partition_at(&mut self, dataset: &str, partition: &str, generation: u64) -> Result<Option<PartitionEntry>>;
    /// Every partition generation `generation` of the dataset holds, in partition order.
    fn partitions_at(&mut self, dataset: &str, generation: u64) -> Result<Vec<PartitionEntry>>;
    /// The version entries of one partition from generation `since` on, `(generation,
    /// record)`, oldest first.
    fn partition_versions(&mut self, dataset: &str, partition: &str, since: u64) -> Result<Vec<(u64, PartitionVersionRecord)>>;
    /// The keys of every version entry of the dataset, `(partition, generation, is a
    /// removal)`, in partition then generation order.
    fn version_keys(&mut self, dataset: &str) -> Result<Vec<(String, u64, bool)>>;
    /// The staging directory (`staging_rel`) of every stored version entry that holds one, of
    /// every dataset (once per entry, so a directory may repeat).
    fn held_dirs(&mut self) -> Result<Vec<String>>;
    /// A stored cleanup plan.
    fn cleanup_plan(&mut self, id: u64) -> Result<Option<CleanupPlanRecord>>;
    /// The id of the newest stored cleanup plan.
    fn last_cleanup_plan(&mut self) -> Result<Option<u64>>;
    /// The number of the last batch recorded for a cleanup plan.
    fn last_cleanup_batch(&mut self, plan: u64) -> Result<Option<u32>>;
    /// How many entries each table of the store holds, as `(table name, entries)` in schema
    /// order (`schema::ALL_TABLES`'s names), for operators' statistics.
    fn table_entries(&mut self) -> Result<Vec<(&'static str, u64)>>;
    /// Visits every stored `(key, framed value)` of a table in key order, undecoded (the
    /// frames of `codec.rs` under the keys of `schema.rs`): verify's walk, which decodes each
    /// one itself so that every damaged record is its own finding. An error stops the walk
    /// and is returned.
    fn each_frame(&mut self, table: Def, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<()>;
}

/// What an operation's transaction reads and writes, declared through [`Meta::lock`] before its
/// first read. Each scope names the narrowest part of the store that holds everything the
/// operation touches.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(
    not(feature = "postgres"),
    expect(dead_code, reason = "only the PostgreSQL layer reads what a scope names; redb's single writer needs no locks")
)]
pub(crate) enum Scope<'a> {
    /// One task's own records (the task, its attempts, its accepted entry) to read and write,
    /// and its run's record to read: begin, heartbeat, finish, verdicts, abandon, invalidate.
    Task(&'a TaskKey),
    /// One side effect's record to read and write, its run's record to read, and, for an
    /// effect of a partition, its task's record to read: record, claim, mark.
    Effect(&'a EffectKey),
    /// One run's record and its tasks' records to read and write: declare.
    Run(&'a str, &'a str),
    /// One run's records below it (tasks, attempts, accepted entries, effects) to read and
    /// write, and its dataset's pointer, generations, versions and digests: publish.
    Publish(&'a str, &'a str),
    /// Everything of one dataset (its pointer, generations, versions, digests, runs, tasks,
    /// attempts and effects) to read and write: rollback, expire.
    Dataset(&'a str),
    /// Everything: cleanup's records, and store-wide scans.
    Store,
}

/// The reads and writes of one transaction of the store's metadata, by key.
///
/// Every method may fail with a storage or corruption error; after one, the operation returns
/// it and the transaction is not committed. A layer that runs transactions concurrently may
/// run an operation's body more than once (a retry after a deadlock), so a body
/// only reads and writes through this and keeps no effect of an earlier run.
pub(crate) trait Meta: MetaRead {
    /// Declares, before the operation's first read, what the rest of its transaction reads and
    /// writes ([`Scope`]). A layer that runs transactions one at a time (redb's single writer)
    /// has nothing to do. A layer that runs them concurrently (PostgreSQL) takes, at once, the
    /// locks the scope needs, in the one order every operation takes them, so operations that
    /// touch disjoint parts of the store run side by side and conflicting ones wait for each
    /// other instead of failing. A scope is a statement of intent, never a permission: a read
    /// or write outside it is still correct (the layer then locks what it touches as it goes,
    /// see `pg::locks`), only slower.
    fn lock(&mut self, scope: Scope<'_>) -> Result<()>;
    /// Stores the store's format record.
    fn put_store_format(&mut self, record: &MetaRecord) -> Result<()>;
    /// Stores the store's view root and mode.
    fn put_views_config(&mut self, record: &ViewsRecord) -> Result<()>;
    /// Stores the store's choice of directory trees.
    fn put_view_trees(&mut self, record: &ViewTreesRecord) -> Result<()>;
    /// Stores a run.
    fn put_run(&mut self, dataset: &str, run: &str, record: &RunRecord) -> Result<()>;
    /// Stores a task.
    fn put_task(&mut self, task: &TaskKey, record: &TaskRecord) -> Result<()>;
    /// Stores an attempt.
    fn put_attempt(&mut self, attempt: &AttemptKey, record: &AttemptRecord) -> Result<()>;
    /// Makes `attempt` the task's accepted attempt.
    fn put_accepted(&mut self, task: &TaskKey, attempt: u32) -> Result<()>;
    /// Makes the task have no accepted attempt.
    fn remove_accepted(&mut self, task: &TaskKey) -> Result<()>;
    /// Stores the digest a partition now holds from a snapshot.
    fn put_digest(&mut self, dataset: &str, snapshot: &str, partition: &str, record: &DigestRecord) -> Result<()>;
    /// Stores a side effect.
    fn put_effect(&mut self, effect: &EffectKey, record: &EffectRecord) -> Result<()>;
    /// Rewrites each effect of a run for which `update` returns a new record; reads each one
    /// once.
    fn update_run_effects(&mut self, dataset: &str, run: &str, update: &mut dyn FnMut(EffectRecord) -> Option<EffectRecord>) -> Result<()>;
    /// Stores a partition's version entry from `generation` on.
    fn put_version(&mut self, dataset: &str, partition: &str, generation: u64, record: &PartitionVersionRecord) -> Result<()>;
    /// Stores a generation record.
    fn put_generation(&mut self, dataset: &str, number: u64, record: &GenerationRecord) -> Result<()>;
    /// Moves the dataset's pointer from `from` (0: none yet) to `to`, a compare-and-swap that
    /// only moves forward: it fails unless `to > from` and the pointer still names `from`. The
    /// generation `to` must be complete (written in this transaction) before it is called.
    fn move_pointer(&mut self, dataset: &str, from: u64, to: u64) -> Result<()>;
    /// Removes a partition's version entry (expiry: one no retained generation can see).
    fn remove_version(&mut self, dataset: &str, partition: &str, generation: u64) -> Result<()>;
    /// Removes a generation record (expiry: never the current one).
    fn remove_generation(&mut self, dataset: &str, number: u64) -> Result<()>;
    /// Removes an attempt record (cleanup: a dead attempt no one refers to).
    fn remove_attempt(&mut self, attempt: &AttemptKey) -> Result<()>;
    /// Stores a cleanup plan.
    fn put_cleanup_plan(&mut self, id: u64, record: &CleanupPlanRecord) -> Result<()>;
    /// Removes every cleanup plan numbered below `first_kept`, and their batch records.
    fn remove_cleanup_plans_before(&mut self, first_kept: u64) -> Result<()>;
    /// Stores the record of one applied batch of a cleanup plan.
    fn put_cleanup_batch(&mut self, plan: u64, batch: u32, record: &CleanupBatchRecord) -> Result<()>;
}

thread_local! {
    /// Records written by this thread, for the check that an operation refusing after a write
    /// is caught (group commit, batches): every layer's writes call [`note_write`].
    static WRITES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts one record written by this thread (every [`Meta`] write calls it once).
pub(crate) fn note_write() {
    WRITES.with(|w| w.set(w.get().wrapping_add(1)));
}

/// How many records this thread has written so far (see [`note_write`]).
pub(crate) fn writes_on_this_thread() -> u64 {
    WRITES.with(std::cell::Cell::get)
}

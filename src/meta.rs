//! The storage interface: the reads and writes one operation makes inside one transaction.
//!
//! An operation (`ops/`) reads what its rule needs through [`Meta`], calls the rule
//! (`rules/`), and writes what the rule decided through [`Meta`], all in the one transaction
//! the storage layer opened for it; it returns [`TxnEnd`] to say whether to commit. A storage
//! layer implements [`Meta`] over its own tables (the redb layer: `store::meta_redb`) and
//! only reads and writes: it decides nothing.
//!
//! The layer's invariants, which operations rely on:
//! - every read of one transaction sees one committed state plus this transaction's own
//!   writes, and the writes of a transaction become visible together or not at all;
//! - a read never turns damage into absence: a record that does not decode, fails its checks
//!   or is stored under a malformed key is `Error::Corrupted`;
//! - [`Meta::move_pointer`] is the only write of a dataset's pointer, and it is a
//!   compare-and-swap that only moves forward;
//! - nothing is written by a read, and an operation that returns an error or
//!   [`TxnEnd::Abort`] leaves the store as it was.

use crate::error::Result;
use crate::model::{AttemptKey, EffectKey, PartitionEntry, TaskKey};
use crate::records::{AttemptRecord, DigestRecord, EffectRecord, GenerationRecord, PartitionVersionRecord, RunRecord, TaskRecord};

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

/// The reads and writes of one transaction of the store's metadata, by key.
///
/// Every method may fail with a storage or corruption error; after one, the operation returns
/// it and the transaction is not committed.
pub(crate) trait Meta {
    /// A declared run.
    fn run(&mut self, dataset: &str, run: &str) -> Result<Option<RunRecord>>;
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
    /// Every attempt of a task with its number, in attempt order.
    fn task_attempts(&mut self, task: &TaskKey) -> Result<Vec<(u32, AttemptRecord)>>;
    /// The task's accepted attempt.
    fn accepted(&mut self, task: &TaskKey) -> Result<Option<u32>>;
    /// The digest a partition holds from a snapshot.
    fn digest(&mut self, dataset: &str, snapshot: &str, partition: &str) -> Result<Option<DigestRecord>>;
    /// One side effect.
    fn effect(&mut self, effect: &EffectKey) -> Result<Option<EffectRecord>>;
    /// The dataset's current generation (its pointer), if it published any.
    fn pointer(&mut self, dataset: &str) -> Result<Option<u64>>;
    /// A stored generation.
    fn generation(&mut self, dataset: &str, number: u64) -> Result<Option<GenerationRecord>>;
    /// The dataset's oldest stored generation.
    fn oldest_generation(&mut self, dataset: &str) -> Result<Option<u64>>;
    /// Every stored generation of the dataset, `(number, published_at_ms)`, oldest first.
    fn generation_times(&mut self, dataset: &str) -> Result<Vec<(u64, u64)>>;
    /// A partition's version entry written by generation `generation`.
    fn version(&mut self, dataset: &str, partition: &str, generation: u64) -> Result<Option<PartitionVersionRecord>>;
    /// Every partition generation `generation` of the dataset holds, in partition order.
    fn partitions_at(&mut self, dataset: &str, generation: u64) -> Result<Vec<PartitionEntry>>;

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
}

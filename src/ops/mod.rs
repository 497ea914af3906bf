//! Each write operation once, against the storage interface ([`crate::meta::Meta`]): read
//! what the rule needs, call the rule (`rules/`), write what it decided, and say whether to
//! commit ([`crate::meta::TxnEnd`]).
//!
//! Nothing here names a storage engine. The caller (a storage layer's `Store`) opens the
//! transaction, hands the operation its [`Meta`](crate::meta::Meta), its clock reading and
//! any file work the operation does between its reads and its writes, and commits or aborts
//! as told. Each operation checks everything before its first write, so a refusal (an error,
//! or a value with [`TxnEnd::Abort`](crate::meta::TxnEnd::Abort)) writes nothing.
//!
//! Invariant: every read an operation makes is one keyed lookup or one range of its own keys
//! (a run's tasks, a task's attempts, a run's effects), so its cost is countable per call.

pub(crate) mod attempts;
pub(crate) mod cleanup;
pub(crate) mod declare;
pub(crate) mod effects;
pub(crate) mod lifecycle;
pub(crate) mod publish;
pub(crate) mod validate;

use crate::error::{Corruption, Error, Result};
use crate::meta::MetaRead;
use crate::model::{AttemptKey, GenerationKind, PartitionEntry, TaskKey};
use crate::schema::{Def, GENERATIONS, key, key_u32, key_u64};

/// Every partition generation `number` of `dataset` holds ([`MetaRead::partitions_at`]),
/// checked against the generation's record (`kind`, `partitions_replaced`): a disagreement is
/// [`Error::Corrupted`] naming the generation, never a generation read with partitions missing
/// (`rules::retention::generation_entries_agree`).
pub(crate) fn generation_partitions(
    meta: &mut dyn MetaRead,
    dataset: &str,
    number: u64,
    kind: &GenerationKind,
    partitions_replaced: u64,
) -> Result<Vec<PartitionEntry>> {
    let entries = meta.partitions_at(dataset, number)?;
    crate::rules::retention::generation_entries_agree(number, kind, partitions_replaced, &entries)
        .map_err(|why| corrupted(GENERATIONS, &key_u64(&[dataset], number), why))?;
    Ok(entries)
}

/// A corruption error for a record that contradicts the others, named by table and key.
pub(crate) fn corrupted(def: Def, key: &[u8], message: impl Into<String>) -> Error {
    Error::Corrupted {
        table: def.name,
        key: crate::codec::printable_key(key),
        detail: Corruption::Inconsistent { message: message.into() },
    }
}

/// The key bytes of a run, for corruption reports.
pub(crate) fn run_key(dataset: &str, run: &str) -> Vec<u8> {
    key(&[dataset, run])
}

/// The key bytes of a task, for corruption reports.
pub(crate) fn task_key(task: &TaskKey) -> Vec<u8> {
    key(&[&task.dataset, &task.run, &task.partition])
}

/// The key bytes of an attempt, for corruption reports.
pub(crate) fn attempt_key(attempt: &AttemptKey) -> Vec<u8> {
    let task = &attempt.task;
    key_u32(&[&task.dataset, &task.run, &task.partition], attempt.attempt)
}

pub(crate) fn unknown_run(dataset: &str, run: &str) -> Error {
    Error::UnknownRun { dataset: dataset.to_owned(), run: run.to_owned() }
}

pub(crate) fn unknown_task(task: &TaskKey) -> Error {
    Error::UnknownTask { dataset: task.dataset.clone(), run: task.run.clone(), partition: task.partition.clone() }
}

pub(crate) fn unknown_attempt(attempt: &AttemptKey) -> Error {
    Error::UnknownAttempt {
        dataset: attempt.task.dataset.clone(),
        run: attempt.task.run.clone(),
        partition: attempt.task.partition.clone(),
        attempt: attempt.attempt,
    }
}

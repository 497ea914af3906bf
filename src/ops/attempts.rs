//! An attempt's writes: begin, finish, heartbeat.

use std::path::PathBuf;

use super::{attempt_key, corrupted, unknown_attempt, unknown_run, unknown_task};
use crate::error::Result;
use crate::lifecycle::AttemptLease;
use crate::meta::{Meta, MetaRead, Scope, TxnEnd};
use crate::model::{AbandonOutcome, AttemptKey, AttemptTicket, Candidate, FinishOutcome, GateFailure, InvalidateOutcome, TaskKey, Verdict};
use crate::records::AttemptRecord;
use crate::rules::accept;
use crate::rules::attempts::{self, Abandon, Finish, Invalidate, RunForFinish};
use crate::rules::ids;
use crate::schema::ATTEMPTS;

/// Begins an attempt of `task` at `now_ms`: takes the task's next number and records the
/// attempt. `make_dir(attempt, staging_rel)` makes its staging directory once the number is
/// known, before anything is written (if the commit then fails, the number is not taken and
/// the next begin reuses the empty directory nobody was handed).
pub(crate) fn begin(
    meta: &mut dyn Meta,
    task: &TaskKey,
    now_ms: u64,
    make_dir: impl FnOnce(u32, &str) -> Result<PathBuf>,
) -> Result<TxnEnd<AttemptTicket>> {
    meta.lock(Scope::Task(task))?;
    let run = meta.run(&task.dataset, &task.run)?.ok_or_else(|| unknown_run(&task.dataset, &task.run))?;
    let mut record = meta.task(task)?.ok_or_else(|| unknown_task(task))?;
    let (attempt, next_attempt) = attempts::begin(task, run.published_generation, record.next_attempt)?;
    record.next_attempt = next_attempt;
    let staging_rel = ids::staging_rel(&task.dataset, &task.run, &task.partition, attempt)?;
    let key = task.attempt(attempt);
    if meta.attempt_exists(&key)? {
        return Err(corrupted(ATTEMPTS, &attempt_key(&key), "attempt exists beyond its task's next attempt number"));
    }
    let staging_dir = make_dir(attempt, &staging_rel)?;
    meta.put_task(task, &record)?;
    meta.put_attempt(
        &key,
        &AttemptRecord {
            started_at_ms: now_ms,
            heartbeat_at_ms: now_ms,
            abandoned_at_ms: None,
            staging_rel,
            candidate: None,
            verdict: None,
            reconciliation: None,
        },
    )?;
    Ok(TxnEnd::Commit(AttemptTicket { key, staging_dir, started_at_ms: now_ms }))
}

/// Records a finished attempt's candidate; the identical candidate again writes nothing.
pub(crate) fn finish(meta: &mut dyn Meta, attempt: &AttemptKey, candidate: &Candidate) -> Result<TxnEnd<FinishOutcome>> {
    meta.lock(Scope::Task(&attempt.task))?;
    let task = &attempt.task;
    let run = meta.run(&task.dataset, &task.run)?.ok_or_else(|| unknown_run(&task.dataset, &task.run))?;
    let mut record = meta.attempt(attempt)?.ok_or_else(|| unknown_attempt(attempt))?;
    let for_finish = RunForFinish { snapshot: &run.snapshot, has_grain: run.grain.is_some() };
    match attempts::finish(attempt, candidate, for_finish, record.abandoned_at_ms, record.candidate.as_ref())? {
        Finish::AlreadyRecorded => Ok(TxnEnd::Abort(FinishOutcome::AlreadyRecorded)),
        Finish::Record => {
            record.candidate = Some(candidate.clone());
            meta.put_attempt(attempt, &record)?;
            Ok(TxnEnd::Commit(FinishOutcome::Recorded))
        }
    }
}

/// Renews a running attempt's lease at `now_ms`; `lease_ms` is the store's attempt lease.
pub(crate) fn heartbeat(meta: &mut dyn Meta, attempt: &AttemptKey, now_ms: u64, lease_ms: u64) -> Result<TxnEnd<AttemptLease>> {
    meta.lock(Scope::Task(&attempt.task))?;
    let mut record = meta.attempt(attempt)?.ok_or_else(|| unknown_attempt(attempt))?;
    // The run is read only for an attempt not abandoned: the abandonment answers first.
    let task = &attempt.task;
    let published = match record.abandoned_at_ms {
        None => meta.run(&task.dataset, &task.run)?.and_then(|r| r.published_generation),
        Some(_) => None,
    };
    record.heartbeat_at_ms =
        attempts::heartbeat(attempt, record.abandoned_at_ms, published, record.candidate.is_some(), record.heartbeat_at_ms, now_ms)?;
    meta.put_attempt(attempt, &record)?;
    Ok(TxnEnd::Commit(AttemptLease {
        heartbeat_at_ms: record.heartbeat_at_ms,
        expires_at_ms: record.heartbeat_at_ms.saturating_add(lease_ms),
    }))
}

/// The unfinished attempts whose lease (`lease_ms`) ran out by `now_ms`, in key order: the
/// candidates of [`abandon_expired`], found in a read (one pass over the attempts, outside the
/// writer).
pub(crate) fn expired(meta: &mut dyn MetaRead, lease_ms: u64, now_ms: u64) -> Result<Vec<AttemptKey>> {
    let expired = meta.attempts_where(&mut |record| {
        attempts::lease_expired(record.candidate.is_some(), record.abandoned_at_ms.is_some(), record.heartbeat_at_ms, lease_ms, now_ms)
    })?;
    Ok(expired.into_iter().map(|(attempt, _)| attempt).collect())
}

/// Records abandoned at `now_ms` each of `candidates` (found by [`expired`] in an earlier read)
/// whose lease (`lease_ms`) has still run out, re-checked by key in this transaction: an
/// attempt that finished, sent a heartbeat or was abandoned since the read is left alone.
/// Returns the attempts it abandoned, in the candidates' order.
pub(crate) fn abandon_expired(
    meta: &mut dyn Meta,
    candidates: &[AttemptKey],
    lease_ms: u64,
    now_ms: u64,
) -> Result<TxnEnd<Vec<AttemptKey>>> {
    let mut still = Vec::new();
    for attempt in candidates {
        meta.lock(Scope::Task(&attempt.task))?;
        // An attempt removed since the read (cleanup of a dead attempt) is no longer a candidate.
        let Some(record) = meta.attempt(attempt)? else { continue };
        if attempts::lease_expired(record.candidate.is_some(), record.abandoned_at_ms.is_some(), record.heartbeat_at_ms, lease_ms, now_ms) {
            still.push((attempt.clone(), record));
        }
    }
    if still.is_empty() {
        return Ok(TxnEnd::Abort(Vec::new()));
    }
    let mut keys = Vec::with_capacity(still.len());
    for (attempt, mut record) in still {
        record.abandoned_at_ms = Some(now_ms);
        meta.put_attempt(&attempt, &record)?;
        tracing::info!(attempt = %attempt, heartbeat_at_ms = record.heartbeat_at_ms, "attempt abandoned: lease ran out");
        keys.push(attempt);
    }
    Ok(TxnEnd::Commit(keys))
}

/// Records one unfinished attempt abandoned at `now_ms`; again, it writes nothing.
pub(crate) fn abandon(meta: &mut dyn Meta, attempt: &AttemptKey, now_ms: u64) -> Result<TxnEnd<AbandonOutcome>> {
    meta.lock(Scope::Task(&attempt.task))?;
    let mut record = meta.attempt(attempt)?.ok_or_else(|| unknown_attempt(attempt))?;
    match attempts::abandon(attempt, record.abandoned_at_ms, record.candidate.is_some())? {
        Abandon::AlreadyAbandoned(abandoned_at_ms) => Ok(TxnEnd::Abort(AbandonOutcome::AlreadyAbandoned { abandoned_at_ms })),
        Abandon::Abandon => {
            record.abandoned_at_ms = Some(now_ms);
            meta.put_attempt(attempt, &record)?;
            tracing::info!(attempt = %attempt, "attempt abandoned explicitly");
            Ok(TxnEnd::Commit(AbandonOutcome::Abandoned { abandoned_at_ms: now_ms }))
        }
    }
}

/// An operator's invalidation of a finished attempt at `now_ms`: its verdict becomes invalid
/// (`actor` and `reason` recorded) and the task's accepted attempt becomes the lowest valid
/// one left (`rules::accept::lowest_valid` over the task's own attempts), or none.
pub(crate) fn invalidate(
    meta: &mut dyn Meta,
    attempt: &AttemptKey,
    actor: &str,
    reason: &str,
    now_ms: u64,
) -> Result<TxnEnd<InvalidateOutcome>> {
    let task = &attempt.task;
    meta.lock(Scope::Task(task))?;
    let run = meta.run(&task.dataset, &task.run)?.ok_or_else(|| unknown_run(&task.dataset, &task.run))?;
    attempts::refuse_if_published(task, run.published_generation)?;
    let mut record = meta.attempt(attempt)?.ok_or_else(|| unknown_attempt(attempt))?;
    match attempts::invalidate(attempt, record.abandoned_at_ms, record.candidate.is_some(), record.verdict.as_ref())? {
        Invalidate::AlreadyInvalid => return Ok(TxnEnd::Abort(InvalidateOutcome::AlreadyInvalid)),
        Invalidate::Invalidate => {}
    }
    // Every read before the first write.
    let accepted_before = meta.accepted(task)?;
    let verdicts = meta
        .task_attempts(task)?
        .into_iter()
        .map(|(number, other)| (number, number != attempt.attempt && other.verdict.as_ref().is_some_and(Verdict::is_valid)));
    let accepted_after = accept::lowest_valid(verdicts);
    record.verdict = Some(Verdict::Invalid(vec![GateFailure::Invalidated {
        actor: actor.to_owned(),
        reason: reason.to_owned(),
        invalidated_at_ms: now_ms,
    }]));
    meta.put_attempt(attempt, &record)?;
    match accepted_after {
        Some(next) if accepted_before != Some(next) => meta.put_accepted(task, next)?,
        Some(_) => {}
        None => meta.remove_accepted(task)?,
    }
    tracing::warn!(attempt = %attempt, actor, reason, ?accepted_before, ?accepted_after, "attempt invalidated by an operator");
    Ok(TxnEnd::Commit(InvalidateOutcome::Invalidated { accepted_before, accepted_after }))
}

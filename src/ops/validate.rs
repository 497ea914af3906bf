//! Storing a verdict, alone or with the candidate it was decided from.

use super::{attempt_key, corrupted, unknown_attempt, unknown_run};
use crate::error::Result;
use crate::grain::Reconciliation;
use crate::meta::{Meta, Scope, TxnEnd};
use crate::model::{AttemptKey, Candidate, Verdict};
use crate::records::AttemptRecord;
use crate::rules::accept;
use crate::rules::attempts::{self, StoreVerdict};
use crate::schema::ATTEMPTS;

/// Stores `verdict`, decided from `candidate`, with its figures; a valid attempt numbered
/// below the task's accepted one becomes the accepted one, unless the run is published (then
/// the accepted attempt is frozen). A verdict stored meanwhile by another validator stands and
/// is returned.
pub(crate) fn store_verdict(
    meta: &mut dyn Meta,
    attempt: &AttemptKey,
    candidate: &Candidate,
    verdict: &Verdict,
    reconciliation: &Reconciliation,
) -> Result<TxnEnd<Verdict>> {
    let task = &attempt.task;
    meta.lock(Scope::Task(task))?;
    let record = meta.attempt(attempt)?.ok_or_else(|| unknown_attempt(attempt))?;
    match attempts::store_verdict(record.verdict.as_ref(), record.candidate.as_ref(), candidate) {
        StoreVerdict::Stands(stored) => return Ok(TxnEnd::Abort(stored.clone())),
        StoreVerdict::CandidateChanged => {
            return Err(corrupted(ATTEMPTS, &attempt_key(attempt), "candidate changed after it was recorded"));
        }
        StoreVerdict::Store => {}
    }
    // Every read that may fail comes before the first write: a grouped body that fails must
    // have written nothing (see `store/group.rs`).
    let run = meta.run(&task.dataset, &task.run)?.ok_or_else(|| unknown_run(&task.dataset, &task.run))?;
    write_verdict(meta, attempt, record, run.published_generation.is_some(), verdict, reconciliation)?;
    Ok(TxnEnd::Commit(verdict.clone()))
}

/// What [`finish_and_store_verdict`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FinishedVerdict {
    /// The verdict stored now, or the one another validator stored first.
    Stored(Verdict),
    /// The attempt's record names another staging directory than the one the verdict was
    /// decided from (nothing written).
    StagingElsewhere,
}

/// Records `candidate` as the attempt's (as [`crate::ops::attempts::finish`]) and stores
/// `verdict`, decided from it and its files in `staging_rel`, with its figures (as
/// [`store_verdict`]), in one transaction. The identical candidate recorded before is taken as
/// is, and a verdict stored before stands.
pub(crate) fn finish_and_store_verdict(
    meta: &mut dyn Meta,
    attempt: &AttemptKey,
    candidate: &Candidate,
    staging_rel: &str,
    verdict: &Verdict,
    reconciliation: &Reconciliation,
) -> Result<TxnEnd<FinishedVerdict>> {
    let task = &attempt.task;
    meta.lock(Scope::Task(task))?;
    let run = meta.run(&task.dataset, &task.run)?.ok_or_else(|| unknown_run(&task.dataset, &task.run))?;
    let mut record = meta.attempt(attempt)?.ok_or_else(|| unknown_attempt(attempt))?;
    if record.staging_rel != staging_rel {
        return Ok(TxnEnd::Abort(FinishedVerdict::StagingElsewhere));
    }
    let for_finish = attempts::RunForFinish { snapshot: &run.snapshot, has_grain: run.grain.is_some() };
    if attempts::finish(attempt, candidate, for_finish, record.abandoned_at_ms, record.candidate.as_ref())? == attempts::Finish::Record {
        record.candidate = Some(candidate.clone());
    }
    match attempts::store_verdict(record.verdict.as_ref(), record.candidate.as_ref(), candidate) {
        // Only an identical candidate recorded before gets here: nothing was written.
        StoreVerdict::Stands(stored) => return Ok(TxnEnd::Abort(FinishedVerdict::Stored(stored.clone()))),
        StoreVerdict::CandidateChanged => {
            return Err(corrupted(ATTEMPTS, &attempt_key(attempt), "candidate changed after it was recorded"));
        }
        StoreVerdict::Store => {}
    }
    write_verdict(meta, attempt, record, run.published_generation.is_some(), verdict, reconciliation)?;
    Ok(TxnEnd::Commit(FinishedVerdict::Stored(verdict.clone())))
}

/// Writes the attempt's `record` with `verdict` and its figures, and moves the task's accepted
/// attempt if the verdict makes this one the lowest valid (unless the run is `published`).
fn write_verdict(
    meta: &mut dyn Meta,
    attempt: &AttemptKey,
    mut record: AttemptRecord,
    published: bool,
    verdict: &Verdict,
    reconciliation: &Reconciliation,
) -> Result<()> {
    let current = meta.accepted(&attempt.task)?;
    record.verdict = Some(verdict.clone());
    record.reconciliation = Some(reconciliation.clone());
    meta.put_attempt(attempt, &record)?;
    if let Some(accepted) = accept::accepted_update(published, current, attempt.attempt, verdict.is_valid()) {
        meta.put_accepted(&attempt.task, accepted)?;
    }
    Ok(())
}

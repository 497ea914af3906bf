//! Storing a verdict.

use super::{attempt_key, corrupted, unknown_attempt, unknown_run};
use crate::error::Result;
use crate::grain::Reconciliation;
use crate::meta::{Meta, Scope, TxnEnd};
use crate::model::{AttemptKey, Candidate, Verdict};
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
    let mut record = meta.attempt(attempt)?.ok_or_else(|| unknown_attempt(attempt))?;
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
    let current = meta.accepted(task)?;
    record.verdict = Some(verdict.clone());
    record.reconciliation = Some(reconciliation.clone());
    meta.put_attempt(attempt, &record)?;
    if let Some(accepted) = accept::accepted_update(run.published_generation.is_some(), current, attempt.attempt, verdict.is_valid()) {
        meta.put_accepted(task, accepted)?;
    }
    Ok(TxnEnd::Commit(verdict.clone()))
}

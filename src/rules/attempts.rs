//! An attempt's lifecycle: begin, heartbeat, the lease, finish, and the finality of a verdict.
//!
//! Pure: each function takes what the operation read (the run's publication and snapshot,
//! the task's next number, the attempt's record fields) and the caller's clock reading, and
//! says what to write or why not. The operation writes what it decided in the same
//! transaction it read in.
//!
//! Invariant: an attempt recorded abandoned never finishes, renews its lease or is validated
//! (cleanup counts its files as garbage from then on); a published run takes no new attempt
//! and renews no lease; a recorded candidate and a stored verdict never change.

use crate::error::{Error, Result};
use crate::model::{AttemptKey, Candidate, TaskKey, Verdict};

/// The number a begin takes and the task's next number after it. A published run takes no new
/// attempts.
pub(crate) fn begin(task: &TaskKey, published_generation: Option<u64>, next_attempt: u32) -> Result<(u32, u32)> {
    refuse_if_published(task, published_generation)?;
    let next = next_attempt.checked_add(1).ok_or_else(|| Error::invalid("task", &task.partition, "has used every attempt number"))?;
    Ok((next_attempt, next))
}

/// Refuses a change to an attempt of a published run (`published_generation`): its accepted
/// attempts are frozen, and published content changes only by a new run or a rollback.
pub(crate) fn refuse_if_published(task: &TaskKey, published_generation: Option<u64>) -> Result<()> {
    match published_generation {
        Some(generation) => Err(Error::RunPublished { dataset: task.dataset.clone(), run: task.run.clone(), generation }),
        None => Ok(()),
    }
}

/// What abandoning an attempt explicitly does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Abandon {
    /// Record it abandoned now.
    Abandon,
    /// It was recorded abandoned at this time already: nothing to write.
    AlreadyAbandoned(u64),
}

/// Decides an explicit abandonment of an attempt, given its record's abandonment and whether
/// it finished.
///
/// # Errors
/// [`Error::AttemptState`] for a finished attempt (its candidate is recorded: it is
/// invalidated, not abandoned).
pub(crate) fn abandon(attempt: &AttemptKey, abandoned_at_ms: Option<u64>, finished: bool) -> Result<Abandon> {
    if let Some(at) = abandoned_at_ms {
        return Ok(Abandon::AlreadyAbandoned(at));
    }
    if finished {
        return Err(Error::AttemptState {
            partition: attempt.task.partition.clone(),
            attempt: attempt.attempt,
            state: "finished",
            operation: "abandoning",
            needed: "an unfinished attempt (invalidate a finished one instead)",
        });
    }
    Ok(Abandon::Abandon)
}

/// What an operator's invalidation of an attempt does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Invalidate {
    /// Store an invalid verdict and recompute the accepted attempt.
    Invalidate,
    /// It is invalid already: nothing to write.
    AlreadyInvalid,
}

/// Decides an invalidation of an attempt of an unpublished run ([`refuse_if_published`]),
/// given its record.
///
/// # Errors
/// [`Error::AttemptAbandoned`]; [`Error::AttemptState`] if it has not finished (it is
/// abandoned, not invalidated).
pub(crate) fn invalidate(
    attempt: &AttemptKey,
    abandoned_at_ms: Option<u64>,
    finished: bool,
    verdict: Option<&Verdict>,
) -> Result<Invalidate> {
    refuse_if_abandoned(attempt, abandoned_at_ms)?;
    match (finished, verdict) {
        (false, _) => Err(Error::AttemptState {
            partition: attempt.task.partition.clone(),
            attempt: attempt.attempt,
            state: "running",
            operation: "invalidation",
            needed: "a finished attempt (abandon a running one instead)",
        }),
        (true, Some(Verdict::Invalid(_))) => Ok(Invalidate::AlreadyInvalid),
        (true, _) => Ok(Invalidate::Invalidate),
    }
}

/// Refuses any further progress of an attempt recorded abandoned: a finish or heartbeat that
/// arrives after abandonment must not revive it, because cleanup treats an abandoned attempt's
/// files as garbage from then on.
pub(crate) fn refuse_if_abandoned(attempt: &AttemptKey, abandoned_at_ms: Option<u64>) -> Result<()> {
    match abandoned_at_ms {
        Some(abandoned_at_ms) => Err(Error::AttemptAbandoned {
            dataset: attempt.task.dataset.clone(),
            run: attempt.task.run.clone(),
            partition: attempt.task.partition.clone(),
            attempt: attempt.attempt,
            abandoned_at_ms,
        }),
        None => Ok(()),
    }
}

/// The new last sign of life of a running attempt that sends a heartbeat at `now_ms`. A
/// clock that stepped back never shortens a lease already granted.
///
/// # Errors
/// [`Error::AttemptAbandoned`]; [`Error::RunPublished`] (a try still beating for a published
/// run is a leftover whose output can never be used); [`Error::AttemptState`] once finished.
pub(crate) fn heartbeat(
    attempt: &AttemptKey,
    abandoned_at_ms: Option<u64>,
    published_generation: Option<u64>,
    finished: bool,
    heartbeat_at_ms: u64,
    now_ms: u64,
) -> Result<u64> {
    refuse_if_abandoned(attempt, abandoned_at_ms)?;
    let task = &attempt.task;
    refuse_if_published(task, published_generation)?;
    if finished {
        return Err(Error::AttemptState {
            partition: task.partition.clone(),
            attempt: attempt.attempt,
            state: "finished",
            operation: "a heartbeat",
            needed: "a running attempt",
        });
    }
    Ok(heartbeat_at_ms.max(now_ms))
}

/// Whether an attempt's lease ran out at `now_ms`: not finished, not yet recorded abandoned,
/// and no sign of life for longer than the lease. Such an attempt is recorded abandoned.
pub(crate) fn lease_expired(finished: bool, abandoned: bool, heartbeat_at_ms: u64, lease_ms: u64, now_ms: u64) -> bool {
    !finished && !abandoned && heartbeat_at_ms.saturating_add(lease_ms) < now_ms
}

/// What finishing an attempt with a candidate does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// Record the candidate.
    Record,
    /// The identical candidate is recorded already: nothing to write.
    AlreadyRecorded,
}

/// The run an attempt belongs to, as finishing it needs to know it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunForFinish<'a> {
    pub(crate) snapshot: &'a str,
    pub(crate) has_grain: bool,
}

/// Decides a finish of `attempt` with `candidate`, given its run and what its record holds
/// (`abandoned_at_ms`, the candidate `recorded` already).
///
/// # Errors
/// [`Error::AttemptAbandoned`]; [`Error::ForeignSnapshot`] if the candidate read another
/// snapshot than the run's; [`Error::InvalidInput`] if a run without a grain gets a candidate
/// without rows or digest; [`Error::CandidateConflict`] if another candidate is recorded.
pub(crate) fn finish(
    attempt: &AttemptKey,
    candidate: &Candidate,
    run: RunForFinish<'_>,
    abandoned_at_ms: Option<u64>,
    recorded: Option<&Candidate>,
) -> Result<Finish> {
    refuse_if_abandoned(attempt, abandoned_at_ms)?;
    let task = &attempt.task;
    if candidate.snapshot != run.snapshot {
        return Err(Error::ForeignSnapshot {
            run: task.run.clone(),
            partition: task.partition.clone(),
            attempt: attempt.attempt,
            expected: run.snapshot.to_owned(),
            got: candidate.snapshot.clone(),
        });
    }
    if !run.has_grain {
        // Without a grain the store has nothing to compute the figures from.
        for (figure, missing) in [("rows", candidate.rows.is_none()), ("digest", candidate.digest.is_none())] {
            if missing {
                return Err(Error::invalid(
                    "candidate",
                    &candidate.snapshot,
                    format!("reports no {figure}; run {:?} declares no grain, so the worker must report it", task.run),
                ));
            }
        }
    }
    match recorded {
        Some(existing) if existing == candidate => Ok(Finish::AlreadyRecorded),
        Some(existing) => Err(Error::CandidateConflict {
            partition: task.partition.clone(),
            attempt: attempt.attempt,
            detail: candidate_difference(existing, candidate),
        }),
        None => Ok(Finish::Record),
    }
}

fn candidate_difference(existing: &Candidate, new: &Candidate) -> String {
    use crate::error::figure;
    if existing.rows != new.rows {
        format!("rows {} recorded, {} now", figure(existing.rows), figure(new.rows))
    } else if existing.total != new.total {
        format!("total {} recorded, {} now", figure(existing.total), figure(new.total))
    } else if existing.digest != new.digest {
        format!("digest {} recorded, {} now", figure(existing.digest.as_deref()), figure(new.digest.as_deref()))
    } else {
        "the file list differs".to_owned()
    }
}

/// What validating an attempt starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToValidate {
    /// A verdict is stored: it is final, validating again returns it.
    Final(Verdict),
    /// The recorded candidate, to be checked against its files.
    Candidate(Candidate),
}

/// Decides what validating an attempt starts from, given its record's verdict, abandonment
/// and candidate (taken from the record, not copied).
///
/// # Errors
/// [`Error::AttemptAbandoned`] (without a verdict); [`Error::AttemptState`] if the attempt
/// has not finished.
pub(crate) fn to_validate(
    attempt: &AttemptKey,
    verdict: Option<Verdict>,
    abandoned_at_ms: Option<u64>,
    candidate: Option<Candidate>,
) -> Result<ToValidate> {
    if let Some(verdict) = verdict {
        return Ok(ToValidate::Final(verdict));
    }
    refuse_if_abandoned(attempt, abandoned_at_ms)?;
    match candidate {
        Some(candidate) => Ok(ToValidate::Candidate(candidate)),
        None => Err(Error::AttemptState {
            partition: attempt.task.partition.clone(),
            attempt: attempt.attempt,
            state: "running",
            operation: "validation",
            needed: "a finished attempt",
        }),
    }
}

/// What storing a verdict decided from `candidate` does, given what the attempt's record
/// holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreVerdict<'r> {
    /// Another validator stored a verdict first: that one stands (verdicts are final).
    Stands(&'r Verdict),
    /// Store the new verdict.
    Store,
    /// The recorded candidate is not the one the verdict was decided from: recorded
    /// candidates never change, so the record is damaged.
    CandidateChanged,
}

/// Decides the write of a verdict decided from `candidate` on an attempt whose record now
/// holds `stored` and `recorded`.
pub(crate) fn store_verdict<'r>(stored: Option<&'r Verdict>, recorded: Option<&Candidate>, candidate: &Candidate) -> StoreVerdict<'r> {
    match stored {
        Some(verdict) => StoreVerdict::Stands(verdict),
        None if recorded != Some(candidate) => StoreVerdict::CandidateChanged,
        None => StoreVerdict::Store,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GateFailure;

    fn key() -> AttemptKey {
        TaskKey::new("d", "r", "p=1").attempt(2)
    }

    fn candidate(snapshot: &str) -> Candidate {
        Candidate { snapshot: snapshot.into(), rows: Some(1), total: None, digest: Some("sha256:00".into()), files: Vec::new() }
    }

    const RUN: RunForFinish<'static> = RunForFinish { snapshot: "s@1", has_grain: false };

    #[test]
    fn a_published_run_takes_no_attempt_and_numbers_never_wrap() {
        let task = key().task;
        assert_eq!(begin(&task, None, 1).unwrap(), (1, 2));
        assert!(matches!(begin(&task, Some(4), 1), Err(Error::RunPublished { generation: 4, .. })));
        assert!(matches!(begin(&task, None, u32::MAX), Err(Error::InvalidInput { .. })));
    }

    #[test]
    fn finishing_is_idempotent_and_refuses_abandoned_foreign_or_different_candidates() {
        let c = candidate("s@1");
        assert_eq!(finish(&key(), &c, RUN, None, None).unwrap(), Finish::Record);
        assert_eq!(finish(&key(), &c, RUN, None, Some(&c)).unwrap(), Finish::AlreadyRecorded);
        assert!(matches!(finish(&key(), &c, RUN, Some(9), None), Err(Error::AttemptAbandoned { abandoned_at_ms: 9, .. })));
        let foreign = candidate("s@2");
        assert!(matches!(finish(&key(), &foreign, RUN, None, None), Err(Error::ForeignSnapshot { .. })));
        let other = Candidate { rows: Some(2), ..c.clone() };
        let Err(Error::CandidateConflict { detail, .. }) = finish(&key(), &other, RUN, None, Some(&c)) else { panic!("no conflict") };
        assert_eq!(detail, "rows 1 recorded, 2 now");
        let no_digest = Candidate { digest: None, ..c.clone() };
        assert!(matches!(finish(&key(), &no_digest, RUN, None, None), Err(Error::InvalidInput { .. })));
        let with_grain = RunForFinish { has_grain: true, ..RUN };
        assert_eq!(finish(&key(), &no_digest, with_grain, None, None).unwrap(), Finish::Record);
    }

    #[test]
    fn the_lease_runs_out_only_for_an_unfinished_attempt_not_yet_abandoned() {
        assert!(lease_expired(false, false, 100, 50, 151));
        assert!(!lease_expired(false, false, 100, 50, 150), "expires after, not at, the lease's end");
        assert!(!lease_expired(true, false, 100, 50, 1_000));
        assert!(!lease_expired(false, true, 100, 50, 1_000));
        assert!(!lease_expired(false, false, u64::MAX, 50, 1_000), "no overflow");
    }

    #[test]
    fn a_heartbeat_never_moves_back_and_is_refused_once_abandoned_published_or_finished() {
        assert_eq!(heartbeat(&key(), None, None, false, 500, 400).unwrap(), 500);
        assert_eq!(heartbeat(&key(), None, None, false, 500, 600).unwrap(), 600);
        assert!(matches!(heartbeat(&key(), Some(1), Some(3), true, 0, 0), Err(Error::AttemptAbandoned { .. })));
        assert!(matches!(heartbeat(&key(), None, Some(3), true, 0, 0), Err(Error::RunPublished { .. })));
        assert!(matches!(heartbeat(&key(), None, None, true, 0, 0), Err(Error::AttemptState { state: "finished", .. })));
    }

    #[test]
    fn abandoning_is_idempotent_and_only_for_unfinished_attempts_and_invalidating_only_for_finished_ones() {
        assert_eq!(abandon(&key(), None, false).unwrap(), Abandon::Abandon);
        assert_eq!(abandon(&key(), Some(7), true).unwrap(), Abandon::AlreadyAbandoned(7));
        assert!(matches!(abandon(&key(), None, true), Err(Error::AttemptState { state: "finished", .. })));
        let invalid = Verdict::Invalid(vec![GateFailure::RowsMismatch { expected: 1, got: 2 }]);
        assert_eq!(invalidate(&key(), None, true, Some(&Verdict::Valid)).unwrap(), Invalidate::Invalidate);
        assert_eq!(invalidate(&key(), None, true, None).unwrap(), Invalidate::Invalidate);
        assert_eq!(invalidate(&key(), None, true, Some(&invalid)).unwrap(), Invalidate::AlreadyInvalid);
        assert!(matches!(invalidate(&key(), None, false, None), Err(Error::AttemptState { state: "running", .. })));
        assert!(matches!(invalidate(&key(), Some(3), false, None), Err(Error::AttemptAbandoned { .. })));
        assert!(matches!(refuse_if_published(&key().task, Some(2)), Err(Error::RunPublished { generation: 2, .. })));
    }

    #[test]
    fn a_stored_verdict_is_final() {
        let c = candidate("s@1");
        let invalid = Verdict::Invalid(vec![GateFailure::RowsMismatch { expected: 1, got: 2 }]);
        assert_eq!(to_validate(&key(), Some(invalid.clone()), Some(5), Some(c.clone())).unwrap(), ToValidate::Final(invalid));
        assert!(matches!(to_validate(&key(), None, Some(5), Some(c.clone())), Err(Error::AttemptAbandoned { .. })));
        assert!(matches!(to_validate(&key(), None, None, None), Err(Error::AttemptState { state: "running", .. })));
        assert_eq!(to_validate(&key(), None, None, Some(c.clone())).unwrap(), ToValidate::Candidate(c.clone()));
        assert_eq!(store_verdict(Some(&Verdict::Valid), Some(&c), &c), StoreVerdict::Stands(&Verdict::Valid));
        assert_eq!(store_verdict(None, Some(&c), &c), StoreVerdict::Store);
        assert_eq!(store_verdict(None, None, &c), StoreVerdict::CandidateChanged);
    }
}

//! An operator's (or a scheduler's) explicit decisions about one attempt: abandon it at once,
//! or invalidate it after its files were lost.
//!
//! Both are recorded in one write transaction. The decisions themselves are the pure rules:
//! abandonment makes the attempt's state `Abandoned` (absorbing, see `rules::cleanup`), and
//! the task's accepted attempt after an invalidation is `rules::accept::lowest_valid` over the
//! task's verdicts.

use super::retention::{attempt_key_bytes, check_attempt_key, check_rollback_text, unknown_attempt};
use super::tables::{get, put, scan};
use super::{Store, TxnEnd, now_ms};
use crate::error::{Error, Result};
use crate::model::{AbandonOutcome, AttemptKey, GateFailure, InvalidateOutcome, Verdict};
use crate::records::{AcceptedRecord, AttemptRecord, RunRecord};
use crate::rules;
use crate::schema::{self, ACCEPTED, ATTEMPTS, RUNS, key, prefix, prefix_end};

fn open<'t>(txn: &'t redb::WriteTransaction, def: schema::Def) -> Result<redb::Table<'t, &'static [u8], &'static [u8]>> {
    txn.open_table(def.def()).map_err(|e| Error::storage("opening a table", e))
}

impl Store {
    /// Records one unfinished attempt abandoned now, without waiting for its lease: for a try
    /// the scheduler knows is dead (killed by a timeout, say, from an `on_retry_callback`).
    /// From then on its heartbeat, finish and validation are refused
    /// ([`Error::AttemptAbandoned`]) and cleanup may delete its files once they are older than
    /// the age threshold. Abandoning it again writes nothing.
    ///
    /// # Errors
    /// [`Error::UnknownAttempt`]; [`Error::AttemptState`] if it has finished (its candidate is
    /// recorded: invalidate it with [`Store::invalidate_attempt`] instead); storage errors.
    pub fn abandon_attempt(&self, attempt: &AttemptKey) -> Result<AbandonOutcome> {
        check_attempt_key(attempt)?;
        self.write("abandoning an attempt", |txn| {
            let mut attempts = open(txn, ATTEMPTS)?;
            let attempt_key = attempt_key_bytes(attempt);
            let mut record: AttemptRecord = get(&attempts, ATTEMPTS, &attempt_key)?.ok_or_else(|| unknown_attempt(attempt))?;
            if let Some(abandoned_at_ms) = record.abandoned_at_ms {
                return Ok(TxnEnd::Abort(AbandonOutcome::AlreadyAbandoned { abandoned_at_ms }));
            }
            if record.candidate.is_some() {
                return Err(Error::AttemptState {
                    partition: attempt.task.partition.clone(),
                    attempt: attempt.attempt,
                    state: "finished",
                    operation: "abandoning",
                    needed: "an unfinished attempt (invalidate a finished one instead)",
                });
            }
            let abandoned_at_ms = now_ms();
            record.abandoned_at_ms = Some(abandoned_at_ms);
            put(&mut attempts, &attempt_key, &record)?;
            tracing::info!(attempt = %attempt, "attempt abandoned explicitly");
            Ok(TxnEnd::Commit(AbandonOutcome::Abandoned { abandoned_at_ms }))
        })
    }

    /// Invalidates a finished attempt whose files were lost (or that an operator must not let
    /// publish for another reason): its verdict becomes invalid with
    /// [`GateFailure::Invalidated`] (`actor`, `reason` and the time recorded), and the task's
    /// accepted attempt becomes the lowest valid attempt left, or none, so that the next valid
    /// attempt, or a new one, becomes accepted and the run can publish. Invalidating an
    /// invalid attempt writes nothing.
    ///
    /// This is the one way a verdict changes after it was stored. The accepted index stays
    /// what the rule says, the lowest valid attempt (`rules::accept::lowest_valid`), recomputed
    /// from the task's attempts (a scan of that task only).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty or overlong actor or reason; [`Error::UnknownRun`],
    /// [`Error::UnknownAttempt`]; [`Error::RunPublished`] if its run is published (published
    /// content changes by a new run or a rollback); [`Error::AttemptState`] if it has not
    /// finished (abandon it instead); storage errors.
    pub fn invalidate_attempt(&self, attempt: &AttemptKey, actor: &str, reason: &str) -> Result<InvalidateOutcome> {
        check_attempt_key(attempt)?;
        check_rollback_text("invalidation actor", actor)?;
        check_rollback_text("invalidation reason", reason)?;
        let task = &attempt.task;
        self.write("invalidating an attempt", |txn| {
            let runs = open(txn, RUNS)?;
            let mut attempts = open(txn, ATTEMPTS)?;
            let mut accepted = open(txn, ACCEPTED)?;
            let run: RunRecord = get(&runs, RUNS, &key(&[&task.dataset, &task.run]))?
                .ok_or_else(|| Error::UnknownRun { dataset: task.dataset.clone(), run: task.run.clone() })?;
            if let Some(generation) = run.published_generation {
                return Err(Error::RunPublished { dataset: task.dataset.clone(), run: task.run.clone(), generation });
            }
            let attempt_key = attempt_key_bytes(attempt);
            let mut record: AttemptRecord = get(&attempts, ATTEMPTS, &attempt_key)?.ok_or_else(|| unknown_attempt(attempt))?;
            crate::rules::attempts::refuse_if_abandoned(attempt, record.abandoned_at_ms)?;
            match (&record.candidate, &record.verdict) {
                (None, _) => {
                    return Err(Error::AttemptState {
                        partition: task.partition.clone(),
                        attempt: attempt.attempt,
                        state: "running",
                        operation: "invalidation",
                        needed: "a finished attempt (abandon a running one instead)",
                    });
                }
                (Some(_), Some(Verdict::Invalid(_))) => return Ok(TxnEnd::Abort(InvalidateOutcome::AlreadyInvalid)),
                (Some(_), _) => {}
            }
            // Every read before the first write.
            let task_key = key(&[&task.dataset, &task.run, &task.partition]);
            let accepted_before = get::<AcceptedRecord>(&accepted, ACCEPTED, &task_key)?.map(|r| r.attempt);
            let attempt_prefix = prefix(&[&task.dataset, &task.run, &task.partition]);
            let mut verdicts = Vec::new();
            scan::<AttemptRecord>(&attempts, ATTEMPTS, &attempt_prefix, &prefix_end(&attempt_prefix), |raw, other| {
                let number = schema::trailing_u32(raw).ok_or_else(|| super::tables::corrupted(ATTEMPTS, raw, "malformed attempt key"))?;
                let valid = number != attempt.attempt && other.verdict.as_ref().is_some_and(Verdict::is_valid);
                verdicts.push((number, valid));
                Ok(true)
            })?;
            let accepted_after = rules::accept::lowest_valid(verdicts);
            record.verdict = Some(Verdict::Invalid(vec![GateFailure::Invalidated {
                actor: actor.to_owned(),
                reason: reason.to_owned(),
                invalidated_at_ms: now_ms(),
            }]));
            put(&mut attempts, &attempt_key, &record)?;
            match accepted_after {
                Some(next) if accepted_before != Some(next) => put(&mut accepted, &task_key, &AcceptedRecord { attempt: next })?,
                Some(_) => {}
                None => {
                    accepted.remove(task_key.as_slice()).map_err(|e| Error::storage("removing an accepted attempt", e))?;
                }
            }
            tracing::warn!(attempt = %attempt, actor, reason, ?accepted_before, ?accepted_after, "attempt invalidated by an operator");
            Ok(TxnEnd::Commit(InvalidateOutcome::Invalidated { accepted_before, accepted_after }))
        })
    }
}

#[cfg(test)]
mod tests {
    //! Stored numbers that would overflow when the store counts on: `Corrupted`, never a wrap
    //! or a panic.

    use super::*;
    use crate::lifecycle::CleanupOptions;
    use crate::model::{Candidate, FileCheck, PublishOptions, PublishOutcome, RunSpec, TaskKey, TaskSpec};
    use crate::records::{CleanupPlanRecord, PointerRecord};
    use crate::schema::{CLEANUP_PLANS, POINTERS};

    fn publish_one(store: &Store, run: &str) -> Result<PublishOutcome> {
        let spec = RunSpec {
            dataset: "ds".into(),
            run: run.into(),
            snapshot: run.into(),
            tasks: vec![TaskSpec { partition: "p".into(), expected_rows: 0, expected_total: None }],
            grain: None,
        };
        store.declare_run(&spec)?;
        let ticket = store.begin_attempt(&TaskKey::new("ds", run, "p"))?;
        let candidate = Candidate { snapshot: run.into(), rows: Some(0), total: None, digest: Some("d".into()), files: vec![] };
        store.finish_attempt(&ticket.key, &candidate)?;
        assert!(store.validate_attempt(&ticket.key, FileCheck::Size)?.is_valid());
        store.publish("ds", run, &PublishOptions::default())
    }

    #[test]
    fn counting_on_from_the_largest_stored_numbers_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("store.redb"), dir.path().join("staging")).unwrap();
        assert!(matches!(publish_one(&store, "r1").unwrap(), PublishOutcome::Published(_)));
        store
            .write("damaging the store", |txn| {
                put(&mut open(txn, POINTERS)?, &key(&["ds"]), &PointerRecord { generation: u64::MAX })?;
                let plan = CleanupPlanRecord {
                    created_at_ms: 0,
                    age_threshold_ms: u64::MAX,
                    attempt_lifetime_max_ms: 1,
                    forced: false,
                    candidates: vec![],
                    unknown: vec![],
                    kept: vec![],
                    unconsidered: vec![],
                };
                put(&mut open(txn, CLEANUP_PLANS)?, &u64::MAX.to_be_bytes(), &plan)?;
                Ok(TxnEnd::Commit(()))
            })
            .unwrap();
        let corrupted = |result: Result<()>| matches!(result, Err(Error::Corrupted { .. }));
        assert!(corrupted(publish_one(&store, "r2").map(|_| ())), "next generation after u64::MAX");
        assert!(corrupted(store.rollback("ds", 1, "alice", "test").map(|_| ())), "rollback after u64::MAX");
        assert!(corrupted(store.plan_cleanup(&CleanupOptions::default()).map(|_| ())), "plan id after u64::MAX");
    }
}

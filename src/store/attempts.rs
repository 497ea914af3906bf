//! An operator's (or a scheduler's) explicit decisions about one attempt: abandon it at once,
//! or invalidate it after its files were lost.
//!
//! Both are recorded in one write transaction. The decisions themselves are the pure rules:
//! abandonment makes the attempt's state `Abandoned` (absorbing, see `rules::cleanup`), and
//! the task's accepted attempt after an invalidation is `rules::accept::lowest_valid` over the
//! task's verdicts.

use super::Store;
use super::retention::{check_attempt_key, check_rollback_text};
use crate::error::Result;
use crate::model::{AbandonOutcome, AttemptKey, InvalidateOutcome};
use crate::ops;

impl Store {
    /// Records one unfinished attempt abandoned now, without waiting for its lease: for a try
    /// the scheduler knows is dead (killed by a timeout, say, from an `on_retry_callback`).
    /// From then on its heartbeat, finish and validation are refused
    /// ([`Error::AttemptAbandoned`](crate::Error::AttemptAbandoned)) and cleanup may delete its files once they are older than
    /// the age threshold. Abandoning it again writes nothing.
    ///
    /// # Errors
    /// [`Error::UnknownAttempt`](crate::Error::UnknownAttempt); [`Error::AttemptState`](crate::Error::AttemptState) if it has finished (its candidate is
    /// recorded: invalidate it with [`Store::invalidate_attempt`] instead); storage errors.
    pub fn abandon_attempt(&self, attempt: &AttemptKey) -> Result<AbandonOutcome> {
        check_attempt_key(attempt)?;
        self.write("abandoning an attempt", |meta| {
            let now = meta.now_ms();
            ops::attempts::abandon(meta, attempt, now)
        })
    }

    /// Invalidates a finished attempt whose files were lost (or that an operator must not let
    /// publish for another reason): its verdict becomes invalid with
    /// [`GateFailure::Invalidated`](crate::GateFailure::Invalidated) (`actor`, `reason` and the time recorded), and the task's
    /// accepted attempt becomes the lowest valid attempt left, or none, so that the next valid
    /// attempt, or a new one, becomes accepted and the run can publish. Invalidating an
    /// invalid attempt writes nothing.
    ///
    /// This is the one way a verdict changes after it was stored. The accepted index stays
    /// what the rule says, the lowest valid attempt (`rules::accept::lowest_valid`), recomputed
    /// from the task's attempts (a scan of that task only).
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) for an empty or overlong actor or reason; [`Error::UnknownRun`](crate::Error::UnknownRun),
    /// [`Error::UnknownAttempt`](crate::Error::UnknownAttempt); [`Error::RunPublished`](crate::Error::RunPublished) if its run is published (published
    /// content changes by a new run or a rollback); [`Error::AttemptState`](crate::Error::AttemptState) if it has not
    /// finished (abandon it instead); storage errors.
    pub fn invalidate_attempt(&self, attempt: &AttemptKey, actor: &str, reason: &str) -> Result<InvalidateOutcome> {
        check_attempt_key(attempt)?;
        check_rollback_text("invalidation actor", actor)?;
        check_rollback_text("invalidation reason", reason)?;
        self.write("invalidating an attempt", |meta| {
            let now = meta.now_ms();
            ops::attempts::invalidate(meta, attempt, actor, reason, now)
        })
    }
}

#[cfg(test)]
mod tests {
    //! Stored numbers that would overflow when the store counts on: `Corrupted`, never a wrap
    //! or a panic.

    use super::super::TxnEnd;
    use super::*;
    use crate::error::Error;
    use crate::lifecycle::CleanupOptions;
    use crate::model::{Candidate, FileCheck, PublishOptions, PublishOutcome, RunSpec, TaskKey, TaskSpec};
    use crate::records::CleanupPlanRecord;

    fn publish_one(store: &Store, run: &str) -> Result<PublishOutcome> {
        let spec = RunSpec {
            dataset: "ds".into(),
            run: run.into(),
            snapshot: run.into(),
            tasks: vec![TaskSpec { partition: "p".into(), expected_rows: 0, expected_total: None }],
            grain: None,
            trust_reported_figures: true,
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
            .write("damaging the store", |meta| {
                meta.move_pointer("ds", 1, u64::MAX)?;
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
                meta.put_cleanup_plan(u64::MAX, &plan)?;
                Ok(TxnEnd::Commit(()))
            })
            .unwrap();
        let corrupted = |result: Result<()>| matches!(result, Err(Error::Corrupted { .. }));
        assert!(corrupted(publish_one(&store, "r2").map(|_| ())), "next generation after u64::MAX");
        assert!(corrupted(store.rollback("ds", 1, "alice", "test").map(|_| ())), "rollback after u64::MAX");
        assert!(corrupted(store.plan_cleanup(&CleanupOptions::default()).map(|_| ())), "plan id after u64::MAX");
    }
}

//! Lifecycle operations: attempt leases, rollback and expiring generations (cleanup of staging
//! files is `cleanup.rs`).
//!
//! Each operation that changes the store does so in one transaction. The decisions are pure
//! rules (`rules::attempts`, `rules::retention`) and every operation is written once in
//! `ops/`; this module checks arguments, supplies the file work (expiry's view removal) and
//! runs them.

use super::Store;
use crate::error::{Error, Result};
use crate::lifecycle::{AttemptLease, ExpireReport, RetentionPolicy, RollbackOutcome, RunMode};
use crate::model::AttemptKey;
use crate::ops;
use crate::rules::ids;

/// Longest rollback actor or reason, in bytes.
const ROLLBACK_TEXT_BYTES_MAX: usize = 4096;

pub(crate) fn check_attempt_key(attempt: &AttemptKey) -> Result<()> {
    ids::check_name("dataset", &attempt.task.dataset)?;
    ids::check_name("run id", &attempt.task.run)?;
    ids::check_partition(&attempt.task.partition)
}

pub(crate) fn check_rollback_text(what: &'static str, value: &str) -> Result<()> {
    if value.trim().is_empty() {
        return Err(Error::invalid(what, value, "must not be empty"));
    }
    if value.len() > ROLLBACK_TEXT_BYTES_MAX {
        return Err(Error::invalid(what, value, format!("is longer than {ROLLBACK_TEXT_BYTES_MAX} bytes")));
    }
    if value.chars().any(|c| c.is_control() && c != '\n') {
        return Err(Error::invalid(what, value, "must not contain control characters"));
    }
    Ok(())
}

impl Store {
    /// The attempt lease in force on this handle, in milliseconds: the longest of this
    /// handle's [`crate::StoreOptions::attempt_lifetime_max`] and every earlier writer's, as
    /// recorded in the store.
    pub fn attempt_lifetime_max_ms(&self) -> u64 {
        self.attempt_lifetime_max_ms
    }

    /// Renews a running attempt's lease: its last sign of life becomes now, so it is not
    /// abandoned before now plus the attempt lifetime. A heartbeat (or a finish) that arrives
    /// after the lease ran out but before [`Store::abandon_expired_attempts`] recorded the
    /// attempt abandoned still succeeds: the recorded abandonment, not the clock, is the fence
    /// that cleanup relies on.
    ///
    /// # Errors
    /// [`Error::UnknownAttempt`]; [`Error::AttemptAbandoned`] if it was already recorded
    /// abandoned (the worker must stop: its output will never be used);
    /// [`Error::AttemptState`] if it has finished; [`Error::RunPublished`] if its run is
    /// published (the worker must stop: its output will never be used); storage errors.
    pub fn heartbeat(&self, attempt: &AttemptKey) -> Result<AttemptLease> {
        check_attempt_key(attempt)?;
        let lease_ms = self.attempt_lifetime_max_ms;
        self.write_grouped("renewing an attempt's lease", |meta| {
            let now = meta.now_ms();
            ops::attempts::heartbeat(meta, attempt, now, lease_ms)
        })
    }

    /// Records every unfinished attempt whose lease ran out (no finish and no heartbeat for
    /// longer than the attempt lifetime) as abandoned, in one transaction, and returns them.
    /// The candidates are found in a read (every attempt decoded, outside the writer); the
    /// write re-reads each by key and abandons it only if its lease has still run out by the
    /// write's clock, so an attempt that finished or sent a heartbeat meanwhile is left alone.
    /// From then on the attempt cannot finish ([`Error::AttemptAbandoned`]) and cleanup may
    /// delete its files once they are older than the age threshold. In a dry run (the
    /// default of [`RunMode`]) nothing is recorded and the attempts that would be abandoned
    /// are returned.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn abandon_expired_attempts(&self, mode: RunMode) -> Result<Vec<AttemptKey>> {
        let lifetime_ms = self.attempt_lifetime_max_ms;
        self.whole_call(|| {
            // The candidates come from a read, outside the writer (one pass decoding every
            // attempt); the write re-checks each by key, at its own clock.
            let candidates = self.snapshot()?.read("finding expired attempts", |meta| {
                let now = meta.now_ms();
                ops::attempts::expired(meta, lifetime_ms, now)
            })?;
            if mode != RunMode::Execute || candidates.is_empty() {
                return Ok(candidates);
            }
            self.write("abandoning expired attempts", |meta| {
                let now = meta.now_ms();
                ops::attempts::abandon_expired(meta, &candidates, lifetime_ms, now)
            })
        })
    }

    /// Makes generation `to` of `dataset` current again, as a new generation recorded in the
    /// history with its kind [`GenerationKind::Rollback`](crate::GenerationKind::Rollback) (the restored generation, `actor`
    /// and `reason`; its run and snapshot are those of the restored generation). One write
    /// transaction: version entries are written only for the partitions whose content differs
    /// between the current generation and `to` (a removal marker for a partition `to` did not
    /// have), then the pointer moves.
    ///
    /// Side effects are not touched: effects already emitted stay emitted and nothing becomes
    /// ready again, because a rollback publishes no run.
    ///
    /// A generation that expired, never existed or is already current is refused as a value
    /// ([`RollbackOutcome::Refused`]); nothing is written then.
    ///
    /// With views, `current` then moves to a view of the restored content (built as
    /// `v<new generation>`; a partition the rollback removed is absent from it).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad dataset name, an empty or overlong actor or reason;
    /// storage and corruption errors; [`Error::ViewLagging`] if the rollback committed but the
    /// view could not follow.
    pub fn rollback(&self, dataset: &str, to: u64, actor: &str, reason: &str) -> Result<RollbackOutcome> {
        let outcome = self.rollback_commit(dataset, to, actor, reason)?;
        if let RollbackOutcome::RolledBack(generation) = &outcome {
            self.view_follows(dataset, generation.number)?;
        }
        Ok(outcome)
    }

    fn rollback_commit(&self, dataset: &str, to: u64, actor: &str, reason: &str) -> Result<RollbackOutcome> {
        ids::check_name("dataset", dataset)?;
        check_rollback_text("rollback actor", actor)?;
        check_rollback_text("rollback reason", reason)?;
        self.write("rolling back", |meta| {
            let now = meta.now_ms();
            ops::lifecycle::rollback(meta, dataset, to, actor, reason, now)
        })
    }

    /// Expires the generations of `dataset` that `policy` does not retain, in one transaction:
    /// their history records go, and so do the partition version entries no retained
    /// generation can see (superseded at or before the oldest retained generation). The
    /// current generation is never expired; expired generations cannot be rolled back to, and
    /// the files only they held become eligible for cleanup. In a dry run (the default of
    /// [`RunMode`]) the report says what would go and nothing changes.
    ///
    /// With views, the views of the expired generations are taken away inside the expiry,
    /// before it commits (each renamed to a leftover name, the renames synced), so no reader
    /// reaches them once it returns; `current` is first brought up to date, and the view it
    /// names is never removed. Their trees are deleted afterwards on a thread of their own
    /// (closing the store waits for it; a crash leaves leftovers the next view sync removes).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad dataset name; storage and corruption errors; view
    /// errors (the expiry then changed nothing in the store).
    pub fn expire_generations(&self, dataset: &str, policy: &RetentionPolicy, mode: RunMode) -> Result<ExpireReport> {
        ids::check_name("dataset", dataset)?;
        if mode == RunMode::Execute {
            // `current` must name the current generation's view before older views can go: the
            // check an open makes, not `view sync`'s full one (which reads every retained
            // generation's files and table versions).
            self.sync_view_checking(dataset, crate::views::Check::CurrentManifest)?;
        }
        self.write("expiring generations", |meta| {
            // Views of the expired generations go first: once this commits, their files may
            // become cleanup candidates. A failure there aborts the expiry.
            let mut remove_views = |expired: &[u64]| match self.views() {
                Some(views) => views.remove_expiring(dataset, expired),
                None => Ok(Vec::new()),
            };
            let now = meta.now_ms();
            ops::lifecycle::expire(meta, dataset, policy, mode, now, &mut remove_views)
        })
        .inspect(|report| {
            // The Delta table lets go of the expired versions (checkpoint, older log entries,
            // data files no retained version names) once the store no longer holds them; a
            // failure leaves that to the next sync, and the table reads as before meanwhile.
            if mode == RunMode::Execute
                && !report.expired.is_empty()
                && let Err(err) = self.sync_view_after_commit(dataset)
            {
                tracing::warn!(dataset, error = %err, "the Delta table keeps the expired versions until the next view sync");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    //! Abandonment finds its candidates in a read and re-checks each by key in the write.

    use std::time::Duration;

    use super::*;
    use crate::model::{RunSpec, TaskKey, TaskSpec};
    use crate::store::StoreOptions;

    #[test]
    fn an_attempt_renewed_after_the_read_is_not_abandoned() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions { attempt_lifetime_max: Some(Duration::from_millis(200)), ..StoreOptions::default() };
        let store = Store::open_with_options(dir.path().join("store.redb"), dir.path().join("staging"), &options).unwrap();
        let spec = RunSpec {
            dataset: "ds".into(),
            run: "r1".into(),
            snapshot: "snap".into(),
            tasks: ["a", "b"].iter().map(|p| TaskSpec { partition: (*p).into(), expected_rows: 0, expected_total: None }).collect(),
            grain: None,
            trust_reported_figures: true,
        };
        store.declare_run(&spec).unwrap();
        let silent = store.begin_attempt(&TaskKey::new("ds", "r1", "a")).unwrap();
        let renewed = store.begin_attempt(&TaskKey::new("ds", "r1", "b")).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let lease_ms = store.attempt_lifetime_max_ms();
        let candidates = store.snapshot().unwrap().read("test", |meta| {
            let now = meta.now_ms();
            ops::attempts::expired(meta, lease_ms, now)
        });
        assert_eq!(candidates.unwrap(), vec![silent.key.clone(), renewed.key.clone()], "both leases ran out");
        // Between the read and the write, one of them sends a heartbeat.
        store.heartbeat(&renewed.key).unwrap();
        let abandoned = store
            .write("abandoning expired attempts", |meta| {
                let now = meta.now_ms();
                ops::attempts::abandon_expired(meta, &[silent.key.clone(), renewed.key.clone()], lease_ms, now)
            })
            .unwrap();
        assert_eq!(abandoned, vec![silent.key.clone()], "the renewed attempt is re-checked and left alone");
        let snapshot = store.snapshot().unwrap();
        assert!(snapshot.attempt(&silent.key).unwrap().unwrap().abandoned_at_ms.is_some());
        assert_eq!(snapshot.attempt(&renewed.key).unwrap().unwrap().abandoned_at_ms, None);
        // The public call agrees: nothing left to abandon until the renewed lease runs out.
        assert!(store.abandon_expired_attempts(RunMode::Execute).unwrap().is_empty());
        // A candidate that no longer exists is skipped, not an error.
        let gone = TaskKey::new("ds", "r1", "a").attempt(9);
        let none = store
            .write("abandoning", |meta| {
                let now = meta.now_ms();
                ops::attempts::abandon_expired(meta, std::slice::from_ref(&gone), lease_ms, now)
            })
            .unwrap();
        assert!(none.is_empty());
    }
}

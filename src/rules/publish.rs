//! The publish decision: completeness, gates and determinism, over one run's tasks.
//!
//! Pure: the store reads, for each declared task, its accepted attempt (one keyed lookup), the
//! digest published earlier for the same snapshot (one keyed lookup) and, only for tasks with
//! no accepted attempt, the list of its attempts for the report. This function decides; the
//! store then writes exactly what the plan says, in the same transaction.

use crate::grain::Reconciliation;
use crate::model::{AttemptStatus, Candidate, GateFailure, NondeterminismOverride, PublishRefusal, RefusalReason, TaskRefusal, TaskSpec};
use crate::rules::validate::{Figures, FileObservation, expectation_failures, file_failures};

/// A task's accepted attempt, its candidate and its verdict's figures.
#[derive(Debug, Clone)]
pub(crate) struct Accepted {
    pub(crate) attempt: u32,
    pub(crate) candidate: Candidate,
    pub(crate) staging_rel: String,
    /// The figures stored with the valid verdict (computed ones for a run with a grain).
    pub(crate) reconciliation: Option<Reconciliation>,
}

impl Accepted {
    /// The figures the publish checks and records: the store's computed ones where it read
    /// the data, the reported ones otherwise. `(rows, total, digest)`.
    pub(crate) fn effective(&self) -> (Option<u64>, Option<i64>, Option<&str>) {
        match &self.reconciliation {
            Some(r) => r.effective(),
            None => (self.candidate.rows, self.candidate.total, self.candidate.digest.as_deref()),
        }
    }
}

/// One partition the publish writes, with the figures it records.
#[derive(Debug)]
pub(crate) struct PlannedPartition {
    pub(crate) partition: String,
    pub(crate) accepted: Accepted,
    pub(crate) rows: u64,
    pub(crate) total: Option<i64>,
    pub(crate) digest: String,
}

/// The digest the partition currently holds from the same (dataset, snapshot), or held last
/// when its current content comes from another snapshot: every publish and every rollback
/// that makes content of a snapshot current records its digest (an accepted override
/// included), so a superseded digest is never the reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PublishedDigest {
    pub(crate) digest: String,
    pub(crate) run: String,
    pub(crate) generation: u64,
}

/// What the store knows of one declared task when it publishes.
#[derive(Debug, Clone)]
pub(crate) struct TaskState {
    pub(crate) spec: TaskSpec,
    pub(crate) accepted: Option<Accepted>,
    /// Every attempt and its status; only gathered when `accepted` is `None`.
    pub(crate) attempts: Vec<(u32, AttemptStatus)>,
    pub(crate) published: Option<PublishedDigest>,
    /// What was seen just now of each file of the accepted candidate (`files_seen[i]` of
    /// `accepted.candidate.files[i]`), by size only.
    pub(crate) files_seen: Vec<FileObservation>,
}

/// What to write when the publish goes ahead.
#[derive(Debug)]
pub(crate) struct PublishPlan {
    /// One entry per declared task, in the order given.
    pub(crate) partitions: Vec<PlannedPartition>,
    /// Partitions whose digest to record in the published-digest index: the first publish of
    /// their snapshot, or an accepted override (the new content is what it now holds).
    pub(crate) digests_to_record: Vec<usize>,
    /// Set when digest mismatches were accepted by the caller's override.
    pub(crate) nondeterminism_accepted: Option<NondeterminismOverride>,
}

/// Decides whether the run may publish: every task has an accepted attempt, the accepted
/// candidate passes the expectation gates, its files are all still there with their reported
/// sizes, and its digest equals the digest the partition currently holds from the same input
/// snapshot (unless `accept_nondeterminism` gives a reason to accept it).
///
/// Invariant: `Ok` only if no task failed; the refusal lists every failing task, in order.
pub(crate) fn plan(
    dataset: &str,
    run: &str,
    run_snapshot: &str,
    tasks: Vec<TaskState>,
    accept_nondeterminism: Option<&str>,
) -> Result<PublishPlan, PublishRefusal> {
    let mut refusals = Vec::new();
    let mut mismatched = Vec::new();
    let mut partitions = Vec::with_capacity(tasks.len());
    let mut digests_to_record = Vec::new();
    for task in tasks {
        let Some(accepted) = task.accepted else {
            refusals
                .push(TaskRefusal { partition: task.spec.partition, reason: RefusalReason::NoAcceptedAttempt { attempts: task.attempts } });
            continue;
        };
        let (rows, total, digest) = accepted.effective();
        let figures = Figures { snapshot: &accepted.candidate.snapshot, rows, total };
        let mut failures = expectation_failures(run_snapshot, &task.spec, figures);
        if digest.is_none() {
            failures.push(GateFailure::FigureNotReported { figure: "digest".into() });
        }
        failures.extend(file_failures(&accepted.candidate.files, &task.files_seen));
        let (Some(rows), Some(digest), true) = (rows, digest.map(str::to_owned), failures.is_empty()) else {
            refusals
                .push(TaskRefusal { partition: task.spec.partition, reason: RefusalReason::Gate { attempt: accepted.attempt, failures } });
            continue;
        };
        match task.published {
            None => digests_to_record.push(partitions.len()),
            Some(published) if published.digest != digest => {
                mismatched.push(task.spec.partition.clone());
                digests_to_record.push(partitions.len());
                if accept_nondeterminism.is_none() {
                    refusals.push(TaskRefusal {
                        partition: task.spec.partition,
                        reason: RefusalReason::Nondeterministic {
                            attempt: accepted.attempt,
                            digest,
                            published_digest: published.digest,
                            published_run: published.run,
                            published_generation: published.generation,
                        },
                    });
                    continue;
                }
            }
            Some(_) => {}
        }
        partitions.push(PlannedPartition { partition: task.spec.partition, accepted, rows, total, digest });
    }
    if !refusals.is_empty() {
        return Err(PublishRefusal { dataset: dataset.to_owned(), run: run.to_owned(), tasks: refusals });
    }
    let nondeterminism_accepted = match accept_nondeterminism {
        Some(reason) if !mismatched.is_empty() => Some(NondeterminismOverride { reason: reason.to_owned(), partitions: mismatched }),
        _ => None,
    };
    Ok(PublishPlan { partitions, digests_to_record, nondeterminism_accepted })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(partition: &str, accepted: Option<u32>, digest: &str, published: Option<&str>) -> TaskState {
        TaskState {
            spec: TaskSpec { partition: partition.into(), expected_rows: 3, expected_total: Some(30) },
            accepted: accepted.map(|attempt| Accepted {
                attempt,
                candidate: Candidate { snapshot: "s".into(), rows: Some(3), total: Some(30), digest: Some(digest.into()), files: vec![] },
                staging_rel: format!("d/r/{partition}/@attempt-{attempt}"),
                reconciliation: None,
            }),
            attempts: vec![],
            published: published.map(|d| PublishedDigest { digest: d.into(), run: "r0".into(), generation: 1 }),
            files_seen: vec![],
        }
    }

    #[test]
    fn complete_run_plans_every_partition() {
        let plan = plan("d", "r", "s", vec![state("a", Some(1), "x", None), state("b", Some(2), "y", Some("y"))], None).unwrap();
        assert_eq!(plan.partitions.len(), 2);
        assert_eq!(plan.digests_to_record, vec![0]);
        assert!(plan.nondeterminism_accepted.is_none());
    }

    #[test]
    fn missing_and_mismatched_tasks_are_all_reported() {
        let refusal = plan("d", "r", "s", vec![state("a", None, "x", None), state("b", Some(1), "y", Some("z"))], None).unwrap_err();
        assert_eq!(refusal.tasks.len(), 2);
        assert!(matches!(refusal.tasks[0].reason, RefusalReason::NoAcceptedAttempt { .. }));
        assert!(matches!(refusal.tasks[1].reason, RefusalReason::Nondeterministic { .. }));
    }

    #[test]
    fn override_accepts_and_records_mismatch() {
        let plan = plan("d", "r", "s", vec![state("b", Some(1), "y", Some("z"))], Some("bug fix")).unwrap();
        assert_eq!(plan.nondeterminism_accepted.unwrap().partitions, vec!["b".to_string()]);
        assert_eq!(plan.digests_to_record, vec![0], "the overriding digest becomes what the partition holds");
    }

    #[test]
    fn a_lost_or_resized_file_is_refused_naming_it() {
        let mut s = state("a", Some(1), "x", None);
        if let Some(accepted) = s.accepted.as_mut() {
            accepted.candidate.files = vec![
                crate::model::FileEntry { path: "gone.csv".into(), size_bytes: 3, crc32: 0 },
                crate::model::FileEntry { path: "short.csv".into(), size_bytes: 3, crc32: 0 },
            ];
        }
        s.files_seen = vec![FileObservation::Missing, FileObservation::Present { size_bytes: 2, crc32: None }];
        let refusal = plan("d", "r", "s", vec![s], None).unwrap_err();
        let RefusalReason::Gate { failures, .. } = &refusal.tasks[0].reason else { panic!("{refusal}") };
        assert_eq!(failures[0], GateFailure::FileMissing { path: "gone.csv".into() });
        assert!(matches!(&failures[1], GateFailure::FileSizeMismatch { path, got: 2, .. } if path == "short.csv"));
    }

    #[test]
    fn accepted_candidate_failing_a_gate_is_refused() {
        let mut s = state("a", Some(1), "x", None);
        if let Some(accepted) = s.accepted.as_mut() {
            accepted.candidate.snapshot = "other".into();
        }
        let refusal = plan("d", "r", "s", vec![s], None).unwrap_err();
        assert!(matches!(
            &refusal.tasks[0].reason,
            RefusalReason::Gate { failures, .. } if matches!(failures[0], GateFailure::ForeignSnapshot { .. })
        ));
    }
}

//! Publishing a run: the next generation and the pointer move, in one transaction.

use super::{corrupted, run_key, task_key, unknown_run};
use crate::error::{Error, Result};
use crate::meta::{Meta, Scope, TxnEnd};
use crate::model::{GenerationKind, PublishOutcome, TaskKey, TaskSpec, Verdict};
use crate::records::{DigestRecord, GenerationRecord, PartitionEntryRecord, PartitionVersionRecord, attempt_status, generation_from};
use crate::rules::publish::{self, Accepted, PublishedDigest, TaskState};
use crate::rules::validate::FileObservation;
use crate::schema::{ACCEPTED, POINTERS, RUNS, key};

/// Publishes `run` of `dataset` at `now_ms`. `observe(accepted)` looks at the accepted
/// candidate's files just now (sizes), so a file lost since validation is refused as a report
/// naming it; an I/O error there is an error to retry, never a refusal.
pub(crate) fn publish(
    meta: &mut dyn Meta,
    dataset: &str,
    run: &str,
    accept_nondeterminism: Option<&str>,
    now_ms: u64,
    mut observe: impl FnMut(&Accepted) -> Result<Vec<FileObservation>>,
) -> Result<TxnEnd<PublishOutcome>> {
    meta.lock(Scope::Publish(dataset, run))?;
    let mut run_record = meta.run(dataset, run)?.ok_or_else(|| unknown_run(dataset, run))?;
    if let Some(number) = run_record.published_generation {
        let record = match meta.generation(dataset, number)? {
            Some(record) => record,
            None => return Err(published_generation_missing(meta, dataset, run, number)),
        };
        return Ok(TxnEnd::Abort(PublishOutcome::AlreadyPublished(generation_from(dataset, number, record))));
    }
    let mut states = gather_inputs(meta, dataset, run, &run_record.snapshot, run_record.task_count)?;
    for state in &mut states {
        if let Some(accepted) = &state.accepted {
            state.files_seen = observe(accepted)?;
        }
    }
    let plan = match publish::plan(dataset, run, &run_record.snapshot, states, accept_nondeterminism) {
        Ok(plan) => plan,
        Err(refusal) => return Ok(TxnEnd::Abort(PublishOutcome::Refused(refusal))),
    };
    let current = meta.pointer(dataset)?.unwrap_or(0);
    let number = current.checked_add(1).ok_or_else(|| corrupted(POINTERS, &key(&[dataset]), "generation number overflows"))?;
    for planned in &plan.partitions {
        let (accepted, candidate) = (&planned.accepted, &planned.accepted.candidate);
        let entry = PartitionEntryRecord {
            run: run.to_owned(),
            attempt: accepted.attempt,
            snapshot: candidate.snapshot.clone(),
            rows: planned.rows,
            total: planned.total,
            digest: planned.digest.clone(),
            staging_rel: accepted.staging_rel.clone(),
            files: candidate.files.clone(),
        };
        meta.put_version(dataset, &planned.partition, number, &PartitionVersionRecord { entry: Some(entry) })?;
    }
    for &index in &plan.digests_to_record {
        let planned = &plan.partitions[index];
        let record = DigestRecord { digest: planned.digest.clone(), run: run.to_owned(), generation: number };
        meta.put_digest(dataset, &run_record.snapshot, &planned.partition, &record)?;
    }
    let record = GenerationRecord {
        parent: current,
        run: run.to_owned(),
        snapshot: run_record.snapshot.clone(),
        published_at_ms: now_ms,
        partitions_replaced: plan.partitions.len() as u64,
        nondeterminism_accepted: plan.nondeterminism_accepted,
        kind: GenerationKind::Publish,
    };
    meta.put_generation(dataset, number, &record)?;
    run_record.published_generation = Some(number);
    meta.put_run(dataset, run, &run_record)?;
    super::effects::ready_on_publish(meta, dataset, run, number)?;
    // The pointer only moves forward, and only here, after the generation is complete.
    meta.move_pointer(dataset, current, number)?;
    tracing::info!(dataset, run, generation = number, partitions = record.partitions_replaced, "published");
    Ok(TxnEnd::Commit(PublishOutcome::Published(generation_from(dataset, number, record))))
}

/// Reads, for each task of the run, what the publish rule needs: O(1) keyed lookups per task,
/// plus a scan of a task's own attempts only when it has no accepted one (for the report).
fn gather_inputs(meta: &mut dyn Meta, dataset: &str, run: &str, snapshot: &str, task_count: u64) -> Result<Vec<TaskState>> {
    let tasks = meta.run_tasks(dataset, run)?;
    let mut states = Vec::with_capacity(tasks.len());
    for (partition, task) in tasks {
        let key = TaskKey::new(dataset, run, &partition);
        let spec = TaskSpec { partition: partition.clone(), expected_rows: task.expected_rows, expected_total: task.expected_total };
        let mut state = TaskState { spec, accepted: None, attempts: Vec::new(), published: None, files_seen: Vec::new() };
        match meta.accepted(&key)? {
            Some(attempt) => {
                let record = meta
                    .attempt(&key.attempt(attempt))?
                    .ok_or_else(|| corrupted(ACCEPTED, &task_key(&key), format!("accepted attempt {attempt} does not exist")))?;
                let (Some(candidate), Some(Verdict::Valid)) = (record.candidate, record.verdict) else {
                    return Err(corrupted(ACCEPTED, &task_key(&key), format!("accepted attempt {attempt} is not validated valid")));
                };
                state.accepted =
                    Some(Accepted { attempt, candidate, staging_rel: record.staging_rel, reconciliation: record.reconciliation });
                state.published = meta.digest(dataset, snapshot, &partition)?.map(|d| PublishedDigest {
                    digest: d.digest,
                    run: d.run,
                    generation: d.generation,
                });
            }
            None => state.attempts = meta.task_attempts(&key)?.iter().map(|(n, record)| (*n, attempt_status(record))).collect(),
        }
        states.push(state);
    }
    if states.len() as u64 != task_count {
        return Err(corrupted(
            RUNS,
            &run_key(dataset, run),
            format!("run declares {} but {} are stored", crate::error::count(task_count, "task"), states.len()),
        ));
    }
    Ok(states)
}

/// The error for a published run whose generation record is missing: expired if the dataset's
/// history now starts after it, corruption otherwise.
pub(crate) fn published_generation_missing(meta: &mut dyn Meta, dataset: &str, run: &str, generation: u64) -> Error {
    match meta.oldest_generation(dataset) {
        Err(err) => err,
        Ok(Some(oldest)) if oldest > generation => {
            Error::GenerationExpired { dataset: dataset.to_owned(), run: run.to_owned(), generation }
        }
        Ok(_) => corrupted(RUNS, &run_key(dataset, run), format!("run is published as generation {generation}, which does not exist")),
    }
}

//! Cleanup's reads and writes: the facts its rules (`rules::cleanup`) decide over, read from
//! one consistent view, and the transactions that store a plan, record an applied batch and
//! remove the records of dead attempts.

use std::collections::{HashMap, HashSet};

use super::corrupted;
use crate::error::Result;
use crate::lifecycle::PlannedPath;
use crate::meta::{Meta, MetaRead, Scope, TxnEnd};
use crate::model::{AttemptKey, TaskKey};
use crate::records::{CleanupBatchRecord, CleanupPlanRecord};
use crate::rules::cleanup::{self, AttemptFact, AttemptState, Facts};
use crate::rules::ids;
use crate::schema::{ATTEMPTS, CLEANUP_PLANS};

/// Gathers what cleanup needs to know from one consistent view: every attempt directory a
/// version entry holds, and every attempt's state (its record, its run's publication, its
/// task's accepted attempt).
pub(crate) fn gather_facts(meta: &mut dyn MetaRead) -> Result<Facts> {
    let mut facts = Facts::default();
    facts.referenced.extend(meta.held_dirs()?);
    // An attempt's state depends on its run's publication, read after the scan: both
    // possible states are kept, so no verdict is held for the whole scan.
    let mut attempts: Vec<(AttemptKey, String, [AttemptState; 2])> = Vec::new();
    meta.each_attempt(&mut |attempt, record| {
        let state =
            |published| AttemptState::of(record.candidate.is_some(), record.verdict.as_ref(), record.abandoned_at_ms.is_some(), published);
        let states = [state(false), state(true)];
        attempts.push((attempt, record.staging_rel, states));
        Ok(())
    })?;
    let mut published: HashMap<(String, String), bool> = HashMap::new();
    let mut accepted_of: HashMap<TaskKey, Option<u32>> = HashMap::new();
    for (attempt, staging_rel, states) in attempts {
        let task = &attempt.task;
        let run_key = (task.dataset.clone(), task.run.clone());
        let run_published = match published.get(&run_key) {
            Some(p) => *p,
            None => {
                let run = meta
                    .run(&task.dataset, &task.run)?
                    .ok_or_else(|| corrupted(ATTEMPTS, &super::attempt_key(&attempt), "attempt of an undeclared run"))?;
                let p = run.published_generation.is_some();
                published.insert(run_key, p);
                p
            }
        };
        let accepted_attempt = match accepted_of.get(task) {
            Some(a) => *a,
            None => {
                let a = meta.accepted(task)?;
                accepted_of.insert(task.clone(), a);
                a
            }
        };
        let fact =
            AttemptFact { accepted: accepted_attempt == Some(attempt.attempt), key: attempt, state: states[usize::from(run_published)] };
        facts.attempts.insert(staging_rel, fact);
    }
    Ok(facts)
}

/// What cleanup needs to know about the attempt directories of `paths` only, read by key from
/// one consistent view, for the apply-time re-check of one batch: for each path's attempt
/// directory, the attempt its name encodes (`ids::parse_staging_rel`), that attempt's record,
/// its run's publication and its task's accepted attempt, and whether a version entry holds
/// the directory. O(batch log n), never a scan of the whole store.
///
/// Only the accepted attempt of a published run can be held by a version entry (a publish
/// writes the run's accepted attempts; a rollback copies existing entries), so only for those
/// is the partition's history read, from the run's generation on.
pub(crate) fn facts_for(meta: &mut dyn MetaRead, paths: &[&PlannedPath]) -> Result<Facts> {
    let mut facts = Facts::default();
    let mut seen: HashSet<&str> = HashSet::new();
    for planned in paths {
        let Some(dir) = cleanup::attempt_dir_of(&planned.path) else { continue };
        if !seen.insert(dir) {
            continue;
        }
        // A directory whose name encodes no attempt belongs to none.
        let Some(attempt) = ids::parse_staging_rel(dir) else { continue };
        let task = &attempt.task;
        let run = meta.run(&task.dataset, &task.run)?;
        let accepted_attempt = meta.accepted(task)?;
        let record = meta.attempt(&attempt)?;
        let published = run.as_ref().and_then(|r| r.published_generation);
        if let Some(generation) = published
            && (accepted_attempt == Some(attempt.attempt) || record.is_none())
            && referenced_since(meta, &attempt, dir, generation)?
        {
            facts.referenced.insert(dir.to_owned());
        }
        let Some(record) = record else { continue };
        if record.staging_rel != dir {
            return Err(corrupted(
                ATTEMPTS,
                &super::attempt_key(&attempt),
                format!("staging directory {:?} is not {dir:?}", record.staging_rel),
            ));
        }
        if run.is_none() {
            return Err(corrupted(ATTEMPTS, &super::attempt_key(&attempt), "attempt of an undeclared run"));
        }
        let state =
            AttemptState::of(record.candidate.is_some(), record.verdict.as_ref(), record.abandoned_at_ms.is_some(), published.is_some());
        facts.attempts.insert(dir.to_owned(), AttemptFact { accepted: accepted_attempt == Some(attempt.attempt), key: attempt, state });
    }
    Ok(facts)
}

/// Whether a version entry of the attempt's partition from generation `since` on holds its
/// staging directory.
fn referenced_since(meta: &mut dyn MetaRead, attempt: &AttemptKey, staging_rel: &str, since: u64) -> Result<bool> {
    let versions = meta.partition_versions(&attempt.task.dataset, &attempt.task.partition, since)?;
    Ok(versions.iter().any(|(_, record)| record.entry.as_ref().is_some_and(|e| e.staging_rel == staging_rel)))
}

/// Stores `record` as the next cleanup plan and drops plans older than the newest `kept`
/// (with their batch records). Returns the plan's id.
pub(crate) fn store_plan(meta: &mut dyn Meta, record: &CleanupPlanRecord, kept: u64) -> Result<TxnEnd<u64>> {
    meta.lock(Scope::Store)?;
    let id = match meta.last_cleanup_plan()? {
        None => 1,
        Some(last) => last.checked_add(1).ok_or_else(|| corrupted(CLEANUP_PLANS, &last.to_be_bytes(), "plan id overflows"))?,
    };
    meta.put_cleanup_plan(id, record)?;
    if id > kept {
        meta.remove_cleanup_plans_before(id - kept + 1)?;
    }
    Ok(TxnEnd::Commit(id))
}

/// Records one applied batch of plan `plan`.
pub(crate) fn record_batch(meta: &mut dyn Meta, plan: u64, batch: u32, record: &CleanupBatchRecord) -> Result<TxnEnd<()>> {
    meta.lock(Scope::Store)?;
    meta.put_cleanup_batch(plan, batch, record)?;
    Ok(TxnEnd::Commit(()))
}

/// Removes the records of the attempts of `doomed` that are still dead (re-read and re-decided
/// here: `rules::cleanup::attempt_dead`, not accepted, held by no version entry), and records
/// them as batch `batch` of plan `plan` at `now_ms`. Returns the attempts removed.
pub(crate) fn remove_dead_attempts(
    meta: &mut dyn Meta,
    doomed: &[AttemptKey],
    plan: u64,
    batch: u32,
    now_ms: u64,
) -> Result<TxnEnd<Vec<AttemptKey>>> {
    meta.lock(Scope::Store)?;
    let mut removed = Vec::new();
    for attempt in doomed {
        // Re-checked inside the transaction: the state is read again and must still be one
        // that can never be used, not accepted, and held by no version entry.
        let task = &attempt.task;
        let Some(record) = meta.attempt(attempt)? else { continue };
        let published = meta.run(&task.dataset, &task.run)?.is_some_and(|r| r.published_generation.is_some());
        let state = AttemptState::of(record.candidate.is_some(), record.verdict.as_ref(), record.abandoned_at_ms.is_some(), published);
        let is_accepted = meta.accepted(task)? == Some(attempt.attempt);
        // The version scan only when the rest of the rule would let the record go:
        // `attempt_dead(s, a, r)` is `attempt_dead(s, a, false) && !r`.
        if !cleanup::attempt_dead(state, is_accepted, false) || referenced_since(meta, attempt, &record.staging_rel, 0)? {
            continue;
        }
        meta.remove_attempt(attempt)?;
        removed.push(attempt.clone());
    }
    let record = CleanupBatchRecord {
        applied_at_ms: now_ms,
        deleted: Vec::new(),
        bytes_deleted: 0,
        skipped: Vec::new(),
        attempt_records_removed: removed.clone(),
    };
    meta.put_cleanup_batch(plan, batch, &record)?;
    tracing::info!(plan, attempt_records_removed = removed.len(), "removed dead attempt records");
    Ok(TxnEnd::Commit(removed))
}

//! Cleanup of staging files: plan, then apply, and the pruning of dead attempt records.
//!
//! The decisions are pure rules (`rules::cleanup`); this module reads their inputs, walks the
//! staging root (`walk.rs`) and deletes or writes what they decided.
//!
//! Invariant: cleanup never deletes a file held by a stored generation's version entry, nor a
//! file of an attempt that may still run (not finished and not recorded abandoned), nor one of
//! an attempt that may still be published; it never follows a symlink or leaves the staging
//! root; and it deletes only paths that were planned, persisted and logged first, each
//! re-checked against the live state just before deletion.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, BorrowedFd};

use redb::{ReadTransaction, ReadableTable, WriteTransaction};

use super::retention::attempt_key_bytes;
use super::tables::{self, Readable, get, put, scan};
use super::{Store, TxnEnd, files, now_ms, walk};
use crate::error::{Error, Result};
use crate::lifecycle::{
    ApplyOptions, ApplyReport, CleanupOptions, CleanupPlan, CleanupReason, PlannedPath, RunMode, SkipReason, SkippedPath,
};
use crate::model::{AttemptKey, TaskKey};
use crate::records::{AcceptedRecord, AttemptRecord, CleanupBatchRecord, CleanupPlanRecord, PartitionVersionRecord, RunRecord};
use crate::rules::cleanup::{self, AttemptFact, AttemptState, Class, Facts};
use crate::rules::ids;
use crate::schema::{self, ACCEPTED, ATTEMPTS, CLEANUP_BATCHES, CLEANUP_PLANS, RUNS, VERSIONS, key, key_u64, prefix, prefix_end};

fn open<'t>(txn: &'t WriteTransaction, def: schema::Def) -> Result<redb::Table<'t, &'static [u8], &'static [u8]>> {
    txn.open_table(def.def()).map_err(|e| Error::storage("opening a table", e))
}

fn open_ro(txn: &ReadTransaction, def: schema::Def) -> Result<redb::ReadOnlyTable<&'static [u8], &'static [u8]>> {
    txn.open_table(def.def()).map_err(|e| Error::storage("opening a table for reading", e))
}

/// Cleanup plans kept in the store; older ones (and their batch records) are removed when a
/// new plan is made, so the plan table stays bounded.
const CLEANUP_PLANS_KEPT: u64 = 8;

/// Gathers what cleanup needs to know from one consistent view.
fn gather_facts(txn: &ReadTransaction) -> Result<Facts> {
    let mut facts = Facts::default();
    let versions = open_ro(txn, VERSIONS)?;
    scan::<PartitionVersionRecord>(&versions, VERSIONS, &[], &[0xff], |_, record| {
        if let Some(entry) = record.entry {
            facts.referenced.insert(entry.staging_rel);
        }
        Ok(true)
    })?;
    let attempts = open_ro(txn, ATTEMPTS)?;
    let runs = open_ro(txn, RUNS)?;
    let accepted = open_ro(txn, ACCEPTED)?;
    let mut published: HashMap<(String, String), bool> = HashMap::new();
    let mut accepted_of: HashMap<TaskKey, Option<u32>> = HashMap::new();
    scan::<AttemptRecord>(&attempts, ATTEMPTS, &[], &[0xff], |raw, record| {
        let attempt = schema::parse_attempt_key(raw).ok_or_else(|| tables::corrupted(ATTEMPTS, raw, "malformed attempt key"))?;
        let task = &attempt.task;
        let run_key = (task.dataset.clone(), task.run.clone());
        let run_published = match published.get(&run_key) {
            Some(p) => *p,
            None => {
                let run = get::<RunRecord>(&runs, RUNS, &key(&[&task.dataset, &task.run]))?
                    .ok_or_else(|| tables::corrupted(ATTEMPTS, raw, "attempt of an undeclared run"))?;
                let p = run.published_generation.is_some();
                published.insert(run_key, p);
                p
            }
        };
        let accepted_attempt = match accepted_of.get(task) {
            Some(a) => *a,
            None => {
                let a = get::<AcceptedRecord>(&accepted, ACCEPTED, &key(&[&task.dataset, &task.run, &task.partition]))?.map(|r| r.attempt);
                accepted_of.insert(task.clone(), a);
                a
            }
        };
        let state = AttemptState::of(record.candidate.is_some(), record.verdict.as_ref(), record.abandoned_at_ms.is_some(), run_published);
        let fact = AttemptFact { accepted: accepted_attempt == Some(attempt.attempt), key: attempt, state };
        facts.attempts.insert(record.staging_rel, fact);
        Ok(true)
    })?;
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
fn facts_for(txn: &ReadTransaction, paths: &[&PlannedPath]) -> Result<Facts> {
    let mut facts = Facts::default();
    let attempts = open_ro(txn, ATTEMPTS)?;
    let runs = open_ro(txn, RUNS)?;
    let accepted = open_ro(txn, ACCEPTED)?;
    let versions = open_ro(txn, VERSIONS)?;
    let mut seen: HashSet<&str> = HashSet::new();
    for planned in paths {
        let Some(dir) = cleanup::attempt_dir_of(&planned.path) else { continue };
        if !seen.insert(dir) {
            continue;
        }
        // A directory whose name encodes no attempt belongs to none.
        let Some(attempt) = ids::parse_staging_rel(dir) else { continue };
        let task = &attempt.task;
        let attempt_key = attempt_key_bytes(&attempt);
        let run = get::<RunRecord>(&runs, RUNS, &key(&[&task.dataset, &task.run]))?;
        let accepted_attempt =
            get::<AcceptedRecord>(&accepted, ACCEPTED, &key(&[&task.dataset, &task.run, &task.partition]))?.map(|r| r.attempt);
        let record = get::<AttemptRecord>(&attempts, ATTEMPTS, &attempt_key)?;
        let published = run.as_ref().and_then(|r| r.published_generation);
        if let Some(generation) = published
            && (accepted_attempt == Some(attempt.attempt) || record.is_none())
            && referenced_since(&versions, &attempt, dir, generation)?
        {
            facts.referenced.insert(dir.to_owned());
        }
        let Some(record) = record else { continue };
        if record.staging_rel != dir {
            return Err(tables::corrupted(ATTEMPTS, &attempt_key, format!("staging directory {:?} is not {dir:?}", record.staging_rel)));
        }
        if run.is_none() {
            return Err(tables::corrupted(ATTEMPTS, &attempt_key, "attempt of an undeclared run"));
        }
        let state =
            AttemptState::of(record.candidate.is_some(), record.verdict.as_ref(), record.abandoned_at_ms.is_some(), published.is_some());
        facts.attempts.insert(dir.to_owned(), AttemptFact { accepted: accepted_attempt == Some(attempt.attempt), key: attempt, state });
    }
    Ok(facts)
}

/// Whether a version entry of the attempt's partition from generation `since` on holds its
/// staging directory.
fn referenced_since(versions: &impl Readable, attempt: &AttemptKey, staging_rel: &str, since: u64) -> Result<bool> {
    let partition_prefix = prefix(&[&attempt.task.dataset, &attempt.task.partition]);
    let mut found = false;
    scan::<PartitionVersionRecord>(
        versions,
        VERSIONS,
        &key_u64(&[&attempt.task.dataset, &attempt.task.partition], since),
        &prefix_end(&partition_prefix),
        |_, record| {
            found = record.entry.is_some_and(|e| e.staging_rel == staging_rel);
            Ok(!found)
        },
    )?;
    Ok(found)
}

fn plan_key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

fn batch_key(plan: u64, batch: u32) -> Vec<u8> {
    let mut out = plan.to_be_bytes().to_vec();
    out.extend_from_slice(&batch.to_be_bytes());
    out
}

fn plan_from(id: u64, record: CleanupPlanRecord) -> CleanupPlan {
    CleanupPlan {
        id,
        created_at_ms: record.created_at_ms,
        age_threshold_ms: record.age_threshold_ms,
        attempt_lifetime_max_ms: record.attempt_lifetime_max_ms,
        candidates: record.candidates,
        unknown: record.unknown,
        kept: record.kept,
        unconsidered: record.unconsidered,
    }
}

impl Store {
    /// Plans a cleanup of the staging root and persists the plan (deleting nothing).
    ///
    /// Walks the staging root without following symlinks, then reads the store's state, and
    /// lists as deletion candidates the files that no stored generation holds, that belong to
    /// attempts that can never be used again (abandoned, invalid, or finished attempts of
    /// published runs not held by a retained generation), and whose modification time is at
    /// least `options.age_threshold` old and not in the future. Files of attempts that may
    /// still run or still be published are kept whatever their age. Files no attempt owns are
    /// listed apart, as unknown. The plan is stored (see [`Store::cleanup_plan`]) and logged
    /// before it is returned; only the newest 8 plans are kept.
    ///
    /// Run [`Store::abandon_expired_attempts`] and [`Store::expire_generations`] first: an
    /// attempt not recorded abandoned counts as possibly running, and every stored
    /// generation's files count as retained.
    ///
    /// # Errors
    /// [`Error::CleanupThresholdTooShort`] if the threshold does not exceed the attempt
    /// lifetime and is not forced; I/O errors listing the staging root; storage errors.
    pub fn plan_cleanup(&self, options: &CleanupOptions) -> Result<CleanupPlan> {
        self.poison.contain("plan cleanup", || {
            let age_threshold_ms = u64::try_from(options.age_threshold.as_millis()).unwrap_or(u64::MAX);
            let lifetime_ms = self.attempt_lifetime_max_ms;
            if cleanup::check_threshold(age_threshold_ms, lifetime_ms, options.force_short_threshold).is_err() {
                return Err(Error::CleanupThresholdTooShort { age_threshold_ms, attempt_lifetime_max_ms: lifetime_ms });
            }
            // Views of generations the store no longer holds (an expiry by an older build, a crash
            // inside one) go before the plan, so no view links a file the plan may list.
            if self.views().is_some()
                && let Err(err) = self.sync_views()
            {
                tracing::warn!(error = %err, "views not synced before planning cleanup");
            }
            // Walk first, read the state second: every reference made before a file was seen is
            // then visible to the decision.
            let root = self.checked_staging_root()?;
            let walked = walk::walk(root.as_fd(), &self.staging_root)?;
            let facts = gather_facts(self.snapshot()?.txn())?;
            let now = now_ms();
            let draft = cleanup::plan(&facts, &walked.found, now, age_threshold_ms);
            let record = CleanupPlanRecord {
                created_at_ms: now,
                age_threshold_ms,
                attempt_lifetime_max_ms: lifetime_ms,
                forced: options.force_short_threshold,
                candidates: draft.candidates,
                unknown: draft.unknown,
                kept: draft.kept,
                unconsidered: walked.unconsidered,
            };
            let id = self.write("storing a cleanup plan", |txn| {
                let mut plans = open(txn, CLEANUP_PLANS)?;
                let mut batches = open(txn, CLEANUP_BATCHES)?;
                let last_key =
                    plans.last().map_err(|e| Error::storage("reading the last cleanup plan", e))?.map(|(k, _)| k.value().to_vec());
                let id = match last_key {
                    None => 1,
                    Some(k) => {
                        let raw: [u8; 8] =
                            k.as_slice().try_into().map_err(|_| tables::corrupted(CLEANUP_PLANS, &k, "malformed plan key"))?;
                        u64::from_be_bytes(raw).checked_add(1).ok_or_else(|| tables::corrupted(CLEANUP_PLANS, &k, "plan id overflows"))?
                    }
                };
                put(&mut plans, &plan_key(id), &record)?;
                if id > CLEANUP_PLANS_KEPT {
                    let first_kept = id - CLEANUP_PLANS_KEPT + 1;
                    plans
                        .retain_in::<&[u8], _>(..&plan_key(first_kept)[..], |_, _| false)
                        .map_err(|e| Error::storage("pruning old plans", e))?;
                    batches
                        .retain_in::<&[u8], _>(..&plan_key(first_kept)[..], |_, _| false)
                        .map_err(|e| Error::storage("pruning old plan batches", e))?;
                }
                Ok(TxnEnd::Commit(id))
            })?;
            for path in record.candidates.iter().chain(&record.unknown) {
                tracing::debug!(plan = id, path = %path.path, reason = ?path.reason, size_bytes = path.size_bytes, "cleanup candidate");
            }
            tracing::info!(
                plan = id,
                candidates = record.candidates.len(),
                unknown = record.unknown.len(),
                kept = ?record.kept,
                unconsidered = record.unconsidered.len(),
                age_threshold_ms,
                "cleanup planned"
            );
            Ok(plan_from(id, record))
        })
    }

    /// A stored cleanup plan.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn cleanup_plan(&self, id: u64) -> Result<Option<CleanupPlan>> {
        self.poison.contain("cleanup plan", || {
            let snapshot = self.snapshot()?;
            let plans = open_ro(snapshot.txn(), CLEANUP_PLANS)?;
            Ok(get::<CleanupPlanRecord>(&plans, CLEANUP_PLANS, &plan_key(id))?.map(|r| plan_from(id, r)))
        })
    }

    /// Applies a stored cleanup plan. In a dry run (the default of [`ApplyOptions`]) nothing is
    /// deleted or recorded; the report lists what would be.
    ///
    /// The plan's paths are taken in batches of `options.batch_size`. For each batch the
    /// store's state is read afresh and every path re-checked just before deletion: a path
    /// that is gone, whose size, modification time or type changed, that the live state now
    /// protects (for example its attempt became referenced) or whose owner changed is skipped
    /// and reported. Unknown files are deleted only with `options.delete_unknown`. Each
    /// executed batch is recorded in the store (paths deleted and skipped). Afterwards, empty
    /// directories left behind are removed, and so are the records of attempts that can never
    /// be used again, whose directory is gone or empty, and that no stored generation or
    /// accepted index refers to. Each directory that lost an entry is synced (once per batch)
    /// before the batch is recorded, so what a batch record calls deleted stays deleted after a
    /// power loss.
    ///
    /// # Errors
    /// [`Error::UnknownCleanupPlan`]; [`Error::CleanupThresholdTooShort`] if this handle's
    /// attempt lifetime now reaches the plan's threshold (and the plan was not forced);
    /// storage and corruption errors; [`Error::Io`] if a directory sync fails. A file that
    /// cannot be deleted is reported, not an error.
    pub fn apply_cleanup(&self, id: u64, options: &ApplyOptions) -> Result<ApplyReport> {
        self.poison.contain("apply cleanup", || {
            let plan = {
                let snapshot = self.snapshot()?;
                let plans = open_ro(snapshot.txn(), CLEANUP_PLANS)?;
                get::<CleanupPlanRecord>(&plans, CLEANUP_PLANS, &plan_key(id))?.ok_or(Error::UnknownCleanupPlan { plan: id })?
            };
            let lifetime_ms = self.attempt_lifetime_max_ms;
            if cleanup::check_threshold(plan.age_threshold_ms, lifetime_ms, plan.forced).is_err() {
                return Err(Error::CleanupThresholdTooShort {
                    age_threshold_ms: plan.age_threshold_ms,
                    attempt_lifetime_max_ms: lifetime_ms,
                });
            }
            let execute = options.mode == RunMode::Execute;
            // Every path is reached through this one handle of the root, checked to be this store's.
            let root = self.checked_staging_root()?;
            let mut applier = walk::Applier::new(root.as_fd());
            let mut report = ApplyReport {
                plan: id,
                mode: options.mode,
                deleted: Vec::new(),
                bytes_deleted: 0,
                skipped: Vec::new(),
                directories_removed: 0,
                attempt_records_removed: Vec::new(),
            };
            let mut todo: Vec<&PlannedPath> = plan.candidates.iter().collect();
            for path in &plan.unknown {
                if options.delete_unknown {
                    todo.push(path);
                } else {
                    report.skipped.push(SkippedPath { path: path.path.clone(), reason: SkipReason::UnknownNotRequested });
                }
            }
            let mut next_batch = self.next_batch_number(id)?;
            for chunk in todo.chunks(options.batch_size.max(1)) {
                // Re-read by key, for this batch's paths only, from a fresh snapshot.
                let facts = facts_for(self.snapshot()?.txn(), chunk)?;
                let now = now_ms();
                let mut batch = CleanupBatchRecord {
                    applied_at_ms: now,
                    deleted: Vec::new(),
                    bytes_deleted: 0,
                    skipped: Vec::new(),
                    attempt_records_removed: Vec::new(),
                };
                for planned in chunk {
                    match recheck(&mut applier, &facts, planned, now, plan.age_threshold_ms) {
                        Err(reason) => batch.skipped.push((planned.path.clone(), reason)),
                        Ok(()) if !execute => {
                            batch.deleted.push(planned.path.clone());
                            batch.bytes_deleted += planned.size_bytes;
                        }
                        Ok(()) => match applier.delete(&planned.path) {
                            Ok(()) => {
                                tracing::debug!(plan = id, path = %planned.path, reason = ?planned.reason, "deleted staging file");
                                batch.deleted.push(planned.path.clone());
                                batch.bytes_deleted += planned.size_bytes;
                            }
                            Err(e) => batch.skipped.push((planned.path.clone(), SkipReason::DeleteFailed(e.to_string()))),
                        },
                    }
                }
                if execute {
                    for path in &batch.deleted {
                        report.directories_removed += walk::remove_empty_parents(root.as_fd(), path);
                    }
                    applier.forget();
                    // The removals are made durable before the batch records them as done.
                    files::sync_after_removal(&self.staging_root, batch.deleted.iter().map(String::as_str))?;
                    self.record_batch(id, next_batch, &batch)?;
                    next_batch = next_batch.saturating_add(1);
                    tracing::info!(plan = id, deleted = batch.deleted.len(), skipped = batch.skipped.len(), "cleanup batch applied");
                }
                report.deleted.extend(batch.deleted);
                report.bytes_deleted += batch.bytes_deleted;
                report.skipped.extend(batch.skipped.into_iter().map(|(path, reason)| SkippedPath { path, reason }));
            }
            let (removed, dirs) = self.prune_attempt_records(root.as_fd(), id, next_batch, execute)?;
            report.attempt_records_removed = removed;
            report.directories_removed += dirs;
            Ok(report)
        })
    }

    fn next_batch_number(&self, plan: u64) -> Result<u32> {
        let snapshot = self.snapshot()?;
        let batches = open_ro(snapshot.txn(), CLEANUP_BATCHES)?;
        let mut range = batches
            .range::<&[u8]>(&batch_key(plan, 0)[..]..=&batch_key(plan, u32::MAX)[..])
            .map_err(|e| Error::storage("reading cleanup batches", e))?;
        match range.next_back() {
            None => Ok(0),
            Some(item) => {
                let (k, _) = item.map_err(|e| Error::storage("reading cleanup batches", e))?;
                let n = schema::trailing_u32(k.value()).ok_or_else(|| tables::corrupted(CLEANUP_BATCHES, k.value(), "malformed key"))?;
                Ok(n.saturating_add(1))
            }
        }
    }

    fn record_batch(&self, plan: u64, batch: u32, record: &CleanupBatchRecord) -> Result<()> {
        self.write("recording a cleanup batch", |txn| {
            let mut batches = open(txn, CLEANUP_BATCHES)?;
            put(&mut batches, &batch_key(plan, batch), record)?;
            Ok(TxnEnd::Commit(()))
        })
    }

    /// Removes the records (and empty directories) of attempts that can never be used again,
    /// whose directory is gone or empty, that no version entry holds and that no accepted
    /// index names. The accepted attempt of a published run keeps its record even once its
    /// files are gone: it is the run's account of what it published, and the accepted index
    /// must never name a missing attempt. Returns the attempts and the directories removed
    /// (in a dry run: the attempts that would be, and 0).
    fn prune_attempt_records(&self, root: BorrowedFd<'_>, plan: u64, batch: u32, execute: bool) -> Result<(Vec<AttemptKey>, u64)> {
        let facts = gather_facts(self.snapshot()?.txn())?;
        let mut doomed: Vec<AttemptKey> = Vec::new();
        let mut dirs = 0;
        let mut removable: Vec<(&String, &AttemptFact)> =
            facts.attempts.iter().filter(|(rel, _)| cleanup::record_removable(&facts, rel)).collect();
        removable.sort_by(|a, b| a.1.key.cmp(&b.1.key));
        let mut removed_dirs: Vec<&str> = Vec::new();
        for (rel, fact) in removable {
            if !walk::dir_is_gone_or_empty(root, rel) {
                continue;
            }
            if execute && walk::remove_empty_dir(root, rel) {
                dirs += 1 + walk::remove_empty_parents(root, rel);
                removed_dirs.push(rel);
            }
            doomed.push(fact.key.clone());
        }
        files::sync_after_removal(&self.staging_root, removed_dirs)?;
        if !execute || doomed.is_empty() {
            return Ok((doomed, dirs));
        }
        let removed = self.write("removing dead attempt records", |txn| {
            let mut attempts = open(txn, ATTEMPTS)?;
            let runs = open(txn, RUNS)?;
            let accepted = open(txn, ACCEPTED)?;
            let versions = open(txn, VERSIONS)?;
            let mut removed = Vec::new();
            for attempt in &doomed {
                // Re-check inside the transaction: the state is read again and must still be
                // one that can never be used, not accepted, and held by no version entry.
                let task = &attempt.task;
                let attempt_key = attempt_key_bytes(attempt);
                let Some(record) = get::<AttemptRecord>(&attempts, ATTEMPTS, &attempt_key)? else { continue };
                let published =
                    get::<RunRecord>(&runs, RUNS, &key(&[&task.dataset, &task.run]))?.is_some_and(|r| r.published_generation.is_some());
                let state =
                    AttemptState::of(record.candidate.is_some(), record.verdict.as_ref(), record.abandoned_at_ms.is_some(), published);
                let is_accepted = get::<AcceptedRecord>(&accepted, ACCEPTED, &key(&[&task.dataset, &task.run, &task.partition]))?
                    .is_some_and(|a| a.attempt == attempt.attempt);
                // The version scan only when the rest of the rule would let the record go:
                // `attempt_dead(s, a, r)` is `attempt_dead(s, a, false) && !r`.
                if !cleanup::attempt_dead(state, is_accepted, false) || referenced_by_version(&versions, attempt, &record.staging_rel)? {
                    continue;
                }
                attempts.remove(attempt_key.as_slice()).map_err(|e| Error::storage("removing an attempt record", e))?;
                removed.push(attempt.clone());
            }
            let mut batches = open(txn, CLEANUP_BATCHES)?;
            put(
                &mut batches,
                &batch_key(plan, batch),
                &CleanupBatchRecord {
                    applied_at_ms: now_ms(),
                    deleted: Vec::new(),
                    bytes_deleted: 0,
                    skipped: Vec::new(),
                    attempt_records_removed: removed.clone(),
                },
            )?;
            tracing::info!(plan, attempt_records_removed = removed.len(), "removed dead attempt records");
            Ok(TxnEnd::Commit(removed))
        })?;
        Ok((removed, dirs))
    }
}

/// Whether any version entry of the attempt's partition holds its staging directory.
fn referenced_by_version(versions: &impl Readable, attempt: &AttemptKey, staging_rel: &str) -> Result<bool> {
    let partition_prefix = prefix(&[&attempt.task.dataset, &attempt.task.partition]);
    let mut found = false;
    scan::<PartitionVersionRecord>(versions, VERSIONS, &partition_prefix, &prefix_end(&partition_prefix), |_, record| {
        found = record.entry.is_some_and(|e| e.staging_rel == staging_rel);
        Ok(!found)
    })?;
    Ok(found)
}

/// Re-checks one planned path against the live state: `Ok` if it may be deleted now. The entry
/// must be the very one planned (same device and inode, size, modification and status-change
/// times to the nanosecond): a file replaced by another (a new inode renamed in) or rewritten
/// is skipped as changed, whatever its size and modification time.
fn recheck(
    applier: &mut walk::Applier<'_>,
    facts: &Facts,
    planned: &PlannedPath,
    now: u64,
    age_threshold_ms: u64,
) -> Result<(), SkipReason> {
    let observed = match applier.observe(&planned.path) {
        walk::Now::Missing => return Err(SkipReason::Missing),
        walk::Now::Other => return Err(SkipReason::Changed),
        walk::Now::Found(observed) => observed,
    };
    if !cleanup::same_entry(&observed, planned) {
        return Err(SkipReason::Changed);
    }
    match cleanup::classify(facts, &observed, now, age_threshold_ms) {
        Class::Keep(reason) => Err(SkipReason::NowProtected(reason)),
        Class::Delete { reason, attempt }
            if (reason == CleanupReason::Unknown) != (planned.reason == CleanupReason::Unknown) || attempt != planned.attempt =>
        {
            Err(SkipReason::OwnerChanged)
        }
        Class::Delete { .. } => Ok(()),
    }
}

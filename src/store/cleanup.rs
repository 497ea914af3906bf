//! Cleanup of staging files: plan, then apply, and the pruning of dead attempt records.
//!
//! The decisions are pure rules (`rules::cleanup`); their inputs are read, and the plan, batch
//! and attempt records written, by `ops::cleanup` through the storage interface; this module
//! walks the staging root (`walk.rs`), re-checks and deletes files, and syncs directories.
//!
//! Invariant: cleanup never deletes a file held by a stored generation's version entry, nor a
//! file of an attempt that may still run (not finished and not recorded abandoned), nor one of
//! an attempt that may still be published; it never follows a symlink or leaves the staging
//! root; and it deletes only paths that were planned, persisted and logged first, each
//! re-checked against the live state just before deletion.

use std::os::fd::AsFd;

use super::{Store, files, now_ms, walk};
use crate::error::{Error, Result};
use crate::lifecycle::{
    ApplyOptions, ApplyReport, CleanupOptions, CleanupPlan, CleanupReason, PlannedPath, RunMode, SkipReason, SkippedPath,
};
use crate::model::AttemptKey;
use crate::ops;
use crate::progress::{NO_PROGRESS, Progress, ProgressStage, Tracker};
use crate::records::{CleanupBatchRecord, CleanupPlanRecord};
use crate::rules::cleanup::{self, AttemptFact, Class, Facts};

/// Cleanup plans kept in the store; older ones (and their batch records) are removed when a
/// new plan is made, so the plan table stays bounded.
const CLEANUP_PLANS_KEPT: u64 = 8;

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

/// A stored cleanup plan being applied one batch at a time: made by
/// [`Store::start_cleanup_apply`], advanced by [`Store::apply_cleanup_batch`], ended by
/// [`Store::finish_cleanup_apply`]. It holds the plan's paths, how many are taken, the counts
/// reported so far and the report of the batches applied; no handle of the store, so each step
/// may run on a handle of its own.
#[derive(Debug, Clone)]
pub struct CleanupApply {
    options: ApplyOptions,
    age_threshold_ms: u64,
    forced: bool,
    todo: Vec<PlannedPath>,
    taken: usize,
    progress: Progress,
    report: ApplyReport,
}

impl CleanupApply {
    /// Paths of the plan taken so far (deleted, skipped or, in a dry run, re-checked), and the
    /// paths it takes in all.
    pub fn paths_taken(&self) -> (usize, usize) {
        (self.taken, self.todo.len())
    }

    /// The report of the batches applied so far (without the pruning of
    /// [`Store::finish_cleanup_apply`]).
    pub fn report(&self) -> &ApplyReport {
        &self.report
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
            self.whole_call(|| {
                let age_threshold_ms = u64::try_from(options.age_threshold.as_millis()).unwrap_or(u64::MAX);
                let lifetime_ms = self.attempt_lifetime_max_ms;
                if cleanup::check_threshold(age_threshold_ms, lifetime_ms, options.force_short_threshold).is_err() {
                    return Err(Error::CleanupThresholdTooShort { age_threshold_ms, attempt_lifetime_max_ms: lifetime_ms });
                }
                // Views of generations the store no longer holds (an expiry by an older build, a crash
                // inside one) go before the plan, so no view links a file the plan may list.
                if self.views().is_some()
                    && let Err(err) = self.sync_views_with(crate::views::Check::None)
                {
                    tracing::warn!(error = %err, "views not synced before planning cleanup");
                }
                // Walk first, read the state second: every reference made before a file was seen is
                // then visible to the decision.
                let walked = self.walk_staging()?;
                let facts = self.snapshot()?.read("reading cleanup's facts", ops::cleanup::gather_facts)?;
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
                let id = self.write("storing a cleanup plan", |meta| ops::cleanup::store_plan(meta, &record, CLEANUP_PLANS_KEPT))?;
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
        })
    }

    /// A stored cleanup plan.
    ///
    /// # Errors
    /// Storage and corruption errors.
    pub fn cleanup_plan(&self, id: u64) -> Result<Option<CleanupPlan>> {
        self.poison.contain("cleanup plan", || {
            Ok(self.snapshot()?.read("reading a cleanup plan", |meta| meta.cleanup_plan(id))?.map(|r| plan_from(id, r)))
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
        self.apply_cleanup_with_progress(id, options, NO_PROGRESS)
    }

    /// [`Store::apply_cleanup`], reporting to `progress` each planned path it took (deleted,
    /// skipped, or in a dry run re-checked), in the stage [`ProgressStage::DeletingFiles`]: the
    /// totals are the paths it takes (the candidates, and the unknown files with
    /// `options.delete_unknown`) and their planned sizes; see [`Progress`].
    ///
    /// # Errors
    /// As [`Store::apply_cleanup`].
    pub fn apply_cleanup_with_progress(&self, id: u64, options: &ApplyOptions, progress: &dyn Fn(Progress)) -> Result<ApplyReport> {
        self.poison.contain("apply cleanup", || {
            self.whole_call(|| {
                let mut apply = self.start_cleanup_apply(id, options)?;
                while self.apply_cleanup_batch(&mut apply, progress)? {}
                self.finish_cleanup_apply(apply)
            })
        })
    }

    /// Starts applying a stored cleanup plan one batch at a time, as [`Store::apply_cleanup`]
    /// does in one call: reads the plan and checks its threshold. Nothing is deleted or
    /// written. Each [`Store::apply_cleanup_batch`] then takes the next batch, and
    /// [`Store::finish_cleanup_apply`] ends it. Each step may run on another handle of the
    /// store (the CLI's `gc apply` closes the store between batches, so that other processes'
    /// writers wait at most one batch).
    ///
    /// # Errors
    /// As [`Store::apply_cleanup`].
    pub fn start_cleanup_apply(&self, id: u64, options: &ApplyOptions) -> Result<CleanupApply> {
        self.poison.contain("apply cleanup", || {
            let plan = self
                .snapshot()?
                .read("reading a cleanup plan", |meta| meta.cleanup_plan(id))?
                .ok_or(Error::UnknownCleanupPlan { plan: id })?;
            self.check_apply_threshold(plan.age_threshold_ms, plan.forced)?;
            let mut skipped = Vec::new();
            let mut todo: Vec<PlannedPath> = plan.candidates;
            for path in plan.unknown {
                if options.delete_unknown {
                    todo.push(path);
                } else {
                    skipped.push(SkippedPath { path: path.path, reason: SkipReason::UnknownNotRequested });
                }
            }
            let (files_total, bytes_total) = todo.iter().fold((0u64, 0u64), |(n, b), p| (n + 1, b.saturating_add(p.size_bytes)));
            Ok(CleanupApply {
                options: *options,
                age_threshold_ms: plan.age_threshold_ms,
                forced: plan.forced,
                todo,
                taken: 0,
                progress: Progress { stage: ProgressStage::DeletingFiles, files_done: 0, files_total, bytes_done: 0, bytes_total },
                report: ApplyReport {
                    plan: id,
                    mode: options.mode,
                    deleted: Vec::new(),
                    bytes_deleted: 0,
                    skipped,
                    directories_removed: 0,
                    attempt_records_removed: Vec::new(),
                },
            })
        })
    }

    /// Applies the next batch of `apply` (`options.batch_size` paths): reads the store's state
    /// afresh for the batch's paths, re-checks each just before deleting it, makes the
    /// removals durable and (unless a dry run) records the batch. Returns whether paths remain.
    /// Reports to `progress` as [`Store::apply_cleanup_with_progress`] does (its totals before
    /// the first batch).
    ///
    /// # Errors
    /// As [`Store::apply_cleanup`] (the threshold is checked against this handle's attempt
    /// lifetime).
    pub fn apply_cleanup_batch(&self, apply: &mut CleanupApply, progress: &dyn Fn(Progress)) -> Result<bool> {
        self.poison.contain("apply cleanup", || {
            self.check_apply_threshold(apply.age_threshold_ms, apply.forced)?;
            if apply.taken == 0 {
                progress(apply.progress);
            }
            let end = apply.todo.len().min(apply.taken.saturating_add(apply.options.batch_size.max(1)));
            if apply.taken >= end {
                return Ok(false);
            }
            let id = apply.report.plan;
            let execute = apply.options.mode == RunMode::Execute;
            let chunk = &apply.todo[apply.taken..end];
            // Every path is reached through this one handle of the root (a local root's directory
            // handle; an object root's client), checked to be this store's.
            let root = self.cleanup_root()?;
            let mut applier = root.applier();
            // Re-read by key, for this batch's paths only, from a fresh snapshot.
            let refs: Vec<&PlannedPath> = chunk.iter().collect();
            let facts = self.snapshot()?.read("re-reading cleanup's facts", |meta| ops::cleanup::facts_for(meta, &refs))?;
            let now = now_ms();
            let mut batch = CleanupBatchRecord {
                applied_at_ms: now,
                deleted: Vec::new(),
                bytes_deleted: 0,
                skipped: Vec::new(),
                attempt_records_removed: Vec::new(),
            };
            let mut deleting = Tracker::resume(progress, apply.progress);
            for planned in chunk {
                match recheck(&mut applier, &facts, planned, now, apply.age_threshold_ms) {
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
                deleting.file_done(planned.size_bytes);
            }
            if execute {
                match &root {
                    CleanupRoot::Local(fd) => {
                        for path in &batch.deleted {
                            apply.report.directories_removed += walk::remove_empty_parents(fd.as_fd(), path);
                        }
                        // A directory removed and made again later is a new one to sync.
                        self.durable_dirs.clear();
                        // The removals are made durable before the batch records them as done.
                        files::sync_after_removal(self.staging.path(), batch.deleted.iter().map(String::as_str))?;
                    }
                    // An object's DELETE is durable once acknowledged.
                    #[cfg(feature = "s3")]
                    CleanupRoot::Object(_) => {}
                }
                applier.forget();
                let number = self.next_batch_number(id)?;
                self.record_batch(id, number, &batch)?;
                tracing::info!(plan = id, deleted = batch.deleted.len(), skipped = batch.skipped.len(), "cleanup batch applied");
            }
            apply.progress = deleting.now();
            apply.taken = end;
            apply.report.deleted.extend(batch.deleted);
            apply.report.bytes_deleted += batch.bytes_deleted;
            apply.report.skipped.extend(batch.skipped.into_iter().map(|(path, reason)| SkippedPath { path, reason }));
            Ok(apply.taken < apply.todo.len())
        })
    }

    /// Ends `apply` (its paths all taken, or not): removes the empty directories left behind
    /// and the records of attempts that can never be used again (see
    /// [`Store::apply_cleanup`]), and returns the report of every batch.
    ///
    /// # Errors
    /// As [`Store::apply_cleanup`].
    pub fn finish_cleanup_apply(&self, apply: CleanupApply) -> Result<ApplyReport> {
        self.poison.contain("apply cleanup", || {
            let mut report = apply.report;
            let execute = apply.options.mode == RunMode::Execute;
            let root = self.cleanup_root()?;
            let next_batch = self.next_batch_number(report.plan)?;
            let (removed, dirs) = self.prune_attempt_records(&root, report.plan, next_batch, execute)?;
            report.attempt_records_removed = removed;
            report.directories_removed += dirs;
            Ok(report)
        })
    }

    /// Refuses to apply a plan whose threshold this handle's attempt lifetime now reaches
    /// (unless the plan was forced).
    fn check_apply_threshold(&self, age_threshold_ms: u64, forced: bool) -> Result<()> {
        let lifetime_ms = self.attempt_lifetime_max_ms;
        if cleanup::check_threshold(age_threshold_ms, lifetime_ms, forced).is_err() {
            return Err(Error::CleanupThresholdTooShort { age_threshold_ms, attempt_lifetime_max_ms: lifetime_ms });
        }
        Ok(())
    }

    /// Every file below the staging root, without following symlinks (local) or as the bucket
    /// lists the prefix (objects), the root's marker left out; the root's marker checked first.
    fn walk_staging(&self) -> Result<walk::Walk> {
        match &self.staging {
            super::StagingRoot::Local(path) => {
                let root = self.checked_staging_root()?;
                walk::walk(root.as_fd(), path)
            }
            #[cfg(feature = "s3")]
            super::StagingRoot::Object { root, .. } => {
                self.check_staging_marker()?;
                let listed = root.list("").map_err(|e| Error::io(format!("listing staging root {}", root.url()), e))?;
                let mut found = Vec::with_capacity(listed.len());
                let mut unconsidered = Vec::new();
                for object in listed.into_iter().filter(|o| o.rel != super::handles::MARKER_NAME) {
                    // The entity tag is the object's identity, which apply compares with a HEAD's
                    // just before deleting: a server whose listing gives none is asked per object.
                    let object = match object.e_tag {
                        Some(_) => object,
                        None => match root.head(&object.rel) {
                            Ok(Some(seen)) => seen,
                            // Gone since the listing: nothing to plan.
                            Ok(None) => continue,
                            Err(e) => {
                                unconsidered.push(format!("{} (cannot be described: {e})", object.rel));
                                continue;
                            }
                        },
                    };
                    found.push(object_observed(&object));
                }
                Ok(walk::Walk { found, unconsidered })
            }
        }
    }

    /// The root an apply works through, its marker checked.
    fn cleanup_root(&self) -> Result<CleanupRoot> {
        match &self.staging {
            super::StagingRoot::Local(_) => Ok(CleanupRoot::Local(self.checked_staging_root()?)),
            #[cfg(feature = "s3")]
            super::StagingRoot::Object { root, .. } => {
                self.check_staging_marker()?;
                Ok(CleanupRoot::Object(std::sync::Arc::clone(root)))
            }
        }
    }

    fn next_batch_number(&self, plan: u64) -> Result<u32> {
        let last = self.snapshot()?.read("reading cleanup batches", |meta| meta.last_cleanup_batch(plan))?;
        Ok(last.map_or(0, |n| n.saturating_add(1)))
    }

    fn record_batch(&self, plan: u64, batch: u32, record: &CleanupBatchRecord) -> Result<()> {
        self.write("recording a cleanup batch", |meta| ops::cleanup::record_batch(meta, plan, batch, record))
    }

    /// Removes the records (and empty directories) of attempts that can never be used again,
    /// whose directory is gone or empty, that no version entry holds and that no accepted
    /// index names. The accepted attempt of a published run keeps its record even once its
    /// files are gone: it is the run's account of what it published, and the accepted index
    /// must never name a missing attempt. Returns the attempts and the directories removed
    /// (in a dry run: the attempts that would be, and 0).
    fn prune_attempt_records(&self, root: &CleanupRoot, plan: u64, batch: u32, execute: bool) -> Result<(Vec<AttemptKey>, u64)> {
        let facts = self.snapshot()?.read("reading cleanup's facts", ops::cleanup::gather_facts)?;
        let mut doomed: Vec<AttemptKey> = Vec::new();
        let mut dirs = 0;
        let mut removable: Vec<(&String, &AttemptFact)> =
            facts.attempts.iter().filter(|(rel, _)| cleanup::record_removable(&facts, rel)).collect();
        removable.sort_by(|a, b| a.1.key.cmp(&b.1.key));
        let mut removed_dirs: Vec<&str> = Vec::new();
        for (rel, fact) in removable {
            match root {
                CleanupRoot::Local(fd) => {
                    if !walk::dir_is_gone_or_empty(fd.as_fd(), rel) {
                        continue;
                    }
                    if execute && walk::remove_empty_dir(fd.as_fd(), rel) {
                        dirs += 1 + walk::remove_empty_parents(fd.as_fd(), rel);
                        removed_dirs.push(rel);
                        self.durable_dirs.clear();
                    }
                }
                // An attempt's prefix is gone once no object is below it (there is no directory
                // to remove); one that cannot be listed keeps its record.
                #[cfg(feature = "s3")]
                CleanupRoot::Object(object) => {
                    if !object.list(rel).is_ok_and(|listed| listed.is_empty()) {
                        continue;
                    }
                }
            }
            doomed.push(fact.key.clone());
        }
        if matches!(root, CleanupRoot::Local(_)) {
            files::sync_after_removal(self.staging.path(), removed_dirs)?;
        }
        if !execute || doomed.is_empty() {
            return Ok((doomed, dirs));
        }
        let removed =
            self.write("removing dead attempt records", |meta| ops::cleanup::remove_dead_attempts(meta, &doomed, plan, batch, now_ms()))?;
        Ok((removed, dirs))
    }
}

/// Re-checks one planned path against the live state: `Ok` if it may be deleted now. The entry
/// must be the very one planned (same device and inode, size, modification and status-change
/// times to the nanosecond): a file replaced by another (a new inode renamed in) or rewritten
/// is skipped as changed, whatever its size and modification time.
fn recheck(applier: &mut Applier<'_>, facts: &Facts, planned: &PlannedPath, now: u64, age_threshold_ms: u64) -> Result<(), SkipReason> {
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

/// The staging root an apply deletes under.
enum CleanupRoot {
    /// A local root's directory handle.
    Local(std::os::fd::OwnedFd),
    /// An object root.
    #[cfg(feature = "s3")]
    Object(std::sync::Arc<crate::objects::ObjectRoot>),
}

impl CleanupRoot {
    fn applier(&self) -> Applier<'_> {
        match self {
            CleanupRoot::Local(fd) => Applier::Local(walk::Applier::new(fd.as_fd())),
            #[cfg(feature = "s3")]
            CleanupRoot::Object(root) => Applier::Object(root.as_ref()),
        }
    }
}

/// What observes a planned path again and deletes it: one kind per staging root.
enum Applier<'a> {
    Local(walk::Applier<'a>),
    #[cfg(feature = "s3")]
    Object(&'a crate::objects::ObjectRoot),
}

impl Applier<'_> {
    /// What is at `rel` now.
    fn observe(&mut self, rel: &str) -> walk::Now {
        match self {
            Applier::Local(applier) => applier.observe(rel),
            // The marker is never a candidate (nor anything that is not a plain staging path).
            #[cfg(feature = "s3")]
            Applier::Object(_) if rel == super::handles::MARKER_NAME || crate::rules::ids::check_file_path(rel).is_err() => {
                walk::Now::Other
            }
            #[cfg(feature = "s3")]
            Applier::Object(root) => match root.head(rel) {
                Ok(Some(seen)) => walk::Now::Found(object_observed(&seen)),
                Ok(None) => walk::Now::Missing,
                Err(_) => walk::Now::Other,
            },
        }
    }

    /// Deletes `rel`, which [`Applier::observe`] just described.
    fn delete(&mut self, rel: &str) -> std::result::Result<(), String> {
        match self {
            Applier::Local(applier) => applier.delete(rel).map_err(|e| e.to_string()),
            #[cfg(feature = "s3")]
            Applier::Object(root) => root.delete(rel).map_err(|e| e.to_string()),
        }
    }

    fn forget(&mut self) {
        match self {
            Applier::Local(applier) => applier.forget(),
            #[cfg(feature = "s3")]
            Applier::Object(_) => {}
        }
    }
}

/// An object as cleanup's rules see a path: no device; its identity is its entity tag (a new
/// PUT at the key gives another), its times its last-modified time; never a symlink.
#[cfg(feature = "s3")]
fn object_observed(seen: &crate::objects::ObjectSeen) -> crate::rules::cleanup::Observed {
    let identity = seen.e_tag.as_deref().map_or(0, |tag| u64::from(crc32fast::hash(tag.as_bytes())));
    let ns = seen.last_modified_ms.saturating_mul(1_000_000);
    crate::rules::cleanup::Observed {
        rel: seen.rel.clone(),
        symlink: false,
        size_bytes: seen.size_bytes,
        modified_at_ms: seen.last_modified_ms,
        device: 0,
        inode: identity,
        modified_at_ns: ns,
        changed_at_ns: ns,
    }
}

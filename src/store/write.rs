//! The write operations: declare, begin, finish, validate, publish, side effects.
//!
//! Each one reads and checks everything first and writes only once every check passed, so a
//! refused operation leaves its transaction untouched (and aborts it).

use super::begin_dirs::{BeginDirs, TaskDir};
use super::{Store, TxnEnd, files};
use crate::error::{Error, Result};
use crate::grain::Reconciliation;
use crate::meta::{Meta, MetaRead};
use crate::model::{
    AttemptKey, AttemptTicket, Candidate, ClaimOutcome, DeclareOutcome, EffectKey, FileCheck, FileEntry, FinishOutcome, MarkOutcome,
    PublishOptions, PublishOutcome, RecordedEffect, RunSpec, TaskKey, TaskSpec, Verdict,
};
use crate::ops;
use crate::progress::{NO_PROGRESS, Progress, ProgressStage, Tracker};
use crate::readers;
use crate::records::{AttemptRecord, RunRecord, TaskRecord};
use crate::rules::attempts::ToValidate;
use crate::rules::validate::FileObservation;
use crate::rules::{self, ids};

/// Largest side-effect payload, in bytes.
const EFFECT_PAYLOAD_BYTES_MAX: usize = 16 * 1024 * 1024;

fn unknown_run(dataset: &str, run: &str) -> Error {
    Error::UnknownRun { dataset: dataset.to_owned(), run: run.to_owned() }
}

fn check_task_key(task: &TaskKey) -> Result<()> {
    ids::check_name("dataset", &task.dataset)?;
    ids::check_name("run id", &task.run)?;
    ids::check_partition(&task.partition)
}

fn unknown_attempt(key: &AttemptKey) -> Error {
    Error::UnknownAttempt {
        dataset: key.task.dataset.clone(),
        run: key.task.run.clone(),
        partition: key.task.partition.clone(),
        attempt: key.attempt,
    }
}

/// Reads a run, or fails with [`Error::UnknownRun`].
fn read_run(meta: &mut dyn MetaRead, dataset: &str, run: &str) -> Result<RunRecord> {
    meta.run(dataset, run)?.ok_or_else(|| unknown_run(dataset, run))
}

/// Reads a task, or fails with [`Error::UnknownTask`].
fn read_task(meta: &mut dyn MetaRead, task: &TaskKey) -> Result<TaskRecord> {
    meta.task(task)?.ok_or_else(|| Error::UnknownTask {
        dataset: task.dataset.clone(),
        run: task.run.clone(),
        partition: task.partition.clone(),
    })
}

impl Store {
    /// Declares a run: its dataset, id, pinned input snapshot and tasks with their
    /// expectations. Declaring the identical run again writes nothing.
    ///
    /// A run not declared yet has its tasks' staging directories made first, before the write,
    /// and their entries made durable (each parent synced once, whatever the number of tasks),
    /// so that a validation through this handle later syncs only what an attempt added: its
    /// files, its directory and the task's directory naming it. A declaration refused (another
    /// process declared the run otherwise meanwhile) leaves those directories empty, as a
    /// begin refused leaves its task's; cleanup never needs them.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad name, partition key or an empty task list, or a
    /// symlink or a non-directory where a task's staging directory goes;
    /// [`Error::RunConflict`] if the run exists with another snapshot or other tasks; I/O errors
    /// making or syncing the directories (nothing is written then).
    pub fn declare_run(&self, spec: &RunSpec) -> Result<DeclareOutcome> {
        ids::check_run_spec(spec)?;
        self.poison.contain("declare run", || {
            self.whole_call(|| {
                self.make_task_dirs(spec)?;
                self.write_grouped("declaring a run", |meta| {
                    let now = meta.now_ms();
                    ops::declare::declare_run(meta, spec, now)
                })
            })
        })
    }

    /// What a declare does before its write: for a run not declared yet (a read first), its
    /// tasks' directories made and made durable (`files::make_task_dirs_durable`) under the
    /// staging root, whose marker is checked. A run declared already made its directories then
    /// (through this handle or another), and a re-declaration makes none.
    fn make_task_dirs(&self, spec: &RunSpec) -> Result<()> {
        let declared = self.snapshot()?.read("reading the run to declare", |meta| Ok(meta.run(&spec.dataset, &spec.run)?.is_some()))?;
        if declared {
            return Ok(());
        }
        let rels =
            spec.tasks.iter().map(|task| ids::staging_parent_rel(&spec.dataset, &spec.run, &task.partition)).collect::<Result<Vec<_>>>()?;
        // An object root has no directories: an attempt's prefix exists once an object is in it.
        let Some(root) = self.staging.local() else { return Ok(()) };
        files::make_task_dirs_durable(root, self.checked_staging_root()?, &rels, &self.durable_dirs)?;
        Ok(())
    }

    /// Begins a new attempt of a task: durably assigns the next attempt number and creates the
    /// attempt's private staging directory under the staging root.
    ///
    /// The directories are not synced here: a begin's directory matters only once a worker
    /// wrote files into it, and validation makes those files and every directory on their way
    /// durable before it stores a Valid verdict (DOMAIN 11). If a power loss takes the
    /// directory away, the worker's output is gone with it and the attempt is not valid.
    ///
    /// # Errors
    /// [`Error::UnknownRun`], [`Error::UnknownTask`], [`Error::RunPublished`] (a published run
    /// takes no new attempts), [`Error::InvalidInput`] for bad names or a staging path that
    /// would pass through a symlink, I/O and storage errors.
    pub fn begin_attempt(&self, task: &TaskKey) -> Result<AttemptTicket> {
        self.poison.contain("begin attempt", || {
            self.whole_call(|| {
                let snapshot = self.snapshot()?;
                let mut prepared = self.prepare_begin(&snapshot, task, None)?;
                drop(snapshot);
                self.write_begin("beginning an attempt", task, |meta| self.begin_body(meta, &mut prepared))
            })
        })
    }

    /// What a begin does before its write: the task's directory does not depend on the attempt
    /// number, so it is made (and checked for symlinks) before the write, outside the single
    /// writer's critical section; inside it there is one `mkdirat` (see `begin_dirs`). A read
    /// first (of `snapshot`), so that no directory is made for a task that does not exist.
    /// `dirs`: a batch's way into the staging tree, whose root's marker it checked once for all
    /// its begins; without it the root is opened and its marker checked here.
    pub(super) fn prepare_begin(&self, snapshot: &super::Snapshot, task: &TaskKey, dirs: Option<&mut BeginDirs>) -> Result<PreparedBegin> {
        let parent_rel = check_begin(snapshot, task)?;
        let Some(root) = self.staging.local() else {
            // On object storage a begin creates nothing: the attempt's prefix is its staging
            // path below the root, which no other attempt is ever given (DOMAIN: injective
            // staging paths), and exists once the worker puts an object in it.
            return Ok(PreparedBegin { task: task.clone(), dir: None });
        };
        // Nothing is created under a root that is not this store's (its marker checked).
        let mut own;
        let dirs = match dirs {
            Some(dirs) => dirs,
            None => {
                own = BeginDirs::new(root, self.checked_staging_root()?)?;
                &mut own
            }
        };
        PreparedBegin::make(task.clone(), &parent_rel, dirs)
    }

    /// The begin, in a write transaction (a single call's or a batch's): takes the next attempt
    /// number and makes the attempt's directory.
    pub(super) fn begin_body(&self, meta: &mut dyn Meta, prepared: &mut PreparedBegin) -> Result<TxnEnd<AttemptTicket>> {
        let PreparedBegin { task, dir } = prepared;
        let now = meta.now_ms();
        // The directory is made before the commit: if the commit fails, the number is not taken
        // and the next begin reuses the (empty, never handed out) directory.
        ops::attempts::begin(meta, task, now, |attempt, staging_rel| match dir {
            Some(dir) => dir.create_attempt_dir(&ids::attempt_dir_name(attempt)),
            None => Ok(self.staging.path().join(staging_rel)),
        })
    }

    /// Records a finished attempt's candidate. Finishing again with the identical candidate
    /// writes nothing.
    ///
    /// # Errors
    /// [`Error::UnknownAttempt`], [`Error::ForeignSnapshot`] if the candidate read another
    /// snapshot than the run's, [`Error::CandidateConflict`] if a different candidate was
    /// recorded, [`Error::InvalidInput`] for a bad file path or digest.
    pub fn finish_attempt(&self, attempt: &AttemptKey, candidate: &Candidate) -> Result<FinishOutcome> {
        check_finish(attempt, candidate)?;
        self.write_grouped("finishing an attempt", |meta| finish_body(meta, attempt, candidate))
    }

    /// Validates a finished attempt: its snapshot is the run's, its rows and total match the
    /// task's expectations, and its files are present as reported (sizes, and checksums with
    /// [`FileCheck::SizeAndChecksum`]). The verdict is stored; a valid attempt numbered below
    /// the task's accepted one becomes the accepted one. A verdict, once stored, is final:
    /// validating again returns it without looking at the files.
    ///
    /// For a run with a [`crate::Grain`], validation reads every file (streaming, outside the
    /// write transaction, memory bounded by [`crate::StoreOptions`]) and computes the rows, the
    /// measure's total, the duplicate grain keys, the rejected rows and the canonical digest
    /// ([`crate::RowDigest`]); those computed figures are compared with the expectations, the
    /// reported ones are only cross-checks. The figures are stored beside the verdict
    /// ([`crate::AttemptInfo::reconciliation`]); without a grain they say that only reported
    /// figures were compared.
    ///
    /// Data durability (DOMAIN 11): before a Valid verdict is stored, every file of the
    /// candidate is `fdatasync`ed and every directory from the files' own up to the staging root
    /// `fsync`ed, once each, outside the write transaction. A candidate whose sync fails is
    /// Invalid ([`GateFailure::FileUnreadable`](crate::GateFailure::FileUnreadable), "could not
    /// be made durable"): its content may not be on disk and a retried sync would prove nothing.
    ///
    /// Once the run is published its accepted attempts are frozen: later verdicts are stored
    /// but change nothing that was published.
    ///
    /// # Errors
    /// [`Error::UnknownAttempt`], [`Error::AttemptState`] if the attempt has not finished,
    /// [`Error::Io`] if a file cannot be read while reading at the grain, or if a file or
    /// directory of a valid candidate cannot be opened to sync it (nothing is stored: validate
    /// again), storage errors.
    pub fn validate_attempt(&self, attempt: &AttemptKey, check: FileCheck) -> Result<Verdict> {
        self.validate_attempt_with_progress(attempt, check, NO_PROGRESS)
    }

    /// [`Store::validate_attempt`], reporting how far its file work has come to `progress`
    /// (stages [`ProgressStage::CheckingFiles`], then at a grain [`ProgressStage::ReadingRows`],
    /// then for a valid candidate [`ProgressStage::SyncingFiles`]; see [`Progress`]). A verdict
    /// stored before the call reports nothing.
    ///
    /// # Errors
    /// As [`Store::validate_attempt`].
    pub fn validate_attempt_with_progress(&self, attempt: &AttemptKey, check: FileCheck, progress: &dyn Fn(Progress)) -> Result<Verdict> {
        self.poison.contain("validate attempt", || {
            self.whole_call(|| {
                let snapshot = self.snapshot()?;
                let prepared = prepare_validation(&snapshot, &self.file_work(), attempt, check, progress)?;
                drop(snapshot);
                self.store_validation(&prepared)
            })
        })
    }

    /// Finishes and validates an attempt in one durable commit: what [`Store::finish_attempt`]
    /// followed by [`Store::validate_attempt`] do, for the coordinator that validates a
    /// candidate as soon as it arrives (the embedded scheduler's common path). The candidate's
    /// files are checked (and, for a run with a [`crate::Grain`], read) and, for a valid
    /// candidate, made durable first, outside the write transaction; then one grouped write
    /// records the candidate and stores the verdict together, so a crash leaves either both or
    /// neither.
    ///
    /// Calling it again with the same candidate returns the stored verdict; a different
    /// candidate than the one recorded is refused ([`Error::CandidateConflict`]), as by
    /// [`Store::finish_attempt`].
    ///
    /// # Errors
    /// As [`Store::finish_attempt`] and [`Store::validate_attempt`].
    pub fn finish_and_validate(&self, attempt: &AttemptKey, candidate: &Candidate, check: FileCheck) -> Result<Verdict> {
        check_finish(attempt, candidate)?;
        self.poison.contain("finish and validate attempt", || {
            self.whole_call(|| {
                let snapshot = self.snapshot()?;
                let task = &attempt.task;
                let (run, spec) = snapshot.read("reading the attempt to finish and validate", |meta| {
                    let run = read_run(meta, &task.dataset, &task.run)?;
                    let record = read_task(meta, task)?;
                    Ok((run, task_spec(task, &record)))
                })?;
                let dataset_columns = match &run.grain {
                    Some(grain) => published_columns(&snapshot, &self.staging, &task.dataset, grain)?,
                    None => None,
                };
                drop(snapshot);
                // What the write would refuse on the candidate alone (another snapshot, figures
                // missing) is refused before any file is read or synced.
                let for_finish = rules::attempts::RunForFinish { snapshot: &run.snapshot, has_grain: run.grain.is_some() };
                rules::attempts::finish(attempt, candidate, for_finish, None, None)?;
                // Where the begin made the attempt's directory; the write checks that its record
                // names the same one.
                let staging_rel = ids::staging_rel(&task.dataset, &task.run, &task.partition, attempt.attempt)?;
                let (verdict, reconciliation) = decide_verdict(
                    &self.file_work(),
                    Against { run: &run, spec: &spec, dataset_columns },
                    &staging_rel,
                    candidate,
                    check,
                    NO_PROGRESS,
                )?;
                let finished = self.write_grouped("finishing and validating an attempt", |meta| {
                    ops::validate::finish_and_store_verdict(meta, attempt, candidate, &staging_rel, &verdict, &reconciliation)
                })?;
                match finished {
                    ops::validate::FinishedVerdict::Stored(verdict) => Ok(verdict),
                    // A record made by a build that named staging directories otherwise: the two
                    // steps, each reading what the record says.
                    ops::validate::FinishedVerdict::StagingElsewhere => {
                        self.finish_attempt(attempt, candidate)?;
                        self.validate_attempt(attempt, check)
                    }
                }
            })
        })
    }

    /// Validates every attempt of a run that finished and awaits validation
    /// ([`crate::Snapshot::pending_attempts`], found in one snapshot), each as
    /// [`Store::validate_attempt`] does (its files read outside the write transaction, its
    /// verdict stored in a grouped write of its own), in (partition, attempt) order. One result
    /// per attempt: an attempt whose validation fails (a file that cannot be read) fails alone, and
    /// one that another validator validated meanwhile answers with that stored verdict. None
    /// pending is an empty list.
    ///
    /// # Errors
    /// As [`crate::Snapshot::pending_attempts`] (the run unknown, a bad name, storage errors);
    /// each attempt's own errors are in its result.
    pub fn validate_pending(&self, dataset: &str, run: &str, check: FileCheck) -> Result<Vec<(AttemptKey, Result<Verdict>)>> {
        let pending = self.snapshot()?.pending_attempts(dataset, run)?;
        Ok(pending
            .into_iter()
            .map(|attempt| {
                let verdict = self.validate_attempt(&attempt, check);
                (attempt, verdict)
            })
            .collect())
    }

    /// The first half of [`Store::validate_attempt`], which reads files but writes nothing:
    /// checks the attempt's files and, for a valid candidate, makes them durable, and decides
    /// the verdict. [`Store::store_validation`] stores it. A process can prepare through a
    /// [`crate::ReadOnlyStore`] ([`crate::ReadOnlyStore::prepare_validation`]) while another
    /// holds the store for writing, so reading big files never holds the writer.
    ///
    /// # Errors
    /// As [`Store::validate_attempt`].
    pub fn prepare_validation(&self, attempt: &AttemptKey, check: FileCheck) -> Result<PreparedValidation> {
        self.prepare_validation_with_progress(attempt, check, NO_PROGRESS)
    }

    /// [`Store::prepare_validation`], reporting how far its file work has come to `progress`,
    /// as [`Store::validate_attempt_with_progress`] does.
    ///
    /// # Errors
    /// As [`Store::validate_attempt`].
    pub fn prepare_validation_with_progress(
        &self,
        attempt: &AttemptKey,
        check: FileCheck,
        progress: &dyn Fn(Progress),
    ) -> Result<PreparedValidation> {
        self.poison.contain("preparing a validation", || {
            let snapshot = self.snapshot()?;
            prepare_validation(&snapshot, &self.file_work(), attempt, check, progress)
        })
    }

    /// Stores a prepared verdict ([`Store::prepare_validation`]): the second half of
    /// [`Store::validate_attempt`], one grouped write. If a verdict was stored meanwhile (by
    /// another validator), that one stands and is returned.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the verdict was prepared under another staging root than
    /// this store's; [`Error::UnknownAttempt`]; storage errors.
    pub fn store_validation(&self, prepared: &PreparedValidation) -> Result<Verdict> {
        let (candidate, verdict, reconciliation) = match &prepared.decided {
            Decided::Stored(verdict) => return Ok(verdict.clone()),
            Decided::New { candidate, verdict, reconciliation } => (candidate, verdict, reconciliation),
        };
        if prepared.staging_root != self.staging.path() {
            return Err(Error::invalid(
                "prepared validation",
                &prepared.staging_root.display().to_string(),
                format!("was prepared under another staging root than this store's {}", self.staging.path().display()),
            ));
        }
        self.write_grouped("storing a verdict", |meta| store_verdict_body(meta, &prepared.attempt, candidate, verdict, reconciliation))
    }

    /// Publishes a run in one write transaction.
    ///
    /// Every declared task must have an accepted attempt whose candidate passes the gates, and
    /// whose digest equals any digest published earlier for the same input snapshot (unless
    /// `options.accept_nondeterminism` gives a reason). Otherwise nothing is written and the
    /// refusal names every failing task. If all pass, generation N+1 is written as generation N
    /// with exactly the run's partitions replaced, the run's side effects become ready, and the
    /// dataset's pointer moves to N+1, all in one commit.
    ///
    /// The cost is O(T log n) for T tasks: one keyed lookup per task in the accepted index and
    /// the digest index, one version entry written per task; nothing is copied from generation
    /// N and no attempt list is sorted.
    ///
    /// Publishing a run that is already published returns its generation as
    /// [`PublishOutcome::AlreadyPublished`], so a caller whose acknowledgement was lost retries
    /// safely.
    ///
    /// With views ([`crate::StoreOptions::views`]), the dataset's view follows once the
    /// commit is durable (also for [`PublishOutcome::AlreadyPublished`], so a retried publish
    /// repairs a view an earlier call left behind).
    ///
    /// # Errors
    /// [`Error::UnknownRun`], storage errors (after which nothing was published);
    /// [`Error::ViewLagging`] if the generation committed but its view could not follow (a
    /// retry returns [`PublishOutcome::AlreadyPublished`] and retries the view).
    pub fn publish(&self, dataset: &str, run: &str, options: &PublishOptions) -> Result<PublishOutcome> {
        let outcome = self.publish_commit(dataset, run, options)?;
        if let PublishOutcome::Published(generation) | PublishOutcome::AlreadyPublished(generation) = &outcome {
            self.view_follows(dataset, generation.number)?;
        }
        Ok(outcome)
    }

    fn publish_commit(&self, dataset: &str, run: &str, options: &PublishOptions) -> Result<PublishOutcome> {
        ids::check_name("dataset", dataset)?;
        ids::check_name("run id", run)?;
        self.write("publishing a run", |meta| {
            // Every file of every accepted candidate is still there with its size (a stat, no
            // read): a file lost since validation is refused as a report naming it, and an I/O
            // error is an error to retry, never a refusal.
            let observe = |accepted: &rules::publish::Accepted| {
                observe_files(&self.staging, &accepted.staging_rel, &accepted.candidate.files, FileCheck::Size, NO_PROGRESS)
            };
            let now = meta.now_ms();
            ops::publish::publish(meta, dataset, run, options.accept_nondeterminism.as_deref(), now, observe)
        })
    }

    /// Records a side effect under its natural key. If an effect with the same key exists,
    /// nothing is written and the first record is returned. The effect is ready to emit once
    /// its run is published (at once if it already is).
    ///
    /// # Errors
    /// [`Error::UnknownRun`], [`Error::UnknownTask`] if the partition is not one of the run's,
    /// [`Error::InvalidInput`] for bad names or a payload over 16 MiB.
    pub fn record_effect(&self, effect: &EffectKey, payload: &[u8]) -> Result<RecordedEffect> {
        check_record(effect, payload)?;
        self.write_grouped("recording a side effect", |meta| record_body(meta, &self.store_id, effect, payload))
    }

    /// Claims a ready side effect for `claimant` for `lease`, so that of several emitters only
    /// one emits it. The claim is granted if nobody holds a live claim, if `claimant` holds it
    /// already (the lease is renewed from now), or if the holder's lease ran out (taken over:
    /// the outcome names the previous claimant, who may have emitted before dying, so an
    /// emitter that takes over should emit idempotently where it can). A live claim of another
    /// emitter, or an effect already marked emitted, is a refusal returned as a value; nothing
    /// is written then.
    ///
    /// The lease is measured with this host's clock; emitters on several hosts need clocks
    /// that agree to well within the lease.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad key or claimant, a zero lease or one longer than
    /// [`EFFECT_CLAIM_LEASE_MAX`]; [`Error::UnknownEffect`]; [`Error::EffectNotReady`] if its
    /// run is not published.
    pub fn claim_effect(&self, effect: &EffectKey, claimant: &str, lease: std::time::Duration) -> Result<ClaimOutcome> {
        check_claim(effect, claimant, lease)?;
        self.write_grouped("claiming a side effect", |meta| claim_body(meta, &self.store_id, effect, claimant, lease))
    }

    /// Marks a ready side effect as emitted. `claimant` is the caller's claim
    /// ([`Store::claim_effect`]), or `None` for an emitter that does not claim. While another
    /// emitter's claim is live the mark is refused ([`MarkOutcome::ClaimedByOther`]); marking
    /// an effect already emitted changes nothing and says so ([`MarkOutcome::AlreadyEmitted`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad key or claimant, [`Error::UnknownEffect`],
    /// [`Error::EffectNotReady`] if its run is not published.
    pub fn mark_effect_emitted(&self, effect: &EffectKey, claimant: Option<&str>) -> Result<MarkOutcome> {
        check_mark(effect, claimant)?;
        self.write_grouped("marking a side effect emitted", |meta| mark_body(meta, &self.store_id, effect, claimant))
    }
}

/// The longest lease [`Store::claim_effect`] grants: a day. An emitter that needs longer renews
/// its claim.
pub const EFFECT_CLAIM_LEASE_MAX: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

pub(super) fn check_claim(effect: &EffectKey, claimant: &str, lease: std::time::Duration) -> Result<()> {
    check_effect_key(effect)?;
    ids::check_name("claimant", claimant)?;
    if lease.is_zero() || lease > EFFECT_CLAIM_LEASE_MAX {
        return Err(Error::invalid("claim lease", &format!("{}ms", lease.as_millis()), "must be more than zero and at most a day"));
    }
    Ok(())
}

pub(super) fn check_mark(effect: &EffectKey, claimant: Option<&str>) -> Result<()> {
    check_effect_key(effect)?;
    match claimant {
        Some(claimant) => ids::check_name("claimant", claimant),
        None => Ok(()),
    }
}

/// The claim, in a write transaction (a single call's or a batch's).
pub(super) fn claim_body(
    meta: &mut dyn Meta,
    store_id: &str,
    effect: &EffectKey,
    claimant: &str,
    lease: std::time::Duration,
) -> Result<TxnEnd<ClaimOutcome>> {
    let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
    let now = meta.now_ms();
    ops::effects::claim(meta, store_id, effect, claimant, lease_ms, now)
}

/// Marking emitted, in a write transaction (a single call's or a batch's).
pub(super) fn mark_body(meta: &mut dyn Meta, store_id: &str, effect: &EffectKey, claimant: Option<&str>) -> Result<TxnEnd<MarkOutcome>> {
    let now = meta.now_ms();
    ops::effects::mark(meta, store_id, effect, claimant, now)
}

fn check_effect_key(effect: &EffectKey) -> Result<()> {
    ids::check_name("dataset", &effect.dataset)?;
    ids::check_name("run id", &effect.run)?;
    ids::check_name("effect name", &effect.effect)?;
    match &effect.partition {
        Some(partition) => ids::check_partition(partition),
        None => Ok(()),
    }
}

/// A verdict decided from the attempt's files ([`Store::prepare_validation`]), not yet stored.
#[derive(Debug, Clone)]
pub struct PreparedValidation {
    attempt: AttemptKey,
    staging_root: std::path::PathBuf,
    decided: Decided,
}

#[derive(Debug, Clone)]
enum Decided {
    /// A verdict was stored already: it is final.
    Stored(Verdict),
    /// Decided now from the candidate's files.
    New { candidate: Box<Candidate>, verdict: Verdict, reconciliation: Box<Reconciliation> },
}

impl Store {
    /// Where and how this handle's validations read and sync files.
    pub(super) fn file_work(&self) -> FileWork<'_> {
        FileWork {
            root: &self.staging,
            limits: ReadLimits { record_bytes_max: self.csv_record_bytes_max, key_bytes_in_memory_max: self.grain_key_bytes_in_memory_max },
            durable: &self.durable_dirs,
        }
    }
}

impl PreparedValidation {
    /// The verdict stored before it was prepared, if any: final, nothing to store.
    pub(super) fn stored_verdict(&self) -> Option<&Verdict> {
        match &self.decided {
            Decided::Stored(verdict) => Some(verdict),
            Decided::New { .. } => None,
        }
    }

    /// The attempt.
    pub fn attempt(&self) -> &AttemptKey {
        &self.attempt
    }

    /// The verdict that storing it records (or the one already stored).
    pub fn verdict(&self) -> &Verdict {
        match &self.decided {
            Decided::Stored(verdict) | Decided::New { verdict, .. } => verdict,
        }
    }
}

/// Where and how a validation reads an attempt's files and makes them durable.
pub(super) struct FileWork<'a> {
    pub(super) root: &'a super::StagingRoot,
    pub(super) limits: ReadLimits,
    /// What this handle already made durable (`files::DurableDirs`).
    pub(super) durable: &'a files::DurableDirs,
}

/// The task's expectations as a validation compares with them.
fn task_spec(task: &TaskKey, record: &TaskRecord) -> TaskSpec {
    TaskSpec { partition: task.partition.clone(), expected_rows: record.expected_rows, expected_total: record.expected_total }
}

/// Reads what validating `attempt` needs from `snapshot`, observes its files under the staging
/// root (outside any write transaction: it may read whole files), makes a valid candidate
/// durable, and decides the verdict.
pub(super) fn prepare_validation(
    snapshot: &super::Snapshot,
    work: &FileWork<'_>,
    attempt: &AttemptKey,
    check: FileCheck,
    progress: &dyn Fn(Progress),
) -> Result<PreparedValidation> {
    check_task_key(&attempt.task)?;
    let task = &attempt.task;
    let (spec, run, mut record) = snapshot.read("reading the attempt to validate", |meta| {
        let run = read_run(meta, &task.dataset, &task.run)?;
        let task_record = read_task(meta, task)?;
        let record: AttemptRecord = meta.attempt(attempt)?.ok_or_else(|| unknown_attempt(attempt))?;
        Ok((task_spec(task, &task_record), run, record))
    })?;
    let prepared = |decided| PreparedValidation { attempt: attempt.clone(), staging_root: work.root.path().to_path_buf(), decided };
    let (verdict, candidate) = (record.verdict.take(), record.candidate.take());
    let candidate = match rules::attempts::to_validate(attempt, verdict, record.abandoned_at_ms, candidate)? {
        ToValidate::Final(verdict) => return Ok(prepared(Decided::Stored(verdict))),
        ToValidate::Candidate(candidate) => candidate,
    };
    // A Parquet file must have the columns the dataset's published files have (read while the
    // snapshot is held).
    let dataset_columns = match &run.grain {
        Some(grain) => published_columns(snapshot, work.root, &task.dataset, grain)?,
        None => None,
    };
    let (verdict, reconciliation) =
        decide_verdict(work, Against { run: &run, spec: &spec, dataset_columns }, &record.staging_rel, &candidate, check, progress)?;
    Ok(prepared(Decided::New { candidate: Box::new(candidate), verdict, reconciliation: Box::new(reconciliation) }))
}

/// What a candidate is validated against: its run, its task's expectations and, for a Parquet
/// grain, the columns of the dataset's published files (see [`published_columns`]).
struct Against<'a> {
    run: &'a RunRecord,
    spec: &'a TaskSpec,
    dataset_columns: Option<Vec<String>>,
}

/// The verdict on `candidate`, whose files lie in `staging_rel`: observes them (and reads them
/// at the run's grain), decides, and for a valid candidate makes the files and every directory
/// on their way durable first (DOMAIN 11: a Valid verdict is stored only once they are; the
/// directories this handle made durable before are not synced again). A failed sync refuses
/// the candidate. Each stage of file work reports to `progress`.
fn decide_verdict(
    work: &FileWork<'_>,
    against: Against<'_>,
    staging_rel: &str,
    candidate: &Candidate,
    check: FileCheck,
    progress: &dyn Fn(Progress),
) -> Result<(Verdict, Reconciliation)> {
    let Against { run, spec, dataset_columns } = against;
    let observed = observe_files(work.root, staging_rel, &candidate.files, check, progress)?;
    let computed = match &run.grain {
        Some(grain) => {
            let read = read_candidate_data(work, grain, staging_rel, candidate, &observed, dataset_columns, progress)?;
            Some((grain.format, read))
        }
        None => None,
    };
    let (verdict, reconciliation) =
        rules::validate::verdict(&run.snapshot, spec, candidate, &observed, computed.as_ref().map(|(f, c)| (*f, c)));
    let verdict = if verdict.is_valid() {
        let mut syncing = Tracker::start(progress, ProgressStage::SyncingFiles, candidate.files.iter().map(|f| f.size_bytes));
        let failures = work.root.make_candidate_durable(staging_rel, &candidate.files, work.durable, |file| {
            syncing.file_done(file.size_bytes);
        })?;
        rules::validate::after_sync(verdict, &failures)
    } else {
        verdict
    };
    Ok((verdict, reconciliation))
}

/// For a Parquet grain, the typed columns of the dataset's current generation's first Parquet
/// file (read from its footer), which every new Parquet file must have; `None` for CSV, before
/// the first publish, or if that file cannot be read (then only the grain's columns are
/// checked).
fn published_columns(
    snapshot: &super::Snapshot,
    root: &super::StagingRoot,
    dataset: &str,
    grain: &crate::grain::Grain,
) -> Result<Option<Vec<String>>> {
    if grain.format != crate::grain::DataFormat::Parquet || !cfg!(feature = "parquet") {
        return Ok(None);
    }
    let Some(manifest) = snapshot.manifest(dataset, None)? else { return Ok(None) };
    let Some((partition, file)) =
        manifest.partitions.iter().find_map(|p| p.files.iter().find(|f| f.path.ends_with(".parquet")).map(|f| (p, f)))
    else {
        return Ok(None);
    };
    let Ok(Some((opened, _))) = root.open_file(&partition.staging_rel, &file.path) else {
        return Ok(None);
    };
    #[cfg(feature = "parquet")]
    return Ok(readers::parquet_typed_columns(opened));
    #[cfg(not(feature = "parquet"))]
    {
        drop(opened);
        Ok(None)
    }
}

/// The limits of reading a candidate at its grain ([`crate::StoreOptions`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct ReadLimits {
    pub(super) record_bytes_max: usize,
    pub(super) key_bytes_in_memory_max: usize,
}

/// Reads the candidate's files at the run's grain (outside any transaction: it may read
/// gigabytes) and computes rows, total, duplicate keys and the canonical digest. Files
/// that observation found missing or unreadable are left out (their failure is already
/// in the verdict).
///
/// # Errors
/// [`Error::Io`] when a file or the key spill cannot be read or written: a fault to retry,
/// not a verdict on the candidate.
fn read_candidate_data(
    work: &FileWork<'_>,
    grain: &crate::grain::Grain,
    staging_rel: &str,
    candidate: &Candidate,
    observed: &[FileObservation],
    dataset_columns: Option<Vec<String>>,
    progress: &dyn Fn(Progress),
) -> Result<rules::validate::Computed> {
    let present: Vec<FileEntry> = candidate
        .files
        .iter()
        .zip(observed)
        .filter(|(_, seen)| matches!(seen, FileObservation::Present { .. }))
        .map(|(file, _)| file.clone())
        .collect();
    let (root, limits) = (work.root, work.limits);
    let options = readers::ReadOptions {
        record_bytes_max: limits.record_bytes_max,
        key_bytes_in_memory_max: limits.key_bytes_in_memory_max,
        spill_parent: root.spill_parent(),
        dataset_columns,
    };
    // Each file is opened through directory handles from the staging root, without
    // following a symlink: what is read is what observation saw (or the file is missing).
    let open = |file: &FileEntry| root.open_file(staging_rel, &file.path);
    let mut reading = Tracker::start(progress, ProgressStage::ReadingRows, present.iter().map(|f| f.size_bytes));
    let computed = readers::read_partition(grain, staging_rel, &present, open, |file| reading.file_done(file.size_bytes), &options)?;
    tracing::debug!(
        rows = computed.rows,
        files = computed.files,
        bytes = computed.bytes,
        runs_spilled = computed.runs_spilled,
        "read a candidate at its grain"
    );
    Ok(computed)
}

/// Storing a prepared verdict in a batch's transaction (prepared by the batch itself, under
/// this store's staging root).
pub(super) fn store_prepared_body(meta: &mut dyn Meta, prepared: &PreparedValidation) -> Result<TxnEnd<Verdict>> {
    match &prepared.decided {
        Decided::Stored(verdict) => Ok(TxnEnd::Abort(verdict.clone())),
        Decided::New { candidate, verdict, reconciliation } => {
            store_verdict_body(meta, &prepared.attempt, candidate, verdict, reconciliation)
        }
    }
}

/// Storing a decided verdict, in a write transaction (a single call's or a batch's).
pub(super) fn store_verdict_body(
    meta: &mut dyn Meta,
    attempt: &AttemptKey,
    candidate: &Candidate,
    verdict: &Verdict,
    reconciliation: &Reconciliation,
) -> Result<TxnEnd<Verdict>> {
    ops::validate::store_verdict(meta, attempt, candidate, verdict, reconciliation)
}

/// What is seen of each reported file of an attempt, through directory handles from the
/// staging root. An I/O error other than "no regular file there" (permission denied, EIO)
/// is returned as [`Error::Io`], never turned into a verdict: the caller may retry.
fn observe_files(
    root: &super::StagingRoot,
    staging_rel: &str,
    files: &[FileEntry],
    check: FileCheck,
    progress: &dyn Fn(Progress),
) -> Result<Vec<FileObservation>> {
    let mut checking = Tracker::start(progress, ProgressStage::CheckingFiles, files.iter().map(|f| f.size_bytes));
    files
        .iter()
        .map(|file| {
            let observed = match root.observe_file(staging_rel, &file.path, check == FileCheck::SizeAndChecksum) {
                Ok(Some((size_bytes, crc32))) => FileObservation::Present { size_bytes, crc32 },
                Ok(None) => FileObservation::Missing,
                Err(e) => {
                    return Err(Error::io(
                        format!("checking file {:?} of {staging_rel} (retry once the cause is fixed; no verdict was stored)", file.path),
                        e,
                    ));
                }
            };
            checking.file_done(file.size_bytes);
            Ok(observed)
        })
        .collect()
}

/// A begin's state between its preparation and its write ([`Store::prepare_begin`]).
pub(super) struct PreparedBegin {
    task: TaskKey,
    /// The task's directory (the attempt's parent), made and checked before the write; `None`
    /// on object storage, where nothing is made.
    dir: Option<TaskDir>,
}

impl PreparedBegin {
    /// The file work of [`Store::prepare_begin`] once [`check_begin`] passed: makes the task's
    /// directory `parent_rel` through `dirs`.
    pub(super) fn make(task: TaskKey, parent_rel: &str, dirs: &mut BeginDirs) -> Result<PreparedBegin> {
        Ok(PreparedBegin { task, dir: Some(dirs.prepare(parent_rel)?) })
    }
}

/// The checks of a begin before any file work: the task's key, its existence in `snapshot`
/// (the write reads run and task again, in its own transaction; the run is read only to name
/// what is missing). Returns the task's directory relative to the staging root.
pub(super) fn check_begin(snapshot: &super::Snapshot, task: &TaskKey) -> Result<String> {
    check_task_key(task)?;
    snapshot.read("reading the task to begin", |meta| match meta.task(task)? {
        Some(_) => Ok(()),
        None => read_run(meta, &task.dataset, &task.run).and_then(|_| read_task(meta, task)).map(drop),
    })?;
    ids::staging_parent_rel(&task.dataset, &task.run, &task.partition)
}

pub(super) fn check_finish(attempt: &AttemptKey, candidate: &Candidate) -> Result<()> {
    check_task_key(&attempt.task)?;
    ids::check_candidate(candidate)
}

/// Recording a candidate, in a write transaction (a single call's or a batch's).
pub(super) fn finish_body(meta: &mut dyn Meta, attempt: &AttemptKey, candidate: &Candidate) -> Result<TxnEnd<FinishOutcome>> {
    ops::attempts::finish(meta, attempt, candidate)
}

pub(super) fn check_record(effect: &EffectKey, payload: &[u8]) -> Result<()> {
    check_effect_key(effect)?;
    if payload.len() > EFFECT_PAYLOAD_BYTES_MAX {
        return Err(Error::invalid(
            "effect payload",
            &effect.effect,
            format!("is {} bytes, more than {EFFECT_PAYLOAD_BYTES_MAX}", payload.len()),
        ));
    }
    Ok(())
}

/// Recording an effect, in a write transaction (a single call's or a batch's).
pub(super) fn record_body(meta: &mut dyn Meta, store_id: &str, effect: &EffectKey, payload: &[u8]) -> Result<TxnEnd<RecordedEffect>> {
    let now = meta.now_ms();
    ops::effects::record(meta, store_id, effect, payload, now)
}

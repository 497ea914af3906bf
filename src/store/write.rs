//! The write operations: declare, begin, finish, validate, publish, side effects.
//!
//! Each one reads and checks everything first and writes only once every check passed, so a
//! refused operation leaves its transaction untouched (and aborts it).

use redb::{ReadableTable, WriteTransaction};

use super::tables::{self, get, put, scan};
use super::{Store, TxnEnd, files, now_ms};
use crate::error::{Error, Result};
use crate::grain::Reconciliation;
use crate::model::{
    AttemptKey, AttemptStatus, AttemptTicket, Candidate, ClaimOutcome, DeclareOutcome, Effect, EffectKey, FileCheck, FileEntry,
    FinishOutcome, Generation, GenerationKind, MarkOutcome, PublishOptions, PublishOutcome, RecordedEffect, RunSpec, TaskKey, TaskSpec,
    Verdict,
};
use crate::readers;
use crate::records::{
    AcceptedRecord, AttemptRecord, DigestRecord, EffectRecord, GenerationRecord, PartitionEntryRecord, PartitionVersionRecord,
    PointerRecord, RunRecord, TaskRecord,
};
use crate::rules::attempts::{Finish, StoreVerdict, ToValidate};
use crate::rules::effects::{ClaimDecision, MarkDecision};
use crate::rules::validate::FileObservation;
use crate::rules::{self, declare, ids};
use crate::schema::{
    self, ACCEPTED, ATTEMPTS, DIGESTS, EFFECTS, GENERATIONS, POINTERS, RUNS, TASKS, VERSIONS, key, key_u32, key_u64, prefix, prefix_end,
};

/// Largest side-effect payload, in bytes.
const EFFECT_PAYLOAD_BYTES_MAX: usize = 16 * 1024 * 1024;

fn open<'t>(txn: &'t WriteTransaction, def: schema::Def) -> Result<redb::Table<'t, &'static [u8], &'static [u8]>> {
    txn.open_table(def.def()).map_err(|e| Error::storage("opening a table", e))
}

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
fn read_run(table: &impl tables::Readable, dataset: &str, run: &str) -> Result<RunRecord> {
    get(table, RUNS, &key(&[dataset, run]))?.ok_or_else(|| unknown_run(dataset, run))
}

/// Reads a task, or fails with [`Error::UnknownTask`].
fn read_task(table: &impl tables::Readable, task: &TaskKey) -> Result<TaskRecord> {
    get(table, TASKS, &key(&[&task.dataset, &task.run, &task.partition]))?.ok_or_else(|| Error::UnknownTask {
        dataset: task.dataset.clone(),
        run: task.run.clone(),
        partition: task.partition.clone(),
    })
}

pub(crate) fn generation_from(dataset: &str, number: u64, record: GenerationRecord) -> Generation {
    Generation {
        dataset: dataset.to_owned(),
        number,
        parent: record.parent,
        run: record.run,
        snapshot: record.snapshot,
        published_at_ms: record.published_at_ms,
        partitions_replaced: record.partitions_replaced,
        nondeterminism_accepted: record.nondeterminism_accepted,
        kind: record.kind,
    }
}

impl Store {
    /// Declares a run: its dataset, id, pinned input snapshot and tasks with their
    /// expectations. Declaring the identical run again writes nothing.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad name, partition key or an empty task list;
    /// [`Error::RunConflict`] if the run exists with another snapshot or other tasks.
    pub fn declare_run(&self, spec: &RunSpec) -> Result<DeclareOutcome> {
        ids::check_run_spec(spec)?;
        self.write_grouped("declaring a run", |txn| {
            let mut runs = open(txn, RUNS)?;
            let mut tasks = open(txn, TASKS)?;
            let run_key = key(&[&spec.dataset, &spec.run]);
            if let Some(existing) = get::<RunRecord>(&runs, RUNS, &run_key)? {
                compare_declaration(spec, &existing, &tasks)?;
                return Ok(TxnEnd::Abort(DeclareOutcome::AlreadyDeclared));
            }
            put(
                &mut runs,
                &run_key,
                &RunRecord {
                    snapshot: spec.snapshot.clone(),
                    task_count: spec.tasks.len() as u64,
                    declared_at_ms: now_ms(),
                    published_generation: None,
                    grain: spec.grain.clone(),
                },
            )?;
            for task in &spec.tasks {
                put(
                    &mut tasks,
                    &key(&[&spec.dataset, &spec.run, &task.partition]),
                    &TaskRecord { expected_rows: task.expected_rows, expected_total: task.expected_total, next_attempt: 1 },
                )?;
            }
            Ok(TxnEnd::Commit(DeclareOutcome::Declared))
        })
    }

    /// Begins a new attempt of a task: durably assigns the next attempt number and creates the
    /// attempt's private staging directory under the staging root. Before it returns, every
    /// directory it created (and the parent of each) is synced, so the directory handed out
    /// survives a power loss.
    ///
    /// # Errors
    /// [`Error::UnknownRun`], [`Error::UnknownTask`], [`Error::RunPublished`] (a published run
    /// takes no new attempts), [`Error::InvalidInput`] for bad names or a staging path that
    /// would pass through a symlink, I/O and storage errors.
    pub fn begin_attempt(&self, task: &TaskKey) -> Result<AttemptTicket> {
        self.poison.contain("begin attempt", || {
            let snapshot = self.snapshot()?;
            let mut prepared = self.prepare_begin(&snapshot, task)?;
            drop(snapshot);
            let ticket = self.write_grouped("beginning an attempt", |txn| self.begin_body(txn, &mut prepared))?;
            // Outside the write transaction (never inside the single writer's critical section),
            // before the ticket is handed out. A failure here leaves a committed attempt nobody
            // holds; its lease runs out and the task is begun again.
            files::sync_created_dirs(&ticket.staging_dir, &prepared.created)?;
            Ok(ticket)
        })
    }

    /// What a begin does before its write: the task's directory does not depend on the attempt
    /// number, so it is made (and checked for symlinks) before the write, outside the single
    /// writer's critical section; inside it there is one `mkdir`. A read first (of `snapshot`),
    /// so that no directory is made for a task that does not exist.
    pub(super) fn prepare_begin(&self, snapshot: &super::Snapshot, task: &TaskKey) -> Result<PreparedBegin> {
        check_task_key(task)?;
        {
            let txn = snapshot.txn();
            let runs = txn.open_table(RUNS.def()).map_err(|e| Error::storage("opening a table", e))?;
            let tasks = txn.open_table(TASKS.def()).map_err(|e| Error::storage("opening a table", e))?;
            read_run(&runs, &task.dataset, &task.run)?;
            read_task(&tasks, task)?;
        }
        let parent_rel = ids::staging_parent_rel(&task.dataset, &task.run, &task.partition)?;
        // Nothing is created under a root that is not this store's (its marker checked).
        drop(self.checked_staging_root()?);
        let mut created = Vec::new();
        let parent = files::prepare_staging_parent(&self.staging_root, &parent_rel, &mut created)?;
        Ok(PreparedBegin { task: task.clone(), parent, created })
    }

    /// The begin, in a write transaction (a single call's or a batch's): takes the next attempt
    /// number and makes the attempt's directory. The caller syncs `prepared.created` after the
    /// commit.
    pub(super) fn begin_body(&self, txn: &WriteTransaction, prepared: &mut PreparedBegin) -> Result<TxnEnd<AttemptTicket>> {
        let task = &prepared.task;
        let runs = open(txn, RUNS)?;
        let mut tasks = open(txn, TASKS)?;
        let mut attempts = open(txn, ATTEMPTS)?;
        let run = read_run(&runs, &task.dataset, &task.run)?;
        let mut record = read_task(&tasks, task)?;
        let (attempt, next_attempt) = rules::attempts::begin(task, run.published_generation, record.next_attempt)?;
        record.next_attempt = next_attempt;
        let staging_rel = ids::staging_rel(&task.dataset, &task.run, &task.partition, attempt)?;
        let started_at_ms = now_ms();
        let attempt_key = key_u32(&[&task.dataset, &task.run, &task.partition], attempt);
        if attempts.get(attempt_key.as_slice()).map_err(|e| Error::storage("reading an attempt", e))?.is_some() {
            return Err(tables::corrupted(ATTEMPTS, &attempt_key, "attempt exists beyond its task's next attempt number"));
        }
        // The directory is made before the commit: if the commit fails, the number is not
        // taken and the next begin reuses the (empty, never handed out) directory.
        let staging_dir = match files::create_attempt_dir(&prepared.parent, &ids::attempt_dir_name(attempt), &staging_rel)? {
            Some(dir) => dir,
            None => files::create_staging_dir(&self.staging_root, &staging_rel, &mut prepared.created)?,
        };
        put(&mut tasks, &key(&[&task.dataset, &task.run, &task.partition]), &record)?;
        put(
            &mut attempts,
            &attempt_key,
            &AttemptRecord {
                started_at_ms,
                heartbeat_at_ms: started_at_ms,
                abandoned_at_ms: None,
                staging_rel,
                candidate: None,
                verdict: None,
                reconciliation: None,
            },
        )?;
        Ok(TxnEnd::Commit(AttemptTicket { key: task.attempt(attempt), staging_dir, started_at_ms }))
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
        self.write_grouped("finishing an attempt", |txn| finish_body(txn, attempt, candidate))
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
        self.poison.contain("validate attempt", || {
            let snapshot = self.snapshot()?;
            let prepared = prepare_validation(&snapshot, &self.staging_root, self.read_limits(), attempt, check)?;
            drop(snapshot);
            self.store_validation(&prepared)
        })
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
        self.poison.contain("preparing a validation", || {
            let snapshot = self.snapshot()?;
            prepare_validation(&snapshot, &self.staging_root, self.read_limits(), attempt, check)
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
        if prepared.staging_root != self.staging_root {
            return Err(Error::invalid(
                "prepared validation",
                &prepared.staging_root.display().to_string(),
                format!("was prepared under another staging root than this store's {}", self.staging_root.display()),
            ));
        }
        self.write_grouped("storing a verdict", |txn| store_verdict_body(txn, &prepared.attempt, candidate, verdict, reconciliation))
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
        self.write("publishing a run", |txn| {
            let mut runs = open(txn, RUNS)?;
            let mut generations = open(txn, GENERATIONS)?;
            let run_key = key(&[dataset, run]);
            let mut run_record = read_run(&runs, dataset, run)?;
            if let Some(number) = run_record.published_generation {
                let record = get::<GenerationRecord>(&generations, GENERATIONS, &key_u64(&[dataset], number))?
                    .ok_or_else(|| super::retention::published_generation_missing(&generations, dataset, run, number))?;
                return Ok(TxnEnd::Abort(PublishOutcome::AlreadyPublished(generation_from(dataset, number, record))));
            }
            let mut states = gather_publish_inputs(txn, dataset, run, &run_record)?;
            // Every file of every accepted candidate is still there with its size (a stat, no
            // read): a file lost since validation is refused as a report naming it, and an I/O
            // error is an error to retry, never a refusal.
            for state in &mut states {
                if let Some(accepted) = &state.accepted {
                    state.files_seen =
                        observe_files(&self.staging_root, &accepted.staging_rel, &accepted.candidate.files, FileCheck::Size)?;
                }
            }
            let plan = match rules::publish::plan(dataset, run, &run_record.snapshot, states, options.accept_nondeterminism.as_deref()) {
                Ok(plan) => plan,
                Err(refusal) => return Ok(TxnEnd::Abort(PublishOutcome::Refused(refusal))),
            };
            let mut pointers = open(txn, POINTERS)?;
            let pointer_key = key(&[dataset]);
            let current = get::<PointerRecord>(&pointers, POINTERS, &pointer_key)?.map_or(0, |p| p.generation);
            let number = current.checked_add(1).ok_or_else(|| tables::corrupted(POINTERS, &pointer_key, "generation number overflows"))?;
            let mut versions = open(txn, VERSIONS)?;
            for planned in &plan.partitions {
                let (accepted, candidate) = (&planned.accepted, &planned.accepted.candidate);
                put(
                    &mut versions,
                    &key_u64(&[dataset, &planned.partition], number),
                    &PartitionVersionRecord {
                        entry: Some(PartitionEntryRecord {
                            run: run.to_owned(),
                            attempt: accepted.attempt,
                            snapshot: candidate.snapshot.clone(),
                            rows: planned.rows,
                            total: planned.total,
                            digest: planned.digest.clone(),
                            staging_rel: accepted.staging_rel.clone(),
                            files: candidate.files.clone(),
                        }),
                    },
                )?;
            }
            let mut digests = open(txn, DIGESTS)?;
            for &index in &plan.digests_to_record {
                let planned = &plan.partitions[index];
                put(
                    &mut digests,
                    &key(&[dataset, &run_record.snapshot, &planned.partition]),
                    &DigestRecord { digest: planned.digest.clone(), run: run.to_owned(), generation: number },
                )?;
            }
            let record = GenerationRecord {
                parent: current,
                run: run.to_owned(),
                snapshot: run_record.snapshot.clone(),
                published_at_ms: now_ms(),
                partitions_replaced: plan.partitions.len() as u64,
                nondeterminism_accepted: plan.nondeterminism_accepted,
                kind: GenerationKind::Publish,
            };
            put(&mut generations, &key_u64(&[dataset], number), &record)?;
            run_record.published_generation = Some(number);
            put(&mut runs, &run_key, &run_record)?;
            mark_effects_ready(txn, dataset, run, number)?;
            // The pointer only moves forward, and only here, after the generation is complete.
            debug_assert!(number > current);
            put(&mut pointers, &pointer_key, &PointerRecord { generation: number })?;
            tracing::info!(dataset, run, generation = number, partitions = record.partitions_replaced, "published");
            Ok(TxnEnd::Commit(PublishOutcome::Published(generation_from(dataset, number, record))))
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
        self.write_grouped("recording a side effect", |txn| record_body(txn, effect, payload))
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
        self.write_grouped("claiming a side effect", |txn| claim_body(txn, effect, claimant, lease))
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
        self.write_grouped("marking a side effect emitted", |txn| mark_body(txn, effect, claimant))
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

fn unknown_effect(effect: &EffectKey) -> Error {
    Error::UnknownEffect {
        dataset: effect.dataset.clone(),
        run: effect.run.clone(),
        effect: effect.effect.clone(),
        partition: effect.partition.clone().unwrap_or_default(),
    }
}

/// The claim, in a write transaction (a single call's or a batch's).
pub(super) fn claim_body(
    txn: &WriteTransaction,
    effect: &EffectKey,
    claimant: &str,
    lease: std::time::Duration,
) -> Result<TxnEnd<ClaimOutcome>> {
    let mut effects = open(txn, EFFECTS)?;
    let effect_key = effect_key_bytes(effect);
    let mut record: EffectRecord = get(&effects, EFFECTS, &effect_key)?.ok_or_else(|| unknown_effect(effect))?;
    let now = now_ms();
    match rules::effects::claim(&record.status, record.claim.as_ref(), claimant, now) {
        ClaimDecision::NotReady => Err(Error::EffectNotReady { run: effect.run.clone(), effect: effect.effect.clone() }),
        ClaimDecision::HeldByOther => Ok(TxnEnd::Abort(ClaimOutcome::HeldByOther { effect: effect_from(effect.clone(), record) })),
        ClaimDecision::AlreadyEmitted => Ok(TxnEnd::Abort(ClaimOutcome::AlreadyEmitted { effect: effect_from(effect.clone(), record) })),
        ClaimDecision::Grant { took_over_from } => {
            let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
            record.claim = Some(rules::effects::granted(claimant, now, lease_ms));
            put(&mut effects, &effect_key, &record)?;
            Ok(TxnEnd::Commit(ClaimOutcome::Claimed { effect: effect_from(effect.clone(), record), took_over_from }))
        }
    }
}

/// Marking emitted, in a write transaction (a single call's or a batch's).
pub(super) fn mark_body(txn: &WriteTransaction, effect: &EffectKey, claimant: Option<&str>) -> Result<TxnEnd<MarkOutcome>> {
    let mut effects = open(txn, EFFECTS)?;
    let effect_key = effect_key_bytes(effect);
    let mut record: EffectRecord = get(&effects, EFFECTS, &effect_key)?.ok_or_else(|| unknown_effect(effect))?;
    let now = now_ms();
    match (rules::effects::mark(&record.status, record.claim.as_ref(), claimant, now), rules::effects::emitted(&record.status, now)) {
        (MarkDecision::NotReady, _) => Err(Error::EffectNotReady { run: effect.run.clone(), effect: effect.effect.clone() }),
        (MarkDecision::AlreadyEmitted, _) => Ok(TxnEnd::Abort(MarkOutcome::AlreadyEmitted { effect: effect_from(effect.clone(), record) })),
        (MarkDecision::ClaimedByOther, _) => Ok(TxnEnd::Abort(MarkOutcome::ClaimedByOther { effect: effect_from(effect.clone(), record) })),
        (MarkDecision::Mark, Some(status)) => {
            record.status = status;
            put(&mut effects, &effect_key, &record)?;
            Ok(TxnEnd::Commit(MarkOutcome::Marked { effect: effect_from(effect.clone(), record) }))
        }
        (MarkDecision::Mark, None) => Err(tables::corrupted(EFFECTS, &effect_key, "an effect not ready was to be marked emitted")),
    }
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

pub(crate) fn effect_key_bytes(effect: &EffectKey) -> Vec<u8> {
    key(&[&effect.dataset, &effect.run, &effect.effect, effect.partition.as_deref().unwrap_or("")])
}

pub(crate) fn effect_from(key: EffectKey, record: EffectRecord) -> Effect {
    Effect { key, payload: record.payload, recorded_at_ms: record.recorded_at_ms, status: record.status, claim: record.claim }
}

/// Compares a re-declaration with the stored run (`rules::declare`), reading the stored tasks
/// one by one up to the first difference.
fn compare_declaration(spec: &RunSpec, existing: &RunRecord, tasks: &impl tables::Readable) -> Result<()> {
    let conflict = |detail: String| Error::RunConflict { dataset: spec.dataset.clone(), run: spec.run.clone(), detail };
    let declared = declare::Declared { snapshot: &existing.snapshot, grain: existing.grain.as_ref(), task_count: existing.task_count };
    if let Some(detail) = declare::run_difference(spec, declared) {
        return Err(conflict(detail));
    }
    for task in &spec.tasks {
        let stored: Option<TaskRecord> = get(tasks, TASKS, &key(&[&spec.dataset, &spec.run, &task.partition]))?;
        let stored = stored.map(|t| declare::DeclaredTask { expected_rows: t.expected_rows, expected_total: t.expected_total });
        if let Some(detail) = declare::task_difference(task, stored) {
            return Err(conflict(detail));
        }
    }
    Ok(())
}

/// Reads, for each task of the run, what the publish rule needs: O(1) keyed lookups per task,
/// plus a scan of a task's own attempts only when it has no accepted one (for the report).
fn gather_publish_inputs(
    txn: &WriteTransaction,
    dataset: &str,
    run: &str,
    run_record: &RunRecord,
) -> Result<Vec<rules::publish::TaskState>> {
    let tasks = open(txn, TASKS)?;
    let accepted = open(txn, ACCEPTED)?;
    let attempts = open(txn, ATTEMPTS)?;
    let digests = open(txn, DIGESTS)?;
    let task_prefix = prefix(&[dataset, run]);
    let mut states = Vec::with_capacity(usize::try_from(run_record.task_count).unwrap_or(0).min(1 << 20));
    scan::<TaskRecord>(&tasks, TASKS, &task_prefix, &prefix_end(&task_prefix), |task_key, task| {
        let partition =
            schema::text_after(task_key, &task_prefix).ok_or_else(|| tables::corrupted(TASKS, task_key, "malformed task key"))?.to_owned();
        let spec = TaskSpec { partition: partition.clone(), expected_rows: task.expected_rows, expected_total: task.expected_total };
        let accepted_attempt = get::<AcceptedRecord>(&accepted, ACCEPTED, task_key)?;
        let mut state = rules::publish::TaskState { spec, accepted: None, attempts: Vec::new(), published: None, files_seen: Vec::new() };
        match accepted_attempt {
            Some(AcceptedRecord { attempt }) => {
                let attempt_key = key_u32(&[dataset, run, &partition], attempt);
                let record: AttemptRecord = get(&attempts, ATTEMPTS, &attempt_key)?
                    .ok_or_else(|| tables::corrupted(ACCEPTED, task_key, format!("accepted attempt {attempt} does not exist")))?;
                let (Some(candidate), Some(Verdict::Valid)) = (record.candidate, record.verdict) else {
                    return Err(tables::corrupted(ACCEPTED, task_key, format!("accepted attempt {attempt} is not validated valid")));
                };
                state.accepted = Some(rules::publish::Accepted {
                    attempt,
                    candidate,
                    staging_rel: record.staging_rel,
                    reconciliation: record.reconciliation,
                });
                state.published = get::<DigestRecord>(&digests, DIGESTS, &key(&[dataset, &run_record.snapshot, &partition]))?
                    .map(|d| rules::publish::PublishedDigest { digest: d.digest, run: d.run, generation: d.generation });
            }
            None => state.attempts = task_attempts(&attempts, dataset, run, &partition)?,
        }
        states.push(state);
        Ok(true)
    })?;
    if states.len() as u64 != run_record.task_count {
        return Err(tables::corrupted(
            RUNS,
            &key(&[dataset, run]),
            format!("run declares {} tasks but {} are stored", run_record.task_count, states.len()),
        ));
    }
    Ok(states)
}

/// Every attempt of one task with its status, in attempt order.
pub(crate) fn task_attempts(
    attempts: &impl tables::Readable,
    dataset: &str,
    run: &str,
    partition: &str,
) -> Result<Vec<(u32, AttemptStatus)>> {
    let attempt_prefix = prefix(&[dataset, run, partition]);
    let mut out = Vec::new();
    scan::<AttemptRecord>(attempts, ATTEMPTS, &attempt_prefix, &prefix_end(&attempt_prefix), |attempt_key, record| {
        let number = schema::trailing_u32(attempt_key).ok_or_else(|| tables::corrupted(ATTEMPTS, attempt_key, "malformed attempt key"))?;
        out.push((number, attempt_status(&record)));
        Ok(true)
    })?;
    Ok(out)
}

pub(crate) fn attempt_status(record: &AttemptRecord) -> AttemptStatus {
    match (&record.candidate, &record.verdict, record.abandoned_at_ms) {
        (_, Some(verdict), _) => AttemptStatus::Validated(verdict.clone()),
        (Some(_), None, _) => AttemptStatus::Finished,
        (None, None, Some(abandoned_at_ms)) => AttemptStatus::Abandoned { abandoned_at_ms },
        (None, None, None) => AttemptStatus::Running,
    }
}

/// Makes every recorded effect of the run ready, in the publishing transaction. Touches only
/// the run's own effects (one key range).
fn mark_effects_ready(txn: &WriteTransaction, dataset: &str, run: &str, generation: u64) -> Result<()> {
    let mut effects = open(txn, EFFECTS)?;
    let effect_prefix = prefix(&[dataset, run]);
    let mut updates = Vec::new();
    scan::<EffectRecord>(&effects, EFFECTS, &effect_prefix, &prefix_end(&effect_prefix), |effect_key, mut record| {
        if let Some(status) = rules::effects::on_publish(&record.status, generation) {
            record.status = status;
            updates.push((effect_key.to_vec(), record));
        }
        Ok(true)
    })?;
    for (effect_key, record) in updates {
        put(&mut effects, &effect_key, &record)?;
    }
    Ok(())
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
    /// The limits of reading a candidate at its grain, as this store was opened with.
    pub(super) fn read_limits(&self) -> ReadLimits {
        ReadLimits { record_bytes_max: self.csv_record_bytes_max, key_bytes_in_memory_max: self.grain_key_bytes_in_memory_max }
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

/// Reads what validating `attempt` needs from `snapshot`, observes its files under
/// `staging_root` (outside any write transaction: it may read whole files), makes a valid
/// candidate durable, and decides the verdict.
pub(super) fn prepare_validation(
    snapshot: &super::Snapshot,
    staging_root: &std::path::Path,
    limits: ReadLimits,
    attempt: &AttemptKey,
    check: FileCheck,
) -> Result<PreparedValidation> {
    check_task_key(&attempt.task)?;
    let task = &attempt.task;
    let attempt_key = key_u32(&[&task.dataset, &task.run, &task.partition], attempt.attempt);
    let (spec, run, record) = {
        let txn = snapshot.txn();
        let runs = txn.open_table(RUNS.def()).map_err(|e| Error::storage("opening a table", e))?;
        let tasks = txn.open_table(TASKS.def()).map_err(|e| Error::storage("opening a table", e))?;
        let attempts = txn.open_table(ATTEMPTS.def()).map_err(|e| Error::storage("opening a table", e))?;
        let run = read_run(&runs, &task.dataset, &task.run)?;
        let task_record = read_task(&tasks, task)?;
        let record: AttemptRecord = get(&attempts, ATTEMPTS, &attempt_key)?.ok_or_else(|| unknown_attempt(attempt))?;
        let spec = TaskSpec {
            partition: task.partition.clone(),
            expected_rows: task_record.expected_rows,
            expected_total: task_record.expected_total,
        };
        (spec, run, record)
    };
    let prepared = |decided| PreparedValidation { attempt: attempt.clone(), staging_root: staging_root.to_path_buf(), decided };
    let candidate = match rules::attempts::to_validate(attempt, record.verdict.as_ref(), record.abandoned_at_ms, record.candidate.as_ref())?
    {
        ToValidate::Final(verdict) => return Ok(prepared(Decided::Stored(verdict.clone()))),
        ToValidate::Candidate(candidate) => candidate.clone(),
    };
    let observed = observe_files(staging_root, &record.staging_rel, &candidate.files, check)?;
    let computed = match &run.grain {
        Some(grain) => Some((grain.format, read_candidate_data(staging_root, limits, grain, &record.staging_rel, &candidate, &observed)?)),
        None => None,
    };
    let (verdict, reconciliation) =
        rules::validate::verdict(&run.snapshot, &spec, &candidate, &observed, computed.as_ref().map(|(f, c)| (*f, c)));
    // DOMAIN 11: a Valid verdict is stored only once every file of the candidate and every
    // directory from the attempt's up to the staging root is durable. Synced here, outside
    // the write transaction; a failed sync refuses the candidate.
    let verdict = if verdict.is_valid() {
        let failures = files::make_candidate_durable(staging_root, &record.staging_rel, &candidate.files)?;
        rules::validate::after_sync(verdict, &failures)
    } else {
        verdict
    };
    Ok(prepared(Decided::New { candidate: Box::new(candidate), verdict, reconciliation: Box::new(reconciliation) }))
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
    staging_root: &std::path::Path,
    limits: ReadLimits,
    grain: &crate::grain::Grain,
    staging_rel: &str,
    candidate: &Candidate,
    observed: &[FileObservation],
) -> Result<rules::validate::Computed> {
    let present: Vec<FileEntry> = candidate
        .files
        .iter()
        .zip(observed)
        .filter(|(_, seen)| matches!(seen, FileObservation::Present { .. }))
        .map(|(file, _)| file.clone())
        .collect();
    let options = readers::ReadOptions {
        record_bytes_max: limits.record_bytes_max,
        key_bytes_in_memory_max: limits.key_bytes_in_memory_max,
        spill_parent: staging_root.to_path_buf(),
    };
    // Each file is opened through directory handles from the staging root, without
    // following a symlink: what is read is what observation saw (or the file is missing).
    let open = |file: &FileEntry| super::handles::open_regular_file(staging_root, staging_rel, &file.path);
    let computed = readers::read_partition(grain, staging_rel, &present, open, &options)?;
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
pub(super) fn store_prepared_body(txn: &WriteTransaction, prepared: &PreparedValidation) -> Result<TxnEnd<Verdict>> {
    match &prepared.decided {
        Decided::Stored(verdict) => Ok(TxnEnd::Abort(verdict.clone())),
        Decided::New { candidate, verdict, reconciliation } => {
            store_verdict_body(txn, &prepared.attempt, candidate, verdict, reconciliation)
        }
    }
}

/// Storing a decided verdict, in a write transaction (a single call's or a batch's).
pub(super) fn store_verdict_body(
    txn: &WriteTransaction,
    attempt: &AttemptKey,
    candidate: &Candidate,
    verdict: &Verdict,
    reconciliation: &Reconciliation,
) -> Result<TxnEnd<Verdict>> {
    let task = &attempt.task;
    let task_key = key(&[&task.dataset, &task.run, &task.partition]);
    let attempt_key = key_u32(&[&task.dataset, &task.run, &task.partition], attempt.attempt);
    let runs = open(txn, RUNS)?;
    let mut attempts = open(txn, ATTEMPTS)?;
    let mut accepted = open(txn, ACCEPTED)?;
    let mut record: AttemptRecord = get(&attempts, ATTEMPTS, &attempt_key)?.ok_or_else(|| unknown_attempt(attempt))?;
    match rules::attempts::store_verdict(record.verdict.as_ref(), record.candidate.as_ref(), candidate) {
        // Another validator got there first; its verdict stands.
        StoreVerdict::Stands(stored) => return Ok(TxnEnd::Abort(stored.clone())),
        StoreVerdict::CandidateChanged => {
            return Err(tables::corrupted(ATTEMPTS, &attempt_key, "candidate changed after it was recorded"));
        }
        StoreVerdict::Store => {}
    }
    // Every read that may fail comes before the first write: a grouped body that fails
    // must have written nothing (see `group.rs`).
    let run = read_run(&runs, &task.dataset, &task.run)?;
    let current = get::<AcceptedRecord>(&accepted, ACCEPTED, &task_key)?.map(|r| r.attempt);
    record.verdict = Some(verdict.clone());
    record.reconciliation = Some(reconciliation.clone());
    put(&mut attempts, &attempt_key, &record)?;
    if let Some(attempt) = rules::accept::accepted_update(run.published_generation.is_some(), current, attempt.attempt, verdict.is_valid())
    {
        put(&mut accepted, &task_key, &AcceptedRecord { attempt })?;
    }
    Ok(TxnEnd::Commit(verdict.clone()))
}

/// What is seen of each reported file of an attempt, through directory handles from the
/// staging root. An I/O error other than "no regular file there" (permission denied, EIO)
/// is returned as [`Error::Io`], never turned into a verdict: the caller may retry.
fn observe_files(staging_root: &std::path::Path, staging_rel: &str, files: &[FileEntry], check: FileCheck) -> Result<Vec<FileObservation>> {
    files
        .iter()
        .map(|file| match super::handles::observe_file(staging_root, staging_rel, &file.path, check == FileCheck::SizeAndChecksum) {
            Ok(Some((size_bytes, crc32))) => Ok(FileObservation::Present { size_bytes, crc32 }),
            Ok(None) => Ok(FileObservation::Missing),
            Err(e) => Err(Error::io(
                format!("checking file {:?} of {staging_rel} (retry once the cause is fixed; no verdict was stored)", file.path),
                e,
            )),
        })
        .collect()
}

/// A begin's state between its preparation and its write ([`Store::prepare_begin`]).
pub(super) struct PreparedBegin {
    task: TaskKey,
    /// The task's directory (the attempt's parent), made and checked before the write.
    parent: std::path::PathBuf,
    /// Every directory created for this begin, to sync after the commit.
    pub(super) created: Vec<std::path::PathBuf>,
}

pub(super) fn check_finish(attempt: &AttemptKey, candidate: &Candidate) -> Result<()> {
    check_task_key(&attempt.task)?;
    ids::check_candidate(candidate)
}

/// Recording a candidate, in a write transaction (a single call's or a batch's).
pub(super) fn finish_body(txn: &WriteTransaction, attempt: &AttemptKey, candidate: &Candidate) -> Result<TxnEnd<FinishOutcome>> {
    let task = &attempt.task;
    let runs = open(txn, RUNS)?;
    let mut attempts = open(txn, ATTEMPTS)?;
    let run = read_run(&runs, &task.dataset, &task.run)?;
    let attempt_key = key_u32(&[&task.dataset, &task.run, &task.partition], attempt.attempt);
    let mut record: AttemptRecord = get(&attempts, ATTEMPTS, &attempt_key)?.ok_or_else(|| unknown_attempt(attempt))?;
    let for_finish = rules::attempts::RunForFinish { snapshot: &run.snapshot, has_grain: run.grain.is_some() };
    match rules::attempts::finish(attempt, candidate, for_finish, record.abandoned_at_ms, record.candidate.as_ref())? {
        Finish::AlreadyRecorded => return Ok(TxnEnd::Abort(FinishOutcome::AlreadyRecorded)),
        Finish::Record => {}
    }
    record.candidate = Some(candidate.clone());
    put(&mut attempts, &attempt_key, &record)?;
    Ok(TxnEnd::Commit(FinishOutcome::Recorded))
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
pub(super) fn record_body(txn: &WriteTransaction, effect: &EffectKey, payload: &[u8]) -> Result<TxnEnd<RecordedEffect>> {
    let runs = open(txn, RUNS)?;
    let tasks = open(txn, TASKS)?;
    let mut effects = open(txn, EFFECTS)?;
    let run = read_run(&runs, &effect.dataset, &effect.run)?;
    if let Some(partition) = &effect.partition {
        read_task(&tasks, &TaskKey::new(&effect.dataset, &effect.run, partition))?;
    }
    let effect_key = effect_key_bytes(effect);
    if let Some(existing) = get::<EffectRecord>(&effects, EFFECTS, &effect_key)? {
        return Ok(TxnEnd::Abort(RecordedEffect { effect: effect_from(effect.clone(), existing), newly_recorded: false }));
    }
    let status = rules::effects::recorded(run.published_generation);
    let record = EffectRecord { payload: payload.to_vec(), recorded_at_ms: now_ms(), status, claim: None };
    put(&mut effects, &effect_key, &record)?;
    Ok(TxnEnd::Commit(RecordedEffect { effect: effect_from(effect.clone(), record), newly_recorded: true }))
}

//! [`Store::run_batch`]: many operations in one grouped write transaction.
//!
//! Each operation is the single call's, written once: its checks and file work come first
//! (outside the transaction, as the single call does them) and its body runs in the shared
//! transaction. A begin syncs nothing: its directories are made durable by the validation
//! that first needs them (`files::make_candidate_durable`). In a batch of many
//! begins, their task directories are made on a thread of their own while the transaction runs
//! ([`DirMaker`]); each begin's checks still run before its directory is made. An operation refused on
//! its merits wrote nothing and gets its error; the batch commits the others. A storage
//! failure fails the whole batch, as it fails a single call.

use std::sync::mpsc;

use super::begin_dirs::BeginDirs;
use super::write::{self, PreparedBegin, PreparedValidation};
use super::{Store, TxnEnd};
use crate::batch::{BATCH_OPS_MAX, BatchOp, BatchOutcome};
use crate::error::{Error, Result};
use crate::meta::Meta;
use crate::model::{AttemptKey, Candidate, EffectKey, TaskKey};

/// From this many begins on, a batch makes its begins' task directories on a thread of its own
/// while its transaction runs (see [`DirMaker`]), so each task directory's `mkdirat` (in the run
/// directory) overlaps the attempt directories' (each in its task directory, under another
/// directory lock) and the records' writes. Below it, a thread's start costs more than it
/// overlaps.
const OVERLAPPED_BEGINS_MIN: usize = 16;

/// An operation once its checks and file work ran, ready for the transaction.
enum Prepared {
    /// Settled before the transaction: refused, or a verdict already stored.
    Settled(Result<BatchOutcome>),
    /// A begin whose checks passed and whose task directory (relative to the staging root) the
    /// batch's [`DirMaker`] is making; it becomes a [`Prepared::Begin`] before it runs.
    BeginMaking(TaskKey, String),
    Begin(PreparedBegin),
    Finish(AttemptKey, Candidate),
    Validate(PreparedValidation),
    RecordEffect(EffectKey, Vec<u8>),
    ClaimEffect(EffectKey, String, std::time::Duration),
    MarkEmitted(EffectKey, Option<String>),
}

impl Store {
    /// Runs `ops` in one write transaction and one durable commit, in order, each with its own
    /// outcome (`results[i]` for `ops[i]`): an operation refused on its merits fails alone and
    /// writes nothing; later operations see the writes of earlier ones (two begins of one task
    /// get consecutive attempt numbers). The batch shares the group commit with concurrent
    /// calls. A validation checks files against the store as it was when the batch began (see
    /// [`BatchOp::Validate`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for more than [`BATCH_OPS_MAX`] operations, or for a validation
    /// of an attempt an earlier operation of the batch finishes (nothing runs); a storage error or a poisoned handle fails the whole batch and nothing of it commits.
    pub fn run_batch(&self, ops: &[BatchOp]) -> Result<Vec<Result<BatchOutcome>>> {
        if ops.len() > BATCH_OPS_MAX {
            return Err(Error::invalid("batch", &ops.len().to_string(), format!("holds more than {BATCH_OPS_MAX} operations")));
        }
        if let Some((finish_at, validate_at)) = crate::batch::validation_after_its_finish(ops) {
            return Err(Error::invalid(
                "batch",
                &format!("operation {} (validate)", validate_at + 1),
                format!(
                    "validates the attempt operation {} (finish) of the same batch finishes; a validation is prepared against \
                     the store as it was before the batch, where that attempt is not finished yet: send the validate in a \
                     later batch (nothing of this batch ran)",
                    finish_at + 1
                ),
            ));
        }
        self.poison.contain("running a batch", || {
            self.whole_call(|| {
                // The staging root's marker is checked once for all the batch's begins (if that check
                // fails, each begin checks again and fails with its own error).
                let begins = ops.iter().filter(|op| matches!(op, BatchOp::Begin { .. })).count();
                let mut dirs = if begins > 0 {
                    self.checked_staging_root()
                        .ok()
                        .and_then(|handle| self.staging.local().and_then(|root| BeginDirs::new(root, handle).ok()))
                } else {
                    None
                };
                // A batch of many begins makes their task directories on a thread of its own, which
                // the transaction follows (see `DirMaker`).
                let overlapped = begins >= OVERLAPPED_BEGINS_MIN && dirs.is_some();
                let snapshot = self.snapshot()?;
                let mut prepared: Vec<Prepared> = ops.iter().map(|op| self.prepare_op(&snapshot, op, dirs.as_mut(), overlapped)).collect();
                drop(snapshot);
                // A storage error while reading an operation's facts (on PostgreSQL, the
                // snapshot's connection lost) fails the whole batch, before anything of it is
                // written, so the batch is run again whole or answered as one.
                if let Some(i) = prepared.iter().position(|p| matches!(p, Prepared::Settled(Err(Error::Storage { .. }))))
                    && let Prepared::Settled(Err(err)) = prepared.swap_remove(i)
                {
                    return Err(err);
                }
                let pending = prepared.iter().any(|p| !matches!(p, Prepared::Settled(_)));
                let ran = std::thread::scope(|scope| {
                    let maker = match dirs.take() {
                        Some(dirs) if overlapped => Some(DirMaker::start(scope, dirs, &prepared)),
                        _ => None,
                    };
                    let ran = if pending {
                        self.write_grouped("running a batch", |meta| {
                            let mut wrote = false;
                            let mut ran = Vec::with_capacity(prepared.len());
                            for i in 0..prepared.len() {
                                if let Some(maker) = &maker {
                                    maker.take(&mut prepared, i);
                                }
                                let writes_before = crate::meta::writes_on_this_thread();
                                let result = self.run_op(meta, &mut prepared[i]);
                                match result {
                                    Some(Ok(TxnEnd::Commit(outcome))) => {
                                        wrote = true;
                                        ran.push(Some(Ok(outcome)));
                                    }
                                    Some(Ok(TxnEnd::Abort(outcome))) => ran.push(Some(Ok(outcome))),
                                    // A storage error dooms the transaction: the batch fails.
                                    Some(Err(err @ Error::Storage { .. })) => return Err(err),
                                    // A refusal after a write would commit half an operation; the
                                    // group commit fails the whole batch for it (see `group.rs`).
                                    Some(Err(err)) if crate::meta::writes_on_this_thread() != writes_before => return Err(err),
                                    Some(Err(err)) => ran.push(Some(Err(err))),
                                    None => ran.push(None),
                                }
                            }
                            Ok(if wrote { TxnEnd::Commit(ran) } else { TxnEnd::Abort(ran) })
                        })
                    } else {
                        Ok(prepared.iter().map(|_| None).collect())
                    };
                    if let Some(maker) = maker {
                        maker.finish();
                    }
                    ran
                })?;
                let mut results: Vec<Option<Result<BatchOutcome>>> = Vec::with_capacity(ops.len());
                for (op, outcome) in prepared.into_iter().zip(ran) {
                    let result = match (op, outcome) {
                        (Prepared::Settled(result), _) => result,
                        (_, Some(result)) => result,
                        (_, None) => Err(Error::Poisoned { cause: "a batch operation did not run".to_owned() }),
                    };
                    results.push(Some(result));
                }
                Ok(results
                    .into_iter()
                    .map(|r| r.unwrap_or_else(|| Err(Error::Poisoned { cause: "a batch result is missing".to_owned() })))
                    .collect())
            })
        })
    }

    /// The checks and file work of one operation, before the transaction; with `overlapped`, a
    /// begin's checks only (its directories are the [`DirMaker`]'s).
    fn prepare_op(&self, snapshot: &super::Snapshot, op: &BatchOp, dirs: Option<&mut BeginDirs>, overlapped: bool) -> Prepared {
        let prepared = match op {
            BatchOp::Begin { dataset, run, partition } if overlapped => {
                let task = BatchOp::task(dataset, run, partition);
                write::check_begin(snapshot, &task).map(|parent_rel| Prepared::BeginMaking(task, parent_rel))
            }
            BatchOp::Begin { dataset, run, partition } => {
                self.prepare_begin(snapshot, &BatchOp::task(dataset, run, partition), dirs).map(Prepared::Begin)
            }
            BatchOp::Finish { dataset, run, partition, attempt, candidate } => {
                let key = BatchOp::attempt(dataset, run, partition, *attempt);
                write::check_finish(&key, candidate).map(|()| Prepared::Finish(key, candidate.clone()))
            }
            BatchOp::Validate { dataset, run, partition, attempt, checksums } => {
                let key = BatchOp::attempt(dataset, run, partition, *attempt);
                write::prepare_validation(snapshot, &self.file_work(), &key, BatchOp::file_check(*checksums), crate::progress::NO_PROGRESS)
                    .map(|prepared| match prepared.stored_verdict() {
                        Some(verdict) => Prepared::Settled(Ok(BatchOutcome::Validate(verdict.clone()))),
                        None => Prepared::Validate(prepared),
                    })
            }
            BatchOp::RecordEffect { dataset, run, effect, partition, payload, payload_hex } => {
                let key = BatchOp::effect(dataset, run, effect, partition);
                BatchOp::payload_bytes(payload, payload_hex.as_deref())
                    .and_then(|bytes| write::check_record(&key, &bytes).map(|()| Prepared::RecordEffect(key, bytes)))
            }
            BatchOp::ClaimEffect { dataset, run, effect, partition, claimant, lease_ms } => {
                let key = BatchOp::effect(dataset, run, effect, partition);
                let lease = std::time::Duration::from_millis(*lease_ms);
                write::check_claim(&key, claimant, lease).map(|()| Prepared::ClaimEffect(key, claimant.clone(), lease))
            }
            BatchOp::MarkEmitted { dataset, run, effect, partition, claimant } => {
                let key = BatchOp::effect(dataset, run, effect, partition);
                write::check_mark(&key, claimant.as_deref()).map(|()| Prepared::MarkEmitted(key, claimant.clone()))
            }
        };
        prepared.unwrap_or_else(|err| Prepared::Settled(Err(err)))
    }

    /// One operation's body in the batch's transaction; `None` for one settled before it.
    fn run_op(&self, meta: &mut dyn Meta, op: &mut Prepared) -> Option<Result<TxnEnd<BatchOutcome>>> {
        let ran = match op {
            Prepared::Settled(_) => return None,
            // Taken from the `DirMaker` before it runs.
            Prepared::BeginMaking(..) => Err(Error::Poisoned { cause: "a batch's begin ran before its directory was made".to_owned() }),
            Prepared::Begin(begin) => self.begin_body(meta, begin).map(|end| end.map(BatchOutcome::Begin)),
            Prepared::Finish(key, candidate) => write::finish_body(meta, key, candidate).map(|end| end.map(BatchOutcome::Finish)),
            Prepared::Validate(prepared) => write::store_prepared_body(meta, prepared).map(|end| end.map(BatchOutcome::Validate)),
            Prepared::RecordEffect(key, payload) => {
                write::record_body(meta, &self.store_id, key, payload).map(|end| end.map(BatchOutcome::RecordEffect))
            }
            Prepared::ClaimEffect(key, claimant, lease) => {
                write::claim_body(meta, &self.store_id, key, claimant, *lease).map(|end| end.map(BatchOutcome::ClaimEffect))
            }
            Prepared::MarkEmitted(key, claimant) => {
                write::mark_body(meta, &self.store_id, key, claimant.as_deref()).map(|end| end.map(BatchOutcome::MarkEmitted))
            }
        };
        Some(ran)
    }
}

/// A batch's task directories, made on a thread of its own in the batch's order while its
/// transaction runs: the transaction takes each begin's directory (or the error that refused
/// it) before it runs that begin. Task directories are made in their run's directory, the
/// attempts' in the task directories, so the two threads' `mkdirat`s take different directory
/// locks and overlap on a second core. Every check that decides whether anything is made ran
/// before (`write::check_begin`), and the transaction waits for a directory only as long as
/// the `mkdirat`s ahead of it take.
struct DirMaker<'scope> {
    made: mpsc::Receiver<(usize, Result<PreparedBegin>)>,
    thread: std::thread::ScopedJoinHandle<'scope, ()>,
}

impl<'scope> DirMaker<'scope> {
    /// Starts making the directories of every [`Prepared::BeginMaking`] in `prepared`.
    fn start<'env>(scope: &'scope std::thread::Scope<'scope, 'env>, mut dirs: BeginDirs, prepared: &[Prepared]) -> DirMaker<'scope> {
        let todo: Vec<(usize, TaskKey, String)> = prepared
            .iter()
            .enumerate()
            .filter_map(|(i, op)| match op {
                Prepared::BeginMaking(task, parent_rel) => Some((i, task.clone(), parent_rel.clone())),
                _ => None,
            })
            .collect();
        let (send, made) = mpsc::channel();
        let thread = scope.spawn(move || {
            for (i, task, parent_rel) in todo {
                // The transaction stopped taking them (it failed): nothing more is made.
                if send.send((i, PreparedBegin::make(task, &parent_rel, &mut dirs))).is_err() {
                    break;
                }
            }
        });
        DirMaker { made, thread }
    }

    /// Makes `prepared[i]` ready to run if it is a begin still being made: waits for it.
    fn take(&self, prepared: &mut [Prepared], i: usize) {
        while matches!(prepared[i], Prepared::BeginMaking(..)) {
            match self.made.recv() {
                Ok((j, made)) => prepared[j] = made.map_or_else(|err| Prepared::Settled(Err(err)), Prepared::Begin),
                // The thread stopped early, which only its panic does (`finish` raises it).
                Err(_) => {
                    prepared[i] =
                        Prepared::Settled(Err(Error::Poisoned { cause: "the thread making a batch's directories stopped".to_owned() }))
                }
            }
        }
    }

    /// Waits for the thread to stop; its panic is the batch's (contained as any other).
    fn finish(self) {
        drop(self.made);
        if let Err(payload) = self.thread.join() {
            std::panic::resume_unwind(payload);
        }
    }
}

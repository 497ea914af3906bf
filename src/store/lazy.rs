//! Begins without a flush of their own, on a redb writer opened without cross-process readers
//! (`StoreOptions::cross_process_readers` false, `StoreOptions::durable_begins` false).
//!
//! Such a begin commits with redb's `Durability::None`: it is acknowledged once its write is
//! in this process's memory, and made durable by the handle's next durable commit (a finish,
//! a verdict, a publish, any other write, or the close). What keeps an attempt number from
//! ever being issued twice:
//! - a run is recorded (key `lazy_begins` of `meta_v1`) by a durable commit of its own before
//!   the first such begin in it ([`LazyBegins::record_run`]);
//! - a task has at most one such begin between two durable commits of the handle
//!   (`rules::attempts::begin_without_flush`): the next begin of the same task flushes;
//! - an open that had to repair the store (its writer crashed; redb calls the repair callback)
//!   and finds the record gives every task of each recorded, unpublished run the next number
//!   after its durable one (`rules::attempts::next_after_forgotten_begin`), so a begin that was
//!   acknowledged and then forgotten never has its number or its staging directory issued
//!   again, and its worker's finish gets `UnknownAttempt`. Every open removes the record
//!   ([`settle_after_open`]); a clean close makes every begin durable (redb's close commits
//!   what is pending).
//!
//! Invariant: a begin committed without a flush is of a task whose run's record was durable
//! before it, and is the task's only one since the handle's last durable commit.

use std::collections::HashSet;

use parking_lot::Mutex;
use redb::{Database, WriteTransaction};

use super::meta_redb::RedbMeta;
use crate::error::{Error, Result};
use crate::meta::Meta as _;
use crate::meta::MetaRead as _;
use crate::model::TaskKey;
use crate::records::LazyBeginsRecord;
use crate::rules::attempts;

/// A writable handle's begins without a flush.
#[derive(Default)]
pub(crate) struct LazyBegins {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The runs this handle recorded, durably, in `lazy_begins`.
    recorded: HashSet<(String, String)>,
    /// The tasks with a begin committed without a flush since the handle's last durable
    /// commit.
    pending: HashSet<TaskKey>,
}

impl LazyBegins {
    /// Whether this handle recorded `task`'s run.
    pub(crate) fn run_recorded(&self, task: &TaskKey) -> bool {
        self.state.lock().recorded.contains(&(task.dataset.clone(), task.run.clone()))
    }

    /// Records `task`'s run in `lazy_begins` with a durable commit of its own (which also makes
    /// every earlier begin durable), so that begins in it may then skip their flush.
    pub(crate) fn record_run(&self, db: &Database, task: &TaskKey) -> Result<()> {
        let context = "recording a run of begins without a flush";
        let txn = db.begin_write().map_err(|e| Error::storage(context, e))?;
        {
            let mut meta = RedbMeta::new(&txn);
            let mut record = meta.lazy_begins()?.unwrap_or(LazyBeginsRecord { runs: Vec::new() });
            let run = (task.dataset.clone(), task.run.clone());
            if !record.runs.contains(&run) {
                record.runs.push(run);
                meta.put_lazy_begins(&record)?;
            }
        }
        txn.commit().map_err(|e| Error::storage(context, e))?;
        // The caller tells the layer of the durable commit (which clears the pending begins).
        self.state.lock().recorded.insert((task.dataset.clone(), task.run.clone()));
        Ok(())
    }

    /// Called in the write transaction of a begin of `task` (the check and the claim in one
    /// step, since bodies run one at a time): whether it commits without a flush. If so, the
    /// task counts as pending until the next durable commit.
    pub(crate) fn claim(&self, task: &TaskKey) -> bool {
        let mut state = self.state.lock();
        let recorded = state.recorded.contains(&(task.dataset.clone(), task.run.clone()));
        let lazy = attempts::begin_without_flush(true, recorded, state.pending.contains(task));
        if lazy {
            state.pending.insert(task.clone());
        }
        lazy
    }

    /// After a durable commit of the handle: every begin before it is durable.
    pub(crate) fn durable_commit_done(&self) {
        self.state.lock().pending.clear();
    }
}

/// In an open's write transaction: removes the record of runs begun in without a flush and,
/// if the open had to repair the store (`repaired`), gives every task of each recorded,
/// unpublished run the number after its durable next one. Returns whether it wrote.
pub(crate) fn settle_after_open(txn: &WriteTransaction, repaired: bool) -> Result<bool> {
    let mut meta = RedbMeta::new(txn);
    let Some(record) = meta.lazy_begins()? else { return Ok(false) };
    if repaired {
        for (dataset, run) in &record.runs {
            let Some(run_record) = meta.run(dataset, run)? else { continue };
            if run_record.published_generation.is_some() {
                // A published run takes no begin, and its publish was durable.
                continue;
            }
            let tasks = meta.run_tasks(dataset, run)?;
            let count = tasks.len();
            for (partition, mut task_record) in tasks {
                let task = TaskKey::new(dataset, run, &partition);
                task_record.next_attempt = attempts::next_after_forgotten_begin(&task, task_record.next_attempt)?;
                meta.put_task(&task, &task_record)?;
            }
            tracing::warn!(
                dataset = %dataset,
                run = %run,
                tasks = count,
                "the store's writer crashed while beginning attempts without a flush: each task of the run skips one attempt number"
            );
        }
    }
    meta.remove_lazy_begins()?;
    Ok(true)
}

//! Group commit: concurrent small writes share one redb write transaction and one fsync.
//!
//! Worker threads beginning, finishing and validating attempts at once would otherwise each pay
//! a full durable commit, and the disk's sync rate would be the scheduler's ceiling. Instead,
//! callers of [`Store::write_grouped`] queue into a *batch*. The first caller to join a batch is
//! its *leader*: it waits until the previous batch has settled (meanwhile later callers keep
//! joining) and, briefly, for as many callers as the previous batch had, closes the batch, opens one write transaction, and lets every member run its own
//! body in it, one at a time. When all have run, the leader commits once (or aborts if no
//! member wrote) and wakes every member with the outcome; each member then returns its own
//! result.
//!
//! Each member runs its body on its own thread, against the shared transaction held behind the
//! batch's lock, so bodies may borrow from their caller's stack and need not be `Send`; only
//! the outcome of the commit crosses threads.
//!
//! Invariant: a grouped call returns success only after the transaction holding its write has
//! committed with immediate durability (a begin allowed to skip its flush, `lazy.rs`, only
//! after it committed without one: durable with the handle's next durable commit), and a call whose body refused (an error that is not a
//! storage error, or [`TxnEnd::Abort`]) returns its refusal only after the batch it saw has
//! committed, because its refusal may rest on writes of earlier members of the same batch.
//! A body must check everything before its first write (the write helper's contract), so a
//! refused body wrote nothing and the other members' writes commit without it. If the
//! transaction fails (a storage error in any body, a failed commit, a panic), no member is
//! acknowledged: the member whose body failed, or the leader for a failed commit, gets the
//! real error, every other member gets [`Error::Poisoned`] naming it, and the handle is
//! poisoned as after any storage failure.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};
use redb::{Database, Durability, WriteTransaction};

use super::TxnEnd;
use super::contain::Poison;
use super::meta_redb::RedbMeta;
use crate::error::{Error, Result};
use crate::meta::Meta;

/// The queue of grouped writes of one store handle.
#[derive(Default)]
pub(super) struct GroupCommit {
    queue: Mutex<Queue>,
    /// Signalled when the batch in flight settles, for the leader of the next one.
    settled: Condvar,
    /// Signalled when a caller joins the forming batch, for its gathering leader.
    joined: Condvar,
}

impl GroupCommit {
    /// Holds the forming batch open, briefly, until as many callers have joined it as the
    /// previous batch had.
    ///
    /// Without this, callers released together by one commit come back a few microseconds
    /// after the next batch (formed during that commit) has closed: batches alternate between
    /// two halves of the callers and each commit carries half of them. Waiting for the
    /// returning callers, at most half the last commit's duration and never more than
    /// [`GATHER_WAIT_MAX`], lets one commit carry them all. A lone caller never waits: its
    /// previous batch had one member, itself.
    fn gather(&self, queue: &mut MutexGuard<'_, Queue>, batch: &Batch) {
        let deadline = Instant::now() + (queue.last_commit / 2).min(GATHER_WAIT_MAX);
        while batch.state.lock().members < queue.last_members {
            if self.joined.wait_until(queue, deadline).timed_out() {
                return;
            }
        }
    }
}

#[derive(Default)]
struct Queue {
    /// The batch new callers join; its leader closes it when it starts.
    forming: Option<Arc<Batch>>,
    /// True while a closed batch runs or commits. Batches run one at a time.
    in_flight: bool,
    /// Members of the last batch, and how long its commit took: the leader of the next batch
    /// waits a little for that many callers (see [`GroupCommit::gather`]).
    last_members: usize,
    last_commit: Duration,
}

/// The longest a leader waits for callers of the previous batch to come back.
const GATHER_WAIT_MAX: Duration = Duration::from_millis(1);

#[derive(Default)]
struct Batch {
    state: Mutex<BatchState>,
    /// Signalled when the transaction opens, when the last member has run, and on settling.
    changed: Condvar,
}

#[derive(Default)]
struct BatchState {
    /// Callers in the batch, the leader included. Final once the batch is closed.
    members: usize,
    /// The shared transaction, while members run.
    txn: Option<WriteTransaction>,
    /// Set by the leader once the transaction is open (or could not be).
    open: bool,
    /// Members whose body has run (or was skipped because the batch already failed).
    ran: usize,
    /// True once a member's body asked for a commit.
    wrote: bool,
    /// True once a member that asked for a commit needs it durable (every member but a begin
    /// allowed to skip its flush, see `lazy.rs`). A batch no member of which needs it commits
    /// with redb's `Durability::None`.
    durable: bool,
    /// The first failure that dooms the transaction.
    failure: Option<String>,
    /// Set by the leader once the transaction is committed or abandoned: `Err` names the cause.
    settled: Option<std::result::Result<(), String>>,
}

/// What a member's body gave.
enum Ran<T> {
    /// The body ran and returned.
    Returned(Result<TxnEnd<T>>),
    /// The body was not run: the batch had already failed.
    Skipped,
    /// The body panicked (redb, on a damaged file); the caller gets it as
    /// [`Error::Corrupted`] once the batch settles.
    Panicked(Box<dyn Any + Send>),
}

impl GroupCommit {
    /// Runs `body` in a write transaction of `db` shared with every concurrent call on this
    /// queue, committed once for all of them, and returns `body`'s own result once that commit
    /// is durable (see the module documentation for the guarantees). `durable`, asked once
    /// `body` has asked for a commit, says whether its write needs a durable commit: if no
    /// member of the batch needs one, the batch commits without a flush (redb's
    /// `Durability::None`) and the call returns once that commit is in this process's memory;
    /// a later durable commit makes it durable. `durable_commit_done` runs (on the leader's
    /// thread) after each durable commit of a batch that wrote.
    pub(super) fn write<T>(
        &self,
        db: &Database,
        poison: &Poison,
        context: &'static str,
        durable: impl FnOnce() -> bool,
        body: impl FnOnce(&mut dyn Meta) -> Result<TxnEnd<T>>,
        durable_commit_done: impl FnOnce(),
    ) -> Result<T> {
        poison.check()?;
        let (batch, leader) = {
            let mut queue = self.queue.lock();
            match &queue.forming {
                Some(batch) => {
                    batch.state.lock().members += 1;
                    self.joined.notify_one();
                    (Arc::clone(batch), false)
                }
                None => {
                    let batch = Arc::new(Batch::default());
                    batch.state.lock().members = 1;
                    queue.forming = Some(Arc::clone(&batch));
                    (batch, true)
                }
            }
        };
        let mut own_error = None;
        if leader {
            own_error = self.open_batch(db, poison, context, &batch).err();
        }
        let ran = run_member(&batch, body, durable);
        if leader && let Err(err) = self.settle_batch(poison, &batch, durable_commit_done) {
            own_error = Some(err);
        }
        let outcome = {
            let mut state = batch.state.lock();
            loop {
                if let Some(outcome) = &state.settled {
                    break outcome.clone();
                }
                batch.changed.wait(&mut state);
            }
        };
        match (ran, outcome) {
            (Ran::Panicked(payload), _) => {
                let err = super::contain::panic_error(context, payload.as_ref());
                poison.set_damaged(&err);
                Err(err)
            }
            (Ran::Returned(Ok(TxnEnd::Commit(value) | TxnEnd::Abort(value))), Ok(())) => Ok(value),
            (Ran::Returned(Err(err)), Ok(())) => Err(err),
            (Ran::Returned(Err(err @ Error::Storage { .. })), Err(_)) => Err(err),
            (_, Err(cause)) => Err(own_error.unwrap_or(Error::Poisoned { cause })),
            (Ran::Skipped, Ok(())) => Err(Error::Poisoned { cause: "a grouped write was skipped in a batch that committed".to_owned() }),
        }
    }

    /// The leader's first half: waits for the batch in flight to settle, closes its own batch
    /// to newcomers and opens the shared transaction.
    fn open_batch(&self, db: &Database, poison: &Poison, context: &'static str, batch: &Batch) -> Result<()> {
        {
            let mut queue = self.queue.lock();
            while queue.in_flight {
                self.settled.wait(&mut queue);
            }
            self.gather(&mut queue, batch);
            queue.in_flight = true;
            queue.forming = None;
        }
        let opened = poison.check().and_then(|()| poison.contain(context, || db.begin_write().map_err(|e| Error::storage(context, e))));
        let mut state = batch.state.lock();
        let result = match opened {
            Ok(txn) => {
                state.txn = Some(txn);
                Ok(())
            }
            Err(err) => {
                state.failure = Some(err.to_string());
                Err(err)
            }
        };
        state.open = true;
        batch.changed.notify_all();
        result
    }

    /// The leader's second half: once every member has run, commits (or aborts, or abandons a
    /// failed transaction), poisons the handle on failure, wakes the members and hands the
    /// queue to the next batch. Returns the leader's own error for a failed commit.
    fn settle_batch(&self, poison: &Poison, batch: &Batch, durable_commit_done: impl FnOnce()) -> Result<()> {
        let (txn, wrote, mut durable, failure, members) = {
            let mut state = batch.state.lock();
            while state.ran < state.members {
                batch.changed.wait(&mut state);
            }
            (state.txn.take(), state.wrote, state.durable, state.failure.take(), state.members)
        };
        let commit_started = Instant::now();
        let result = match (failure, txn) {
            (Some(cause), txn) => {
                // Dropping an uncommitted transaction rolls it back.
                drop(txn);
                Err((cause, None))
            }
            (None, Some(mut txn)) => {
                // redb refuses a commit without a flush in a mode shared between processes:
                // the commit is then durable.
                if wrote && !durable && txn.set_durability(Durability::None).is_err() {
                    durable = true;
                }
                poison
                    .contain("committing a group of writes", || {
                        if wrote {
                            txn.commit().map_err(|e| Error::storage("committing a group of writes", e))
                        } else {
                            txn.abort().map_err(|e| Error::storage("committing a group of writes", e))
                        }
                    })
                    .map_err(|err| (err.to_string(), Some(err)))
            }
            (None, None) => Err(("a grouped write transaction vanished before its commit".to_owned(), None)),
        };
        let (settled, own_error) = match result {
            Ok(()) => {
                // The undo log and the pending begins restart at a durable commit only: the
                // state a damaged handle puts back is one the file durably had.
                if wrote && durable {
                    durable_commit_done();
                }
                (Ok(()), None)
            }
            Err((cause, own_error)) => {
                match &own_error {
                    Some(err) if err.is_corruption() => poison.set_damaged(err),
                    _ => poison.set(&cause),
                }
                (Err(cause), own_error)
            }
        };
        {
            let mut state = batch.state.lock();
            state.settled = Some(settled);
            batch.changed.notify_all();
        }
        {
            let mut queue = self.queue.lock();
            queue.in_flight = false;
            queue.last_members = members;
            queue.last_commit = commit_started.elapsed();
            self.settled.notify_all();
        }
        own_error.map_or(Ok(()), Err)
    }
}

/// The failure of a batch one of whose bodies wrote and then refused.
const WROTE_THEN_REFUSED: &str =
    "a grouped write body wrote and then refused (it must check everything before its first write); its batch was not committed";

/// Runs one member's body in the batch's transaction, once the leader has opened it, and
/// records whether it wrote or failed.
fn run_member<T>(batch: &Batch, body: impl FnOnce(&mut dyn Meta) -> Result<TxnEnd<T>>, durable: impl FnOnce() -> bool) -> Ran<T> {
    let mut state = batch.state.lock();
    while !state.open {
        batch.changed.wait(&mut state);
    }
    let writes_before = crate::meta::writes_on_this_thread();
    let mut ran = match (&state.failure, &state.txn) {
        (None, Some(txn)) => match catch_unwind(AssertUnwindSafe(|| body(&mut RedbMeta::new(txn)))) {
            Ok(result) => Ran::Returned(result),
            Err(payload) => Ran::Panicked(payload),
        },
        _ => Ran::Skipped,
    };
    // The contract "a body finishes every check before its first write" is checked, not
    // trusted: a body that wrote and then refused would have its writes committed with the
    // others'. Its batch fails instead (nothing of it commits, the handle is poisoned), and in
    // a debug build the caller panics, so the faulty body is found by any test reaching it.
    let refused = matches!(&ran, Ran::Returned(Ok(TxnEnd::Abort(_))))
        || matches!(&ran, Ran::Returned(Err(err)) if !matches!(err, Error::Storage { .. }));
    if refused && crate::meta::writes_on_this_thread() != writes_before {
        state.failure.get_or_insert_with(|| WROTE_THEN_REFUSED.to_owned());
        if cfg!(debug_assertions) {
            ran = Ran::Panicked(Box::new(WROTE_THEN_REFUSED));
        }
    }
    match &ran {
        Ran::Returned(Ok(TxnEnd::Commit(_))) => {
            state.wrote = true;
            if durable() {
                state.durable = true;
            }
        }
        Ran::Returned(Err(err @ Error::Storage { .. })) => {
            state.failure.get_or_insert_with(|| err.to_string());
        }
        Ran::Panicked(_) => {
            state.failure.get_or_insert_with(|| "a grouped write panicked".to_owned());
        }
        Ran::Returned(_) | Ran::Skipped => {}
    }
    state.ran += 1;
    if state.ran == state.members {
        batch.changed.notify_all();
    }
    ran
}

#[cfg(test)]
mod tests {
    //! Batches formed on purpose: the tests hold the queue as if a batch were in flight, let
    //! callers pile into the forming batch, then release it, so the members provably share
    //! one transaction.

    use std::ops::Bound;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use redb::backends::FileBackend;
    use redb::{BackendError, StorageBackend};

    use super::*;
    use crate::model::{Candidate, FinishOutcome, RunSpec, TaskKey, TaskSpec};
    use crate::store::{Store, StoreOptions};

    /// The store's group-commit queue (the redb layer's).
    fn group(store: &Store) -> &GroupCommit {
        store.group_commit().expect("these tests open redb stores")
    }

    fn declare(store: &Store, partitions: &[&str]) {
        let spec = RunSpec {
            dataset: "ds".into(),
            run: "r1".into(),
            snapshot: "snap".into(),
            tasks: partitions.iter().map(|p| TaskSpec { partition: (*p).into(), expected_rows: 0, expected_total: None }).collect(),
            grain: None,
            trust_reported_figures: true,
        };
        store.declare_run(&spec).unwrap();
    }

    fn task(partition: &str) -> TaskKey {
        TaskKey::new("ds", "r1", partition)
    }

    fn hold(store: &Store) {
        group(store).queue.lock().in_flight = true;
    }

    fn wait_for_members(store: &Store, members: usize) {
        // A member that never joins fails the test instead of hanging it.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            assert!(std::time::Instant::now() < deadline, "{members} members never joined the forming batch");
            if let Some(batch) = &group(store).queue.lock().forming
                && batch.state.lock().members == members
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn release(store: &Store) {
        let mut queue = group(store).queue.lock();
        queue.in_flight = false;
        group(store).settled.notify_all();
    }

    fn nope_effect() -> crate::model::EffectKey {
        crate::model::EffectKey { dataset: "ds".into(), run: "r1".into(), effect: "e".into(), partition: Some("nope".into()) }
    }

    fn empty_candidate(digest: &str) -> Candidate {
        Candidate { snapshot: "snap".into(), rows: Some(0), total: None, digest: Some(digest.into()), files: Vec::new() }
    }

    #[test]
    fn refused_members_do_not_fail_the_batch() {
        let dir = tempfile::tempdir().unwrap();
        let db_path = dir.path().join("store.redb");
        let store = Store::open(&db_path, dir.path().join("staging")).unwrap();
        declare(&store, &["a", "b", "c"]);
        hold(&store);
        let results = std::thread::scope(|scope| {
            let handles = [
                scope.spawn(|| store.begin_attempt(&task("a")).map(|t| t.key.attempt)),
                // Refused inside the batch: no task "nope" (begin_attempt would refuse it
                // before joining, when it prepares the task's staging directory).
                scope.spawn(|| store.record_effect(&nope_effect(), b"").map(|_| 0)),
                scope.spawn(|| store.begin_attempt(&task("b")).map(|t| t.key.attempt)),
                scope.spawn(|| store.finish_attempt(&task("c").attempt(7), &empty_candidate("d")).map(|_| 0)),
                scope.spawn(|| store.begin_attempt(&task("c")).map(|t| t.key.attempt)),
            ];
            wait_for_members(&store, handles.len());
            release(&store);
            handles.map(|h| h.join().unwrap())
        });
        assert_eq!(results[0].as_ref().unwrap(), &1);
        assert!(matches!(results[1], Err(Error::UnknownTask { .. })), "{:?}", results[1]);
        assert_eq!(results[2].as_ref().unwrap(), &1);
        assert!(matches!(results[3], Err(Error::UnknownAttempt { .. })), "{:?}", results[3]);
        assert_eq!(results[4].as_ref().unwrap(), &1);
        // The successful members' writes are durable and nothing else was written.
        drop(store);
        let store = Store::open(&db_path, dir.path().join("staging")).unwrap();
        let snapshot = store.snapshot().unwrap();
        for partition in ["a", "b", "c"] {
            assert_eq!(snapshot.attempts(&task(partition)).unwrap().len(), 1, "{partition}");
        }
    }

    #[test]
    fn heartbeats_share_the_group_commit() {
        let dir = tempfile::tempdir().unwrap();
        let db_path = dir.path().join("store.redb");
        let store = Store::open(&db_path, dir.path().join("staging")).unwrap();
        declare(&store, &["a", "b", "c"]);
        let tickets: Vec<_> = ["a", "b", "c"].iter().map(|p| store.begin_attempt(&task(p)).unwrap()).collect();
        hold(&store);
        let leases = std::thread::scope(|scope| {
            let handles: Vec<_> = tickets.iter().map(|t| scope.spawn(|| store.heartbeat(&t.key))).collect();
            // Each heartbeat joins the forming batch (a heartbeat with a write transaction of
            // its own would never join it, and this would fail after its deadline).
            wait_for_members(&store, handles.len());
            release(&store);
            handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        });
        drop(store);
        let store = Store::open(&db_path, dir.path().join("staging")).unwrap();
        let snapshot = store.snapshot().unwrap();
        for (ticket, lease) in tickets.iter().zip(leases) {
            let lease = lease.unwrap();
            assert!(lease.heartbeat_at_ms >= ticket.started_at_ms, "{lease:?}");
            let info = snapshot.attempt(&ticket.key).unwrap().unwrap();
            assert_eq!(info.heartbeat_at_ms, lease.heartbeat_at_ms, "the renewed lease of {} is durable", ticket.key);
        }
    }

    #[test]
    fn members_see_earlier_members_writes_of_their_batch() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("store.redb"), dir.path().join("staging")).unwrap();
        declare(&store, &["a"]);
        let ticket = store.begin_attempt(&task("a")).unwrap();
        hold(&store);
        let outcomes = std::thread::scope(|scope| {
            let handles = [
                scope.spawn(|| store.finish_attempt(&ticket.key, &empty_candidate("same"))),
                scope.spawn(|| store.finish_attempt(&ticket.key, &empty_candidate("same"))),
                scope.spawn(|| store.finish_attempt(&ticket.key, &empty_candidate("other"))),
            ];
            wait_for_members(&store, handles.len());
            release(&store);
            handles.map(|h| h.join().unwrap())
        });
        // Whatever order the members ran in, exactly one candidate was recorded; an identical
        // finish saw it as already recorded, a different one conflicted with it.
        let recorded = outcomes.iter().filter(|o| matches!(o, Ok(FinishOutcome::Recorded))).count();
        assert_eq!(recorded, 1, "{outcomes:?}");
        let stored = store.snapshot().unwrap().attempt(&ticket.key).unwrap().unwrap().candidate.unwrap();
        for outcome in &outcomes {
            match outcome {
                Ok(FinishOutcome::Recorded | FinishOutcome::AlreadyRecorded) => {}
                Err(Error::CandidateConflict { .. }) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        let conflicts = outcomes.iter().filter(|o| o.is_err()).count();
        assert_eq!(conflicts, if stored.digest.as_deref() == Some("same") { 1 } else { 2 });
    }

    #[test]
    fn a_body_that_writes_and_then_refuses_is_caught() {
        use crate::records::RunRecord;
        let dir = tempfile::tempdir().unwrap();
        let db_path = dir.path().join("store.redb");
        let store = Store::open(&db_path, dir.path().join("staging")).unwrap();
        declare(&store, &["a"]);
        let faulty = || {
            store.write_grouped("a faulty body", |meta| {
                let ghost = RunRecord { snapshot: "s".into(), task_count: 1, declared_at_ms: 0, published_generation: None, grain: None };
                meta.put_run("ds", "ghost", &ghost)?;
                Err::<TxnEnd<()>, _>(Error::invalid("test", "ghost", "refused after writing"))
            })
        };
        // A panic in a body is contained at the store's boundary like any other (`contain.rs`):
        // the caller gets it as an error carrying the assertion's message.
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(faulty)).expect("no panic crosses the boundary");
        if cfg!(debug_assertions) {
            match &outcome {
                Err(Error::Corrupted { detail: crate::Corruption::EnginePanic { message, .. }, .. }) => {
                    assert!(message.contains("wrote and then refused"), "{message}")
                }
                other => panic!("the debug assertion fires: {other:?}"),
            }
        } else {
            assert!(matches!(outcome, Err(Error::Poisoned { .. })), "{outcome:?}");
        }
        // Nothing of the batch was committed, and the handle refuses further writes.
        assert!(matches!(store.begin_attempt(&task("a")), Err(Error::Poisoned { .. } | Error::Corrupted { .. })));
        drop(store);
        let store = Store::open(&db_path, dir.path().join("staging")).unwrap();
        assert!(store.snapshot().unwrap().run("ds", "ghost").unwrap().is_none());
        assert!(store.snapshot().unwrap().run("ds", "r1").unwrap().is_some());
    }

    /// A file backend whose syncs fail once told to; its locks are the file's, so the store
    /// opens in the mode `Store::open` ships.
    #[derive(Debug)]
    struct FailingSync {
        inner: FileBackend,
        fail: Arc<AtomicBool>,
    }

    impl StorageBackend for FailingSync {
        fn len(&self) -> std::io::Result<u64> {
            self.inner.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
            self.inner.read(offset, out)
        }
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.inner.set_len(len)
        }
        fn sync_data(&self) -> std::io::Result<()> {
            if self.fail.load(Ordering::SeqCst) { Err(std::io::Error::other("injected sync failure")) } else { self.inner.sync_data() }
        }
        fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
            self.inner.write(offset, data)
        }
        fn close(&self) -> std::io::Result<()> {
            self.inner.close()
        }
        fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
            self.inner.try_lock_range(start, end)
        }
        fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
            self.inner.try_lock_shared_range(start, end)
        }
        fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
            self.inner.lock_range(start, end)
        }
        fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
            self.inner.lock_shared_range(start, end)
        }
        fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
            self.inner.unlock_range(start, end)
        }
        fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
            self.inner.query_lock_range(start, end)
        }
    }

    #[test]
    fn a_failed_commit_fails_every_member_and_poisons_the_handle() {
        let dir = tempfile::tempdir().unwrap();
        let fail = Arc::new(AtomicBool::new(false));
        let file = tempfile::tempfile().unwrap();
        let backend = FailingSync { inner: FileBackend::new(file).unwrap(), fail: Arc::clone(&fail) };
        let store = Store::open_with_backend(backend, dir.path().join("staging"), &StoreOptions::default()).unwrap();
        declare(&store, &["a", "b", "c", "d"]);
        hold(&store);
        let results = std::thread::scope(|scope| {
            let handles = ["a", "b", "c", "d"].map(|p| {
                let store = &store;
                scope.spawn(move || store.begin_attempt(&task(p)))
            });
            wait_for_members(&store, handles.len());
            fail.store(true, Ordering::SeqCst);
            release(&store);
            handles.map(|h| h.join().unwrap())
        });
        let storage = results.iter().filter(|r| matches!(r, Err(Error::Storage { .. }))).count();
        let poisoned = results.iter().filter(|r| matches!(r, Err(Error::Poisoned { .. }))).count();
        assert_eq!((storage, poisoned), (1, 3), "{results:?}");
        fail.store(false, Ordering::SeqCst);
        assert!(matches!(store.begin_attempt(&task("a")), Err(Error::Poisoned { .. })));
    }
}

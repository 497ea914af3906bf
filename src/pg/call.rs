//! One write call's budget for riding out a lost connection, shared by every transaction and
//! read snapshot the call makes.
//!
//! A write call (a begin, a validation, a declare, a batch, ...) reads a snapshot first (what
//! to check, which directories to make, which files to read) and then runs its write
//! transaction. The write transaction runs again by itself after a lost connection
//! ([`super::PgLayer::write`]); a snapshot cannot: its state cannot be had again on another
//! connection, so a lost connection fails its next read. [`whole_call`] runs such a call
//! again from its start, on new connections, if a read of one of its snapshots lost its
//! connection and nothing of the call committed yet; the reconnecting of the snapshot opens,
//! of the write transactions and of these reruns all share one deadline,
//! [`super::RECONNECT_TIME_MAX`] from the call's start. A call whose write committed is never
//! run again (a begin would take a second attempt number): a read lost after that is its
//! error, as before.
//!
//! The scope is per thread: a call runs on its caller's thread from start to end, and every
//! transaction it makes runs there too.

use std::cell::Cell;
use std::time::{Duration, Instant};

use super::is_lost_connection;
use crate::error::{Error, Result, StorageErrorKind};

/// What the innermost running [`whole_call`] on this thread has seen so far.
#[derive(Debug, Clone, Copy)]
struct Scope {
    /// When the call's reconnecting stops.
    deadline: Instant,
    /// A transaction of this run of the call committed (or a lost COMMIT settled as committed).
    committed: bool,
    /// A read of a snapshot lost its connection (or no snapshot could be opened in time).
    read_lost: bool,
}

thread_local! {
    static SCOPE: Cell<Option<Scope>> = const { Cell::new(None) };
}

fn update(change: impl FnOnce(&mut Scope)) {
    SCOPE.with(|cell| {
        if let Some(mut scope) = cell.get() {
            change(&mut scope);
            cell.set(Some(scope));
        }
    });
}

/// When reconnecting that started at `started` stops: the running call's deadline, or, outside
/// one, `started + max`.
pub(crate) fn deadline(started: Instant, max: Duration) -> Instant {
    SCOPE.with(Cell::get).map_or(started + max, |scope| scope.deadline)
}

/// A transaction of the running call committed: the call must not run again.
pub(crate) fn note_committed() {
    update(|scope| scope.committed = true);
}

/// A read of one of the running call's snapshots lost its connection.
pub(crate) fn note_read_lost() {
    update(|scope| scope.read_lost = true);
}

/// Puts the enclosing call's scope back (with what this one committed) when a call ends, a
/// panic included.
struct Restore {
    outer: Option<Scope>,
    committed: bool,
}

impl Drop for Restore {
    fn drop(&mut self) {
        let outer = self.outer.map(|mut scope| {
            scope.committed |= self.committed;
            scope
        });
        SCOPE.with(|cell| cell.set(outer));
    }
}

/// Runs `call`, and runs it again from its start while it failed because a read of one of its
/// snapshots lost its connection and nothing of it committed, until `budget` has passed since
/// it started. Then it fails with an error saying that nothing of it was committed and that
/// calling it again is safe. `shown` names the database in that message. A call inside another
/// has a scope of its own; what it committed counts as committed for the outer one.
pub(crate) fn whole_call<T>(shown: &str, budget: Duration, mut call: impl FnMut() -> Result<T>) -> Result<T> {
    let started = Instant::now();
    let deadline = started + budget;
    let mut restore = Restore { outer: SCOPE.with(Cell::get), committed: false };
    let mut runs = 0u32;
    loop {
        SCOPE.with(|cell| cell.set(Some(Scope { deadline, committed: false, read_lost: false })));
        let result = call();
        let scope = SCOPE.with(Cell::get).unwrap_or(Scope { deadline, committed: true, read_lost: false });
        restore.committed |= scope.committed;
        runs += 1;
        match result {
            Err(err) if scope.read_lost && !scope.committed && is_lost_connection(&err) => {
                if Instant::now() >= deadline {
                    return Err(read_lost_error(&err, shown, budget, runs));
                }
                tracing::warn!(error = %err, runs, "a read of the call lost its connection before anything committed: running the whole call again");
                std::thread::sleep(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// The error of a call that kept losing its reads' connection for the whole budget.
fn read_lost_error(last: &Error, shown: &str, budget: Duration, runs: u32) -> Error {
    let context = match last {
        Error::Storage { context, .. } => context,
        _ => "reading the store",
    };
    Error::postgres_layer(
        context,
        StorageErrorKind::Io,
        format!(
            "the connection to {shown} was lost while the call read the store, and {runs} runs of it on new connections within \
             {} s did not get through: nothing of this call was committed; calling it again is safe (last error: {last})",
            budget.as_secs()
        ),
    )
}

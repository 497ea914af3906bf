//! The boundary with redb: no panic crosses it.
//!
//! redb checks, with `unreachable!`, `assert!` and `unwrap`, many things that "cannot happen"
//! for a file redb wrote itself (a page type byte, a key that is UTF-8, an offset inside its
//! page). A damaged file makes them happen. Every public entry point of the store (open, each
//! read of a [`crate::Snapshot`], each write transaction with its commit, verify) runs its body
//! through [`Poison::contain`], which turns such a panic into [`Error::Corrupted`] with
//! [`Corruption::EnginePanic`] naming the operation, and poisons the handle: after a panic
//! inside redb its in-memory state (page cache, allocator, transaction tracker) cannot be
//! trusted, so the handle refuses every further write until the store is reopened.
//!
//! Invariant: a public call returns `Ok` or `Err`; it never unwinds into the caller.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Corruption, Error, Result};

/// The table name a corruption found by the engine (rather than in one of manifestdb's
/// records) reports.
pub(crate) const ENGINE: &str = "redb";

/// A handle's poison flag, shared by the handle and the snapshots it hands out: set by the
/// first storage failure on a write path or the first panic inside redb, it makes every later
/// write refuse with [`Error::Poisoned`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Poison(Arc<Mutex<Option<Cause>>>, Arc<std::sync::atomic::AtomicBool>);

/// Why a handle is poisoned.
#[derive(Debug, Clone)]
struct Cause {
    message: String,
    /// The store was found damaged (a panic inside redb): later writes refuse as corruption.
    damaged: bool,
}

impl Poison {
    /// `Err(Poisoned)` once the handle is poisoned.
    pub(crate) fn check(&self) -> Result<()> {
        match self.0.lock().clone() {
            None => Ok(()),
            Some(Cause { message, damaged: true }) => {
                Err(Error::Corrupted { table: ENGINE, key: String::new(), detail: Corruption::FoundEarlier { cause: message } })
            }
            Some(Cause { message, damaged: false }) => Err(Error::Poisoned { cause: message }),
        }
    }

    /// Poisons the handle (the first cause is kept).
    pub(crate) fn set(&self, cause: &dyn std::fmt::Display) {
        self.set_cause(cause, false);
    }

    fn set_cause(&self, cause: &dyn std::fmt::Display, damaged: bool) {
        let mut poisoned = self.0.lock();
        if poisoned.is_none() {
            tracing::error!(error = %cause, "the store handle refuses writes until reopened");
            *poisoned = Some(Cause { message: cause.to_string(), damaged });
        }
    }

    /// Poisons the handle because the store was found damaged.
    pub(crate) fn set_damaged(&self, cause: &Error) {
        self.saw_damage();
        self.set_cause(cause, true);
    }

    /// Records that a call of this handle (or of a snapshot it handed out) found the store
    /// damaged, without refusing later calls: a read that met a damaged record, say.
    pub(crate) fn saw_damage(&self) {
        self.1.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether this handle found the store damaged (poisoned as damaged, or any of its calls
    /// returned corruption): then its close puts back what it wrote (`undo.rs`).
    pub(crate) fn is_damaged(&self) -> bool {
        self.1.load(std::sync::atomic::Ordering::Acquire) || self.0.lock().as_ref().is_some_and(|cause| cause.damaged)
    }

    /// Runs `body`; a panic inside it becomes [`Error::Corrupted`] and poisons the handle.
    pub(crate) fn contain<T>(&self, operation: &'static str, body: impl FnOnce() -> Result<T>) -> Result<T> {
        // The closure's state is dropped or discarded on a panic, and the handle is poisoned
        // for writes, so nothing observes a half-updated value afterwards.
        match catch_unwind(AssertUnwindSafe(body)) {
            Ok(Err(err)) if err.is_corruption() => {
                self.saw_damage();
                Err(err)
            }
            Ok(result) => result,
            Err(payload) => {
                let err = panic_error(operation, payload.as_ref());
                self.set_damaged(&err);
                Err(err)
            }
        }
    }
}

/// Runs `body` where no handle exists yet (opening); a panic inside it becomes
/// [`Error::Corrupted`].
pub(crate) fn contain_open<T>(operation: &'static str, body: impl FnOnce() -> Result<T>) -> Result<T> {
    Poison::default().contain(operation, body)
}

/// The error for a panic caught at the boundary.
pub(crate) fn panic_error(operation: &'static str, payload: &(dyn Any + Send)) -> Error {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned());
    tracing::error!(operation, message, "the storage engine panicked: the store file is damaged");
    Error::Corrupted { table: ENGINE, key: String::new(), detail: Corruption::EnginePanic { operation, message } }
}

/// Owns a redb handle and drops it at the boundary: redb's `Drop` for a database records its
/// allocator state, which reads the file and can panic on a damaged one.
pub(crate) struct DropContained<T>(Option<T>);

impl<T> DropContained<T> {
    pub(crate) fn new(inner: T) -> DropContained<T> {
        DropContained(Some(inner))
    }
}

impl<T> DropContained<T> {
    /// The handle itself, for a call that consumes it (`close`), made inside the boundary.
    pub(crate) fn into_inner(mut self) -> T {
        self.0.take().expect("a redb handle is present until dropped")
    }
}

impl<T> std::ops::Deref for DropContained<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // Taken only by `drop`, after which nothing can deref it.
        self.0.as_ref().expect("a redb handle is present until dropped")
    }
}

impl<T> std::ops::DerefMut for DropContained<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.as_mut().expect("a redb handle is present until dropped")
    }
}

impl<T> Drop for DropContained<T> {
    fn drop(&mut self) {
        if let Some(inner) = self.0.take()
            && let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(inner)))
        {
            // Nothing is left to return the error to; the file's damage is reported by whatever
            // read it first, and by verify.
            let _ = panic_error("closing the store", payload.as_ref());
        }
    }
}

//! The store file of a writable handle, with an undo log: a handle that finds the store damaged
//! leaves the file's bytes as they were when it opened (or at its last commit).
//!
//! redb writes to the file before any of manifestdb's checks can run: a writable open marks the
//! header "recovery required", recovers a file that needs it, and closing the handle writes the
//! allocator state and clears the mark. On a damaged store the operation then fails (exit 7),
//! yet the file has changed; worse, a close or a repair over a damaged page spreads the damage.
//! So every write of the handle first saves the bytes it overwrites (and the file's length),
//! from the open or the last commit on. When the handle closes having found damage (its poison
//! says so, a panic inside redb is unwinding, or the open failed as corruption), those bytes
//! are written back, the length restored and the file synced before redb's locks are released:
//! the file is as it was before the damaged handle touched it, never half-repaired. After each
//! successful commit the log restarts ([`UndoLog::commit_done`]): a commit stands.
//!
//! The log holds at most [`UNDO_BYTES_MAX`]; a transaction writing more stops the log for it
//! (then a damaged handle restores nothing and says so in the log).
//!
//! Invariant: bytes are written back only by [`UndoFile::close`], before the inner backend's
//! locks are released, and only onto a file no other writer can hold meanwhile.

use std::fs::File;
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::Mutex;
use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// The I/O error of a storage backend (redb 4: the standard one).
type BackendIoError = std::io::Error;

use super::contain::Poison;

/// The most bytes the undo log keeps between two commits: past it, the transaction's writes are
/// not logged (and a damaged handle cannot restore them).
pub(crate) const UNDO_BYTES_MAX: usize = 64 * 1024 * 1024;

/// What was overwritten since the open or the last commit.
#[derive(Debug, Default)]
struct Log {
    /// The file's length when the log (re)started; read at its first write (when the handle
    /// holds redb's lock).
    len: Option<u64>,
    /// Each write's earlier bytes (inside `len`), oldest first: written back newest first.
    saved: Vec<(u64, Vec<u8>)>,
    bytes: usize,
    /// Past [`UNDO_BYTES_MAX`]: nothing can be restored until the next commit.
    overflowed: bool,
}

/// The handle's side of the log: told of commits, asked whether the handle found damage.
#[derive(Debug)]
pub(crate) struct UndoLog {
    log: Mutex<Log>,
    poison: Poison,
    /// redb's open returned the database: a close before it is a failed open.
    opened: std::sync::atomic::AtomicBool,
    /// The handle wrote to the file (so it held redb's lock): nothing is put back otherwise.
    wrote: std::sync::atomic::AtomicBool,
}

impl UndoLog {
    /// A successful commit: what it wrote stands; the log restarts from the file as it is.
    pub(crate) fn commit_done(&self) {
        *self.log.lock() = Log::default();
    }

    /// redb's open succeeded: from now on only found damage puts bytes back at the close.
    pub(crate) fn opened(&self) {
        self.opened.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// redb's file backend with the undo log (see the module's documentation).
#[derive(Debug)]
pub(crate) struct UndoFile {
    inner: FileBackend,
    undo: Arc<UndoLog>,
}

impl UndoFile {
    /// The backend over `file`, whose damage `poison` records, and the handle's side of its log.
    pub(crate) fn new(file: File, poison: Poison) -> Result<(UndoFile, Arc<UndoLog>), redb::DatabaseError> {
        let undo = Arc::new(UndoLog {
            log: Mutex::new(Log::default()),
            poison,
            opened: std::sync::atomic::AtomicBool::new(false),
            wrote: std::sync::atomic::AtomicBool::new(false),
        });
        #[allow(deprecated, reason = "redb 4's FileBackend::new returns a Result; its replacement is redb 5's")]
        let inner = FileBackend::new(file)?;
        Ok((UndoFile { inner, undo: Arc::clone(&undo) }, undo))
    }

    /// Whether this handle wrote and then found the store damaged: its poison says so, a panic
    /// inside redb is unwinding through the close (the boundary poisons the handle only after
    /// it), or redb's open failed after writing (a recovery that met damage, say).
    fn found_damage(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.undo.wrote.load(Ordering::Acquire)
            && (std::thread::panicking() || self.undo.poison.is_damaged() || !self.undo.opened.load(Ordering::Acquire))
    }

    /// Whether redb's close left the file marked "recovery required" after this handle wrote:
    /// its clean shutdown did not finish (it met damage, or failed), so the file needs the
    /// recovery an open performs anyway; it is put back to its state at the last commit (a
    /// state it durably had) rather than left with a half-written shutdown.
    fn close_unfinished(&self) -> bool {
        /// redb's header: the magic number, then the "god byte", whose bit 1 is "recovery
        /// required" (`tree_store/page_store/header.rs`).
        const GOD_BYTE_OFFSET: u64 = 9;
        const RECOVERY_REQUIRED: u8 = 2;
        if !self.undo.wrote.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        let mut god_byte = [0u8];
        self.inner.read(GOD_BYTE_OFFSET, &mut god_byte).is_ok_and(|()| god_byte[0] & RECOVERY_REQUIRED != 0)
    }

    /// Writes every saved range back, newest first, restores the length and syncs.
    fn restore(&self) -> Result<usize, BackendIoError> {
        let log = std::mem::take(&mut *self.undo.log.lock());
        if log.overflowed {
            tracing::error!("the store was found damaged after a transaction too large to undo; its writes stay in the file");
            return Ok(0);
        }
        let mut restored = 0;
        for (offset, bytes) in log.saved.iter().rev() {
            self.inner.write(*offset, bytes)?;
            restored += bytes.len();
        }
        if let Some(len) = log.len
            && self.inner.len()? != len
        {
            self.inner.set_len(len)?;
        }
        self.inner.sync_data()?;
        Ok(restored)
    }
}

impl StorageBackend for UndoFile {
    fn len(&self) -> Result<u64, BackendIoError> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendIoError> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), BackendIoError> {
        // A shrink loses bytes inside the logged length: save them first.
        let mut log = self.undo.log.lock();
        self.undo.wrote.store(true, std::sync::atomic::Ordering::Release);
        save(&self.inner, &mut log, len, u64::MAX)?;
        drop(log);
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<(), BackendIoError> {
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BackendIoError> {
        let mut log = self.undo.log.lock();
        self.undo.wrote.store(true, std::sync::atomic::Ordering::Release);
        save(&self.inner, &mut log, offset, offset.saturating_add(data.len() as u64))?;
        drop(log);
        self.inner.write(offset, data)
    }

    fn close(&self) -> Result<(), BackendIoError> {
        if self.found_damage() || self.close_unfinished() {
            match self.restore() {
                Ok(bytes) => tracing::warn!(bytes, "the store was found damaged: the bytes this handle wrote were put back"),
                Err(err) => {
                    tracing::error!(error = %err, "the store was found damaged and the bytes this handle wrote could not all be put back")
                }
            }
        }
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

/// Saves the bytes of `[start, end)` that lie inside the logged length, unless that would take
/// the log past [`UNDO_BYTES_MAX`] (then it stops until the next commit).
fn save(inner: &FileBackend, log: &mut Log, start: u64, end: u64) -> Result<(), BackendIoError> {
    if log.overflowed {
        return Ok(());
    }
    let logged_len = match log.len {
        Some(len) => len,
        None => *log.len.insert(inner.len()?),
    };
    let end = end.min(logged_len);
    if start >= end {
        return Ok(());
    }
    let len = usize::try_from(end - start).unwrap_or(usize::MAX);
    if log.bytes.saturating_add(len) > UNDO_BYTES_MAX {
        *log = Log { len: log.len, overflowed: true, ..Log::default() };
        tracing::debug!(bytes_max = UNDO_BYTES_MAX, "a transaction wrote more than the undo log keeps");
        return Ok(());
    }
    let mut bytes = vec![0; len];
    inner.read(start, &mut bytes)?;
    log.bytes += len;
    log.saved.push((start, bytes));
    Ok(())
}

//! Progress of long operations, reported to a caller's hook.
//!
//! The operations that may take long because they touch many files take a hook,
//! `&dyn Fn(Progress)`, in their `*_with_progress` form: validation
//! ([`crate::Store::prepare_validation_with_progress`],
//! [`crate::ReadOnlyStore::prepare_validation_with_progress`],
//! [`crate::Store::validate_attempt_with_progress`]), cleanup
//! ([`crate::Store::apply_cleanup_with_progress`]) and verify
//! ([`crate::Store::verify_with_progress`], [`crate::ReadOnlyStore::verify_with_progress`]).
//! The forms without the suffix pass a hook that does nothing.
//!
//! Invariant: within one stage of one call, the hook first sees the stage's totals with nothing
//! done, then one report after each file, with `files_done` and `bytes_done` never decreasing and
//! never above their totals; a stage that runs to its end reports `done == total` last. A call
//! that fails stops reporting where it failed.

use std::fmt;

/// What a long operation is doing when it reports [`Progress`].
///
/// An operation may go through several stages (a validation at a grain checks its files, reads
/// them for rows, then makes them durable); each stage counts its files from zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProgressStage {
    /// Files checked against what the store recorded: their sizes, and with
    /// [`crate::FileCheck::SizeAndChecksum`] their CRC32s, which reads each file in full
    /// (validation, and verify's file check).
    CheckingFiles,
    /// A candidate's files read at its run's grain for its rows, total and digest (validation of
    /// an attempt of a run with a grain).
    ReadingRows,
    /// A valid candidate's files made durable, one `fdatasync` each (validation).
    SyncingFiles,
    /// A cleanup plan's paths re-checked and deleted; in a dry run re-checked only.
    DeletingFiles,
}

impl fmt::Display for ProgressStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProgressStage::CheckingFiles => "checking files",
            ProgressStage::ReadingRows => "reading rows",
            ProgressStage::SyncingFiles => "syncing files",
            ProgressStage::DeletingFiles => "deleting files",
        })
    }
}

/// How far one stage of a long operation has come: files and bytes done of the stage's totals.
///
/// Bytes are the files' recorded sizes (as the candidate or the plan records them), counted
/// when a file is done, whether the stage reads its content (checksums, rows) or only looks at
/// it (sizes, deletion, a file found missing). So `bytes_done` reaches `bytes_total` exactly
/// when `files_done` reaches `files_total`, and a caller can weigh its display by bytes (one big
/// file is most of the work) and count in files.
///
/// ```
/// use std::cell::Cell;
/// use manifestdb::{FileCheck, Progress, Store, VerifyOptions};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
///
/// let mut store = Store::open(dir.path().join("store.redb"), dir.path().join("staging"))?;
/// // A hook that keeps the last report; a terminal would draw each one.
/// let last = Cell::new(None::<Progress>);
/// let options = VerifyOptions { files: Some(FileCheck::SizeAndChecksum), ..VerifyOptions::default() };
/// store.verify_with_progress(&options, &|p| last.set(Some(p)))?;
/// if let Some(p) = last.get() {
///     println!("{}: {}/{} files, {}/{} bytes", p.stage, p.files_done, p.files_total, p.bytes_done, p.bytes_total);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// What the operation is doing.
    pub stage: ProgressStage,
    /// Files of this stage done.
    pub files_done: u64,
    /// Files this stage takes.
    pub files_total: u64,
    /// Recorded sizes of the files done, in bytes.
    pub bytes_done: u64,
    /// Recorded sizes of all the stage's files, in bytes.
    pub bytes_total: u64,
}

/// The hook of the forms without `_with_progress`: nothing happens.
pub(crate) const NO_PROGRESS: &dyn Fn(Progress) = &|_| {};

/// One stage's count, reporting to the caller's hook.
pub(crate) struct Tracker<'a> {
    hook: &'a dyn Fn(Progress),
    now: Progress,
}

impl<'a> Tracker<'a> {
    /// Starts a stage over files of these sizes, and reports its totals with nothing done.
    pub(crate) fn start(hook: &'a dyn Fn(Progress), stage: ProgressStage, sizes: impl IntoIterator<Item = u64>) -> Tracker<'a> {
        let (files_total, bytes_total) = sizes.into_iter().fold((0u64, 0u64), |(n, b), size| (n + 1, b.saturating_add(size)));
        let now = Progress { stage, files_done: 0, files_total, bytes_done: 0, bytes_total };
        hook(now);
        Tracker { hook, now }
    }

    /// Goes on with a stage whose counts so far are `now` (reported before), reporting nothing
    /// yet: for work taken in several calls.
    pub(crate) fn resume(hook: &'a dyn Fn(Progress), now: Progress) -> Tracker<'a> {
        Tracker { hook, now }
    }

    /// The counts so far.
    pub(crate) fn now(&self) -> Progress {
        self.now
    }

    /// One more file done, of this recorded size; reported.
    pub(crate) fn file_done(&mut self, size_bytes: u64) {
        // Capped at the totals: a caller that reports more files than it announced (it never
        // should) still gives its hook counts that hold the invariant.
        self.now.files_done = (self.now.files_done + 1).min(self.now.files_total);
        self.now.bytes_done = self.now.bytes_done.saturating_add(size_bytes).min(self.now.bytes_total);
        (self.hook)(self.now);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    #[test]
    fn a_stage_reports_its_totals_first_then_each_file_up_to_them() {
        let seen = RefCell::new(Vec::new());
        let hook = |p: Progress| seen.borrow_mut().push((p.files_done, p.bytes_done, p.files_total, p.bytes_total));
        let mut tracker = Tracker::start(&hook, ProgressStage::CheckingFiles, [5, 0, 7]);
        for size in [5, 0, 7] {
            tracker.file_done(size);
        }
        assert_eq!(*seen.borrow(), [(0, 0, 3, 12), (1, 5, 3, 12), (2, 5, 3, 12), (3, 12, 3, 12)]);
        // More than announced stays at the totals.
        tracker.file_done(100);
        assert_eq!(seen.borrow().last(), Some(&(3, 12, 3, 12)));
    }

    #[test]
    fn stages_read_as_words() {
        assert_eq!(ProgressStage::CheckingFiles.to_string(), "checking files");
        assert_eq!(ProgressStage::DeletingFiles.to_string(), "deleting files");
    }
}

//! Validation of a candidate: the coordinator's check before an attempt may be accepted, and
//! the same gate again at publish time.
//!
//! Pure: the caller observes the files (see `store::files`) and passes what it saw.

use crate::model::{Candidate, FileEntry, GateFailure, TaskSpec, Verdict};

/// What the coordinator saw of one reported file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileObservation {
    /// Not there, or not a regular file (a symlink or a directory counts as missing).
    Missing,
    /// A regular file of this size, and this CRC32 if it was computed.
    Present { size_bytes: u64, crc32: Option<u32> },
    /// Could not be inspected. Only `verify` reports this (as a finding); validation and
    /// publish return the I/O error instead, so it never becomes a stored verdict.
    Unreadable(String),
}

/// The gates that depend only on the candidate and its task: same snapshot as the run, rows
/// and total equal to the task's expectations at the declared grain.
pub(crate) fn expectation_failures(run_snapshot: &str, task: &TaskSpec, candidate: &Candidate) -> Vec<GateFailure> {
    let mut failures = Vec::new();
    if candidate.snapshot != run_snapshot {
        failures.push(GateFailure::ForeignSnapshot { expected: run_snapshot.to_owned(), got: candidate.snapshot.clone() });
    }
    if candidate.rows != task.expected_rows {
        failures.push(GateFailure::RowsMismatch { expected: task.expected_rows, got: candidate.rows });
    }
    if let Some(expected) = task.expected_total
        && candidate.total != Some(expected)
    {
        failures.push(GateFailure::TotalMismatch { expected, got: candidate.total });
    }
    failures
}

/// The full validation verdict: expectation gates plus every file as reported.
/// `observed[i]` is what was seen of `candidate.files[i]`.
pub(crate) fn verdict(run_snapshot: &str, task: &TaskSpec, candidate: &Candidate, observed: &[FileObservation]) -> Verdict {
    debug_assert_eq!(candidate.files.len(), observed.len());
    let mut failures = expectation_failures(run_snapshot, task, candidate);
    failures.extend(file_failures(&candidate.files, observed));
    if failures.is_empty() { Verdict::Valid } else { Verdict::Invalid(failures) }
}

/// A file or directory of a candidate that could not be made durable: its sync failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotDurable {
    /// The file's path relative to the attempt directory (`.` for the attempt directory or a
    /// directory above it).
    pub(crate) path: String,
    /// What failed, with the operating system's message.
    pub(crate) message: String,
}

/// The verdict once the candidate's syncs ran (DOMAIN 11). A candidate whose data could not be
/// made durable is refused: after a failed fsync the page cache may have dropped the data while
/// still showing it, so neither this content nor a retried sync can be trusted. The task is
/// retried with a new attempt, which writes its files afresh.
pub(crate) fn after_sync(verdict: Verdict, failures: &[NotDurable]) -> Verdict {
    if failures.is_empty() {
        return verdict;
    }
    let mut gates = match verdict {
        Verdict::Valid => Vec::new(),
        Verdict::Invalid(gates) => gates,
    };
    gates.extend(failures.iter().map(|f| GateFailure::FileUnreadable {
        path: f.path.clone(),
        message: format!("could not be made durable ({}); its content may not be on disk, retry the task", f.message),
    }));
    Verdict::Invalid(gates)
}

/// The file gates alone: `observed[i]` is what was seen of `files[i]` (publish checks them
/// again by size).
pub(crate) fn file_failures(files: &[FileEntry], observed: &[FileObservation]) -> Vec<GateFailure> {
    debug_assert_eq!(files.len(), observed.len());
    files.iter().zip(observed).filter_map(|(file, seen)| file_failure(file, seen)).collect()
}

fn file_failure(file: &FileEntry, seen: &FileObservation) -> Option<GateFailure> {
    match seen {
        FileObservation::Missing => Some(GateFailure::FileMissing { path: file.path.clone() }),
        FileObservation::Unreadable(message) => Some(GateFailure::FileUnreadable { path: file.path.clone(), message: message.clone() }),
        FileObservation::Present { size_bytes, .. } if *size_bytes != file.size_bytes => {
            Some(GateFailure::FileSizeMismatch { path: file.path.clone(), expected: file.size_bytes, got: *size_bytes })
        }
        FileObservation::Present { crc32: Some(crc32), .. } if *crc32 != file.crc32 => {
            Some(GateFailure::FileChecksumMismatch { path: file.path.clone(), expected: file.crc32, got: *crc32 })
        }
        FileObservation::Present { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> TaskSpec {
        TaskSpec { partition: "p".into(), expected_rows: 10, expected_total: Some(500) }
    }

    fn candidate() -> Candidate {
        Candidate {
            snapshot: "s1".into(),
            rows: 10,
            total: Some(500),
            digest: "d".into(),
            files: vec![FileEntry { path: "part.csv".into(), size_bytes: 7, crc32: 42 }],
        }
    }

    fn present() -> Vec<FileObservation> {
        vec![FileObservation::Present { size_bytes: 7, crc32: Some(42) }]
    }

    #[test]
    fn matching_candidate_is_valid() {
        assert_eq!(verdict("s1", &task(), &candidate(), &present()), Verdict::Valid);
    }

    #[test]
    fn each_mismatch_is_named() {
        let mut c = candidate();
        c.rows = 9;
        c.total = Some(499);
        c.snapshot = "s2".into();
        let Verdict::Invalid(failures) = verdict("s1", &task(), &c, &[FileObservation::Missing]) else {
            panic!("expected invalid");
        };
        assert_eq!(
            failures,
            vec![
                GateFailure::ForeignSnapshot { expected: "s1".into(), got: "s2".into() },
                GateFailure::RowsMismatch { expected: 10, got: 9 },
                GateFailure::TotalMismatch { expected: 500, got: Some(499) },
                GateFailure::FileMissing { path: "part.csv".into() },
            ]
        );
    }

    #[test]
    fn size_and_checksum_are_checked() {
        let v = verdict("s1", &task(), &candidate(), &[FileObservation::Present { size_bytes: 8, crc32: None }]);
        assert!(matches!(v, Verdict::Invalid(ref f) if matches!(f[0], GateFailure::FileSizeMismatch { got: 8, .. })));
        let v = verdict("s1", &task(), &candidate(), &[FileObservation::Present { size_bytes: 7, crc32: Some(1) }]);
        assert!(matches!(v, Verdict::Invalid(ref f) if matches!(f[0], GateFailure::FileChecksumMismatch { got: 1, .. })));
    }

    #[test]
    fn no_expected_total_accepts_any_total() {
        let mut t = task();
        t.expected_total = None;
        let mut c = candidate();
        c.total = None;
        assert_eq!(verdict("s1", &t, &c, &present()), Verdict::Valid);
    }

    #[test]
    fn a_candidate_whose_sync_failed_is_refused_and_a_clean_one_is_kept() {
        assert_eq!(after_sync(Verdict::Valid, &[]), Verdict::Valid);
        let failure = NotDurable { path: "part.csv".into(), message: "fdatasync of /s/part.csv failed: EIO".into() };
        let v = after_sync(Verdict::Valid, std::slice::from_ref(&failure));
        assert!(matches!(v, Verdict::Invalid(ref f) if f.len() == 1
                && matches!(&f[0], GateFailure::FileUnreadable { path, message } if path == "part.csv" && message.contains("durable"))));
    }
}

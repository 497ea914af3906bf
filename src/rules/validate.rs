//! Validation of a candidate: the coordinator's check before an attempt may be accepted, and
//! the same gate again at publish time.
//!
//! Pure: the caller observes the files (see `store::files`) and, for a run with a grain,
//! reads them (see `readers`), and passes what it saw and computed.

use crate::grain::{DataFormat, ReconcileBasis, Reconciliation};
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

/// The figures a gate compares with a task's expectations: the snapshot the candidate read,
/// and its rows and total (computed from the files with a grain, reported without one).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Figures<'a> {
    pub(crate) snapshot: &'a str,
    pub(crate) rows: Option<u64>,
    pub(crate) total: Option<i64>,
}

/// What reading a partition's files at its grain computed (see `readers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Computed {
    /// Data rows read, rejected ones included.
    pub(crate) rows: u64,
    /// Sum of the measure over accepted rows; `None` if it does not fit an `i64`.
    pub(crate) total: Option<i64>,
    /// Rows rejected (missing key, unparsable).
    pub(crate) rejected: u64,
    /// `keys - distinct keys` over accepted rows.
    pub(crate) duplicates: u64,
    /// One repeated key, as texts.
    pub(crate) first_duplicate: Option<Vec<String>>,
    /// The canonical digest text.
    pub(crate) digest: String,
    /// Files read and their bytes.
    pub(crate) files: u64,
    pub(crate) bytes: u64,
    /// Sorted key runs spilled to disk (0: the key set fit in memory).
    pub(crate) runs_spilled: usize,
    /// File-level failures and the first rejected rows, in reading order.
    pub(crate) failures: Vec<GateFailure>,
}

/// The gates that depend only on the figures and the task: same snapshot as the run, rows
/// and total equal to the task's expectations at the declared grain.
pub(crate) fn expectation_failures(run_snapshot: &str, task: &TaskSpec, figures: Figures<'_>) -> Vec<GateFailure> {
    let mut failures = Vec::new();
    if figures.snapshot != run_snapshot {
        failures.push(GateFailure::ForeignSnapshot { expected: run_snapshot.to_owned(), got: figures.snapshot.to_owned() });
    }
    match figures.rows {
        None => failures.push(GateFailure::FigureNotReported { figure: "rows".into() }),
        Some(rows) if rows != task.expected_rows => failures.push(GateFailure::RowsMismatch { expected: task.expected_rows, got: rows }),
        Some(_) => {}
    }
    if let Some(expected) = task.expected_total
        && figures.total != Some(expected)
    {
        failures.push(GateFailure::TotalMismatch { expected, got: figures.total });
    }
    failures
}

/// The full validation verdict and its figures. Without a grain (`computed` is `None`): the
/// reported figures against the expectations, and every file as reported. With a grain: the
/// computed figures against the expectations, every reported figure against its computed
/// one, no duplicate grain key, no rejected row, every file as reported.
/// `observed[i]` is what was seen of `candidate.files[i]`.
pub(crate) fn verdict(
    run_snapshot: &str,
    task: &TaskSpec,
    candidate: &Candidate,
    observed: &[FileObservation],
    computed: Option<(DataFormat, &Computed)>,
) -> (Verdict, Reconciliation) {
    debug_assert_eq!(candidate.files.len(), observed.len());
    let mut reconciliation = Reconciliation {
        basis: ReconcileBasis::Reported,
        expected_rows: task.expected_rows,
        expected_total: task.expected_total,
        reported_rows: candidate.rows,
        reported_total: candidate.total,
        reported_digest: candidate.digest.clone(),
        computed_rows: None,
        computed_total: None,
        duplicate_keys: 0,
        rejected_rows: 0,
        computed_digest: None,
        files_read: 0,
        bytes_read: 0,
    };
    let mut failures = match computed {
        None => {
            let figures = Figures { snapshot: &candidate.snapshot, rows: candidate.rows, total: candidate.total };
            let mut failures = expectation_failures(run_snapshot, task, figures);
            if candidate.digest.is_none() {
                failures.push(GateFailure::FigureNotReported { figure: "digest".into() });
            }
            failures
        }
        Some((format, computed)) => {
            reconciliation.basis = ReconcileBasis::Read { format };
            reconciliation.computed_rows = Some(computed.rows);
            reconciliation.computed_total = computed.total;
            reconciliation.duplicate_keys = computed.duplicates;
            reconciliation.rejected_rows = computed.rejected;
            reconciliation.computed_digest = Some(computed.digest.clone());
            reconciliation.files_read = computed.files;
            reconciliation.bytes_read = computed.bytes;
            read_failures(run_snapshot, task, candidate, computed)
        }
    };
    failures.extend(file_failures(&candidate.files, observed));
    let verdict = if failures.is_empty() { Verdict::Valid } else { Verdict::Invalid(failures) };
    (verdict, reconciliation)
}

fn read_failures(run_snapshot: &str, task: &TaskSpec, candidate: &Candidate, computed: &Computed) -> Vec<GateFailure> {
    let figures = Figures { snapshot: &candidate.snapshot, rows: Some(computed.rows), total: computed.total };
    let mut failures = expectation_failures(run_snapshot, task, figures);
    if computed.total.is_none() {
        failures.push(GateFailure::TotalOverflow);
    }
    if computed.duplicates > 0 {
        failures.push(GateFailure::DuplicateGrainKey {
            duplicates: computed.duplicates,
            key: computed.first_duplicate.clone().unwrap_or_default(),
        });
    }
    failures.extend(computed.failures.iter().cloned());
    let mismatch =
        |figure: &str, reported: String, computed: String| GateFailure::ReportedMismatch { figure: figure.into(), reported, computed };
    if let Some(rows) = candidate.rows
        && rows != computed.rows
    {
        failures.push(mismatch("rows", rows.to_string(), computed.rows.to_string()));
    }
    if let Some(total) = candidate.total
        && Some(total) != computed.total
    {
        failures.push(mismatch("total", total.to_string(), computed.total.map_or_else(|| "an overflowing sum".into(), |t| t.to_string())));
    }
    if let Some(digest) = &candidate.digest
        && *digest != computed.digest
    {
        failures.push(mismatch("digest", digest.clone(), computed.digest.clone()));
    }
    failures
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
            rows: Some(10),
            total: Some(500),
            digest: Some("d".into()),
            files: vec![FileEntry { path: "part.csv".into(), size_bytes: 7, crc32: 42 }],
        }
    }

    fn present() -> Vec<FileObservation> {
        vec![FileObservation::Present { size_bytes: 7, crc32: Some(42) }]
    }

    #[test]
    fn matching_candidate_is_valid() {
        assert_eq!(verdict("s1", &task(), &candidate(), &present(), None).0, Verdict::Valid);
    }

    #[test]
    fn each_mismatch_is_named() {
        let mut c = candidate();
        c.rows = Some(9);
        c.total = Some(499);
        c.snapshot = "s2".into();
        let Verdict::Invalid(failures) = verdict("s1", &task(), &c, &[FileObservation::Missing], None).0 else {
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
        let v = verdict("s1", &task(), &candidate(), &[FileObservation::Present { size_bytes: 8, crc32: None }], None).0;
        assert!(matches!(v, Verdict::Invalid(ref f) if matches!(f[0], GateFailure::FileSizeMismatch { got: 8, .. })));
        let v = verdict("s1", &task(), &candidate(), &[FileObservation::Present { size_bytes: 7, crc32: Some(1) }], None).0;
        assert!(matches!(v, Verdict::Invalid(ref f) if matches!(f[0], GateFailure::FileChecksumMismatch { got: 1, .. })));
    }

    #[test]
    fn no_expected_total_accepts_any_total() {
        let mut t = task();
        t.expected_total = None;
        let mut c = candidate();
        c.total = None;
        assert_eq!(verdict("s1", &t, &c, &present(), None).0, Verdict::Valid);
    }

    fn computed() -> Computed {
        Computed {
            rows: 10,
            total: Some(500),
            rejected: 0,
            duplicates: 0,
            first_duplicate: None,
            digest: "ms256:10:ab".into(),
            files: 1,
            bytes: 7,
            runs_spilled: 0,
            failures: vec![],
        }
    }

    #[test]
    fn with_a_grain_the_computed_figures_decide_and_reported_ones_are_cross_checks() {
        let mut c = candidate();
        c.rows = None;
        c.total = None;
        c.digest = None;
        let (v, r) = verdict("s1", &task(), &c, &present(), Some((DataFormat::Csv, &computed())));
        assert_eq!(v, Verdict::Valid);
        assert_eq!(r.basis, ReconcileBasis::Read { format: DataFormat::Csv });
        assert_eq!((r.computed_rows, r.computed_total, r.computed_digest.as_deref()), (Some(10), Some(500), Some("ms256:10:ab")));
        // Correct-looking reported figures do not save wrong data.
        let mut wrong = computed();
        wrong.rows = 0;
        wrong.total = Some(0);
        let (v, _) = verdict("s1", &task(), &candidate(), &present(), Some((DataFormat::Csv, &wrong)));
        let Verdict::Invalid(f) = v else { panic!("must be invalid") };
        assert!(f.contains(&GateFailure::RowsMismatch { expected: 10, got: 0 }));
        assert!(f.contains(&GateFailure::TotalMismatch { expected: 500, got: Some(0) }));
        assert!(f.iter().any(|f| matches!(f, GateFailure::ReportedMismatch { figure, .. } if figure == "rows")));
        assert!(f.iter().any(|f| matches!(f, GateFailure::ReportedMismatch { figure, .. } if figure == "digest")));
    }

    #[test]
    fn duplicates_and_overflow_are_named() {
        let mut dup = computed();
        dup.duplicates = 1;
        dup.first_duplicate = Some(vec!["1".into(), "7".into()]);
        dup.total = None;
        let mut c = candidate();
        c.digest = None;
        let (v, _) = verdict("s1", &task(), &c, &present(), Some((DataFormat::Csv, &dup)));
        let Verdict::Invalid(f) = v else { panic!("must be invalid") };
        assert!(f.contains(&GateFailure::DuplicateGrainKey { duplicates: 1, key: vec!["1".into(), "7".into()] }));
        assert!(f.contains(&GateFailure::TotalOverflow));
    }

    #[test]
    fn without_a_grain_unreported_figures_fail_and_the_basis_says_reported() {
        let mut c = candidate();
        c.rows = None;
        c.digest = None;
        let (v, r) = verdict("s1", &task(), &c, &present(), None);
        assert_eq!(r.basis, ReconcileBasis::Reported);
        assert_eq!(
            v,
            Verdict::Invalid(vec![
                GateFailure::FigureNotReported { figure: "rows".into() },
                GateFailure::FigureNotReported { figure: "digest".into() }
            ])
        );
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

//! Domain types: what callers hand to the store and what they get back.
//!
//! These are plain data. The rules over them live in `rules/`, the tables that hold them in
//! `schema.rs` and `records.rs`. The small leaf types ([`FileEntry`], [`Candidate`],
//! [`GateFailure`]) are also embedded in stored records, so changing their fields needs a new
//! record version (see `codec.rs`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::grain::{Grain, Reconciliation};

/// Identifies a task: the natural key of one unit of work. A task owns exactly one partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TaskKey {
    /// The dataset the task writes (for example `daily_units`).
    pub dataset: String,
    /// The run the task belongs to.
    pub run: String,
    /// The partition the task owns (for example `date=2026-11-29/region=eu`).
    pub partition: String,
}

impl TaskKey {
    /// Builds a task key.
    pub fn new(dataset: impl Into<String>, run: impl Into<String>, partition: impl Into<String>) -> Self {
        TaskKey { dataset: dataset.into(), run: run.into(), partition: partition.into() }
    }

    /// The key of attempt number `attempt` of this task.
    pub fn attempt(&self, attempt: u32) -> AttemptKey {
        AttemptKey { task: self.clone(), attempt }
    }
}

impl std::fmt::Display for TaskKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.dataset, self.run, self.partition)
    }
}

/// Identifies one attempt of a task. Attempt numbers are assigned by the store, from 1, in
/// the order attempts begin.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AttemptKey {
    /// The task.
    pub task: TaskKey,
    /// The attempt number (1-based).
    pub attempt: u32,
}

impl std::fmt::Display for AttemptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.task, self.attempt)
    }
}

/// A run to declare: one execution of a step over one pinned input snapshot, with its tasks.
///
/// A run either declares its output's [`Grain`] (validation then reads every file and computes
/// the figures itself) or says in words that the figures its workers report are to be published
/// unchecked ([`RunSpec::trust_reported_figures`]); a run with neither, or both, is refused by
/// [`crate::Store::declare_run`] (`Error::InvalidInput`), as the command-line tool refuses a
/// declaration without `--grain` or `--trust-reported-figures`.
///
/// Build it with [`RunSpec::new`] and the `with_` methods, or field by field:
///
/// ```
/// use manifestdb::{DataFormat, Grain, RunSpec, TaskSpec};
///
/// let run = RunSpec::new("daily_units", "2026-11-29", "sales@v42")
///     .with_task(TaskSpec::new("region=eu", 2).with_total(700))
///     .with_task(TaskSpec::new("region=us", 3).with_total(450))
///     .with_grain(Grain::new(DataFormat::Csv, &["store", "item"], "units"));
/// assert_eq!(run.tasks.len(), 2);
/// // The same, spelled out; fields left out take their defaults (no tasks, no grain, figures
/// // not trusted: such a spec is refused until it gets a grain or trusts the figures).
/// let spelled = RunSpec {
///     dataset: "daily_units".into(),
///     run: "2026-11-29".into(),
///     snapshot: "sales@v42".into(),
///     grain: Some(Grain::new(DataFormat::Csv, &["store", "item"], "units")),
///     ..RunSpec::default()
/// };
/// assert!(!spelled.trust_reported_figures);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSpec {
    /// The dataset the run writes.
    pub dataset: String,
    /// The run id, unique within the dataset.
    pub run: String,
    /// The input snapshot every task of the run reads.
    pub snapshot: String,
    /// The tasks, one per partition, with the expectations derived from the input.
    pub tasks: Vec<TaskSpec>,
    /// The output's declared grain (format, key columns, measure). With one, validation reads
    /// every file and computes rows, total, duplicate keys and the canonical digest itself.
    /// Without one the figures are the worker's, *reported, not checked*: that needs
    /// [`RunSpec::trust_reported_figures`].
    pub grain: Option<Grain>,
    /// The caller's explicit choice to declare the run without a grain: validation then
    /// compares the rows and total each worker reports with the expectations, but nothing reads
    /// the data, so a 0-byte file reported as 5 rows is valid and published as 5 rows. Every
    /// document that shows such figures says so (`"figures": "reported"`, and
    /// [`PartitionEntry::figures_checked`] is false). Exactly one of this and `grain` must be
    /// given; the command-line tool and the server ask for it in the same words
    /// (`--trust-reported-figures`, `"trust_reported_figures": true`).
    #[serde(default)]
    pub trust_reported_figures: bool,
}

impl RunSpec {
    /// A run of `dataset` with id `run` over the input `snapshot`, with no tasks yet. It still
    /// needs its grain ([`RunSpec::with_grain`]) or the explicit [`RunSpec::trust_reported_figures`]
    /// before it can be declared.
    pub fn new(dataset: impl Into<String>, run: impl Into<String>, snapshot: impl Into<String>) -> RunSpec {
        RunSpec {
            dataset: dataset.into(),
            run: run.into(),
            snapshot: snapshot.into(),
            tasks: Vec::new(),
            grain: None,
            trust_reported_figures: false,
        }
    }

    /// The run with one more task.
    #[must_use]
    pub fn with_task(mut self, task: TaskSpec) -> RunSpec {
        self.tasks.push(task);
        self
    }

    /// The run with its output's grain declared, so validation reads the files.
    #[must_use]
    pub fn with_grain(mut self, grain: Grain) -> RunSpec {
        self.grain = Some(grain);
        self
    }

    /// The run declared without a grain, its workers' reported figures published unchecked
    /// (see the field [`RunSpec::trust_reported_figures`]). Choose it only where the workers'
    /// figures are trusted.
    ///
    /// ```
    /// use manifestdb::{RunSpec, TaskSpec};
    ///
    /// let run = RunSpec::new("daily_units", "r1", "sales@v42").with_task(TaskSpec::new("region=eu", 2)).trust_reported_figures();
    /// assert!(run.trust_reported_figures && run.grain.is_none());
    /// ```
    #[must_use]
    pub fn trust_reported_figures(mut self) -> RunSpec {
        self.trust_reported_figures = true;
        self
    }
}

/// One declared task and what its output must reconcile to at the declared grain.
///
/// ```
/// use manifestdb::TaskSpec;
///
/// let task = TaskSpec::new("date=2026-11-29/region=eu", 2).with_total(700);
/// assert_eq!((task.expected_rows, task.expected_total), (2, Some(700)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// The partition the task owns.
    pub partition: String,
    /// Rows the output must hold (one per grain unit, e.g. one per invoice line).
    pub expected_rows: u64,
    /// The total the output must sum to (an integer such as cents), if the run declares one.
    pub expected_total: Option<i64>,
}

impl TaskSpec {
    /// A task owning `partition` whose output must hold `expected_rows` rows, with no expected
    /// total.
    pub fn new(partition: impl Into<String>, expected_rows: u64) -> TaskSpec {
        TaskSpec { partition: partition.into(), expected_rows, expected_total: None }
    }

    /// The task with the total its output must sum to.
    #[must_use]
    pub fn with_total(mut self, expected_total: i64) -> TaskSpec {
        self.expected_total = Some(expected_total);
        self
    }
}

/// What [`crate::Store::declare_run`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DeclareOutcome {
    /// The run was new and is now declared.
    Declared,
    /// An identical run was already declared; nothing was written.
    AlreadyDeclared,
}

/// A begun attempt: its key and its private staging directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptTicket {
    /// The attempt's key; its number is new for the task.
    pub key: AttemptKey,
    /// The attempt's private staging directory, inside the store's staging root. It exists when
    /// `begin_attempt` returns and no other attempt shares it.
    pub staging_dir: std::path::PathBuf,
    /// When the attempt began, in milliseconds since the Unix epoch.
    pub started_at_ms: u64,
}

/// One output file of an attempt, as its worker reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileEntry {
    /// Path relative to the attempt's staging directory (`/`-separated, no `..`).
    pub path: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// CRC32 (IEEE, as computed by [`crate::file_crc32`]) of the file's content.
    pub crc32: u32,
}

/// What a finished attempt reports. It is not data until validated, accepted and published.
///
/// As JSON (a batch line's, `attempt finish --from`'s): `{"snapshot", "rows", "total",
/// "digest", "files": [{"path", "size_bytes", "crc32"}]}`; the optional figures and `files`
/// may be left out, and an unknown field is refused.
///
/// For a run with a grain, the snapshot and the files are all a worker must report: the store
/// reads the rows itself, and the figures are optional cross-checks.
///
/// ```
/// use manifestdb::{Candidate, FileEntry};
///
/// let file = FileEntry { path: "part.csv".into(), size_bytes: 33, crc32: 0x1234_5678 };
/// let candidate = Candidate::new("sales@v42").with_file(file.clone());
/// assert_eq!((candidate.rows, candidate.files.len()), (None, 1));
/// // A run without a grain needs the worker's figures: rows and digest (and the total).
/// let reported = Candidate { rows: Some(2), total: Some(700), digest: Some("sha256:...".into()), ..Candidate::new("sales@v42") };
/// assert_eq!(reported.snapshot, "sales@v42");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    /// The input snapshot the attempt read; must be its run's.
    pub snapshot: String,
    /// Rows written at the declared grain, as the worker counted them. Required for a run
    /// without a grain; with a grain, optional: a cross-check against the rows the store reads.
    pub rows: Option<u64>,
    /// Total of the output's measure (e.g. cents), if computed. With a grain, a cross-check.
    pub total: Option<i64>,
    /// Canonical digest of the output: equal inputs must give equal digests. Required for a
    /// run without a grain; with a grain, optional: a cross-check against the digest the store
    /// computes ([`crate::RowDigest`]), which is the one a publish records.
    pub digest: Option<String>,
    /// The files written, relative to the staging directory.
    #[serde(default)]
    pub files: Vec<FileEntry>,
}

impl Candidate {
    /// A candidate that read `snapshot`, with no files and no reported figures yet.
    pub fn new(snapshot: impl Into<String>) -> Candidate {
        Candidate { snapshot: snapshot.into(), ..Candidate::default() }
    }

    /// The candidate with one more file (see [`crate::describe_file`]).
    #[must_use]
    pub fn with_file(mut self, file: FileEntry) -> Candidate {
        self.files.push(file);
        self
    }
}

/// What [`crate::Store::finish_attempt`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FinishOutcome {
    /// The candidate is now recorded.
    Recorded,
    /// The same candidate was already recorded; nothing was written.
    AlreadyRecorded,
}

/// How thoroughly validation checks an attempt's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum FileCheck {
    /// Each file exists as a regular file (not a symlink) with the reported size.
    #[default]
    Size,
    /// As `Size`, and the content's CRC32 equals the reported one (reads every byte).
    SizeAndChecksum,
}

/// One reason a candidate or a publish is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum GateFailure {
    /// The candidate read another input snapshot than its run's.
    ForeignSnapshot {
        /// The run's pinned snapshot.
        expected: String,
        /// The candidate's.
        got: String,
    },
    /// The row count does not match the task's expectation.
    RowsMismatch {
        /// Expected rows.
        expected: u64,
        /// Reported rows.
        got: u64,
    },
    /// The total does not match the task's expectation.
    TotalMismatch {
        /// Expected total.
        expected: i64,
        /// Reported total (`None` if the candidate reported none).
        got: Option<i64>,
    },
    /// A reported file is missing (or is not a regular file).
    FileMissing {
        /// Path relative to the staging directory.
        path: String,
    },
    /// A reported file has another size.
    FileSizeMismatch {
        /// Path relative to the staging directory.
        path: String,
        /// Reported size.
        expected: u64,
        /// Size on disk.
        got: u64,
    },
    /// A reported file has other content.
    FileChecksumMismatch {
        /// Path relative to the staging directory.
        path: String,
        /// Reported CRC32.
        expected: u32,
        /// CRC32 on disk.
        got: u32,
    },
    /// A file could not be read (permissions, I/O error). No longer produced: such an error is
    /// an [`crate::Error::Io`] the caller may retry, never a stored verdict. Kept so that
    /// verdicts stored by earlier builds still decode.
    FileUnreadable {
        /// Path relative to the staging directory.
        path: String,
        /// The operating system's message.
        message: String,
    },
    /// A figure the worker reported differs from the one the store computed from the files.
    ReportedMismatch {
        /// Which figure: `rows`, `total` or `digest`.
        figure: String,
        /// What the worker reported.
        reported: String,
        /// What the store computed.
        computed: String,
    },
    /// A run without a grain needs this figure reported, and the candidate has none.
    FigureNotReported {
        /// Which figure: `rows` or `digest`.
        figure: String,
    },
    /// Rows share a grain key: the partition holds a key more than once.
    DuplicateGrainKey {
        /// Rows whose key an earlier row already held (`rows - distinct keys`).
        duplicates: u64,
        /// The first repeated key found, one text per grain key column.
        key: Vec<String>,
    },
    /// A row has no value for a grain key column (an empty CSV field, a Parquet null).
    MissingKey {
        /// Path relative to the staging directory.
        path: String,
        /// Where in the file: `line N` (CSV) or `row group N, row M` (Parquet).
        location: String,
        /// The key column.
        column: String,
    },
    /// A row cannot be read: wrong field count, a measure that is not an integer at the
    /// declared scale, text that is not UTF-8, a record over the size limit.
    UnparsableRow {
        /// Path relative to the staging directory.
        path: String,
        /// Where in the file: `line N` (CSV) or `row group N` (Parquet).
        location: String,
        /// What is wrong.
        message: String,
    },
    /// A file's columns are not the grain's (a CSV header or a Parquet schema with a missing,
    /// extra or repeated column).
    ColumnsMismatch {
        /// Path relative to the staging directory.
        path: String,
        /// The grain's columns, sorted.
        expected: Vec<String>,
        /// The file's columns, in file order.
        got: Vec<String>,
    },
    /// A column's type cannot be read at the grain (float, binary, nested, boolean, ...).
    UnsupportedColumnType {
        /// Path relative to the staging directory.
        path: String,
        /// The column.
        column: String,
        /// The file's type of the column.
        data_type: String,
    },
    /// A file is not a readable file of the declared format (a truncated Parquet file, a
    /// footer that claims rows the file does not hold).
    MalformedFile {
        /// Path relative to the staging directory.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The measure's sum does not fit a 64-bit integer.
    TotalOverflow,
    /// More rows were rejected than are listed one by one; this many were not listed.
    MoreRejectedRows {
        /// Rejected rows not listed.
        count: u64,
    },
    /// An operator invalidated the attempt (its files were lost, say) with
    /// [`crate::Store::invalidate_attempt`].
    Invalidated {
        /// Who invalidated it.
        actor: String,
        /// Why.
        reason: String,
        /// When (ms since the Unix epoch).
        invalidated_at_ms: u64,
    },
}

impl std::fmt::Display for GateFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GateFailure::ForeignSnapshot { expected, got } => {
                write!(f, "input snapshot {got:?} is not the run's pinned {expected:?}")
            }
            GateFailure::RowsMismatch { expected, got } => write!(f, "rows {got} != expected {expected}"),
            GateFailure::TotalMismatch { expected, got: Some(got) } => write!(f, "total {got} != expected {expected}"),
            GateFailure::TotalMismatch { expected, got: None } => write!(f, "no total reported, expected {expected}"),
            GateFailure::FileMissing { path } => write!(f, "file {path:?} is missing or not a regular file"),
            GateFailure::FileSizeMismatch { path, expected, got } => {
                write!(f, "file {path:?} has {}, reported {expected}", crate::error::count(*got, "byte"))
            }
            GateFailure::FileChecksumMismatch { path, expected, got } => {
                write!(f, "file {path:?} has crc32 {got:#010x}, reported {expected:#010x}")
            }
            GateFailure::FileUnreadable { path, message } => write!(f, "file {path:?} is unreadable: {message}"),
            GateFailure::ReportedMismatch { figure, reported, computed } => {
                write!(f, "reported {figure} {reported} != {computed} computed from the files")
            }
            GateFailure::FigureNotReported { figure } => write!(f, "no {figure} reported, and the run declares no grain to compute it"),
            GateFailure::DuplicateGrainKey { duplicates, key } => {
                let rows = crate::error::count(*duplicates, "row");
                let verb = if *duplicates == 1 { "repeats" } else { "repeat" };
                write!(f, "{rows} {verb} a grain key; first repeated key ({})", key.join(", "))
            }
            GateFailure::MissingKey { path, location, column } => write!(f, "file {path:?} {location}: no value for key column {column:?}"),
            GateFailure::UnparsableRow { path, location, message } => write!(f, "file {path:?} {location}: unparsable row: {message}"),
            GateFailure::ColumnsMismatch { path, expected, got } => {
                write!(f, "file {path:?} has columns [{}], the grain's are [{}]", got.join(", "), expected.join(", "))
            }
            GateFailure::UnsupportedColumnType { path, column, data_type } => {
                write!(f, "file {path:?}: column {column:?} has unsupported column type {data_type}")
            }
            GateFailure::MalformedFile { path, message } => write!(f, "file {path:?} is malformed: {message}"),
            GateFailure::TotalOverflow => write!(f, "the measure's sum does not fit a 64-bit integer"),
            GateFailure::MoreRejectedRows { count } => write!(f, "{count} more rejected rows not listed"),
            GateFailure::Invalidated { actor, reason, .. } => write!(f, "invalidated by {actor}: {reason}"),
        }
    }
}

/// The coordinator's verdict on a candidate, stored with the attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// The candidate matches its run's snapshot and its task's expectations, and its files are
    /// present as reported.
    Valid,
    /// The candidate failed; every failed check is listed.
    Invalid(Vec<GateFailure>),
}

impl Verdict {
    /// True for [`Verdict::Valid`].
    pub fn is_valid(&self) -> bool {
        matches!(self, Verdict::Valid)
    }
}

/// Where an attempt stands.
///
/// A finish that the store refuses (a foreign snapshot, a conflicting candidate, an abandoned
/// attempt) records nothing, so it has no state of its own: the attempt stays as it was
/// (running, until it finishes correctly, is abandoned, or its lease runs out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum AttemptStatus {
    /// Begun, no candidate yet, not abandoned: a worker may still be writing.
    Running,
    /// Candidate recorded, not yet validated.
    Finished,
    /// Candidate validated with this verdict.
    Validated(Verdict),
    /// Recorded abandoned before it finished (its lease ran out, or
    /// [`crate::Store::abandon_attempt`] fenced it): it can never finish, renew its lease or
    /// be validated.
    Abandoned {
        /// When it was recorded abandoned (ms since the Unix epoch).
        abandoned_at_ms: u64,
    },
}

impl AttemptStatus {
    /// A short lowercase name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            AttemptStatus::Running => "running",
            AttemptStatus::Finished => "finished",
            AttemptStatus::Validated(Verdict::Valid) => "valid",
            AttemptStatus::Validated(Verdict::Invalid(_)) => "invalid",
            AttemptStatus::Abandoned { .. } => "abandoned",
        }
    }
}

/// What [`crate::Store::abandon_attempt`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AbandonOutcome {
    /// The attempt is now recorded abandoned, at this time (ms since the Unix epoch).
    Abandoned {
        /// When it was recorded abandoned.
        abandoned_at_ms: u64,
    },
    /// It was already recorded abandoned (then); nothing was written.
    AlreadyAbandoned {
        /// When it was recorded abandoned.
        abandoned_at_ms: u64,
    },
}

/// What [`crate::Store::invalidate_attempt`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum InvalidateOutcome {
    /// The attempt's verdict is now invalid ([`GateFailure::Invalidated`]); the task's accepted
    /// attempt moved from `accepted_before` to `accepted_after` (the lowest valid attempt left,
    /// or none: then a new attempt may begin and become accepted).
    Invalidated {
        /// The task's accepted attempt before.
        accepted_before: Option<u32>,
        /// The task's accepted attempt now.
        accepted_after: Option<u32>,
    },
    /// The attempt was already invalid; nothing was written.
    AlreadyInvalid,
}

/// Everything the store knows about one attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptInfo {
    /// The attempt.
    pub key: AttemptKey,
    /// When it began (ms since the Unix epoch).
    pub started_at_ms: u64,
    /// Its last sign of life (the start, or the latest heartbeat; ms since the Unix epoch): an
    /// unfinished attempt's lease runs from here.
    pub heartbeat_at_ms: u64,
    /// When it was recorded abandoned (its lease ran out unfinished), if it was.
    pub abandoned_at_ms: Option<u64>,
    /// Its staging directory relative to the staging root.
    pub staging_rel: String,
    /// Its candidate once finished.
    pub candidate: Option<Candidate>,
    /// Where it stands.
    pub status: AttemptStatus,
    /// Once validated: the verdict's figures, expected, reported and computed side by side.
    pub reconciliation: Option<Reconciliation>,
}

/// Options of a publish. The default publishes only what reproduces the digests published
/// earlier for the same input snapshot; `accept_nondeterminism` publishes a differing one on
/// purpose, with the reason recorded in the history:
///
/// ```
/// use manifestdb::PublishOptions;
///
/// let usual = PublishOptions::default();
/// assert_eq!(usual.accept_nondeterminism, None);
/// let on_purpose = PublishOptions { accept_nondeterminism: Some("upstream fixed a rounding bug; same snapshot".into()) };
/// assert!(on_purpose.accept_nondeterminism.is_some());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishOptions {
    /// Publish even if a partition's digest differs from the one published earlier for the same
    /// input snapshot. The reason is recorded in the generation's history entry.
    pub accept_nondeterminism: Option<String>,
}

/// A generation as recorded in the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Generation {
    /// The dataset.
    pub dataset: String,
    /// The generation number (1 for the first publish).
    pub number: u64,
    /// The generation it was derived from (0 for none).
    pub parent: u64,
    /// The run whose publish created it.
    pub run: String,
    /// That run's input snapshot.
    pub snapshot: String,
    /// When it was published (ms since the Unix epoch).
    pub published_at_ms: u64,
    /// How many partitions this generation wrote (the run's declared partitions).
    pub partitions_replaced: u64,
    /// Set if the publish accepted digests that differ from an earlier publish of the same
    /// snapshot: the reason given and the partitions concerned.
    pub nondeterminism_accepted: Option<NondeterminismOverride>,
    /// How the generation came about.
    pub kind: GenerationKind,
}

/// How a generation came about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum GenerationKind {
    /// A run was published.
    Publish,
    /// An earlier generation's content was made current again.
    Rollback {
        /// The generation whose content this one restores.
        restored: u64,
        /// Who asked for it.
        actor: String,
        /// Why.
        reason: String,
    },
}

/// An accepted non-determinism, kept in the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NondeterminismOverride {
    /// The reason the caller gave.
    pub reason: String,
    /// The partitions whose digest differed.
    pub partitions: Vec<String>,
}

/// One partition of a generation: the accepted attempt that fills it and its files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionEntry {
    /// The partition key.
    pub partition: String,
    /// The generation that wrote this entry (it is carried over unchanged by later ones).
    pub since_generation: u64,
    /// The run of the accepted attempt.
    pub run: String,
    /// The accepted attempt's number.
    pub attempt: u32,
    /// The input snapshot.
    pub snapshot: String,
    /// Rows.
    pub rows: u64,
    /// Total, if reported.
    pub total: Option<i64>,
    /// Canonical digest.
    pub digest: String,
    /// The attempt's staging directory relative to the staging root.
    pub staging_rel: String,
    /// The attempt's staging directory as an absolute path, when the snapshot knows the
    /// staging root (always through [`crate::Store`]; through [`crate::ReadOnlyStore`] after
    /// [`crate::ReadOnlyStore::with_staging_root`]). A file's absolute path is
    /// `staging_dir.join(file.path)`.
    pub staging_dir: Option<std::path::PathBuf>,
    /// Files relative to the staging directory.
    pub files: Vec<FileEntry>,
    /// Whether the store checked `rows`, `total` and `digest` itself: true when the run that
    /// filled the partition declares a grain (validation read the files and computed them);
    /// false when they are the worker's own, *reported, not checked* (the run was declared with
    /// [`RunSpec::trust_reported_figures`], or its record is gone and the store cannot say).
    /// What `show` prints as "reported, not checked" and the documents as `"figures"`.
    pub figures_checked: bool,
}

/// A generation and all its partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Manifest {
    /// The generation.
    pub generation: Generation,
    /// Its partitions in key order.
    pub partitions: Vec<PartitionEntry>,
}

impl Manifest {
    /// What changed from this manifest to `to` (another generation of the same dataset),
    /// partition by partition, each list in partition key order: a partition only in `to` is
    /// added, one only in `self` removed, one in both with a different entry replaced.
    pub fn diff<'a>(&'a self, to: &'a Manifest) -> ManifestDiff<'a> {
        let before: BTreeMap<&str, &PartitionEntry> = self.partitions.iter().map(|p| (p.partition.as_str(), p)).collect();
        let after: BTreeMap<&str, &PartitionEntry> = to.partitions.iter().map(|p| (p.partition.as_str(), p)).collect();
        let mut diff = ManifestDiff::default();
        for (key, old) in &before {
            match after.get(key) {
                None => diff.removed.push(*old),
                Some(new) if old == new => diff.unchanged += 1,
                Some(new) => diff.replaced.push((*old, *new)),
            }
        }
        diff.added = after.iter().filter(|(key, _)| !before.contains_key(*key)).map(|(_, p)| *p).collect();
        diff
    }
}

/// The difference between two manifests ([`Manifest::diff`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManifestDiff<'a> {
    /// Partitions only in the later manifest.
    pub added: Vec<&'a PartitionEntry>,
    /// Partitions only in the earlier manifest.
    pub removed: Vec<&'a PartitionEntry>,
    /// Partitions in both with different entries: (earlier, later).
    pub replaced: Vec<(&'a PartitionEntry, &'a PartitionEntry)>,
    /// How many partitions have the same entry in both.
    pub unchanged: u64,
}

/// What a publish did. A refusal is a value, not an error: nothing was written and the report
/// names every task that stopped it.
///
/// ```
/// use manifestdb::{DataFormat, Grain, PublishOptions, PublishOutcome, RunSpec, Store, TaskSpec};
///
/// # fn main() -> Result<(), manifestdb::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Store::open(dir.path().join("store.redb"), dir.path().join("staging"))?;
/// let grain = Grain::new(DataFormat::Csv, &["store", "item"], "units");
/// store.declare_run(&RunSpec::new("daily", "r1", "sales@v42").with_task(TaskSpec::new("region=eu", 2)).with_grain(grain))?;
/// match store.publish("daily", "r1", &PublishOptions::default())? {
///     PublishOutcome::Published(generation) | PublishOutcome::AlreadyPublished(generation) => {
///         println!("readers now see generation {}", generation.number);
///     }
///     // No attempt of region=eu is valid yet: the pointer did not move.
///     PublishOutcome::Refused(report) => assert_eq!(report.tasks[0].partition, "region=eu"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum PublishOutcome {
    /// The run is now the dataset's current generation.
    Published(Generation),
    /// The run was already published (perhaps by a call whose acknowledgement was lost); this
    /// is the generation it created. Nothing was written.
    AlreadyPublished(Generation),
    /// A gate refused the publish. Nothing was written; the pointer did not move.
    Refused(PublishRefusal),
}

/// Why a publish was refused: every failing task and what failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PublishRefusal {
    /// The dataset.
    pub dataset: String,
    /// The run.
    pub run: String,
    /// One entry per failing task, in partition order.
    pub tasks: Vec<TaskRefusal>,
}

/// One failing task of a refused publish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskRefusal {
    /// The task's partition.
    pub partition: String,
    /// What failed.
    pub reason: RefusalReason,
}

/// What failed for one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum RefusalReason {
    /// No attempt of the task is valid. Each attempt is listed with its status (and for invalid
    /// ones, the failed checks).
    NoAcceptedAttempt {
        /// `(attempt number, status)` for every attempt of the task.
        attempts: Vec<(u32, AttemptStatus)>,
    },
    /// The accepted attempt fails a gate at publish time.
    Gate {
        /// The accepted attempt.
        attempt: u32,
        /// The failed checks.
        failures: Vec<GateFailure>,
    },
    /// The same input snapshot was published before with another digest for this partition.
    Nondeterministic {
        /// The accepted attempt.
        attempt: u32,
        /// Its digest.
        digest: String,
        /// The digest published earlier.
        published_digest: String,
        /// The run that published it.
        published_run: String,
        /// The generation it was published in.
        published_generation: u64,
    },
}

impl std::fmt::Display for PublishRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "publish of run {:?} of {:?} refused:", self.run, self.dataset)?;
        for task in &self.tasks {
            write!(f, "\n  {}: ", task.partition)?;
            match &task.reason {
                RefusalReason::NoAcceptedAttempt { attempts } if attempts.is_empty() => write!(f, "no accepted attempt (none begun)")?,
                RefusalReason::NoAcceptedAttempt { attempts } => {
                    write!(f, "no accepted attempt")?;
                    for (n, status) in attempts {
                        write!(f, "; attempt {n} {}", status.name())?;
                        if let AttemptStatus::Validated(Verdict::Invalid(failures)) = status {
                            let reasons: Vec<String> = failures.iter().map(ToString::to_string).collect();
                            write!(f, " ({})", reasons.join(", "))?;
                        }
                    }
                }
                RefusalReason::Gate { attempt, failures } => {
                    let reasons: Vec<String> = failures.iter().map(ToString::to_string).collect();
                    write!(f, "attempt {attempt} fails gates: {}", reasons.join(", "))?
                }
                RefusalReason::Nondeterministic { attempt, digest, published_digest, published_run, published_generation } => write!(
                    f,
                    "non-deterministic: attempt {attempt} digest {digest:?} differs from {published_digest:?} published by run {published_run:?} in generation {published_generation} for the same snapshot"
                )?,
            }
        }
        Ok(())
    }
}

/// The natural key of a side effect: derived from the work, never from the attempt, so a
/// repeat collides with the first record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EffectKey {
    /// The dataset.
    pub dataset: String,
    /// The run.
    pub run: String,
    /// The effect's name (e.g. `notify-forecast`).
    pub effect: String,
    /// The partition it concerns, or `None` for a run-level effect.
    pub partition: Option<String>,
}

/// Where a side effect stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EffectStatus {
    /// Recorded; its run is not published yet, so it must not be emitted.
    Recorded,
    /// Its run is published in this generation: emit it, then mark it emitted.
    Ready {
        /// The generation that published the run.
        generation: u64,
    },
    /// Emitted by the caller.
    Emitted {
        /// The generation that published the run.
        generation: u64,
        /// When the caller marked it emitted (ms since the Unix epoch).
        emitted_at_ms: u64,
    },
}

/// A recorded side effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Effect {
    /// Its natural key.
    pub key: EffectKey,
    /// The identity of the store that holds it ([`crate::Store::store_id`]): made when the
    /// store was created and never changed, so two stores' effects with the same natural key
    /// have distinct [`Effect::idempotency_key`]s.
    pub store_id: String,
    /// The payload given when it was first recorded.
    pub payload: Vec<u8>,
    /// When it was first recorded (ms since the Unix epoch).
    pub recorded_at_ms: u64,
    /// Where it stands.
    pub status: EffectStatus,
    /// The last claim on it ([`crate::Store::claim_effect`]), live or expired; kept after the
    /// effect is marked emitted, so it says who emitted it.
    pub claim: Option<EffectClaim>,
}

impl Effect {
    /// The key to hand to a receiver so that it drops a repeat (an `Idempotency-Key` header, a
    /// message id): `<store id>/<dataset>/<run>/<effect>/<partition>`, the partition empty for
    /// a run-level effect. The same for every attempt, retry and emitter of this effect in
    /// this store (reopened, restarted or shared by several hosts), and distinct from any
    /// effect of another store. A receiver keeps the keys it applied and applies a message
    /// whose key it holds no second time.
    pub fn idempotency_key(&self) -> String {
        // No name contains `/` (`rules::ids`) and the store id is hex, so the fields can be
        // told apart; the partition, last, may hold `/`.
        let key = &self.key;
        [&self.store_id, &key.dataset, &key.run, &key.effect, key.partition.as_deref().unwrap_or("")].join("/")
    }
}

/// An emitter's claim on a ready side effect: while it is live (until `expires_at_ms`), only
/// `claimant` may emit the effect and mark it emitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectClaim {
    /// Who claimed it: an identifier the emitter chose (host and process, worker id).
    pub claimant: String,
    /// When the claim was granted or last renewed (ms since the Unix epoch).
    pub claimed_at_ms: u64,
    /// When the claim runs out (ms since the Unix epoch); from then on another emitter may
    /// take it over.
    pub expires_at_ms: u64,
}

/// What [`crate::Store::claim_effect`] decided. Only [`ClaimOutcome::Claimed`] lets the caller
/// emit; the other outcomes are refusals, returned as values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ClaimOutcome {
    /// The caller holds the claim (newly, renewed, or taken over from an expired claim): emit
    /// the effect, then mark it emitted with the same claimant, before the lease runs out.
    Claimed {
        /// The effect with its new claim.
        effect: Effect,
        /// The claimant of the expired claim this one took over, if any.
        took_over_from: Option<String>,
    },
    /// Another emitter holds a live claim: do not emit.
    HeldByOther {
        /// The effect with the other emitter's claim.
        effect: Effect,
    },
    /// The effect was already marked emitted: do not emit.
    AlreadyEmitted {
        /// The emitted effect.
        effect: Effect,
    },
}

impl ClaimOutcome {
    /// The effect as stored after the call.
    pub fn effect(&self) -> &Effect {
        match self {
            ClaimOutcome::Claimed { effect, .. } | ClaimOutcome::HeldByOther { effect } | ClaimOutcome::AlreadyEmitted { effect } => effect,
        }
    }
}

/// What [`crate::Store::mark_effect_emitted`] decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum MarkOutcome {
    /// Marked emitted now.
    Marked {
        /// The emitted effect.
        effect: Effect,
    },
    /// It had already been marked emitted; nothing changed.
    AlreadyEmitted {
        /// The effect as first marked.
        effect: Effect,
    },
    /// Another emitter holds a live claim on it; nothing changed. Only the claimant may mark
    /// it while its claim is live.
    ClaimedByOther {
        /// The effect with the other emitter's claim.
        effect: Effect,
    },
}

impl MarkOutcome {
    /// The effect as stored after the call.
    pub fn effect(&self) -> &Effect {
        match self {
            MarkOutcome::Marked { effect } | MarkOutcome::AlreadyEmitted { effect } | MarkOutcome::ClaimedByOther { effect } => effect,
        }
    }
}

/// What [`crate::Store::record_effect`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordedEffect {
    /// The stored effect: the first record under its key.
    pub effect: Effect,
    /// False if an effect with this key already existed and nothing was written.
    pub newly_recorded: bool,
}

/// One run of a dataset as [`crate::Snapshot::runs`] lists it: its declaration and how far it
/// got, without its tasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunSummary {
    /// The dataset.
    pub dataset: String,
    /// The run id.
    pub run: String,
    /// Its pinned input snapshot.
    pub snapshot: String,
    /// When it was declared (ms since the Unix epoch).
    pub declared_at_ms: u64,
    /// The generation that published it, if any.
    pub published_generation: Option<u64>,
    /// How many tasks it declared.
    pub tasks: u64,
    /// How many of them have an accepted attempt (all of them once it is publishable).
    pub accepted_tasks: u64,
}

/// A dataset's run as declared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunInfo {
    /// The dataset.
    pub dataset: String,
    /// The run id.
    pub run: String,
    /// Its pinned input snapshot.
    pub snapshot: String,
    /// When it was declared (ms since the Unix epoch).
    pub declared_at_ms: u64,
    /// The generation that published it, if any.
    pub published_generation: Option<u64>,
    /// Its tasks in partition order.
    pub tasks: Vec<TaskSpec>,
    /// Its declared grain, if any.
    pub grain: Option<Grain>,
}

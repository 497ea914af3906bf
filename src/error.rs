//! The one error type of manifestdb.
//!
//! Errors are faults: something the caller must fix or that went wrong underneath. Expected
//! refusals (a publish stopped by a gate, a non-deterministic rerun) are not errors; they come
//! back as values (see [`crate::PublishOutcome`]).

use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong in manifestdb.
///
/// The enum is `#[non_exhaustive]`: match the variants you act on and keep a catch-all arm, or
/// branch on [`Error::kind`], the classification the command-line tool's exit codes and the
/// server's statuses come from.
///
/// ```
/// use manifestdb::{Error, ErrorKind, Store, TaskKey};
///
/// # fn main() -> Result<(), Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Store::open(dir.path().join("store.redb"), dir.path().join("staging"))?;
/// match store.begin_attempt(&TaskKey::new("daily", "never-declared", "region=eu")) {
///     Err(Error::UnknownRun { dataset, run }) => println!("declare {dataset}/{run} first"),
///     Err(other) if other.kind() == ErrorKind::Busy => println!("retry later: {other}"),
///     Err(other) => return Err(other),
///     Ok(ticket) => println!("attempt {}", ticket.key.attempt),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another handle (in this process or another) has the store open for writing.
    #[error("store {path} is already open for writing by another handle or process")]
    AlreadyOpen {
        /// The store file.
        path: PathBuf,
    },

    /// An operating-system I/O call failed.
    #[error("{context}: {source}")]
    Io {
        /// What manifestdb was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The storage layer (the embedded database) reported an error. What kind of failure it is
    /// is [`StorageError::kind`]; the engine's own error is not part of the API.
    #[error("{context}: {source}")]
    Storage {
        /// What manifestdb was doing.
        context: &'static str,
        /// The storage layer's error.
        #[source]
        source: StorageError,
    },

    /// A stored value or key failed its checks: bad frame, CRC mismatch, undecodable payload or
    /// a record that contradicts itself. Nothing is repaired silently.
    #[error("{}", corrupted_message(table, key, detail))]
    Corrupted {
        /// The table holding the record.
        table: &'static str,
        /// A printable form of the key.
        key: String,
        /// What check failed.
        detail: Corruption,
    },

    /// The store file was written by a newer (or unknown) format.
    #[error("store format version {found} is not supported (this build reads version {supported})")]
    UnsupportedFormat {
        /// The version found in the file.
        found: u32,
        /// The version this build understands.
        supported: u32,
    },

    /// The PostgreSQL database holds a manifestdb schema newer than this build's: a newer
    /// build migrated it. Nothing was changed; use a build at least as new.
    #[error(
        "the PostgreSQL database holds manifestdb schema version {found}, newer than this build's version {supported}: \
         a newer manifestdb migrated it; use that build or a newer one"
    )]
    UnsupportedSchema {
        /// The schema version found in the database.
        found: u32,
        /// The schema version this build writes and reads.
        supported: u32,
    },

    /// A caller-supplied identifier, path or value is not acceptable.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidInput {
        /// Which input (dataset, run id, partition key, file path, ...).
        what: &'static str,
        /// The offending value (shortened if very long).
        value: String,
        /// Why it was refused.
        reason: String,
    },

    /// The run was never declared.
    #[error("unknown run {run:?} of dataset {dataset:?}")]
    UnknownRun {
        /// Dataset name.
        dataset: String,
        /// Run id.
        run: String,
    },

    /// The run exists but declares no task for this partition.
    #[error("run {run:?} of dataset {dataset:?} declares no task for partition {partition:?}")]
    UnknownTask {
        /// Dataset name.
        dataset: String,
        /// Run id.
        run: String,
        /// Partition key.
        partition: String,
    },

    /// No such attempt was ever begun.
    #[error("unknown attempt {attempt} of task {dataset}/{run}/{partition}")]
    UnknownAttempt {
        /// Dataset name.
        dataset: String,
        /// Run id.
        run: String,
        /// Partition key.
        partition: String,
        /// Attempt number.
        attempt: u32,
    },

    /// A run was declared again with a different snapshot or different tasks.
    #[error("run {run:?} of dataset {dataset:?} is already declared differently: {detail}")]
    RunConflict {
        /// Dataset name.
        dataset: String,
        /// Run id.
        run: String,
        /// The first difference found.
        detail: String,
    },

    /// The run is already published; it takes no new attempts.
    #[error("run {run:?} of dataset {dataset:?} is already published as generation {generation}")]
    RunPublished {
        /// Dataset name.
        dataset: String,
        /// Run id.
        run: String,
        /// The generation it published.
        generation: u64,
    },

    /// An attempt reported a candidate computed from another input snapshot than its run's.
    #[error("attempt {attempt} of {partition:?} read input snapshot {got:?}, but run {run:?} is pinned to {expected:?}")]
    ForeignSnapshot {
        /// Run id.
        run: String,
        /// Partition key.
        partition: String,
        /// Attempt number.
        attempt: u32,
        /// The run's pinned snapshot.
        expected: String,
        /// The snapshot the candidate reported.
        got: String,
    },

    /// An attempt was finished twice with different content.
    #[error("attempt {attempt} of {partition:?} already finished with a different candidate: {detail}")]
    CandidateConflict {
        /// Partition key.
        partition: String,
        /// Attempt number.
        attempt: u32,
        /// The first difference found.
        detail: String,
    },

    /// The operation needs the attempt in another state (for example validating an attempt that
    /// has not finished).
    #[error("attempt {attempt} of {partition:?} is {state}; {operation} needs {needed}")]
    AttemptState {
        /// Partition key.
        partition: String,
        /// Attempt number.
        attempt: u32,
        /// Its current state.
        state: &'static str,
        /// The refused operation.
        operation: &'static str,
        /// The state it needs.
        needed: &'static str,
    },

    /// Something the store did not make stands at the staging path of a task's next attempt
    /// (a file, a symlink, or a directory holding files): the begin is refused, nothing is
    /// written, and every later begin of the task is refused the same way until it is moved
    /// away. manifestdb never skips the number: the entry may be another writer's output, which
    /// an operator should look at, and attempt numbers stay consecutive.
    #[error(
        "the staging directory of the next attempt, {}, is taken: {detail}; it was not made by this store: move it away \
         (after checking whose it is) and begin again",
        path.display()
    )]
    StagingPathTaken {
        /// The attempt's staging directory.
        path: PathBuf,
        /// What stands there.
        detail: String,
    },

    /// The side effect is unknown.
    #[error("no side effect {effect:?} recorded for run {run:?} of dataset {dataset:?}, partition {partition:?}")]
    UnknownEffect {
        /// Dataset name.
        dataset: String,
        /// Run id.
        run: String,
        /// Effect name.
        effect: String,
        /// Partition key, empty for a run-level effect.
        partition: String,
    },

    /// The side effect's run has not been published yet, so it may not be emitted.
    #[error("side effect {effect:?} of run {run:?} is not ready: its run is not published")]
    EffectNotReady {
        /// Run id.
        run: String,
        /// Effect name.
        effect: String,
    },

    /// A write failed earlier on this handle (an fsync or write error, or a failed commit). The
    /// state on disk is whatever the last durable commit left; the handle refuses writes and
    /// reads until the store is reopened, because a failed fsync cannot be retried and trusted
    /// (and redb, in the mode the store ships, refuses every later operation of that handle).
    /// Read-only handles ([`crate::ReadOnlyStore`], other processes) keep reading the last
    /// committed state.
    #[error(
        "store handle refuses reads and writes after an earlier write failure ({cause}); reopen the store (read-only handles keep \
         reading the last committed state)"
    )]
    Poisoned {
        /// The failure that poisoned the handle.
        cause: String,
    },

    /// The attempt was recorded abandoned (its lease ran out before it finished or sent a
    /// heartbeat, or [`crate::Store::abandon_attempt`] fenced it); it can no longer finish,
    /// renew its lease or be validated. Begin a new attempt instead.
    #[error(
        "attempt {attempt} of task {dataset}/{run}/{partition} was abandoned at {abandoned_at_ms} ms (its lease ran out, or it was abandoned explicitly); it cannot finish, renew its lease or be validated"
    )]
    AttemptAbandoned {
        /// Dataset name.
        dataset: String,
        /// Run id.
        run: String,
        /// Partition key.
        partition: String,
        /// Attempt number.
        attempt: u32,
        /// When it was recorded abandoned (ms since the Unix epoch).
        abandoned_at_ms: u64,
    },

    /// A cleanup age threshold that does not exceed the attempt lifetime was given without
    /// forcing it.
    #[error(
        "cleanup age threshold of {age_threshold_ms} ms must exceed the attempt lifetime of {attempt_lifetime_max_ms} ms (force it explicitly to proceed)"
    )]
    CleanupThresholdTooShort {
        /// The threshold asked for.
        age_threshold_ms: u64,
        /// The store's attempt lifetime.
        attempt_lifetime_max_ms: u64,
    },

    /// No cleanup plan with this id is stored (never made, or pruned as too old).
    #[error("no cleanup plan {plan} is stored")]
    UnknownCleanupPlan {
        /// The plan id.
        plan: u64,
    },

    /// The run was published, but the generation it published has since expired.
    #[error("run {run:?} of dataset {dataset:?} was published as generation {generation}, which has expired")]
    GenerationExpired {
        /// Dataset name.
        dataset: String,
        /// Run id.
        run: String,
        /// The expired generation.
        generation: u64,
    },

    /// The directory given as the staging root is not this store's: its marker file is
    /// missing, damaged or names another store, or (for a new store) it already holds files.
    /// Nothing was created or deleted in it. Give the store's own staging root.
    #[error("staging root {path} is not this store's: {detail}")]
    StagingRootMismatch {
        /// The directory given.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },

    /// The view root cannot serve as one (inside the staging root, containing it, on another
    /// file system for hard links, not a directory). Nothing was created under it.
    #[error("view root {root}: {reason}")]
    ViewRoot {
        /// The view root as given.
        root: PathBuf,
        /// Why it was refused.
        reason: String,
    },

    /// A dataset's view cannot be written without touching something that is not
    /// manifestdb's, or a partition or file path cannot be placed inside the view directory.
    /// Nothing was deleted.
    #[error("view of dataset {dataset:?}: {path}: {reason}; nothing was deleted")]
    ViewRefused {
        /// The dataset.
        dataset: String,
        /// The offending path (on disk, or a partition or file path).
        path: String,
        /// Why.
        reason: String,
    },

    /// The view asked for does not exist: the store publishes no views, the dataset has no
    /// such generation, or the generation has no view (published before views were enabled,
    /// or its view not built yet: `manifestdb view sync` builds the current one).
    #[error("no view of dataset {dataset:?}{}: {reason}", generation.map(|g| format!(" generation {g}")).unwrap_or_default())]
    NoView {
        /// The dataset.
        dataset: String,
        /// The generation asked for (`None`: the current one).
        generation: Option<u64>,
        /// Why there is none.
        reason: String,
    },

    /// Generation `generation` of the dataset existed but is no longer retained (it expired):
    /// its view and its Delta version are gone with it.
    #[error(
        "generation {generation} of dataset {dataset:?} has expired; {}",
        oldest_retained.map_or("no generation is retained".to_owned(), |g| format!("the oldest retained generation is {g}"))
    )]
    GenerationNotRetained {
        /// The dataset.
        dataset: String,
        /// The generation asked for.
        generation: u64,
        /// The oldest generation still retained.
        oldest_retained: Option<u64>,
    },

    /// A file of a published view is damaged: its `_manifest.json` is missing, empty or not a
    /// manifest this build reads, or a file of the view is missing or of the wrong size. The
    /// store is intact; `manifestdb view sync` ([`crate::Store::sync_view`]) rebuilds the view.
    #[error("view file {path} is damaged: {reason}; the store is intact: `manifestdb view sync` rebuilds the view")]
    ViewDamaged {
        /// The damaged file (or the view directory).
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// The publish or rollback committed generation `generation` (it is durable and current in
    /// the store), but its view could not be built or `current` could not be moved, or its
    /// Delta table could not follow: `lagging` says which, as read from disk after the
    /// failure (readers of the view see the previous complete view, or readers of the table its
    /// previous version). A retried publish returns the same generation and retries the view
    /// and the table; so do `Store::sync_view` and the next writable open.
    #[error(
        "generation {generation} of dataset {dataset:?} is committed, but {lagging}: {source} (retry with `manifestdb view \
         sync`, the next publish or the next writable open)"
    )]
    ViewLagging {
        /// The dataset.
        dataset: String,
        /// The committed generation.
        generation: u64,
        /// What lags, read from disk: `current` still naming the previous complete view, or
        /// the view current and the Delta table behind.
        lagging: String,
        /// What stopped the view.
        #[source]
        source: Box<Error>,
    },

    /// The store's writer crashed (the file was not closed cleanly), no writer holds it now, and
    /// this process may not write it, so it cannot perform the recovery a read needs first
    /// (DOMAIN 12). A user who can write the file recovers it with `manifestdb recover` (or
    /// [`crate::Store::recover`], or any writable open); readers then read the last committed
    /// generation.
    #[error(
        "store {path} was not closed cleanly (its writer crashed) and must be recovered before it can be read, which needs write \
         access ({source}): run `manifestdb recover --store {path}` as a user who can write it"
    )]
    NeedsRecovery {
        /// The store file.
        path: PathBuf,
        /// Why this process could not recover it.
        #[source]
        source: std::io::Error,
    },
}

/// What was wrong with a corrupted record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Corruption {
    /// The value is shorter than its frame header.
    Truncated {
        /// Bytes present.
        len: usize,
    },
    /// The frame names a record version this build cannot read.
    UnknownVersion {
        /// The version byte found.
        version: u8,
    },
    /// The payload's CRC32 does not match the one in the frame.
    ChecksumMismatch {
        /// CRC32 stored in the frame.
        expected: u32,
        /// CRC32 of the payload as read.
        got: u32,
    },
    /// The payload does not decode as the record type.
    Undecodable {
        /// The decoder's message.
        message: String,
    },
    /// The record decodes but contradicts itself or the records it refers to.
    Inconsistent {
        /// What contradicts what.
        message: String,
    },
    /// The storage engine (redb) panicked on what it read: one of its "cannot happen for a
    /// file redb wrote" checks failed, so the file was altered underneath it. The panic was
    /// contained; the handle refuses writes until reopened.
    EnginePanic {
        /// What manifestdb was doing.
        operation: &'static str,
        /// The panic's message.
        message: String,
    },
    /// An earlier call on this handle found the store damaged (redb panicked on it); the handle
    /// refuses every write until the store is reopened, so nothing is written over the damage.
    FoundEarlier {
        /// What that call found.
        cause: String,
    },
}

/// `Error::Corrupted`'s message: a record's table and key, or the store file as a whole.
fn corrupted_message(table: &str, key: &str, detail: &Corruption) -> String {
    if key.is_empty() {
        format!("corrupted store file ({table}): {detail}")
    } else {
        format!("corrupted record in table {table}, key {key}: {detail}")
    }
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::Truncated { len } => write!(f, "value of {} is shorter than its frame header", count(*len as u64, "byte")),
            Corruption::UnknownVersion { version } => write!(f, "unknown record version {version}"),
            Corruption::ChecksumMismatch { expected, got } => {
                write!(f, "checksum mismatch: stored crc32 {expected:#010x}, computed {got:#010x}")
            }
            Corruption::Undecodable { message } => write!(f, "payload does not decode: {message}"),
            Corruption::Inconsistent { message } => write!(f, "inconsistent record: {message}"),
            Corruption::EnginePanic { operation, message } => {
                write!(
                    f,
                    "the storage engine panicked while {operation} ({message}): the store file is damaged (verify lists its damaged records)"
                )
            }
            Corruption::FoundEarlier { cause } => {
                write!(f, "this handle refuses writes: the store was found damaged earlier ({cause})")
            }
        }
    }
}

/// Shorthand for results whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }

    pub(crate) fn invalid(what: &'static str, value: &str, reason: impl Into<String>) -> Self {
        Error::InvalidInput { what, value: shorten(value), reason: reason.into() }
    }

    /// True when the error says the stored data is damaged (as opposed to a caller mistake or a
    /// transient I/O failure): a record failing its checks, a panic inside the storage engine
    /// (contained), or a storage error of kind [`StorageErrorKind::Corrupt`] or
    /// [`StorageErrorKind::NotAStore`]. manifestdb creates every table with the same types when
    /// it creates a store, so a table that is missing or has other types, a file that is not a
    /// store (bad magic number) or is cut short, or the engine's own corruption report all mean
    /// the file was damaged; so does the engine's poisoned state after a contained panic.
    pub fn is_corruption(&self) -> bool {
        match self {
            Error::Corrupted { .. } => true,
            Error::Storage { source, .. } => matches!(source.kind(), StorageErrorKind::Corrupt | StorageErrorKind::NotAStore),
            _ => false,
        }
    }

    /// What kind of failure this is, for a caller that branches on it (the command-line tool's
    /// exit code, the server's HTTP status). Damage ([`Error::is_corruption`]) is
    /// [`ErrorKind::Corrupt`] whatever the variant.
    pub fn kind(&self) -> ErrorKind {
        if self.is_corruption() {
            return ErrorKind::Corrupt;
        }
        match self {
            Error::AlreadyOpen { .. } => ErrorKind::Busy,
            Error::UnsupportedFormat { .. } | Error::UnsupportedSchema { .. } | Error::Corrupted { .. } | Error::ViewDamaged { .. } => {
                ErrorKind::Corrupt
            }
            // A --staging that is not the store's own: the caller named the wrong directory.
            Error::InvalidInput { .. }
            | Error::CleanupThresholdTooShort { .. }
            | Error::StagingRootMismatch { .. }
            | Error::ViewRoot { .. } => ErrorKind::Usage,
            Error::UnknownRun { .. }
            | Error::UnknownTask { .. }
            | Error::UnknownAttempt { .. }
            | Error::UnknownEffect { .. }
            | Error::UnknownCleanupPlan { .. }
            | Error::NoView { .. }
            | Error::GenerationNotRetained { .. } => ErrorKind::NotFound,
            Error::RunConflict { .. }
            | Error::RunPublished { .. }
            | Error::ForeignSnapshot { .. }
            | Error::CandidateConflict { .. }
            | Error::AttemptState { .. }
            | Error::StagingPathTaken { .. }
            | Error::EffectNotReady { .. }
            | Error::AttemptAbandoned { .. }
            | Error::GenerationExpired { .. }
            | Error::ViewRefused { .. } => ErrorKind::Conflict,
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            Error::Storage { source, .. } => match source.kind() {
                // Another writer holds the store, or a concurrent transaction won: retry later.
                StorageErrorKind::Busy | StorageErrorKind::Conflict => ErrorKind::Busy,
                StorageErrorKind::Corrupt | StorageErrorKind::NotAStore => ErrorKind::Corrupt,
                StorageErrorKind::Io | StorageErrorKind::Other => ErrorKind::Fault,
                StorageErrorKind::OutcomeUnknown => ErrorKind::OutcomeUnknown,
            },
            // A view that lags because its commit's outcome is unknown (a table on object storage
            // whose commit's answer never came) says so: the next open or `view sync` settles it.
            Error::ViewLagging { source, .. } if source.kind() == ErrorKind::OutcomeUnknown => ErrorKind::OutcomeUnknown,
            Error::Io { .. } | Error::Poisoned { .. } | Error::ViewLagging { .. } | Error::NeedsRecovery { .. } => ErrorKind::Fault,
        }
    }
}

/// The kind of a failure ([`Error::kind`]): what a caller that is not Rust branches on. The
/// command-line tool maps each to an exit code and the server to an HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A fault: an I/O or storage failure, anything unexpected.
    Fault,
    /// The call is wrong: an invalid name, path or value, a cleanup threshold inside the
    /// attempt lease, a staging or view root that cannot serve.
    Usage,
    /// Something named does not exist: run, task, attempt, effect, cleanup plan, file.
    NotFound,
    /// The store's state forbids the operation: a run declared differently or already
    /// published, an attempt finished differently, not finished or abandoned, a foreign
    /// snapshot, an effect whose run is not published, an expired generation.
    Conflict,
    /// Another handle holds the store for writing, or a concurrent transaction won; retrying
    /// later may succeed.
    Busy,
    /// The store is damaged or of an unsupported format.
    Corrupt,
    /// A request to the server lacks the right bearer token. Only the server answers with it
    /// ([`Error::kind`] never gives it); the command-line tool exits 10 for it.
    Unauthorized,
    /// The call may or may not have taken effect: a write whose COMMIT was sent but whose
    /// outcome could not be learnt (a shared database unreachable for the whole settling
    /// time). Calling the same operation again settles it (every write is idempotent under its
    /// natural key; a publish answers with its generation); a scheduler retries exactly these.
    /// Any other failure of a write left nothing committed.
    OutcomeUnknown,
}

impl ErrorKind {
    const ALL: [ErrorKind; 8] = [
        ErrorKind::Fault,
        ErrorKind::Usage,
        ErrorKind::NotFound,
        ErrorKind::Conflict,
        ErrorKind::Busy,
        ErrorKind::Corrupt,
        ErrorKind::Unauthorized,
        ErrorKind::OutcomeUnknown,
    ];

    /// The command-line tool's exit code for this kind (the server's error documents carry it
    /// too).
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorKind::Fault => 1,
            ErrorKind::Usage => 2,
            ErrorKind::NotFound => 4,
            ErrorKind::Conflict => 5,
            ErrorKind::Busy => 6,
            ErrorKind::Corrupt => 7,
            ErrorKind::OutcomeUnknown => 8,
            ErrorKind::Unauthorized => 10,
        }
    }

    /// The stable name used in JSON error documents (`"kind"`).
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Fault => "fault",
            ErrorKind::Usage => "usage",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Busy => "busy",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::OutcomeUnknown => "outcome_unknown",
        }
    }

    /// The kind named `name` in a JSON error document, if it is one of these.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// An error of the storage layer, opaque: its [`kind`](StorageError::kind) says what kind of
/// failure it is, its message is the engine's, and [`source`](std::error::Error::source) is the
/// operating system's error when there is one. No type of the engine is part of the API.
#[derive(Debug)]
pub struct StorageError {
    kind: StorageErrorKind,
    engine: Box<dyn std::error::Error + Send + Sync + 'static>,
    io: Option<std::io::Error>,
}

/// What kind of failure a [`StorageError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StorageErrorKind {
    /// An I/O call of the storage layer failed (including a later call of a handle after one
    /// failed), or the disk is full.
    Io,
    /// The stored data is damaged: the engine reported corruption, a table manifestdb creates
    /// is missing or has other types, or the engine's state was poisoned by a contained panic.
    Corrupt,
    /// The file is not a store this build can read: not a database of the engine at all, cut
    /// short, or of an older engine format.
    NotAStore,
    /// Another handle holds the store, so the operation could not start.
    Busy,
    /// A concurrent transaction conflicted with this one (a storage layer with concurrent
    /// writers); nothing of this one was committed.
    Conflict,
    /// Anything else the engine reported (a misuse or a limit of the engine).
    Other,
    /// A commit was sent and its outcome could not be learnt: the transaction may or may not
    /// have committed ([`ErrorKind::OutcomeUnknown`]). The same call again settles it.
    OutcomeUnknown,
}

impl StorageError {
    /// A storage error of `kind` whose message is `engine`'s; `io` is the operating system's
    /// error behind it, if any, given as its source.
    pub(crate) fn new(
        kind: StorageErrorKind,
        engine: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
        io: Option<std::io::Error>,
    ) -> StorageError {
        StorageError { kind, engine: engine.into(), io }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> StorageErrorKind {
        self.kind
    }
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.engine, f)
    }
}

impl std::error::Error for StorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io.as_ref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// `n` and the noun, plural unless `n` is 1 (`1 task`, `2 tasks`), for messages.
pub(crate) fn count(n: u64, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// An optional figure in a message: its value, or "none".
pub(crate) fn figure<T: fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "none".to_owned(), |v| v.to_string())
}

/// Shortens a caller value for an error message so that a megabyte of garbage does not end up
/// in a log line.
pub(crate) fn shorten(value: &str) -> String {
    const SHOWN_CHARS_MAX: usize = 120;
    if value.chars().count() <= SHOWN_CHARS_MAX {
        value.to_owned()
    } else {
        let head: String = value.chars().take(SHOWN_CHARS_MAX).collect();
        format!("{head}... ({} bytes)", value.len())
    }
}

//! Domain types of the store's lifecycle operations: rollback, retention of generations,
//! attempt leases and cleanup of staging files.
//!
//! The operations themselves are methods of [`crate::Store`] (see `store/retention.rs`); the
//! cleanup decision is a pure rule (`rules/cleanup.rs`).
//!
//! Defaults, in one place:
//!
//! | setting | default | where |
//! |---|---|---|
//! | attempt lease (maximum attempt lifetime without a heartbeat) | 1 hour | [`crate::StoreOptions::attempt_lifetime_max`] |
//! | generations kept per dataset, newest first | 10 | [`RetentionPolicy::keep_last`] |
//! | rollback window (every generation younger is kept) | 7 days | [`RetentionPolicy::rollback_window`] |
//! | age a staging file must reach before cleanup may delete it | 3 days | [`CleanupOptions::age_threshold`] |
//! | files deleted per batch | 1000 | [`ApplyOptions::batch_size`] |
//! | mode of every destructive operation | dry run | [`RunMode::DryRun`] |

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{AttemptKey, Generation};

/// Whether a destructive operation only reports what it would do (the default) or does it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum RunMode {
    /// Compute and report; change nothing.
    #[default]
    DryRun,
    /// Do it.
    Execute,
}

/// Which generations of a dataset are kept. A generation is retained if it is one of the
/// `keep_last` newest, or younger than `rollback_window`, or newer than a retained one (so the
/// retained generations are always the newest ones, a contiguous range ending at the current
/// generation). The current generation is always retained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// How many of the newest generations to keep (at least 1: the current one). Default 10.
    pub keep_last: u64,
    /// Every generation published less than this long ago is kept. Default 7 days.
    pub rollback_window: Duration,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy { keep_last: 10, rollback_window: Duration::from_secs(7 * 24 * 3600) }
    }
}

/// What [`crate::Store::expire_generations`] did (or, in a dry run, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpireReport {
    /// The dataset.
    pub dataset: String,
    /// Whether anything was changed.
    pub mode: RunMode,
    /// The dataset's current generation (0 if nothing was ever published).
    pub current: u64,
    /// The oldest generation kept; every generation from it to `current` is retained.
    pub oldest_retained: u64,
    /// The generations expired (their history records removed), oldest first.
    pub expired: Vec<u64>,
    /// Partition version entries removed: those no retained generation can see.
    pub versions_removed: u64,
    /// Views of expired generations removed (empty in a dry run or without views): renamed
    /// away before the expiry committed, so no reader reaches them; their trees are then
    /// deleted on a thread of their own, which closing the store waits for.
    pub views_removed: Vec<u64>,
}

/// What [`crate::Store::rollback`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum RollbackOutcome {
    /// The restored content is current again, as this new generation.
    RolledBack(Generation),
    /// Nothing was written; the pointer did not move.
    Refused(RollbackRefusal),
}

/// Why a rollback was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum RollbackRefusal {
    /// The generation existed but has expired: its history and possibly its files are gone.
    Expired {
        /// The generation asked for.
        requested: u64,
        /// The oldest generation still retained.
        oldest_retained: u64,
    },
    /// The dataset never had such a generation (or has no generation at all).
    Unknown {
        /// The generation asked for.
        requested: u64,
        /// The dataset's current generation, if any.
        current: Option<u64>,
    },
    /// The generation asked for is already the current one.
    AlreadyCurrent {
        /// The current generation.
        generation: u64,
    },
}

impl std::fmt::Display for RollbackRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RollbackRefusal::Expired { requested, oldest_retained } => {
                write!(f, "generation {requested} has expired (the oldest retained generation is {oldest_retained})")
            }
            RollbackRefusal::Unknown { requested, current: Some(current) } => {
                write!(f, "generation {requested} never existed (the current generation is {current})")
            }
            RollbackRefusal::Unknown { requested, current: None } => {
                write!(f, "generation {requested} never existed (the dataset has no generation)")
            }
            RollbackRefusal::AlreadyCurrent { generation } => write!(f, "generation {generation} is already current"),
        }
    }
}

/// An attempt's lease after a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AttemptLease {
    /// The last sign of life (ms since the Unix epoch).
    pub heartbeat_at_ms: u64,
    /// When the lease runs out unless renewed (ms since the Unix epoch).
    pub expires_at_ms: u64,
}

/// Settings of a cleanup plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupOptions {
    /// A file must be at least this old (by its modification time) to be a deletion candidate.
    /// Must exceed the store's attempt lifetime ([`crate::StoreOptions::attempt_lifetime_max`]);
    /// a smaller one is refused unless `force_short_threshold` is set. Default 3 days.
    pub age_threshold: Duration,
    /// Accept a threshold not above the attempt lifetime. Dangerous: a slow writer's files may
    /// then qualify by age alone (the other checks still apply). Default false.
    pub force_short_threshold: bool,
}

impl Default for CleanupOptions {
    fn default() -> Self {
        CleanupOptions { age_threshold: Duration::from_secs(3 * 24 * 3600), force_short_threshold: false }
    }
}

/// Why a path may be deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CleanupReason {
    /// It belongs to an attempt whose lease ran out unfinished (recorded abandoned: it can no
    /// longer finish).
    Abandoned,
    /// It belongs to an attempt validated invalid (a verdict is final).
    Invalid,
    /// It belongs to a finished attempt of a published run that no retained generation holds
    /// (a duplicate of the accepted attempt, or the content of expired generations).
    NotRetained,
    /// The store knows nothing of it (no attempt owns its directory). Deleted only on request.
    Unknown,
}

/// Why a path is kept (never deleted by this plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KeepReason {
    /// A retained generation holds its attempt.
    Referenced,
    /// Its attempt has not finished and is not recorded abandoned: it may still be running.
    MayBeRunning,
    /// Its attempt finished but is not validated, and its run is not published.
    AwaitingValidation,
    /// Its attempt is valid and its run is not published yet.
    ValidUnpublished,
    /// Younger than the age threshold.
    TooYoung,
    /// Its modification time lies in the future (clock skew or tampering).
    FutureModificationTime,
}

/// One path of a cleanup plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedPath {
    /// Path relative to the staging root, `/`-separated.
    pub path: String,
    /// Size in bytes when planned.
    pub size_bytes: u64,
    /// Modification time when planned (ms since the Unix epoch).
    pub modified_at_ms: u64,
    /// The file system's device number when planned.
    pub device: u64,
    /// The inode number when planned: a file replaced by another one (a new inode renamed in)
    /// has another, whatever its size and times.
    pub inode: u64,
    /// Modification time when planned, in nanoseconds since the Unix epoch.
    pub modified_at_ns: u64,
    /// Status-change time (ctime) when planned, in nanoseconds since the Unix epoch: any write,
    /// rename or change of attributes moves it, and it cannot be set back.
    pub changed_at_ns: u64,
    /// Why it may be deleted.
    pub reason: CleanupReason,
    /// The attempt owning it, if the store knows one.
    pub attempt: Option<AttemptKey>,
}

/// A persisted cleanup plan: nothing is deleted until it is applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CleanupPlan {
    /// The plan's id, for [`crate::Store::apply_cleanup`].
    pub id: u64,
    /// When it was made (ms since the Unix epoch).
    pub created_at_ms: u64,
    /// The age threshold it used, in milliseconds.
    pub age_threshold_ms: u64,
    /// The attempt lifetime in force when it was made, in milliseconds.
    pub attempt_lifetime_max_ms: u64,
    /// Deletion candidates owned by attempts the store knows, in path order.
    pub candidates: Vec<PlannedPath>,
    /// Files under the root that no attempt owns and that pass the age checks, in path order.
    /// Deleted only with [`ApplyOptions::delete_unknown`].
    pub unknown: Vec<PlannedPath>,
    /// How many files were kept, per reason.
    pub kept: Vec<(KeepReason, u64)>,
    /// Entries the walk could not consider (unreadable, not UTF-8, special files, too deep),
    /// relative to the root, lossily rendered. Never deleted.
    pub unconsidered: Vec<String>,
}

/// Settings of [`crate::Store::apply_cleanup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApplyOptions {
    /// Dry run (the default) or execute.
    pub mode: RunMode,
    /// Also delete the plan's unknown files. Default false.
    pub delete_unknown: bool,
    /// Files re-checked and deleted per batch (each batch re-reads the store). Default 1000.
    pub batch_size: usize,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions { mode: RunMode::DryRun, delete_unknown: false, batch_size: 1000 }
    }
}

/// Why a planned path was not deleted at apply time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SkipReason {
    /// The path no longer exists.
    Missing,
    /// Its inode, size, modification time, status-change time or type changed since the plan,
    /// or a directory on its way became something else (a symlink, a file).
    Changed,
    /// The live state now protects it.
    NowProtected(KeepReason),
    /// Its owner changed (an unknown file is now claimed by an attempt, or the reverse).
    OwnerChanged,
    /// An unknown file, and unknown files were not to be deleted.
    UnknownNotRequested,
    /// The deletion failed; the operating system's message.
    DeleteFailed(String),
}

/// A planned path that was not deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedPath {
    /// Path relative to the staging root.
    pub path: String,
    /// Why.
    pub reason: SkipReason,
}

/// What [`crate::Store::apply_cleanup`] did (or, in a dry run, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApplyReport {
    /// The plan applied.
    pub plan: u64,
    /// Dry run or executed.
    pub mode: RunMode,
    /// Paths deleted (in a dry run: that would be deleted), relative to the staging root.
    pub deleted: Vec<String>,
    /// Their total size in bytes.
    pub bytes_deleted: u64,
    /// Planned paths left in place, with the reason.
    pub skipped: Vec<SkippedPath>,
    /// Empty directories removed under the staging root.
    pub directories_removed: u64,
    /// Attempt records removed from the store: attempts that can never be used again, whose
    /// files are gone, and that no generation or accepted index refers to.
    pub attempt_records_removed: Vec<AttemptKey>,
}

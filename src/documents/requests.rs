//! The request bodies and queries of the served API (`/v1/...`, `docs/openapi.json`), read in
//! one place for the two front ends that answer them: the server's routes (feature `server`)
//! and the Python package's in-process dispatch, which answers the same routes without HTTP.
//! Each type is one route's input; an unknown field is refused (`deny_unknown_fields`), a
//! field with a default may be left out. The helpers turn a body into the library's options
//! with the library's defaults, so both front ends fill in the same values.
//!
//! The write routes that are batch operations (`attempts/begin`, `effects/...`) read the
//! fields of [`crate::BatchOp`] instead, and `runs/declare` reads [`super::RunInput`].

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::batch::{BATCH_OPS_MAX, BatchOp};
use crate::lifecycle::{ApplyOptions, CleanupOptions, RetentionPolicy, RunMode};
use crate::model::{AttemptKey, FileCheck, PublishOptions, TaskKey};

/// `execute: true` as a run mode; a dry run otherwise.
pub fn run_mode(execute: bool) -> RunMode {
    if execute { RunMode::Execute } else { RunMode::DryRun }
}

/// One attempt: the body of `POST attempts/heartbeat` and `POST attempts/abandon`, and the
/// query of `GET attempts/show`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptRef {
    /// The dataset.
    pub dataset: String,
    /// The run.
    pub run: String,
    /// The partition (the task).
    pub partition: String,
    /// The attempt number.
    pub attempt: u32,
}

impl AttemptRef {
    /// The attempt's key.
    pub fn key(&self) -> AttemptKey {
        TaskKey::new(&self.dataset, &self.run, &self.partition).attempt(self.attempt)
    }
}

/// `POST attempts/invalidate`: an operator invalidates a finished attempt.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvalidateBody {
    /// The dataset.
    pub dataset: String,
    /// The run.
    pub run: String,
    /// The partition.
    pub partition: String,
    /// The attempt number.
    pub attempt: u32,
    /// Who invalidates it.
    pub actor: String,
    /// Why.
    pub reason: String,
}

impl InvalidateBody {
    /// The attempt's key.
    pub fn key(&self) -> AttemptKey {
        TaskKey::new(&self.dataset, &self.run, &self.partition).attempt(self.attempt)
    }
}

/// `POST attempts/finish-and-validate`: an attempt's candidate recorded and validated at once
/// ([`crate::Store::finish_and_validate`]: one durable commit stores both).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinishAndValidateBody {
    /// The dataset.
    pub dataset: String,
    /// The run.
    pub run: String,
    /// The partition (the task).
    pub partition: String,
    /// The attempt number.
    pub attempt: u32,
    /// What the attempt produced.
    pub candidate: crate::model::Candidate,
    /// Read every file for its CRC32 (default: sizes only).
    #[serde(default)]
    pub checksums: bool,
}

impl FinishAndValidateBody {
    /// The attempt's key.
    pub fn key(&self) -> AttemptKey {
        BatchOp::attempt(&self.dataset, &self.run, &self.partition, self.attempt)
    }

    /// The file check asked for.
    pub fn check(&self) -> FileCheck {
        BatchOp::file_check(self.checksums)
    }
}

/// `POST attempts/validate-pending`: every finished attempt of a run awaiting validation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingBody {
    /// The dataset.
    pub dataset: String,
    /// The run.
    pub run: String,
    /// Read every file for its CRC32 (default: sizes only).
    #[serde(default)]
    pub checksums: bool,
}

impl PendingBody {
    /// The file check asked for.
    pub fn check(&self) -> FileCheck {
        BatchOp::file_check(self.checksums)
    }
}

/// `POST publish`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishBody {
    /// The dataset.
    pub dataset: String,
    /// The run.
    pub run: String,
    /// The reason for publishing a digest that differs from one published earlier for the
    /// same input snapshot.
    #[serde(default)]
    pub accept_nondeterminism: Option<String>,
}

impl PublishBody {
    /// The publish options.
    pub fn options(&self) -> PublishOptions {
        PublishOptions { accept_nondeterminism: self.accept_nondeterminism.clone() }
    }
}

/// `POST rollback`: an operator makes an earlier generation current again.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackBody {
    /// The dataset.
    pub dataset: String,
    /// The generation to restore.
    pub to: u64,
    /// Who rolls back.
    pub actor: String,
    /// Why.
    pub reason: String,
}

/// `POST gc/abandon`: a dry run unless `execute`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecuteBody {
    /// Do it (default: a dry run).
    #[serde(default)]
    pub execute: bool,
}

/// `POST gc/expire`: a retention policy for one dataset.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpireBody {
    /// The dataset.
    pub dataset: String,
    /// Generations kept at least (default: [`RetentionPolicy::default`]'s).
    #[serde(default)]
    pub keep_last: Option<u64>,
    /// The rollback window in milliseconds (default: [`RetentionPolicy::default`]'s).
    #[serde(default)]
    pub rollback_window_ms: Option<u64>,
    /// Do it (default: a dry run).
    #[serde(default)]
    pub execute: bool,
}

impl ExpireBody {
    /// The policy, defaults filled in.
    pub fn policy(&self) -> RetentionPolicy {
        let defaults = RetentionPolicy::default();
        RetentionPolicy {
            keep_last: self.keep_last.unwrap_or(defaults.keep_last),
            rollback_window: self.rollback_window_ms.map_or(defaults.rollback_window, Duration::from_millis),
        }
    }
}

/// `POST gc/plan`: plan a cleanup of the staging root.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanBody {
    /// The age a file must reach, in milliseconds (default: [`CleanupOptions::default`]'s).
    #[serde(default)]
    pub age_threshold_ms: Option<u64>,
    /// Accept a threshold not above the attempt lifetime.
    #[serde(default)]
    pub force_short_threshold: bool,
}

impl PlanBody {
    /// The cleanup options, defaults filled in.
    pub fn options(&self) -> CleanupOptions {
        let defaults = CleanupOptions::default();
        CleanupOptions {
            age_threshold: self.age_threshold_ms.map_or(defaults.age_threshold, Duration::from_millis),
            force_short_threshold: self.force_short_threshold,
        }
    }
}

/// `GET gc/plan`: a stored plan.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanQuery {
    /// The plan's number.
    pub plan: u64,
}

/// `POST gc/apply`: apply a stored plan.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyBody {
    /// The plan's number.
    pub plan: u64,
    /// Delete (default: a dry run).
    #[serde(default)]
    pub execute: bool,
    /// Delete the plan's unknown files too.
    #[serde(default)]
    pub delete_unknown: bool,
    /// Paths per batch (default: [`ApplyOptions::default`]'s).
    #[serde(default)]
    pub batch_size: Option<usize>,
}

impl ApplyBody {
    /// The apply options, defaults filled in.
    pub fn options(&self) -> ApplyOptions {
        let defaults = ApplyOptions::default();
        ApplyOptions {
            mode: run_mode(self.execute),
            delete_unknown: self.delete_unknown,
            batch_size: self.batch_size.unwrap_or(defaults.batch_size),
        }
    }
}

/// An optional dataset: the query of `GET history` and the body of `POST views/sync`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetOpt {
    /// The dataset, or all of them.
    #[serde(default)]
    pub dataset: Option<String>,
}

/// One dataset: the query of `GET current` and `GET runs`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetQuery {
    /// The dataset.
    pub dataset: String,
}

/// `GET views`: a dataset's view, the current generation's or retained generation N's.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ViewQuery {
    /// The dataset.
    pub dataset: String,
    /// The generation (default: the current one).
    #[serde(default)]
    pub generation: Option<u64>,
}

/// One run: the query of `GET runs/show`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunQuery {
    /// The dataset.
    pub dataset: String,
    /// The run.
    pub run: String,
}

/// `GET manifest`: a generation's manifest.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestQuery {
    /// The dataset.
    pub dataset: String,
    /// The generation (default: the current one).
    #[serde(default)]
    pub generation: Option<u64>,
}

/// `GET diff`: what changed between two generations.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffQuery {
    /// The dataset.
    pub dataset: String,
    /// The older generation.
    pub from: u64,
    /// The newer generation.
    pub to: u64,
}

/// `GET attempts`: a run's attempts, of one partition or all.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptsQuery {
    /// The dataset.
    pub dataset: String,
    /// The run.
    pub run: String,
    /// One partition, or all.
    #[serde(default)]
    pub partition: Option<String>,
}

/// `GET effects`: a dataset's side effects.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EffectsQuery {
    /// The dataset.
    pub dataset: String,
    /// One run, or all.
    #[serde(default)]
    pub run: Option<String>,
    /// Only the effects ready to emit.
    #[serde(default)]
    pub ready: bool,
}

/// `POST verify`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyBody {
    /// Check the files of retained generations: `"size"` or `"checksums"`; none by default.
    #[serde(default)]
    pub files: Option<String>,
    /// Run redb's integrity check too. It needs the store handle alone: the server lets the
    /// requests in flight finish and holds the next ones meanwhile; the Python package's
    /// in-process handle refuses it (`manifestdb verify --integrity` on a closed store runs it).
    #[serde(default)]
    pub integrity: bool,
}

impl VerifyBody {
    /// The file check asked for.
    ///
    /// # Errors
    /// The message for a `files` that is neither `"size"` nor `"checksums"`.
    pub fn file_check(&self) -> Result<Option<FileCheck>, String> {
        match self.files.as_deref() {
            None => Ok(None),
            Some("size") => Ok(Some(FileCheck::Size)),
            Some("checksums") => Ok(Some(FileCheck::SizeAndChecksum)),
            Some(other) => Err(format!("files: {other:?} is not \"size\" or \"checksums\"")),
        }
    }
}

/// `POST batch`: operations as JSON values, each parsed on its own so one malformed operation
/// fails alone.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchBody {
    /// The operations, each a batch line's JSON object (`{"op": "begin", ...}`, a
    /// [`crate::BatchOp`]).
    pub ops: Vec<Value>,
}

impl BatchBody {
    /// The operations, each parsed on its own: one that is not an operation is its message
    /// (`operation 2 is not an operation: ...`) and fails alone.
    ///
    /// # Errors
    /// The message for more than [`BATCH_OPS_MAX`] operations.
    pub fn parse_ops(self) -> Result<Vec<Result<BatchOp, String>>, String> {
        if self.ops.len() > BATCH_OPS_MAX {
            return Err(format!("a batch holds at most {BATCH_OPS_MAX} operations, not {}", self.ops.len()));
        }
        Ok(self
            .ops
            .into_iter()
            .enumerate()
            .map(|(i, op)| serde_json::from_value::<BatchOp>(op).map_err(|e| format!("operation {} is not an operation: {e}", i + 1)))
            .collect())
    }
}

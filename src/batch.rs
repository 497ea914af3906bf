//! Many operations in one commit: the types of [`crate::Store::run_batch`].
//!
//! A worker fleet driven through the command line pays one durable commit (several fsyncs)
//! per call. A batch runs many begins, finishes, validations and effect operations in one
//! write transaction and one commit, and still gives each operation its own outcome: an
//! operation refused on its merits (an unknown task, a conflicting candidate, a claim held by
//! another emitter) fails alone and writes nothing, while the others commit.
//!
//! [`BatchOp`] and [`BatchOutcome`] derive serde, so that a front end (the CLI's
//! `manifestdb batch`, an HTTP route) can read operations as JSON and write outcomes. The
//! JSON shape of an operation is flat, tagged by `op`:
//!
//! ```json
//! {"op": "begin", "dataset": "daily", "run": "r1", "partition": "p=1"}
//! {"op": "finish", "dataset": "daily", "run": "r1", "partition": "p=1", "attempt": 1,
//!  "candidate": {"snapshot": "s1", "rows": 2, "total": 700, "digest": "d", "files": []}}
//! {"op": "validate", "dataset": "daily", "run": "r1", "partition": "p=1", "attempt": 1, "checksums": true}
//! {"op": "record_effect", "dataset": "daily", "run": "r1", "effect": "notify", "partition": null, "payload": "text"}
//! {"op": "record_effect", "dataset": "daily", "run": "r1", "effect": "blob", "payload_hex": "00ff"}
//! {"op": "claim_effect", "dataset": "daily", "run": "r1", "effect": "notify", "claimant": "w1", "lease_ms": 60000}
//! {"op": "mark_emitted", "dataset": "daily", "run": "r1", "effect": "notify", "claimant": "w1"}
//! ```

use serde::{Deserialize, Serialize};

use crate::model::{
    AttemptKey, AttemptTicket, Candidate, ClaimOutcome, EffectKey, FileCheck, FinishOutcome, MarkOutcome, RecordedEffect, TaskKey, Verdict,
};

/// The most operations one batch may hold.
pub const BATCH_OPS_MAX: usize = 10_000;

/// One operation of a batch ([`crate::Store::run_batch`]); each runs as its single-call
/// counterpart does, inside the batch's one transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum BatchOp {
    /// [`crate::Store::begin_attempt`].
    Begin {
        /// Dataset.
        dataset: String,
        /// Run.
        run: String,
        /// Partition (the task).
        partition: String,
    },
    /// [`crate::Store::finish_attempt`].
    Finish {
        /// Dataset.
        dataset: String,
        /// Run.
        run: String,
        /// Partition (the task).
        partition: String,
        /// Attempt number.
        attempt: u32,
        /// The candidate.
        candidate: Candidate,
    },
    /// [`crate::Store::validate_attempt`]. Its files are checked before the batch's
    /// transaction, against the store as it was when the batch began: an attempt finished in
    /// the same batch is not finished yet for it, so a batch holding a validation after the
    /// finish of the same attempt is refused whole, up front ([`crate::Error::InvalidInput`],
    /// nothing runs): validate in a later batch.
    Validate {
        /// Dataset.
        dataset: String,
        /// Run.
        run: String,
        /// Partition (the task).
        partition: String,
        /// Attempt number.
        attempt: u32,
        /// Also compare every file's CRC32 (reads every byte); sizes only otherwise.
        #[serde(default)]
        checksums: bool,
    },
    /// [`crate::Store::record_effect`], with a payload given as text or as hexadecimal bytes.
    RecordEffect {
        /// Dataset.
        dataset: String,
        /// Run.
        run: String,
        /// Effect name.
        effect: String,
        /// Partition, or none for a run-level effect.
        #[serde(default)]
        partition: Option<String>,
        /// The payload as UTF-8 text (empty by default).
        #[serde(default)]
        payload: String,
        /// The payload as hexadecimal digits, for bytes that are not UTF-8 text (the effect
        /// documents' `payload_hex` gives them back the same way). Given with a non-empty
        /// `payload`, the operation is refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        payload_hex: Option<String>,
    },
    /// [`crate::Store::claim_effect`].
    ClaimEffect {
        /// Dataset.
        dataset: String,
        /// Run.
        run: String,
        /// Effect name.
        effect: String,
        /// Partition, or none for a run-level effect.
        #[serde(default)]
        partition: Option<String>,
        /// Who claims it.
        claimant: String,
        /// The lease, in milliseconds.
        lease_ms: u64,
    },
    /// [`crate::Store::mark_effect_emitted`].
    MarkEmitted {
        /// Dataset.
        dataset: String,
        /// Run.
        run: String,
        /// Effect name.
        effect: String,
        /// Partition, or none for a run-level effect.
        #[serde(default)]
        partition: Option<String>,
        /// The claimant, if the emitter claimed it.
        #[serde(default)]
        claimant: Option<String>,
    },
}

impl BatchOp {
    /// The task a begin names.
    pub(crate) fn task(dataset: &str, run: &str, partition: &str) -> TaskKey {
        TaskKey::new(dataset, run, partition)
    }

    /// The attempt a finish or validation names.
    pub(crate) fn attempt(dataset: &str, run: &str, partition: &str, attempt: u32) -> AttemptKey {
        TaskKey::new(dataset, run, partition).attempt(attempt)
    }

    /// The effect an effect operation names.
    pub(crate) fn effect(dataset: &str, run: &str, effect: &str, partition: &Option<String>) -> EffectKey {
        EffectKey { dataset: dataset.to_owned(), run: run.to_owned(), effect: effect.to_owned(), partition: partition.clone() }
    }

    /// The operation's name, as its JSON `op` tag.
    pub fn name(&self) -> &'static str {
        match self {
            BatchOp::Begin { .. } => "begin",
            BatchOp::Finish { .. } => "finish",
            BatchOp::Validate { .. } => "validate",
            BatchOp::RecordEffect { .. } => "record_effect",
            BatchOp::ClaimEffect { .. } => "claim_effect",
            BatchOp::MarkEmitted { .. } => "mark_emitted",
        }
    }

    /// The bytes of a `record_effect`'s payload: `payload_hex` decoded, else `payload`'s text.
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] for `payload_hex` that is not an even number of hexadecimal
    /// digits, or given beside a non-empty `payload`.
    pub(crate) fn payload_bytes(payload: &str, payload_hex: Option<&str>) -> crate::Result<Vec<u8>> {
        match payload_hex {
            None => Ok(payload.as_bytes().to_vec()),
            Some(_) if !payload.is_empty() => {
                Err(crate::Error::invalid("effect payload", payload, "give the payload as `payload` (text) or `payload_hex`, not both"))
            }
            Some(digits) => hex::decode(digits).map_err(|e| {
                let shown: String = digits.chars().take(32).collect();
                crate::Error::invalid("payload_hex", &shown, format!("is not hexadecimal bytes: {e}"))
            }),
        }
    }

    /// The file check a validation asks for.
    pub(crate) fn file_check(checksums: bool) -> FileCheck {
        if checksums { FileCheck::SizeAndChecksum } else { FileCheck::Size }
    }
}

/// What one operation of a batch did: the value its single-call counterpart returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", content = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum BatchOutcome {
    /// A begun attempt.
    Begin(AttemptTicket),
    /// A finish.
    Finish(FinishOutcome),
    /// A stored verdict.
    Validate(Verdict),
    /// A recorded effect.
    RecordEffect(RecordedEffect),
    /// A claim's outcome.
    ClaimEffect(ClaimOutcome),
    /// A mark's outcome.
    MarkEmitted(MarkOutcome),
}

/// The first validation in `ops` that names an attempt an earlier operation of the same batch
/// finishes, as `(finish index, validate index)`: [`crate::Store::run_batch`] refuses such a
/// batch whole, since a validation is prepared against the store as it was before the batch,
/// where that attempt has not finished yet (it would fail as not finished, or as unknown,
/// although its finish succeeds). A front end may call it first to name its own input lines.
pub fn validation_after_its_finish<'a>(ops: impl IntoIterator<Item = &'a BatchOp>) -> Option<(usize, usize)> {
    let mut finished = std::collections::HashMap::new();
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            BatchOp::Finish { dataset, run, partition, attempt, .. } => {
                finished.entry((dataset, run, partition, *attempt)).or_insert(i);
            }
            BatchOp::Validate { dataset, run, partition, attempt, .. } => {
                if let Some(&at) = finished.get(&(dataset, run, partition, *attempt)) {
                    return Some((at, i));
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finish(partition: &str, attempt: u32) -> BatchOp {
        BatchOp::Finish {
            dataset: "d".into(),
            run: "r".into(),
            partition: partition.into(),
            attempt,
            candidate: Candidate { snapshot: "s".into(), rows: Some(1), total: None, digest: Some("x".into()), files: Vec::new() },
        }
    }

    fn validate(partition: &str, attempt: u32) -> BatchOp {
        BatchOp::Validate { dataset: "d".into(), run: "r".into(), partition: partition.into(), attempt, checksums: false }
    }

    #[test]
    fn a_validation_after_the_finish_of_its_attempt_in_one_batch_is_found() {
        assert_eq!(validation_after_its_finish(&[finish("p", 1), validate("p", 1)]), Some((0, 1)));
        assert_eq!(validation_after_its_finish(&[finish("q", 1), finish("p", 2), validate("q", 2), validate("p", 2)]), Some((1, 3)));
        // Before its finish (refused alone, as not finished), another attempt, another task: fine.
        assert_eq!(validation_after_its_finish(&[validate("p", 1), finish("p", 1)]), None);
        assert_eq!(validation_after_its_finish(&[finish("p", 1), validate("p", 2), validate("q", 1)]), None);
    }
}

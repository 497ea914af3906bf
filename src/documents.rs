//! The JSON documents of every outcome, built field by field from the library's types: the
//! shapes the command-line tool prints with `--json` and the server answers, so a worker sees
//! one document per outcome whether it calls the tool or the server. They are a stable
//! contract (documented in the book, `--help` and `docs/openapi.json`), not whatever a
//! library type's derived serialisation happens to be.
//!
//! [`reads`] makes each reading verb's document from a snapshot, and [`operator`] holds the
//! operator verbs' documents, so the tool and the server build every document in one place.
//!
//! Besides the documents, the inputs the front ends read: a run declaration ([`RunInput`],
//! `run declare --from` and `POST /v1/runs/declare`), the manifest's totals ([`totals`]), and
//! [`requests`], the served API's request bodies and queries, which the server and the Python
//! package's in-process dispatch both answer.

pub mod operator;
pub mod reads;
pub mod requests;
pub mod strict;

use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::batch::{BatchOp, BatchOutcome};
use crate::grain::{DataFormat, Grain, ReconcileBasis, Reconciliation};
use crate::lifecycle::AttemptLease;
use crate::model::{
    AttemptInfo, AttemptKey, AttemptStatus, AttemptTicket, Candidate, ClaimOutcome, DeclareOutcome, Effect, EffectStatus, FileEntry,
    FinishOutcome, GateFailure, Generation, GenerationKind, Manifest, ManifestDiff, MarkOutcome, PartitionEntry, PublishOutcome,
    PublishRefusal, RecordedEffect, RefusalReason, RunInfo, RunSpec, TaskRefusal, TaskSpec, Verdict,
};
use crate::store::Snapshot;
use crate::{Error, ErrorKind, Result};

/// `{"path", "size_bytes", "crc32"}`.
pub fn file(f: &FileEntry) -> Value {
    json!({ "path": f.path, "size_bytes": f.size_bytes, "crc32": f.crc32 })
}

/// `{"snapshot", "rows", "total", "digest", "files": [file]}`.
pub fn candidate(c: &Candidate) -> Value {
    json!({
        "snapshot": c.snapshot,
        "rows": c.rows,
        "total": c.total,
        "digest": c.digest,
        "files": c.files.iter().map(file).collect::<Vec<_>>(),
    })
}

/// `{"kind", "message", ...details}`: one failed check.
pub fn failure(f: &GateFailure) -> Value {
    let message = f.to_string();
    match f {
        GateFailure::ForeignSnapshot { expected, got } => {
            json!({ "kind": "foreign_snapshot", "message": message, "expected": expected, "got": got })
        }
        GateFailure::RowsMismatch { expected, got } => {
            json!({ "kind": "rows_mismatch", "message": message, "expected": expected, "got": got })
        }
        GateFailure::TotalMismatch { expected, got } => {
            json!({ "kind": "total_mismatch", "message": message, "expected": expected, "got": got })
        }
        GateFailure::FileMissing { path } => json!({ "kind": "file_missing", "message": message, "path": path }),
        GateFailure::FileSizeMismatch { path, expected, got } => {
            json!({ "kind": "file_size_mismatch", "message": message, "path": path, "expected": expected, "got": got })
        }
        GateFailure::FileChecksumMismatch { path, expected, got } => {
            json!({ "kind": "file_checksum_mismatch", "message": message, "path": path, "expected": expected, "got": got })
        }
        GateFailure::FileUnreadable { path, message: os } => {
            json!({ "kind": "file_unreadable", "message": message, "path": path, "error": os })
        }
        GateFailure::ReportedMismatch { figure, reported, computed } => {
            json!({ "kind": "reported_mismatch", "message": message, "figure": figure, "reported": reported, "computed": computed })
        }
        GateFailure::FigureNotReported { figure } => json!({ "kind": "figure_not_reported", "message": message, "figure": figure }),
        GateFailure::DuplicateGrainKey { duplicates, key } => {
            json!({ "kind": "duplicate_grain_key", "message": message, "duplicates": duplicates, "key": key })
        }
        GateFailure::MissingKey { path, location, column } => {
            json!({ "kind": "missing_key", "message": message, "path": path, "location": location, "column": column })
        }
        GateFailure::UnparsableRow { path, location, message: detail } => {
            json!({ "kind": "unparsable_row", "message": message, "path": path, "location": location, "detail": detail })
        }
        GateFailure::ColumnsMismatch { path, expected, got } => {
            json!({ "kind": "columns_mismatch", "message": message, "path": path, "expected": expected, "got": got })
        }
        GateFailure::UnsupportedColumnType { path, column, data_type } => {
            json!({ "kind": "unsupported_column_type", "message": message, "path": path, "column": column, "data_type": data_type })
        }
        GateFailure::MalformedFile { path, message: detail } => {
            json!({ "kind": "malformed_file", "message": message, "path": path, "detail": detail })
        }
        GateFailure::TotalOverflow => json!({ "kind": "total_overflow", "message": message }),
        GateFailure::MoreRejectedRows { count } => json!({ "kind": "more_rejected_rows", "message": message, "count": count }),
        GateFailure::Invalidated { actor, reason, invalidated_at_ms } => json!({
            "kind": "invalidated", "message": message, "actor": actor, "reason": reason, "invalidated_at_ms": invalidated_at_ms
        }),
    }
}

/// `"valid"` or `"invalid"` and the failed checks of a verdict.
pub fn verdict(v: &Verdict) -> (&'static str, Vec<Value>) {
    match v {
        Verdict::Valid => ("valid", Vec::new()),
        Verdict::Invalid(failures) => ("invalid", failures.iter().map(failure).collect()),
    }
}

/// The status name and failed checks of an attempt.
pub fn status(s: &AttemptStatus) -> (&'static str, Vec<Value>) {
    match s {
        AttemptStatus::Validated(v) => verdict(v),
        other => (other.name(), Vec::new()),
    }
}

/// `{"attempt", "status", "failures", "started_at_ms", "staging_rel", "candidate"}`.
pub fn attempt(a: &AttemptInfo) -> Value {
    let (status, failures) = status(&a.status);
    json!({
        "attempt": a.key.attempt,
        "status": status,
        "failures": failures,
        "started_at_ms": a.started_at_ms,
        "staging_rel": a.staging_rel,
        "candidate": a.candidate.as_ref().map(candidate),
        "reconciliation": a.reconciliation.as_ref().map(reconciliation),
    })
}

/// `{"format", "keys", "measure", "scale"}`: a declared grain.
pub fn grain(g: &Grain) -> Value {
    json!({ "format": g.format.name(), "keys": g.keys, "measure": g.measure, "scale": g.measure_scale })
}

/// The verdict's figures side by side: `{"basis", "expected", "reported", "computed", ...}`.
pub fn reconciliation(r: &Reconciliation) -> Value {
    let basis = match r.basis {
        ReconcileBasis::Read { format } => format!("read_{}", format.name()),
        _ => "reported".to_owned(),
    };
    json!({
        "basis": basis,
        "expected": { "rows": r.expected_rows, "total": r.expected_total },
        "reported": { "rows": r.reported_rows, "total": r.reported_total, "digest": r.reported_digest },
        "computed": { "rows": r.computed_rows, "total": r.computed_total, "digest": r.computed_digest },
        "duplicate_keys": r.duplicate_keys,
        "rejected_rows": r.rejected_rows,
        "files_read": r.files_read,
        "bytes_read": r.bytes_read,
    })
}

/// The kind of a generation: `"publish"` or `"rollback"`.
pub fn kind_name(kind: &GenerationKind) -> &'static str {
    match kind {
        GenerationKind::Publish => "publish",
        GenerationKind::Rollback { .. } => "rollback",
    }
}

/// `{"dataset", "number", "parent", "kind", "rollback", "run", "snapshot", "published_at_ms",
/// "partitions_replaced", "nondeterminism_accepted"}`.
pub fn generation(g: &Generation) -> Value {
    let rollback = match &g.kind {
        GenerationKind::Rollback { restored, actor, reason } => json!({ "restored": restored, "actor": actor, "reason": reason }),
        _ => Value::Null,
    };
    json!({
        "dataset": g.dataset,
        "number": g.number,
        "parent": g.parent,
        "kind": kind_name(&g.kind),
        "rollback": rollback,
        "run": g.run,
        "snapshot": g.snapshot,
        "published_at_ms": g.published_at_ms,
        "partitions_replaced": g.partitions_replaced,
        "nondeterminism_accepted": g.nondeterminism_accepted.as_ref().map(|n| json!({ "reason": n.reason, "partitions": n.partitions })),
    })
}

/// `diff`: what changed in `dataset` from generation `from` to `to` (`{dataset, from, to,
/// added, removed, replaced: [{partition, from, to}], unchanged}`), partitions as
/// [`partition`] gives them.
pub fn diff(dataset: &str, from: u64, to: u64, diff: &ManifestDiff<'_>, staging_root: Option<&Path>) -> Value {
    let part = |p: &PartitionEntry| partition(p, staging_root);
    json!({
        "dataset": dataset,
        "from": from,
        "to": to,
        "added": diff.added.iter().map(|p| part(p)).collect::<Vec<_>>(),
        "removed": diff.removed.iter().map(|p| part(p)).collect::<Vec<_>>(),
        "replaced": diff
            .replaced
            .iter()
            .map(|(old, new)| json!({ "partition": old.partition, "from": part(old), "to": part(new) }))
            .collect::<Vec<_>>(),
        "unchanged": diff.unchanged,
    })
}

/// `{"partition", "since_generation", "run", "attempt", "snapshot", "rows", "total", "digest",
/// "staging_rel", "staging_dir", "files": [file], "figures"}`; `staging_dir` is absolute when the
/// staging root is known, else null; `figures` is `"computed"` (the store read the files: the
/// run declares a grain) or `"reported"` (the worker's own figures, reported, not checked), from
/// [`PartitionEntry::figures_checked`].
pub fn partition(p: &PartitionEntry, staging_root: Option<&std::path::Path>) -> Value {
    let dir = p.staging_dir.clone().or_else(|| staging_root.map(|root| root.join(&p.staging_rel)));
    json!({
        "partition": p.partition,
        "since_generation": p.since_generation,
        "run": p.run,
        "attempt": p.attempt,
        "snapshot": p.snapshot,
        "rows": p.rows,
        "total": p.total,
        "digest": p.digest,
        "staging_rel": p.staging_rel,
        "staging_dir": dir,
        "files": p.files.iter().map(|f| {
            let mut doc = file(f);
            doc["absolute_path"] = json!(dir.as_ref().map(|d| d.join(&f.path)));
            doc
        }).collect::<Vec<_>>(),
        "figures": if p.figures_checked { "computed" } else { "reported" },
    })
}

/// The failing tasks of a refused publish:
/// `[{"partition", "reason", "message", ...details}]`.
pub fn refused_tasks(r: &PublishRefusal) -> Vec<Value> {
    r.tasks
        .iter()
        .map(|t| {
            let mut doc = refused_task(t);
            doc["message"] = json!(refusal_reason(t));
            doc
        })
        .collect()
}

/// Why one task refused the publish, as the library words it (without the partition).
pub fn refusal_reason(task: &TaskRefusal) -> String {
    let alone = PublishRefusal { dataset: String::new(), run: String::new(), tasks: vec![task.clone()] }.to_string();
    let lead = format!("\n  {}: ", task.partition);
    alone.split_once(lead.as_str()).map_or(alone.clone(), |(_, reason)| reason.to_owned())
}

fn refused_task(t: &TaskRefusal) -> Value {
    match &t.reason {
        RefusalReason::NoAcceptedAttempt { attempts } => json!({
            "partition": t.partition,
            "reason": "no_accepted_attempt",
            "attempts": attempts.iter().map(|(n, s)| {
                let (status, failures) = status(s);
                json!({ "attempt": n, "status": status, "failures": failures })
            }).collect::<Vec<_>>(),
        }),
        RefusalReason::Gate { attempt, failures } => json!({
            "partition": t.partition,
            "reason": "gate",
            "attempt": attempt,
            "failures": failures.iter().map(failure).collect::<Vec<_>>(),
        }),
        RefusalReason::Nondeterministic { attempt, digest, published_digest, published_run, published_generation } => json!({
            "partition": t.partition,
            "reason": "nondeterministic",
            "attempt": attempt,
            "digest": digest,
            "published_digest": published_digest,
            "published_run": published_run,
            "published_generation": published_generation,
        }),
    }
}

/// The status name, generation and emission time of an effect.
pub fn effect_status(s: &EffectStatus) -> (&'static str, Option<u64>, Option<u64>) {
    match s {
        EffectStatus::Recorded => ("recorded", None, None),
        EffectStatus::Ready { generation } => ("ready", Some(*generation), None),
        EffectStatus::Emitted { generation, emitted_at_ms } => ("emitted", Some(*generation), Some(*emitted_at_ms)),
    }
}

/// `{"dataset", "run", "effect", "partition", "store_id", "idempotency_key", "status",
/// "generation", "recorded_at_ms", "emitted_at_ms", "payload", "payload_hex", "claim"}`;
/// `idempotency_key` is [`Effect::idempotency_key`]; `payload` is the payload as UTF-8 text, or
/// null if it is not UTF-8.
pub fn effect(e: &Effect) -> Value {
    let (status, generation, emitted_at_ms) = effect_status(&e.status);
    json!({
        "dataset": e.key.dataset,
        "run": e.key.run,
        "effect": e.key.effect,
        "partition": e.key.partition,
        "store_id": e.store_id,
        "idempotency_key": e.idempotency_key(),
        "status": status,
        "generation": generation,
        "recorded_at_ms": e.recorded_at_ms,
        "emitted_at_ms": emitted_at_ms,
        "payload": std::str::from_utf8(&e.payload).ok(),
        "payload_hex": hex::encode(&e.payload),
        "claim": e.claim.as_ref().map(|c| json!({
            "claimant": c.claimant,
            "claimed_at_ms": c.claimed_at_ms,
            "expires_at_ms": c.expires_at_ms,
        })),
    })
}

/// `{"outcome": "claimed"|"held_by_other"|"already_emitted", "took_over_from", "effect"}`.
pub fn claim_outcome(outcome: &ClaimOutcome) -> Value {
    use ClaimOutcome as O;
    let (name, took_over_from) = match outcome {
        O::Claimed { took_over_from, .. } => ("claimed", took_over_from.clone()),
        O::HeldByOther { .. } => ("held_by_other", None),
        O::AlreadyEmitted { .. } => ("already_emitted", None),
    };
    json!({ "outcome": name, "took_over_from": took_over_from, "effect": effect(outcome.effect()) })
}

/// `{"outcome": "marked"|"already_emitted"|"claimed_by_other", "effect"}`.
pub fn mark_outcome(outcome: &MarkOutcome) -> Value {
    use MarkOutcome as O;
    let name = match outcome {
        O::Marked { .. } => "marked",
        O::AlreadyEmitted { .. } => "already_emitted",
        O::ClaimedByOther { .. } => "claimed_by_other",
    };
    json!({ "outcome": name, "effect": effect(outcome.effect()) })
}

/// `{"partition", "expected_rows", "expected_total"}`: one declared task.
pub fn task(t: &TaskSpec) -> Value {
    json!({ "partition": t.partition, "expected_rows": t.expected_rows, "expected_total": t.expected_total })
}

/// `run declare`: `{"dataset", "run", "snapshot", "outcome": "declared"|"already_declared",
/// "grain", "tasks": [task]}`.
pub fn declared(spec: &RunSpec, outcome: DeclareOutcome) -> Value {
    json!({
        "dataset": spec.dataset,
        "run": spec.run,
        "snapshot": spec.snapshot,
        "outcome": match outcome {
            DeclareOutcome::Declared => "declared",
            DeclareOutcome::AlreadyDeclared => "already_declared",
        },
        "grain": spec.grain.as_ref().map(grain),
        "tasks": spec.tasks.iter().map(task).collect::<Vec<_>>(),
    })
}

/// `attempt begin`: `{"dataset", "run", "partition", "attempt", "staging_dir", "started_at_ms"}`.
pub fn begun(ticket: &AttemptTicket) -> Value {
    let task = &ticket.key.task;
    json!({
        "dataset": task.dataset,
        "run": task.run,
        "partition": task.partition,
        "attempt": ticket.key.attempt,
        "staging_dir": ticket.staging_dir,
        "started_at_ms": ticket.started_at_ms,
    })
}

/// The name of a finish's outcome: `"recorded"` or `"already_recorded"`.
pub fn finish_outcome(outcome: FinishOutcome) -> &'static str {
    match outcome {
        FinishOutcome::Recorded => "recorded",
        FinishOutcome::AlreadyRecorded => "already_recorded",
    }
}

/// `attempt finish`: `{"dataset", "run", "partition", "attempt", "outcome", "candidate"}`.
pub fn finished(key: &AttemptKey, outcome: FinishOutcome, c: &Candidate) -> Value {
    json!({
        "dataset": key.task.dataset,
        "run": key.task.run,
        "partition": key.task.partition,
        "attempt": key.attempt,
        "outcome": finish_outcome(outcome),
        "candidate": candidate(c),
    })
}

/// `attempt validate`: `{"dataset", "run", "partition", "attempt", "verdict", "failures",
/// "accepted_attempt", "reconciliation"}`.
pub fn validated(key: &AttemptKey, v: &Verdict, accepted: Option<u32>, r: Option<&Reconciliation>) -> Value {
    let (name, failures) = verdict(v);
    json!({
        "dataset": key.task.dataset,
        "run": key.task.run,
        "partition": key.task.partition,
        "attempt": key.attempt,
        "verdict": name,
        "failures": failures,
        "accepted_attempt": accepted,
        "reconciliation": r.map(reconciliation),
    })
}

/// An attempt whose validation failed with `err` (one line of `attempt validate --pending`):
/// `{"dataset", "run", "partition", "attempt", "error": {"exit_code", "kind", "message"}}`.
pub fn validation_failed(key: &AttemptKey, err: &Error) -> Value {
    json!({
        "dataset": key.task.dataset,
        "run": key.task.run,
        "partition": key.task.partition,
        "attempt": key.attempt,
        "error": error_object(err.kind(), &err.to_string()),
    })
}

/// `{"exit_code", "kind", "message"}`: the error object of an error document, of a batch line
/// that failed and of a pending validation that failed.
pub fn error_object(kind: ErrorKind, message: &str) -> Value {
    json!({ "exit_code": kind.exit_code(), "kind": kind.name(), "message": message })
}

/// [`validated`], with the task's accepted attempt and the attempt's figures read from
/// `snapshot` (one taken after the verdict was stored).
///
/// # Errors
/// Storage and corruption errors of the reads.
pub fn validated_from(snapshot: &Snapshot, key: &AttemptKey, verdict: &Verdict) -> Result<Value> {
    let accepted = snapshot.accepted(&key.task)?;
    let reconciliation = snapshot.attempt(key)?.and_then(|a| a.reconciliation);
    Ok(validated(key, verdict, accepted, reconciliation.as_ref()))
}

/// `POST /v1/attempts/validate-pending`'s answer: `{"dataset", "run", "results": [...]}`, a
/// [`validated_from`] document per attempt validated and a [`validation_failed`] one per attempt
/// whose validation failed, in the order given.
///
/// # Errors
/// Storage and corruption errors of the reads.
pub fn pending_validated(snapshot: &Snapshot, dataset: &str, run: &str, results: &[(AttemptKey, Result<Verdict>)]) -> Result<Value> {
    let lines = results
        .iter()
        .map(|(key, verdict)| match verdict {
            Ok(verdict) => validated_from(snapshot, key, verdict),
            Err(err) => Ok(validation_failed(key, err)),
        })
        .collect::<Result<Vec<Value>>>()?;
    Ok(json!({ "dataset": dataset, "run": run, "results": lines }))
}

/// `attempt heartbeat`: `{"dataset", "run", "partition", "attempt", "heartbeat_at_ms",
/// "expires_at_ms"}`.
pub fn heartbeat(key: &AttemptKey, lease: &AttemptLease) -> Value {
    json!({
        "dataset": key.task.dataset,
        "run": key.task.run,
        "partition": key.task.partition,
        "attempt": key.attempt,
        "heartbeat_at_ms": lease.heartbeat_at_ms,
        "expires_at_ms": lease.expires_at_ms,
    })
}

/// `publish`: `{"dataset", "run", "outcome": "published"|"already_published"|"refused",
/// "generation", "refused_tasks"}`.
pub fn published(dataset: &str, run: &str, outcome: &PublishOutcome) -> Value {
    let (name, generation, refused) = match outcome {
        PublishOutcome::Published(g) => ("published", self::generation(g), Vec::new()),
        PublishOutcome::AlreadyPublished(g) => ("already_published", self::generation(g), Vec::new()),
        PublishOutcome::Refused(r) => ("refused", Value::Null, refused_tasks(r)),
    };
    json!({ "dataset": dataset, "run": run, "outcome": name, "generation": generation, "refused_tasks": refused })
}

/// `effects record`: `{"newly_recorded", "effect"}`.
pub fn recorded(r: &RecordedEffect) -> Value {
    json!({ "newly_recorded": r.newly_recorded, "effect": effect(&r.effect) })
}

/// The result document of one batch operation (`manifestdb batch`, `POST /v1/batch`): a begin
/// as `attempt begin` prints it, `{"outcome"}` of a finish, `{"verdict", "failures"}` of a
/// validation, and the effect operations' documents.
pub fn batch_result(outcome: &BatchOutcome) -> Value {
    match outcome {
        BatchOutcome::Begin(ticket) => begun(ticket),
        BatchOutcome::Finish(finish) => json!({ "outcome": finish_outcome(*finish) }),
        BatchOutcome::Validate(v) => {
            let (name, failures) = verdict(v);
            json!({ "verdict": name, "failures": failures })
        }
        BatchOutcome::RecordEffect(r) => recorded(r),
        BatchOutcome::ClaimEffect(claim) => claim_outcome(claim),
        BatchOutcome::MarkEmitted(mark) => mark_outcome(mark),
    }
}

/// One result line of a batch: `{"line", "op", "ok": true, "result"}` (a [`batch_result`]) or
/// `{"line", "op", "ok": false, "error": {"exit_code", "kind", "message"}}`; `op` is null for a
/// line that is not an operation.
pub fn batch_line(line: usize, op: Option<&str>, result: std::result::Result<Value, Value>) -> Value {
    match result {
        Ok(result) => json!({ "line": line, "op": op, "ok": true, "result": result }),
        Err(error) => json!({ "line": line, "op": op, "ok": false, "error": error }),
    }
}

/// `POST /v1/batch`'s answer, `{"ok", "results": [batch_line]}`: a line per operation in
/// order, `parsed` as [`requests::BatchBody::parse_ops`] read them (one that is not an
/// operation fails alone, as usage) and `outcomes` the store's, one per operation that parsed.
/// `ok` is true when every line is. `None` if the store gave fewer outcomes than operations.
pub fn batch_answer(parsed: &[std::result::Result<BatchOp, String>], outcomes: Vec<Result<BatchOutcome>>) -> Option<Value> {
    let mut outcomes = outcomes.into_iter();
    let mut results = Vec::with_capacity(parsed.len());
    let mut all_ok = true;
    for (i, op) in parsed.iter().enumerate() {
        let line = match op {
            Err(message) => batch_line(i + 1, None, Err(error_object(ErrorKind::Usage, message))),
            Ok(op) => match outcomes.next()? {
                Ok(outcome) => batch_line(i + 1, Some(op.name()), Ok(batch_result(&outcome))),
                Err(err) => batch_line(i + 1, Some(op.name()), Err(error_object(err.kind(), &err.to_string()))),
            },
        };
        all_ok &= line["ok"] == Value::Bool(true);
        results.push(line);
    }
    Some(json!({ "ok": all_ok, "results": results }))
}

/// Sizes summed over a manifest's partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Partitions.
    pub partitions: u64,
    /// Rows (saturating).
    pub rows: u64,
    /// Sum of the partitions' totals; `None` if no partition reports one.
    pub total: Option<i64>,
    /// Files.
    pub files: u64,
    /// Bytes of all files (saturating).
    pub bytes: u64,
}

/// The partitions' totals. Errors: a message naming the partition where the totals overflow a
/// 64-bit integer (a fault: no store holds such a manifest unless it is damaged).
pub fn totals(partitions: &[PartitionEntry]) -> std::result::Result<Totals, String> {
    let mut t = Totals { partitions: partitions.len() as u64, rows: 0, total: None, files: 0, bytes: 0 };
    for p in partitions {
        t.rows = t.rows.saturating_add(p.rows);
        if let Some(total) = p.total {
            t.total = Some(
                t.total
                    .unwrap_or(0)
                    .checked_add(total)
                    .ok_or_else(|| format!("the partitions' totals overflow a 64-bit integer at {}", p.partition))?,
            );
        }
        t.files += p.files.len() as u64;
        t.bytes = t.bytes.saturating_add(p.files.iter().map(|f| f.size_bytes).sum());
    }
    Ok(t)
}

/// `show DATASET`: `{"generation", "current", "partitions": [partition], "totals"}`, with
/// `current` true when the manifest's generation is `current_generation`.
/// Errors: as [`totals`].
pub fn manifest(m: &Manifest, current_generation: Option<u64>, staging_root: Option<&Path>) -> std::result::Result<Value, String> {
    let t = totals(&m.partitions)?;
    Ok(json!({
        "generation": generation(&m.generation),
        "current": current_generation == Some(m.generation.number),
        "partitions": m.partitions.iter().map(|p| partition(p, staging_root)).collect::<Vec<_>>(),
        "totals": { "partitions": t.partitions, "rows": t.rows, "total": t.total, "files": t.files, "bytes": t.bytes },
    }))
}

/// A run declaration as JSON (`run declare --from`, `POST /v1/runs/declare`):
/// `{"dataset", "run", "snapshot", "tasks": [{"partition", "expected_rows", "expected_total"}],
/// "grain": {"format", "keys", "measure", "scale"}, "trust_reported_figures": BOOL}`
/// (`format` defaults to csv, `scale` to 0). Exactly one of `grain` and
/// `"trust_reported_figures": true` is required: a declaration without a grain makes the
/// worker's figures the published ones, reported and not checked, and that must be said, not
/// fall out of a field left off. Unknown fields are refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunInput {
    dataset: String,
    run: String,
    snapshot: String,
    tasks: Vec<TaskInput>,
    #[serde(default)]
    grain: Option<GrainInput>,
    #[serde(default)]
    trust_reported_figures: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrainInput {
    #[serde(default = "csv")]
    format: String,
    keys: Vec<String>,
    measure: String,
    #[serde(default)]
    scale: u32,
}

fn csv() -> String {
    "csv".to_owned()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskInput {
    partition: String,
    expected_rows: u64,
    #[serde(default)]
    expected_total: Option<i64>,
}

/// A grain from its parts as a declaration names them. Errors: `Error::InvalidInput` for a
/// format other than csv or parquet.
pub fn grain_from(format: &str, keys: Vec<String>, measure: String, scale: u32) -> Result<Grain> {
    let format =
        DataFormat::from_name(format).ok_or_else(|| Error::invalid("grain format", format, "unknown grain format (csv or parquet)"))?;
    Ok(Grain { format, keys, measure, measure_scale: scale })
}

impl RunInput {
    /// The run it declares. Errors: `Error::InvalidInput` for an unknown grain format, and
    /// unless exactly one of a grain and `"trust_reported_figures": true` is given.
    pub fn into_spec(self) -> Result<RunSpec> {
        // The store's declare refuses neither and both too; checked here as well, so a tool
        // refuses the document before it opens anything.
        let spec = RunSpec {
            grain: self.grain.map(|g| grain_from(&g.format, g.keys, g.measure, g.scale)).transpose()?,
            trust_reported_figures: self.trust_reported_figures,
            dataset: self.dataset,
            run: self.run,
            snapshot: self.snapshot,
            tasks: self
                .tasks
                .into_iter()
                .map(|t| TaskSpec { partition: t.partition, expected_rows: t.expected_rows, expected_total: t.expected_total })
                .collect(),
        };
        crate::rules::ids::check_figures_choice(&spec)?;
        Ok(spec)
    }
}

/// `run show`: `{"dataset", "run", "snapshot", "declared_at_ms", "published_generation",
/// "grain", "tasks": [task + {"accepted_attempt", "attempts": [attempt]}]}`, from the run and,
/// per task in declared order, its accepted attempt and attempts.
pub fn run_show(info: &RunInfo, tasks: &[(&TaskSpec, Option<u32>, Vec<AttemptInfo>)]) -> Value {
    json!({
        "dataset": info.dataset,
        "run": info.run,
        "snapshot": info.snapshot,
        "declared_at_ms": info.declared_at_ms,
        "published_generation": info.published_generation,
        "grain": info.grain.as_ref().map(grain),
        "tasks": tasks.iter().map(|(spec, accepted, attempts)| {
            let mut doc = task(spec);
            doc["accepted_attempt"] = json!(accepted);
            doc["attempts"] = attempts.iter().map(attempt).collect();
            doc
        }).collect::<Vec<_>>(),
    })
}

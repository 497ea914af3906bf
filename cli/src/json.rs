//! The JSON documents the tool prints with `--json`, built field by field from the library's
//! types so that their shape is the tool's own, stable contract (documented in `--help` and
//! the README), not whatever a library type's derived serialisation happens to be.

use manifestdb::{
    AttemptInfo, AttemptStatus, Candidate, Effect, EffectStatus, FileEntry, GateFailure, Generation, GenerationKind, Grain, PartitionEntry,
    PublishRefusal, ReconcileBasis, Reconciliation, RefusalReason, Verdict,
};
use manifestdb::{ClaimOutcome, MarkOutcome};
use serde_json::{Value, json};

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
        _ => json!({ "kind": "other", "message": message }),
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

/// One line describing a run's grain, for the human output.
pub fn grain_line(g: Option<&Grain>) -> String {
    match g {
        Some(g) => format!(
            "grain: {} files, one row per ({}), measure {} at scale {}: validation reads the data",
            g.format,
            g.keys.join(", "),
            g.measure,
            g.measure_scale
        ),
        None => "grain: none declared: validation compares the figures workers report".to_owned(),
    }
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

/// The kind of a generation: `"publish"`, `"rollback"`, or `"other"`.
pub fn kind_name(kind: &GenerationKind) -> &'static str {
    match kind {
        GenerationKind::Publish => "publish",
        GenerationKind::Rollback { .. } => "rollback",
        _ => "other",
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

/// `{"partition", "since_generation", "run", "attempt", "snapshot", "rows", "total", "digest",
/// "staging_rel", "staging_dir", "files": [file]}`; `staging_dir` is absolute when the staging
/// root is known, else null.
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
    })
}

/// The failing tasks of a refused publish:
/// `[{"partition", "reason", "message", ...details}]`.
pub fn refused_tasks(r: &PublishRefusal) -> Vec<Value> {
    r.tasks
        .iter()
        .map(|t| match &t.reason {
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
        })
        .collect()
}

/// The status name, generation and emission time of an effect.
pub fn effect_status(s: &EffectStatus) -> (&'static str, Option<u64>, Option<u64>) {
    match s {
        EffectStatus::Recorded => ("recorded", None, None),
        EffectStatus::Ready { generation } => ("ready", Some(*generation), None),
        EffectStatus::Emitted { generation, emitted_at_ms } => ("emitted", Some(*generation), Some(*emitted_at_ms)),
    }
}

/// `{"dataset", "run", "effect", "partition", "status", "generation", "recorded_at_ms",
/// "emitted_at_ms", "payload", "payload_hex", "claim"}`; `payload` is the payload as UTF-8 text, or null
/// if it is not UTF-8.
pub fn effect(e: &Effect) -> Value {
    let (status, generation, emitted_at_ms) = effect_status(&e.status);
    json!({
        "dataset": e.key.dataset,
        "run": e.key.run,
        "effect": e.key.effect,
        "partition": e.key.partition,
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

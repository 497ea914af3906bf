//! The operator verbs' documents (abandon, invalidate, rollback, `gc`, views, verify): the
//! shapes `manifestdb --json` prints and the server's operator routes answer, built from the
//! library's outcomes.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::generation;
use super::reads::{DocumentError, require_dataset, unversioned};
use crate::model::AttemptKey;
use crate::{
    AbandonOutcome, ApplyReport, CleanupPlan, CleanupReason, ExpireReport, IntegrityCheck, InvalidateOutcome, KeepReason, PlannedPath,
    RollbackOutcome, RollbackRefusal, RunMode, SkipReason, Snapshot, VerifyReport, ViewManifest, ViewStatus,
};

/// `{"dataset", "run", "partition", "attempt"}`.
pub fn attempt_key(key: &AttemptKey) -> Value {
    json!({ "dataset": key.task.dataset, "run": key.task.run, "partition": key.task.partition, "attempt": key.attempt })
}

/// `attempt abandon`: `{"dataset", "run", "partition", "attempt", "outcome":
/// "abandoned"|"already_abandoned", "abandoned_at_ms"}`.
pub fn abandoned(key: &AttemptKey, outcome: &AbandonOutcome) -> Value {
    let (name, at) = match outcome {
        AbandonOutcome::Abandoned { abandoned_at_ms } => ("abandoned", *abandoned_at_ms),
        AbandonOutcome::AlreadyAbandoned { abandoned_at_ms } => ("already_abandoned", *abandoned_at_ms),
    };
    let mut doc = attempt_key(key);
    doc["outcome"] = json!(name);
    doc["abandoned_at_ms"] = json!(at);
    doc
}

/// `attempt invalidate`: `{"dataset", "run", "partition", "attempt", "outcome":
/// "invalidated"|"already_invalid", "accepted_before", "accepted_after"}`.
pub fn invalidated(key: &AttemptKey, outcome: &InvalidateOutcome) -> Value {
    let (name, before, after) = match outcome {
        InvalidateOutcome::Invalidated { accepted_before, accepted_after } => ("invalidated", *accepted_before, *accepted_after),
        InvalidateOutcome::AlreadyInvalid => ("already_invalid", None, None),
    };
    let mut doc = attempt_key(key);
    doc["outcome"] = json!(name);
    doc["accepted_before"] = json!(before);
    doc["accepted_after"] = json!(after);
    doc
}

/// `{"kind": "expired"|"unknown"|"already_current", "message", ...details}`: why a rollback
/// was refused.
pub fn rollback_refusal(refusal: &RollbackRefusal) -> Value {
    let message = refusal.to_string();
    match refusal {
        RollbackRefusal::Expired { requested, oldest_retained } => {
            json!({ "kind": "expired", "message": message, "requested": requested, "oldest_retained": oldest_retained })
        }
        RollbackRefusal::Unknown { requested, current } => {
            json!({ "kind": "unknown", "message": message, "requested": requested, "current": current })
        }
        RollbackRefusal::AlreadyCurrent { generation } => {
            json!({ "kind": "already_current", "message": message, "generation": generation })
        }
    }
}

/// `rollback`: `{"dataset", "to", "outcome": "rolled_back"|"refused", "generation",
/// "refusal"}`. The tool exits 0 when rolled back, 4 for a refusal of kind `unknown` (a
/// generation that never existed), 3 for another refusal.
pub fn rollback(dataset: &str, to: u64, outcome: &RollbackOutcome) -> Value {
    let (name, generation, refusal) = match outcome {
        RollbackOutcome::RolledBack(g) => ("rolled_back", generation(g), Value::Null),
        RollbackOutcome::Refused(r) => ("refused", Value::Null, rollback_refusal(r)),
    };
    json!({ "dataset": dataset, "to": to, "outcome": name, "generation": generation, "refusal": refusal })
}

/// `"dry_run"` or `"execute"`.
pub fn mode_name(mode: RunMode) -> &'static str {
    match mode {
        RunMode::DryRun => "dry_run",
        RunMode::Execute => "execute",
    }
}

/// `gc abandon`: `{"mode", "attempt_lifetime_max_ms", "abandoned": [attempt key]}`.
pub fn gc_abandoned(mode: RunMode, attempt_lifetime_max_ms: u64, abandoned: &[AttemptKey]) -> Value {
    json!({
        "mode": mode_name(mode),
        "attempt_lifetime_max_ms": attempt_lifetime_max_ms,
        "abandoned": abandoned.iter().map(attempt_key).collect::<Vec<_>>(),
    })
}

/// `gc expire`: `{"dataset", "mode", "current", "oldest_retained", "expired", "versions_removed"}`.
pub fn expired(report: &ExpireReport) -> Value {
    json!({
        "dataset": report.dataset,
        "mode": mode_name(report.mode),
        "current": report.current,
        "oldest_retained": report.oldest_retained,
        "expired": report.expired,
        "versions_removed": report.versions_removed,
    })
}

/// The name of a cleanup reason.
pub fn cleanup_reason(reason: CleanupReason) -> &'static str {
    match reason {
        CleanupReason::Abandoned => "abandoned",
        CleanupReason::Invalid => "invalid",
        CleanupReason::NotRetained => "not_retained",
        CleanupReason::Unknown => "unknown",
    }
}

/// The name of a reason a file is kept.
pub fn keep_reason(reason: KeepReason) -> &'static str {
    match reason {
        KeepReason::Referenced => "referenced",
        KeepReason::MayBeRunning => "may_be_running",
        KeepReason::AwaitingValidation => "awaiting_validation",
        KeepReason::ValidUnpublished => "valid_unpublished",
        KeepReason::TooYoung => "too_young",
        KeepReason::FutureModificationTime => "future_modification_time",
    }
}

fn planned(p: &PlannedPath) -> Value {
    json!({
        "path": p.path,
        "size_bytes": p.size_bytes,
        "modified_at_ms": p.modified_at_ms,
        "reason": cleanup_reason(p.reason),
        "attempt": p.attempt.as_ref().map(attempt_key),
    })
}

/// `gc plan`: `{"plan", "created_at_ms", "age_threshold_ms", "attempt_lifetime_max_ms",
/// "candidates": [path], "candidate_bytes", "unknown": [path], "kept": {reason: files},
/// "unconsidered"}`, each path `{"path", "size_bytes", "modified_at_ms", "reason", "attempt"}`.
pub fn cleanup_plan(plan: &CleanupPlan) -> Value {
    json!({
        "plan": plan.id,
        "created_at_ms": plan.created_at_ms,
        "age_threshold_ms": plan.age_threshold_ms,
        "attempt_lifetime_max_ms": plan.attempt_lifetime_max_ms,
        "candidates": plan.candidates.iter().map(planned).collect::<Vec<_>>(),
        "candidate_bytes": plan.candidates.iter().map(|p| p.size_bytes).sum::<u64>(),
        "unknown": plan.unknown.iter().map(planned).collect::<Vec<_>>(),
        "kept": plan.kept.iter().map(|(reason, n)| (keep_reason(*reason).to_owned(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "unconsidered": plan.unconsidered,
    })
}

/// The name and detail of why an applied cleanup skipped a file.
pub fn skip_reason(reason: &SkipReason) -> (&'static str, Option<String>) {
    match reason {
        SkipReason::Missing => ("missing", None),
        SkipReason::Changed => ("changed", None),
        SkipReason::NowProtected(keep) => ("now_protected", Some(keep_reason(*keep).to_owned())),
        SkipReason::OwnerChanged => ("owner_changed", None),
        SkipReason::UnknownNotRequested => ("unknown_not_requested", None),
        SkipReason::DeleteFailed(message) => ("delete_failed", Some(message.clone())),
    }
}

/// `gc apply`: `{"plan", "mode", "deleted", "bytes_deleted", "skipped": [{"path", "reason",
/// "detail"}], "directories_removed", "attempt_records_removed": [attempt key]}`.
pub fn cleanup_applied(report: &ApplyReport) -> Value {
    json!({
        "plan": report.plan,
        "mode": mode_name(report.mode),
        "deleted": report.deleted,
        "bytes_deleted": report.bytes_deleted,
        "skipped": report.skipped.iter().map(|s| {
            let (reason, detail) = skip_reason(&s.reason);
            json!({ "path": s.path, "reason": reason, "detail": detail })
        }).collect::<Vec<_>>(),
        "directories_removed": report.directories_removed,
        "attempt_records_removed": report.attempt_records_removed.iter().map(attempt_key).collect::<Vec<_>>(),
    })
}

/// One synced view: `{"dataset", "generation", "current", "path", "built", "swapped", "repaired",
/// "removed", "table_version", "table_repaired", "table_restored", "foreign_versions"}`.
pub fn view_status(s: &ViewStatus) -> Value {
    json!({
        "dataset": s.dataset, "generation": s.generation, "trees": s.trees, "current": s.current, "path": s.path,
        "built": s.built, "swapped": s.swapped, "repaired": s.repaired, "removed": s.removed,
        "table_version": s.table_version, "table_repaired": s.table_repaired, "table_restored": s.table_restored,
        "foreign_versions": s.foreign_versions,
    })
}

/// `view sync`: `{"synced": [view status]}`.
pub fn views_synced(synced: &[ViewStatus]) -> Value {
    json!({ "synced": synced.iter().map(view_status).collect::<Vec<_>>() })
}

/// `view DATASET [--generation N]` (`GET /v1/views`): `{"dataset", "view_root", "current",
/// "path", "view_generation", "store_generation", "lagging" (the view or the table lags),
/// "view_lagging", "table": {"path", "version" (the version holding the generation shown, read
/// from the log's `txn` actions), "latest_version", "latest_generation", "lagging",
/// "foreign_versions": [{"version", "operation", "engine"}], "damaged_versions": [{"version",
/// "reason"}], "reason"}, "manifest"}`: where the dataset's
/// view is (read from the file system under the view root: `root` if given, else the store's
/// recorded one) and its `_manifest.json`. Without `generation`, `path` is the directory
/// `current` names now (resolved: read it, not `current`); with it, retained generation N's
/// `v<N>`.
///
/// Errors: [`DocumentError::NotFound`] for an unknown dataset, a store without views, or a
/// dataset without a view yet; [`crate::Error::GenerationNotRetained`] (not found, naming the
/// oldest retained generation) for an expired generation; [`crate::Error::ViewDamaged`]
/// (corrupt) for a view whose `_manifest.json` is missing, empty or damaged.
pub fn view(snapshot: &Snapshot, dataset: &str, root: Option<&Path>, generation: Option<u64>) -> Result<Value, DocumentError> {
    require_dataset(snapshot, dataset)?;
    let recorded = snapshot.views()?;
    let trees = recorded.as_ref().and_then(|r| r.trees.as_ref()).is_none_or(|t| t.includes(dataset));
    let root: PathBuf = match (root, recorded) {
        // A view root on object storage is a URL, never made a local path.
        (Some(given), _) if given.to_str().is_some_and(|g| g.starts_with("s3://")) => given.to_path_buf(),
        (Some(given), _) => {
            std::path::absolute(given).map_err(|source| crate::Error::Io { context: format!("resolving {}", given.display()), source })?
        }
        (None, Some(recorded)) => recorded.root,
        (None, None) => return Err(DocumentError::NotFound("the store publishes no views (open it once with --views DIR)".into())),
    };
    let store_generation = snapshot.current(dataset)?.map(|g| g.number);
    // The generation's exact file list, from the store (every dataset has one).
    let list = snapshot.view_files(dataset, generation).ok();
    let (current, path, view_generation, manifest, view_lagging) = if trees {
        let current = root.join(dataset).join("current");
        let target = std::fs::read_link(&current).ok();
        let current_generation =
            target.as_ref().and_then(|t| t.to_str()).and_then(|t| t.strip_prefix('v')).and_then(|n| n.parse::<u64>().ok());
        let (path, view_generation) = match generation {
            Some(n) => (crate::views::locate_view(snapshot, &root, dataset, Some(n))?.path, Some(n)),
            None => {
                let Some(path) = target.as_ref().map(|t| root.join(dataset).join(t)) else {
                    return Err(DocumentError::NotFound(format!(
                        "dataset {dataset:?} has no view at {} (store generation: {}; `manifestdb view sync` builds it)",
                        current.display(),
                        store_generation.map_or("none".to_owned(), |g| g.to_string())
                    )));
                };
                (path, current_generation)
            }
        };
        let manifest_path = path.join("_manifest.json");
        let manifest = match ViewManifest::read(&manifest_path) {
            Err(crate::Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound && path.is_dir() => {
                return Err(crate::Error::ViewDamaged { path: manifest_path, reason: "is missing".into() }.into());
            }
            other => other?,
        };
        (Some(current), Some(path), view_generation, manifest, current_generation != store_generation)
    } else {
        // No directory trees: the manifest is the store's, the generation is the one asked for.
        let list = snapshot.view_files(dataset, generation)?;
        let Some(manifest) = snapshot.manifest(dataset, Some(list.generation))? else {
            return Err(DocumentError::NotFound(format!("generation {} of {dataset:?} left the store while it was read", list.generation)));
        };
        let mode = snapshot.views()?.map_or(crate::ViewMode::HardLink, |v| v.mode);
        let manifest = ViewManifest::of(&manifest, mode);
        // A view root on object storage: each file's URL in the Delta table, as the
        // generation's `manifests/v<N>/_manifest.json` there says.
        #[cfg(all(feature = "s3", feature = "delta"))]
        let manifest = match root.to_str() {
            Some(url) if url.starts_with("s3://") => {
                manifest.with_table_urls(&format!("{url}/{dataset}/{}", crate::rules::delta::TABLE_DIR))
            }
            _ => manifest,
        };
        (None, None, Some(list.generation), manifest, false)
    };
    let manifest = serde_json::to_value(&manifest).map_err(|e| DocumentError::Fault(format!("rendering the view manifest: {e}")))?;
    // The Delta table (a Parquet dataset's), read from its log: the version holding the
    // generation shown, the latest version and the generation it holds, other writers' versions.
    let shown = view_generation.or(store_generation);
    let mut table_lagging = false;
    let table = match snapshot.delta_table(dataset) {
        Ok(_) => match crate::views::table_state(&root, dataset, shown)? {
            None => {
                table_lagging = true;
                json!({ "path": null, "version": null, "latest_version": null, "latest_generation": null, "lagging": true,
                        "foreign_versions": [], "damaged_versions": [],
                        "reason": "no Delta log yet (`manifestdb view sync` writes it)" })
            }
            Some(state) => {
                table_lagging =
                    state.latest_generation.is_none() || state.latest_generation != store_generation || !state.damaged.is_empty();
                let reason = if !state.damaged.is_empty() {
                    Some("the log has damaged versions (`manifestdb view sync` repairs them)".to_owned())
                } else if state.latest_generation.is_none() {
                    Some(format!(
                        "the latest version, {}, was committed by another writer (`manifestdb view sync` commits the current generation on top)",
                        state.latest.map_or("none".to_owned(), |v| v.to_string())
                    ))
                } else if state.latest_generation != store_generation {
                    Some(format!(
                        "the latest version holds generation {}, the store's current is {} (`manifestdb view sync` commits it)",
                        state.latest_generation.map_or("none".to_owned(), |g| g.to_string()),
                        store_generation.map_or("none".to_owned(), |g| g.to_string())
                    ))
                } else {
                    None
                };
                json!({
                    "path": root.join(dataset).join("table"),
                    "version": state.version,
                    "latest_version": state.latest,
                    "latest_generation": state.latest_generation,
                    "lagging": table_lagging,
                    "foreign_versions": state.foreign.iter().map(|(v, op, engine)| json!({ "version": v, "operation": op, "engine": engine })).collect::<Vec<_>>(),
                    "damaged_versions": state.damaged.iter().map(|(v, reason)| json!({ "version": v, "reason": reason })).collect::<Vec<_>>(),
                    "reason": reason,
                })
            }
        },
        Err(crate::Error::ViewRefused { reason, .. }) => {
            json!({ "path": null, "version": null, "latest_version": null, "latest_generation": null, "lagging": false,
                    "foreign_versions": [], "damaged_versions": [], "reason": reason })
        }
        // The store has views and the dataset a generation (else the view above failed), and it
        // would be a table: this build cannot write it, so the table lags.
        Err(crate::Error::NoView { reason, .. }) => {
            table_lagging = true;
            json!({ "path": null, "version": null, "latest_version": null, "latest_generation": null, "lagging": true,
                    "foreign_versions": [], "damaged_versions": [], "reason": reason })
        }
        Err(e) => return Err(e.into()),
    };
    Ok(json!({
        "dataset": dataset,
        "view_root": root,
        "trees": trees,
        "current": current,
        "path": path,
        "view_generation": view_generation,
        "store_generation": store_generation,
        "lagging": view_lagging || table_lagging,
        "view_lagging": view_lagging,
        "table": table,
        "files": list.as_ref().filter(|l| Some(l.generation) == view_generation.or(store_generation)).map(|l| &l.files),
        "manifest": manifest,
    }))
}

/// `{"status": "passed"|"repaired"|"failed"|"skipped", "detail"}`: redb's integrity check.
pub fn integrity(check: &IntegrityCheck) -> Value {
    match check {
        IntegrityCheck::Passed => json!({ "status": "passed", "detail": null }),
        IntegrityCheck::Repaired => json!({ "status": "repaired", "detail": null }),
        IntegrityCheck::Failed { message } => json!({ "status": "failed", "detail": message }),
        IntegrityCheck::Skipped { reason } => json!({ "status": "skipped", "detail": reason }),
    }
}

/// `verify`: `{"clean", "integrity", "records": {table: n}, "records_total", "files_checked",
/// "findings": [{"table", "key", "message"}], "notes"}`.
pub fn verified(report: &VerifyReport) -> Value {
    json!({
        "clean": report.is_clean(),
        "integrity": integrity(&report.integrity),
        "records": report.records.iter().map(|(name, n)| (unversioned(name).to_owned(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "records_total": report.records_total(),
        "files_checked": report.files_checked,
        "findings": report.findings.iter().map(|f| json!({ "table": f.table, "key": f.key, "message": f.message })).collect::<Vec<_>>(),
        "notes": report.notes,
    })
}

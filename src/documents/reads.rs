//! The read documents: each reading verb's JSON document, made from one [`Snapshot`], written
//! once for the command-line tool (which reads the store file) and the server (which reads its
//! own handle), so `manifestdb show` prints the same document whether it opened the file or
//! asked a server on another host.
//!
//! A name that does not exist is [`DocumentError::NotFound`] with the message the tool prints
//! (exit 4) and the server answers (404).

use std::path::Path;

use serde_json::{Value, json};

use super::{
    attempt, diff as diff_document, effect, generation, manifest as manifest_document, run_show as run_show_document, status, totals,
};
use crate::model::{AttemptInfo, AttemptKey, AttemptStatus, EffectStatus, Manifest, RunSummary, TaskKey};
use crate::{Error, ErrorKind, Snapshot};

/// Why a read document could not be made.
#[derive(Debug)]
#[non_exhaustive]
pub enum DocumentError {
    /// Something named does not exist (a dataset, run, task, generation); the message names it.
    NotFound(String),
    /// The stored figures cannot be summed (a damaged manifest whose totals overflow).
    Fault(String),
    /// The store's read failed.
    Store(Error),
}

impl DocumentError {
    /// The kind of failure, as [`Error::kind`] gives it for a store error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            DocumentError::NotFound(_) => ErrorKind::NotFound,
            DocumentError::Fault(_) => ErrorKind::Fault,
            DocumentError::Store(err) => err.kind(),
        }
    }
}

impl std::fmt::Display for DocumentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DocumentError::NotFound(message) | DocumentError::Fault(message) => f.write_str(message),
            DocumentError::Store(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for DocumentError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DocumentError::Store(err) => Some(err),
            _ => None,
        }
    }
}

impl From<Error> for DocumentError {
    fn from(err: Error) -> DocumentError {
        DocumentError::Store(err)
    }
}

type Doc = Result<Value, DocumentError>;

/// Fails with [`DocumentError::NotFound`], naming the dataset, unless the store knows it (a run
/// was declared or a generation published).
pub fn require_dataset(snapshot: &Snapshot, dataset: &str) -> Result<(), DocumentError> {
    if snapshot.has_dataset(dataset)? {
        Ok(())
    } else {
        Err(DocumentError::NotFound(format!("unknown dataset {dataset:?} (no run declared, nothing published)")))
    }
}

fn manifest_or_not_found(snapshot: &Snapshot, dataset: &str, generation: Option<u64>) -> Result<Manifest, DocumentError> {
    snapshot.manifest(dataset, generation)?.ok_or_else(|| match generation {
        Some(number) => DocumentError::NotFound(format!("dataset {dataset:?} has no generation {number} (never published, or expired)")),
        None => DocumentError::NotFound(format!("dataset {dataset:?} has no published generation")),
    })
}

/// `show` without a dataset (`GET /v1/datasets`): `{"datasets": [{"dataset",
/// "current_generation", "run", "published_at_ms"}]}`, every dataset with a current generation.
pub fn datasets(snapshot: &Snapshot) -> Doc {
    let mut rows = Vec::new();
    for dataset in snapshot.datasets()? {
        if let Some(g) = snapshot.current(&dataset)? {
            rows.push(json!({ "dataset": g.dataset, "current_generation": g.number, "run": g.run, "published_at_ms": g.published_at_ms }));
        }
    }
    Ok(json!({ "datasets": rows }))
}

/// `show --dataset D [--generation N]` (`GET /v1/manifest`): the manifest document
/// ([`super::manifest`]) of the generation, the current one by default; staging paths made
/// absolute under `staging_root`. Each partition says how its figures were obtained
/// (`"figures": "computed"|"reported"`: reported figures are the worker's, not checked, their
/// run declaring no grain) and the totals count the partitions with reported figures
/// (`"reported_partitions"`).
pub fn show(snapshot: &Snapshot, dataset: &str, generation: Option<u64>, staging_root: Option<&Path>) -> Doc {
    require_dataset(snapshot, dataset)?;
    let manifest = manifest_or_not_found(snapshot, dataset, generation)?;
    let current = snapshot.current(dataset)?.map(|g| g.number);
    let mut doc = manifest_document(&manifest, current, staging_root).map_err(DocumentError::Fault)?;
    doc["totals"]["reported_partitions"] = json!(reported_partitions(&manifest));
    Ok(doc)
}

/// The partitions whose figures are the workers' own, reported and not checked.
fn reported_partitions(manifest: &Manifest) -> u64 {
    manifest.partitions.iter().filter(|p| !p.figures_checked).count() as u64
}

/// `current` (`GET /v1/current`): `{"dataset", "generation": generation|null}`.
pub fn current(snapshot: &Snapshot, dataset: &str) -> Doc {
    require_dataset(snapshot, dataset)?;
    let current = snapshot.current(dataset)?;
    Ok(json!({ "dataset": dataset, "generation": current.as_ref().map(generation) }))
}

/// `log [--dataset D]` (`GET /v1/history`): `{"datasets": [{"dataset", "current_generation",
/// "generations": [generation]}]}`, newest first, for one dataset or every dataset with a
/// current generation.
pub fn history(snapshot: &Snapshot, dataset: Option<&str>) -> Doc {
    let datasets = match dataset {
        Some(dataset) => vec![dataset.to_owned()],
        None => snapshot.datasets()?,
    };
    let mut logs = Vec::with_capacity(datasets.len());
    for dataset in datasets {
        require_dataset(snapshot, &dataset)?;
        let current = snapshot.current(&dataset)?.map(|g| g.number);
        let mut history = snapshot.history(&dataset)?;
        if current.is_none() && history.is_empty() {
            return Err(DocumentError::NotFound(format!("dataset {dataset:?} has no published generation")));
        }
        history.reverse();
        logs.push(json!({
            "dataset": dataset,
            "current_generation": current,
            "generations": history.iter().map(generation).collect::<Vec<_>>(),
        }));
    }
    Ok(json!({ "datasets": logs }))
}

/// `diff --dataset D FROM TO` (`GET /v1/diff`): [`super::diff`] of two retained generations,
/// each partition with its `"figures"` as in [`show`].
pub fn diff(snapshot: &Snapshot, dataset: &str, from: u64, to: u64, staging_root: Option<&Path>) -> Doc {
    require_dataset(snapshot, dataset)?;
    let old = manifest_or_not_found(snapshot, dataset, Some(from))?;
    let new = manifest_or_not_found(snapshot, dataset, Some(to))?;
    Ok(diff_document(dataset, from, to, &old.diff(&new), staging_root))
}

fn unknown_run(dataset: &str, run: &str) -> DocumentError {
    DocumentError::NotFound(format!("unknown run {run:?} of dataset {dataset:?}"))
}

/// `run show` (`GET /v1/runs/show`): [`super::run_show`] of the run with every task's accepted
/// attempt and attempts.
pub fn run_show(snapshot: &Snapshot, dataset: &str, run: &str) -> Doc {
    require_dataset(snapshot, dataset)?;
    let info = snapshot.run(dataset, run)?.ok_or_else(|| unknown_run(dataset, run))?;
    let mut tasks = Vec::with_capacity(info.tasks.len());
    for spec in &info.tasks {
        let key = TaskKey::new(&info.dataset, &info.run, &spec.partition);
        tasks.push((spec, snapshot.accepted(&key)?, snapshot.attempts(&key)?));
    }
    Ok(run_show_document(&info, &tasks))
}

/// The state of a listed run: `published`, `complete` (every task has an accepted attempt, so a
/// publish can go ahead unless a gate refuses) or `open`.
pub fn run_state(run: &RunSummary) -> &'static str {
    if run.published_generation.is_some() {
        "published"
    } else if run.accepted_tasks >= run.tasks {
        "complete"
    } else {
        "open"
    }
}

/// `run list --dataset D` (`GET /v1/runs`): `{"dataset", "runs": [{"run", "snapshot",
/// "declared_at_ms", "state", "tasks", "accepted_tasks", "published_generation"}]}`.
pub fn run_list(snapshot: &Snapshot, dataset: &str) -> Doc {
    require_dataset(snapshot, dataset)?;
    let runs = snapshot.runs(dataset)?;
    Ok(json!({
        "dataset": dataset,
        "runs": runs.iter().map(|r| json!({
            "run": r.run,
            "snapshot": r.snapshot,
            "declared_at_ms": r.declared_at_ms,
            "state": run_state(r),
            "tasks": r.tasks,
            "accepted_tasks": r.accepted_tasks,
            "published_generation": r.published_generation,
        })).collect::<Vec<_>>(),
    }))
}

/// `attempt list --dataset D --run R [--partition P]` (`GET /v1/attempts`): `{"dataset",
/// "run", "partition", "attempt_lifetime_max_ms", "now_ms", "attempts": [{"partition",
/// "attempt", "status", "accepted", "started_at_ms", "heartbeat_at_ms", "abandoned_at_ms",
/// "lease_expires_at_ms", "staging_rel"}]}`; a running attempt not recorded abandoned holds a
/// lease from its last sign of life for the store's attempt lifetime.
pub fn attempt_list(snapshot: &Snapshot, dataset: &str, run: &str, partition: Option<&str>, now_ms: u64) -> Doc {
    require_dataset(snapshot, dataset)?;
    let info = snapshot.run(dataset, run)?.ok_or_else(|| unknown_run(dataset, run))?;
    let partitions: Vec<&str> = match partition {
        Some(partition) => match info.tasks.iter().find(|t| t.partition == partition) {
            Some(task) => vec![task.partition.as_str()],
            None => {
                return Err(DocumentError::NotFound(format!(
                    "run {run:?} of dataset {dataset:?} declares no task for partition {partition:?}"
                )));
            }
        },
        None => info.tasks.iter().map(|t| t.partition.as_str()).collect(),
    };
    let lease_ms = snapshot.attempt_lifetime_max_ms()?;
    let lease_expiry = |a: &AttemptInfo| {
        (a.status == AttemptStatus::Running && a.abandoned_at_ms.is_none()).then(|| a.heartbeat_at_ms.saturating_add(lease_ms))
    };
    let mut rows = Vec::new();
    for partition in partitions {
        let task = TaskKey::new(&info.dataset, &info.run, partition);
        let accepted = snapshot.accepted(&task)?;
        for a in snapshot.attempts(&task)? {
            rows.push(json!({
                "partition": a.key.task.partition,
                "attempt": a.key.attempt,
                "status": status(&a.status).0,
                "accepted": accepted == Some(a.key.attempt),
                "started_at_ms": a.started_at_ms,
                "heartbeat_at_ms": a.heartbeat_at_ms,
                "abandoned_at_ms": a.abandoned_at_ms,
                "lease_expires_at_ms": lease_expiry(&a),
                "staging_rel": a.staging_rel,
            }));
        }
    }
    Ok(json!({
        "dataset": info.dataset,
        "run": info.run,
        "partition": partition,
        "attempt_lifetime_max_ms": lease_ms,
        "now_ms": now_ms,
        "attempts": rows,
    }))
}

/// One attempt (`GET /v1/attempts/show`): [`super::attempt`] plus `"dataset", "run",
/// "partition"`, `"staging_dir"` (absolute under `staging_root`, else null) and the run's
/// `"grain"` (null for a run without one), for a worker that describes its own files.
pub fn attempt_show(snapshot: &Snapshot, key: &AttemptKey, staging_root: Option<&Path>) -> Doc {
    let task = &key.task;
    let info = snapshot.attempt(key)?.ok_or_else(|| {
        DocumentError::Store(Error::UnknownAttempt {
            dataset: task.dataset.clone(),
            run: task.run.clone(),
            partition: task.partition.clone(),
            attempt: key.attempt,
        })
    })?;
    let grain = snapshot.run(&task.dataset, &task.run)?.and_then(|run| run.grain);
    let mut doc = json!({ "dataset": task.dataset, "run": task.run, "partition": task.partition });
    if let (Value::Object(doc), Value::Object(fields)) = (&mut doc, attempt(&info)) {
        doc.extend(fields);
        doc.insert("staging_dir".into(), json!(staging_root.map(|root| root.join(&info.staging_rel))));
        doc.insert("grain".into(), json!(grain.as_ref().map(super::grain)));
    }
    Ok(doc)
}

/// `effects list --dataset D [--run R] [--ready]` (`GET /v1/effects`): `{"effects": [effect]}`.
pub fn effects(snapshot: &Snapshot, dataset: &str, run: Option<&str>, ready: bool) -> Doc {
    require_dataset(snapshot, dataset)?;
    let effects = match run {
        Some(run) => {
            if snapshot.run(dataset, run)?.is_none() {
                return Err(unknown_run(dataset, run));
            }
            let mut effects = snapshot.effects(dataset, run)?;
            if ready {
                effects.retain(|e| matches!(e.status, EffectStatus::Ready { .. }));
            }
            effects
        }
        None if ready => snapshot.ready_effects(dataset)?,
        None => snapshot.dataset_effects(dataset)?,
    };
    Ok(json!({ "effects": effects.iter().map(effect).collect::<Vec<_>>() }))
}

/// A table name without its version suffix (`runs_v1` -> `runs`), so the JSON keys do not
/// change when a table's record format does.
pub fn unversioned(name: &str) -> &str {
    match name.rsplit_once("_v") {
        Some((base, version)) if !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => name,
    }
}

/// `stats` (`GET /v1/stats`): `{"store", "file_bytes", "tables": {name: entries}, "datasets":
/// [{"dataset", "current_generation", "partitions", "rows", "files", "bytes",
/// "reported_partitions"}]}` (the last: partitions whose figures are reported, not checked) for the store
/// at `store` (a file's size read now; `null` for a PostgreSQL database), per dataset the current generation's sizes.
pub fn stats(snapshot: &Snapshot, store: Option<&Path>) -> Doc {
    // A store in a PostgreSQL database has no file: its size is the server's business (null).
    let is_database = |path: &Path| path.to_str().is_some_and(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"));
    let file_bytes = match store {
        Some(path) if !is_database(path) => Some(
            std::fs::metadata(path)
                .map_err(|source| Error::Io { context: format!("reading metadata of {}", path.display()), source })?
                .len(),
        ),
        _ => None,
    };
    let tables = snapshot.table_entries()?;
    let mut per_dataset = Vec::new();
    for dataset in snapshot.datasets()? {
        if let Some(manifest) = snapshot.manifest(&dataset, None)? {
            let t = totals(&manifest.partitions).map_err(DocumentError::Fault)?;
            let reported = reported_partitions(&manifest);
            per_dataset.push(json!({
                "dataset": dataset, "current_generation": manifest.generation.number, "partitions": t.partitions,
                "rows": t.rows, "files": t.files, "bytes": t.bytes, "reported_partitions": reported,
            }));
        }
    }
    Ok(json!({
        "store": store,
        "file_bytes": file_bytes,
        "tables": tables.iter().map(|(name, n)| (unversioned(name).to_owned(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "datasets": per_dataset,
    }))
}

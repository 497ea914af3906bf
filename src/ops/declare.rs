//! Declaring a run.

use crate::error::{Error, Result};
use crate::meta::{Meta, Scope, TxnEnd};
use crate::model::{DeclareOutcome, RunSpec, TaskKey};
use crate::records::{RunRecord, TaskRecord};
use crate::rules::declare;

/// Declares `spec` at `now_ms`: an identical re-declaration writes nothing, a different one is
/// [`Error::RunConflict`] naming the first difference. The tasks of an existing run are read
/// one by one, up to the first difference.
pub(crate) fn declare_run(meta: &mut dyn Meta, spec: &RunSpec, now_ms: u64) -> Result<TxnEnd<DeclareOutcome>> {
    meta.lock(Scope::Run(&spec.dataset, &spec.run))?;
    if let Some(existing) = meta.run(&spec.dataset, &spec.run)? {
        let conflict = |detail: String| Error::RunConflict { dataset: spec.dataset.clone(), run: spec.run.clone(), detail };
        let declared = declare::Declared { snapshot: &existing.snapshot, grain: existing.grain.as_ref(), task_count: existing.task_count };
        if let Some(detail) = declare::run_difference(spec, declared) {
            return Err(conflict(detail));
        }
        for task in &spec.tasks {
            let stored = meta.task(&TaskKey::new(&spec.dataset, &spec.run, &task.partition))?;
            let stored = stored.map(|t| declare::DeclaredTask { expected_rows: t.expected_rows, expected_total: t.expected_total });
            if let Some(detail) = declare::task_difference(task, stored) {
                return Err(conflict(detail));
            }
        }
        return Ok(TxnEnd::Abort(DeclareOutcome::AlreadyDeclared));
    }
    let run = RunRecord {
        snapshot: spec.snapshot.clone(),
        task_count: spec.tasks.len() as u64,
        declared_at_ms: now_ms,
        published_generation: None,
        grain: spec.grain.clone(),
    };
    meta.put_run(&spec.dataset, &spec.run, &run)?;
    for task in &spec.tasks {
        meta.put_task(
            &TaskKey::new(&spec.dataset, &spec.run, &task.partition),
            &TaskRecord { expected_rows: task.expected_rows, expected_total: task.expected_total, next_attempt: 1 },
        )?;
    }
    Ok(TxnEnd::Commit(DeclareOutcome::Declared))
}

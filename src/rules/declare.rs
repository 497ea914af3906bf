//! Declaring a run again: identical is a no-op, anything else is a conflict.
//!
//! Pure: the operation reads the stored run and, one by one, the stored tasks the new
//! declaration names; these functions say whether they match. A declaration is compared field
//! by field so the first difference is named.

use crate::grain::Grain;
use crate::model::{RunSpec, TaskSpec};

/// The stored declaration of a run, as far as a re-declaration is compared with it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Declared<'a> {
    pub(crate) snapshot: &'a str,
    pub(crate) grain: Option<&'a Grain>,
    pub(crate) task_count: u64,
}

/// A stored task's expectations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeclaredTask {
    pub(crate) expected_rows: u64,
    pub(crate) expected_total: Option<i64>,
}

/// The first difference between `spec` and the stored run, other than its tasks' own
/// expectations ([`task_difference`]), or `None`.
pub(crate) fn run_difference(spec: &RunSpec, declared: Declared<'_>) -> Option<String> {
    if declared.snapshot != spec.snapshot {
        return Some(format!("snapshot {:?} was declared, not {:?}", declared.snapshot, spec.snapshot));
    }
    if declared.grain != spec.grain.as_ref() {
        return Some(format!("grain {} was declared, not {}", grain_text(declared.grain), grain_text(spec.grain.as_ref())));
    }
    if declared.task_count != spec.tasks.len() as u64 {
        let verb = if declared.task_count == 1 { "was" } else { "were" };
        return Some(format!("{} {verb} declared, not {}", crate::error::count(declared.task_count, "task"), spec.tasks.len()));
    }
    None
}

/// A grain in words: `none`, or `(csv: one row per store, item; measure units at scale 2)`.
fn grain_text(grain: Option<&crate::grain::Grain>) -> String {
    match grain {
        None => "none".to_owned(),
        Some(g) => format!("({}: one row per {}; measure {} at scale {})", g.format, g.keys.join(", "), g.measure, g.measure_scale),
    }
}

/// The difference between a task of the new declaration and the stored task of its
/// partition (`None` if no such task is stored), or `None` if they agree. With the task count
/// equal ([`run_difference`]) and every task of `spec` stored with its expectations, the two
/// declarations are identical.
pub(crate) fn task_difference(task: &TaskSpec, stored: Option<DeclaredTask>) -> Option<String> {
    match stored {
        None => Some(format!("partition {:?} was not declared", task.partition)),
        Some(stored) if stored.expected_rows != task.expected_rows || stored.expected_total != task.expected_total => Some(format!(
            "partition {:?} was declared with rows {} and total {}",
            task.partition,
            stored.expected_rows,
            crate::error::figure(stored.expected_total)
        )),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grain::{DataFormat, Grain};

    fn spec() -> RunSpec {
        RunSpec {
            dataset: "d".into(),
            run: "r".into(),
            snapshot: "s@1".into(),
            tasks: vec![TaskSpec { partition: "p=1".into(), expected_rows: 2, expected_total: Some(7) }],
            grain: None,
            trust_reported_figures: true,
        }
    }

    #[test]
    fn an_identical_declaration_has_no_difference_and_each_field_is_named() {
        let spec = spec();
        let same = Declared { snapshot: "s@1", grain: None, task_count: 1 };
        assert_eq!(run_difference(&spec, same), None);
        let stored = DeclaredTask { expected_rows: 2, expected_total: Some(7) };
        assert_eq!(task_difference(&spec.tasks[0], Some(stored)), None);
        assert!(run_difference(&spec, Declared { snapshot: "s@2", ..same }).is_some_and(|d| d.contains("snapshot \"s@2\"")));
        let grain = Grain::new(DataFormat::Csv, &["k"], "v");
        assert!(run_difference(&spec, Declared { grain: Some(&grain), ..same }).is_some_and(|d| d.starts_with("grain")));
        assert_eq!(run_difference(&spec, Declared { task_count: 2, ..same }).as_deref(), Some("2 tasks were declared, not 1"));
        assert_eq!(task_difference(&spec.tasks[0], None).as_deref(), Some("partition \"p=1\" was not declared"));
        let other = DeclaredTask { expected_rows: 3, ..stored };
        assert_eq!(task_difference(&spec.tasks[0], Some(other)).as_deref(), Some("partition \"p=1\" was declared with rows 3 and total 7"));
    }
}

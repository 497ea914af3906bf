//! `run declare`, `run show` and `run list`.

use manifestdb::{DataFormat, DeclareOutcome, Grain, RunSpec, RunSummary, TaskKey, TaskSpec};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{parse_json, require_dataset};
use crate::args::{DeclareArgs, RunListArgs, RunShowArgs};
use crate::exit::{Exit, not_found, usage};
use crate::json;
use crate::location::LocationArgs;
use crate::output::{Out, Table, escape, opt, utc};

/// The `--from` document of `run declare`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunInput {
    dataset: String,
    run: String,
    snapshot: String,
    tasks: Vec<TaskInput>,
    #[serde(default)]
    grain: Option<GrainInput>,
}

/// The `grain` object of a `--from` run declaration.
#[derive(Debug, Deserialize)]
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

fn grain_from(format: &str, keys: Vec<String>, measure: String, scale: u32) -> anyhow::Result<Grain> {
    let format = DataFormat::from_name(format).ok_or_else(|| usage(format!("unknown grain format {format:?} (csv or parquet)")))?;
    Ok(Grain { format, keys, measure, measure_scale: scale })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskInput {
    partition: String,
    expected_rows: u64,
    #[serde(default)]
    expected_total: Option<i64>,
}

fn spec_from(args: &DeclareArgs) -> anyhow::Result<RunSpec> {
    if let Some(path) = &args.from {
        let input: RunInput = parse_json(path, "run declaration")?;
        return Ok(RunSpec {
            dataset: input.dataset,
            run: input.run,
            snapshot: input.snapshot,
            tasks: input
                .tasks
                .into_iter()
                .map(|t| TaskSpec { partition: t.partition, expected_rows: t.expected_rows, expected_total: t.expected_total })
                .collect(),
            grain: input.grain.map(|g| grain_from(&g.format, g.keys, g.measure, g.scale)).transpose()?,
        });
    }
    // clap enforces these when --from is absent; the checks keep this function honest alone.
    let (Some(dataset), Some(run), Some(snapshot)) = (&args.dataset, &args.run, &args.snapshot) else {
        return Err(usage("--dataset, --run and --snapshot are required without --from"));
    };
    let grain = match &args.measure {
        Some(measure) if !args.grain.is_empty() => Some(grain_from(&args.format, args.grain.clone(), measure.clone(), args.scale)?),
        _ => None,
    };
    Ok(RunSpec { dataset: dataset.clone(), run: run.clone(), snapshot: snapshot.clone(), tasks: args.tasks.clone(), grain })
}

fn task_json(t: &TaskSpec) -> Value {
    json!({ "partition": t.partition, "expected_rows": t.expected_rows, "expected_total": t.expected_total })
}

/// `run declare`.
pub fn declare(location: &LocationArgs, out: &mut Out, args: &DeclareArgs) -> anyhow::Result<Exit> {
    let spec = spec_from(args)?;
    let store = location.open_writer()?;
    let outcome = store.declare_run(&spec)?;
    let outcome_name = match outcome {
        DeclareOutcome::Declared => "declared",
        DeclareOutcome::AlreadyDeclared => "already_declared",
    };
    let doc = json!({
        "dataset": spec.dataset,
        "run": spec.run,
        "snapshot": spec.snapshot,
        "outcome": outcome_name,
        "grain": spec.grain.as_ref().map(json::grain),
        "tasks": spec.tasks.iter().map(task_json).collect::<Vec<_>>(),
    });
    crate::location::close_writer(store)?;
    out.emit(&doc, |w| {
        let verb = if outcome == DeclareOutcome::Declared { "declared" } else { "already declared (identical; nothing written)" };
        writeln!(
            w,
            "run {} of {} {verb}: snapshot {}, {} tasks",
            escape(&spec.run),
            escape(&spec.dataset),
            escape(&spec.snapshot),
            spec.tasks.len()
        )?;
        writeln!(w, "{}", escape(&json::grain_line(spec.grain.as_ref())))?;
        let mut table = Table::new(vec!["PARTITION", "EXPECTED ROWS", "EXPECTED TOTAL"]);
        for t in &spec.tasks {
            table.row(vec![t.partition.clone(), t.expected_rows.to_string(), opt(t.expected_total)]);
        }
        table.write(w)
    })?;
    Ok(Exit::Success)
}

/// `run show`.
pub fn show(location: &LocationArgs, out: &mut Out, args: &RunShowArgs) -> anyhow::Result<Exit> {
    let store = location.open_reader()?;
    let snapshot = store.snapshot()?;
    require_dataset(&snapshot, &args.dataset)?;
    let Some(info) = snapshot.run(&args.dataset, &args.run)? else {
        return Err(not_found(format!("unknown run {:?} of dataset {:?}", args.run, args.dataset)));
    };
    let mut tasks = Vec::with_capacity(info.tasks.len());
    for spec in &info.tasks {
        let key = TaskKey::new(&info.dataset, &info.run, &spec.partition);
        tasks.push((spec, snapshot.accepted(&key)?, snapshot.attempts(&key)?));
    }
    drop(snapshot);
    let doc = json!({
        "dataset": info.dataset,
        "run": info.run,
        "snapshot": info.snapshot,
        "declared_at_ms": info.declared_at_ms,
        "published_generation": info.published_generation,
        "grain": info.grain.as_ref().map(json::grain),
        "tasks": tasks.iter().map(|(spec, accepted, attempts)| {
            let mut task = task_json(spec);
            task["accepted_attempt"] = json!(accepted);
            task["attempts"] = attempts.iter().map(json::attempt).collect();
            task
        }).collect::<Vec<_>>(),
    });
    crate::location::close_reader(store)?;
    out.emit(&doc, |w| {
        let published = info.published_generation.map_or_else(|| "not published".to_owned(), |g| format!("published as generation {g}"));
        writeln!(
            w,
            "run {} of {}: snapshot {}, declared {}, {published}",
            escape(&info.run),
            escape(&info.dataset),
            escape(&info.snapshot),
            utc(info.declared_at_ms)
        )?;
        writeln!(w, "{}", escape(&json::grain_line(info.grain.as_ref())))?;
        let mut table = Table::new(vec!["PARTITION", "EXPECTED", "ATTEMPT", "STATUS", "ROWS", "TOTAL", "ACCEPTED", "NOTE"]);
        for (spec, accepted, attempts) in &tasks {
            let expected = format!("{} / {}", spec.expected_rows, opt(spec.expected_total));
            if attempts.is_empty() {
                table.row(vec![
                    spec.partition.clone(),
                    expected.clone(),
                    "-".into(),
                    "no attempt".into(),
                    "-".into(),
                    "-".into(),
                    "".into(),
                    "".into(),
                ]);
            }
            for a in attempts {
                let (status, _) = json::status(&a.status);
                let note = match &a.status {
                    manifestdb::AttemptStatus::Validated(manifestdb::Verdict::Invalid(failures)) => {
                        failures.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
                    }
                    _ => String::new(),
                };
                table.row(vec![
                    spec.partition.clone(),
                    expected.clone(),
                    a.key.attempt.to_string(),
                    status.to_owned(),
                    opt(a.reconciliation.as_ref().and_then(|r| r.effective().0).or(a.candidate.as_ref().and_then(|c| c.rows))),
                    opt(a.reconciliation.as_ref().and_then(|r| r.effective().1).or(a.candidate.as_ref().and_then(|c| c.total))),
                    if *accepted == Some(a.key.attempt) { "*".into() } else { String::new() },
                    note,
                ]);
            }
        }
        table.write(w)
    })?;
    Ok(Exit::Success)
}

/// The state of a listed run: `published`, `complete` (every task has an accepted attempt, so a
/// publish can go ahead unless a gate refuses) or `open`.
fn run_state(run: &RunSummary) -> &'static str {
    if run.published_generation.is_some() {
        "published"
    } else if run.accepted_tasks >= run.tasks {
        "complete"
    } else {
        "open"
    }
}

/// `run list`.
pub fn list(location: &LocationArgs, out: &mut Out, args: &RunListArgs) -> anyhow::Result<Exit> {
    let store = location.open_reader()?;
    let snapshot = store.snapshot()?;
    require_dataset(&snapshot, &args.dataset)?;
    let runs = snapshot.runs(&args.dataset)?;
    drop(snapshot);
    let doc = json!({
        "dataset": args.dataset,
        "runs": runs.iter().map(|r| json!({
            "run": r.run,
            "snapshot": r.snapshot,
            "declared_at_ms": r.declared_at_ms,
            "state": run_state(r),
            "tasks": r.tasks,
            "accepted_tasks": r.accepted_tasks,
            "published_generation": r.published_generation,
        })).collect::<Vec<_>>(),
    });
    out.emit(&doc, |w| {
        let mut table = Table::new(vec!["RUN", "SNAPSHOT", "DECLARED", "STATE", "TASKS", "ACCEPTED", "GENERATION"]);
        for r in &runs {
            table.row(vec![
                r.run.clone(),
                r.snapshot.clone(),
                utc(r.declared_at_ms),
                run_state(r).to_owned(),
                r.tasks.to_string(),
                r.accepted_tasks.to_string(),
                opt(r.published_generation),
            ]);
        }
        table.write(w)?;
        writeln!(w, "({} runs)", runs.len())
    })?;
    Ok(Exit::Success)
}

//! `run declare`, `run show` and `run list`.

use manifestdb::{RunSpec, RunSummary, TaskKey};
use serde_json::{Value, json};

use super::{parse_json, require_dataset};
use crate::args::{DeclareArgs, RunListArgs, RunShowArgs};
use crate::exit::{Exit, not_found, usage};
use crate::json;
use crate::location::LocationArgs;
use crate::output::{Out, Table, escape, opt, utc};
use crate::remote::Remote;

fn spec_from(args: &DeclareArgs) -> anyhow::Result<RunSpec> {
    if let Some(path) = &args.from {
        let input: json::RunInput = parse_json(path, "run declaration")?;
        return Ok(input.into_spec()?);
    }
    // clap enforces these when --from is absent; the checks keep this function honest alone.
    let (Some(dataset), Some(run), Some(snapshot)) = (&args.dataset, &args.run, &args.snapshot) else {
        return Err(usage("--dataset, --run and --snapshot are required without --from"));
    };
    let grain = match &args.measure {
        Some(measure) if !args.grain.is_empty() => Some(json::grain_from(&args.format, args.grain.clone(), measure.clone(), args.scale)?),
        _ => None,
    };
    Ok(RunSpec { dataset: dataset.clone(), run: run.clone(), snapshot: snapshot.clone(), tasks: args.tasks.clone(), grain })
}

/// The declaration as `POST /v1/runs/declare` takes it ([`json::RunInput`]).
fn run_input(spec: &RunSpec) -> Value {
    json!({
        "dataset": spec.dataset,
        "run": spec.run,
        "snapshot": spec.snapshot,
        "tasks": spec.tasks.iter().map(json::task).collect::<Vec<_>>(),
        "grain": spec.grain.as_ref().map(json::grain),
    })
}

/// `run declare`.
pub fn declare(location: &LocationArgs, out: &mut Out, args: &DeclareArgs) -> anyhow::Result<Exit> {
    let spec = spec_from(args)?;
    let doc = match Remote::find(location)? {
        Some(mut server) => server.post("/v1/runs/declare", &run_input(&spec))?,
        None => {
            let store = location.open_writer()?;
            let outcome = store.declare_run(&spec)?;
            crate::location::close_writer(store)?;
            json::declared(&spec, outcome)
        }
    };
    out.emit(&doc, |w| {
        let verb = if doc["outcome"] == "declared" { "declared" } else { "already declared (identical; nothing written)" };
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
    let doc = json::run_show(&info, &tasks);
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

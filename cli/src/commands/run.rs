//! `run declare`, `run show` and `run list`.

use manifestdb::RunSpec;
use serde_json::{Value, json};

use super::parse_json;
use crate::args::{DeclareArgs, RunListArgs, RunShowArgs};
use crate::exit::{Exit, usage};
use crate::json;
use crate::location::LocationArgs;
use crate::output::{Out, Table, count, escape, opt, text, utc};
use crate::remote::{self, Remote};

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
    // Without a grain the published figures are the workers' own, unchecked: that is said in
    // words, never the result of a flag left off.
    if grain.is_none() && !args.trust_reported_figures {
        return Err(usage(
            "declare the run's grain (--grain COLUMNS --measure COLUMN) so that validation reads the data, or pass \
             --trust-reported-figures to publish the rows and totals workers report, unchecked",
        ));
    }
    Ok(RunSpec {
        dataset: dataset.clone(),
        run: run.clone(),
        snapshot: snapshot.clone(),
        tasks: args.tasks.clone(),
        grain,
        trust_reported_figures: args.trust_reported_figures,
    })
}

/// The declaration as `POST /v1/runs/declare` takes it ([`json::RunInput`]).
fn run_input(spec: &RunSpec) -> Value {
    json!({
        "dataset": spec.dataset,
        "run": spec.run,
        "snapshot": spec.snapshot,
        "tasks": spec.tasks.iter().map(json::task).collect::<Vec<_>>(),
        "grain": spec.grain.as_ref().map(json::grain),
        "trust_reported_figures": spec.trust_reported_figures,
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
            "run {} of {} {verb}: snapshot {}, {}",
            escape(&spec.run),
            escape(&spec.dataset),
            escape(&spec.snapshot),
            count(spec.tasks.len() as u64, "task")
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
    let query = json!({ "dataset": args.dataset, "run": args.run });
    let doc = remote::read(location, "/v1/runs/show", &query, |snapshot| json::reads::run_show(snapshot, &args.dataset, &args.run))?;
    out.emit(&doc, |w| {
        let published = match doc["published_generation"].as_u64() {
            Some(g) => format!("published as generation {g}"),
            None => "not published".to_owned(),
        };
        writeln!(
            w,
            "run {} of {}: snapshot {}, declared {}, {published}",
            escape(&text(&doc["run"])),
            escape(&text(&doc["dataset"])),
            escape(&text(&doc["snapshot"])),
            utc(doc["declared_at_ms"].as_u64().unwrap_or(0))
        )?;
        writeln!(w, "{}", escape(&grain_line(&doc["grain"])))?;
        let mut table = Table::new(vec!["PARTITION", "EXPECTED", "ATTEMPT", "STATUS", "ROWS", "TOTAL", "ACCEPTED", "NOTE"]);
        for task in doc["tasks"].as_array().into_iter().flatten() {
            let partition = text(&task["partition"]);
            let expected = format!("{} / {}", text(&task["expected_rows"]), text(&task["expected_total"]));
            let attempts = task["attempts"].as_array().map(Vec::as_slice).unwrap_or_default();
            if attempts.is_empty() {
                table.row(vec![
                    partition.clone(),
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
                let note = match a["status"].as_str() {
                    Some("invalid") => {
                        a["failures"].as_array().into_iter().flatten().map(|f| text(&f["message"])).collect::<Vec<_>>().join("; ")
                    }
                    _ => String::new(),
                };
                // The figures a publish uses (`Reconciliation::effective`): computed where the
                // store read the data, reported otherwise; the candidate's before a verdict.
                let figure = |name: &str| {
                    let r = &a["reconciliation"];
                    let basis = if r["basis"].as_str().is_some_and(|b| b.starts_with("read_")) { "computed" } else { "reported" };
                    let effective = &r[basis][name];
                    if effective.is_null() { text(&a["candidate"][name]) } else { text(effective) }
                };
                table.row(vec![
                    partition.clone(),
                    expected.clone(),
                    text(&a["attempt"]),
                    text(&a["status"]),
                    figure("rows"),
                    figure("total"),
                    if task["accepted_attempt"] == a["attempt"] { "*".into() } else { String::new() },
                    note,
                ]);
            }
        }
        table.write(w)
    })?;
    Ok(Exit::Success)
}

/// The grain line of a run document's `grain` ([`json::grain`]), as [`json::grain_line`] words it.
fn grain_line(grain: &Value) -> String {
    match (grain["format"].as_str(), grain["keys"].as_array(), grain["measure"].as_str()) {
        (Some(format), Some(keys), Some(measure)) => format!(
            "grain: {format} files, one row per ({}), measure {measure} at scale {}: validation reads the data",
            keys.iter().map(text).collect::<Vec<_>>().join(", "),
            text(&grain["scale"])
        ),
        _ => json::grain_line(None),
    }
}

/// `run list`.
pub fn list(location: &LocationArgs, out: &mut Out, args: &RunListArgs) -> anyhow::Result<Exit> {
    let doc =
        remote::read(location, "/v1/runs", &json!({ "dataset": args.dataset }), |snapshot| json::reads::run_list(snapshot, &args.dataset))?;
    let runs = doc["runs"].as_array().map(Vec::as_slice).unwrap_or_default();
    out.emit(&doc, |w| {
        let mut table = Table::new(vec!["RUN", "SNAPSHOT", "DECLARED", "STATE", "TASKS", "ACCEPTED", "GENERATION"]);
        for r in runs {
            table.row(vec![
                text(&r["run"]),
                text(&r["snapshot"]),
                utc(r["declared_at_ms"].as_u64().unwrap_or(0)),
                text(&r["state"]),
                text(&r["tasks"]),
                text(&r["accepted_tasks"]),
                text(&r["published_generation"]),
            ]);
        }
        table.write(w)?;
        writeln!(w, "({})", count(runs.len() as u64, "run"))
    })?;
    Ok(Exit::Success)
}

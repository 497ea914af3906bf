//! Read-only verbs: `show`, `log`, `diff`, `stats`. Each makes its document from one snapshot
//! (`manifestdb::documents::reads`, so it sees one committed state even while a writer
//! publishes), through the store's server when one runs, and prints it.

use serde_json::{Value, json};

use crate::args::{DiffArgs, LogArgs, ShowArgs};
use crate::exit::Exit;
use crate::json::reads;
use crate::location::LocationArgs;
use crate::output::{Out, Table, count, escape, text, utc};
use crate::remote;

/// The number in a document's field (0 if absent).
fn number(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

/// The entries of a document's array field.
fn items(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// How a partition's figures were obtained, in words: "checked" (the store read the data at
/// the run's grain) or "reported, not checked" (the worker's own figures).
fn figures_note(figures: &Value) -> String {
    match figures.as_str() {
        Some("computed") => "checked".to_owned(),
        Some("reported") => "reported, not checked".to_owned(),
        _ => "-".to_owned(),
    }
}

/// `(reported, not checked)` after a partition's figures when they are the worker's own.
fn figures_suffix(p: &Value) -> &'static str {
    if p["figures"] == "reported" { ", reported, not checked" } else { "" }
}

/// A partition's files and bytes, from its document.
fn files_and_bytes(p: &Value) -> (usize, u64) {
    let files = items(&p["files"]);
    (files.len(), files.iter().map(|f| number(&f["size_bytes"])).sum())
}

/// `show`.
pub fn show(location: &LocationArgs, out: &mut Out, args: &ShowArgs) -> anyhow::Result<Exit> {
    let Some(dataset) = &args.dataset else {
        let doc = remote::read(location, "/v1/datasets", &json!({}), reads::datasets)?;
        out.emit(&doc, |w| {
            let mut table = Table::new(vec!["DATASET", "GENERATION", "RUN", "PUBLISHED"]);
            for g in items(&doc["datasets"]) {
                table.row(vec![text(&g["dataset"]), text(&g["current_generation"]), text(&g["run"]), utc(number(&g["published_at_ms"]))]);
            }
            table.write(w)
        })?;
        return Ok(Exit::Success);
    };
    let staging = location.staging_root();
    let doc = remote::read(location, "/v1/manifest", &json!({ "dataset": dataset, "generation": args.generation }), |snapshot| {
        reads::show(snapshot, dataset, args.generation, staging.as_deref())
    })?;
    out.emit(&doc, |w| {
        let g = &doc["generation"];
        writeln!(
            w,
            "{} generation {}{}: {} of run {}, snapshot {}, at {}",
            escape(&text(&g["dataset"])),
            text(&g["number"]),
            if doc["current"] == true { " (current)" } else { "" },
            text(&g["kind"]),
            escape(&text(&g["run"])),
            escape(&text(&g["snapshot"])),
            utc(number(&g["published_at_ms"]))
        )?;
        let mut table = Table::new(vec!["PARTITION", "SINCE", "RUN", "ATTEMPT", "ROWS", "TOTAL", "FILES", "BYTES", "FIGURES"]);
        for p in items(&doc["partitions"]) {
            let (files, bytes) = files_and_bytes(p);
            table.row(vec![
                text(&p["partition"]),
                text(&p["since_generation"]),
                text(&p["run"]),
                text(&p["attempt"]),
                text(&p["rows"]),
                text(&p["total"]),
                files.to_string(),
                bytes.to_string(),
                figures_note(&p["figures"]),
            ]);
        }
        let t = &doc["totals"];
        let reported = number(&t["reported_partitions"]);
        table.row(vec![
            format!("({})", count(number(&t["partitions"]), "partition")),
            String::new(),
            String::new(),
            String::new(),
            text(&t["rows"]),
            text(&t["total"]),
            text(&t["files"]),
            text(&t["bytes"]),
            if reported > 0 { format!("{reported} reported, not checked") } else { String::new() },
        ]);
        table.write(w)
    })?;
    Ok(Exit::Success)
}

/// `log`.
pub fn log(location: &LocationArgs, out: &mut Out, args: &LogArgs) -> anyhow::Result<Exit> {
    let doc = remote::read(location, "/v1/history", &json!({ "dataset": args.dataset }), |snapshot| {
        reads::history(snapshot, args.dataset.as_deref())
    })?;
    out.emit(&doc, |w| {
        let mut table = Table::new(vec!["DATASET", "GEN", "PARENT", "KIND", "RUN", "SNAPSHOT", "PUBLISHED", "PARTITIONS", "NOTE"]);
        for log in items(&doc["datasets"]) {
            for g in items(&log["generations"]) {
                let mut note = Vec::new();
                if g["number"] == log["current_generation"] {
                    note.push("current".to_owned());
                }
                let rollback = &g["rollback"];
                if rollback.is_object() {
                    note.push(format!(
                        "restores {} ({}: {})",
                        text(&rollback["restored"]),
                        text(&rollback["actor"]),
                        text(&rollback["reason"])
                    ));
                }
                let accepted = &g["nondeterminism_accepted"];
                if accepted.is_object() {
                    note.push(format!("non-determinism accepted: {}", text(&accepted["reason"])));
                }
                table.row(vec![
                    text(&log["dataset"]),
                    text(&g["number"]),
                    text(&g["parent"]),
                    text(&g["kind"]),
                    text(&g["run"]),
                    text(&g["snapshot"]),
                    utc(number(&g["published_at_ms"])),
                    text(&g["partitions_replaced"]),
                    note.join("; "),
                ]);
            }
        }
        table.write(w)
    })?;
    Ok(Exit::Success)
}

/// `diff`.
pub fn diff(location: &LocationArgs, out: &mut Out, args: &DiffArgs) -> anyhow::Result<Exit> {
    let staging = location.staging_root();
    let query = json!({ "dataset": args.dataset, "from": args.from, "to": args.to });
    let doc = remote::read(location, "/v1/diff", &query, |snapshot| {
        reads::diff(snapshot, &args.dataset, args.from, args.to, staging.as_deref())
    })?;
    let (added, replaced, removed) = (items(&doc["added"]), items(&doc["replaced"]), items(&doc["removed"]));
    out.emit(&doc, |w| {
        writeln!(w, "{} generation {} -> {}", escape(&args.dataset), args.from, args.to)?;
        for p in added {
            writeln!(
                w,
                "+ {}  (run {} attempt {}, rows {}, total {}{})",
                escape(&text(&p["partition"])),
                escape(&text(&p["run"])),
                text(&p["attempt"]),
                text(&p["rows"]),
                text(&p["total"]),
                figures_suffix(p)
            )?;
        }
        for r in replaced {
            let (old, new) = (&r["from"], &r["to"]);
            writeln!(
                w,
                "~ {}  (run {} attempt {} -> run {} attempt {}; rows {} -> {}, total {} -> {}{})",
                escape(&text(&r["partition"])),
                escape(&text(&old["run"])),
                text(&old["attempt"]),
                escape(&text(&new["run"])),
                text(&new["attempt"]),
                text(&old["rows"]),
                text(&new["rows"]),
                text(&old["total"]),
                text(&new["total"]),
                figures_suffix(new)
            )?;
        }
        for p in removed {
            writeln!(w, "- {}  (run {} attempt {})", escape(&text(&p["partition"])), escape(&text(&p["run"])), text(&p["attempt"]))?;
        }
        writeln!(w, "{} added, {} replaced, {} removed, {} unchanged", added.len(), replaced.len(), removed.len(), text(&doc["unchanged"]))
    })?;
    Ok(Exit::Success)
}

/// `stats`.
pub fn stats(location: &LocationArgs, out: &mut Out) -> anyhow::Result<Exit> {
    let path = location.store_path().ok();
    let spinner = out.spinner("reading datasets");
    let doc = remote::read(location, "/v1/stats", &json!({}), |snapshot| reads::stats(snapshot, path.as_deref()))?;
    spinner.finish_and_clear();
    out.emit(&doc, |w| {
        let mut table = Table::new(vec!["", ""]);
        table.row(vec!["store".into(), text(&doc["store"])]);
        if !doc["file_bytes"].is_null() {
            table.row(vec!["file bytes".into(), text(&doc["file_bytes"])]);
        }
        for (name, n) in doc["tables"].as_object().into_iter().flatten() {
            table.row(vec![name.clone(), text(n)]);
        }
        table.write_body(w)?;
        let datasets = items(&doc["datasets"]);
        if !datasets.is_empty() {
            writeln!(w)?;
            let mut table = Table::new(vec!["DATASET", "GENERATION", "PARTITIONS", "ROWS", "FILES", "BYTES", "FIGURES"]);
            for d in datasets {
                let reported = number(&d["reported_partitions"]);
                table.row(vec![
                    text(&d["dataset"]),
                    text(&d["current_generation"]),
                    text(&d["partitions"]),
                    text(&d["rows"]),
                    text(&d["files"]),
                    text(&d["bytes"]),
                    if reported > 0 { format!("{} reported, not checked", count(reported, "partition")) } else { "checked".to_owned() },
                ]);
            }
            table.write(w)?;
        }
        Ok(())
    })?;
    Ok(Exit::Success)
}

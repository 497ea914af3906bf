//! `view`: where a dataset's published view is and what it holds; `view sync`: bring views up
//! to date with the store.

use manifestdb::ViewStatus;
use serde_json::{Value, json};

use crate::args::{ViewArgs, ViewCommand};
use crate::exit::{Exit, not_found, usage};
use crate::json::{operator, reads};
use crate::location::LocationArgs;
use crate::output::{Out, Table, counted, text};
use crate::remote;

/// `view DATASET` (read-only) or `view sync [DATASET]` (writer).
pub fn view(location: &LocationArgs, out: &mut Out, args: &ViewArgs) -> anyhow::Result<Exit> {
    match (&args.command, &args.dataset) {
        (Some(ViewCommand::Sync { dataset }), _) => sync(location, out, dataset.as_deref()),
        (None, Some(dataset)) => show(location, out, dataset, args.generation, args.files),
        (None, None) => Err(usage("name a dataset (`manifestdb view DATASET`) or use `manifestdb view sync`")),
    }
}

fn show(location: &LocationArgs, out: &mut Out, dataset: &str, generation: Option<u64>, files: bool) -> anyhow::Result<Exit> {
    // Through a server, the store's recorded view root (on the server's host) is used.
    let query = match generation {
        Some(n) => json!({ "dataset": dataset, "generation": n }),
        None => json!({ "dataset": dataset }),
    };
    let doc =
        remote::read(location, "/v1/views", &query, |snapshot| operator::view(snapshot, dataset, location.views.as_deref(), generation))?;
    let manifest = &doc["manifest"];
    if files {
        let Some(list) = doc["files"].as_array() else {
            return Err(not_found(format!("the file list of {dataset:?} cannot be read (is the staging root known to this store?)")));
        };
        out.emit(&doc, |w| {
            for f in list {
                writeln!(w, "{}", text(f))?;
            }
            Ok(())
        })?;
        return Ok(Exit::Success);
    }
    out.emit(&doc, |w| {
        // The path to read first, alone on its line (`$(manifestdb view DATASET | head -1)`).
        writeln!(w, "{}", text(&doc["path"]))?;
        if doc["trees"] == false {
            writeln!(
                w,
                "dataset {dataset} has no directory trees (the store's choice, --view-trees): read its Delta table or the files \
                 `manifestdb view {dataset} --files` lists"
            )?;
        }
        writeln!(
            w,
            "generation {} of run {}, snapshot {}; the store's current generation is {}{}",
            text(&manifest["generation"]),
            text(&manifest["run"]),
            text(&manifest["snapshot"]),
            text(&doc["store_generation"]),
            if doc["view_lagging"] == true {
                format!("; LAGGING: {} does not name it yet (run `manifestdb view sync`)", text(&doc["current"]))
            } else {
                String::new()
            }
        )?;
        let mut table = Table::new(vec!["PARTITION", "ATTEMPT", "ROWS", "TOTAL", "FILES", "DIGEST"]);
        for p in manifest["partitions"].as_array().into_iter().flatten() {
            table.row(vec![
                text(&p["partition"]),
                text(&p["attempt"]),
                text(&p["rows"]),
                text(&p["total"]),
                p["files"].as_array().map_or(0, Vec::len).to_string(),
                text(&p["digest"]),
            ]);
        }
        table.write(w)?;
        let delta = &doc["table"];
        if delta["path"].is_null() {
            writeln!(w, "no Delta table: {}", text(&delta["reason"]))?;
        } else {
            writeln!(
                w,
                "Delta table {}: version {} holds this generation; latest version {} holds generation {}",
                text(&delta["path"]),
                text(&delta["version"]),
                text(&delta["latest_version"]),
                text(&delta["latest_generation"])
            )?;
            if delta["lagging"] == true {
                writeln!(w, "TABLE LAGGING: {}", text(&delta["reason"]))?;
            }
            for f in delta["foreign_versions"].as_array().into_iter().flatten() {
                writeln!(
                    w,
                    "version {} was committed by another writer ({}, {}); the store's commits restore their generation on top",
                    text(&f["version"]),
                    text(&f["operation"]),
                    text(&f["engine"])
                )?;
            }
        }
        let t = &manifest["totals"];
        writeln!(
            w,
            "{}, {}, {}, total {}, {}",
            counted(&t["partitions"], "partition"),
            counted(&t["files"], "file"),
            counted(&t["rows"], "row"),
            text(&t["total"]),
            counted(&t["bytes"], "byte")
        )
    })?;
    Ok(Exit::Success)
}

/// A synced table in one cell: `v7`, with what the sync repaired, restored or found foreign.
fn delta_summary(s: &Value, list: &dyn Fn(&str) -> String) -> String {
    if s["table_version"].is_null() {
        return "-".to_owned();
    }
    let mut out = format!("v{}", text(&s["table_version"]));
    if s["table_repaired"].as_array().is_some_and(|a| !a.is_empty()) {
        out.push_str(&format!(" repaired {}", list("table_repaired")));
    }
    if s["table_restored"].as_u64().is_some_and(|n| n > 0) {
        out.push_str(&format!(" restored {} files", text(&s["table_restored"])));
    }
    if s["foreign_versions"].as_array().is_some_and(|a| !a.is_empty()) {
        out.push_str(&format!(" foreign {}", list("foreign_versions")));
    }
    out
}

fn sync(location: &LocationArgs, out: &mut Out, dataset: Option<&str>) -> anyhow::Result<Exit> {
    let doc = remote::write(location, "/v1/views/sync", &json!({ "dataset": dataset }), || {
        let store = location.open_writer()?;
        if let Some(dataset) = dataset {
            reads::require_dataset(&store.snapshot()?, dataset).map_err(crate::location::document_error)?;
        }
        if store.view_root().is_none() {
            return Err(not_found("the store publishes no views (pass --views DIR once to set its view root)"));
        }
        let synced: Vec<ViewStatus> = match dataset {
            Some(dataset) => store.sync_view(dataset)?.into_iter().collect(),
            None => store.sync_views()?,
        };
        crate::location::close_writer(store)?;
        Ok(operator::views_synced(&synced))
    })?;
    out.emit(&doc, |w| {
        let mut table = Table::new(vec!["DATASET", "GENERATION", "BUILT", "SWAPPED", "REPAIRED", "REMOVED", "DELTA TABLE", "CURRENT"]);
        for s in doc["synced"].as_array().into_iter().flatten() {
            let list = |key: &str| format!("{:?}", s[key].as_array().into_iter().flatten().filter_map(Value::as_u64).collect::<Vec<u64>>());
            table.row(vec![
                text(&s["dataset"]),
                text(&s["generation"]),
                text(&s["built"]),
                text(&s["swapped"]),
                list("repaired"),
                list("removed"),
                delta_summary(s, &list),
                text(&s["path"]),
            ]);
        }
        table.write(w)
    })?;
    Ok(Exit::Success)
}

//! `view`: where a dataset's published view is and what it holds; `view sync`: bring views up
//! to date with the store.

use anyhow::Context;
use manifestdb::{ViewManifest, ViewStatus};
use serde_json::{Value, json};

use crate::args::{ViewArgs, ViewCommand};
use crate::exit::{Exit, not_found, usage};
use crate::location::LocationArgs;
use crate::output::{Out, Table};

/// `view DATASET` (read-only) or `view sync [DATASET]` (writer).
pub fn view(location: &LocationArgs, out: &mut Out, args: &ViewArgs) -> anyhow::Result<Exit> {
    match (&args.command, &args.dataset) {
        (Some(ViewCommand::Sync { dataset }), _) => sync(location, out, dataset.as_deref()),
        (None, Some(dataset)) => show(location, out, dataset),
        (None, None) => Err(usage("name a dataset (`manifestdb view DATASET`) or use `manifestdb view sync`")),
    }
}

fn show(location: &LocationArgs, out: &mut Out, dataset: &str) -> anyhow::Result<Exit> {
    let store = location.open_reader()?;
    let snapshot = store.snapshot()?;
    super::require_dataset(&snapshot, dataset)?;
    let root = match (&location.views, snapshot.views()?) {
        (Some(given), _) => std::path::absolute(given).with_context(|| format!("resolving {}", given.display()))?,
        (None, Some(recorded)) => recorded.root,
        (None, None) => return Err(not_found("the store publishes no views (open it once with --views DIR)")),
    };
    let store_generation = snapshot.current(dataset)?.map(|g| g.number);
    drop(snapshot);
    crate::location::close_reader(store)?;
    let current = root.join(dataset).join("current");
    let target = std::fs::read_link(&current).ok();
    let path = target.as_ref().map(|t| root.join(dataset).join(t));
    let view_generation = target.as_ref().and_then(|t| t.to_str()).and_then(|t| t.strip_prefix('v')).and_then(|n| n.parse::<u64>().ok());
    let Some(path) = path else {
        return Err(not_found(format!(
            "dataset {dataset:?} has no view at {} (store generation: {}; `manifestdb view sync` builds it)",
            current.display(),
            store_generation.map_or("none".to_owned(), |g| g.to_string())
        )));
    };
    let manifest = ViewManifest::read(path.join("_manifest.json"))?;
    let lagging = view_generation != store_generation;
    let doc = json!({
        "dataset": dataset,
        "view_root": root,
        "current": current,
        "path": path,
        "view_generation": view_generation,
        "store_generation": store_generation,
        "lagging": lagging,
        "manifest": serde_json::to_value(&manifest)?,
    });
    out.emit(&doc, |w| {
        writeln!(w, "{}", current.display())?;
        writeln!(
            w,
            "-> {} (generation {} of run {}, snapshot {}){}",
            path.display(),
            manifest.generation,
            manifest.run,
            manifest.snapshot,
            if lagging {
                format!("; LAGGING: the store's current generation is {} (run `manifestdb view sync`)", store_generation.unwrap_or(0))
            } else {
                String::new()
            }
        )?;
        let mut table = Table::new(vec!["PARTITION", "ATTEMPT", "ROWS", "TOTAL", "FILES", "DIGEST"]);
        for p in &manifest.partitions {
            table.row(vec![
                p.partition.clone(),
                p.attempt.to_string(),
                p.rows.to_string(),
                p.total.map_or("-".to_owned(), |t| t.to_string()),
                p.files.len().to_string(),
                p.digest.clone(),
            ]);
        }
        table.write(w)?;
        let t = &manifest.totals;
        writeln!(
            w,
            "{} partitions, {} files, {} rows, total {}, {} bytes",
            t.partitions,
            t.files,
            t.rows,
            t.total.map_or("-".to_owned(), |t| t.to_string()),
            t.bytes
        )
    })?;
    Ok(Exit::Success)
}

fn status_json(s: &ViewStatus) -> Value {
    json!({
        "dataset": s.dataset, "generation": s.generation, "current": s.current, "path": s.path,
        "built": s.built, "swapped": s.swapped, "removed": s.removed,
    })
}

fn sync(location: &LocationArgs, out: &mut Out, dataset: Option<&str>) -> anyhow::Result<Exit> {
    let store = location.open_writer()?;
    if let Some(dataset) = dataset {
        super::require_dataset(&store.snapshot()?, dataset)?;
    }
    if store.view_root().is_none() {
        return Err(not_found("the store publishes no views (pass --views DIR once to set its view root)"));
    }
    let synced: Vec<ViewStatus> = match dataset {
        Some(dataset) => store.sync_view(dataset)?.into_iter().collect(),
        None => store.sync_views()?,
    };
    crate::location::close_writer(store)?;
    let doc = json!({ "synced": synced.iter().map(status_json).collect::<Vec<_>>() });
    out.emit(&doc, |w| {
        let mut table = Table::new(vec!["DATASET", "GENERATION", "BUILT", "SWAPPED", "REMOVED", "CURRENT"]);
        for s in &synced {
            table.row(vec![
                s.dataset.clone(),
                s.generation.to_string(),
                s.built.to_string(),
                s.swapped.to_string(),
                format!("{:?}", s.removed),
                s.path.display().to_string(),
            ]);
        }
        table.write(w)
    })?;
    Ok(Exit::Success)
}

//! Read-only verbs: `show`, `log`, `diff`, `stats`. Each opens the store read-only and reads
//! through one snapshot, so it sees one committed state even while a writer publishes.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use manifestdb::{Manifest, ManifestDiff, PartitionEntry, Snapshot};
use serde_json::json;

use super::require_dataset;
use crate::args::{DiffArgs, LogArgs, ShowArgs};
use crate::exit::{Exit, not_found};
use crate::json;
use crate::location::LocationArgs;
use crate::output::{Out, Table, escape, opt, utc};

/// The partitions' totals; an overflow is a fault.
fn totals(partitions: &[PartitionEntry]) -> anyhow::Result<json::Totals> {
    json::totals(partitions).map_err(anyhow::Error::msg)
}

fn manifest_or_not_found(snapshot: &Snapshot, dataset: &str, generation: Option<u64>) -> anyhow::Result<Manifest> {
    snapshot.manifest(dataset, generation)?.ok_or_else(|| match generation {
        Some(number) => not_found(format!("dataset {dataset:?} has no generation {number} (never published, or expired)")),
        None => not_found(format!("dataset {dataset:?} has no published generation")),
    })
}

/// `show`.
pub fn show(location: &LocationArgs, out: &mut Out, args: &ShowArgs) -> anyhow::Result<Exit> {
    let store = location.open_reader()?;
    let snapshot = store.snapshot()?;
    let Some(dataset) = &args.dataset else {
        let mut rows = Vec::new();
        for dataset in snapshot.datasets()? {
            if let Some(current) = snapshot.current(&dataset)? {
                rows.push(current);
            }
        }
        let doc = json!({ "datasets": rows.iter().map(|g| json!({
            "dataset": g.dataset, "current_generation": g.number, "run": g.run, "published_at_ms": g.published_at_ms,
        })).collect::<Vec<_>>() });
        drop(snapshot);
        crate::location::close_reader(store)?;
        out.emit(&doc, |w| {
            let mut table = Table::new(vec!["DATASET", "GENERATION", "RUN", "PUBLISHED"]);
            for g in &rows {
                table.row(vec![g.dataset.clone(), g.number.to_string(), g.run.clone(), utc(g.published_at_ms)]);
            }
            table.write(w)
        })?;
        return Ok(Exit::Success);
    };
    require_dataset(&snapshot, dataset)?;
    let manifest = manifest_or_not_found(&snapshot, dataset, args.generation)?;
    let current = snapshot.current(dataset)?.map(|g| g.number);
    drop(snapshot);
    let is_current = current == Some(manifest.generation.number);
    let t = totals(&manifest.partitions)?;
    let doc = json::manifest(&manifest, current, location.staging_root().as_deref()).map_err(anyhow::Error::msg)?;
    crate::location::close_reader(store)?;
    out.emit(&doc, |w| {
        let g = &manifest.generation;
        writeln!(
            w,
            "{} generation {}{}: {} of run {}, snapshot {}, at {}",
            escape(&g.dataset),
            g.number,
            if is_current { " (current)" } else { "" },
            json::kind_name(&g.kind),
            escape(&g.run),
            escape(&g.snapshot),
            utc(g.published_at_ms)
        )?;
        let mut table = Table::new(vec!["PARTITION", "SINCE", "RUN", "ATTEMPT", "ROWS", "TOTAL", "FILES", "BYTES"]);
        for p in &manifest.partitions {
            table.row(vec![
                p.partition.clone(),
                p.since_generation.to_string(),
                p.run.clone(),
                p.attempt.to_string(),
                p.rows.to_string(),
                opt(p.total),
                p.files.len().to_string(),
                p.files.iter().map(|f| f.size_bytes).sum::<u64>().to_string(),
            ]);
        }
        table.row(vec![
            format!("({} partitions)", t.partitions),
            String::new(),
            String::new(),
            String::new(),
            t.rows.to_string(),
            opt(t.total),
            t.files.to_string(),
            t.bytes.to_string(),
        ]);
        table.write(w)
    })?;
    Ok(Exit::Success)
}

/// `log`.
pub fn log(location: &LocationArgs, out: &mut Out, args: &LogArgs) -> anyhow::Result<Exit> {
    let store = location.open_reader()?;
    let snapshot = store.snapshot()?;
    let datasets = match &args.dataset {
        Some(dataset) => vec![dataset.clone()],
        None => snapshot.datasets()?,
    };
    let mut logs = Vec::with_capacity(datasets.len());
    for dataset in datasets {
        require_dataset(&snapshot, &dataset)?;
        let current = snapshot.current(&dataset)?.map(|g| g.number);
        let mut history = snapshot.history(&dataset)?;
        if current.is_none() && history.is_empty() {
            return Err(not_found(format!("dataset {dataset:?} has no published generation")));
        }
        history.reverse();
        logs.push((dataset, current, history));
    }
    drop(snapshot);
    let doc = json!({ "datasets": logs.iter().map(|(dataset, current, history)| json!({
        "dataset": dataset,
        "current_generation": current,
        "generations": history.iter().map(json::generation).collect::<Vec<_>>(),
    })).collect::<Vec<_>>() });
    crate::location::close_reader(store)?;
    out.emit(&doc, |w| {
        let mut table = Table::new(vec!["DATASET", "GEN", "PARENT", "KIND", "RUN", "SNAPSHOT", "PUBLISHED", "PARTITIONS", "NOTE"]);
        for (dataset, current, history) in &logs {
            for g in history {
                let mut note = Vec::new();
                if Some(g.number) == *current {
                    note.push("current".to_owned());
                }
                if let manifestdb::GenerationKind::Rollback { restored, actor, reason } = &g.kind {
                    note.push(format!("restores {restored} ({actor}: {reason})"));
                }
                if let Some(n) = &g.nondeterminism_accepted {
                    note.push(format!("non-determinism accepted: {}", n.reason));
                }
                table.row(vec![
                    dataset.clone(),
                    g.number.to_string(),
                    g.parent.to_string(),
                    json::kind_name(&g.kind).to_owned(),
                    g.run.clone(),
                    g.snapshot.clone(),
                    utc(g.published_at_ms),
                    g.partitions_replaced.to_string(),
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
    let store = location.open_reader()?;
    let snapshot = store.snapshot()?;
    require_dataset(&snapshot, &args.dataset)?;
    let from = manifest_or_not_found(&snapshot, &args.dataset, Some(args.from))?;
    let to = manifest_or_not_found(&snapshot, &args.dataset, Some(args.to))?;
    drop(snapshot);
    let diff = from.diff(&to);
    let doc = json::diff(&args.dataset, args.from, args.to, &diff, location.staging_root().as_deref());
    let ManifestDiff { added, removed, replaced, unchanged } = diff;
    crate::location::close_reader(store)?;
    out.emit(&doc, |w| {
        writeln!(w, "{} generation {} -> {}", escape(&args.dataset), args.from, args.to)?;
        for p in &added {
            writeln!(
                w,
                "+ {}  (run {} attempt {}, rows {}, total {})",
                escape(&p.partition),
                escape(&p.run),
                p.attempt,
                p.rows,
                opt(p.total)
            )?;
        }
        for (old, new) in &replaced {
            writeln!(
                w,
                "~ {}  (run {} attempt {} -> run {} attempt {}; rows {} -> {}, total {} -> {})",
                escape(&old.partition),
                escape(&old.run),
                old.attempt,
                escape(&new.run),
                new.attempt,
                old.rows,
                new.rows,
                opt(old.total),
                opt(new.total)
            )?;
        }
        for p in &removed {
            writeln!(w, "- {}  (run {} attempt {})", escape(&p.partition), escape(&p.run), p.attempt)?;
        }
        writeln!(w, "{} added, {} replaced, {} removed, {unchanged} unchanged", added.len(), replaced.len(), removed.len())
    })?;
    Ok(Exit::Success)
}

/// A table name without its version suffix (`runs_v1` -> `runs`), so the JSON keys do not
/// change when a table's record format does.
pub(crate) fn unversioned(name: &str) -> &str {
    match name.rsplit_once("_v") {
        Some((base, version)) if !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => name,
    }
}

/// `stats`.
pub fn stats(location: &LocationArgs, out: &mut Out) -> anyhow::Result<Exit> {
    let path = location.store_path()?;
    let store = location.open_reader()?;
    // A store in a PostgreSQL database has no file: its size is the server's business (null).
    let file_bytes = match path.to_str() {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => None,
        _ => Some(std::fs::metadata(&path).with_context(|| format!("reading metadata of {}", path.display()))?.len()),
    };
    let snapshot = store.snapshot()?;
    let tables = snapshot.table_entries()?;
    let datasets = snapshot.datasets()?;
    let bar = out.progress(datasets.len() as u64, "reading datasets");
    let mut per_dataset = Vec::with_capacity(datasets.len());
    for dataset in &datasets {
        if let Some(manifest) = snapshot.manifest(dataset, None)? {
            per_dataset.push((manifest.generation.number, dataset.clone(), totals(&manifest.partitions)?));
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    drop(snapshot);
    let doc = json!({
        "store": path,
        "file_bytes": file_bytes,
        "tables": tables.iter().map(|(name, n)| (unversioned(name).to_owned(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "datasets": per_dataset.iter().map(|(generation, dataset, t)| json!({
            "dataset": dataset, "current_generation": generation, "partitions": t.partitions, "rows": t.rows, "files": t.files, "bytes": t.bytes,
        })).collect::<Vec<_>>(),
    });
    crate::location::close_reader(store)?;
    out.emit(&doc, |w| {
        write_store_summary(w, &path, file_bytes, &tables)?;
        if !per_dataset.is_empty() {
            writeln!(w)?;
            let mut table = Table::new(vec!["DATASET", "GENERATION", "PARTITIONS", "ROWS", "FILES", "BYTES"]);
            for (generation, dataset, t) in &per_dataset {
                table.row(vec![
                    dataset.clone(),
                    generation.to_string(),
                    t.partitions.to_string(),
                    t.rows.to_string(),
                    t.files.to_string(),
                    t.bytes.to_string(),
                ]);
            }
            table.write(w)?;
        }
        Ok(())
    })?;
    Ok(Exit::Success)
}

fn write_store_summary(w: &mut dyn Write, path: &Path, file_bytes: Option<u64>, tables: &[(&str, u64)]) -> std::io::Result<()> {
    let mut table = Table::new(vec!["", ""]);
    table.row(vec!["store".into(), path.display().to_string()]);
    if let Some(file_bytes) = file_bytes {
        table.row(vec!["file bytes".into(), file_bytes.to_string()]);
    }
    for (name, n) in tables {
        table.row(vec![unversioned(name).to_owned(), n.to_string()]);
    }
    table.write_body(w)
}

#[cfg(test)]
mod tests {
    use super::unversioned;

    #[test]
    fn table_names_lose_only_a_version_suffix() {
        assert_eq!(unversioned("runs_v1"), "runs");
        assert_eq!(unversioned("partition_versions_v12"), "partition_versions");
        assert_eq!(unversioned("odd_vx"), "odd_vx");
    }
}

//! `attempt begin`, `attempt finish`, `attempt validate`, `attempt heartbeat`, `attempt abandon`,
//! `attempt invalidate`, `attempt list`.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;
use manifestdb::{AbandonOutcome, Candidate, FileCheck, FileEntry, FinishOutcome, InvalidateOutcome, TaskKey, describe_file};
use serde::Deserialize;
use serde_json::json;

use super::{parse_json, require_dataset};
use crate::args::{AttemptListArgs, BeginArgs, FinishArgs, HeartbeatArgs, InvalidateArgs, TaskArgs, ValidateArgs};
use crate::exit::{Exit, not_found, usage};
use crate::json;
use crate::location::LocationArgs;
use crate::output::{Out, Table, duration_s, escape, opt, shell_quote, utc};

fn task_key(args: &TaskArgs) -> TaskKey {
    TaskKey::new(&args.dataset, &args.run, &args.partition)
}

/// `attempt begin`.
pub fn begin(location: &LocationArgs, out: &mut Out, args: &BeginArgs) -> anyhow::Result<Exit> {
    // clap cannot see the global --json conflict once it precedes the verb; refuse it here,
    // before anything is written.
    if args.env && out.is_json() {
        return Err(usage("--env prints shell assignments and cannot be combined with --json"));
    }
    let store = location.open_writer()?;
    let ticket = store.begin_attempt(&task_key(&args.task))?;
    if args.env {
        let staging = ticket.staging_dir.to_str().ok_or_else(|| usage("the staging directory's path is not UTF-8"))?;
        crate::location::close_writer(store)?;
        let quoted = shell_quote(staging).map_err(|e| usage(format!("the staging directory's path cannot be shell-quoted: {e}")))?;
        out.raw(&format!("MANIFESTDB_ATTEMPT={}\nMANIFESTDB_STAGING_DIR={quoted}\n", ticket.key.attempt))?;
        return Ok(Exit::Success);
    }
    let task = &ticket.key.task;
    let doc = json!({
        "dataset": task.dataset,
        "run": task.run,
        "partition": task.partition,
        "attempt": ticket.key.attempt,
        "staging_dir": ticket.staging_dir,
        "started_at_ms": ticket.started_at_ms,
    });
    crate::location::close_writer(store)?;
    out.emit(&doc, |w| {
        let mut table = Table::new(vec!["", ""]);
        table.row(vec!["task".into(), task.to_string()]);
        table.row(vec!["attempt".into(), ticket.key.attempt.to_string()]);
        table.row(vec!["staging".into(), ticket.staging_dir.display().to_string()]);
        table.write_body(w)
    })?;
    Ok(Exit::Success)
}

/// The `--from` document of `attempt finish`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CandidateInput {
    snapshot: String,
    #[serde(default)]
    rows: Option<u64>,
    #[serde(default)]
    total: Option<i64>,
    #[serde(default)]
    digest: Option<String>,
    #[serde(default)]
    files: Vec<FileInput>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileInput {
    path: String,
    size_bytes: u64,
    crc32: u32,
}

/// The attempt's staging directory, from the store's record of it, read through a read-only
/// handle (closed again at once), so that checksumming its files never holds the writer.
fn staging_dir(location: &LocationArgs, args: &FinishArgs) -> anyhow::Result<PathBuf> {
    let key = task_key(&args.task).attempt(args.attempt);
    let store = location.open_reader()?;
    let info = store.snapshot()?.attempt(&key)?.ok_or_else(|| manifestdb::Error::UnknownAttempt {
        dataset: key.task.dataset.clone(),
        run: key.task.run.clone(),
        partition: key.task.partition.clone(),
        attempt: key.attempt,
    })?;
    crate::location::close_reader(store)?;
    let root = location.staging_root().ok_or_else(|| usage("no staging root given: pass --dir DIR or --staging DIR"))?;
    Ok(root.join(info.staging_rel))
}

/// Every regular file under `dir`, as `/`-separated relative paths in sorted order. Symlinks
/// are refused rather than followed or skipped: a candidate must not silently differ from what
/// the worker meant to report.
fn scan(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let mut pending = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, rel)) = pending.pop() {
        for entry in fs::read_dir(&path).with_context(|| format!("listing {}", path.display()))? {
            let entry = entry.with_context(|| format!("listing {}", path.display()))?;
            let name = entry.file_name();
            let name = name.to_str().ok_or_else(|| usage(format!("{} holds a file name that is not UTF-8", path.display())))?;
            let child_rel = if rel.is_empty() { name.to_owned() } else { format!("{rel}/{name}") };
            let file_type = entry.file_type().with_context(|| format!("inspecting {}", entry.path().display()))?;
            if file_type.is_symlink() {
                return Err(usage(format!("{} is a symlink; manifestdb never follows symlinks in staging", entry.path().display())));
            } else if file_type.is_dir() {
                pending.push((entry.path(), child_rel));
            } else if file_type.is_file() {
                found.push(child_rel);
            } else {
                return Err(usage(format!("{} is not a regular file or directory", entry.path().display())));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// `attempt finish`.
pub fn finish(location: &LocationArgs, out: &mut Out, args: &FinishArgs) -> anyhow::Result<Exit> {
    let (snapshot, rows, total, digest, mut files) = match &args.from {
        Some(path) => {
            let input: CandidateInput = parse_json(path, "candidate")?;
            let files = input.files.into_iter().map(|f| FileEntry { path: f.path, size_bytes: f.size_bytes, crc32: f.crc32 }).collect();
            (input.snapshot, input.rows, input.total, input.digest, files)
        }
        None => {
            let Some(snapshot) = &args.snapshot else {
                return Err(usage("--snapshot is required without --from"));
            };
            (snapshot.clone(), args.rows, args.total, args.digest.clone(), Vec::new())
        }
    };
    if rows.is_none() || digest.is_none() {
        // Only a run with a grain lets the store compute them; say so before anything is read
        // (through a read-only handle: the writer is opened only for the write).
        let task = task_key(&args.task);
        let reader = location.open_reader()?;
        let grain = reader.snapshot()?.run(&task.dataset, &task.run)?.and_then(|info| info.grain);
        crate::location::close_reader(reader)?;
        if grain.is_none() {
            return Err(usage(format!(
                "run {:?} of {:?} declares no grain, so --rows and --digest are required (declare the run with --grain/--measure to have the store compute them)",
                task.run, task.dataset
            )));
        }
    }
    // Files are checksummed before the store is opened for writing: a big file never blocks
    // other writers.
    if !args.files.is_empty() || args.scan {
        let dir = staging_dir(location, args)?;
        let mut paths = args.files.clone();
        if args.scan {
            paths.extend(scan(&dir)?.into_iter().filter(|p| !args.files.contains(p)));
        }
        let bar = out.progress(paths.len() as u64, "checksumming files");
        for path in &paths {
            files.push(describe_file(&dir, path)?);
            bar.inc(1);
        }
        bar.finish_and_clear();
    }
    let key = task_key(&args.task).attempt(args.attempt);
    let candidate = Candidate { snapshot, rows, total, digest, files };
    let store = location.open_writer()?;
    let outcome = store.finish_attempt(&key, &candidate)?;
    let outcome_name = match outcome {
        FinishOutcome::Recorded => "recorded",
        FinishOutcome::AlreadyRecorded => "already_recorded",
    };
    let doc = json!({
        "dataset": key.task.dataset,
        "run": key.task.run,
        "partition": key.task.partition,
        "attempt": key.attempt,
        "outcome": outcome_name,
        "candidate": json::candidate(&candidate),
    });
    crate::location::close_writer(store)?;
    out.emit(&doc, |w| {
        let verb = if outcome == FinishOutcome::Recorded { "recorded" } else { "already recorded (identical; nothing written)" };
        writeln!(
            w,
            "candidate of attempt {} {verb}: rows {}, total {}, digest {}",
            escape(&key.to_string()),
            opt(candidate.rows),
            opt(candidate.total),
            escape(candidate.digest.as_deref().unwrap_or("-"))
        )?;
        let mut table = Table::new(vec!["FILE", "BYTES", "CRC32"]);
        for f in &candidate.files {
            table.row(vec![f.path.clone(), f.size_bytes.to_string(), format!("{:08x}", f.crc32)]);
        }
        table.write(w)
    })?;
    Ok(Exit::Success)
}

/// `attempt validate`.
pub fn validate(location: &LocationArgs, out: &mut Out, args: &ValidateArgs) -> anyhow::Result<Exit> {
    let task = task_key(&args.task);
    let key = task.attempt(args.attempt);
    let check = if args.checksums { FileCheck::SizeAndChecksum } else { FileCheck::Size };
    // The files are read (and made durable) through a read-only handle, before the store is
    // opened for writing: checksumming a big file never blocks other writers.
    let reader = location.open_reader()?;
    let prepared = reader.prepare_validation(&key, check)?;
    crate::location::close_reader(reader)?;
    let store = location.open_writer()?;
    let verdict = store.store_validation(&prepared)?;
    let snapshot = store.snapshot()?;
    let accepted = snapshot.accepted(&task)?;
    let reconciliation = snapshot.attempt(&key)?.and_then(|a| a.reconciliation);
    drop(snapshot);
    let (verdict_name, failures) = json::verdict(&verdict);
    let doc = json!({
        "dataset": task.dataset,
        "run": task.run,
        "partition": task.partition,
        "attempt": key.attempt,
        "verdict": verdict_name,
        "failures": failures,
        "accepted_attempt": accepted,
        "reconciliation": reconciliation.as_ref().map(json::reconciliation),
    });
    crate::location::close_writer(store)?;
    out.emit(&doc, |w| {
        writeln!(w, "attempt {} is {verdict_name}; accepted attempt of the task: {}", escape(&key.to_string()), opt(accepted))?;
        if let Some(r) = &reconciliation {
            let basis = match r.basis {
                manifestdb::ReconcileBasis::Read { format } => {
                    format!("read from {} {format} file(s), {} bytes", r.files_read, r.bytes_read)
                }
                _ => "reported figures only (the run declares no grain)".to_owned(),
            };
            writeln!(w, "  checked: {basis}")?;
            let mut table = Table::new(vec!["", "EXPECTED", "REPORTED", "COMPUTED"]);
            table.row(vec!["rows".into(), r.expected_rows.to_string(), opt(r.reported_rows), opt(r.computed_rows)]);
            table.row(vec!["total".into(), opt(r.expected_total), opt(r.reported_total), opt(r.computed_total)]);
            table.row(vec![
                "digest".into(),
                "-".into(),
                r.reported_digest.clone().unwrap_or_else(|| "-".into()),
                r.computed_digest.clone().unwrap_or_else(|| "-".into()),
            ]);
            table.row(vec!["duplicate keys".into(), "0".into(), "-".into(), r.duplicate_keys.to_string()]);
            table.write(w)?;
        }
        if let manifestdb::Verdict::Invalid(failures) = &verdict {
            for failure in failures {
                writeln!(w, "  {}", escape(&failure.to_string()))?;
            }
        }
        Ok(())
    })?;
    Ok(if verdict.is_valid() { Exit::Success } else { Exit::Refused })
}

/// `attempt heartbeat`.
pub fn heartbeat(location: &LocationArgs, out: &mut Out, args: &HeartbeatArgs) -> anyhow::Result<Exit> {
    let store = location.open_writer()?;
    let key = task_key(&args.task).attempt(args.attempt);
    let lease = store.heartbeat(&key)?;
    let doc = json!({
        "dataset": key.task.dataset,
        "run": key.task.run,
        "partition": key.task.partition,
        "attempt": key.attempt,
        "heartbeat_at_ms": lease.heartbeat_at_ms,
        "expires_at_ms": lease.expires_at_ms,
    });
    crate::location::close_writer(store)?;
    out.emit(&doc, |w| {
        writeln!(
            w,
            "attempt {}: lease renewed until {} ({} from now)",
            escape(&key.to_string()),
            utc(lease.expires_at_ms),
            duration_s(lease.expires_at_ms.saturating_sub(lease.heartbeat_at_ms))
        )
    })?;
    Ok(Exit::Success)
}

/// `attempt list`: a run's (or one task's) attempts with status, age and lease.
pub fn list(location: &LocationArgs, out: &mut Out, args: &AttemptListArgs) -> anyhow::Result<Exit> {
    let store = location.open_reader()?;
    let snapshot = store.snapshot()?;
    require_dataset(&snapshot, &args.dataset)?;
    let Some(info) = snapshot.run(&args.dataset, &args.run)? else {
        return Err(not_found(format!("unknown run {:?} of dataset {:?}", args.run, args.dataset)));
    };
    let partitions: Vec<&str> = match &args.partition {
        Some(partition) => match info.tasks.iter().find(|t| &t.partition == partition) {
            Some(task) => vec![task.partition.as_str()],
            None => {
                return Err(not_found(format!(
                    "run {:?} of dataset {:?} declares no task for partition {partition:?}",
                    args.run, args.dataset
                )));
            }
        },
        None => info.tasks.iter().map(|t| t.partition.as_str()).collect(),
    };
    let lease_ms = snapshot.attempt_lifetime_max_ms()?;
    let mut rows = Vec::new();
    for partition in partitions {
        let task = TaskKey::new(&info.dataset, &info.run, partition);
        let accepted = snapshot.accepted(&task)?;
        for attempt in snapshot.attempts(&task)? {
            rows.push((accepted == Some(attempt.key.attempt), attempt));
        }
    }
    drop(snapshot);
    let now_ms = now_ms();
    // Only a running attempt not recorded abandoned holds a lease; it runs from the last sign of
    // life for the store's recorded attempt lifetime.
    let lease_expiry = |a: &manifestdb::AttemptInfo| {
        (a.status == manifestdb::AttemptStatus::Running && a.abandoned_at_ms.is_none()).then(|| a.heartbeat_at_ms.saturating_add(lease_ms))
    };
    let doc = json!({
        "dataset": info.dataset,
        "run": info.run,
        "partition": args.partition,
        "attempt_lifetime_max_ms": lease_ms,
        "now_ms": now_ms,
        "attempts": rows.iter().map(|(accepted, a)| json!({
            "partition": a.key.task.partition,
            "attempt": a.key.attempt,
            "status": json::status(&a.status).0,
            "accepted": accepted,
            "started_at_ms": a.started_at_ms,
            "heartbeat_at_ms": a.heartbeat_at_ms,
            "abandoned_at_ms": a.abandoned_at_ms,
            "lease_expires_at_ms": lease_expiry(a),
            "staging_rel": a.staging_rel,
        })).collect::<Vec<_>>(),
    });
    out.emit(&doc, |w| {
        let mut table = Table::new(vec!["PARTITION", "ATTEMPT", "STATUS", "ACCEPTED", "STARTED", "AGE", "LEASE LEFT"]);
        for (accepted, a) in &rows {
            let status = match a.abandoned_at_ms {
                Some(at) => format!("{} (abandoned {})", json::status(&a.status).0, utc(at)),
                None => json::status(&a.status).0.to_owned(),
            };
            let lease_left = match lease_expiry(a) {
                Some(expiry) if expiry > now_ms => duration_s(expiry - now_ms),
                Some(_) => "expired".to_owned(),
                None => "-".to_owned(),
            };
            table.row(vec![
                a.key.task.partition.clone(),
                a.key.attempt.to_string(),
                status,
                if *accepted { "*".to_owned() } else { String::new() },
                utc(a.started_at_ms),
                duration_s(now_ms.saturating_sub(a.started_at_ms)),
                lease_left,
            ]);
        }
        table.write(w)?;
        writeln!(w, "({} attempts; lease {})", rows.len(), crate::output::duration(lease_ms))
    })?;
    Ok(Exit::Success)
}

/// Now, in milliseconds since the Unix epoch (the clock the store's times use).
fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `attempt abandon`.
pub fn abandon(location: &LocationArgs, out: &mut Out, args: &HeartbeatArgs) -> anyhow::Result<Exit> {
    let store = location.open_writer()?;
    let key = task_key(&args.task).attempt(args.attempt);
    let outcome = store.abandon_attempt(&key)?;
    crate::location::close_writer(store)?;
    let (name, abandoned_at_ms) = match outcome {
        AbandonOutcome::Abandoned { abandoned_at_ms } => ("abandoned", abandoned_at_ms),
        AbandonOutcome::AlreadyAbandoned { abandoned_at_ms } => ("already_abandoned", abandoned_at_ms),
    };
    let doc = json!({
        "dataset": key.task.dataset,
        "run": key.task.run,
        "partition": key.task.partition,
        "attempt": key.attempt,
        "outcome": name,
        "abandoned_at_ms": abandoned_at_ms,
    });
    out.emit(&doc, |w| writeln!(w, "attempt {}: {} at {}", escape(&key.to_string()), name.replace('_', " "), utc(abandoned_at_ms)))?;
    Ok(Exit::Success)
}

/// `attempt invalidate`.
pub fn invalidate(location: &LocationArgs, out: &mut Out, args: &InvalidateArgs) -> anyhow::Result<Exit> {
    let store = location.open_writer()?;
    let key = task_key(&args.task).attempt(args.attempt);
    let outcome = store.invalidate_attempt(&key, &args.actor, &args.reason)?;
    crate::location::close_writer(store)?;
    let (name, before, after) = match outcome {
        InvalidateOutcome::Invalidated { accepted_before, accepted_after } => ("invalidated", accepted_before, accepted_after),
        InvalidateOutcome::AlreadyInvalid => ("already_invalid", None, None),
    };
    let doc = json!({
        "dataset": key.task.dataset,
        "run": key.task.run,
        "partition": key.task.partition,
        "attempt": key.attempt,
        "outcome": name,
        "accepted_before": before,
        "accepted_after": after,
    });
    out.emit(&doc, |w| {
        writeln!(
            w,
            "attempt {}: {}; accepted attempt of the task: {} -> {}",
            escape(&key.to_string()),
            name.replace('_', " "),
            opt(before),
            opt(after)
        )
    })?;
    Ok(Exit::Success)
}

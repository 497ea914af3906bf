//! `attempt begin`, `attempt finish`, `attempt validate`, `attempt heartbeat`, `attempt abandon`,
//! `attempt invalidate`, `attempt list`.

use std::path::{Path, PathBuf};

use manifestdb::{Candidate, FileCheck, TaskKey, describe_file};
use serde_json::json;

use super::parse_json;
use crate::args::{AttemptListArgs, BeginArgs, FinishArgs, HeartbeatArgs, InvalidateArgs, TaskArgs, ValidateArgs};
use crate::exit::{Exit, usage};
use crate::json;
use crate::location::LocationArgs;
use crate::output::{Out, Table, Words, count, duration_s, escape, opt, shell_quote, text, utc};
use crate::remote::{self, Remote};

fn task_key(args: &TaskArgs) -> TaskKey {
    TaskKey::new(&args.dataset, &args.run, &args.partition)
}

/// `attempt begin`. With `--env`, a failure also prints to stdout a line that unsets the
/// attempt's variables and fails with the exit code, so `eval "$(manifestdb attempt begin
/// --env ...)"` fails too (and a script cannot carry on with a previous attempt's directory);
/// only when stdout is a pipe, what `$(...)` hands to `eval`. A wrapper that collects several
/// tries' output in a file (or a terminal) gets nothing from a failed try, so evaluating the
/// collected output runs the successful try's assignments alone.
pub fn begin(location: &LocationArgs, out: &mut Out, args: &BeginArgs) -> anyhow::Result<Exit> {
    let result = begin_attempt(location, out, args);
    if args.env
        && let Err(err) = &result
        && !crate::exit::is_broken_pipe(err)
        && out.stdout_is_pipe()
    {
        let code = crate::exit::classify(err).code();
        // `! :` fails (status 1) without ending a `set -e` shell by itself: evaluated last, the
        // eval fails; followed by a later try's assignments (a wrapper that collected every
        // try's output), it is harmless and those assignments stand.
        out.raw(&format!(
            "unset MANIFESTDB_ATTEMPT MANIFESTDB_STAGING_DIR MANIFESTDB_STAGING_URL; ! :  # manifestdb attempt begin failed (exit {code})\n"
        ))?;
    }
    result
}

fn begin_attempt(location: &LocationArgs, out: &mut Out, args: &BeginArgs) -> anyhow::Result<Exit> {
    // clap cannot see the global --json conflict once it precedes the verb; refuse it here,
    // before anything is written.
    if args.env && out.is_json() {
        return Err(usage("--env prints shell assignments and cannot be combined with --json"));
    }
    let task = task_key(&args.task);
    let doc = match Remote::find(location)? {
        Some(mut server) => {
            server.post("/v1/attempts/begin", &json!({ "dataset": task.dataset, "run": task.run, "partition": task.partition }))?
        }
        None => {
            let store = location.open_writer()?;
            let ticket = store.begin_attempt(&task)?;
            crate::location::close_writer(store)?;
            json::begun(&ticket)
        }
    };
    let attempt = doc["attempt"].as_u64().ok_or_else(|| anyhow::anyhow!("the begin answer has no attempt number"))?;
    let staging = doc["staging_dir"].as_str().ok_or_else(|| usage("the staging directory's path is not UTF-8"))?;
    if args.env {
        let quoted = shell_quote(staging).map_err(|e| usage(format!("the staging directory's path cannot be shell-quoted: {e}")))?;
        out.raw(&format!("MANIFESTDB_ATTEMPT={attempt}\nMANIFESTDB_STAGING_DIR={quoted}\n"))?;
        // On object storage the staging "directory" is the attempt's prefix, a URL: said under
        // its own name too, so a worker writing with an S3 client need not guess.
        if staging.starts_with("s3://") {
            out.raw(&format!("MANIFESTDB_STAGING_URL={quoted}\n"))?;
        }
        return Ok(Exit::Success);
    }
    out.emit(&doc, |w| {
        let mut table = Table::new(vec!["", ""]);
        table.row(vec!["task".into(), task.to_string()]);
        table.row(vec!["attempt".into(), attempt.to_string()]);
        table.row(vec!["staging".into(), staging.to_owned()]);
        table.write_body(w)
    })?;
    Ok(Exit::Success)
}

/// The attempt's document ([`json::reads::attempt_show`]: its status, staging directory and the
/// run's grain), from the store's server or through a read-only handle (closed again at once),
/// so that checksumming its files never holds the writer.
fn attempt_document(
    location: &LocationArgs,
    server: Option<&mut Remote>,
    key: &manifestdb::AttemptKey,
) -> anyhow::Result<serde_json::Value> {
    let task = &key.task;
    let query = json!({ "dataset": task.dataset, "run": task.run, "partition": task.partition, "attempt": key.attempt });
    match server {
        Some(server) => server.get("/v1/attempts/show", &query),
        None => {
            let root = location.staging_root();
            location.read_document(|snapshot| json::reads::attempt_show(snapshot, key, root.as_deref()))
        }
    }
}

/// Every file under the attempt's staging directory (or, on object storage, below its prefix),
/// as `/`-separated relative paths in sorted order ([`manifestdb::list_staged_files`]: symlinks
/// refused, never followed or skipped).
fn scan(dir: &Path) -> anyhow::Result<Vec<String>> {
    Ok(manifestdb::list_staged_files(dir)?)
}

/// `attempt finish`.
pub fn finish(location: &LocationArgs, out: &mut Out, args: &FinishArgs) -> anyhow::Result<Exit> {
    let mut candidate = match &args.from {
        Some(path) => parse_json::<Candidate>(path, "candidate")?,
        None => {
            let Some(snapshot) = &args.snapshot else {
                return Err(usage("--snapshot is required without --from"));
            };
            Candidate { snapshot: snapshot.clone(), rows: args.rows, total: args.total, digest: args.digest.clone(), files: Vec::new() }
        }
    };
    let key = task_key(&args.task).attempt(args.attempt);
    let mut server = Remote::find(location)?;
    let describe = !args.files.is_empty() || args.scan;
    if candidate.rows.is_none() || candidate.digest.is_none() || describe {
        let attempt = attempt_document(location, server.as_mut(), &key)?;
        // Only a run with a grain lets the store compute them; say so before anything is read.
        if (candidate.rows.is_none() || candidate.digest.is_none()) && attempt["grain"].is_null() {
            return Err(usage(format!(
                "run {:?} of {:?} declares no grain, so --rows and --digest are required (declare the run with --grain/--measure to have the store compute them)",
                key.task.run, key.task.dataset
            )));
        }
        // Files are checksummed before the store is opened for writing (or the server called):
        // a big file never blocks other writers.
        if describe {
            let dir = attempt["staging_dir"]
                .as_str()
                .map(PathBuf::from)
                .ok_or_else(|| usage("no staging root given: pass --dir DIR or --staging DIR"))?;
            let mut paths = args.files.clone();
            if args.scan {
                paths.extend(scan(&dir)?.into_iter().filter(|p| !args.files.contains(p)));
            }
            // Weighed by bytes (one big file is most of the work), counted in files.
            let bytes: u64 = paths.iter().filter_map(|p| std::fs::metadata(dir.join(p)).ok()).map(|m| m.len()).sum();
            let bar = out.progress_bytes(bytes, paths.len() as u64, "checksumming");
            for (i, path) in paths.iter().enumerate() {
                let file = describe_file(&dir, path)?;
                bar.inc(file.size_bytes);
                bar.set_message(crate::output::files_done("checksumming", i as u64 + 1, paths.len() as u64));
                candidate.files.push(file);
            }
            bar.finish_and_clear();
        }
    }
    let doc = match server {
        Some(mut server) => server.post(
            "/v1/attempts/finish",
            &json!({
                "dataset": key.task.dataset, "run": key.task.run, "partition": key.task.partition, "attempt": key.attempt,
                "candidate": candidate,
            }),
        )?,
        None => {
            let store = location.open_writer()?;
            let outcome = store.finish_attempt(&key, &candidate)?;
            crate::location::close_writer(store)?;
            json::finished(&key, outcome, &candidate)
        }
    };
    out.emit(&doc, |w| {
        let verb = if doc["outcome"] == "recorded" { "recorded" } else { "already recorded (identical; nothing written)" };
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
    let (Some(partition), Some(attempt)) = (&args.partition, args.attempt) else {
        return validate_pending(location, out, args);
    };
    let task = TaskKey::new(&args.dataset, &args.run, partition);
    let key = task.attempt(attempt);
    let words = Words { checksums: args.checksums, dry_run: false };
    let doc = match Remote::find(location)? {
        Some(mut server) => server.post(
            "/v1/attempts/validate",
            &json!({ "dataset": task.dataset, "run": task.run, "partition": task.partition, "attempt": key.attempt, "checksums": args.checksums }),
        )?,
        None => {
            let check = if args.checksums { FileCheck::SizeAndChecksum } else { FileCheck::Size };
            // The files are read (and made durable) through a read-only handle, before the
            // store is opened for writing: checksumming a big file never blocks other writers.
            let reader = location.open_reader()?;
            let draw = out.progress_of("validating", words);
            let prepared = reader.prepare_validation_with_progress(&key, check, &draw.hook());
            draw.finish();
            let prepared = prepared?;
            crate::location::close_reader(reader)?;
            let store = location.open_writer()?;
            let verdict = store.store_validation(&prepared)?;
            let snapshot = store.snapshot()?;
            let accepted = snapshot.accepted(&task)?;
            let reconciliation = snapshot.attempt(&key)?.and_then(|a| a.reconciliation);
            drop(snapshot);
            crate::location::close_writer(store)?;
            json::validated(&key, &verdict, accepted, reconciliation.as_ref())
        }
    };
    let valid = doc["verdict"] == "valid";
    out.emit(&doc, |w| {
        writeln!(
            w,
            "attempt {} is {}; accepted attempt of the task: {}",
            escape(&key.to_string()),
            text(&doc["verdict"]),
            text(&doc["accepted_attempt"])
        )?;
        let r = &doc["reconciliation"];
        if r.is_object() {
            let basis = match r["basis"].as_str().and_then(|b| b.strip_prefix("read_")) {
                Some(format) => format!(
                    "checked: read from {}, {}",
                    count(r["files_read"].as_u64().unwrap_or(0), &format!("{format} file")),
                    count(r["bytes_read"].as_u64().unwrap_or(0), "byte")
                ),
                None => "reported, not checked (the run declares no grain: nothing read the data)".to_owned(),
            };
            writeln!(w, "  figures: {basis}")?;
            let (expected, reported, computed) = (&r["expected"], &r["reported"], &r["computed"]);
            let mut table = Table::new(vec!["", "EXPECTED", "REPORTED", "COMPUTED"]);
            table.row(vec!["rows".into(), text(&expected["rows"]), text(&reported["rows"]), text(&computed["rows"])]);
            table.row(vec!["total".into(), text(&expected["total"]), text(&reported["total"]), text(&computed["total"])]);
            table.row(vec!["digest".into(), "-".into(), text(&reported["digest"]), text(&computed["digest"])]);
            table.row(vec!["duplicate keys".into(), "0".into(), "-".into(), text(&r["duplicate_keys"])]);
            table.write(w)?;
        }
        for failure in doc["failures"].as_array().into_iter().flatten() {
            writeln!(w, "  {}", escape(&text(&failure["message"])))?;
        }
        Ok(())
    })?;
    Ok(if valid { Exit::Success } else { Exit::Refused })
}

/// `attempt validate --run R --pending`: every finished attempt of the run awaiting validation
/// (`Snapshot::pending_attempts`), each validated as `attempt validate` does (files read
/// through a read-only handle, verdicts stored by one writer) or by the server's
/// `Store::validate_pending`; one line each.
fn validate_pending(location: &LocationArgs, out: &mut Out, args: &ValidateArgs) -> anyhow::Result<Exit> {
    let check = if args.checksums { FileCheck::SizeAndChecksum } else { FileCheck::Size };
    let lines: Vec<serde_json::Value> = match Remote::find(location)? {
        Some(mut server) => {
            let body = json!({ "dataset": args.dataset, "run": args.run, "checksums": args.checksums });
            let doc = server.post("/v1/attempts/validate-pending", &body)?;
            doc["results"].as_array().cloned().unwrap_or_default()
        }
        None => {
            let reader = location.open_reader()?;
            let pending = reader.snapshot()?.pending_attempts(&args.dataset, &args.run)?;
            // Each attempt's files drawn as the library reports them, under the attempt's count.
            let draw = out.progress_of("validating", Words { checksums: args.checksums, dry_run: false });
            let total = pending.len();
            let prepared: Vec<_> = pending
                .into_iter()
                .enumerate()
                .map(|(i, key)| {
                    draw.set_prefix(format!("attempt {}/{total}: ", i + 1));
                    let prepared = reader.prepare_validation_with_progress(&key, check, &draw.hook());
                    (key, prepared)
                })
                .collect();
            draw.finish();
            crate::location::close_reader(reader)?;
            let mut lines = Vec::with_capacity(prepared.len());
            if !prepared.is_empty() {
                let store = location.open_writer()?;
                for (key, prepared) in prepared {
                    lines.push(match prepared.and_then(|p| store.store_validation(&p)) {
                        Ok(verdict) => {
                            let snapshot = store.snapshot()?;
                            let accepted = snapshot.accepted(&key.task)?;
                            let reconciliation = snapshot.attempt(&key)?.and_then(|a| a.reconciliation);
                            json::validated(&key, &verdict, accepted, reconciliation.as_ref())
                        }
                        Err(err) => json::validation_failed(&key, &err),
                    });
                }
                crate::location::close_writer(store)?;
            }
            lines
        }
    };
    let mut text_out = String::new();
    for line in &lines {
        if out.is_json() {
            text_out.push_str(&format!("{line}\n"));
            continue;
        }
        let key = format!("{}/{}/{}#{}", text(&line["dataset"]), text(&line["run"]), text(&line["partition"]), text(&line["attempt"]));
        let failures: Vec<String> = line["failures"].as_array().into_iter().flatten().map(|f| text(&f["message"])).collect();
        let outcome = match (&line["error"], line["verdict"].as_str()) {
            (error, _) if error.is_object() => format!("failed: {}", text(&error["message"])),
            (_, Some("valid")) => format!("valid; accepted attempt of the task: {}", text(&line["accepted_attempt"])),
            _ => format!("invalid: {}", failures.join("; ")),
        };
        text_out.push_str(&escape(&format!("attempt {key} {outcome}")));
        text_out.push('\n');
    }
    out.raw(&text_out)?;
    let failed = lines.iter().find_map(|line| line["error"]["kind"].as_str());
    Ok(match failed {
        Some(kind) => crate::remote::exit_of_kind(kind),
        None if lines.iter().any(|line| line["verdict"] != "valid") => Exit::Refused,
        None => Exit::Success,
    })
}

/// `attempt heartbeat`.
pub fn heartbeat(location: &LocationArgs, out: &mut Out, args: &HeartbeatArgs) -> anyhow::Result<Exit> {
    let key = task_key(&args.task).attempt(args.attempt);
    let doc = match Remote::find(location)? {
        Some(mut server) => server.post(
            "/v1/attempts/heartbeat",
            &json!({ "dataset": key.task.dataset, "run": key.task.run, "partition": key.task.partition, "attempt": key.attempt }),
        )?,
        None => {
            let store = location.open_writer()?;
            let lease = store.heartbeat(&key)?;
            crate::location::close_writer(store)?;
            json::heartbeat(&key, &lease)
        }
    };
    let (heartbeat_at_ms, expires_at_ms) = (doc["heartbeat_at_ms"].as_u64().unwrap_or(0), doc["expires_at_ms"].as_u64().unwrap_or(0));
    out.emit(&doc, |w| {
        writeln!(
            w,
            "attempt {}: lease renewed until {} ({} from now)",
            escape(&key.to_string()),
            utc(expires_at_ms),
            duration_s(expires_at_ms.saturating_sub(heartbeat_at_ms))
        )
    })?;
    Ok(Exit::Success)
}

/// `attempt list`: a run's (or one task's) attempts with status, age and lease.
pub fn list(location: &LocationArgs, out: &mut Out, args: &AttemptListArgs) -> anyhow::Result<Exit> {
    let query = json!({ "dataset": args.dataset, "run": args.run, "partition": args.partition });
    let doc = remote::read(location, "/v1/attempts", &query, |snapshot| {
        json::reads::attempt_list(snapshot, &args.dataset, &args.run, args.partition.as_deref(), now_ms())
    })?;
    let attempts = doc["attempts"].as_array().map(Vec::as_slice).unwrap_or_default();
    let now_ms = doc["now_ms"].as_u64().unwrap_or(0);
    let lease_ms = doc["attempt_lifetime_max_ms"].as_u64().unwrap_or(0);
    out.emit(&doc, |w| {
        let mut table = Table::new(vec!["PARTITION", "ATTEMPT", "STATUS", "ACCEPTED", "STARTED", "AGE", "LEASE LEFT"]);
        for a in attempts {
            let status = match a["abandoned_at_ms"].as_u64() {
                Some(at) => format!("{} (abandoned {})", text(&a["status"]), utc(at)),
                None => text(&a["status"]),
            };
            let lease_left = match a["lease_expires_at_ms"].as_u64() {
                Some(expiry) if expiry > now_ms => duration_s(expiry - now_ms),
                Some(_) => "expired".to_owned(),
                None => "-".to_owned(),
            };
            let started = a["started_at_ms"].as_u64().unwrap_or(0);
            table.row(vec![
                text(&a["partition"]),
                text(&a["attempt"]),
                status,
                if a["accepted"] == true { "*".to_owned() } else { String::new() },
                utc(started),
                duration_s(now_ms.saturating_sub(started)),
                lease_left,
            ]);
        }
        table.write(w)?;
        writeln!(w, "({}; lease {})", count(attempts.len() as u64, "attempt"), crate::output::duration(lease_ms))
    })?;
    Ok(Exit::Success)
}

/// Now, in milliseconds since the Unix epoch (the clock the store's times use).
fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `attempt abandon`.
pub fn abandon(location: &LocationArgs, out: &mut Out, args: &HeartbeatArgs) -> anyhow::Result<Exit> {
    let key = task_key(&args.task).attempt(args.attempt);
    let doc = remote::write(location, "/v1/attempts/abandon", &json::operator::attempt_key(&key), || {
        let store = location.open_writer()?;
        let outcome = store.abandon_attempt(&key)?;
        crate::location::close_writer(store)?;
        Ok(json::operator::abandoned(&key, &outcome))
    })?;
    let name = text(&doc["outcome"]);
    out.emit(&doc, |w| {
        writeln!(
            w,
            "attempt {}: {} at {}",
            escape(&key.to_string()),
            name.replace('_', " "),
            utc(doc["abandoned_at_ms"].as_u64().unwrap_or(0))
        )
    })?;
    Ok(Exit::Success)
}

/// `attempt invalidate`.
pub fn invalidate(location: &LocationArgs, out: &mut Out, args: &InvalidateArgs) -> anyhow::Result<Exit> {
    let key = task_key(&args.task).attempt(args.attempt);
    let mut body = json::operator::attempt_key(&key);
    body["actor"] = json!(args.actor);
    body["reason"] = json!(args.reason);
    let doc = remote::write(location, "/v1/attempts/invalidate", &body, || {
        let store = location.open_writer()?;
        let outcome = store.invalidate_attempt(&key, &args.actor, &args.reason)?;
        crate::location::close_writer(store)?;
        Ok(json::operator::invalidated(&key, &outcome))
    })?;
    out.emit(&doc, |w| {
        writeln!(
            w,
            "attempt {}: {}; accepted attempt of the task: {} -> {}",
            escape(&key.to_string()),
            text(&doc["outcome"]).replace('_', " "),
            text(&doc["accepted_before"]),
            text(&doc["accepted_after"])
        )
    })?;
    Ok(Exit::Success)
}

//! `gc`: retention and cleanup. Every destructive step is a dry run unless `--execute` is
//! given, and cleanup is planned first (the plan is stored), then applied with each file
//! re-checked by the library.

use manifestdb::{ApplyOptions, CleanupOptions, RetentionPolicy, RunMode};
use serde_json::{Value, json};

use crate::args::{GcAbandonArgs, GcApplyArgs, GcExpireArgs, GcPlanArgs};
use crate::exit::Exit;
use crate::json::{operator, reads};
use crate::location::LocationArgs;
use crate::output::{Out, Table, Words, count, duration, escape, text, utc};
use crate::remote;

fn mode(execute: bool) -> RunMode {
    if execute { RunMode::Execute } else { RunMode::DryRun }
}

/// Milliseconds of a duration, for a route's `*_ms` field.
fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// An attempt key document as `dataset/run/partition#attempt` (the library's `AttemptKey`
/// display).
fn attempt_text(key: &Value) -> String {
    format!("{}/{}/{}#{}", text(&key["dataset"]), text(&key["run"]), text(&key["partition"]), text(&key["attempt"]))
}

fn items(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// `gc abandon`: records attempts whose lease ran out as abandoned.
pub fn abandon(location: &LocationArgs, out: &mut Out, args: &GcAbandonArgs) -> anyhow::Result<Exit> {
    let doc = remote::write(location, "/v1/gc/abandon", &json!({ "execute": args.execute }), || {
        let store = location.open_writer()?;
        let mode = mode(args.execute);
        let abandoned = store.abandon_expired_attempts(mode)?;
        let doc = operator::gc_abandoned(mode, store.attempt_lifetime_max_ms(), &abandoned);
        crate::location::close_writer(store)?;
        Ok(doc)
    })?;
    let abandoned = items(&doc["abandoned"]);
    out.emit(&doc, |w| {
        let verb = if doc["mode"] == "execute" { "abandoned" } else { "would abandon (dry run; --execute to record)" };
        writeln!(
            w,
            "{verb} {} idle longer than {}",
            count(abandoned.len() as u64, "attempt"),
            duration(doc["attempt_lifetime_max_ms"].as_u64().unwrap_or(0))
        )?;
        for key in abandoned {
            writeln!(w, "  {}", escape(&attempt_text(key)))?;
        }
        Ok(())
    })?;
    Ok(Exit::Success)
}

/// `gc expire`: expires the generations a retention policy does not keep.
pub fn expire(location: &LocationArgs, out: &mut Out, args: &GcExpireArgs) -> anyhow::Result<Exit> {
    let defaults = RetentionPolicy::default();
    let policy = RetentionPolicy {
        keep_last: args.keep_last.unwrap_or(defaults.keep_last),
        rollback_window: args.rollback_window.unwrap_or(defaults.rollback_window),
    };
    let body = json!({
        "dataset": args.dataset, "keep_last": policy.keep_last, "rollback_window_ms": ms(policy.rollback_window), "execute": args.execute,
    });
    let doc = remote::write(location, "/v1/gc/expire", &body, || {
        let store = location.open_writer()?;
        reads::require_dataset(&store.snapshot()?, &args.dataset).map_err(crate::location::document_error)?;
        let report = store.expire_generations(&args.dataset, &policy, mode(args.execute))?;
        crate::location::close_writer(store)?;
        Ok(operator::expired(&report))
    })?;
    out.emit(&doc, |w| {
        let verb = if doc["mode"] == "execute" { "expired" } else { "would expire (dry run; --execute to expire)" };
        let expired: Vec<u64> = items(&doc["expired"]).iter().filter_map(Value::as_u64).collect();
        writeln!(
            w,
            "{}: current generation {}, oldest retained {}; {verb} {} {:?}, {}",
            escape(&text(&doc["dataset"])),
            text(&doc["current"]),
            text(&doc["oldest_retained"]),
            count(expired.len() as u64, "generation"),
            expired,
            count(doc["versions_removed"].as_u64().unwrap_or(0), "partition version")
        )?;
        if expired.is_empty() && doc["current"].as_u64().unwrap_or(0) > 0 {
            // Why nothing goes: the newest `keep_last`, everything younger than the window and
            // everything newer than a kept one are kept (the current generation always).
            writeln!(
                w,
                "nothing to expire: every generation from {} on is among the newest {} or younger than {} (--keep-last, --rollback-window)",
                text(&doc["oldest_retained"]),
                policy.keep_last,
                duration(ms(policy.rollback_window))
            )?;
        }
        Ok(())
    })?;
    Ok(Exit::Success)
}

/// `gc plan`: plans (and stores) a cleanup of the staging root; deletes nothing. `--show ID`
/// prints a stored plan.
pub fn plan(location: &LocationArgs, out: &mut Out, args: &GcPlanArgs) -> anyhow::Result<Exit> {
    let defaults = CleanupOptions::default();
    let options = CleanupOptions {
        age_threshold: args.age_threshold.unwrap_or(defaults.age_threshold),
        force_short_threshold: args.force_short_threshold,
    };
    let spinner = out.spinner("walking the staging root");
    let not_stored = |id: u64| crate::exit::not_found(format!("no cleanup plan {id} is stored"));
    let doc = match args.show {
        Some(id) => match remote::Remote::find(location)? {
            Some(mut server) => server.get("/v1/gc/plan", &json!({ "plan": id }))?,
            None => {
                let store = location.open_writer()?;
                let plan = store.cleanup_plan(id)?.ok_or_else(|| not_stored(id))?;
                crate::location::close_writer(store)?;
                operator::cleanup_plan(&plan)
            }
        },
        None => {
            let body = json!({ "age_threshold_ms": ms(options.age_threshold), "force_short_threshold": options.force_short_threshold });
            remote::write(location, "/v1/gc/plan", &body, || {
                let store = location.open_writer()?;
                let plan = store.plan_cleanup(&options)?;
                crate::location::close_writer(store)?;
                Ok(operator::cleanup_plan(&plan))
            })?
        }
    };
    spinner.finish_and_clear();
    out.emit(&doc, |w| {
        let (candidates, unknown) = (items(&doc["candidates"]), items(&doc["unknown"]));
        writeln!(
            w,
            "cleanup plan {} (made {}, files older than {}): {}, {} bytes to delete; {}",
            text(&doc["plan"]),
            utc(doc["created_at_ms"].as_u64().unwrap_or(0)),
            duration(doc["age_threshold_ms"].as_u64().unwrap_or(0)),
            count(candidates.len() as u64, "file"),
            text(&doc["candidate_bytes"]),
            count(unknown.len() as u64, "unknown file")
        )?;
        let mut table = Table::new(vec!["PATH", "BYTES", "MODIFIED", "REASON"]);
        for p in candidates.iter().chain(unknown) {
            table.row(vec![text(&p["path"]), text(&p["size_bytes"]), utc(p["modified_at_ms"].as_u64().unwrap_or(0)), text(&p["reason"])]);
        }
        table.write(w)?;
        for (reason, n) in doc["kept"].as_object().into_iter().flatten() {
            writeln!(w, "kept: {} {}", count(n.as_u64().unwrap_or(0), "file"), reason.replace('_', " "))?;
        }
        for path in items(&doc["unconsidered"]) {
            writeln!(w, "not considered: {}", escape(&text(path)))?;
        }
        writeln!(w, "apply with: manifestdb gc apply --plan {} --execute", text(&doc["plan"]))
    })?;
    Ok(Exit::Success)
}

/// `gc apply`: applies a stored plan, re-checking every file.
pub fn apply(location: &LocationArgs, out: &mut Out, args: &GcApplyArgs) -> anyhow::Result<Exit> {
    let defaults = ApplyOptions::default();
    let options = ApplyOptions {
        mode: mode(args.execute),
        delete_unknown: args.delete_unknown,
        batch_size: args.batch_size.unwrap_or(defaults.batch_size),
    };
    let body = json!({
        "plan": args.plan, "execute": args.execute, "delete_unknown": args.delete_unknown, "batch_size": options.batch_size,
    });
    // Through a server: a spinner; here: the library's counts of the plan's paths.
    let draw = out.progress_of("applying the cleanup plan", Words { checksums: false, dry_run: !args.execute });
    let doc = remote::write(location, "/v1/gc/apply", &body, || {
        // The store is held one batch at a time: closed after each, and opened again only once
        // the writers of other processes that waited for it meanwhile (a begin, another apply)
        // had it, so none of them waits longer than a batch.
        let hook = draw.hook();
        let mut apply = None;
        loop {
            let store = location.open_writer()?;
            let current = match &mut apply {
                Some(current) => current,
                None => apply.insert(store.start_cleanup_apply(args.plan, &options)?),
            };
            if !store.apply_cleanup_batch(current, &hook)? {
                let report = store.finish_cleanup_apply(current.clone())?;
                crate::location::close_writer(store)?;
                return Ok(operator::cleanup_applied(&report));
            }
            crate::location::close_writer(store)?;
            location.let_waiting_writers_in()?;
        }
    });
    draw.finish();
    let doc = doc?;
    out.emit(&doc, |w| {
        let verb = if doc["mode"] == "execute" { "deleted" } else { "would delete (dry run; --execute to delete)" };
        writeln!(
            w,
            "plan {}: {verb} {}, {} bytes",
            text(&doc["plan"]),
            count(items(&doc["deleted"]).len() as u64, "file"),
            text(&doc["bytes_deleted"])
        )?;
        write_skipped(w, items(&doc["skipped"]), items(&doc["deleted"]).is_empty())?;
        writeln!(
            w,
            "{} removed, {} removed",
            count(doc["directories_removed"].as_u64().unwrap_or(0), "empty directory|empty directories"),
            count(items(&doc["attempt_records_removed"]).len() as u64, "attempt record")
        )
    })?;
    Ok(Exit::Success)
}

/// Paths of one skip reason listed one by one; past this many, the first few and a count.
const SKIPPED_LISTED_MAX: usize = 10;

/// The skipped paths of `gc apply`, summarised per reason: a plan applied again skips every
/// path as missing, thousands of lines that say one thing.
fn write_skipped(w: &mut dyn std::io::Write, skipped: &[serde_json::Value], nothing_deleted: bool) -> std::io::Result<()> {
    let mut by_reason: std::collections::BTreeMap<String, Vec<&serde_json::Value>> = std::collections::BTreeMap::new();
    for s in skipped {
        by_reason.entry(text(&s["reason"]).replace('_', " ")).or_default().push(s);
    }
    for (reason, paths) in &by_reason {
        let shown = if paths.len() > SKIPPED_LISTED_MAX { 3 } else { paths.len() };
        for s in &paths[..shown] {
            let detail = s["detail"].as_str().map(|d| format!(" ({})", escape(d))).unwrap_or_default();
            writeln!(w, "  skipped {}: {reason}{detail}", escape(&text(&s["path"])))?;
        }
        if shown < paths.len() {
            writeln!(w, "  ... and {} more skipped: {reason} (--json lists every path)", paths.len() - shown)?;
        }
    }
    if nothing_deleted && by_reason.get("missing").is_some_and(|missing| missing.len() == skipped.len()) {
        writeln!(w, "every path of the plan was missing: was it applied before?")?;
    }
    Ok(())
}

//! `gc`: retention and cleanup. Every destructive step is a dry run unless `--execute` is
//! given, and cleanup is planned first (the plan is stored), then applied with each file
//! re-checked by the library.

use manifestdb::{
    ApplyOptions, AttemptKey, CleanupOptions, CleanupPlan, CleanupReason, KeepReason, PlannedPath, RetentionPolicy, RunMode, SkipReason,
};
use serde_json::{Value, json};

use super::require_dataset;
use crate::args::{GcAbandonArgs, GcApplyArgs, GcExpireArgs, GcPlanArgs};
use crate::exit::Exit;
use crate::location::LocationArgs;
use crate::output::{Out, Table, duration, escape, utc};

fn mode(execute: bool) -> RunMode {
    if execute { RunMode::Execute } else { RunMode::DryRun }
}

fn mode_name(mode: RunMode) -> &'static str {
    match mode {
        RunMode::DryRun => "dry_run",
        RunMode::Execute => "execute",
    }
}

fn attempt_json(key: &AttemptKey) -> Value {
    json!({ "dataset": key.task.dataset, "run": key.task.run, "partition": key.task.partition, "attempt": key.attempt })
}

fn reason_name(reason: CleanupReason) -> &'static str {
    match reason {
        CleanupReason::Abandoned => "abandoned",
        CleanupReason::Invalid => "invalid",
        CleanupReason::NotRetained => "not_retained",
        CleanupReason::Unknown => "unknown",
    }
}

fn keep_name(reason: KeepReason) -> &'static str {
    match reason {
        KeepReason::Referenced => "referenced",
        KeepReason::MayBeRunning => "may_be_running",
        KeepReason::AwaitingValidation => "awaiting_validation",
        KeepReason::ValidUnpublished => "valid_unpublished",
        KeepReason::TooYoung => "too_young",
        KeepReason::FutureModificationTime => "future_modification_time",
    }
}

fn planned_json(p: &PlannedPath) -> Value {
    json!({
        "path": p.path,
        "size_bytes": p.size_bytes,
        "modified_at_ms": p.modified_at_ms,
        "reason": reason_name(p.reason),
        "attempt": p.attempt.as_ref().map(attempt_json),
    })
}

fn plan_json(plan: &CleanupPlan) -> Value {
    json!({
        "plan": plan.id,
        "created_at_ms": plan.created_at_ms,
        "age_threshold_ms": plan.age_threshold_ms,
        "attempt_lifetime_max_ms": plan.attempt_lifetime_max_ms,
        "candidates": plan.candidates.iter().map(planned_json).collect::<Vec<_>>(),
        "candidate_bytes": plan.candidates.iter().map(|p| p.size_bytes).sum::<u64>(),
        "unknown": plan.unknown.iter().map(planned_json).collect::<Vec<_>>(),
        "kept": plan.kept.iter().map(|(reason, n)| (keep_name(*reason).to_owned(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "unconsidered": plan.unconsidered,
    })
}

/// `gc abandon`: records attempts whose lease ran out as abandoned.
pub fn abandon(location: &LocationArgs, out: &mut Out, args: &GcAbandonArgs) -> anyhow::Result<Exit> {
    let store = location.open_writer()?;
    let mode = mode(args.execute);
    let abandoned = store.abandon_expired_attempts(mode)?;
    let lifetime_ms = store.attempt_lifetime_max_ms();
    let doc = json!({ "mode": mode_name(mode), "attempt_lifetime_max_ms": lifetime_ms, "abandoned": abandoned.iter().map(attempt_json).collect::<Vec<_>>() });
    crate::location::close_writer(store)?;
    out.emit(&doc, |w| {
        let verb = if mode == RunMode::Execute { "abandoned" } else { "would abandon (dry run; --execute to record)" };
        writeln!(w, "{verb} {} attempt(s) idle longer than {}", abandoned.len(), duration(lifetime_ms))?;
        for key in &abandoned {
            writeln!(w, "  {}", escape(&key.to_string()))?;
        }
        Ok(())
    })?;
    Ok(Exit::Success)
}

/// `gc expire`: expires the generations a retention policy does not keep.
pub fn expire(location: &LocationArgs, out: &mut Out, args: &GcExpireArgs) -> anyhow::Result<Exit> {
    let store = location.open_writer()?;
    require_dataset(&store.snapshot()?, &args.dataset)?;
    let defaults = RetentionPolicy::default();
    let policy = RetentionPolicy {
        keep_last: args.keep_last.unwrap_or(defaults.keep_last),
        rollback_window: args.rollback_window.unwrap_or(defaults.rollback_window),
    };
    let report = store.expire_generations(&args.dataset, &policy, mode(args.execute))?;
    let doc = json!({
        "dataset": report.dataset,
        "mode": mode_name(report.mode),
        "current": report.current,
        "oldest_retained": report.oldest_retained,
        "expired": report.expired,
        "versions_removed": report.versions_removed,
    });
    crate::location::close_writer(store)?;
    out.emit(&doc, |w| {
        let verb = if report.mode == RunMode::Execute { "expired" } else { "would expire (dry run; --execute to expire)" };
        writeln!(
            w,
            "{}: current generation {}, oldest retained {}; {verb} {} generation(s) {:?}, {} partition version(s)",
            escape(&report.dataset),
            report.current,
            report.oldest_retained,
            report.expired.len(),
            report.expired,
            report.versions_removed
        )
    })?;
    Ok(Exit::Success)
}

/// `gc plan`: plans (and stores) a cleanup of the staging root; deletes nothing.
pub fn plan(location: &LocationArgs, out: &mut Out, args: &GcPlanArgs) -> anyhow::Result<Exit> {
    let store = location.open_writer()?;
    let defaults = CleanupOptions::default();
    let options = CleanupOptions {
        age_threshold: args.age_threshold.unwrap_or(defaults.age_threshold),
        force_short_threshold: args.force_short_threshold,
    };
    let spinner = out.spinner("walking the staging root");
    let plan = match args.show {
        Some(id) => store.cleanup_plan(id)?.ok_or_else(|| crate::exit::not_found(format!("no cleanup plan {id} is stored")))?,
        None => store.plan_cleanup(&options)?,
    };
    spinner.finish_and_clear();
    let doc = plan_json(&plan);
    crate::location::close_writer(store)?;
    out.emit(&doc, |w| {
        let bytes: u64 = plan.candidates.iter().map(|p| p.size_bytes).sum();
        writeln!(
            w,
            "cleanup plan {} (made {}, files older than {}): {} file(s), {bytes} bytes to delete; {} unknown file(s)",
            plan.id,
            utc(plan.created_at_ms),
            duration(plan.age_threshold_ms),
            plan.candidates.len(),
            plan.unknown.len()
        )?;
        let mut table = Table::new(vec!["PATH", "BYTES", "MODIFIED", "REASON"]);
        for p in plan.candidates.iter().chain(&plan.unknown) {
            table.row(vec![p.path.clone(), p.size_bytes.to_string(), utc(p.modified_at_ms), reason_name(p.reason).to_owned()]);
        }
        table.write(w)?;
        for (reason, n) in &plan.kept {
            writeln!(w, "kept: {n} file(s) {}", keep_name(*reason).replace('_', " "))?;
        }
        for path in &plan.unconsidered {
            writeln!(w, "not considered: {}", escape(path))?;
        }
        writeln!(w, "apply with: manifestdb gc apply --plan {} --execute", plan.id)
    })?;
    Ok(Exit::Success)
}

fn skip_json(reason: &SkipReason) -> (&'static str, Option<String>) {
    match reason {
        SkipReason::Missing => ("missing", None),
        SkipReason::Changed => ("changed", None),
        SkipReason::NowProtected(keep) => ("now_protected", Some(keep_name(*keep).to_owned())),
        SkipReason::OwnerChanged => ("owner_changed", None),
        SkipReason::UnknownNotRequested => ("unknown_not_requested", None),
        SkipReason::DeleteFailed(message) => ("delete_failed", Some(message.clone())),
    }
}

/// `gc apply`: applies a stored plan, re-checking every file.
pub fn apply(location: &LocationArgs, out: &mut Out, args: &GcApplyArgs) -> anyhow::Result<Exit> {
    let store = location.open_writer()?;
    let defaults = ApplyOptions::default();
    let options = ApplyOptions {
        mode: mode(args.execute),
        delete_unknown: args.delete_unknown,
        batch_size: args.batch_size.unwrap_or(defaults.batch_size),
    };
    let spinner = out.spinner("applying the cleanup plan");
    let report = store.apply_cleanup(args.plan, &options)?;
    spinner.finish_and_clear();
    let doc = json!({
        "plan": report.plan,
        "mode": mode_name(report.mode),
        "deleted": report.deleted,
        "bytes_deleted": report.bytes_deleted,
        "skipped": report.skipped.iter().map(|s| {
            let (reason, detail) = skip_json(&s.reason);
            json!({ "path": s.path, "reason": reason, "detail": detail })
        }).collect::<Vec<_>>(),
        "directories_removed": report.directories_removed,
        "attempt_records_removed": report.attempt_records_removed.iter().map(attempt_json).collect::<Vec<_>>(),
    });
    crate::location::close_writer(store)?;
    out.emit(&doc, |w| {
        let verb = if report.mode == RunMode::Execute { "deleted" } else { "would delete (dry run; --execute to delete)" };
        writeln!(w, "plan {}: {verb} {} file(s), {} bytes", report.plan, report.deleted.len(), report.bytes_deleted)?;
        for s in &report.skipped {
            let (reason, detail) = skip_json(&s.reason);
            writeln!(
                w,
                "  skipped {}: {}{}",
                escape(&s.path),
                reason.replace('_', " "),
                detail.map(|d| format!(" ({})", escape(&d))).unwrap_or_default()
            )?;
        }
        writeln!(
            w,
            "{} empty directories removed, {} attempt record(s) removed",
            report.directories_removed,
            report.attempt_records_removed.len()
        )
    })?;
    Ok(Exit::Success)
}

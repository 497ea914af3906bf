//! `verify` and `rollback`: an operator's inspection and repair of a store.

use manifestdb::{FileCheck, IntegrityCheck, RollbackOutcome, RollbackRefusal, VerifyOptions, VerifyReport};
use serde_json::{Value, json};

use crate::args::{RollbackArgs, VerifyArgs};
use crate::exit::Exit;
use crate::json;
use crate::location::LocationArgs;
use crate::output::Out;

fn integrity_json(check: &IntegrityCheck) -> Value {
    match check {
        IntegrityCheck::Passed => json!({ "status": "passed", "detail": null }),
        IntegrityCheck::Repaired => json!({ "status": "repaired", "detail": null }),
        IntegrityCheck::Failed { message } => json!({ "status": "failed", "detail": message }),
        IntegrityCheck::Skipped { reason } => json!({ "status": "skipped", "detail": reason }),
        _ => json!({ "status": "other", "detail": null }),
    }
}

fn report_json(report: &VerifyReport) -> Value {
    json!({
        "clean": report.is_clean(),
        "integrity": integrity_json(&report.integrity),
        "records": report.records.iter().map(|(name, n)| (crate::commands::inspect::unversioned(name).to_owned(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "records_total": report.records_total(),
        "files_checked": report.files_checked,
        "findings": report.findings.iter().map(|f| json!({ "table": f.table, "key": f.key, "message": f.message })).collect::<Vec<_>>(),
        "notes": report.notes,
    })
}

/// `verify`: exit 0 when clean, 7 when anything is found.
pub fn verify(location: &LocationArgs, out: &mut Out, args: &VerifyArgs) -> anyhow::Result<Exit> {
    let files = match (args.files, args.checksums) {
        (_, true) => Some(FileCheck::SizeAndChecksum),
        (true, false) => Some(FileCheck::Size),
        (false, false) => None,
    };
    let options = VerifyOptions { integrity_check: args.integrity, files, staging_root: location.staging_root() };
    // The walk reports no progress of its own; a spinner shows it is alive on a terminal.
    let spinner = out.spinner("verifying");
    let report = if args.integrity {
        // redb's own check needs the store exclusively: no other process may hold it.
        let mut store = location.open_writer()?;
        store.verify(&options)?
    } else {
        location.open_reader()?.verify(&options)?
    };
    spinner.finish_and_clear();
    let doc = report_json(&report);
    out.emit(&doc, |w| {
        writeln!(w, "{report}")?;
        Ok(())
    })?;
    Ok(if report.is_clean() { Exit::Success } else { Exit::Corrupt })
}

fn refusal_json(refusal: &RollbackRefusal) -> Value {
    let message = refusal.to_string();
    match refusal {
        RollbackRefusal::Expired { requested, oldest_retained } => {
            json!({ "kind": "expired", "message": message, "requested": requested, "oldest_retained": oldest_retained })
        }
        RollbackRefusal::Unknown { requested, current } => {
            json!({ "kind": "unknown", "message": message, "requested": requested, "current": current })
        }
        RollbackRefusal::AlreadyCurrent { generation } => {
            json!({ "kind": "already_current", "message": message, "generation": generation })
        }
    }
}

/// `rollback`: exit 0 when rolled back, 3 when refused (nothing written).
pub fn rollback(location: &LocationArgs, out: &mut Out, args: &RollbackArgs) -> anyhow::Result<Exit> {
    let store = location.open_writer()?;
    let outcome = store.rollback(&args.dataset, args.to, &args.actor, &args.reason)?;
    let (name, generation, refusal, exit) = match &outcome {
        RollbackOutcome::RolledBack(g) => ("rolled_back", json::generation(g), Value::Null, Exit::Success),
        RollbackOutcome::Refused(r) => ("refused", Value::Null, refusal_json(r), Exit::Refused),
    };
    let doc = json!({ "dataset": args.dataset, "to": args.to, "outcome": name, "generation": generation, "refusal": refusal });
    out.emit(&doc, |w| match &outcome {
        RollbackOutcome::RolledBack(g) => {
            writeln!(w, "{} rolled back: generation {} restores generation {} (parent {})", g.dataset, g.number, args.to, g.parent)
        }
        RollbackOutcome::Refused(r) => writeln!(w, "rollback of {} refused: {r}; nothing was written", args.dataset),
    })?;
    Ok(exit)
}

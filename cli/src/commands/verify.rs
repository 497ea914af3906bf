//! `verify`: an operator's integrity check of a store.

use manifestdb::{FileCheck, IntegrityCheck, VerifyOptions, VerifyReport};
use serde_json::{Value, json};

use crate::args::VerifyArgs;
use crate::exit::Exit;
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
    let options = VerifyOptions { integrity_check: args.integrity, files, staging_root: location.staging_root(), views: true };
    // The walk reports no progress of its own; a spinner shows it is alive on a terminal.
    let spinner = out.spinner("verifying");
    let report = if args.integrity {
        // redb's own check needs the store exclusively: no other process may hold it.
        let mut store = location.open_writer()?;
        let report = store.verify(&options)?;
        crate::location::close_writer(store)?;
        report
    } else {
        let store = location.open_reader()?;
        let report = store.verify(&options)?;
        crate::location::close_reader(store)?;
        report
    };
    spinner.finish_and_clear();
    let doc = report_json(&report);
    out.emit(&doc, |w| {
        writeln!(w, "{report}")?;
        Ok(())
    })?;
    Ok(if report.is_clean() { Exit::Success } else { Exit::Corrupt })
}

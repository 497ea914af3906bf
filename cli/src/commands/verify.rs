//! `verify`: an operator's integrity check of a store.

use manifestdb::{FileCheck, VerifyOptions};
use serde_json::{Value, json};

use crate::args::VerifyArgs;
use crate::exit::Exit;
use crate::json::operator;
use crate::location::LocationArgs;
use crate::output::{Out, text};
use crate::remote;

/// The report as the library's `VerifyReport` displays it, from its document.
fn report_text(doc: &Value) -> String {
    let integrity = &doc["integrity"];
    let mut lines = vec![match integrity["status"].as_str() {
        Some("passed") => "redb integrity check: passed".to_owned(),
        Some("repaired") => "redb integrity check: FAILED (redb's repair of its allocator state was not kept)".to_owned(),
        Some("failed") => format!("redb integrity check: FAILED: {}", text(&integrity["detail"])),
        _ => format!("redb integrity check: skipped ({})", text(&integrity["detail"])),
    }];
    let tables = doc["records"].as_object().map_or(0, serde_json::Map::len);
    lines.push(format!(
        "records decoded: {} in {tables} tables; files checked: {}",
        text(&doc["records_total"]),
        text(&doc["files_checked"])
    ));
    for note in doc["notes"].as_array().into_iter().flatten() {
        lines.push(format!("note: {}", text(note)));
    }
    let findings = doc["findings"].as_array().map(Vec::as_slice).unwrap_or_default();
    if findings.is_empty() {
        lines.push("no findings".to_owned());
    } else {
        lines.push(format!("{}:", crate::output::count(findings.len() as u64, "finding")));
        for f in findings {
            lines.push(format!("  {} [{}]: {}", text(&f["table"]), text(&f["key"]), text(&f["message"])));
        }
    }
    lines.join("\n")
}

/// `verify`: exit 0 when clean, 7 when anything is found.
pub fn verify(location: &LocationArgs, out: &mut Out, args: &VerifyArgs) -> anyhow::Result<Exit> {
    let (files, files_name) = match (args.files, args.checksums) {
        (_, true) => (Some(FileCheck::SizeAndChecksum), Some("checksums")),
        (true, false) => (Some(FileCheck::Size), Some("size")),
        (false, false) => (None, None),
    };
    let options = VerifyOptions { integrity_check: args.integrity, files, staging_root: location.staging_root(), views: true };
    // The walk reports no progress of its own; a spinner shows it is alive on a terminal.
    let spinner = out.spinner("verifying");
    let doc = remote::write(location, "/v1/verify", &json!({ "files": files_name, "integrity": args.integrity }), || {
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
        Ok(operator::verified(&report))
    })?;
    spinner.finish_and_clear();
    out.emit(&doc, |w| writeln!(w, "{}", report_text(&doc)))?;
    Ok(if doc["clean"] == true { Exit::Success } else { Exit::Corrupt })
}

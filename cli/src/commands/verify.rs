//! `verify`: an operator's integrity check of a store.

use manifestdb::{FileCheck, Store, VerifyOptions};
use serde_json::{Value, json};

use crate::args::VerifyArgs;
use crate::exit::{Exit, STORE_DAMAGED};
use crate::json::operator;
use crate::location::LocationArgs;
use crate::output::{Out, Words, text};
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
        lines.extend(what_to_do(findings));
    }
    lines.join("\n")
}

/// What an operator does about the findings, by where they are: the store file's own records
/// (or redb's check), the staging files, the views.
fn what_to_do(findings: &[Value]) -> Vec<String> {
    let table = |f: &Value| f["table"].as_str().unwrap_or_default().to_owned();
    let mut advice = Vec::new();
    if findings.iter().any(|f| table(f) != "files" && table(f) != "views") {
        advice.push(format!("what to do: {STORE_DAMAGED}"));
    }
    if findings.iter().any(|f| table(f) == "files") {
        advice.push(
            "what to do: a staging file a retained generation names is missing or changed: put it back from a copy, or publish the task again (a new run); verify --files checks again"
                .to_owned(),
        );
    }
    if findings.iter().any(|f| table(f) == "views") {
        advice.push("what to do: `manifestdb view sync` rebuilds the views from the store".to_owned());
    }
    advice
}

/// `verify`: exit 0 when clean, 7 when anything is found.
pub fn verify(location: &LocationArgs, out: &mut Out, args: &VerifyArgs) -> anyhow::Result<Exit> {
    let (files, files_name) = match (args.files, args.checksums) {
        (_, true) => (Some(FileCheck::SizeAndChecksum), Some("checksums")),
        (true, false) => (Some(FileCheck::Size), Some("size")),
        (false, false) => (None, None),
    };
    let options = VerifyOptions { integrity_check: args.integrity, files, staging_root: location.staging_root(), views: true };
    // A spinner while the records are walked (or a server verifies), then the library's
    // counts of the staging files checked.
    let draw = out.progress_of("verifying", Words { checksums: args.checksums, dry_run: false });
    let doc = remote::write(location, "/v1/verify", &json!({ "files": files_name, "integrity": args.integrity }), || {
        let report = if args.integrity {
            // redb's own check needs the store exclusively, as a writer: no other process may
            // hold it. Its handle writes nothing to the store file.
            let hook = draw.hook();
            location.as_writer(
                |_| {},
                "verifying",
                |path, staging, store_options| Store::verify_without_writing(path, staging, store_options, &options, &hook),
            )?
        } else {
            let store = location.open_reader()?;
            let report = store.verify_with_progress(&options, &draw.hook())?;
            crate::location::close_reader(store)?;
            report
        };
        Ok(operator::verified(&report))
    });
    draw.finish();
    let doc = doc?;
    out.emit(&doc, |w| writeln!(w, "{}", report_text(&doc)))?;
    Ok(if doc["clean"] == true { Exit::Success } else { Exit::Corrupt })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn findings_say_what_to_do_by_where_they_are() {
        let record = json!({"table": "attempts_v1", "key": "d/r/p#1", "message": "checksum mismatch"});
        let file = json!({"table": "files", "key": "d/r/p/@attempt-1/part.csv", "message": "missing"});
        let view = json!({"table": "views", "key": "d/v1", "message": "missing file"});
        let advice = super::what_to_do(&[record]).join("\n");
        assert!(advice.contains("put back") && advice.contains("verify --json"), "{advice}");
        let advice = super::what_to_do(&[file, view]).join("\n");
        assert!(advice.contains("staging file") && advice.contains("view sync") && !advice.contains("store file is damaged"), "{advice}");
    }
}

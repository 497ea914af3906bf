//! `publish`.

use serde_json::json;

use crate::args::PublishArgs;
use crate::exit::Exit;
use crate::json;
use crate::location::LocationArgs;
use crate::output::{Out, count, escape, text};
use crate::remote::Remote;

/// `publish`: exit 0 when published or already published, 3 when refused.
pub fn publish(location: &LocationArgs, out: &mut Out, args: &PublishArgs) -> anyhow::Result<Exit> {
    let doc = match Remote::find(location)? {
        Some(mut server) => server.post(
            "/v1/publish",
            &json!({ "dataset": args.dataset, "run": args.run, "accept_nondeterminism": args.accept_nondeterminism }),
        )?,
        None => {
            let store = location.open_writer()?;
            let options = manifestdb::PublishOptions { accept_nondeterminism: args.accept_nondeterminism.clone() };
            let outcome = store.publish(&args.dataset, &args.run, &options)?;
            crate::location::close_writer(store)?;
            json::published(&args.dataset, &args.run, &outcome)
        }
    };
    let g = &doc["generation"];
    let outcome = doc["outcome"].as_str().unwrap_or_default().to_owned();
    out.emit(&doc, |w| match outcome.as_str() {
        "published" => writeln!(
            w,
            "published run {} of {} as generation {} (parent {}, {} replaced)",
            escape(&text(&g["run"])),
            escape(&text(&g["dataset"])),
            text(&g["number"]),
            text(&g["parent"]),
            count(g["partitions_replaced"].as_u64().unwrap_or(0), "partition")
        ),
        "already_published" => writeln!(
            w,
            "run {} of {} was already published as generation {}; nothing written",
            escape(&text(&g["run"])),
            escape(&text(&g["dataset"])),
            text(&g["number"])
        ),
        _ => {
            // The refusal as the library words it, one line per failing task, with each
            // partition key and reason escaped so that a key holding a newline cannot forge a
            // line.
            write!(w, "publish of run {:?} of {:?} refused:", args.run, args.dataset)?;
            for task in doc["refused_tasks"].as_array().into_iter().flatten() {
                write!(w, "\n  {}: {}", escape(&text(&task["partition"])), escape(&text(&task["message"])))?;
            }
            writeln!(w, "\nnothing was written; the generation pointer did not move")
        }
    })?;
    Ok(if outcome == "refused" { Exit::Refused } else { Exit::Success })
}

//! `rollback`: an operator's repair of a dataset's current generation.

use serde_json::json;

use crate::args::RollbackArgs;
use crate::exit::Exit;
use crate::json::{operator, reads};
use crate::location::LocationArgs;
use crate::output::{Out, escape, text};
use crate::remote;

/// `rollback`: exit 0 when rolled back, 3 when refused (nothing written), 4 when the dataset
/// or the generation does not exist (for an unknown generation the refusal document is still
/// printed).
pub fn rollback(location: &LocationArgs, out: &mut Out, args: &RollbackArgs) -> anyhow::Result<Exit> {
    let body = json!({ "dataset": args.dataset, "to": args.to, "actor": args.actor, "reason": args.reason });
    let doc = remote::write(location, "/v1/rollback", &body, || {
        let store = location.open_writer()?;
        reads::require_dataset(&store.snapshot()?, &args.dataset).map_err(crate::location::document_error)?;
        let outcome = store.rollback(&args.dataset, args.to, &args.actor, &args.reason)?;
        crate::location::close_writer(store)?;
        Ok(operator::rollback(&args.dataset, args.to, &outcome))
    })?;
    let exit = match (doc["outcome"].as_str(), doc["refusal"]["kind"].as_str()) {
        (Some("rolled_back"), _) => Exit::Success,
        (_, Some("unknown")) => Exit::NotFound,
        _ => Exit::Refused,
    };
    out.emit(&doc, |w| {
        if exit == Exit::Success {
            let g = &doc["generation"];
            writeln!(
                w,
                "{} rolled back: generation {} restores generation {} (parent {})",
                escape(&text(&g["dataset"])),
                text(&g["number"]),
                args.to,
                text(&g["parent"])
            )
        } else {
            writeln!(w, "rollback of {} refused: {}; nothing was written", escape(&args.dataset), text(&doc["refusal"]["message"]))
        }
    })?;
    Ok(exit)
}

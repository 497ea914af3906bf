//! `rollback`: an operator's repair of a dataset's current generation.

use manifestdb::{RollbackOutcome, RollbackRefusal};
use serde_json::{Value, json};

use super::require_dataset;
use crate::args::RollbackArgs;
use crate::exit::Exit;
use crate::json;
use crate::location::LocationArgs;
use crate::output::{Out, escape};

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

/// `rollback`: exit 0 when rolled back, 3 when refused (nothing written), 4 when the dataset
/// or the generation does not exist (for an unknown generation the refusal document is still
/// printed).
pub fn rollback(location: &LocationArgs, out: &mut Out, args: &RollbackArgs) -> anyhow::Result<Exit> {
    let store = location.open_writer()?;
    require_dataset(&store.snapshot()?, &args.dataset)?;
    let outcome = store.rollback(&args.dataset, args.to, &args.actor, &args.reason)?;
    let (name, generation, refusal, exit) = match &outcome {
        RollbackOutcome::RolledBack(g) => ("rolled_back", json::generation(g), Value::Null, Exit::Success),
        RollbackOutcome::Refused(r @ RollbackRefusal::Unknown { .. }) => ("refused", Value::Null, refusal_json(r), Exit::NotFound),
        RollbackOutcome::Refused(r) => ("refused", Value::Null, refusal_json(r), Exit::Refused),
    };
    let doc = json!({ "dataset": args.dataset, "to": args.to, "outcome": name, "generation": generation, "refusal": refusal });
    crate::location::close_writer(store)?;
    out.emit(&doc, |w| match &outcome {
        RollbackOutcome::RolledBack(g) => {
            writeln!(w, "{} rolled back: generation {} restores generation {} (parent {})", escape(&g.dataset), g.number, args.to, g.parent)
        }
        RollbackOutcome::Refused(r) => writeln!(w, "rollback of {} refused: {r}; nothing was written", escape(&args.dataset)),
    })?;
    Ok(exit)
}

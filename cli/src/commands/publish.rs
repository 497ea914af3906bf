//! `publish`.

use manifestdb::{PublishOptions, PublishOutcome, PublishRefusal};
use serde_json::{Value, json};

use crate::args::PublishArgs;
use crate::exit::Exit;
use crate::json;
use crate::location::LocationArgs;
use crate::output::{Out, escape};

/// `publish`: exit 0 when published or already published, 3 when refused.
pub fn publish(location: &LocationArgs, out: &mut Out, args: &PublishArgs) -> anyhow::Result<Exit> {
    let store = location.open_writer()?;
    let options = PublishOptions { accept_nondeterminism: args.accept_nondeterminism.clone() };
    let outcome = store.publish(&args.dataset, &args.run, &options)?;
    let (name, generation, refused, exit) = match &outcome {
        PublishOutcome::Published(g) => ("published", json::generation(g), Vec::new(), Exit::Success),
        PublishOutcome::AlreadyPublished(g) => ("already_published", json::generation(g), Vec::new(), Exit::Success),
        PublishOutcome::Refused(r) => ("refused", Value::Null, json::refused_tasks(r), Exit::Refused),
    };
    let doc = json!({
        "dataset": args.dataset,
        "run": args.run,
        "outcome": name,
        "generation": generation,
        "refused_tasks": refused,
    });
    crate::location::close_writer(store)?;
    out.emit(&doc, |w| match &outcome {
        PublishOutcome::Published(g) => writeln!(
            w,
            "published run {} of {} as generation {} (parent {}, {} partitions replaced)",
            escape(&g.run),
            escape(&g.dataset),
            g.number,
            g.parent,
            g.partitions_replaced
        ),
        PublishOutcome::AlreadyPublished(g) => {
            writeln!(
                w,
                "run {} of {} was already published as generation {}; nothing written",
                escape(&g.run),
                escape(&g.dataset),
                g.number
            )
        }
        PublishOutcome::Refused(refusal) => {
            writeln!(w, "{}\nnothing was written; the generation pointer did not move", refusal_text(refusal))
        }
    })?;
    Ok(exit)
}

/// The refusal as the library words it, one line per failing task, with each partition key and
/// reason escaped so that a key holding a newline cannot forge a line.
fn refusal_text(refusal: &PublishRefusal) -> String {
    let mut text = format!("publish of run {:?} of {:?} refused:", refusal.run, refusal.dataset);
    for task in &refusal.tasks {
        let alone = PublishRefusal { dataset: String::new(), run: String::new(), tasks: vec![task.clone()] }.to_string();
        let lead = format!("\n  {}: ", task.partition);
        let reason = alone.split_once(lead.as_str()).map_or(alone.as_str(), |(_, reason)| reason);
        text.push_str(&format!("\n  {}: {}", escape(&task.partition), escape(reason)));
    }
    text
}

//! `batch`: newline-delimited JSON operations on stdin, one commit, one result line each.

use std::io::Read;

use anyhow::Context;
use manifestdb::{BATCH_OPS_MAX, BatchOp, BatchOutcome, FinishOutcome};
use serde_json::{Value, json};

use crate::exit::{self, Exit};
use crate::json;
use crate::location::LocationArgs;
use crate::output::Out;

/// One input line: its number (1-based) and the operation, or why it is not one.
type Line = (usize, Result<BatchOp, String>);

/// `batch`: reads every line first, runs the operations in commits of at most
/// [`BATCH_OPS_MAX`], closes the store, then writes the result lines.
pub fn batch(location: &LocationArgs, out: &mut Out) -> anyhow::Result<Exit> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).context("reading operations from stdin")?;
    let lines: Vec<Line> = input
        .lines()
        .enumerate()
        .filter(|(_, text)| !text.trim().is_empty())
        .map(|(i, text)| (i + 1, serde_json::from_str::<BatchOp>(text).map_err(|e| format!("line {} is not an operation: {e}", i + 1))))
        .collect();
    let ops: Vec<BatchOp> = lines.iter().filter_map(|(_, op)| op.as_ref().ok().cloned()).collect();
    let mut outcomes = Vec::with_capacity(ops.len());
    if !ops.is_empty() {
        let store = location.open_writer()?;
        for chunk in ops.chunks(BATCH_OPS_MAX) {
            outcomes.extend(store.run_batch(chunk)?);
        }
        crate::location::close_writer(store)?;
    }
    let mut outcomes = outcomes.into_iter();
    let mut text = String::new();
    let mut all_ok = true;
    for (number, parsed) in lines {
        let doc = match parsed {
            Err(message) => {
                all_ok = false;
                json!({ "line": number, "op": Value::Null, "ok": false, "error": error(Exit::Usage, &message) })
            }
            Ok(op) => match outcomes.next() {
                Some(Ok(outcome)) => json!({ "line": number, "op": op.name(), "ok": true, "result": result(&outcome) }),
                Some(Err(err)) => {
                    all_ok = false;
                    let err = anyhow::Error::new(err);
                    json!({ "line": number, "op": op.name(), "ok": false, "error": error(exit::classify(&err), &exit::message(&err)) })
                }
                None => anyhow::bail!("the batch returned fewer results than operations"),
            },
        };
        text.push_str(&serde_json::to_string(&doc).context("rendering a result line")?);
        text.push('\n');
    }
    out.raw(&text)?;
    Ok(if all_ok { Exit::Success } else { Exit::Refused })
}

fn error(exit: Exit, message: &str) -> Value {
    exit::error_document(exit, message)["error"].clone()
}

/// The result document of one operation: the shape its single verb prints with `--json`.
fn result(outcome: &BatchOutcome) -> Value {
    match outcome {
        BatchOutcome::Begin(ticket) => {
            let task = &ticket.key.task;
            json!({
                "dataset": task.dataset,
                "run": task.run,
                "partition": task.partition,
                "attempt": ticket.key.attempt,
                "staging_dir": ticket.staging_dir,
                "started_at_ms": ticket.started_at_ms,
            })
        }
        BatchOutcome::Finish(finish) => json!({
            "outcome": match finish {
                FinishOutcome::Recorded => "recorded",
                FinishOutcome::AlreadyRecorded => "already_recorded",
            }
        }),
        BatchOutcome::Validate(verdict) => {
            let (name, failures) = json::verdict(verdict);
            json!({ "verdict": name, "failures": failures })
        }
        BatchOutcome::RecordEffect(recorded) => {
            json!({ "newly_recorded": recorded.newly_recorded, "effect": json::effect(&recorded.effect) })
        }
        BatchOutcome::ClaimEffect(claim) => json::claim_outcome(claim),
        BatchOutcome::MarkEmitted(mark) => json::mark_outcome(mark),
        // BatchOutcome is non_exhaustive: an operation this tool does not know yet.
        _ => json!({ "outcome": "unknown" }),
    }
}

//! `batch`: newline-delimited JSON operations on stdin, one commit, one result line each.

use std::io::Read;

use anyhow::Context;
use manifestdb::{BATCH_OPS_MAX, BatchOp};
use serde_json::{Value, json};

use crate::exit::{self, Exit};
use crate::json;
use crate::location::LocationArgs;
use crate::output::Out;
use crate::remote::Remote;

/// One input line: its number (1-based) and the operation, or why it is not one.
type Line = (usize, Result<BatchOp, String>);

/// `batch`: reads every line first, runs the operations in commits of at most
/// [`BATCH_OPS_MAX`] (through the store's server when one runs: `POST /v1/batch`), closes the
/// store, then writes the result lines.
pub fn batch(location: &LocationArgs, out: &mut Out) -> anyhow::Result<Exit> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).context("reading operations from stdin")?;
    let lines: Vec<Line> = input
        .lines()
        .enumerate()
        .filter(|(_, text)| !text.trim().is_empty())
        .map(|(i, text)| (i + 1, serde_json::from_str::<BatchOp>(text).map_err(|e| format!("line {} is not an operation: {e}", i + 1))))
        .collect();
    let ops: Vec<&BatchOp> = lines.iter().filter_map(|(_, op)| op.as_ref().ok()).collect();
    let numbers: Vec<usize> = lines.iter().filter(|(_, op)| op.is_ok()).map(|(number, _)| *number).collect();
    // Refused up front, whole (the library refuses it too, by operation index): see --help.
    for chunk in (0..ops.len()).collect::<Vec<_>>().chunks(BATCH_OPS_MAX) {
        if let Some((finish, validate)) = manifestdb::validation_after_its_finish(chunk.iter().map(|&i| ops[i])) {
            return Err(exit::usage(format!(
                "line {} validates the attempt that line {} finishes in the same batch: a validation is prepared against the \
                 store as it was before the batch, where that attempt is not finished yet; send the validate in a later batch \
                 (nothing ran)",
                numbers[chunk[validate]], numbers[chunk[finish]]
            )));
        }
    }
    // Each operation's result: the result document, or the error object.
    let mut results: Vec<Result<Value, Value>> = Vec::with_capacity(ops.len());
    if !ops.is_empty() {
        match Remote::find(location)? {
            Some(mut server) => {
                for chunk in ops.chunks(BATCH_OPS_MAX) {
                    let answer = server.post("/v1/batch", &json!({ "ops": chunk }))?;
                    let lines = answer["results"].as_array().map(Vec::as_slice).unwrap_or_default();
                    if lines.len() != chunk.len() {
                        anyhow::bail!("the server returned {} results for {} operations", lines.len(), chunk.len());
                    }
                    results.extend(
                        lines.iter().map(|line| if line["ok"] == true { Ok(line["result"].clone()) } else { Err(line["error"].clone()) }),
                    );
                }
            }
            None => {
                let ops: Vec<BatchOp> = ops.into_iter().cloned().collect();
                let store = location.open_writer()?;
                let mut outcomes = Vec::with_capacity(ops.len());
                for chunk in ops.chunks(BATCH_OPS_MAX) {
                    outcomes.extend(store.run_batch(chunk)?);
                }
                crate::location::close_writer(store)?;
                results.extend(outcomes.into_iter().map(|outcome| match outcome {
                    Ok(outcome) => Ok(json::batch_result(&outcome)),
                    Err(err) => {
                        let err = anyhow::Error::new(err);
                        Err(error(exit::classify(&err), &exit::message(&err)))
                    }
                }));
            }
        }
    }
    let mut results = results.into_iter();
    let mut text = String::new();
    let mut all_ok = true;
    for (number, parsed) in lines {
        let doc = match parsed {
            Err(message) => json::batch_line(number, None, Err(error(Exit::Usage, &message))),
            Ok(op) => match results.next() {
                Some(result) => json::batch_line(number, Some(op.name()), result),
                None => anyhow::bail!("the batch returned fewer results than operations"),
            },
        };
        all_ok &= doc["ok"] == true;
        text.push_str(&serde_json::to_string(&doc).context("rendering a result line")?);
        text.push('\n');
    }
    out.raw(&text)?;
    Ok(if all_ok { Exit::Success } else { Exit::Refused })
}

fn error(exit: Exit, message: &str) -> Value {
    exit::error_document(exit, message)["error"].clone()
}

//! `manifestdb`: the command-line tool over the manifestdb library.
//!
//! A thin shell, in the manner of ripgrep: clap parses the flags into settings (`args.rs`,
//! `location.rs`), the log goes to stderr (`logging.rs`), each verb calls the library and
//! prints one result (`commands/`, through `output.rs` and the JSON shapes of `json.rs`), and
//! the outcome becomes a documented exit code (`exit.rs`). A closed output pipe ends the
//! program quietly with success.

mod args;
mod commands;
mod exit;
mod json;
mod location;
mod logging;
mod output;
#[cfg(test)]
mod reference;
mod remote;
mod values;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::logging::LogFormat;

fn main() -> ExitCode {
    quiet_contained_panics();
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return exit::clap_error(&err, json_requested()),
    };
    match logging::filter(cli.verbose, cli.quiet, std::env::var("RUST_LOG").ok().as_deref()) {
        Ok(filter) => logging::install(filter, cli.log_format.unwrap_or(if cli.json { LogFormat::Json } else { LogFormat::Text })),
        Err(message) => return report(&exit::usage(message), cli.json),
    }
    let mut out = output::Out::new(cli.json);
    match commands::run(&cli, &mut out) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(err) if exit::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => report(&err, cli.json),
    }
}

/// Writes the error to stderr (with `--json` as the JSON error document) and returns its exit
/// code.
fn report(err: &anyhow::Error, json: bool) -> ExitCode {
    let exit = exit::classify(err);
    let mut stderr = std::io::stderr().lock();
    // Nothing sensible is left to do if stderr itself is closed.
    let _ = if json {
        writeln!(stderr, "{}", exit::error_document(exit, &exit::message(err)))
    } else {
        writeln!(stderr, "manifestdb: error: {}", exit::message(err))
    };
    ExitCode::from(exit.code())
}

/// Whether `--json` is on the command line (before a `--`), for errors found before the command
/// line could be parsed.
fn json_requested() -> bool {
    std::env::args_os().skip(1).take_while(|arg| arg != "--").any(|arg| arg == "--json")
}

/// redb panics on some damaged files (its "cannot happen" checks); the library contains those
/// panics at its boundary and reports the store as corrupt, which this tool prints as one
/// error line and exit code 7. The default panic hook would first print redb's message and
/// source location as if the tool had crashed, so panics raised inside redb's source are not
/// printed; any other panic is, as usual.
fn quiet_contained_panics() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let in_redb = info.location().is_some_and(|l| {
            let file = l.file().replace('\\', "/");
            file.contains("/redb-") || file.contains("/redb/src/")
        });
        if !in_redb {
            default_hook(info);
        }
    }));
}

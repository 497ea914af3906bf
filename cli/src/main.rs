//! `manifestdb`: the command-line tool over the manifestdb library.
//!
//! A thin shell, in the manner of ripgrep: clap parses the flags into settings (`args.rs`,
//! `location.rs`), each verb calls the library and prints one result (`commands/`, through
//! `output.rs` and the JSON shapes of `json.rs`), and the outcome becomes a documented exit
//! code (`exit.rs`). A closed output pipe ends the program quietly with success.

mod args;
mod commands;
mod exit;
mod json;
mod location;
mod output;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    let mut out = output::Out::new(cli.json);
    match commands::run(&cli, &mut out) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(err) if exit::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            let exit = exit::classify(&err);
            let mut stderr = std::io::stderr().lock();
            // Nothing sensible is left to do if stderr itself is closed.
            let _ = if cli.json {
                let doc = serde_json::json!({
                    "error": { "exit_code": exit.code(), "kind": exit.name(), "message": exit::message(&err) }
                });
                writeln!(stderr, "{doc}")
            } else {
                writeln!(stderr, "manifestdb: error: {}", exit::message(&err))
            };
            ExitCode::from(exit.code())
        }
    }
}

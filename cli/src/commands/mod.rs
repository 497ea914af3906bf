//! One function per verb: call the library, print the outcome, return the exit code.

mod attempt;
mod batch;
mod effects;
mod gc;
pub(crate) mod inspect;
mod publish;
mod rollback;
mod run;
pub(crate) mod serve;
mod verify;
mod view;

use std::io::Read;
use std::path::Path;

use anyhow::Context;
use serde_json::json;

use crate::args::{AttemptCommand, Cli, Command, EffectsCommand, GcCommand, RunCommand};
use crate::exit::Exit;
use crate::output::{Out, escape};

/// Runs the parsed command line.
pub fn run(cli: &Cli, out: &mut Out) -> anyhow::Result<Exit> {
    let location = &cli.location;
    match &cli.command {
        Command::Init => init(location, out),
        Command::Run(RunCommand::Declare(args)) => run::declare(location, out, args),
        Command::Run(RunCommand::Show(args)) => run::show(location, out, args),
        Command::Attempt(AttemptCommand::Begin(args)) => attempt::begin(location, out, args),
        Command::Attempt(AttemptCommand::Finish(args)) => attempt::finish(location, out, args),
        Command::Attempt(AttemptCommand::Validate(args)) => attempt::validate(location, out, args),
        Command::Publish(args) => publish::publish(location, out, args),
        Command::Show(args) => inspect::show(location, out, args),
        Command::Log(args) => inspect::log(location, out, args),
        Command::Diff(args) => inspect::diff(location, out, args),
        Command::Effects(EffectsCommand::List(args)) => effects::list(location, out, args),
        Command::Effects(EffectsCommand::Record(args)) => effects::record(location, out, args),
        Command::Effects(EffectsCommand::Claim(args)) => effects::claim(location, out, args),
        Command::Effects(EffectsCommand::MarkEmitted(args)) => effects::mark_emitted(location, out, args),
        Command::Stats => inspect::stats(location, out),
        Command::Attempt(AttemptCommand::Heartbeat(args)) => attempt::heartbeat(location, out, args),
        Command::Attempt(AttemptCommand::Abandon(args)) => attempt::abandon(location, out, args),
        Command::Attempt(AttemptCommand::Invalidate(args)) => attempt::invalidate(location, out, args),
        Command::Verify(args) => verify::verify(location, out, args),
        Command::Rollback(args) => rollback::rollback(location, out, args),
        Command::Gc(GcCommand::Abandon(args)) => gc::abandon(location, out, args),
        Command::Gc(GcCommand::Expire(args)) => gc::expire(location, out, args),
        Command::Gc(GcCommand::Plan(args)) => gc::plan(location, out, args),
        Command::Gc(GcCommand::Apply(args)) => gc::apply(location, out, args),
        Command::Run(RunCommand::List(args)) => run::list(location, out, args),
        Command::Attempt(AttemptCommand::List(args)) => attempt::list(location, out, args),
        Command::Completions(args) => completions(out, args),
        Command::Man(args) => man(out, args),
        Command::View(args) => view::view(location, out, args),
        Command::Recover => recover(location, out),
        Command::Batch => batch::batch(location, out),
        Command::Serve(args) => serve::serve(location, out, args),
    }
}

/// `recover`: exit 0 whether or not the store needed recovery.
fn recover(location: &crate::location::LocationArgs, out: &mut Out) -> anyhow::Result<Exit> {
    let path = location.store_path()?;
    if !crate::location::store_exists(&path)? {
        return Err(crate::exit::not_found(format!("no store at {}", path.display())));
    }
    let recovered = manifestdb::Store::recover(&path).with_context(|| format!("recovering store {}", path.display()))?;
    let doc = json!({ "store": path, "recovered": recovered });
    out.emit(&doc, |w| {
        if recovered {
            writeln!(w, "recovered {} (its writer had crashed); readers read it again", path.display())
        } else {
            writeln!(w, "{} needed no recovery", path.display())
        }
    })?;
    Ok(Exit::Success)
}

/// `init`: creates the store, or checks an existing one. A store a running server holds exists
/// and is open with this build's format (the server opened it): `init` asks the server, checks
/// that it serves the same staging root, and says the store exists (exit 0), so that a
/// scheduler's declare task may run `init` every time.
fn init(location: &crate::location::LocationArgs, out: &mut Out) -> anyhow::Result<Exit> {
    let path = location.store_path()?;
    let (staging, created, served) = match crate::remote::Remote::find(location)? {
        Some(mut server) => {
            let health = server.get("/v1/health", &json!({}))?;
            let served = health["staging_root"].as_str().map(std::path::PathBuf::from);
            let staging = location.staging_root();
            if let (Some(served), Some(given)) = (&served, &staging) {
                let given_abs = std::fs::canonicalize(given).unwrap_or_else(|_| given.clone());
                if given_abs != *served {
                    return Err(crate::exit::CliError {
                        exit: Exit::Conflict,
                        message: format!(
                            "the running server serves this store with the staging root {}, not {}",
                            served.display(),
                            given.display()
                        ),
                    }
                    .into());
                }
            }
            (served.or(staging).unwrap_or_default(), false, Some(server.target()))
        }
        None => {
            let (store, _, created) = location.create()?;
            let staging = store.staging_root().to_path_buf();
            crate::location::close_writer(store)?;
            (staging, created, None)
        }
    };
    let doc = json!({ "store": path, "staging": staging, "created": created });
    out.emit(&doc, |w| {
        let state = match (&served, created) {
            (Some(server), _) => format!(" (exists, already initialised; served by {server})"),
            (None, true) => " (created)".to_owned(),
            (None, false) => " (exists)".to_owned(),
        };
        // Whole paths, not table cells (a cell is cut at 64 characters, which took the state
        // off a long store path); escaped like a cell.
        writeln!(w, "store    {}{state}", escape(&path.display().to_string()))?;
        writeln!(w, "staging  {}", escape(&staging.display().to_string()))
    })?;
    Ok(Exit::Success)
}

/// `completions SHELL`: the completion script clap_complete generates from the command line's
/// own definition.
fn completions(out: &mut Out, args: &crate::args::CompletionsArgs) -> anyhow::Result<Exit> {
    let mut command = <Cli as clap::CommandFactory>::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "manifestdb", &mut script);
    out.raw(&String::from_utf8(script).context("the completion script is not UTF-8")?)?;
    Ok(Exit::Success)
}

/// `man [VERB...]`: the manual page (roff) clap_mangen renders from the command line's own
/// definition: the tool's page, or with a verb (`man gc plan`) that verb's page
/// (`manifestdb-gc-plan`), with its flags, the global ones included, and its JSON document.
fn man(out: &mut Out, args: &crate::args::ManArgs) -> anyhow::Result<Exit> {
    let mut command = <Cli as clap::CommandFactory>::command();
    // Building propagates the global flags into every verb, so a verb's page lists them too.
    command.build();
    let mut name = command.get_name().to_owned();
    for verb in &args.verb {
        let Some(sub) = command.find_subcommand(verb).filter(|sub| sub.get_name() != "help").cloned() else {
            return Err(crate::exit::usage(format!("{name} has no verb {verb:?} (see `{name} --help`)")));
        };
        name = format!("{name}-{}", sub.get_name());
        command = sub;
    }
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .title(name)
        .source(format!("manifestdb {}", env!("CARGO_PKG_VERSION")))
        .render(&mut page)
        .context("rendering the man page")?;
    out.raw(&String::from_utf8(page).context("the man page is not UTF-8")?)?;
    Ok(Exit::Success)
}

/// Reads a whole file, or stdin for `-`.
fn read_input(path: &Path) -> anyhow::Result<Vec<u8>> {
    if path == Path::new("-") {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf).context("reading stdin")?;
        Ok(buf)
    } else {
        std::fs::read(path).with_context(|| format!("reading {}", path.display()))
    }
}

/// Parses a JSON input document; a malformed one is a usage error.
fn parse_json<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> anyhow::Result<T> {
    let bytes = read_input(path)?;
    serde_json::from_slice(&bytes).map_err(|e| crate::exit::usage(format!("{what} in {} is not valid: {e}", path.display())))
}

//! Exit codes, and how an error maps to one.
//!
//! The codes are part of the tool's interface: schedulers branch on them. They are listed once
//! here ([`EXIT_CODES_HELP`]) and that text is shown by `manifestdb --help` and copied in the
//! book's chapter on the tool (`docs/src/cli.md`).

use std::io;

/// How a command ended. The discriminant is the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done (including "nothing to do": an identical re-declaration, an already published run).
    Success = 0,
    /// A fault: I/O or storage failure, or anything unexpected.
    Fault = 1,
    /// The call is wrong: bad flags, unreadable JSON input, an invalid name or path (for
    /// example a partition key with `..`), no store location given.
    Usage = 2,
    /// A negative outcome, not a fault: a publish refused by a gate, a candidate validated
    /// invalid, a rollback refused.
    Refused = 3,
    /// Something named does not exist: store, dataset, run, task, attempt, effect, generation,
    /// cleanup plan, file. The message names it.
    NotFound = 4,
    /// The store's state forbids the operation: a run declared differently, a run already
    /// published, an attempt finished with another candidate or not finished yet, a foreign
    /// snapshot, an effect whose run is not published.
    Conflict = 5,
    /// Another process holds the store open for writing; retry later.
    Busy = 6,
    /// The store file is corrupt or of an unsupported format, or `verify` found problems.
    Corrupt = 7,
    /// A write's outcome is unknown: its commit was sent to a shared database that could not
    /// be asked, within the settling time, whether it committed. The same command again
    /// settles it (every write is idempotent; a publish answers with its generation). Any
    /// other failure of a write committed nothing.
    OutcomeUnknown = 8,
    /// Not a failure: `effects claim` of an effect already emitted. Done; do not emit, and
    /// there is nothing to wait for (unlike exit 3, another emitter's live claim).
    AlreadyEmitted = 9,
    /// The server (`--server`, or the store's running server) refused the request's
    /// credentials: a TCP server started with `--token-file` needs `--server-token-file` here,
    /// naming a file with the same token.
    Unauthorized = 10,
}

impl Exit {
    /// The exit code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// A short stable name, used in JSON error documents.
    pub fn name(self) -> &'static str {
        match self {
            Exit::Success => "success",
            Exit::Fault => "fault",
            Exit::Usage => "usage",
            Exit::Refused => "refused",
            Exit::NotFound => "not_found",
            Exit::Conflict => "conflict",
            Exit::Busy => "busy",
            Exit::Corrupt => "corrupt",
            Exit::OutcomeUnknown => "outcome_unknown",
            Exit::AlreadyEmitted => "already_emitted",
            Exit::Unauthorized => "unauthorized",
        }
    }
}

/// The exit-code table shown by `--help` (and in `docs/src/cli.md`).
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success (also: identical re-declaration, run already published, closed output pipe)
  1  fault: I/O or storage failure, anything unexpected
  2  usage: bad flags or JSON input, invalid name or path (e.g. '..' in a partition key),
     no store location
  3  refused: publish refused by a gate, candidate validated invalid, rollback refused
  4  not found: store, dataset, run, task, attempt, effect, generation, cleanup plan or
     file does not exist (the message names it)
  5  conflict: the store's state forbids it (run declared differently, run already
     published, attempt finished differently or not finished, attempt abandoned,
     foreign snapshot, effect not ready)
  6  busy: another process holds the store open for writing
  7  corrupt: the store file is damaged or of an unsupported format; verify found problems
  8  outcome unknown: a write's commit was sent to the PostgreSQL store but whether it
     committed could not be learnt; run the same command again to settle it (any other
     failure of a write committed nothing)
  9  already emitted: effects claim of an effect emitted before (done: do not emit; exit 3
     there means another emitter's live claim: wait and claim again)
 10  unauthorized: the server refused the request's bearer token (give the server's token
     with --server-token-file)";

/// What to do about a store file found damaged: what the tool adds to a damaged-store error
/// and to verify's findings in the store's records.
pub const STORE_DAMAGED: &str = "the store file is damaged: stop the processes that write it, keep a copy of it, and put back \
     the last good copy (a backup or a file system snapshot); `manifestdb verify --json` lists every damaged record by table and key";

/// An error the tool itself raises, with the exit code it maps to.
#[derive(Debug)]
pub struct CliError {
    /// The exit code.
    pub exit: Exit,
    /// The message.
    pub message: String,
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// A usage error (exit 2).
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    CliError { exit: Exit::Usage, message: message.into() }.into()
}

/// A not-found error (exit 4).
pub fn not_found(message: impl Into<String>) -> anyhow::Error {
    CliError { exit: Exit::NotFound, message: message.into() }.into()
}

/// True if the error is a write to a closed pipe (`manifestdb log | head`), which is not a
/// failure of the tool.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| cause.downcast_ref::<io::Error>().is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe))
}

/// The exit code for an error: the first cause in the chain that says what it is decides.
pub fn classify(err: &anyhow::Error) -> Exit {
    for cause in err.chain() {
        if let Some(cli) = cause.downcast_ref::<CliError>() {
            return cli.exit;
        }
        if let Some(lib) = cause.downcast_ref::<manifestdb::Error>() {
            return classify_library(lib);
        }
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return if io.kind() == io::ErrorKind::NotFound { Exit::NotFound } else { Exit::Fault };
        }
        if cause.downcast_ref::<serde_json::Error>().is_some() {
            return Exit::Usage;
        }
    }
    Exit::Fault
}

fn classify_library(err: &manifestdb::Error) -> Exit {
    use manifestdb::ErrorKind as K;
    match err.kind() {
        K::Usage => Exit::Usage,
        K::NotFound => Exit::NotFound,
        K::Conflict => Exit::Conflict,
        K::Busy => Exit::Busy,
        K::Corrupt => Exit::Corrupt,
        K::OutcomeUnknown => Exit::OutcomeUnknown,
        // A kind a newer library adds is a fault until the tool learns it.
        _ => Exit::Fault,
    }
}

/// The message for an error: its context layers and causes joined by `: `, stopping at the
/// library's error, whose message already includes its own cause. Times and durations the
/// library gives in milliseconds are shown as RFC 3339 and `1h 30m`.
pub fn message(err: &anyhow::Error) -> String {
    let mut parts = Vec::new();
    for cause in err.chain() {
        if let Some(lib) = cause.downcast_ref::<manifestdb::Error>() {
            parts.push(library_message(lib));
            if lib.is_corruption() {
                // What to do, not only what was found.
                return format!("{}; {}", parts.join(": "), STORE_DAMAGED);
            }
            break;
        }
        parts.push(cause.to_string());
    }
    parts.join(": ")
}

fn library_message(err: &manifestdb::Error) -> String {
    use crate::output::{duration, escape, utc};
    use manifestdb::Error as E;
    match err {
        // The library's words with the time in UTC: the record does not say whether the lease
        // ran out or an operator abandoned it, and the verb may be a finish, a heartbeat, a
        // validation or an invalidation.
        E::AttemptAbandoned { dataset, run, partition, attempt, abandoned_at_ms } => format!(
            "attempt {attempt} of task {}/{}/{} was abandoned at {} (its lease ran out, or it was abandoned explicitly); it cannot finish, renew its lease or be validated",
            escape(dataset),
            escape(run),
            escape(partition),
            utc(*abandoned_at_ms)
        ),
        E::CleanupThresholdTooShort { age_threshold_ms, attempt_lifetime_max_ms } => format!(
            "cleanup age threshold of {} must exceed the attempt lifetime of {} (force it explicitly to proceed)",
            duration(*age_threshold_ms),
            duration(*attempt_lifetime_max_ms)
        ),
        other => other.to_string(),
    }
}

/// The JSON error document: `{"error": {"exit_code", "kind", "message"}}`.
pub fn error_document(exit: Exit, message: &str) -> serde_json::Value {
    serde_json::json!({ "error": { "exit_code": exit.code(), "kind": exit.name(), "message": message } })
}

/// Reports a command line clap refused (exit 2, under `--json` as the JSON error document), or
/// prints the help or version clap was asked for (exit 0).
pub fn clap_error(err: &clap::Error, json: bool) -> std::process::ExitCode {
    use std::io::Write;
    if !err.use_stderr() {
        // Help and version to stdout.
        let _ = err.print();
        return std::process::ExitCode::from(Exit::Success.code());
    }
    if !json {
        // A usage error as clap renders it (with the usage line), after the `manifestdb: `
        // every other error of the tool starts with.
        let _ = write!(std::io::stderr().lock(), "manifestdb: {}", err.render());
        return std::process::ExitCode::from(Exit::Usage.code());
    }
    let rendered = err.render().to_string();
    let usage_line = rendered.lines().find_map(|line| line.strip_prefix("Usage: ")).unwrap_or("manifestdb --help");
    let message = if err.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        format!("a verb is missing; usage: {usage_line}")
    } else {
        let body = rendered.split("\n\nUsage:").next().unwrap_or(&rendered);
        let body = body.trim().strip_prefix("error:").unwrap_or(body);
        body.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let _ = writeln!(std::io::stderr().lock(), "{}", error_document(Exit::Usage, &message));
    std::process::ExitCode::from(Exit::Usage.code())
}

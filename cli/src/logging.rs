//! The log: the library's `tracing` events (a publish, a rollback, a cleanup plan's proposed
//! deletions and its summary, an applied cleanup batch, abandoned attempts, a write failure
//! that poisons the handle) written to stderr, as text lines or one JSON object per event.
//!
//! Which events: warnings and errors by default; `-v` adds info, `-vv` debug, `-vvv` trace;
//! `-q` keeps errors only, `-qq` nothing. Without `-v`/`-q`, `RUST_LOG` (target=level
//! directives, e.g. `manifestdb=debug` or `info`) sets the filter.

use std::io::IsTerminal;

use clap::ValueEnum;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// How log events are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per event (`timestamp`, `level`, `target`, `fields`).
    Json,
}

/// The level `-v`/`-q` ask for.
pub fn level(verbose: u8, quiet: u8) -> LevelFilter {
    match (verbose, quiet) {
        (0, 0) => LevelFilter::WARN,
        (0, 1) => LevelFilter::ERROR,
        (0, _) => LevelFilter::OFF,
        (1, _) => LevelFilter::INFO,
        (2, _) => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// The filter: `-v`/`-q` when given, else `rust_log` (the value of `RUST_LOG`) when set and not
/// empty, else warnings and errors.
///
/// # Errors
/// A `RUST_LOG` that does not parse, with the parser's reason.
pub fn filter(verbose: u8, quiet: u8, rust_log: Option<&str>) -> Result<Targets, String> {
    match rust_log.map(str::trim).filter(|directives| !directives.is_empty()) {
        Some(directives) if verbose == 0 && quiet == 0 => {
            directives.parse::<Targets>().map_err(|e| format!("RUST_LOG={directives:?} is not a log filter: {e}"))
        }
        _ => Ok(Targets::new().with_default(level(verbose, quiet))),
    }
}

/// Installs the subscriber for the rest of the process: `filter`'s events to stderr in
/// `format`, coloured only when stderr is a terminal.
pub fn install(filter: Targets, format: LogFormat) {
    let registry = tracing_subscriber::registry().with(filter);
    // A subscriber can only be missing here if one was installed before, which this binary
    // never does; the log is then simply that one.
    let _ = match format {
        LogFormat::Text => registry
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(std::io::stderr().is_terminal()))
            .try_init(),
        LogFormat::Json => registry.with(tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr)).try_init(),
    };
}

#[cfg(test)]
mod tests {
    use tracing::Level;

    use super::*;

    #[test]
    fn flags_pick_the_level_and_win_over_rust_log() {
        assert_eq!(level(0, 0), LevelFilter::WARN);
        assert_eq!(level(1, 0), LevelFilter::INFO);
        assert_eq!(level(2, 0), LevelFilter::DEBUG);
        assert_eq!(level(5, 0), LevelFilter::TRACE);
        assert_eq!(level(0, 1), LevelFilter::ERROR);
        assert_eq!(level(0, 2), LevelFilter::OFF);
        let from_flags = filter(2, 0, Some("error")).unwrap();
        assert!(from_flags.would_enable("manifestdb::store::retention", &Level::DEBUG));
        let from_env = filter(0, 0, Some("manifestdb=debug")).unwrap();
        assert!(from_env.would_enable("manifestdb::store::retention", &Level::DEBUG));
        assert!(!from_env.would_enable("other", &Level::ERROR));
        assert!(filter(0, 0, Some("manifestdb=loud")).is_err());
        let default = filter(0, 0, Some("  ")).unwrap();
        assert!(default.would_enable("manifestdb", &Level::WARN));
        assert!(!default.would_enable("manifestdb", &Level::INFO));
    }
}

//! The command line: every verb, its flags, and (in `--help`) its JSON document.

use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand};
use manifestdb::TaskSpec;

use crate::location::{GLOBAL, LocationArgs};
use crate::logging::LogFormat;
use crate::values::parse_duration;

const ABOUT: &str = "Drive manifestdb's publish-exactly-once protocol and inspect a store.";

const LONG_ABOUT: &str = "\
Drive manifestdb's publish-exactly-once protocol and inspect a store, from any language.

A scheduler declares a run (its tasks and their expectations), begins an attempt per try of a
task (each gets a private staging directory), writes the output there, finishes the attempt
(the candidate), validates it, and publishes the run once every task has a valid attempt: the
dataset's next generation holds, per partition, the lowest-numbered valid attempt.

Read-only verbs (show, log, diff, run show, run list, attempt list, effects list, stats, verify,
view) open the store read-only and work while a scheduler process holds it open for writing.";

const AFTER_HELP: &str = "\
Store location: --dir DIR (holding store.redb and staging/), or --store PATH and --staging DIR;
environment fallbacks MANIFESTDB_DIR, MANIFESTDB_STORE, MANIFESTDB_STAGING.

Output: a table for humans by default; with --json one JSON document on stdout, whose shape
each verb's --help describes. Errors go to stderr (with --json as
{\"error\": {\"exit_code\", \"kind\", \"message\"}}, usage errors included). Progress bars appear
only on a terminal and never with --json. Times are RFC 3339 in UTC, durations like 3d or 1h 30m;
JSON keeps milliseconds.

Log: the library's events (published, rolled back, cleanup planned and applied, attempts
abandoned) go to stderr: warnings and errors by default, -v info, -vv debug (each path a
cleanup plan proposes), -vvv trace, -q errors only, -qq nothing; without -v/-q, RUST_LOG
(e.g. RUST_LOG=manifestdb=debug) sets the filter. --log-format json writes one JSON object
per event (the default with --json: stderr then holds JSON lines only).

";

/// The `manifestdb` command line.
#[derive(Debug, Parser)]
#[command(name = "manifestdb", version, about = ABOUT, long_about = LONG_ABOUT, after_long_help = after_long_help_text(), max_term_width = 100)]
pub struct Cli {
    /// Where the store is.
    #[command(flatten)]
    pub location: LocationArgs,

    /// Print one JSON document (see each verb's --help) instead of a table.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub json: bool,

    /// More log output on stderr: -v info (published, rolled back, cleanup planned and
    /// applied), -vv debug (each path a cleanup plan proposes), -vvv trace.
    #[arg(long, short = 'v', global = true, help_heading = GLOBAL, action = ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,

    /// Less log output on stderr: -q errors only, -qq nothing (not with -v).
    #[arg(long, short = 'q', global = true, help_heading = GLOBAL, action = ArgAction::Count)]
    pub quiet: u8,

    /// How log events are written on stderr: text lines, or one JSON object per event
    /// (default: text; json with --json, so that stderr holds JSON lines only).
    #[arg(long, global = true, help_heading = GLOBAL, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,

    /// The verb.
    #[command(subcommand)]
    pub command: Command,
}

fn after_long_help_text() -> String {
    format!("{AFTER_HELP}{}", crate::exit::EXIT_CODES_HELP)
}

/// Every verb.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the store file and its staging root (or check an existing store's format).
    #[command(after_long_help = "JSON: {\"store\": PATH, \"staging\": PATH, \"created\": BOOL}")]
    Init,

    /// Declare a run, or show one with its tasks and attempts.
    #[command(subcommand)]
    Run(RunCommand),

    /// Begin, finish and validate attempts.
    #[command(subcommand)]
    Attempt(AttemptCommand),

    /// Publish a run: the dataset's next generation, all or nothing. Exit 0 when published (or
    /// already published), 3 when a gate refused it (nothing was written).
    #[command(after_long_help = PUBLISH_JSON)]
    Publish(PublishArgs),

    /// Show a generation (the current one by default): partitions, accepted attempts, rows,
    /// totals. Without --dataset, list the datasets and their current generations.
    #[command(after_long_help = SHOW_JSON)]
    Show(ShowArgs),

    /// The history of generations, newest first.
    #[command(after_long_help = LOG_JSON)]
    Log(LogArgs),

    /// Partitions added, replaced and removed between two generations of a dataset.
    #[command(after_long_help = DIFF_JSON)]
    Diff(DiffArgs),

    /// Side effects: list them, record one, claim one, mark one emitted.
    #[command(subcommand)]
    Effects(EffectsCommand),

    /// Counts of what the store holds, its file size, and per dataset its current generation's
    /// size.
    #[command(after_long_help = STATS_JSON)]
    Stats,

    /// Check every record, the references between tables and optionally the files of retained
    /// generations. Writes nothing; runs beside a writer unless --integrity (which needs the
    /// store exclusively). Exit 0 when clean, 7 when anything is found.
    #[command(after_long_help = VERIFY_JSON)]
    Verify(VerifyArgs),

    /// Make an earlier retained generation's content current again, as a new generation
    /// recorded in the history. Exit 0 when rolled back, 3 when refused (nothing written), 4
    /// when the dataset or the generation never existed.
    #[command(after_long_help = ROLLBACK_JSON)]
    Rollback(RollbackArgs),

    /// Retention and cleanup: abandon expired attempts, expire generations, plan and apply a
    /// cleanup of staging files. Dry runs unless --execute.
    #[command(subcommand)]
    Gc(GcCommand),

    /// The published view of a dataset: `view DATASET` prints the directory of its current
    /// view (`<views>/<dataset>/v<N>`, what `current` names now: give an engine this path,
    /// never `current/**`, which can move to the next generation while the engine lists and
    /// reads; `-` for a dataset without directory trees) and its manifest and Delta table;
    /// `--files` the generation's exact files instead; `--generation N` a retained
    /// generation's (exit 4 when expired, naming the oldest retained). Read-only. `view sync [DATASET]` checks the views against
    /// the store, rebuilds a damaged one and brings `current` up to date (after a crash between
    /// a publish and its view swap). The view root is the one recorded in the store (set by the
    /// first `--views DIR`).
    #[command(after_long_help = VIEW_JSON)]
    View(ViewArgs),

    /// Recover a store whose writer crashed (killed, power loss), so that readers read it
    /// again: opens it for writing, which repairs it, and closes it. Needs only --store (or
    /// --dir) and write access. Read verbs do this themselves when they may write the file;
    /// a store closed cleanly or held by a live writer is left alone.
    #[command(after_long_help = "JSON: {\"store\": PATH, \"recovered\": BOOL}")]
    Recover,

    /// Run many operations in one commit: newline-delimited JSON operations on stdin (begin,
    /// finish, validate, record_effect, claim_effect, mark_emitted), one JSON result line each
    /// on stdout, in order; a refused or malformed line fails alone. Exit 0 when every line
    /// succeeded, 3 when any failed (its line says why); a store that stays busy exits 6 and
    /// runs nothing.
    #[command(after_long_help = BATCH_JSON)]
    Batch,

    /// Serve the store to many worker processes at once over HTTP/1.1 with JSON bodies (the
    /// routes: docs/openapi.json). Holds the store open for writing until SIGINT or SIGTERM;
    /// concurrent requests share the store's group commits. Listens on the Unix socket
    /// `manifestdb.sock` in the store's directory (mode 0600, or 0660 with --socket-group) unless
    /// --listen names a TCP address; a non-loopback address requires --token-file.
    #[command(after_long_help = SERVE_HELP)]
    Serve(ServeArgs),

    /// Print a shell completion script for SHELL on stdout (e.g. `manifestdb completions bash
    /// > /etc/bash_completion.d/manifestdb`).
    Completions(CompletionsArgs),

    /// Print the manual page (roff) on stdout: the tool's (`manifestdb man > manifestdb.1`) or a
    /// verb's (`manifestdb man gc plan > manifestdb-gc-plan.1`).
    Man(ManArgs),
}

/// `man` flags.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The verb (and sub-verb) whose page to print; none for the tool's own page.
    pub verb: Vec<String>,
}

/// `completions` flags.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `view` flags and its `sync` sub-verb.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ViewArgs {
    /// `sync`: bring views up to date.
    #[command(subcommand)]
    pub command: Option<ViewCommand>,
    /// Dataset name.
    pub dataset: Option<String>,
    /// A retained generation's view instead of the current one.
    #[arg(long, short = 'g', value_name = "N", allow_negative_numbers = true, value_parser = crate::values::parse_generation)]
    pub generation: Option<u64>,
    /// Print the generation's exact files, one absolute path per line (the accepted attempts'
    /// files; with or without directory trees), for engines that take a list of files.
    #[arg(long)]
    pub files: bool,
}

/// `view` sub-verbs.
#[derive(Debug, Subcommand)]
pub enum ViewCommand {
    /// Check every view present against the store (a missing, empty or damaged
    /// `_manifest.json`, a missing or cut-short file) and rebuild a damaged one, build the
    /// current generation's view if missing, move `current` to it, remove leftovers and the
    /// views of expired generations. Opens the store for writing.
    Sync {
        /// Dataset name (default: every dataset).
        dataset: Option<String>,
    },
}

/// `verify` flags.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Also check that every file a retained generation references exists with its size.
    #[arg(long)]
    pub files: bool,
    /// As --files, and compare every file's CRC32 (reads every byte).
    #[arg(long)]
    pub checksums: bool,
    /// Also run redb's own integrity check (page checksums). It needs the store exclusively:
    /// exit 6 while another process holds it.
    #[arg(long)]
    pub integrity: bool,
}

/// `rollback` flags.
#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// Dataset name.
    #[arg(long, short = 'd')]
    pub dataset: String,
    /// The retained generation whose content becomes current again.
    #[arg(long, allow_negative_numbers = true, value_parser = crate::values::parse_generation)]
    pub to: u64,
    /// Who asks for it (recorded in the history).
    #[arg(long)]
    pub actor: String,
    /// Why (recorded in the history).
    #[arg(long)]
    pub reason: String,
}

/// `gc` verbs.
#[derive(Debug, Subcommand)]
pub enum GcCommand {
    /// Record every unfinished attempt idle longer than the store's lease as abandoned (it can
    /// no longer finish; cleanup may then delete its files).
    #[command(after_long_help = GC_ABANDON_JSON)]
    Abandon(GcAbandonArgs),
    /// Expire the generations of a dataset that the retention policy does not keep.
    #[command(after_long_help = GC_EXPIRE_JSON)]
    Expire(GcExpireArgs),
    /// Plan a cleanup of the staging root and store the plan; deletes nothing.
    #[command(after_long_help = GC_PLAN_JSON)]
    Plan(GcPlanArgs),
    /// Apply a stored cleanup plan, re-checking every file first.
    #[command(after_long_help = GC_APPLY_JSON)]
    Apply(GcApplyArgs),
}

/// `gc abandon` flags.
#[derive(Debug, Args)]
pub struct GcAbandonArgs {
    /// Record them (default: dry run, report only).
    #[arg(long)]
    pub execute: bool,
}

/// `gc expire` flags.
#[derive(Debug, Args)]
pub struct GcExpireArgs {
    /// Dataset name.
    #[arg(long, short = 'd')]
    pub dataset: String,
    /// How many of the newest generations to keep (default 10; at least 1: the current
    /// generation is always kept).
    #[arg(long, value_name = "N", value_parser = crate::values::parse_keep_last)]
    pub keep_last: Option<u64>,
    /// Keep every generation published less than this long ago (default 7d).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub rollback_window: Option<std::time::Duration>,
    /// Expire them (default: dry run, report only).
    #[arg(long)]
    pub execute: bool,
}

/// `gc plan` flags.
#[derive(Debug, Args)]
pub struct GcPlanArgs {
    /// Only files at least this old may be deleted (default 3d); must exceed the attempt
    /// lifetime.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub age_threshold: Option<std::time::Duration>,
    /// Accept an age threshold not above the attempt lifetime (dangerous).
    #[arg(long)]
    pub force_short_threshold: bool,
    /// Show the stored plan with this id instead of making a new one.
    #[arg(long, value_name = "PLAN", conflicts_with_all = ["age_threshold", "force_short_threshold"])]
    pub show: Option<u64>,
}

/// `gc apply` flags.
#[derive(Debug, Args)]
pub struct GcApplyArgs {
    /// The plan id (from `gc plan`).
    #[arg(long)]
    pub plan: u64,
    /// Delete (default: dry run, report only).
    #[arg(long)]
    pub execute: bool,
    /// Also delete the plan's files that no attempt owns.
    #[arg(long)]
    pub delete_unknown: bool,
    /// Files re-checked and deleted per batch (default 1000). The store is held one batch at a
    /// time: writers of other processes waiting for it get in between batches.
    #[arg(long, value_name = "N")]
    pub batch_size: Option<usize>,
}

/// `run` verbs.
#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Declare a run: dataset, run id, pinned input snapshot and tasks with their expected rows
    /// and totals. Declaring the identical run again is a no-op (exit 0); a different one with
    /// the same id is a conflict (exit 5).
    #[command(after_long_help = DECLARE_JSON)]
    Declare(DeclareArgs),

    /// Show a declared run: its tasks, each attempt's status and the accepted attempt.
    #[command(after_long_help = RUN_SHOW_JSON)]
    Show(RunShowArgs),

    /// List a dataset's declared runs with their state: open (some task has no accepted
    /// attempt yet), complete (every task has one: publishable) or published.
    #[command(after_long_help = RUN_LIST_JSON)]
    List(RunListArgs),
}

/// `run list` flags.
#[derive(Debug, Args)]
pub struct RunListArgs {
    /// Dataset name.
    #[arg(long, short = 'd')]
    pub dataset: String,
}

/// `run declare` flags.
#[derive(Debug, Args)]
pub struct DeclareArgs {
    /// Dataset name.
    #[arg(long, short = 'd', required_unless_present = "from")]
    pub dataset: Option<String>,
    /// Run id, unique within the dataset.
    #[arg(long, short = 'r', required_unless_present = "from")]
    pub run: Option<String>,
    /// The input snapshot every task of the run reads.
    #[arg(long, required_unless_present = "from")]
    pub snapshot: Option<String>,
    /// A task: its partition key, expected rows and optionally expected total (an integer such
    /// as cents). Repeat per task. The partition key may not contain ':' here; use --from for
    /// such keys.
    #[arg(long = "task", value_name = "PARTITION:ROWS[:TOTAL]", value_parser = parse_task, required_unless_present = "from")]
    pub tasks: Vec<TaskSpec>,
    /// The output's grain key columns, comma separated (e.g. store,item). With a grain,
    /// validation reads every file and computes rows, total, duplicate keys and the canonical
    /// digest itself; `attempt finish` then needs no --rows/--total/--digest. Without a grain,
    /// --trust-reported-figures is required.
    #[arg(long, value_name = "COLUMNS", value_delimiter = ',', requires = "measure")]
    pub grain: Vec<String>,
    /// The grain's measure column, whose sum is each task's expected total (e.g. units).
    #[arg(long, value_name = "COLUMN", requires = "grain")]
    pub measure: Option<String>,
    /// The grain's file format.
    #[arg(long, value_name = "FORMAT", value_parser = ["csv", "parquet"], default_value = "csv", requires = "grain")]
    pub format: String,
    /// The measure's decimal scale: 2 reads 12.50 as 1250 (cents).
    #[arg(long, value_name = "DIGITS", default_value_t = 0, requires = "grain")]
    pub scale: u32,
    /// Declare the run without a grain: the rows, totals and digests workers report are
    /// published as they are, reported and not checked (nothing reads the data; a 0-byte file
    /// reported as 5 rows validates). Required unless --grain is given; every output showing
    /// such figures says "reported, not checked".
    #[arg(long, conflicts_with_all = ["grain", "measure"])]
    pub trust_reported_figures: bool,
    /// Read the whole run from a JSON file ('-' for stdin) instead of the flags above; it gives
    /// "grain" or "trust_reported_figures": true itself.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["dataset", "run", "snapshot", "tasks", "grain", "measure", "trust_reported_figures"])]
    pub from: Option<PathBuf>,
}

/// `run show` flags.
#[derive(Debug, Args)]
pub struct RunShowArgs {
    /// Dataset name.
    #[arg(long, short = 'd')]
    pub dataset: String,
    /// Run id.
    #[arg(long, short = 'r')]
    pub run: String,
}

/// Identifies a task.
#[derive(Debug, Args)]
pub struct TaskArgs {
    /// Dataset name.
    #[arg(long, short = 'd')]
    pub dataset: String,
    /// Run id.
    #[arg(long, short = 'r')]
    pub run: String,
    /// Partition key of the task (e.g. date=2026-11-29/region=eu).
    #[arg(long, short = 'p')]
    pub partition: String,
}

/// `attempt` verbs.
#[derive(Debug, Subcommand)]
pub enum AttemptCommand {
    /// Begin a new attempt of a task: prints its number and its private staging directory.
    #[command(after_long_help = BEGIN_JSON)]
    Begin(BeginArgs),

    /// Record a finished attempt's candidate (rows, total, digest, files). Files can be listed
    /// with their sizes and checksums computed from the staging directory (--file, --scan).
    #[command(after_long_help = FINISH_JSON)]
    Finish(FinishArgs),

    /// Validate a finished attempt against its run and task (or, with --pending, every finished
    /// attempt of the run that awaits validation). Exit 0 when valid, 3 when invalid (the
    /// failed checks are printed).
    #[command(after_long_help = VALIDATE_JSON)]
    Validate(ValidateArgs),

    /// Renew a running attempt's lease (exit 5 if it finished or was recorded abandoned: the
    /// worker must stop).
    #[command(after_long_help = HEARTBEAT_JSON)]
    Heartbeat(HeartbeatArgs),

    /// Record an unfinished attempt abandoned now, without waiting for its lease (a try the
    /// scheduler knows is dead, e.g. from an on_retry_callback). Its heartbeat, finish and
    /// validation are refused from then on. Exit 5 if it has finished (invalidate it instead).
    #[command(after_long_help = ABANDON_JSON)]
    Abandon(HeartbeatArgs),

    /// Invalidate a finished attempt of an unpublished run whose files were lost: its verdict
    /// becomes invalid (actor and reason recorded) and the task's accepted attempt becomes the
    /// lowest valid one left, or none, so another attempt can be accepted and the run publish.
    #[command(after_long_help = INVALIDATE_JSON)]
    Invalidate(InvalidateArgs),

    /// List the attempts of a run (or, with --partition, of one task): status, age, and for a
    /// running attempt the time left on its lease.
    #[command(after_long_help = ATTEMPT_LIST_JSON)]
    List(AttemptListArgs),
}

/// `attempt list` flags.
#[derive(Debug, Args)]
pub struct AttemptListArgs {
    /// Dataset name.
    #[arg(long, short = 'd')]
    pub dataset: String,
    /// Run id.
    #[arg(long, short = 'r')]
    pub run: String,
    /// Only this task's attempts (its partition key).
    #[arg(long, short = 'p')]
    pub partition: Option<String>,
}

/// `attempt invalidate` flags.
#[derive(Debug, Args)]
pub struct InvalidateArgs {
    /// The task.
    #[command(flatten)]
    pub task: TaskArgs,
    /// The attempt number.
    #[arg(long, short = 'a')]
    pub attempt: u32,
    /// Who invalidates it (recorded).
    #[arg(long)]
    pub actor: String,
    /// Why (recorded).
    #[arg(long)]
    pub reason: String,
}

/// `attempt heartbeat` flags.
#[derive(Debug, Args)]
pub struct HeartbeatArgs {
    /// The task.
    #[command(flatten)]
    pub task: TaskArgs,
    /// The attempt number.
    #[arg(long, short = 'a')]
    pub attempt: u32,
}

/// `attempt begin` flags.
#[derive(Debug, Args)]
pub struct BeginArgs {
    /// The task.
    #[command(flatten)]
    pub task: TaskArgs,
    /// Print shell assignments MANIFESTDB_ATTEMPT=N and MANIFESTDB_STAGING_DIR=... (quoted) for
    /// `env=$(manifestdb attempt begin --env ...) || exit $?; eval "$env"`. On failure, when
    /// stdout is a pipe (what `$(...)` gives `eval`), also prints `unset MANIFESTDB_ATTEMPT
    /// MANIFESTDB_STAGING_DIR; ! :  # ... (exit N)`, so `eval "$(manifestdb attempt begin --env
    /// ...)"` fails too (status 1); on a terminal or into a file a failure prints nothing on
    /// stdout. The line never ends a `set -e` shell by itself: a wrapper that collects several
    /// tries' output and evals it gets the successful try's assignments. Retry around the whole
    /// assignment: `until env=$(manifestdb attempt begin --env ...); do sleep 1; done; eval
    /// "$env"`. Not with --json.
    #[arg(long, conflicts_with = "json")]
    pub env: bool,
}

/// `attempt finish` flags.
#[derive(Debug, Args)]
pub struct FinishArgs {
    /// The task.
    #[command(flatten)]
    pub task: TaskArgs,
    /// The attempt number.
    #[arg(long, short = 'a')]
    pub attempt: u32,
    /// The input snapshot the attempt read.
    #[arg(long, required_unless_present = "from")]
    pub snapshot: Option<String>,
    /// Rows written at the declared grain. Required for a run without a grain; with one, an
    /// optional cross-check of the rows the store reads.
    #[arg(long)]
    pub rows: Option<u64>,
    /// Total of the output's measure (an integer such as cents).
    #[arg(long, allow_hyphen_values = true)]
    pub total: Option<i64>,
    /// Canonical digest of the output (equal inputs must give equal digests). Required for a
    /// run without a grain; with one, an optional cross-check of the digest the store computes.
    #[arg(long)]
    pub digest: Option<String>,
    /// A file the attempt wrote, relative to its staging directory; its size and CRC32 are
    /// computed. Repeat per file.
    #[arg(long = "file", value_name = "RELATIVE_PATH")]
    pub files: Vec<String>,
    /// Report every regular file under the staging directory, with sizes and CRC32s computed
    /// (a symlink there is refused: it is never followed).
    #[arg(long)]
    pub scan: bool,
    /// Read the candidate from a JSON file ('-' for stdin). --file and --scan add to its files.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["snapshot", "rows", "total", "digest"])]
    pub from: Option<PathBuf>,
}

/// `attempt validate` flags.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Dataset name.
    #[arg(long, short = 'd')]
    pub dataset: String,
    /// Run id.
    #[arg(long, short = 'r')]
    pub run: String,
    /// Partition key of the task (e.g. date=2026-11-29/region=eu).
    #[arg(long, short = 'p', required_unless_present = "pending")]
    pub partition: Option<String>,
    /// The attempt number.
    #[arg(long, short = 'a', required_unless_present = "pending")]
    pub attempt: Option<u32>,
    /// Validate every attempt of the run that finished and awaits validation (a candidate
    /// recorded, no verdict yet), in partition and attempt order, one result line each:
    /// what a coordinator runs after its workers finished, instead of finding them itself.
    #[arg(long, conflicts_with_all = ["partition", "attempt"])]
    pub pending: bool,
    /// Also compare each file's CRC32 with the reported one (reads every byte); by default
    /// only presence and size are checked.
    #[arg(long)]
    pub checksums: bool,
}

/// `publish` flags.
#[derive(Debug, Args)]
pub struct PublishArgs {
    /// Dataset name.
    #[arg(long, short = 'd')]
    pub dataset: String,
    /// Run id.
    #[arg(long, short = 'r')]
    pub run: String,
    /// Publish even if a partition's digest differs from the one published earlier for the
    /// same input snapshot; the reason is recorded in the history.
    #[arg(long, value_name = "REASON")]
    pub accept_nondeterminism: Option<String>,
}

/// `show` flags.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Dataset name (omit to list datasets).
    #[arg(long, short = 'd')]
    pub dataset: Option<String>,
    /// Generation number (default: the current one); needs --dataset.
    #[arg(long, short = 'g', requires = "dataset", allow_negative_numbers = true, value_parser = crate::values::parse_generation)]
    pub generation: Option<u64>,
}

/// `log` flags.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Dataset name (omit for every dataset).
    #[arg(long, short = 'd')]
    pub dataset: Option<String>,
}

/// `diff` flags.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Dataset name.
    #[arg(long, short = 'd')]
    pub dataset: String,
    /// The older generation.
    #[arg(allow_negative_numbers = true, value_parser = crate::values::parse_generation)]
    pub from: u64,
    /// The newer generation.
    #[arg(allow_negative_numbers = true, value_parser = crate::values::parse_generation)]
    pub to: u64,
}

/// `effects` verbs.
#[derive(Debug, Subcommand)]
pub enum EffectsCommand {
    /// List a dataset's side effects (of one run with --run; only those ready to emit with
    /// --ready; both together: the run's ready ones).
    #[command(after_long_help = EFFECTS_LIST_JSON)]
    List(EffectsListArgs),
    /// Record a side effect under its natural key; a repeat records nothing and returns the
    /// first record (exit 0 both ways).
    #[command(after_long_help = EFFECT_RECORD_JSON)]
    Record(EffectRecordArgs),
    /// Claim a ready side effect for a lease, so that of several emitters only one emits it.
    /// Exit 0: claimed (emit, then mark-emitted with the same --claimant); exit 3: held by
    /// another emitter's live claim (do not emit now; claim again after its lease, it may run
    /// out); exit 9: already emitted (done: do not emit, nothing to wait for); exit 5 if its run
    /// is not published yet. An expired claim is taken over.
    #[command(after_long_help = EFFECT_CLAIM_JSON)]
    Claim(EffectClaimArgs),
    /// Mark a ready side effect emitted (exit 5 if its run is not published yet). Marking it
    /// again reports "already_emitted" (exit 0, nothing written); while another emitter's
    /// claim is live the mark is refused (exit 3, nothing written).
    #[command(name = "mark-emitted", after_long_help = EFFECT_MARK_JSON)]
    MarkEmitted(EffectMarkArgs),
}

/// `effects claim` flags.
#[derive(Debug, Args)]
pub struct EffectClaimArgs {
    /// The effect.
    #[command(flatten)]
    pub key: EffectKeyArgs,
    /// Who claims it: an identifier unique to this emitter, e.g. host and process id
    /// (`worker-3:4711`): 1 to 200 bytes of printable text, without '/' or control characters,
    /// not '.' or '..' (the same rules as a dataset name; anything else is refused, exit 2).
    #[arg(long)]
    pub claimant: String,
    /// How long the claim lasts (e.g. 30s, 5m; at most 1d); claiming again renews it.
    #[arg(long, value_parser = crate::values::parse_claim_lease, default_value = "5m")]
    pub lease: std::time::Duration,
}

/// `effects mark-emitted` flags.
#[derive(Debug, Args)]
pub struct EffectMarkArgs {
    /// The effect.
    #[command(flatten)]
    pub key: EffectKeyArgs,
    /// The claimant that claimed it with `effects claim` (omit if this emitter does not claim);
    /// the rules of `effects claim --claimant`.
    #[arg(long)]
    pub claimant: Option<String>,
}

/// `effects list` flags.
#[derive(Debug, Args)]
pub struct EffectsListArgs {
    /// Dataset name.
    #[arg(long, short = 'd')]
    pub dataset: String,
    /// Only this run's effects.
    #[arg(long, short = 'r')]
    pub run: Option<String>,
    /// Only effects ready to emit (run published, not yet marked emitted); with --run, only
    /// that run's ready ones.
    #[arg(long)]
    pub ready: bool,
}

/// Identifies a side effect.
#[derive(Debug, Args)]
pub struct EffectKeyArgs {
    /// Dataset name.
    #[arg(long, short = 'd')]
    pub dataset: String,
    /// Run id.
    #[arg(long, short = 'r')]
    pub run: String,
    /// The effect's name (e.g. notify-forecast).
    #[arg(long, short = 'e')]
    pub effect: String,
    /// The partition it concerns (omit for a run-level effect).
    #[arg(long, short = 'p')]
    pub partition: Option<String>,
}

/// `effects record` flags.
#[derive(Debug, Args)]
pub struct EffectRecordArgs {
    /// The effect.
    #[command(flatten)]
    pub key: EffectKeyArgs,
    /// The payload as text.
    #[arg(long, conflicts_with = "payload_file")]
    pub payload: Option<String>,
    /// Read the payload from a file ('-' for stdin).
    #[arg(long, value_name = "FILE")]
    pub payload_file: Option<PathBuf>,
}

/// Parses `PARTITION:ROWS[:TOTAL]`.
fn parse_task(value: &str) -> Result<TaskSpec, String> {
    let fields: Vec<&str> = value.split(':').collect();
    let (partition, rows, total) = match fields.as_slice() {
        [partition, rows] => (*partition, *rows, None),
        [partition, rows, total] => (*partition, *rows, Some(*total)),
        _ => return Err("expected PARTITION:ROWS or PARTITION:ROWS:TOTAL (a partition key holding ':' needs --from)".to_owned()),
    };
    let expected_rows = rows.parse::<u64>().map_err(|e| format!("rows {rows:?}: {e}"))?;
    let expected_total = total.map(|t| t.parse::<i64>().map_err(|e| format!("total {t:?}: {e}"))).transpose()?;
    Ok(TaskSpec { partition: partition.to_owned(), expected_rows, expected_total })
}

const DECLARE_JSON: &str = "\
Input (--from): {\"dataset\", \"run\", \"snapshot\",
                 \"tasks\": [{\"partition\", \"expected_rows\", \"expected_total\"?}],
                 \"grain\"?: {\"format\"?: \"csv\"|\"parquet\", \"keys\": [COLUMN], \"measure\", \"scale\"?},
                 \"trust_reported_figures\"?: BOOL} (exactly one of grain and trust_reported_figures: true)
JSON: {\"dataset\", \"run\", \"snapshot\", \"outcome\": \"declared\"|\"already_declared\",
       \"grain\": GRAIN|null, \"tasks\": [{\"partition\", \"expected_rows\", \"expected_total\"}]}
GRAIN: {\"format\": \"csv\"|\"parquet\", \"keys\": [COLUMN], \"measure\", \"scale\"}";

const RUN_SHOW_JSON: &str = "\
JSON: {\"dataset\", \"run\", \"snapshot\", \"declared_at_ms\", \"published_generation\": N|null,
       \"grain\": GRAIN|null (see `manifestdb run declare --help`),
       \"tasks\": [{\"partition\", \"expected_rows\", \"expected_total\", \"accepted_attempt\": N|null,
                  \"attempts\": [ATTEMPT]}]}
ATTEMPT: {\"attempt\", \"status\": \"running\"|\"finished\"|\"valid\"|\"invalid\", \"failures\": [FAILURE],
          \"started_at_ms\", \"staging_rel\", \"candidate\": CANDIDATE|null, \"reconciliation\": FIGURES|null}
CANDIDATE: {\"snapshot\", \"rows\", \"total\", \"digest\", \"files\": [{\"path\", \"size_bytes\", \"crc32\"}]}
FIGURES: {\"basis\": \"reported\"|\"read_csv\"|\"read_parquet\", \"expected\": {\"rows\", \"total\"},
          \"reported\": {\"rows\", \"total\", \"digest\"}, \"computed\": {\"rows\", \"total\", \"digest\"},
          \"duplicate_keys\", \"rejected_rows\", \"files_read\", \"bytes_read\"}
FAILURE: {\"kind\", \"message\", ...}; kind is one of foreign_snapshot, rows_mismatch,
         total_mismatch (expected, got), file_missing (path), file_size_mismatch,
         file_checksum_mismatch (path, expected, got), file_unreadable (path, error),
         reported_mismatch (figure, reported, computed), figure_not_reported (figure),
         duplicate_grain_key (duplicates, key), missing_key (path, location, column),
         unparsable_row (path, location, detail), columns_mismatch (path, expected, got),
         unsupported_column_type (path, column, data_type), malformed_file (path, detail),
         total_overflow, more_rejected_rows (count), other";

const BEGIN_JSON: &str = "\
JSON: {\"dataset\", \"run\", \"partition\", \"attempt\", \"staging_dir\", \"started_at_ms\"}
--env: MANIFESTDB_ATTEMPT=N and MANIFESTDB_STAGING_DIR=PATH, one per line, PATH shell-quoted.";

const RUN_LIST_JSON: &str = "\
JSON: {\"dataset\", \"runs\": [{\"run\", \"snapshot\", \"declared_at_ms\", \"state\": \"open\"|\"complete\"|\"published\",
       \"tasks\", \"accepted_tasks\", \"published_generation\": N|null}]} in run-id order
Exit 4 if the dataset is unknown (no run declared, nothing published).";

const ATTEMPT_LIST_JSON: &str = "\
JSON: {\"dataset\", \"run\", \"partition\": STR|null, \"attempt_lifetime_max_ms\", \"now_ms\",
       \"attempts\": [{\"partition\", \"attempt\", \"status\": \"running\"|\"finished\"|\"valid\"|\"invalid\",
                     \"accepted\", \"started_at_ms\", \"heartbeat_at_ms\", \"abandoned_at_ms\": N|null,
                     \"lease_expires_at_ms\": N|null, \"staging_rel\"}]} in (partition, attempt) order
lease_expires_at_ms is set for a running attempt not recorded abandoned (it may be in the past:
`gc abandon` would abandon it). Exit 4 if the run or the task is unknown.";

const FINISH_JSON: &str = "\
Input (--from): {\"snapshot\", \"rows\"?, \"total\"?, \"digest\"? (rows and digest required without a grain),
                 \"files\"?: [{\"path\", \"size_bytes\", \"crc32\"}]}
JSON: {\"dataset\", \"run\", \"partition\", \"attempt\", \"outcome\": \"recorded\"|\"already_recorded\",
       \"candidate\": {\"snapshot\", \"rows\", \"total\", \"digest\", \"files\": [{\"path\", \"size_bytes\", \"crc32\"}]}}";

const VALIDATE_JSON: &str = "\
JSON: {\"dataset\", \"run\", \"partition\", \"attempt\", \"verdict\": \"valid\"|\"invalid\",
       \"failures\": [{\"kind\", \"message\", ...}], \"accepted_attempt\": N|null, \"reconciliation\": FIGURES}
(failure kinds and FIGURES: see `manifestdb run show --help`)
With --pending: one line per attempt validated, each that document or
       {\"dataset\", \"run\", \"partition\", \"attempt\", \"error\": {\"exit_code\", \"kind\", \"message\"}}
       (with --json one JSON object per line; none pending prints nothing). Exit 0 when every
       one is valid (or none was pending), 3 when any is invalid, and the first failed one's code
       when any failed (e.g. 1 for a file that could not be read).";

const PUBLISH_JSON: &str = "\
JSON: {\"dataset\", \"run\", \"outcome\": \"published\"|\"already_published\"|\"refused\",
       \"generation\": GENERATION|null, \"refused_tasks\": [REFUSAL]}
GENERATION: see `manifestdb log --help`
REFUSAL: {\"partition\", \"reason\": \"no_accepted_attempt\", \"attempts\": [{\"attempt\", \"status\", \"failures\"}]}
       | {\"partition\", \"reason\": \"gate\", \"attempt\", \"failures\": [FAILURE]}
       | {\"partition\", \"reason\": \"nondeterministic\", \"attempt\", \"digest\", \"published_digest\",
          \"published_run\", \"published_generation\"}
       each with \"message\": why the task refused it, in words";

const VIEW_JSON: &str = "\
JSON of `view DATASET [-g N] [--files]`: {\"dataset\", \"view_root\": PATH,
                        \"trees\": BOOL (the dataset has directory trees: --view-trees),
                        \"current\": PATH|null (<root>/<dataset>/current; null without trees),
                        \"path\": PATH|null (the v<N> directory current names, or generation N's: read this;
                                 null without trees),
                        \"view_generation\": N|null,
                        \"store_generation\": N|null, \"lagging\": BOOL (the view or the table lags),
                        \"view_lagging\": BOOL, \"table\": TABLE,
                        \"files\": [PATH]|null (the generation's exact files: the accepted attempts' files in
                                 staging; null if the staging root is unknown),
                        \"manifest\": VIEW_MANIFEST|null (without trees: the one a tree would hold)}
TABLE: a Parquet dataset's Delta table (<root>/<dataset>/table), read from its log: {\"path\": PATH|null,
       \"version\": N|null (the version holding the generation shown), \"latest_version\", \"latest_generation\",
       \"lagging\": BOOL, \"foreign_versions\": [{\"version\", \"operation\", \"engine\"}] (other writers' commits),
       \"damaged_versions\": [{\"version\", \"reason\"}], \"reason\": why it lags or is absent, or null}
VIEW_MANIFEST: the view's _manifest.json, schema \"manifestdb.view.manifest\" version 2 (see the book,
               docs/src/reading.md); files are named g<S>-a<A>-<name> after the partition version
               holding them, so one path never names two contents.
JSON of `view sync`: {\"synced\": [{\"dataset\", \"generation\", \"trees\", \"current\", \"path\", \"built\", \"swapped\",
                                  \"repaired\": [N], \"removed\": [N], \"table_version\": N|null,
                                  \"table_repaired\": [VERSION], \"table_restored\": N, \"foreign_versions\": [VERSION]}]}
Exit 4 if the store has no view root, the dataset no view, or generation N expired (the message names the
oldest retained); 7 if the view's _manifest.json is missing, empty or damaged (`view sync` rebuilds it).";

const SHOW_JSON: &str = "\
JSON with --dataset: {\"generation\": GENERATION, \"current\": BOOL, \"partitions\": [PARTITION],
                      \"totals\": {\"partitions\", \"rows\", \"total\": N|null, \"files\", \"bytes\"}}
PARTITION: {\"partition\", \"since_generation\", \"run\", \"attempt\", \"snapshot\", \"rows\", \"total\",
            \"digest\", \"staging_rel\", \"staging_dir\": PATH|null (null without a staging root),
            \"files\": [{\"path\", \"size_bytes\", \"crc32\", \"absolute_path\": PATH|null}]}
            Paths are absolute whatever the form of --dir (null only without a staging root).
JSON without --dataset: {\"datasets\": [{\"dataset\", \"current_generation\", \"run\", \"published_at_ms\"}]}
GENERATION: see `manifestdb log --help`. Exit 4 if the dataset has no such generation.";

const LOG_JSON: &str = "\
JSON: {\"datasets\": [{\"dataset\", \"current_generation\", \"generations\": [GENERATION]}]}, newest first
GENERATION: {\"dataset\", \"number\", \"parent\", \"kind\": \"publish\"|\"rollback\"|\"other\",
             \"rollback\": {\"restored\", \"actor\", \"reason\"}|null, \"run\", \"snapshot\",
             \"published_at_ms\", \"partitions_replaced\",
             \"nondeterminism_accepted\": {\"reason\", \"partitions\"}|null}";

const DIFF_JSON: &str = "\
JSON: {\"dataset\", \"from\", \"to\", \"added\": [PARTITION], \"removed\": [PARTITION],
       \"replaced\": [{\"partition\", \"from\": PARTITION, \"to\": PARTITION}], \"unchanged\": N}
PARTITION: see `manifestdb show --help`. Exit 4 if either generation does not exist.";

macro_rules! effect_json {
    () => {
        "EFFECT: {\"dataset\", \"run\", \"effect\", \"partition\": STR|null, \"store_id\",
        \"idempotency_key\": \"STORE_ID/DATASET/RUN/EFFECT/PARTITION\" (give it to the receiver),
        \"status\": \"recorded\"|\"ready\"|\"emitted\", \"generation\": N|null, \"recorded_at_ms\",
        \"emitted_at_ms\": N|null, \"payload\": STR|null (null if not UTF-8), \"payload_hex\",
        \"claim\": {\"claimant\", \"claimed_at_ms\", \"expires_at_ms\"}|null}"
    };
}

const EFFECTS_LIST_JSON: &str = concat!("JSON: {\"effects\": [EFFECT]}\n", effect_json!());
const EFFECT_RECORD_JSON: &str = concat!("JSON: {\"newly_recorded\": BOOL, \"effect\": EFFECT}\n", effect_json!());
const EFFECT_MARK_JSON: &str =
    concat!("JSON: {\"outcome\": \"marked\"|\"already_emitted\"|\"claimed_by_other\", \"effect\": EFFECT}\n", effect_json!());
const BATCH_JSON: &str = "\
INPUT, one per line (blank lines skipped):
  {\"op\": \"begin\", \"dataset\", \"run\", \"partition\"}
  {\"op\": \"finish\", \"dataset\", \"run\", \"partition\", \"attempt\", \"candidate\": {\"snapshot\", \"rows\",
   \"total\"?, \"digest\", \"files\"?: [{\"path\", \"size_bytes\", \"crc32\"}]}}
  {\"op\": \"validate\", \"dataset\", \"run\", \"partition\", \"attempt\", \"checksums\"?: BOOL}
  {\"op\": \"record_effect\", \"dataset\", \"run\", \"effect\", \"partition\"?, \"payload\"?: STR}
  {\"op\": \"claim_effect\", \"dataset\", \"run\", \"effect\", \"partition\"?, \"claimant\", \"lease_ms\"}
  {\"op\": \"mark_emitted\", \"dataset\", \"run\", \"effect\", \"partition\"?, \"claimant\"?}
OUTPUT, one line per input line: {\"line\": N, \"op\": STR|null, \"ok\": true, \"result\": RESULT}
  or {\"line\": N, \"op\": STR|null, \"ok\": false, \"error\": {\"exit_code\", \"kind\", \"message\"}}
RESULT: begin as `attempt begin --json`; finish {\"outcome\"}; validate {\"verdict\", \"failures\"};
  record_effect as `effects record`; claim_effect as `effects claim`; mark_emitted as
  `effects mark-emitted`.
A validate reads its attempt's files against the store as it was before the batch, so it
cannot follow the finish of the same attempt in one batch: such a batch is refused up front
(exit 2, naming both lines; nothing runs). Send the validate in a later batch.";
const EFFECT_CLAIM_JSON: &str = concat!(
    "JSON: {\"outcome\": \"claimed\"|\"held_by_other\"|\"already_emitted\", \"took_over_from\": STR|null,
       \"effect\": EFFECT}\n",
    effect_json!()
);

const STATS_JSON: &str = "\
JSON: {\"store\": PATH, \"file_bytes\", \"tables\": {\"meta\", \"runs\", \"tasks\", \"attempts\", \"accepted\",
       \"partition_versions\", \"generations\", \"pointers\", \"published_digests\", \"effects\",
       \"cleanup_plans\", \"cleanup_batches\"} (one entry count per table),
       \"datasets\": [{\"dataset\", \"current_generation\", \"partitions\", \"rows\", \"files\", \"bytes\"}]}
Table names are the store's table names without their version suffix.";

const ABANDON_JSON: &str = "\
JSON: {\"dataset\", \"run\", \"partition\", \"attempt\", \"outcome\": \"abandoned\"|\"already_abandoned\", \"abandoned_at_ms\"}";

const INVALIDATE_JSON: &str = "\
JSON: {\"dataset\", \"run\", \"partition\", \"attempt\", \"outcome\": \"invalidated\"|\"already_invalid\", \"accepted_before\", \"accepted_after\"}
Exit 5 if the run is published or the attempt has not finished.";

const HEARTBEAT_JSON: &str = "\
JSON: {\"dataset\", \"run\", \"partition\", \"attempt\", \"heartbeat_at_ms\", \"expires_at_ms\"}
The lease is the store's recorded attempt lifetime (see --attempt-lifetime) from now.";

const VERIFY_JSON: &str = "\
JSON: {\"clean\": BOOL, \"integrity\": {\"status\": \"passed\"|\"repaired\"|\"failed\"|\"skipped\"|\"other\",
       \"detail\": STR|null}, \"records\": {TABLE: N, ...}, \"records_total\", \"files_checked\",
       \"findings\": [{\"table\", \"key\", \"message\"}], \"notes\": [STR]}
Exit 0 when clean, 7 when redb's check failed or needed a repair, or anything was found.";

const ROLLBACK_JSON: &str = "\
JSON: {\"dataset\", \"to\", \"outcome\": \"rolled_back\"|\"refused\", \"generation\": GENERATION|null,
       \"refusal\": {\"kind\": \"expired\"|\"unknown\"|\"already_current\", \"message\", ...}|null}
GENERATION: see `manifestdb log --help` (its kind is \"rollback\").";

const GC_ABANDON_JSON: &str = "\
JSON: {\"mode\": \"dry_run\"|\"execute\", \"attempt_lifetime_max_ms\",
       \"abandoned\": [{\"dataset\", \"run\", \"partition\", \"attempt\"}]}
The lease is the store's recorded attempt lifetime; --attempt-lifetime can only raise it.";

const GC_EXPIRE_JSON: &str = "\
JSON: {\"dataset\", \"mode\": \"dry_run\"|\"execute\", \"current\", \"oldest_retained\", \"expired\": [N],
       \"versions_removed\"}";

const GC_PLAN_JSON: &str = "\
JSON: {\"plan\", \"created_at_ms\", \"age_threshold_ms\", \"attempt_lifetime_max_ms\", \"candidates\": [PATH],
       \"candidate_bytes\", \"unknown\": [PATH], \"kept\": {REASON: N, ...}, \"unconsidered\": [STR]}
PATH: {\"path\", \"size_bytes\", \"modified_at_ms\", \"reason\": \"abandoned\"|\"invalid\"|\"not_retained\"|\"unknown\",
       \"attempt\": {\"dataset\", \"run\", \"partition\", \"attempt\"}|null}
REASON: referenced, may_be_running, awaiting_validation, valid_unpublished, too_young,
        future_modification_time";

const GC_APPLY_JSON: &str = "\
JSON: {\"plan\", \"mode\": \"dry_run\"|\"execute\", \"deleted\": [PATH], \"bytes_deleted\",
       \"skipped\": [{\"path\", \"reason\", \"detail\": STR|null}], \"directories_removed\",
       \"attempt_records_removed\": [{\"dataset\", \"run\", \"partition\", \"attempt\"}]}
skip reasons: missing, changed, now_protected (detail: the keep reason), owner_changed,
unknown_not_requested, delete_failed (detail: the OS message)";

/// The `--help` text after the flags: what is printed, and where to look next.
pub const SERVE_HELP: &str = "\
Once listening, prints one line (with --json: {\"listening\": ADDRESS, \"store\": PATH}) and
serves until SIGINT or SIGTERM, then finishes the requests in flight, removes the socket and
closes the store. ADDRESS is unix:PATH or http://HOST:PORT. Every answer is JSON; an error is
{\"error\": {\"exit_code\", \"kind\", \"message\"}} with the codes listed below.";

/// Flags of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Listen on this TCP address (e.g. 127.0.0.1:7070) instead of the Unix socket.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "socket")]
    pub listen: Option<std::net::SocketAddr>,

    /// The Unix socket's path (default: manifestdb.sock in the store's directory, where the
    /// tool looks for a running server).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// Create the socket with mode 0660, so the store owner's group may connect too.
    #[arg(long)]
    pub socket_group: bool,

    /// A file holding the bearer token every request must carry (`Authorization: Bearer
    /// TOKEN`). Required with a non-loopback --listen address. A file other users may read gets
    /// a warning (chmod 600 it).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,

    /// A name clients may give as the `Host` of a TCP request (repeat for several; e.g. the
    /// host's DNS name). Without it a TCP request must name a loopback address, localhost or the
    /// --listen address; any other Host gets 421, so a web page cannot drive the server
    /// through DNS rebinding.
    #[arg(long = "host-name", value_name = "NAME")]
    pub host_names: Vec<String>,

    /// The largest request body accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = manifestdb::server::BODY_LIMIT_BYTES_DEFAULT)]
    pub body_limit: usize,

    /// How long a request may take to arrive and be answered (408 after that).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub request_timeout: std::time::Duration,

    /// How long a connection may take to send its next request head before it is closed.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    pub idle_timeout: std::time::Duration,

    /// Hold the store file alone: no other process may open it, not even read-only, until the
    /// server stops (the tool's verbs still work: they find the server on the store's socket,
    /// or through --server). Every commit then makes one flush of the store file instead of
    /// two, and a begin may skip its own (see --durable-begins). A redb store only.
    #[arg(long)]
    pub exclusive: bool,

    /// With --exclusive: make every begin durable before it is answered. Without it a begin
    /// may be answered before its flush, made durable by the next commit; a power loss can
    /// then forget it (its attempt number and staging directory are never issued again, and
    /// its worker's finish is refused as an unknown attempt, so the task is retried).
    #[arg(long, requires = "exclusive")]
    pub durable_begins: bool,
}

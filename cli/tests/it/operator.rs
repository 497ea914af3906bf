//! What an operator meets first: the log on stderr, human times and durations, the list verbs,
//! escaped and cut table cells, unknown names (exit 4, named), every documented flag
//! combination, usage errors as JSON, shell completions and the man page.

use std::process::Stdio;

use serde_json::Value;

use crate::support::{Env, Run, command, finish, keys};

const EU: &str = "date=2026-11-29/region=eu";
const US: &str = "date=2026-11-29/region=us";

/// A store with dataset `daily`: run r1 published (generation 1, EU and US, with an invalid
/// first EU attempt and a run-level effect), run r2 declared with one running EU attempt.
fn populated() -> Env {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700), (US, 1, 5)]);
    env.attempt("r1", "s1", EU, 2, 600).code(3);
    env.attempt("r1", "s1", EU, 2, 700).code(0);
    env.attempt("r1", "s1", US, 1, 5).code(0);
    env.run(&["effects", "record", "-d", "daily", "-r", "r1", "-e", "notify", "--payload", "hi"]).code(0);
    env.run(&["publish", "-d", "daily", "-r", "r1"]).code(0);
    env.declare("r2", "s2", &[(EU, 1, 1)]);
    env.begin("r2", EU);
    env
}

/// The stderr lines of a run that parse as JSON log events.
fn json_events(run: &Run) -> Vec<Value> {
    run.stderr.lines().map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("log line is not JSON ({e}): {line}"))).collect()
}

#[test]
fn the_log_shows_warnings_by_default_and_more_with_v_or_rust_log() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    env.attempt("r1", "s1", EU, 2, 600).code(3);
    env.attempt("r1", "s1", EU, 2, 700).code(0);

    // By default only warnings and errors: a publish logs nothing.
    let quiet = env.run(&["publish", "-d", "daily", "-r", "r1"]).code(0).stderr.clone();
    assert_eq!(quiet, "", "nothing at info by default");
    env.publish_run("r2", "s2", &[(EU, 1, 1)]);
    let run = env.run(&["-v", "rollback", "-d", "daily", "--to", "1", "--actor", "ops", "--reason", "test"]);
    run.code(0);
    assert!(run.stderr.contains("INFO") && run.stderr.contains("rolled back"), "{}", run.stderr);

    // A cleanup plan's proposed deletions reach the log before apply can run: the summary at
    // info, each path at debug.
    let plan_args = ["gc", "plan", "--age-threshold", "0s", "--force-short-threshold"];
    let info = env.run(&[&["-v"][..], &plan_args].concat());
    info.code(0);
    assert!(info.stderr.contains("cleanup planned") && !info.stderr.contains("cleanup candidate"), "{}", info.stderr);
    let debug = env.run(&[&["-vv"][..], &plan_args].concat());
    debug.code(0);
    let invalid_rel = env.json(&["run", "show", "-d", "daily", "-r", "r1"]).code(0).json()["tasks"][0]["attempts"][0]["staging_rel"]
        .as_str()
        .expect("rel")
        .to_owned();
    let candidate_lines: Vec<&str> = debug.stderr.lines().filter(|l| l.contains("cleanup candidate")).collect();
    assert_eq!(candidate_lines.len(), 1, "{}", debug.stderr);
    assert!(candidate_lines[0].contains("DEBUG") && candidate_lines[0].contains(&invalid_rel), "{}", debug.stderr);

    // RUST_LOG sets the filter when no -v/-q is given; -q silences even it.
    let from_env = finish(command().env("RUST_LOG", "manifestdb=debug").args(env.store_args()).args(plan_args));
    from_env.code(0);
    assert!(from_env.stderr.contains("cleanup candidate"), "{}", from_env.stderr);
    let silenced = finish(command().env("RUST_LOG", "debug").args(env.store_args()).arg("-qq").args(plan_args));
    assert_eq!(silenced.code(0).stderr, "");
    let bad = finish(command().env("RUST_LOG", "manifestdb=loudest").args(env.store_args()).args(["--json", "stats"]));
    bad.code(2);
    assert!(bad.error_json()["error"]["message"].as_str().is_some_and(|m| m.contains("RUST_LOG")), "{}", bad.stderr);

    // --log-format json: one JSON object per event, the --json document still alone on stdout.
    let json_log = env.json(&["-vv", "--log-format", "json", "gc", "plan", "--age-threshold", "0s", "--force-short-threshold"]);
    json_log.code(0);
    let events = json_events(&json_log);
    assert!(events.iter().any(|e| e["level"] == "INFO" && e["fields"]["message"] == "cleanup planned"), "{}", json_log.stderr);
    assert!(events.iter().any(|e| e["level"] == "DEBUG" && e["fields"]["path"].as_str().is_some_and(|p| p.contains(&invalid_rel))));
    assert!(json_log.json()["plan"].is_u64());
}

#[test]
fn human_output_shows_rfc3339_times_and_friendly_durations_and_json_keeps_milliseconds() {
    let env = Env::new();
    env.publish_run("r1", "s1", &[(EU, 1, 1)]);
    let plan = env.run(&["gc", "plan"]).code(0).stdout.clone();
    assert!(plan.contains("files older than 3d"), "{plan}");
    assert!(!plan.contains(" ms"), "{plan}");
    let abandon = env.run(&["gc", "abandon"]).code(0).stdout.clone();
    assert!(abandon.contains("idle longer than 1h"), "{abandon}");
    let longer = env.run(&["--attempt-lifetime", "1h 30m", "gc", "abandon"]).code(0).stdout.clone();
    assert!(longer.contains("idle longer than 1h 30m"), "{longer}");
    let show = env.run(&["show"]).code(0).stdout.clone();
    let published_ms = env.json(&["show"]).code(0).json()["datasets"][0]["published_at_ms"].as_u64().expect("ms");
    let rfc3339 = jiff::Timestamp::from_millisecond(published_ms as i64).expect("time").strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    assert!(show.contains(&rfc3339), "{show} lacks {rfc3339}");
    let doc = env.json(&["gc", "plan"]).code(0).json();
    assert_eq!(doc["age_threshold_ms"], 3 * 86_400_000);
}

#[test]
fn run_list_shows_each_run_with_its_state() {
    let env = populated();
    env.declare("r3", "s3", &[(US, 1, 1)]);
    env.attempt("r3", "s3", US, 1, 1).code(0);
    let doc = env.json(&["run", "list", "-d", "daily"]).code(0).json();
    assert_eq!(keys(&doc), ["dataset", "runs"]);
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(keys(&runs[0]), ["run", "snapshot", "declared_at_ms", "state", "tasks", "accepted_tasks", "published_generation"]);
    let summary: Vec<(&str, &str, u64, u64, Option<u64>)> = runs
        .iter()
        .map(|r| {
            (
                r["run"].as_str().expect("run"),
                r["state"].as_str().expect("state"),
                r["tasks"].as_u64().expect("tasks"),
                r["accepted_tasks"].as_u64().expect("accepted"),
                r["published_generation"].as_u64(),
            )
        })
        .collect();
    assert_eq!(summary, [("r1", "published", 2, 2, Some(1)), ("r2", "open", 1, 0, None), ("r3", "complete", 1, 1, None)]);
    let human = env.run(&["run", "list", "-d", "daily"]).code(0).stdout.clone();
    assert!(human.starts_with("RUN ") && human.contains("published") && human.contains("(3 runs)"), "{human}");
}

#[test]
fn attempt_list_shows_status_age_and_lease_by_run_or_task() {
    let env = Env::empty();
    env.run(&["--attempt-lifetime", "2h", "init"]).code(0);
    env.declare("r1", "s1", &[(EU, 2, 700), (US, 1, 5)]);
    env.attempt("r1", "s1", EU, 2, 600).code(3);
    env.attempt("r1", "s1", EU, 2, 700).code(0);
    env.begin("r1", US);
    let doc = env.json(&["attempt", "list", "-d", "daily", "-r", "r1"]).code(0).json();
    assert_eq!(keys(&doc), ["dataset", "run", "partition", "attempt_lifetime_max_ms", "now_ms", "attempts"]);
    assert_eq!((doc["partition"].clone(), doc["attempt_lifetime_max_ms"].as_u64()), (Value::Null, Some(7_200_000)));
    let attempts = doc["attempts"].as_array().expect("attempts");
    assert_eq!(
        keys(&attempts[0]),
        [
            "partition",
            "attempt",
            "status",
            "accepted",
            "started_at_ms",
            "heartbeat_at_ms",
            "abandoned_at_ms",
            "lease_expires_at_ms",
            "staging_rel"
        ]
    );
    let rows: Vec<(&str, u64, &str, bool)> = attempts
        .iter()
        .map(|a| {
            (
                a["partition"].as_str().expect("p"),
                a["attempt"].as_u64().expect("n"),
                a["status"].as_str().expect("s"),
                a["accepted"] == true,
            )
        })
        .collect();
    assert_eq!(rows, [(EU, 1, "invalid", false), (EU, 2, "valid", true), (US, 1, "running", false)]);
    assert!(attempts[0]["lease_expires_at_ms"].is_null(), "a finished attempt holds no lease");
    let running = &attempts[2];
    assert_eq!(running["lease_expires_at_ms"].as_u64(), running["heartbeat_at_ms"].as_u64().map(|h| h + 7_200_000));

    let one_task = env.json(&["attempt", "list", "-d", "daily", "-r", "r1", "-p", US]).code(0).json();
    assert_eq!((one_task["partition"].as_str(), one_task["attempts"].as_array().map(Vec::len)), (Some(US), Some(1)));
    let human = env.run(&["attempt", "list", "-d", "daily", "-r", "r1"]).code(0).stdout.clone();
    let us_line = human.lines().find(|l| l.starts_with(US)).expect("the US attempt's row");
    assert!(us_line.contains("running") && (us_line.contains("1h 59m") || us_line.contains("2h")), "{human}");
    assert!(human.contains("(3 attempts; lease 2h)"), "{human}");
}

#[test]
fn table_cells_escape_control_characters_and_cut_long_names_while_json_stays_exact() {
    let env = Env::new();
    // The library refuses control characters in the names it is given; a file in the staging
    // root can still be named anything, and a plan lists it.
    let stray = "stray\nPATH  BYTES  MODIFIED  REASON\t\u{1b}[31m";
    std::fs::write(env.staging().join(stray), "x").expect("write a stray file");
    let plan_args = ["gc", "plan", "--age-threshold", "0s", "--force-short-threshold"];
    let human = env.run(&plan_args).code(0).stdout.clone();
    assert_eq!(human.lines().filter(|l| l.starts_with("PATH")).count(), 1, "a newline in a name forged a line:\n{human}");
    assert!(human.contains("stray\\nPATH  BYTES  MODIFIED  REASON\\t\\u{1b}[31m"), "{human}");
    assert!(!human.contains('\t') && !human.contains('\u{1b}'), "{human}");
    let doc = env.json(&plan_args).code(0).json();
    assert_eq!(doc["unknown"][0]["path"], stray, "--json keeps the name exact");

    // A long partition key is cut in the table, with a marker, and whole in --json.
    let long = (0..4).map(|i| format!("p{i}={}", "n".repeat(200))).collect::<Vec<_>>().join("/");
    env.declare("r1", "s1", &[(long.as_str(), 0, 0)]);
    let human = env.run(&["run", "show", "-d", "daily", "-r", "r1"]).code(0).stdout.clone();
    let row = human.lines().find(|l| l.starts_with("p0=nnn")).expect("the long partition's row");
    assert!(row.contains('…') && row.chars().count() < 200 && row.contains("no attempt"), "{row}");
    assert_eq!(human.lines().count(), 4, "one headline, the grain line, one header, one line for the task:\n{human}");
    let doc = env.json(&["run", "show", "-d", "daily", "-r", "r1"]).code(0).json();
    assert_eq!(doc["tasks"][0]["partition"], long.as_str());
}

/// Every verb and sub-verb the tool has, read from its `--help`.
fn verbs() -> Vec<String> {
    fn commands_of(prefix: &[&str]) -> Vec<String> {
        let help = finish(command().args(prefix).arg("--help"));
        help.code(0);
        let mut names = Vec::new();
        let mut in_commands = false;
        for line in help.stdout.lines() {
            if line == "Commands:" {
                in_commands = true;
            } else if in_commands && line.is_empty() {
                break;
            } else if in_commands
                && !line.starts_with("   ")
                && let Some(name) = line.split_whitespace().next().filter(|name| *name != "help")
            {
                // A verb's line is indented by two; its wrapped description by more.
                names.push(name.to_owned());
            }
        }
        names
    }
    let mut verbs = Vec::new();
    for top in commands_of(&[]) {
        let subs = commands_of(&[&top]);
        if subs.is_empty() {
            verbs.push(top);
        } else {
            verbs.extend(subs.into_iter().map(|sub| format!("{top} {sub}")));
        }
    }
    verbs
}

/// Verbs that name no dataset, run, attempt, effect, generation or plan.
// `batch` names things only in its input lines, each of which reports a name it does not know
// as not_found on its own result line (tests: `batch::*`).
const NAMES_NOTHING: [&str; 9] = ["init", "stats", "verify", "gc abandon", "recover", "completions", "man", "serve", "batch"];

#[test]
fn every_verb_naming_something_unknown_exits_4_and_names_it() {
    let env = populated();
    let id = env.json(&["gc", "plan"]).code(0).json()["plan"].as_u64().expect("plan").to_string();
    assert_eq!(id, "1");
    // (verb, arguments, the name the message must contain)
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "run declare",
            &["run", "declare", "--trust-reported-figures", "-d", "daily", "-r", "r1", "--snapshot", "s1", "--task", "nosuch-partition:1"],
            "r1",
        ),
        ("run show", &["run", "show", "-d", "nosuch", "-r", "r1"], "nosuch"),
        ("run show", &["run", "show", "-d", "daily", "-r", "nosuch"], "nosuch"),
        ("run list", &["run", "list", "-d", "nosuch"], "nosuch"),
        ("attempt begin", &["attempt", "begin", "-d", "nosuch", "-r", "r2", "-p", EU], "nosuch"),
        ("attempt begin", &["attempt", "begin", "-d", "daily", "-r", "nosuch", "-p", EU], "nosuch"),
        ("attempt begin", &["attempt", "begin", "-d", "daily", "-r", "r2", "-p", "nosuch"], "nosuch"),
        (
            "attempt finish",
            &["attempt", "finish", "-d", "daily", "-r", "r2", "-p", EU, "-a", "99", "--snapshot", "s2", "--rows", "1", "--digest", "d"],
            "99",
        ),
        ("attempt validate", &["attempt", "validate", "-d", "daily", "-r", "r2", "-p", EU, "-a", "99"], "99"),
        ("attempt heartbeat", &["attempt", "heartbeat", "-d", "daily", "-r", "r2", "-p", EU, "-a", "99"], "99"),
        ("attempt abandon", &["attempt", "abandon", "-d", "daily", "-r", "r2", "-p", EU, "-a", "99"], "99"),
        (
            "attempt invalidate",
            &["attempt", "invalidate", "-d", "daily", "-r", "r2", "-p", EU, "-a", "99", "--actor", "a", "--reason", "r"],
            "99",
        ),
        ("attempt list", &["attempt", "list", "-d", "nosuch", "-r", "r1"], "nosuch"),
        ("attempt list", &["attempt", "list", "-d", "daily", "-r", "nosuch"], "nosuch"),
        ("attempt list", &["attempt", "list", "-d", "daily", "-r", "r1", "-p", "nosuch"], "nosuch"),
        ("publish", &["publish", "-d", "nosuch", "-r", "r1"], "nosuch"),
        ("publish", &["publish", "-d", "daily", "-r", "nosuch"], "nosuch"),
        ("show", &["show", "-d", "nosuch"], "nosuch"),
        ("show", &["show", "-d", "daily", "-g", "99"], "99"),
        ("log", &["log", "-d", "nosuch"], "nosuch"),
        ("diff", &["diff", "-d", "nosuch", "1", "1"], "nosuch"),
        ("diff", &["diff", "-d", "daily", "1", "99"], "99"),
        ("effects list", &["effects", "list", "-d", "nosuch"], "nosuch"),
        ("effects list", &["effects", "list", "-d", "nosuch", "--ready"], "nosuch"),
        ("effects list", &["effects", "list", "-d", "daily", "-r", "nosuch"], "nosuch"),
        ("effects record", &["effects", "record", "-d", "nosuch", "-r", "r1", "-e", "x"], "nosuch"),
        ("effects record", &["effects", "record", "-d", "daily", "-r", "nosuch", "-e", "x"], "nosuch"),
        ("effects claim", &["effects", "claim", "-d", "daily", "-r", "r1", "-e", "nosuch", "--claimant", "w1"], "nosuch"),
        ("effects mark-emitted", &["effects", "mark-emitted", "-d", "daily", "-r", "r1", "-e", "nosuch"], "nosuch"),
        ("effects mark-emitted", &["effects", "mark-emitted", "-d", "daily", "-r", "nosuch", "-e", "notify"], "nosuch"),
        ("rollback", &["rollback", "-d", "nosuch", "--to", "1", "--actor", "a", "--reason", "r"], "nosuch"),
        ("rollback", &["rollback", "-d", "daily", "--to", "99", "--actor", "a", "--reason", "r"], "99"),
        ("gc expire", &["gc", "expire", "-d", "nosuch"], "nosuch"),
        ("view", &["view", "nosuch"], "nosuch"),
        ("view sync", &["view", "sync", "nosuch"], "nosuch"),
        ("gc plan", &["gc", "plan", "--show", "99"], "99"),
        ("gc apply", &["gc", "apply", "--plan", "99"], "99"),
    ];
    for (verb, args, name) in cases {
        if *verb == "run declare" {
            // Declaring names new things; an unknown name cannot be wrong there. A redeclaration
            // naming a task the run does not have is a conflict, not "not found".
            env.run(args).code(5);
            continue;
        }
        let human = env.run(args);
        assert_eq!(human.code, 4, "{verb} {args:?}: exit {}; stdout:\n{}\nstderr:\n{}", human.code, human.stdout, human.stderr);
        let said = format!("{}{}", human.stdout, human.stderr);
        assert!(said.contains(name), "{verb} {args:?}: the message does not name {name:?}: {said}");
        let json = env.json(args);
        assert_eq!(json.code, 4, "{verb} {args:?} --json");
        if args[0] == "rollback" && args[2] == "daily" {
            // The refusal document stays on stdout (its documented shape), exit 4.
            assert_eq!(json.json()["refusal"]["kind"], "unknown");
        } else {
            let error = json.error_json();
            assert_eq!(error["error"]["kind"], "not_found", "{verb} {args:?}");
            assert!(error["error"]["message"].as_str().is_some_and(|m| m.contains(name)), "{verb} {args:?}: {error}");
        }
    }
    let covered: Vec<&str> = cases.iter().map(|(verb, _, _)| *verb).collect();
    for verb in verbs() {
        assert!(
            covered.contains(&verb.as_str()) || NAMES_NOTHING.contains(&verb.as_str()),
            "verb `{verb}` has no unknown-name case here: add one (or list it in NAMES_NOTHING if it names nothing)"
        );
    }
}

#[test]
fn every_flag_combination_the_help_describes_works() {
    let env = populated();
    let store = env.db_path();
    let staging = env.staging();
    let (store, staging) = (store.to_str().expect("utf-8"), staging.to_str().expect("utf-8"));
    let (attempt, dir) = env.begin("r2", EU);
    crate::support::write_rows(&dir, 1, 1);
    let n = attempt.to_string();
    let candidate = env.tmp.path().join("candidate.json");
    std::fs::write(&candidate, r#"{"snapshot": "s2", "rows": 1, "total": 1, "digest": "d"}"#).expect("write");
    let candidate = candidate.to_str().expect("utf-8");
    let combos: &[&[&str]] = &[
        // Effects: of a run, ready ones, a run's ready ones.
        &["effects", "list", "-d", "daily", "-r", "r1"],
        &["effects", "list", "-d", "daily", "--ready"],
        &["effects", "list", "-d", "daily", "-r", "r1", "--ready"],
        &["effects", "record", "-d", "daily", "-r", "r2", "-e", "audit", "-p", EU, "--payload", "x"],
        &["effects", "record", "-d", "daily", "-r", "r2", "-e", "empty"],
        // A candidate from JSON, with --file and --scan adding to its files.
        &["attempt", "finish", "-d", "daily", "-r", "r2", "-p", EU, "-a", &n, "--from", candidate, "--file", "part.csv", "--scan"],
        &["attempt", "validate", "-d", "daily", "-r", "r2", "-p", EU, "-a", &n, "--checksums"],
        &["attempt", "list", "-d", "daily", "-r", "r2", "-p", EU],
        &["show", "-d", "daily", "-g", "1"],
        &["log", "-d", "daily"],
        &["verify", "--files", "--checksums", "--integrity"],
        &["gc", "plan", "--age-threshold", "2h"],
        &["gc", "plan", "--age-threshold", "1s", "--force-short-threshold"],
        &["gc", "plan", "--show", "1"],
        &["gc", "apply", "--plan", "1", "--delete-unknown", "--batch-size", "10"],
        &["gc", "apply", "--plan", "1", "--execute", "--delete-unknown", "--batch-size", "10"],
        &["gc", "expire", "-d", "daily", "--keep-last", "1", "--rollback-window", "1h 30m"],
        &["gc", "expire", "-d", "daily", "--keep-last", "5", "--rollback-window", "7d", "--execute"],
        &["gc", "abandon", "--execute"],
        // Global flags, alone and together.
        &["--store", store, "show"],
        &["--store", store, "--staging", staging, "show", "-d", "daily"],
        &["--store", store, "--staging", staging, "-vv", "--log-format", "json", "gc", "plan"],
        &["-q", "stats"],
        &["-qq", "stats"],
        &["-vvv", "stats"],
        &["--attempt-lifetime", "90m", "gc", "abandon"],
        &["attempt", "begin", "--env", "-d", "daily", "-r", "r2", "-p", EU],
        &["publish", "-d", "daily", "-r", "r2", "--accept-nondeterminism", "a rerun"],
        &["rollback", "-d", "daily", "--to", "1", "--actor", "ops", "--reason", "test"],
    ];
    for args in combos {
        // Each once, with its JSON document (--env prints shell assignments instead).
        let json = !args.contains(&"--env");
        let run = if args[0] == "--store" {
            // The global flags alone name the store.
            finish(command().arg("--json").args(*args))
        } else if json {
            env.json(args)
        } else {
            env.run(args)
        };
        assert_eq!(run.code, 0, "{args:?} (json: {json}): stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
        if json {
            run.json();
        }
    }
    // The reading ones again, as tables.
    for args in combos.iter().filter(|args| ["effects", "show", "log", "attempt"].contains(&args[0]) && !args.contains(&"--env")) {
        if args[1] != "finish" && args[1] != "validate" {
            env.run(args).code(0);
        }
    }
    // The combinations the help rules out are usage errors.
    env.json(&["attempt", "begin", "--env", "-d", "daily", "-r", "r2", "-p", EU]).code(2);
    env.run(&["-v", "-q", "stats"]).code(2);
    env.run(&["show", "-g", "1"]).code(2);
    env.run(&["gc", "plan", "--show", "1", "--age-threshold", "2h"]).code(2);
}

#[test]
fn usage_errors_under_json_are_the_json_error_document() {
    let env = populated();
    for args in [
        &["run", "show", "-d", "daily"][..],
        &["nosuch-verb"],
        &["gc", "plan", "--age-threshold", "5"],
        &["gc", "plan", "--age-threshold", "1 fortnight"],
        &["show", "--generation", "one", "-d", "daily"],
        &["run"],
    ] {
        let run = env.json(args);
        run.code(2);
        assert_eq!(run.stdout, "", "{args:?}");
        let error = run.error_json();
        assert_eq!(keys(&error["error"]), ["exit_code", "kind", "message"], "{args:?}");
        assert_eq!((error["error"]["exit_code"].as_u64(), error["error"]["kind"].as_str()), (Some(2), Some("usage")), "{args:?}");
        assert!(error["error"]["message"].as_str().is_some_and(|m| !m.is_empty() && !m.contains('\n')), "{error}");
        // Without --json clap's own text, with the usage line.
        let plain = env.run(args);
        plain.code(2);
        assert!(plain.stderr.contains("error:") || plain.stderr.contains("Usage:"), "{args:?}: {}", plain.stderr);
    }
    let missing = env.json(&["run", "show", "-d", "daily"]).error_json();
    assert!(missing["error"]["message"].as_str().is_some_and(|m| m.contains("--run")), "{missing}");
    // Help and version are not errors.
    let help = env.json(&["run", "list", "--help"]);
    assert!(help.code(0).stdout.contains("JSON:"), "{}", help.stdout);
    assert!(finish(command().args(["--json", "--version"])).code(0).stdout.starts_with("manifestdb "));
}

#[test]
fn shell_completions_load_into_bash_and_complete_verbs() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let run = finish(command().args(["completions", shell]));
        run.code(0);
        assert!(run.stdout.contains("manifestdb") && run.stdout.contains("attempt"), "{shell}");
    }
    finish(command().args(["completions", "tcsh"])).code(2);
    // A real bash loads the script and completes `manifestdb gc p` to `plan`.
    let script = finish(command().args(["completions", "bash"])).stdout;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("manifestdb.bash");
    std::fs::write(&path, script).expect("write");
    let probe = format!(
        "source {}; COMP_WORDS=(manifestdb gc p); COMP_CWORD=2; COMP_LINE='manifestdb gc p'; COMP_POINT=${{#COMP_LINE}}; \
         _manifestdb manifestdb p gc; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        path.display()
    );
    let out = std::process::Command::new("bash").args(["--norc", "-c", &probe]).stderr(Stdio::inherit()).output().expect("run bash");
    assert!(out.status.success());
    let replies = String::from_utf8(out.stdout).expect("utf-8");
    assert!(replies.lines().any(|l| l == "plan"), "bash completed `manifestdb gc p` to: {replies:?}");
}

#[test]
fn the_man_page_documents_every_verb_and_a_verb_has_its_own_page() {
    let page = finish(command().arg("man")).code(0).stdout.clone();
    assert!(page.starts_with(".ie") || page.contains(".TH manifestdb 1"), "{}", &page[..page.len().min(300)]);
    for section in [".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH OPTIONS", ".SH SUBCOMMANDS", ".SH EXTRA"] {
        assert!(page.contains(section), "the page lacks {section}");
    }
    for verb in ["manifestdb\\-run(1)", "manifestdb\\-attempt(1)", "manifestdb\\-gc(1)", "manifestdb\\-completions(1)"] {
        assert!(page.contains(verb), "the page does not list {verb}");
    }
    assert!(page.contains("\\-\\-log\\-format") && page.contains("RUST_LOG"), "global flags and the log are documented");
    let verb = finish(command().args(["man", "gc", "plan"])).code(0).stdout.clone();
    assert!(verb.contains(".TH manifestdb-gc-plan 1"), "{}", &verb[..verb.len().min(300)]);
    assert!(verb.contains(&format!("\"manifestdb {}\"", env!("CARGO_PKG_VERSION"))), "the page names its source");
    assert!(verb.contains("\\-\\-age\\-threshold") && verb.contains("\\-\\-json"), "its own and the global flags");
    assert!(verb.contains("candidate_bytes"), "its JSON document");
    finish(command().args(["man", "nosuch"])).code(2);
    // man(1) itself renders it, where installed.
    if std::process::Command::new("man").arg("--version").output().is_ok_and(|o| o.status.success()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("manifestdb.1");
        std::fs::write(&path, &page).expect("write");
        let out =
            std::process::Command::new("man").arg("-l").arg(&path).env("MANPAGER", "cat").env("MANWIDTH", "100").output().expect("man");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("SUBCOMMANDS"), "{text}");
    }
}

crate::support::through_a_server!(
    run_list_shows_each_run_with_its_state,
    table_cells_escape_control_characters_and_cut_long_names_while_json_stays_exact,
    every_verb_naming_something_unknown_exits_4_and_names_it,
);

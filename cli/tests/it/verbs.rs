//! Each verb's exit codes and JSON shape.

use std::io::Write;
use std::process::Stdio;

use serde_json::json;

use crate::support::{Env, command, keys, write_rows};

const EU: &str = "date=2026-11-29/region=eu";
const US: &str = "date=2026-11-29/region=us";

#[test]
fn init_creates_the_store_once() {
    let env = Env::empty();
    let first = env.json(&["init"]).code(0).json();
    assert_eq!(keys(&first), ["store", "staging", "created"]);
    assert_eq!(first["created"], true);
    assert!((crate::support::on_postgres() || env.db_path().is_file()) && env.staging().is_dir());
    let again = env.json(&["init"]).code(0).json();
    assert_eq!(again["created"], false);
}

#[test]
fn run_declare_from_flags_or_json_and_identical_redeclare_is_a_no_op() {
    let env = Env::new();
    let args = [
        "run",
        "declare",
        "--trust-reported-figures",
        "-d",
        "daily",
        "-r",
        "r1",
        "--snapshot",
        "s1",
        "--task",
        &format!("{EU}:2:700"),
        "--task",
        &format!("{US}:3"),
    ];
    let doc = env.json(&args).code(0).json();
    assert_eq!(keys(&doc), ["dataset", "run", "snapshot", "outcome", "grain", "tasks"]);
    assert_eq!(doc["grain"], serde_json::Value::Null);
    assert_eq!(doc["outcome"], "declared");
    assert_eq!(
        doc["tasks"],
        json!([
            { "partition": EU, "expected_rows": 2, "expected_total": 700 },
            { "partition": US, "expected_rows": 3, "expected_total": null },
        ])
    );
    assert_eq!(env.json(&args).code(0).json()["outcome"], "already_declared");

    // The same run from a JSON document on stdin is identical, so also a no-op.
    let input = json!({ "dataset": "daily", "run": "r1", "snapshot": "s1", "trust_reported_figures": true, "tasks": [
        { "partition": EU, "expected_rows": 2, "expected_total": 700 },
        { "partition": US, "expected_rows": 3 },
    ]});
    let mut cmd = command();
    cmd.args(env.store_args()).args(["--json", "run", "declare", "--from", "-"]).stdin(Stdio::piped());
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    child.stdin.take().expect("stdin").write_all(input.to_string().as_bytes()).expect("write stdin");
    let output = child.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(doc["outcome"], "already_declared");

    // A different declaration under the same id is a conflict; malformed input is a usage error.
    env.run(&[
        "run",
        "declare",
        "--trust-reported-figures",
        "-d",
        "daily",
        "-r",
        "r1",
        "--snapshot",
        "s2",
        "--task",
        &format!("{EU}:2:700"),
    ])
    .code(5);
    let bad = env.tmp.path().join("bad.json");
    std::fs::write(&bad, r#"{"dataset": "daily", "run": "r9", "snapshot": "s", "tasks": [], "extra": 1}"#).expect("write");
    env.run(&["run", "declare", "--from", bad.to_str().expect("utf-8")]).code(2);
    env.run(&["run", "declare", "--trust-reported-figures", "-d", "daily", "-r", "r2", "--snapshot", "s", "--task", "p:notanumber"])
        .code(2);
}

#[test]
fn attempt_begin_prints_number_and_private_staging_dir() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    let doc = env.json(&["attempt", "begin", "-d", "daily", "-r", "r1", "-p", EU]).code(0).json();
    assert_eq!(keys(&doc), ["dataset", "run", "partition", "attempt", "staging_dir", "started_at_ms"]);
    assert_eq!(doc["attempt"], 1);
    let first = std::path::PathBuf::from(doc["staging_dir"].as_str().expect("path"));
    assert!(first.is_dir());
    assert!(first.starts_with(std::fs::canonicalize(env.staging()).expect("canonical")));

    let env_out = env.run(&["attempt", "begin", "--env", "-d", "daily", "-r", "r1", "-p", EU]).code(0).stdout.clone();
    assert!(env_out.starts_with("MANIFESTDB_ATTEMPT=2\nMANIFESTDB_STAGING_DIR="), "{env_out}");
    // A real shell's eval reads the assignments back exactly.
    let probe = "eval \"$1\" && printf '%s\\n%s' \"$MANIFESTDB_ATTEMPT\" \"$MANIFESTDB_STAGING_DIR\"";
    let shell = std::process::Command::new("sh").args(["-c", probe, "sh", &env_out]).output().expect("run sh");
    assert!(shell.status.success(), "{}", String::from_utf8_lossy(&shell.stderr));
    let evaluated = String::from_utf8(shell.stdout).expect("utf-8");
    let (attempt, second) = evaluated.split_once('\n').expect("two values");
    assert_eq!(attempt, "2");
    assert!(std::path::Path::new(second).is_dir());
    assert_ne!(std::path::Path::new(second), first);

    let human = env.run(&["attempt", "begin", "-d", "daily", "-r", "r1", "-p", EU]).code(0).stdout.clone();
    assert!(human.contains("attempt  3"), "{human}");
}

#[test]
fn attempt_finish_computes_sizes_and_checksums_from_the_staging_dir() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    let (attempt, dir) = env.begin("r1", EU);
    write_rows(&dir, 2, 700);
    std::fs::create_dir(dir.join("sub")).expect("mkdir");
    std::fs::write(dir.join("sub/extra.txt"), "x").expect("write");
    let n = attempt.to_string();
    let finish_args = [
        "attempt",
        "finish",
        "-d",
        "daily",
        "-r",
        "r1",
        "-p",
        EU,
        "-a",
        &n,
        "--snapshot",
        "s1",
        "--rows",
        "2",
        "--total",
        "700",
        "--digest",
        "d1",
        "--scan",
    ];
    let doc = env.json(&finish_args).code(0).json();
    assert_eq!(keys(&doc), ["dataset", "run", "partition", "attempt", "outcome", "candidate"]);
    assert_eq!(doc["outcome"], "recorded");
    assert_eq!(keys(&doc["candidate"]), ["snapshot", "rows", "total", "digest", "files"]);
    let files = doc["candidate"]["files"].as_array().expect("files");
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["path"], "part.csv");
    assert_eq!(files[1]["path"], "sub/extra.txt");
    assert_eq!(files[0]["size_bytes"], std::fs::metadata(dir.join("part.csv")).expect("meta").len());
    assert_eq!(files[0]["crc32"], manifestdb::file_crc32(&dir.join("part.csv")).expect("crc"));

    // Finishing again with the same candidate writes nothing; a different one is a conflict.
    assert_eq!(env.json(&finish_args).code(0).json()["outcome"], "already_recorded");
    let mut different = finish_args;
    different[17] = "d2";
    env.run(&different).code(5);
    // A candidate read from another snapshot than the run's is refused.
    let (second, dir2) = env.begin("r1", EU);
    write_rows(&dir2, 2, 700);
    let n2 = second.to_string();
    env.run(&["attempt", "finish", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n2, "--snapshot", "other", "--rows", "2", "--digest", "d"])
        .code(5);

    // From a JSON candidate, with --file adding a computed entry.
    let candidate = env.tmp.path().join("candidate.json");
    std::fs::write(&candidate, r#"{"snapshot": "s1", "rows": 2, "total": 700, "digest": "d1"}"#).expect("write");
    let doc = env
        .json(&[
            "attempt",
            "finish",
            "-d",
            "daily",
            "-r",
            "r1",
            "-p",
            EU,
            "-a",
            &n2,
            "--from",
            candidate.to_str().expect("utf-8"),
            "--file",
            "part.csv",
        ])
        .code(0)
        .json();
    assert_eq!(doc["candidate"]["files"][0]["path"], "part.csv");
    // A named file that does not exist is not found; unknown attempts too.
    env.run(&["attempt", "finish", "-d", "daily", "-r", "r1", "-p", EU, "-a", "99", "--snapshot", "s1", "--rows", "2", "--digest", "d"])
        .code(4);
}

#[test]
fn attempt_validate_exits_0_when_valid_and_3_when_invalid() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    let (running, _) = env.begin("r1", EU);
    // Validating an attempt that has not finished is a state conflict.
    env.run(&["attempt", "validate", "-d", "daily", "-r", "r1", "-p", EU, "-a", &running.to_string()]).code(5);

    let invalid = env.attempt("r1", "s1", EU, 2, 600);
    invalid.code(3);
    assert!(invalid.stdout.contains("total 600 != expected 700"), "{}", invalid.stdout);
    let doc = env.json(&["attempt", "validate", "-d", "daily", "-r", "r1", "-p", EU, "-a", "2"]).code(3).json();
    assert_eq!(keys(&doc), ["dataset", "run", "partition", "attempt", "verdict", "failures", "accepted_attempt", "reconciliation"]);
    assert_eq!(doc["reconciliation"]["basis"], "reported");
    assert_eq!(doc["verdict"], "invalid");
    assert_eq!(doc["failures"][0]["kind"], "total_mismatch");
    assert_eq!(doc["failures"][0]["expected"], 700);
    assert_eq!(doc["failures"][0]["got"], 600);
    assert_eq!(doc["accepted_attempt"], serde_json::Value::Null);

    env.attempt("r1", "s1", EU, 2, 700).code(0);
    let doc = env.json(&["attempt", "validate", "-d", "daily", "-r", "r1", "-p", EU, "-a", "3"]).code(0).json();
    assert_eq!(doc["verdict"], "valid");
    assert_eq!(doc["failures"], json!([]));
    assert_eq!(doc["accepted_attempt"], 3);
    env.run(&["attempt", "validate", "-d", "daily", "-r", "r1", "-p", EU, "-a", "42"]).code(4);
}

#[test]
fn publish_exit_codes_distinguish_published_refused_and_error() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700), (US, 1, 5)]);
    env.attempt("r1", "s1", EU, 2, 700).code(0);
    let refused = env.json(&["publish", "-d", "daily", "-r", "r1"]).code(3).json();
    assert_eq!(keys(&refused), ["dataset", "run", "outcome", "generation", "refused_tasks"]);
    assert_eq!(refused["outcome"], "refused");
    assert_eq!(refused["generation"], serde_json::Value::Null);
    assert_eq!(
        refused["refused_tasks"],
        json!([{ "partition": US, "reason": "no_accepted_attempt", "attempts": [], "message": "no accepted attempt (none begun)" }])
    );

    env.attempt("r1", "s1", US, 1, 5).code(0);
    let published = env.json(&["publish", "-d", "daily", "-r", "r1"]).code(0).json();
    assert_eq!(published["outcome"], "published");
    assert_eq!(published["refused_tasks"], json!([]));
    let generation = &published["generation"];
    assert_eq!(
        keys(generation),
        [
            "dataset",
            "number",
            "parent",
            "kind",
            "rollback",
            "run",
            "snapshot",
            "published_at_ms",
            "partitions_replaced",
            "nondeterminism_accepted"
        ]
    );
    assert_eq!((generation["number"].as_u64(), generation["kind"].as_str()), (Some(1), Some("publish")));
    let again = env.json(&["publish", "-d", "daily", "-r", "r1"]).code(0).json();
    assert_eq!(again["outcome"], "already_published");
    assert_eq!(again["generation"]["number"], 1);
    // A published run takes no new attempt.
    env.run(&["attempt", "begin", "-d", "daily", "-r", "r1", "-p", EU]).code(5);
    env.run(&["publish", "-d", "daily", "-r", "nope"]).code(4);
}

#[test]
fn show_log_and_diff_report_generations() {
    let env = Env::new();
    env.publish_run("r1", "s1", &[(EU, 2, 700), (US, 1, 5)]);
    env.publish_run("r2", "s2", &[(US, 1, 6), ("date=2026-11-30/region=us", 2, 10)]);

    let show = env.json(&["show", "-d", "daily"]).code(0).json();
    assert_eq!(keys(&show), ["generation", "current", "partitions", "totals"]);
    assert_eq!((show["generation"]["number"].as_u64(), show["current"].as_bool()), (Some(2), Some(true)));
    assert_eq!(
        show["totals"],
        json!({ "partitions": 3, "rows": 5, "total": 716, "files": 3, "bytes": show["totals"]["bytes"], "reported_partitions": 3 })
    );
    let partition = &show["partitions"][0];
    assert_eq!(
        keys(partition),
        [
            "partition",
            "since_generation",
            "run",
            "attempt",
            "snapshot",
            "rows",
            "total",
            "digest",
            "staging_rel",
            "staging_dir",
            "files",
            "figures"
        ]
    );
    assert_eq!((partition["partition"].as_str(), partition["since_generation"].as_u64()), (Some(EU), Some(1)));
    let file = std::path::Path::new(partition["staging_dir"].as_str().expect("dir")).join("part.csv");
    assert_eq!(crate::support::read_rows(&file), (2, 700));

    let old = env.json(&["show", "-d", "daily", "-g", "1"]).code(0).json();
    assert_eq!((old["current"].as_bool(), old["totals"]["total"].as_i64()), (Some(false), Some(705)));
    env.run(&["show", "-d", "daily", "-g", "9"]).code(4);
    env.run(&["show", "-d", "nothing"]).code(4);
    let list = env.json(&["show"]).code(0).json();
    assert_eq!(list["datasets"][0]["dataset"], "daily");
    assert_eq!(keys(&list["datasets"][0]), ["dataset", "current_generation", "run", "published_at_ms"]);

    let log = env.json(&["log", "-d", "daily"]).code(0).json();
    assert_eq!(keys(&log["datasets"][0]), ["dataset", "current_generation", "generations"]);
    let numbers: Vec<u64> =
        log["datasets"][0]["generations"].as_array().expect("array").iter().filter_map(|g| g["number"].as_u64()).collect();
    assert_eq!(numbers, [2, 1], "newest first");
    assert!(env.run(&["log"]).code(0).stdout.contains("current"));

    let diff = env.json(&["diff", "-d", "daily", "1", "2"]).code(0).json();
    assert_eq!(keys(&diff), ["dataset", "from", "to", "added", "removed", "replaced", "unchanged"]);
    assert_eq!(diff["added"][0]["partition"], "date=2026-11-30/region=us");
    assert_eq!(diff["replaced"][0]["partition"], US);
    assert_eq!((diff["replaced"][0]["from"]["run"].as_str(), diff["replaced"][0]["to"]["run"].as_str()), (Some("r1"), Some("r2")));
    assert_eq!((diff["removed"].as_array().map(Vec::len), diff["unchanged"].as_u64()), (Some(0), Some(1)));
    let back = env.json(&["diff", "-d", "daily", "2", "1"]).code(0).json();
    assert_eq!(back["removed"][0]["partition"], "date=2026-11-30/region=us");
    env.run(&["diff", "-d", "daily", "1", "3"]).code(4);
}

#[test]
fn effects_are_recorded_once_and_emitted_after_publish() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    let record = ["effects", "record", "-d", "daily", "-r", "r1", "-e", "notify", "-p", EU, "--payload", "hello"];
    let first = env.json(&record).code(0).json();
    assert_eq!(keys(&first), ["newly_recorded", "effect"]);
    assert_eq!(first["newly_recorded"], true);
    assert_eq!(
        keys(&first["effect"]),
        [
            "dataset",
            "run",
            "effect",
            "partition",
            "store_id",
            "idempotency_key",
            "status",
            "generation",
            "recorded_at_ms",
            "emitted_at_ms",
            "payload",
            "payload_hex",
            "claim"
        ]
    );
    assert_eq!((first["effect"]["status"].as_str(), first["effect"]["payload_hex"].as_str()), (Some("recorded"), Some("68656c6c6f")));
    let mut repeat = record;
    repeat[11] = "changed";
    let second = env.json(&repeat).code(0).json();
    assert_eq!((second["newly_recorded"].as_bool(), second["effect"]["payload"].as_str()), (Some(false), Some("hello")));

    let mark = ["effects", "mark-emitted", "-d", "daily", "-r", "r1", "-e", "notify", "-p", EU];
    env.run(&mark).code(5);
    assert_eq!(env.json(&["effects", "list", "-d", "daily", "--ready"]).code(0).json(), json!({ "effects": [] }));

    env.attempt("r1", "s1", EU, 2, 700).code(0);
    env.run(&["publish", "-d", "daily", "-r", "r1"]).code(0);
    let ready = env.json(&["effects", "list", "-d", "daily", "--ready"]).code(0).json();
    assert_eq!((ready["effects"][0]["status"].as_str(), ready["effects"][0]["generation"].as_u64()), (Some("ready"), Some(1)));
    let emitted = env.json(&mark).code(0).json();
    assert_eq!(keys(&emitted), ["outcome", "effect"]);
    assert_eq!((emitted["outcome"].as_str(), emitted["effect"]["status"].as_str()), (Some("marked"), Some("emitted")));
    assert!(emitted["effect"]["emitted_at_ms"].is_u64());
    // Marking again says it was already emitted, and changes nothing.
    let again = env.json(&mark).code(0).json();
    assert_eq!(again["outcome"], "already_emitted");
    assert_eq!(again["effect"]["emitted_at_ms"], emitted["effect"]["emitted_at_ms"]);
    assert!(env.run(&mark).code(0).stdout.contains("already emitted"));
    assert_eq!(env.json(&["effects", "list", "-d", "daily", "-r", "r1"]).code(0).json()["effects"].as_array().map(Vec::len), Some(1));
    assert_eq!(env.json(&["effects", "list", "-d", "daily", "--ready"]).code(0).json(), json!({ "effects": [] }));
    env.run(&["effects", "mark-emitted", "-d", "daily", "-r", "r1", "-e", "other"]).code(4);
    env.run(&["effects", "record", "-d", "daily", "-r", "nope", "-e", "x"]).code(4);
}

#[test]
fn stats_counts_what_the_store_holds() {
    let env = Env::new();
    env.publish_run("r1", "s1", &[(EU, 2, 700), (US, 1, 5)]);
    env.attempt_noise();
    let doc = env.json(&["stats"]).code(0).json();
    assert_eq!(keys(&doc), ["store", "file_bytes", "tables", "datasets"]);
    if crate::support::on_postgres() {
        assert!(doc["file_bytes"].is_null(), "a database has no file size: {doc}");
    } else {
        assert!(doc["file_bytes"].as_u64().is_some_and(|n| n > 0));
    }
    let tables = &doc["tables"];
    assert_eq!((tables["runs"].as_u64(), tables["tasks"].as_u64(), tables["attempts"].as_u64()), (Some(2), Some(3), Some(3)));
    assert_eq!((tables["generations"].as_u64(), tables["pointers"].as_u64()), (Some(1), Some(1)));
    assert_eq!(
        doc["datasets"][0],
        json!({ "dataset": "daily", "current_generation": 1, "partitions": 2, "rows": 3, "files": 2, "bytes": doc["datasets"][0]["bytes"], "reported_partitions": 2 })
    );
    assert!(env.run(&["stats"]).code(0).stdout.contains("attempts"));
}

#[test]
fn run_show_lists_attempts_and_the_accepted_one() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700), (US, 1, 5)]);
    env.attempt("r1", "s1", EU, 1, 700).code(3);
    env.attempt("r1", "s1", EU, 2, 700).code(0);
    let doc = env.json(&["run", "show", "-d", "daily", "-r", "r1"]).code(0).json();
    assert_eq!(keys(&doc), ["dataset", "run", "snapshot", "declared_at_ms", "published_generation", "grain", "tasks"]);
    let eu = &doc["tasks"][0];
    assert_eq!(keys(eu), ["partition", "expected_rows", "expected_total", "accepted_attempt", "attempts"]);
    assert_eq!(eu["accepted_attempt"], 2);
    assert_eq!(keys(&eu["attempts"][0]), ["attempt", "status", "failures", "started_at_ms", "staging_rel", "candidate", "reconciliation"]);
    assert_eq!((eu["attempts"][0]["status"].as_str(), eu["attempts"][1]["status"].as_str()), (Some("invalid"), Some("valid")));
    assert_eq!(eu["attempts"][0]["failures"][0]["kind"], "rows_mismatch");
    assert_eq!((doc["tasks"][1]["attempts"].as_array().map(Vec::len), doc["tasks"][1]["accepted_attempt"].is_null()), (Some(0), true));
    env.run(&["run", "show", "-d", "daily", "-r", "r9"]).code(4);
}

impl Env {
    /// Declares a second run with one task and begins (only) one attempt of it.
    fn attempt_noise(&self) {
        self.declare("r2", "s2", &[(EU, 1, 1)]);
        self.begin("r2", EU);
    }
}

#[test]
fn a_closed_output_pipe_is_not_an_error() {
    let env = Env::new();
    for i in 0..3 {
        env.publish_run(&format!("r{i}"), &format!("s{i}"), &[(EU, 1, i)]);
    }
    let mut cmd = command();
    cmd.args(env.store_args()).arg("log").stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    // Closing the read end before the child writes makes its first write fail with EPIPE, as
    // `manifestdb log | head -0` would.
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&output.stderr));
    assert!(output.stderr.is_empty(), "stderr: {}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn effects_claim_lets_one_emitter_emit_and_only_it_marks() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    env.run(&["effects", "record", "-d", "daily", "-r", "r1", "-e", "notify"]).code(0);
    let claim = |who: &str, lease: &str| {
        env.json(&["effects", "claim", "-d", "daily", "-r", "r1", "-e", "notify", "--claimant", who, "--lease", lease])
    };
    let mark = |who: &str| env.json(&["effects", "mark-emitted", "-d", "daily", "-r", "r1", "-e", "notify", "--claimant", who]);
    // Not published yet: exit 5, like mark-emitted.
    claim("w1", "1m").code(5);
    env.attempt("r1", "s1", EU, 2, 700).code(0);
    env.run(&["publish", "-d", "daily", "-r", "r1"]).code(0);

    let first = claim("w1", "1m").code(0).json();
    assert_eq!(keys(&first), ["outcome", "took_over_from", "effect"]);
    assert_eq!(first["outcome"], "claimed");
    assert_eq!(first["effect"]["claim"]["claimant"], "w1");
    let second = claim("w2", "1m").code(3).json();
    assert_eq!((second["outcome"].as_str(), second["effect"]["claim"]["claimant"].as_str()), (Some("held_by_other"), Some("w1")));
    assert_eq!(mark("w2").code(3).json()["outcome"], "claimed_by_other");
    assert_eq!(mark("w1").code(0).json()["outcome"], "marked");
    // Done is not "wait": already emitted has an exit code of its own (9), held by another is 3.
    assert_eq!(claim("w2", "1m").code(9).json()["outcome"], "already_emitted");
    assert_eq!(claim("w1", "1m").code(9).json()["outcome"], "already_emitted");
    let text = env.run(&["effects", "claim", "-d", "daily", "-r", "r1", "-e", "notify", "--claimant", "w2"]);
    assert!(text.code(9).stdout.contains("already emitted"), "{}", text.stdout);
    assert_eq!(mark("w1").code(0).json()["outcome"], "already_emitted");
    env.run(&["effects", "claim", "-d", "daily", "-r", "r1", "-e", "notify", "--claimant", "w1", "--lease", "0s"]).code(2);
    // What a claimant may hold is what the help says: printable text without '/'.
    let help = env.run(&["effects", "claim", "--help"]).code(0).stdout.clone();
    assert!(help.contains("without '/'") && help.contains("exit 9"), "{help}");
    for bad in ["host/4711", "..", "", "tab\there"] {
        let refused = env.json(&["effects", "claim", "-d", "daily", "-r", "r1", "-e", "notify", "--claimant", bad]);
        refused.code(2);
        assert!(refused.error_json()["error"]["message"].as_str().unwrap().contains("claimant"), "{}", refused.stderr);
    }
}

#[test]
fn an_expired_claim_is_taken_over_through_the_cli() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    env.run(&["effects", "record", "-d", "daily", "-r", "r1", "-e", "notify"]).code(0);
    env.attempt("r1", "s1", EU, 2, 700).code(0);
    env.run(&["publish", "-d", "daily", "-r", "r1"]).code(0);
    let claim = |who: &str, lease: &str| {
        env.json(&["effects", "claim", "-d", "daily", "-r", "r1", "-e", "notify", "--claimant", who, "--lease", lease])
    };
    claim("w1", "100ms").code(0);
    std::thread::sleep(std::time::Duration::from_millis(150));
    let taken = claim("w2", "1m").code(0).json();
    assert_eq!((taken["outcome"].as_str(), taken["took_over_from"].as_str()), (Some("claimed"), Some("w1")));
}

crate::support::through_a_server!(
    run_declare_from_flags_or_json_and_identical_redeclare_is_a_no_op,
    attempt_begin_prints_number_and_private_staging_dir,
    attempt_finish_computes_sizes_and_checksums_from_the_staging_dir,
    attempt_validate_exits_0_when_valid_and_3_when_invalid,
    publish_exit_codes_distinguish_published_refused_and_error,
    show_log_and_diff_report_generations,
    effects_are_recorded_once_and_emitted_after_publish,
    stats_counts_what_the_store_holds,
    run_show_lists_attempts_and_the_accepted_one,
    a_closed_output_pipe_is_not_an_error,
    effects_claim_lets_one_emitter_emit_and_only_it_marks,
    an_expired_claim_is_taken_over_through_the_cli,
);

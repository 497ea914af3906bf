//! Refusals and errors: each maps to its documented exit code and writes nothing.

use crate::support::{Env, command, finish};

const EU: &str = "date=2026-11-29/region=eu";
const US: &str = "date=2026-11-29/region=us";

#[test]
fn publish_of_an_incomplete_run_is_refused_and_moves_no_pointer() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700), (US, 1, 5)]);
    env.attempt("r1", "s1", EU, 2, 700).code(0);
    env.attempt("r1", "s1", US, 1, 4).code(3);
    let refused = env.run(&["publish", "-d", "daily", "-r", "r1"]).code(3).stdout.clone();
    assert!(refused.contains(US) && refused.contains("no accepted attempt"), "{refused}");
    assert!(!refused.contains(&format!("{EU}:")), "only the failing task is listed: {refused}");
    let doc = env.json(&["publish", "-d", "daily", "-r", "r1"]).code(3).json();
    assert_eq!(doc["refused_tasks"][0]["attempts"][0]["status"], "invalid");
    assert_eq!(doc["refused_tasks"][0]["attempts"][0]["failures"][0]["kind"], "total_mismatch");
    // Nothing was published.
    env.run(&["show", "-d", "daily"]).code(4);
    assert_eq!(env.json(&["show"]).code(0).json()["datasets"], serde_json::json!([]));
}

#[test]
fn traversal_in_a_partition_key_is_refused_as_invalid_input() {
    let env = Env::new();
    for bad in ["../../etc:1", "a/../b:1", "/abs:1", "a//b:1"] {
        let run = env.json(&["run", "declare", "--trust-reported-figures", "-d", "daily", "-r", "r1", "--snapshot", "s", "--task", bad]);
        run.code(2);
        let error = run.error_json();
        assert_eq!((error["error"]["exit_code"].as_u64(), error["error"]["kind"].as_str()), (Some(2), Some("usage")), "{bad}");
        assert!(error["error"]["message"].as_str().is_some_and(|m| m.contains("partition key")), "{error}");
    }
    // Nothing was declared, and nothing was created outside (or inside) the staging root.
    env.run(&["run", "show", "-d", "daily", "-r", "r1"]).code(4);
    assert!(std::fs::read_dir(env.staging()).expect("staging").all(|e| e.expect("entry").file_name() == manifestdb::STAGING_ROOT_MARKER));
    assert!(!env.tmp.path().join("etc").exists());

    // The same holds for a task named on begin, and for a file path on finish.
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    env.run(&["attempt", "begin", "-d", "daily", "-r", "r1", "-p", "date=2026-11-29/../../x"]).code(2);
    env.run(&["attempt", "begin", "-d", "../daily", "-r", "r1", "-p", EU]).code(2);
    let (attempt, _) = env.begin("r1", EU);
    let stderr = env
        .run(&[
            "attempt",
            "finish",
            "-d",
            "daily",
            "-r",
            "r1",
            "-p",
            EU,
            "-a",
            &attempt.to_string(),
            "--snapshot",
            "s1",
            "--rows",
            "2",
            "--digest",
            "d",
            "--file",
            "../../store.redb",
        ])
        .code(2)
        .stderr
        .clone();
    assert!(stderr.starts_with("manifestdb: error: ") && stderr.contains("file path"), "{stderr}");
}

#[test]
fn an_unknown_run_task_or_attempt_is_not_found() {
    let env = Env::new();
    let run = env.json(&["attempt", "begin", "-d", "daily", "-r", "nope", "-p", EU]);
    run.code(4);
    let error = run.error_json();
    assert_eq!(error["error"]["kind"], "not_found");
    assert!(error["error"]["message"].as_str().is_some_and(|m| m.contains("unknown run")), "{error}");
    assert!(run.stdout.is_empty(), "errors go to stderr only");
    env.run(&["publish", "-d", "daily", "-r", "nope"]).code(4);
    env.run(&["run", "show", "-d", "daily", "-r", "nope"]).code(4);
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    env.run(&["attempt", "begin", "-d", "daily", "-r", "r1", "-p", US]).code(4);
    env.run(&["attempt", "validate", "-d", "daily", "-r", "r1", "-p", EU, "-a", "1"]).code(4);
}

#[test]
fn a_missing_store_is_not_found_and_a_missing_location_is_a_usage_error() {
    let env = Env::empty();
    for args in [
        &["show"][..],
        &["log"],
        &["stats"],
        &["run", "declare", "--trust-reported-figures", "-d", "a", "-r", "b", "--snapshot", "s", "--task", "p:1"],
    ] {
        let run = env.run(args);
        run.code(4);
        assert!(run.stderr.contains("manifestdb init"), "{}", run.stderr);
    }
    if !crate::support::on_postgres() {
        assert!(!env.db_path().exists(), "no verb but init creates a store");
    }
    let run = finish(command().arg("show"));
    run.code(2);
    assert!(run.stderr.contains("--dir"), "{}", run.stderr);
    // Writers need a staging root too; --store alone is not enough.
    let env = Env::new();
    finish(command().arg("--store").arg(env.db_path()).args([
        "run",
        "declare",
        "--trust-reported-figures",
        "-d",
        "a",
        "-r",
        "b",
        "--snapshot",
        "s",
        "--task",
        "p:1",
    ]))
    .code(2);
    // ... but readers do not, and the environment variable works as --dir does.
    finish(command().arg("--store").arg(env.db_path()).arg("stats")).code(0);
    finish(command().envs(env.store_env()).arg("stats")).code(0);
    finish(&mut command()).code(2);
}

#[test]
fn a_second_writer_is_busy_and_a_damaged_store_is_corrupt() {
    if crate::support::redb_only("redb's single-writer lock and a damaged redb file") {
        return;
    }
    let env = Env::new();
    let holder = manifestdb::Store::open(env.db_path(), env.staging()).expect("hold the store");
    let run = env.json(&["run", "declare", "--trust-reported-figures", "-d", "daily", "-r", "r1", "--snapshot", "s", "--task", "p:1"]);
    run.code(6);
    assert_eq!(run.error_json()["error"]["kind"], "busy");
    drop(holder);
    env.run(&["run", "declare", "--trust-reported-figures", "-d", "daily", "-r", "r1", "--snapshot", "s", "--task", "p:1"]).code(0);

    let garbage = Env::empty();
    std::fs::create_dir_all(garbage.staging()).expect("mkdir");
    std::fs::write(garbage.db_path(), vec![0x5a; 64 * 1024]).expect("write garbage");
    for args in
        [&["show"][..], &["log"], &["run", "declare", "--trust-reported-figures", "-d", "a", "-r", "b", "--snapshot", "s", "--task", "p:1"]]
    {
        let run = garbage.json(args);
        run.code(7);
        assert_eq!(run.error_json()["error"]["kind"], "corrupt");
        // The message says what to do, not only that the file is damaged.
        let message = run.error_json()["error"]["message"].as_str().unwrap_or_default().to_owned();
        assert!(message.contains("put back the last good copy") && message.contains("`manifestdb verify --json` lists"), "{message}");
    }
}

#[test]
fn help_documents_the_exit_codes_and_every_json_shape() {
    let help = finish(command().arg("--help")).code(0).stdout.clone();
    for code in ["0  success", "2  usage", "3  refused", "4  not found", "5  conflict", "6  busy", "7  corrupt"] {
        assert!(help.contains(code), "--help lacks {code:?}");
    }
    for verb in [
        &["init"][..],
        &["run", "declare"],
        &["run", "show"],
        &["run", "list"],
        &["attempt", "begin"],
        &["attempt", "list"],
        &["attempt", "finish"],
        &["attempt", "validate"],
        &["publish"],
        &["show"],
        &["log"],
        &["diff"],
        &["effects", "list"],
        &["effects", "record"],
        &["effects", "mark-emitted"],
        &["stats"],
        &["verify"],
        &["rollback"],
        &["attempt", "heartbeat"],
        &["gc", "abandon"],
        &["gc", "expire"],
        &["gc", "plan"],
        &["gc", "apply"],
    ] {
        let help = finish(command().args(verb).arg("--help")).code(0).stdout.clone();
        assert!(help.contains("JSON"), "{verb:?} --help does not document its JSON document");
    }
}

crate::support::through_a_server!(
    publish_of_an_incomplete_run_is_refused_and_moves_no_pointer,
    traversal_in_a_partition_key_is_refused_as_invalid_input,
    an_unknown_run_task_or_attempt_is_not_found,
);

//! Every verb through a running server: the reading and operator verbs with `--server` and no
//! store file reachable, `verify --integrity` while the server holds the store, views, and an
//! effect payload that is not UTF-8.

use std::io::Write;
use std::process::Stdio;

use crate::support::{Env, Serve, command, finish, write_rows};

const EU: &str = "date=2026-11-29/region=eu";
const US: &str = "date=2026-11-29/region=us";

/// Runs `manifestdb --server URL --json ARGS` with a `--dir` that holds no store: only the
/// server can answer.
fn elsewhere(serve: &Serve, args: &[&str]) -> crate::support::Run {
    let nowhere = tempfile::tempdir().expect("tempdir");
    let url = serve.address.to_string();
    finish(command().arg("--dir").arg(nowhere.path().join("absent")).args(["--server", url.as_str(), "--json"]).args(args))
}

#[test]
fn reading_and_operator_verbs_need_only_the_server_not_the_store_file() {
    let env = Env::new();
    env.publish_run("r1", "s1", &[(EU, 2, 700)]);
    env.publish_run("r2", "s2", &[(EU, 2, 800), (US, 1, 5)]);
    let serve = Serve::start(&env, &["--listen", "127.0.0.1:0"]);

    // The same documents as from the file (a reader beside the server reads the same store).
    for args in [
        &["show"][..],
        &["show", "-d", "daily"],
        &["show", "-d", "daily", "-g", "1"],
        &["log"],
        &["log", "-d", "daily"],
        &["diff", "-d", "daily", "1", "2"],
        &["run", "show", "-d", "daily", "-r", "r1"],
        &["run", "list", "-d", "daily"],
        &["attempt", "list", "-d", "daily", "-r", "r2", "-p", EU],
        &["effects", "list", "-d", "daily"],
        &["verify", "--checksums"],
    ] {
        let mut remote = elsewhere(&serve, args).code(0).json();
        // Over TCP the store's directory has no socket: this reads the file beside the server.
        let mut local = env.json(args).code(0).json();
        if args[0] == "attempt" {
            // The clock moves between the two runs.
            (remote["now_ms"], local["now_ms"]) = (serde_json::Value::Null, serde_json::Value::Null);
        }
        assert_eq!(remote, local, "{args:?}");
    }
    // A --server that cannot be reached is an error, never a silent fallback to the file.
    let unreachable = finish(command().arg("--dir").arg(env.dir()).args(["--server", "unix:/nonexistent/manifestdb.sock", "show"]));
    assert!(unreachable.code != 0 && unreachable.stdout.is_empty(), "{unreachable:?}");
    assert!(unreachable.stderr.contains("connecting to the server"), "{}", unreachable.stderr);
    let stats = elsewhere(&serve, &["stats"]).code(0).json();
    assert_eq!(stats["datasets"][0]["partitions"], 2);
    // Not found is exit 4 through the server as from the file.
    elsewhere(&serve, &["show", "-d", "nope"]).code(4);
    elsewhere(&serve, &["run", "show", "-d", "daily", "-r", "nope"]).code(4);
    elsewhere(&serve, &["attempt", "list", "-d", "daily", "-r", "r1", "-p", "p=none"]).code(4);
    elsewhere(&serve, &["diff", "-d", "daily", "1", "9"]).code(4);
    elsewhere(&serve, &["gc", "plan", "--show", "99"]).code(4);

    // Operator verbs: rollback (exit codes from the outcome), gc, abandon and invalidate.
    let rolled = elsewhere(&serve, &["rollback", "-d", "daily", "--to", "1", "--actor", "ops", "--reason", "bad"]).code(0).json();
    assert_eq!((rolled["outcome"].as_str(), rolled["generation"]["number"].as_u64()), (Some("rolled_back"), Some(3)));
    assert_eq!(
        elsewhere(&serve, &["rollback", "-d", "daily", "--to", "3", "--actor", "o", "--reason", "r"]).code(3).json()["refusal"]["kind"],
        "already_current"
    );
    assert_eq!(
        elsewhere(&serve, &["rollback", "-d", "daily", "--to", "9", "--actor", "o", "--reason", "r"]).code(4).json()["refusal"]["kind"],
        "unknown"
    );
    let plan = elsewhere(&serve, &["gc", "plan"]).code(0).json();
    let id = plan["plan"].to_string();
    assert_eq!(elsewhere(&serve, &["gc", "plan", "--show", &id]).code(0).json()["plan"], plan["plan"]);
    assert_eq!(elsewhere(&serve, &["gc", "apply", "--plan", &id]).code(0).json()["mode"], "dry_run");
    assert_eq!(elsewhere(&serve, &["gc", "expire", "-d", "daily"]).code(0).json()["mode"], "dry_run");
    assert_eq!(elsewhere(&serve, &["gc", "abandon"]).code(0).json()["mode"], "dry_run");

    elsewhere(
        &serve,
        &["run", "declare", "--trust-reported-figures", "-d", "daily", "-r", "r3", "--snapshot", "s3", "--task", &format!("{EU}:2:700")],
    )
    .code(0);
    let begun = elsewhere(&serve, &["attempt", "begin", "-d", "daily", "-r", "r3", "-p", EU]).code(0).json();
    let n = begun["attempt"].to_string();
    let abandoned = elsewhere(&serve, &["attempt", "abandon", "-d", "daily", "-r", "r3", "-p", EU, "-a", &n]).code(0).json();
    assert_eq!(abandoned["outcome"], "abandoned");
    elsewhere(&serve, &["attempt", "heartbeat", "-d", "daily", "-r", "r3", "-p", EU, "-a", &n]).code(5);
    // A worker on another host that describes its own files: `--scan` finds the staging
    // directory through the server (the staging root is a file system every host mounts).
    let begun = elsewhere(&serve, &["attempt", "begin", "-d", "daily", "-r", "r3", "-p", EU]).code(0).json();
    let dir = std::path::PathBuf::from(begun["staging_dir"].as_str().expect("dir"));
    write_rows(&dir, 2, 700);
    let n = begun["attempt"].to_string();
    let finished = elsewhere(
        &serve,
        &[
            "attempt",
            "finish",
            "-d",
            "daily",
            "-r",
            "r3",
            "-p",
            EU,
            "-a",
            &n,
            "--snapshot",
            "s3",
            "--rows",
            "2",
            "--total",
            "700",
            "--digest",
            "d",
            "--scan",
        ],
    )
    .code(0)
    .json();
    assert_eq!(finished["candidate"]["files"][0]["path"], "part.csv");
    elsewhere(&serve, &["attempt", "validate", "-d", "daily", "-r", "r3", "-p", EU, "-a", &n]).code(0);
    let invalidated =
        elsewhere(&serve, &["attempt", "invalidate", "-d", "daily", "-r", "r3", "-p", EU, "-a", &n, "--actor", "a", "--reason", "r"])
            .code(0)
            .json();
    assert_eq!((invalidated["outcome"].as_str(), invalidated["accepted_after"].as_u64()), (Some("invalidated"), None));
    assert_eq!(serve.stop(), 0);
    env.run(&["verify", "--checksums"]).code(0);
}

#[test]
fn verify_with_the_integrity_check_runs_through_the_server_that_holds_the_store() {
    let env = Env::new();
    env.publish_run("r1", "s1", &[(EU, 2, 700)]);
    let serve = Serve::start(&env, &[]);
    let doc = env.json(&["--wait", "0s", "verify", "--integrity", "--checksums"]).code(0).json();
    // redb's page check has no counterpart on PostgreSQL (the server owns its pages): skipped.
    let integrity = if crate::support::on_postgres() { "skipped" } else { "passed" };
    assert_eq!(
        (doc["integrity"]["status"].as_str(), doc["clean"].as_bool(), doc["files_checked"].as_u64()),
        (Some(integrity), Some(true), Some(1))
    );
    // The server serves on after the check had the store alone.
    env.declare("r2", "s2", &[(US, 1, 5)]);
    env.attempt("r2", "s2", US, 1, 5).code(0);
    let human = env.run(&["verify", "--integrity"]).code(0).stdout.clone();
    assert!(human.starts_with(&format!("redb integrity check: {integrity}")) && human.contains("no findings"), "{human}");
    drop(serve);
}

#[test]
fn views_are_shown_and_synced_through_the_server() {
    let env = Env::new();
    let views = env.tmp.path().join("views");
    // The server records the view root; every later writer keeps the views.
    let serve = Serve::start(&env, &["--views", views.to_str().unwrap(), "--view-trees", "all"]);
    env.publish_run("r1", "s1", &[(EU, 2, 700)]);
    let doc = env.json(&["view", "daily"]).code(0).json();
    assert_eq!((doc["view_generation"].as_u64(), doc["lagging"].as_bool()), (Some(1), Some(false)));
    assert_eq!(doc["manifest"]["totals"]["total"], 700);
    let text = env.run(&["view", "daily"]).code(0).stdout.clone();
    // The first line is the generation's own directory (never a path through `current`).
    assert!(text.lines().next().is_some_and(|l| l.ends_with("daily/v1")) && text.contains("generation 1 of run r1"), "{text}");
    let synced = env.json(&["view", "sync", "daily"]).code(0).json();
    assert_eq!((synced["synced"][0]["generation"].as_u64(), synced["synced"][0]["built"].as_bool()), (Some(1), Some(false)));
    env.run(&["view", "nope"]).code(4);
    drop(serve);
}

#[test]
fn an_effect_payload_that_is_not_utf8_goes_through_the_server_byte_for_byte() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    let serve = Serve::start(&env, &[]);
    let bytes: &[u8] = &[0xff, 0x00, 0xfe, b'\n', 0xc3];
    let file = env.tmp.path().join("payload.bin");
    std::fs::write(&file, bytes).unwrap();
    let recorded =
        env.json(&["effects", "record", "-d", "daily", "-r", "r1", "-e", "blob", "--payload-file", file.to_str().unwrap()]).code(0).json();
    assert_eq!(recorded["effect"]["payload"], serde_json::Value::Null, "not text");
    assert_eq!(recorded["effect"]["payload_hex"], hex::encode(bytes));
    // From stdin too, and in a batch line with payload_hex.
    let mut child = command()
        .arg("--dir")
        .arg(env.dir())
        .args(["--json", "effects", "record", "-d", "daily", "-r", "r1", "-e", "stdin", "--payload-file", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["effect"]["payload_hex"], hex::encode(bytes));
    let line =
        serde_json::json!({"op": "record_effect", "dataset": "daily", "run": "r1", "effect": "batch", "payload_hex": hex::encode(bytes)});
    let both =
        serde_json::json!({"op": "record_effect", "dataset": "daily", "run": "r1", "effect": "both", "payload": "x", "payload_hex": "00"});
    let odd = serde_json::json!({"op": "record_effect", "dataset": "daily", "run": "r1", "effect": "odd", "payload_hex": "0g"});
    let mut child = command().arg("--dir").arg(env.dir()).arg("batch").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(format!("{line}\n{both}\n{odd}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "two lines refused");
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0]["result"]["effect"]["payload_hex"], hex::encode(bytes));
    assert_eq!((lines[1]["error"]["kind"].as_str(), lines[2]["error"]["kind"].as_str()), (Some("usage"), Some("usage")));
    drop(serve);
    // The store holds the bytes themselves.
    let effects = env.json(&["effects", "list", "-d", "daily", "-r", "r1"]).code(0).json();
    let blobs: Vec<&str> = effects["effects"].as_array().unwrap().iter().filter_map(|e| e["payload_hex"].as_str()).collect();
    let expected = hex::encode(bytes);
    assert_eq!(blobs, [expected.as_str(); 3]);
}

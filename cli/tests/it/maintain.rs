//! `verify`, `rollback`, `gc` and `attempt heartbeat`.

use serde_json::json;

use crate::support::{Env, command, finish, keys};

const EU: &str = "date=2026-11-29/region=eu";
const US: &str = "date=2026-11-29/region=us";

#[test]
fn verify_is_clean_on_a_healthy_store_and_runs_beside_a_writer() {
    if crate::support::redb_only("redb's integrity check needs the redb file exclusively") {
        return;
    }
    let env = Env::new();
    env.publish_run("r1", "s1", &[(EU, 2, 700), (US, 1, 5)]);
    let doc = env.json(&["verify", "--checksums"]).code(0).json();
    assert_eq!(keys(&doc), ["clean", "integrity", "records", "records_total", "files_checked", "findings", "notes"]);
    assert_eq!((doc["clean"].as_bool(), doc["files_checked"].as_u64()), (Some(true), Some(2)));
    assert_eq!(doc["findings"], json!([]));
    assert_eq!(doc["integrity"]["status"], "skipped");

    // Read-only verify works while another process holds the store for writing; redb's own
    // check needs the store exclusively.
    let holder = manifestdb::Store::open(env.db_path(), env.staging()).expect("hold the store");
    env.run(&["verify", "--files"]).code(0);
    env.run(&["verify", "--integrity"]).code(6);
    drop(holder);
    assert_eq!(env.json(&["verify", "--integrity"]).code(0).json()["integrity"]["status"], "passed");
}

/// Issue 39, item 6: `verify --integrity` is a check: on an intact store it passes
/// and leaves the store file byte for byte as it was, with its modification time; a writer's
/// open and close of the same store does change the file (so the comparison can fail).
#[test]
fn verify_integrity_writes_nothing_to_the_store_file() {
    if crate::support::redb_only("redb's integrity check of the redb file") {
        return;
    }
    let env = Env::new();
    env.publish_run("r1", "s1", &[(EU, 2, 700), (US, 1, 5)]);
    let file = env.db_path();
    let before = std::fs::read(&file).expect("read the store");
    let modified = std::fs::metadata(&file).and_then(|m| m.modified()).expect("mtime");
    // Past the file system's timestamp granularity, so that a write would show in the mtime.
    std::thread::sleep(std::time::Duration::from_millis(20));
    for _ in 0..2 {
        let doc = env.json(&["verify", "--integrity", "--files"]).code(0).json();
        assert_eq!((doc["clean"].as_bool(), doc["integrity"]["status"].as_str()), (Some(true), Some("passed")), "{doc}");
    }
    assert!(std::fs::read(&file).expect("read the store") == before, "verify --integrity changed the store file");
    assert_eq!(std::fs::metadata(&file).and_then(|m| m.modified()).expect("mtime"), modified, "the store file's mtime");
    // The same comparison sees a writer's open and close.
    manifestdb::Store::open(&file, env.staging()).expect("open").close().expect("close");
    assert!(std::fs::read(&file).expect("read the store") != before, "a writer's open and close changed nothing");
}

#[test]
fn verify_reports_a_missing_file_with_exit_7() {
    let env = Env::new();
    env.publish_run("r1", "s1", &[(EU, 2, 700)]);
    let show = env.json(&["show", "-d", "daily"]).code(0).json();
    let file = std::path::Path::new(show["partitions"][0]["staging_dir"].as_str().expect("dir")).join("part.csv");
    env.run(&["verify"]).code(0);
    std::fs::remove_file(&file).expect("remove");
    env.run(&["verify"]).code(0);
    let doc = env.json(&["verify", "--files"]).code(7).json();
    assert_eq!(doc["clean"], false);
    assert!(doc["findings"].as_array().is_some_and(|f| !f.is_empty()), "{doc}");
}

#[test]
fn verify_and_show_on_the_committed_store_fixtures() {
    if crate::support::redb_only("committed redb file fixtures") {
        return;
    }
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = |name: &str, args: &[&str]| {
        let copy = tmp.path().join(name);
        std::fs::copy(fixtures.join(name), &copy).expect("copy fixture");
        finish(command().arg("--store").arg(&copy).arg("--json").args(args))
    };
    assert_eq!(run("good.redb", &["verify"]).code(0).json()["clean"], true);
    run("good.redb", &["show"]).code(0);
    let flipped = run("flipped-bit.redb", &["verify"]);
    flipped.code(7);
    let findings = flipped.json()["findings"].clone();
    assert!(
        findings.as_array().is_some_and(|f| f.iter().any(|f| f["message"].as_str().is_some_and(|m| m.contains("checksum")))),
        "{findings}"
    );
    for name in ["truncated.redb", "wrong-magic.redb"] {
        let run = run(name, &["verify"]);
        run.code(7);
        assert_eq!(run.error_json()["error"]["kind"], "corrupt", "{name}");
    }
    // What to do, not only what was found: verify's findings in the store's records, and a
    // verb that meets the damage.
    let copy = tmp.path().join("told.redb");
    std::fs::copy(fixtures.join("flipped-bit.redb"), &copy).expect("copy fixture");
    let verify = finish(command().arg("--store").arg(&copy).arg("verify"));
    verify.code(7);
    assert!(verify.stdout.contains("what to do: the store file is damaged") && verify.stdout.contains("put back"), "{}", verify.stdout);
    for name in ["truncated.redb", "wrong-magic.redb"] {
        let copy = tmp.path().join(format!("told-{name}"));
        std::fs::copy(fixtures.join(name), &copy).expect("copy fixture");
        let show = finish(command().arg("--store").arg(&copy).args(["show", "-d", "daily_units"]));
        show.code(7);
        assert!(show.stderr.contains("put back") && show.stderr.contains("verify --json"), "{name}: {}", show.stderr);
    }
}

#[test]
fn rollback_makes_an_earlier_generation_current_or_is_refused() {
    let env = Env::new();
    env.publish_run("r1", "s1", &[(EU, 2, 700)]);
    env.publish_run("r2", "s2", &[(EU, 2, 800), (US, 1, 5)]);
    let doc = env.json(&["rollback", "-d", "daily", "--to", "1", "--actor", "ops", "--reason", "bad input"]).code(0).json();
    assert_eq!(keys(&doc), ["dataset", "to", "outcome", "generation", "refusal"]);
    assert_eq!((doc["outcome"].as_str(), doc["generation"]["number"].as_u64()), (Some("rolled_back"), Some(3)));
    assert_eq!(doc["generation"]["kind"], "rollback");
    assert_eq!(doc["generation"]["rollback"], json!({ "restored": 1, "actor": "ops", "reason": "bad input" }));
    let show = env.json(&["show", "-d", "daily"]).code(0).json();
    assert_eq!((show["generation"]["number"].as_u64(), show["totals"]["total"].as_i64()), (Some(3), Some(700)));
    assert_eq!(show["partitions"].as_array().map(Vec::len), Some(1), "the partition only generation 2 had is gone");

    let current = env.json(&["rollback", "-d", "daily", "--to", "3", "--actor", "ops", "--reason", "x"]).code(3).json();
    assert_eq!(current["refusal"]["kind"], "already_current");
    // A generation that never existed is not found (exit 4); the refusal document says so.
    let unknown = env.json(&["rollback", "-d", "daily", "--to", "9", "--actor", "ops", "--reason", "x"]).code(4).json();
    assert_eq!(unknown["refusal"]["kind"], "unknown");
    assert_eq!(env.json(&["log", "-d", "daily"]).code(0).json()["datasets"][0]["generations"].as_array().map(Vec::len), Some(3));
}

#[test]
fn gc_plans_first_and_deletes_only_on_execute() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    env.attempt("r1", "s1", EU, 2, 600).code(3);
    env.attempt("r1", "s1", EU, 2, 700).code(0);
    env.run(&["publish", "-d", "daily", "-r", "r1"]).code(0);
    let attempts = env.json(&["run", "show", "-d", "daily", "-r", "r1"]).code(0).json();
    let staging = std::fs::canonicalize(env.staging()).expect("staging");
    let invalid_file = staging.join(attempts["tasks"][0]["attempts"][0]["staging_rel"].as_str().expect("rel")).join("part.csv");
    let accepted_file = staging.join(attempts["tasks"][0]["attempts"][1]["staging_rel"].as_str().expect("rel")).join("part.csv");

    // A threshold not above the attempt lifetime is refused unless forced.
    env.run(&["gc", "plan", "--age-threshold", "1s"]).code(2);
    let plan = env.json(&["gc", "plan", "--age-threshold", "0s", "--force-short-threshold"]).code(0).json();
    assert_eq!(
        keys(&plan),
        [
            "plan",
            "created_at_ms",
            "age_threshold_ms",
            "attempt_lifetime_max_ms",
            "candidates",
            "candidate_bytes",
            "unknown",
            "kept",
            "unconsidered"
        ]
    );
    assert_eq!(plan["candidates"].as_array().map(Vec::len), Some(1), "{plan}");
    assert_eq!(plan["candidates"][0]["reason"], "invalid");
    assert_eq!(plan["kept"]["referenced"], 1);
    let id = plan["plan"].as_u64().expect("plan id").to_string();
    assert_eq!(env.json(&["gc", "plan", "--show", &id]).code(0).json()["candidates"], plan["candidates"]);

    let dry = env.json(&["gc", "apply", "--plan", &id]).code(0).json();
    assert_eq!((dry["mode"].as_str(), dry["deleted"].as_array().map(Vec::len)), (Some("dry_run"), Some(1)));
    assert!(invalid_file.exists(), "a dry run deletes nothing");
    let done = env.json(&["gc", "apply", "--plan", &id, "--execute"]).code(0).json();
    assert_eq!(keys(&done), ["plan", "mode", "deleted", "bytes_deleted", "skipped", "directories_removed", "attempt_records_removed"]);
    assert_eq!(done["mode"], "execute");
    assert!(!invalid_file.exists() && accepted_file.exists());
    env.run(&["verify", "--checksums"]).code(0);
    env.run(&["gc", "apply", "--plan", "999"]).code(4);
}

#[test]
fn gc_expire_and_abandon_are_dry_runs_unless_executed() {
    let env = Env::empty();
    // The lease is the store's: set at creation, used by every later verb.
    env.run(&["--attempt-lifetime", "5ms", "init"]).code(0);
    for i in 1..=3 {
        env.publish_run(&format!("r{i}"), &format!("s{i}"), &[(EU, 1, i)]);
    }
    let args = ["gc", "expire", "-d", "daily", "--keep-last", "1", "--rollback-window", "0s"];
    let dry = env.json(&args).code(0).json();
    assert_eq!(keys(&dry), ["dataset", "mode", "current", "oldest_retained", "expired", "versions_removed"]);
    assert_eq!((dry["mode"].as_str(), dry["expired"].clone()), (Some("dry_run"), json!([1, 2])));
    assert_eq!(env.json(&["log", "-d", "daily"]).code(0).json()["datasets"][0]["generations"].as_array().map(Vec::len), Some(3));
    let mut execute = args.to_vec();
    execute.push("--execute");
    assert_eq!(env.json(&execute).code(0).json()["mode"], "execute");
    assert_eq!(env.json(&["log", "-d", "daily"]).code(0).json()["datasets"][0]["generations"].as_array().map(Vec::len), Some(1));
    env.run(&["show", "-d", "daily", "-g", "1"]).code(4);

    env.declare("r9", "s9", &[(US, 1, 1)]);
    let (attempt, _) = env.begin("r9", US);
    let n = attempt.to_string();
    let lease = env.json(&["attempt", "heartbeat", "-d", "daily", "-r", "r9", "-p", US, "-a", &n]).code(0).json();
    assert_eq!(keys(&lease), ["dataset", "run", "partition", "attempt", "heartbeat_at_ms", "expires_at_ms"]);
    assert!(lease["expires_at_ms"].as_u64() > lease["heartbeat_at_ms"].as_u64());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let dry = env.json(&["gc", "abandon"]).code(0).json();
    assert_eq!((dry["mode"].as_str(), dry["abandoned"][0]["attempt"].as_u64()), (Some("dry_run"), Some(u64::from(attempt))));
    env.run(&["attempt", "heartbeat", "-d", "daily", "-r", "r9", "-p", US, "-a", &n]).code(0);
    std::thread::sleep(std::time::Duration::from_millis(20));
    env.json(&["gc", "abandon", "--execute"]).code(0);
    // An abandoned attempt can neither renew its lease nor finish.
    env.run(&["attempt", "heartbeat", "-d", "daily", "-r", "r9", "-p", US, "-a", &n]).code(5);
    env.run(&["attempt", "finish", "-d", "daily", "-r", "r9", "-p", US, "-a", &n, "--snapshot", "s9", "--rows", "1", "--digest", "d"])
        .code(5);
}

#[test]
fn a_lost_file_is_refused_by_name_and_invalidation_lets_the_retry_publish() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    env.attempt("r1", "s1", EU, 2, 700).code(0);
    env.attempt("r1", "s1", EU, 2, 700).code(0);
    let show = env.json(&["run", "show", "-d", "daily", "-r", "r1"]).code(0).json();
    let first = env.staging().join(show["tasks"][0]["attempts"][0]["staging_rel"].as_str().expect("staging_rel"));
    std::fs::remove_file(first.join("part.csv")).expect("lose the file");
    let refused = env.run(&["publish", "-d", "daily", "-r", "r1"]);
    refused.code(3);
    assert!(refused.stdout.contains("part.csv") || refused.stderr.contains("part.csv"), "{} {}", refused.stdout, refused.stderr);
    let doc = env
        .json(&["attempt", "invalidate", "-d", "daily", "-r", "r1", "-p", EU, "-a", "1", "--actor", "alice", "--reason", "disk wiped"])
        .code(0)
        .json();
    assert_eq!(
        (doc["outcome"].as_str(), doc["accepted_before"].as_u64(), doc["accepted_after"].as_u64()),
        (Some("invalidated"), Some(1), Some(2))
    );
    env.run(&["publish", "-d", "daily", "-r", "r1"]).code(0);
    env.run(&["attempt", "invalidate", "-d", "daily", "-r", "r1", "-p", EU, "-a", "2", "--actor", "a", "--reason", "r"]).code(5);
}

#[test]
fn attempt_abandon_fences_one_attempt_at_once() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    let (attempt, _) = env.begin("r1", EU);
    let n = attempt.to_string();
    let doc = env.json(&["attempt", "abandon", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n]).code(0).json();
    assert_eq!(doc["outcome"], "abandoned");
    assert_eq!(
        env.json(&["attempt", "abandon", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n]).code(0).json()["outcome"],
        "already_abandoned"
    );
    env.run(&["attempt", "heartbeat", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n]).code(5);
    let show = env.json(&["run", "show", "-d", "daily", "-r", "r1"]).code(0).json();
    assert_eq!(show["tasks"][0]["attempts"][0]["status"], "abandoned", "{show}");
}

#[test]
fn a_wrong_staging_root_and_an_unbounded_lease_are_refused() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    let documents = env.dir().join("documents");
    std::fs::create_dir_all(&documents).expect("mkdir");
    std::fs::write(documents.join("thesis.txt"), "years of work").expect("write");
    for staging in [env.dir(), documents.clone()] {
        let run = finish(command().arg("--store").arg(env.db_path()).arg("--staging").arg(&staging).args(["gc", "plan"]));
        let run = &run;
        run.code(2);
        assert!(run.stderr.contains("not this store's"), "{}", run.stderr);
    }
    assert!(documents.join("thesis.txt").exists());
    env.run(&["--attempt-lifetime", "18446744073709551615ms", "gc", "abandon", "--execute"]).code(2);
    let doc = env.json(&["gc", "abandon"]).code(0).json();
    assert_eq!(doc["attempt_lifetime_max_ms"], 3_600_000, "a refused or dry-run verb never raises the lease");
}

crate::support::through_a_server!(
    verify_reports_a_missing_file_with_exit_7,
    rollback_makes_an_earlier_generation_current_or_is_refused,
    gc_plans_first_and_deletes_only_on_execute,
    a_lost_file_is_refused_by_name_and_invalidation_lets_the_retry_publish,
    attempt_abandon_fences_one_attempt_at_once,
);

#[test]
fn a_plan_applied_again_summarises_its_missing_paths() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    // An invalid attempt of 40 files: the plan deletes them all.
    let (attempt, dir) = env.begin("r1", EU);
    for i in 0..40 {
        std::fs::write(dir.join(format!("part-{i:02}.csv")), "x").expect("write");
    }
    let n = attempt.to_string();
    let finish = [
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
        "1",
        "--digest",
        "d",
        "--scan",
    ];
    env.run(&finish).code(0);
    env.run(&["attempt", "validate", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n]).code(3);
    let plan = env.json(&["gc", "plan", "--age-threshold", "0s", "--force-short-threshold"]).code(0).json();
    let id = plan["plan"].as_u64().expect("plan id").to_string();
    let first = env.run(&["gc", "apply", "--plan", &id, "--execute"]);
    assert!(first.code(0).stdout.contains("deleted 40 file"), "{}", first.stdout);
    // Again: every path is missing; a few are named and the rest counted, not 40 lines.
    let again = env.run(&["gc", "apply", "--plan", &id, "--execute"]);
    let out = again.code(0).stdout.clone();
    assert!(out.lines().count() < 10, "{out}");
    assert_eq!(out.matches("  skipped ").count(), 3, "{out}");
    assert!(out.contains("... and 37 more skipped: missing"), "{out}");
    assert!(out.contains("was it applied before?"), "{out}");
    // The JSON document still lists every path.
    let doc = env.json(&["gc", "apply", "--plan", &id]).code(0).json();
    assert_eq!(doc["skipped"].as_array().map(Vec::len), Some(40));
}

/// Issue 39, item 6: `gc apply --execute` holds the store one batch at a time, so a writer of
/// another process that waits for it (here `attempt begin`, started once the apply has deleted
/// its first files) gets in while the apply still has files to delete, not after the whole
/// apply; and the apply still deletes every planned file.
#[test]
fn gc_apply_lets_a_waiting_writer_in_between_its_batches() {
    if crate::support::redb_only("the PostgreSQL layer has no single writer to wait for") {
        return;
    }
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    // An invalid attempt of 400 files, deleted one per batch.
    let (attempt, dir) = env.begin("r1", EU);
    const FILES: usize = 400;
    for i in 0..FILES {
        std::fs::write(dir.join(format!("part-{i:03}.csv")), "x").expect("write");
    }
    let n = attempt.to_string();
    let finishing = [
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
        "1",
        "--digest",
        "d",
        "--scan",
    ];
    env.run(&finishing).code(0);
    env.run(&["attempt", "validate", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n]).code(3);
    let plan = env.json(&["gc", "plan", "--age-threshold", "0s", "--force-short-threshold"]).code(0).json();
    let id = plan["plan"].as_u64().expect("plan id").to_string();
    let remaining = || std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
    let mut apply = command()
        .args(env.store_args())
        .args(["--json", "gc", "apply", "--plan", &id, "--execute", "--batch-size", "1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start gc apply");
    while remaining() > FILES - 5 {
        assert!(apply.try_wait().expect("wait").is_none(), "the apply ended before its fifth file");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let begun = env.run(&["--wait", "60s", "attempt", "begin", "-d", "daily", "-r", "r1", "-p", EU]);
    let left = remaining();
    begun.code(0);
    let out = apply.wait_with_output().expect("gc apply");
    assert!(out.status.success(), "gc apply: {}", String::from_utf8_lossy(&out.stdout));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the apply's document");
    assert_eq!(doc["deleted"].as_array().map(Vec::len), Some(FILES), "every planned file deleted");
    assert!(left > 0, "the begin got the store only after the apply had deleted every file");
    println!("the begin got in with {left} of {FILES} files left to delete");
}

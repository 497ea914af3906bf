//! Many processes at once, without a server: writers wait for the store (`--wait`) instead of
//! failing busy, and of emitters racing to claim one effect exactly one wins.

use std::collections::BTreeSet;
use std::process::{Child, Stdio};

use crate::support::{Env, Run, command};

const EU: &str = "date=2026-11-29/region=eu";

/// Starts `manifestdb --dir <store> --json ARGS` without waiting for it.
fn spawn(env: &Env, args: &[&str]) -> Child {
    command()
        .args(env.store_args())
        .arg("--json")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the manifestdb binary")
}

fn wait(child: Child) -> Run {
    let output = child.wait_with_output().expect("wait for manifestdb");
    Run {
        code: output.status.code().expect("exited, not killed by a signal"),
        stdout: String::from_utf8(output.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 stderr"),
    }
}

#[test]
fn sixteen_parallel_writer_processes_all_succeed_by_waiting_for_the_store() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 1, 1)]);
    let children: Vec<Child> =
        (0..16).map(|_| spawn(&env, &["--wait", "60s", "attempt", "begin", "-d", "daily", "-r", "r1", "-p", EU])).collect();
    let runs: Vec<Run> = children.into_iter().map(wait).collect();
    let mut attempts = BTreeSet::new();
    for run in &runs {
        run.code(0);
        attempts.insert(run.json()["attempt"].as_u64().expect("attempt number"));
    }
    assert_eq!(attempts, (1..=16).collect::<BTreeSet<u64>>(), "16 distinct attempt numbers, none lost");
}

#[test]
fn a_writer_that_cannot_get_the_store_within_wait_fails_busy() {
    if crate::support::redb_only("redb's single-writer lock (a PostgreSQL store takes many writers)") {
        return;
    }
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 1, 1)]);
    // This process holds the store for writing while the CLI tries.
    let store = manifestdb::Store::open(env.db_path(), env.staging()).expect("open the store");
    let started = std::time::Instant::now();
    let run = env.json(&["--wait", "300ms", "attempt", "begin", "-d", "daily", "-r", "r1", "-p", EU]);
    let waited = started.elapsed();
    run.code(6);
    assert_eq!(run.error_json()["error"]["kind"], "busy");
    assert!(run.error_json()["error"]["message"].as_str().is_some_and(|m| m.contains("--wait")), "{}", run.stderr);
    assert!(waited >= std::time::Duration::from_millis(300), "gave up after {waited:?}, before --wait ran out");
    // Released within the wait, the writer proceeds.
    let child = spawn(&env, &["--wait", "30s", "attempt", "begin", "-d", "daily", "-r", "r1", "-p", EU]);
    std::thread::sleep(std::time::Duration::from_millis(200));
    store.close().expect("close the store");
    wait(child).code(0);
}

#[test]
fn of_emitter_processes_racing_to_claim_one_effect_exactly_one_gets_it() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    env.run(&["effects", "record", "-d", "daily", "-r", "r1", "-e", "notify"]).code(0);
    env.attempt("r1", "s1", EU, 2, 700).code(0);
    env.run(&["publish", "-d", "daily", "-r", "r1"]).code(0);
    let emitters = ["w1", "w2", "w3", "w4"];
    let children: Vec<Child> = emitters
        .iter()
        .map(|who| spawn(&env, &["--wait", "60s", "effects", "claim", "-d", "daily", "-r", "r1", "-e", "notify", "--claimant", who]))
        .collect();
    let runs: Vec<Run> = children.into_iter().map(wait).collect();
    let winners: Vec<&str> = emitters.iter().zip(&runs).filter(|(_, run)| run.code == 0).map(|(who, _)| *who).collect();
    assert_eq!(winners.len(), 1, "{runs:?}");
    for run in runs.iter().filter(|run| run.code != 0) {
        run.code(3);
        let doc = run.json();
        assert_eq!((doc["outcome"].as_str(), doc["effect"]["claim"]["claimant"].as_str()), (Some("held_by_other"), Some(winners[0])));
    }
    let stored = env.json(&["effects", "list", "-d", "daily", "-r", "r1"]).code(0).json();
    assert_eq!(stored["effects"][0]["claim"]["claimant"], winners[0]);
}

/// The store's writable open, its close and the output document, in trace order: files are
/// read before the writable open, and the document is written after its close.
#[track_caller]
fn assert_files_read_before_writing_and_output_after_close(trace: &str, file: &str) {
    let lines: Vec<&str> = trace.lines().collect();
    let position = |what: &str, pred: &dyn Fn(&str) -> bool| {
        lines.iter().position(|l| pred(l)).unwrap_or_else(|| panic!("no {what} in the trace:\n{trace}"))
    };
    let file_read = position("open of the staging file", &|l| l.contains("openat(") && l.contains(&format!("\"{file}\"")));
    let writer_open = position("writable open of the store", &|l| l.contains("store.redb\", O_RDWR"));
    let fd = lines[writer_open].rsplit("= ").next().map(str::trim).expect("the open's result");
    let writer_close =
        writer_open + lines[writer_open..].iter().position(|l| l.contains(&format!("close({fd})"))).expect("the writable store is closed");
    let output = position("output document", &|l| l.contains("write(") && l.contains(r#""{\n  \"dataset\""#));
    assert!(file_read < writer_open, "the staging file was read after the store was opened for writing:\n{trace}");
    assert!(writer_close < output, "the output was written while the store was still open for writing:\n{trace}");
}

fn under_strace(env: &Env, trace: &std::path::Path, args: &[&str]) -> Run {
    let mut cmd = std::process::Command::new("strace");
    cmd.args(["-f", "-qq", "-s", "64", "-o"]).arg(trace).arg("-etrace=openat,close,write");
    for var in ["MANIFESTDB_DIR", "MANIFESTDB_STORE", "MANIFESTDB_STAGING", "MANIFESTDB_WAIT"] {
        cmd.env_remove(var);
    }
    cmd.arg(crate::support::BIN).args(env.store_args()).arg("--json").args(args);
    crate::support::finish(&mut cmd)
}

#[test]
fn checksums_are_computed_before_the_store_is_opened_for_writing_and_output_follows_its_close() {
    if crate::support::redb_only("traces the writable open of the redb file") {
        return;
    }
    if !std::process::Command::new("strace").arg("-V").output().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: strace is not installed");
        return;
    }
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    let (attempt, dir) = env.begin("r1", EU);
    crate::support::write_rows(&dir, 2, 700);
    let n = attempt.to_string();
    let task = ["-d", "daily", "-r", "r1", "-p", EU, "-a", &n];
    let trace = env.tmp.path().join("trace");
    let mut finish = vec!["attempt", "finish"];
    finish.extend(task);
    finish.extend(["--snapshot", "s1", "--rows", "2", "--total", "700", "--digest", "d", "--scan"]);
    under_strace(&env, &trace, &finish).code(0);
    assert_files_read_before_writing_and_output_after_close(&std::fs::read_to_string(&trace).unwrap(), "part.csv");
    let mut validate = vec!["attempt", "validate"];
    validate.extend(task);
    validate.push("--checksums");
    under_strace(&env, &trace, &validate).code(0);
    assert_files_read_before_writing_and_output_after_close(&std::fs::read_to_string(&trace).unwrap(), "part.csv");
}

crate::support::through_a_server!(of_emitter_processes_racing_to_claim_one_effect_exactly_one_gets_it);

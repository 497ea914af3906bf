//! No swallowed fsync error, on the built binary under strace fault injection (skipped, with a
//! message, where strace is not installed; `.ci/run` installs it):
//!
//! - `init` fails whenever any one of its `fsync`/`fdatasync` calls fails (redb's syncs of the
//!   temporary store file and its close included) and then never reports `"created": true`;
//! - `publish` fails whenever any one of its syncs fails, the close's included, and prints no
//!   success document;
//! - a failed write of the result to stdout leaves no success document to be flushed later;
//! - a batch of begins syncs no staging directory (and never the whole file system): validation
//!   makes a candidate's directories durable;
//! - `attempt validate` syncs the candidate's file and every directory from the attempt's up to
//!   the staging root, each once, before the store file is written with its verdict;
//! - a batch's begins make every directory with `mkdirat` in a directory handle, reaching their
//!   run's directory once, the task directories on a thread beside the write's.

use std::path::Path;
use std::process::Command;

use crate::support::{BIN, Env, Run, finish};

fn strace_available() -> bool {
    let found = Command::new("strace").arg("-V").output().is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: strace is not installed");
    }
    found
}

/// Runs the binary under strace with `inject` (strace's `-e inject=` argument, if any), the
/// trace of `syscalls` written to `trace`.
fn under_strace(trace: &Path, syscalls: &str, inject: Option<String>, args: &[&str]) -> Run {
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-qq", "-o"]).arg(trace).arg(format!("-etrace={syscalls}"));
    if let Some(inject) = inject {
        cmd.arg(format!("-einject={inject}"));
    }
    for var in ["MANIFESTDB_DIR", "MANIFESTDB_STORE", "MANIFESTDB_STAGING"] {
        cmd.env_remove(var);
    }
    cmd.arg(BIN).args(args);
    finish(&mut cmd)
}

/// How many calls of `syscall` the trace file shows.
fn calls(trace: &Path, syscall: &str) -> usize {
    std::fs::read_to_string(trace).unwrap().lines().filter(|l| l.contains(&format!("{syscall}("))).count()
}

#[test]
fn init_fails_whenever_one_of_its_syncs_fails() {
    if crate::support::redb_only("fails each fsync of creating a redb store file (the server syncs a PostgreSQL store)") {
        return;
    }
    if !strace_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace");
    let dir = tmp.path().join("clean").join("store");
    let clean = under_strace(&trace, "fsync,fdatasync", None, &["--json", "--dir", dir.to_str().unwrap(), "init"]);
    clean.code(0);
    let mut injected = 0;
    for syscall in ["fsync", "fdatasync"] {
        let n = calls(&trace, syscall);
        assert!(n > 0, "init makes {syscall} calls");
        for k in 1..=n {
            let dir = tmp.path().join(format!("{syscall}-{k}")).join("store");
            let run = under_strace(
                &tmp.path().join("trace-k"),
                "fsync,fdatasync",
                Some(format!("{syscall}:error=EIO:when={k}")),
                &["--json", "--dir", dir.to_str().unwrap(), "init"],
            );
            assert_ne!(run.code, 0, "{syscall} #{k} failed with EIO, yet init exited 0: {}", run.stdout);
            assert!(!run.stdout.contains("\"created\""), "no success document after a failed {syscall} #{k}: {}", run.stdout);
            injected += 1;
        }
    }
    println!("init: {injected} injected sync failures, each one an error");
}

/// A store with run r1 of `daily` ready to publish.
fn ready_to_publish() -> Env {
    let env = Env::new();
    env.declare("r1", "s1", &[("p=a", 2, 10)]);
    env.attempt("r1", "s1", "p=a", 2, 10).code(0);
    env
}

fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp").arg("-a").arg(from).arg(to).status().unwrap();
    assert!(status.success());
}

#[test]
fn publish_fails_whenever_one_of_its_syncs_fails_and_prints_no_success() {
    if crate::support::redb_only("fails each fsync of a redb commit (the server syncs a PostgreSQL store)") {
        return;
    }
    if !strace_available() {
        return;
    }
    let env = ready_to_publish();
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace");
    let probe = tmp.path().join("probe");
    copy_dir(&env.dir(), &probe);
    under_strace(&trace, "fsync,fdatasync", None, &["--json", "--dir", probe.to_str().unwrap(), "publish", "-d", "daily", "-r", "r1"])
        .code(0);
    let n = calls(&trace, "fdatasync");
    assert!(n >= 3, "a publish commits (two syncs) and closes: {n}");
    for k in 1..=n {
        let dir = tmp.path().join(format!("k{k}"));
        copy_dir(&env.dir(), &dir);
        let run = under_strace(
            &tmp.path().join("trace-k"),
            "fsync,fdatasync",
            Some(format!("fdatasync:error=EIO:when={k}")),
            &["--json", "--dir", dir.to_str().unwrap(), "publish", "-d", "daily", "-r", "r1"],
        );
        assert_ne!(run.code, 0, "fdatasync #{k} of {n} failed with EIO, yet publish exited 0: {}", run.stdout);
        assert!(run.stdout.is_empty(), "no success document after a failed fdatasync #{k}: {}", run.stdout);
        // Whatever was committed is durable and the store opens again (recovered on open).
        let after = finish(crate::support::command().arg("--json").arg("--dir").arg(&dir).args(["show", "-d", "daily"]));
        assert!(after.code == 0 || after.code == 4, "the store reads after fdatasync #{k} failed: {after:?}");
    }
    println!("publish: {n} injected fdatasync failures, each one an error with no success document");
}

#[test]
fn a_failed_write_of_the_result_leaves_no_success_document_behind() {
    if crate::support::redb_only("copies the redb store directory") {
        return;
    }
    if !strace_available() {
        return;
    }
    let env = ready_to_publish();
    let tmp = tempfile::tempdir().unwrap();
    // The first write(2) of the process is the result's; it fails once, and nothing may write
    // the document again later (a buffer flushed at exit would).
    let run = under_strace(
        &tmp.path().join("trace"),
        "write",
        Some("write:error=EIO:when=1".to_owned()),
        &["--json", "--dir", env.dir().to_str().unwrap(), "publish", "-d", "daily", "-r", "r1"],
    );
    assert_ne!(run.code, 0, "a failed write of the result is an error");
    assert!(run.stdout.is_empty(), "the success document was written after all: {}", run.stdout);
    // The publish itself committed before the output was written, and its retry says so.
    let again = env.json(&["publish", "-d", "daily", "-r", "r1"]).code(0).json();
    assert_eq!(again["outcome"], "already_published");
}

/// Runs `manifestdb --dir DIR batch` on `input` under strace (`-y`: descriptors with their
/// paths), tracing `syscalls`, with `inject` if any; gives the run and the trace's lines.
fn batch_under_strace(env: &Env, syscalls: &str, inject: Option<&str>, input: &str) -> (Run, String) {
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace");
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-qq", "-y"]).arg(format!("-etrace={syscalls}")).arg("-o").arg(&trace);
    if let Some(inject) = inject {
        cmd.arg(format!("-einject={inject}"));
    }
    let mut child = cmd
        .arg(BIN)
        .args(env.store_args())
        .arg("batch")
        .env_remove("MANIFESTDB_DIR")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let run = Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    };
    (run, std::fs::read_to_string(&trace).unwrap())
}

/// The path strace `-y` prints for a call's first descriptor: `fsync(5</tmp/.../staging/x>)`.
fn traced_path(line: &str) -> &str {
    line.split_once('<').and_then(|(_, rest)| rest.split_once('>')).map(|(path, _)| path).unwrap_or(line)
}

/// Declares run `r1` of 40 partitions in `env` and gives a batch's input beginning each one.
fn forty_new_partition_begins(env: &Env) -> String {
    let partitions: Vec<String> = (0..40).map(|i| format!("p={i:03}")).collect();
    let tasks: Vec<(&str, u64, i64)> = partitions.iter().map(|p| (p.as_str(), 1, 1)).collect();
    env.declare("r1", "s1", &tasks);
    partitions
        .iter()
        .map(|p| serde_json::json!({"op": "begin", "dataset": "daily", "run": "r1", "partition": p}).to_string() + "\n")
        .collect()
}

#[test]
fn a_batch_of_begins_syncs_no_staging_directory_and_never_the_file_system() {
    if !strace_available() {
        return;
    }
    let env = Env::new();
    let input = forty_new_partition_begins(&env);
    let (run, trace) = batch_under_strace(&env, "fsync,fdatasync,syncfs,sync", None, &input);
    run.code(0);
    assert_eq!(run.stdout.lines().filter(|l| l.contains("\"ok\":true")).count(), 40, "{}", run.stdout);
    assert!(!trace.contains("syncfs(") && !trace.contains("sync()"), "no file-system sync: {trace}");
    let staging_syncs: Vec<&str> = trace.lines().filter(|l| traced_path(l).contains("/staging")).collect();
    assert!(staging_syncs.is_empty(), "no staging sync: {staging_syncs:?}");
}

/// Each begin of a batch of new partitions of one run: one `mkdirat` of its task's directory
/// in the run directory's handle before the write, and in the write one `openat` of that
/// directory and one `mkdirat` of the attempt's; the run directory is reached once for
/// the batch, and nothing below the root is created or inspected by path (no `mkdir`, `statx`
/// or `newfstatat` of a staging path, each of which resolves the whole path again).
#[test]
fn a_batch_of_begins_makes_every_directory_in_a_handle_and_reaches_its_run_directory_once() {
    if !strace_available() {
        return;
    }
    let env = Env::new();
    let input = forty_new_partition_begins(&env);
    let (run, trace) = batch_under_strace(&env, "mkdir,mkdirat,openat,open,statx,newfstatat,stat,lstat,fstat", None, &input);
    run.code(0);
    assert_eq!(run.stdout.lines().filter(|l| l.contains("\"ok\":true")).count(), 40, "{}", run.stdout);
    let staging = env.staging().display().to_string();
    let below_root = format!("{staging}/");
    let lines: Vec<&str> = trace.lines().filter(|l| l.contains(&below_root)).collect();
    // `PID call(args) = result`: the call's name, and whether its first argument is a path.
    let call =
        |line: &str| line.split_whitespace().nth(1).and_then(|c| c.split_once('(')).map(|(name, args)| (name.to_owned(), args.to_owned()));
    let by_path: Vec<&&str> = lines
        .iter()
        .filter(|l| {
            call(l).is_some_and(|(name, args)| {
                ["mkdir", "stat", "lstat", "open"].contains(&name.as_str())
                    || (["statx", "newfstatat", "openat", "mkdirat"].contains(&name.as_str()) && args.starts_with("AT_FDCWD"))
            })
        })
        .collect();
    assert!(by_path.is_empty(), "nothing below the root by path: {by_path:#?}");
    let run_dir = format!("<{staging}/daily/r1>");
    let count = |call: &str, within: &str| lines.iter().filter(|l| l.contains(call) && l.contains(within)).count();
    assert_eq!(count("mkdirat(", &format!("{run_dir}, \"p=")), 40, "each task's directory made in the run's handle");
    assert_eq!(count("openat(", &format!("{run_dir}, \"p=")), 40, "and opened from it once, in the write");
    assert_eq!(count("mkdirat(", "\"@attempt-1\""), 40, "each attempt's directory made in its task's handle");
    let run_opens = lines.iter().filter(|l| l.contains("openat(") && l.contains(", \"r1\"") && !l.contains("ENOENT")).count();
    assert_eq!(run_opens, 1, "the run directory is opened once for the batch");
    // The task directories are made on a thread of their own, beside the write's thread that
    // makes the attempts' directories (`-f` prints each call's thread id first).
    let threads = |within: &str| -> std::collections::BTreeSet<&str> {
        lines.iter().filter(|l| l.contains("mkdirat(") && l.contains(within)).filter_map(|l| l.split_whitespace().next()).collect()
    };
    let (makers, writers) = (threads(&format!("{run_dir}, \"p=")), threads("\"@attempt-1\""));
    assert_eq!((makers.len(), writers.len()), (1, 1), "one thread each: {makers:?} {writers:?}");
    assert!(makers.is_disjoint(&writers), "the task directories are made beside the write: {makers:?} {writers:?}");
}

#[test]
fn validate_syncs_the_file_and_every_directory_up_to_the_root_once_before_writing_the_verdict() {
    if crate::support::redb_only("orders the syncs before the writes of a redb store file") {
        return;
    }
    if !strace_available() {
        return;
    }
    let env = Env::new();
    let partition = "date=2026-11-29/region=eu";
    env.declare("r1", "s1", &[(partition, 2, 700)]);
    let (attempt, dir) = env.begin("r1", partition);
    let attempt = attempt.to_string();
    crate::support::write_rows(&dir, 2, 700);
    let finish_args = ["attempt", "finish", "-d", "daily", "-r", "r1", "-p", partition, "-a", &attempt, "--snapshot", "s1"];
    env.run(&[&finish_args[..], &["--rows", "2", "--total", "700", "--digest", "sha256:00", "--scan"]].concat()).code(0);
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace");
    let mut args: Vec<String> = vec!["--json".into()];
    args.extend(env.store_args().iter().map(|a| a.to_string_lossy().into_owned()));
    args.extend(["attempt", "validate", "-d", "daily", "-r", "r1", "-p", partition, "-a", &attempt].map(String::from));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-qq", "-y", "-etrace=fsync,fdatasync,pwrite64,write", "-o"]).arg(&trace).arg(BIN).args(&refs);
    for var in ["MANIFESTDB_DIR", "MANIFESTDB_STORE", "MANIFESTDB_STAGING"] {
        cmd.env_remove(var);
    }
    let run = finish(&mut cmd);
    run.code(0);
    assert!(run.stdout.contains("valid"), "{}", run.stdout);
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let first_store_write = lines
        .iter()
        .position(|l| (l.contains("pwrite64(") || l.contains(" write(")) && traced_path(l).ends_with(".redb"))
        .expect("the verdict is written to the store file");
    let staging = env.staging().canonicalize().unwrap();
    let file = dir.canonicalize().unwrap().join("part.csv");
    let synced_before = |call: &str, path: &Path| {
        lines[..first_store_write].iter().filter(|l| l.contains(call) && Path::new(traced_path(l)) == path).count()
    };
    assert_eq!(synced_before("fdatasync(", &file), 1, "the file, once, before the verdict: {text}");
    let mut at = file.parent().unwrap().to_path_buf();
    loop {
        assert_eq!(synced_before("fsync(", &at), 1, "{} synced once before the verdict is written: {text}", at.display());
        if at == staging {
            break;
        }
        at = at.parent().unwrap().to_path_buf();
    }
}

//! Kill test at the process level: a child process (this test binary, re-invoked on the
//! ignored `kill::child_publishes_until_killed` test) opens a file-backed store and publishes
//! run after run, printing `ACK <generation> <run>` after each acknowledged publish. The parent
//! SIGKILLs it at random moments, reopens the store, and checks that no acknowledged generation
//! is lost and that verify (redb's check, every record, references, files) is clean; then it
//! starts the next child on the same store.
//!
//! 50 kills by default; `MANIFESTDB_KILLS=1000` for a long run. Some kills land during the
//! store's creation (the first child, and children started on a fresh directory), which must
//! never leave a store file that fails to open.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use manifestdb::{FileCheck, PublishOptions, PublishOutcome, ReadOnlyStore, Store, TaskKey, VerifyOptions};

use crate::support::{candidate, run_spec, write_rows};

const CHILD_ENV: &str = "MANIFESTDB_KILL_CHILD_DIR";
const DATASET: &str = "killed_units";

fn partitions(run: u64) -> Vec<(String, u64, i64)> {
    // Each run replaces two of five partitions, so generations carry partitions over.
    (0..2).map(|i| (format!("p={}", (run + i) % 5), 3 + i, 100 + run as i64)).collect()
}

/// The child's workload: publish runs forever, acknowledging each on stdout.
#[test]
#[ignore = "the kill test's child process; does nothing unless started by it"]
fn child_publishes_until_killed() {
    let Some(dir) = std::env::var_os(CHILD_ENV).map(PathBuf::from) else { return };
    let store = Store::open(dir.join("store.redb"), dir.join("staging")).expect("child opens the store");
    println!("OPEN");
    let mut next = store.snapshot().unwrap().current(DATASET).unwrap().map_or(1, |g| g.number + 1);
    for _ in 0..100_000 {
        let run = format!("run-{next}");
        let tasks = partitions(next);
        let specs: Vec<(&str, u64, i64)> = tasks.iter().map(|(p, r, t)| (p.as_str(), *r, *t)).collect();
        let snapshot = format!("input@{next}");
        store.declare_run(&run_spec(DATASET, &run, &snapshot, &specs)).unwrap();
        for (partition, rows, total) in &tasks {
            let task = TaskKey::new(DATASET, &run, partition);
            let ticket = store.begin_attempt(&task).unwrap();
            let file = write_rows(&ticket.staging_dir, *rows, *total);
            store.finish_attempt(&ticket.key, &candidate(&snapshot, *rows, *total, file)).unwrap();
            store.validate_attempt(&ticket.key, FileCheck::Size).unwrap();
        }
        match store.publish(DATASET, &run, &PublishOptions::default()).unwrap() {
            PublishOutcome::Published(g) | PublishOutcome::AlreadyPublished(g) => {
                println!("ACK {} {}", g.number, g.run);
                next = g.number + 1;
            }
            PublishOutcome::Refused(r) => panic!("refused: {r}"),
        }
    }
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Starts a child on `dir`, kills it after `delay`, and returns the acknowledgements it printed
/// and whether it had opened the store.
fn run_and_kill(dir: &Path, delay: Duration) -> (Vec<(u64, String)>, bool) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "kill::child_publishes_until_killed", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the child");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut lines = Vec::new();
    while start.elapsed() < delay {
        match rx.recv_timeout(delay.saturating_sub(start.elapsed())) {
            Ok(line) => lines.push(line),
            Err(mpsc::RecvTimeoutError::Timeout) => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if let Some(status) = child.try_wait().unwrap() {
        panic!("the child exited by itself ({status}) instead of being killed; its output: {lines:?}");
    }
    child.kill().expect("SIGKILL the child");
    child.wait().unwrap();
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    // libtest may print "test <name> ... " on the same line before the child's first output.
    let opened = lines.iter().any(|l| l.ends_with("OPEN"));
    let acks = lines
        .iter()
        .filter_map(|l| l.split_once("ACK ").map(|(_, rest)| rest))
        .map(|rest| {
            let (number, run) = rest.split_once(' ').unwrap();
            (number.parse().unwrap(), run.to_owned())
        })
        .collect();
    (acks, opened)
}

#[test]
fn sigkilled_publishers_lose_no_acknowledged_generation_and_leave_a_store_that_verifies() {
    if crate::support::redb_only(
        "SIGKILL of a redb writer, redb recovery and redb file creation (the PostgreSQL layer's kill test is pg_faults::sigkilled_coordinators_lose_nothing_acknowledged)",
    ) {
        return;
    }
    let kills: u64 = std::env::var("MANIFESTDB_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    let mut rng = Rng(seed);
    let base = tempfile::tempdir().unwrap();
    let mut dir = base.path().join("store-0");
    let mut acknowledged: Vec<(u64, String)> = Vec::new();
    let (mut lost, mut integrity_failures, mut during_creation, mut fresh_dirs, mut acks_total) = (0u64, 0u64, 0u64, 0u64, 0u64);
    for kill in 0..kills {
        // Every tenth kill starts on a fresh directory with a very short delay, aiming at the
        // store's creation.
        let fresh = kill % 10 == 9;
        if fresh {
            fresh_dirs += 1;
            dir = base.path().join(format!("store-{kill}"));
            acknowledged.clear();
        }
        let delay = Duration::from_millis(if fresh { rng.below(15) } else { 5 + rng.below(250) });
        let (acks, opened) = run_and_kill(&dir, delay);
        during_creation += u64::from(!opened);
        acks_total += acks.len() as u64;
        acknowledged.extend(acks);

        let mut store = match Store::open(dir.join("store.redb"), dir.join("staging")) {
            Ok(store) => store,
            Err(e) => panic!("kill {kill} (seed {seed}): the store does not reopen: {e}"),
        };
        let report = store.verify(&VerifyOptions { files: Some(FileCheck::Size), ..VerifyOptions::default() }).unwrap();
        if !report.is_clean() {
            integrity_failures += 1;
            eprintln!("kill {kill} (seed {seed}): {report}");
        }
        let history = store.snapshot().unwrap().history(DATASET).unwrap();
        for (number, run) in &acknowledged {
            if !history.iter().any(|g| g.number == *number && g.run == *run) {
                lost += 1;
                eprintln!("kill {kill} (seed {seed}): acknowledged generation {number} ({run}) is lost");
            }
        }
        drop(store);
    }
    println!(
        "kills survived: {kills} (seed {seed}; {during_creation} before the child had opened the store, {fresh_dirs} on fresh \
         directories); acknowledged publishes checked: {acks_total}; acknowledged generations lost: {lost}; \
         integrity failures: {integrity_failures}"
    );
    assert!(acks_total > 0 && during_creation < kills, "the children got to publish");
    assert_eq!((lost, integrity_failures), (0, 0));
}

/// Kills children during the store's first creation, on a fresh directory each time, and checks
/// the file left behind: either no store file (the next open creates it) or a complete store
/// that opens read-only, verifies clean and takes writes. Temporary files of an interrupted
/// creation are ignored.
#[test]
fn sigkill_during_store_creation_never_leaves_a_store_that_fails_to_open() {
    if crate::support::redb_only("crash-safe creation of the redb file") {
        return;
    }
    let kills: u64 = std::env::var("MANIFESTDB_CREATE_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(25);
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    let mut rng = Rng(seed);
    let base = tempfile::tempdir().unwrap();
    let (mut no_file, mut complete, mut leftovers) = (0u64, 0u64, 0u64);
    for kill in 0..kills {
        let dir = base.path().join(format!("store-{kill}"));
        let (_, _) = run_and_kill(&dir, Duration::from_millis(rng.below(12)));
        let path = dir.join("store.redb");
        leftovers += std::fs::read_dir(&dir).map_or(0, |entries| {
            entries.filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().contains(".creating-"))).count() as u64
        });
        if path.exists() {
            complete += 1
        } else {
            no_file += 1
        }
        // A writer killed after the creation leaves a file that needs redb's recovery, which
        // only a writable open performs; after it, readers open it too.
        let mut store = Store::open(&path, dir.join("staging"))
            .unwrap_or_else(|e| panic!("kill {kill} (seed {seed}): the store file does not open: {e}"));
        let report = store.verify(&VerifyOptions::default()).unwrap();
        assert!(report.is_clean(), "kill {kill} (seed {seed}): {report}");
        store.declare_run(&run_spec("created_units", "run-1", "input@1", &[("p=0", 1, 1)])).unwrap();
        drop(store);
        ReadOnlyStore::open(&path).unwrap_or_else(|e| panic!("kill {kill} (seed {seed}): read-only open after recovery: {e}"));
    }
    println!(
        "creation kills: {kills} (seed {seed}): {no_file} left no store file, {complete} a complete store, {leftovers} leftover \
         temporary file(s) ignored; 0 stores failed to open"
    );
}

#[test]
fn leftover_temporary_files_of_an_interrupted_creation_are_ignored() {
    if crate::support::redb_only("temporary files of the redb file's creation") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(crate::support::repo_root().join("tests/fixtures/good.redb")).unwrap();
    // An empty file, half a store and a whole one, as a creation killed at various points leaves.
    std::fs::write(dir.path().join(".store.redb.creating-1-1"), b"").unwrap();
    std::fs::write(dir.path().join(".store.redb.creating-2-2"), &good[..good.len() / 2]).unwrap();
    std::fs::write(dir.path().join(".store.redb.creating-3-3"), &good).unwrap();
    let mut store = Store::open(dir.path().join("store.redb"), dir.path().join("staging")).unwrap();
    assert!(store.snapshot().unwrap().current(DATASET).unwrap().is_none(), "a new, empty store, not a leftover");
    assert!(store.verify(&VerifyOptions::default()).unwrap().is_clean());
    assert_eq!(std::fs::read(dir.path().join(".store.redb.creating-2-2")).unwrap(), &good[..good.len() / 2], "left untouched");
}

const READER_ENV: &str = "MANIFESTDB_KILL_READER_STORE";

/// The reader process: opens the store read-only and prints its current generation.
#[test]
#[ignore = "the reader process of the kill tests; does nothing unless started by them"]
fn child_reads_the_current_generation() {
    let Some(path) = std::env::var_os(READER_ENV).map(PathBuf::from) else { return };
    match ReadOnlyStore::open(&path).and_then(|store| store.snapshot()?.current(DATASET)) {
        Ok(current) => println!("CURRENT {}", current.map_or(0, |g| g.number)),
        Err(err) => println!("ERROR {err}"),
    }
}

/// Runs the reader process on `path` (as another user with `as_user`) and returns its line.
fn read_in_another_process(path: &Path, as_user: Option<&str>) -> String {
    let exe = std::env::current_exe().unwrap();
    let args = ["--exact", "kill::child_reads_the_current_generation", "--ignored", "--nocapture", "--test-threads=1"];
    let mut command = match as_user {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.args([&format!("--reuid={uid}"), &format!("--regid={uid}"), "--clear-groups", "--"]).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    let output = command.args(args).env(READER_ENV, path).stderr(Stdio::null()).output().expect("start the reader");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    stdout
        .lines()
        .find_map(|l| l.find("CURRENT ").or_else(|| l.find("ERROR ")).map(|i| l[i..].to_owned()))
        .unwrap_or_else(|| panic!("the reader printed nothing useful ({}): {stdout}", output.status))
}

/// Kills publishing children until one had opened the store and acknowledged a publish;
/// returns the last acknowledged generation.
fn kill_a_publishing_writer(dir: &Path) -> u64 {
    for _ in 0..20 {
        let (acks, was_open) = run_and_kill(dir, Duration::from_millis(600));
        if was_open && !acks.is_empty() {
            return acks.last().unwrap().0;
        }
    }
    panic!("the child never acknowledged a publish");
}

#[test]
fn a_reader_process_reads_the_last_committed_generation_after_its_writer_was_killed() {
    if crate::support::redb_only("redb recovery of a killed writer's file by a reader") {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("store");
    let path = dir.join("store.redb");
    for round in 0..3 {
        let acked = kill_a_publishing_writer(&dir);
        // No writer holds the store now, and its writer died with the file open: the reader
        // recovers it (briefly taking the writer lock) and reads the last committed generation.
        let line = read_in_another_process(&path, None);
        let current: u64 = line.strip_prefix("CURRENT ").unwrap_or_else(|| panic!("round {round}: {line}")).parse().unwrap();
        assert!(current == acked || current == acked + 1, "round {round}: acknowledged {acked}, the reader read {current}");
        // The reader released the store: a writer opens it at once and sees the same generation.
        let store = Store::open(&path, dir.join("staging")).unwrap();
        assert_eq!(store.snapshot().unwrap().current(DATASET).unwrap().map_or(0, |g| g.number), current);
    }
}

#[test]
fn a_reader_that_may_not_write_a_crashed_store_is_told_which_command_recovers_it() {
    if crate::support::redb_only("redb recovery needs write access to the file") {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("store");
    let path = dir.join("store.redb");
    let acked = kill_a_publishing_writer(&dir);
    use std::os::unix::fs::PermissionsExt;
    // Readable by everyone, writable by nobody but its owner (and root, who ignores modes).
    for p in [base.path(), dir.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    let euid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap());
    let as_user = if euid == 0 {
        if Command::new("setpriv").arg("--version").output().is_err() {
            eprintln!("skipped: running as root without setpriv, so no reader lacks write access");
            return;
        }
        Some("65534")
    } else {
        None
    };
    let line = read_in_another_process(&path, as_user);
    assert!(line.starts_with("ERROR "), "{line}");
    assert!(line.contains(&format!("manifestdb recover --store {}", path.display())), "names the command: {line}");
    assert!(line.contains("writer crashed"), "{line}");
    // The owner runs what the message says; then the reader reads.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(Store::recover(&path).unwrap(), "the store needed recovery");
    assert!(!Store::recover(&path).unwrap(), "once recovered, nothing to do");
    let line = read_in_another_process(&path, as_user);
    let current: u64 = line.strip_prefix("CURRENT ").unwrap_or_else(|| panic!("{line}")).parse().unwrap();
    assert!(current == acked || current == acked + 1, "acknowledged {acked}, read {current}");
}

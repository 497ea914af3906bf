//! Several coordinator processes against one PostgreSQL store, and faults between them and the
//! server: SIGKILLed coordinators, an immediate restart of the server under load, and a TCP proxy
//! that drops the reply to COMMIT or stops forwarding.
//!
//! Every test here needs a PostgreSQL server (`MANIFESTDB_TEST_POSTGRES`, an admin URL); without
//! one it says loudly that it was skipped (and fails with `CI=true`). Each test makes its own
//! database. The processes are this test binary, re-invoked on the ignored `pg::child::run`
//! (see [`child`]): real processes, each with its own `Store` and connections.
//!
//! Longer runs: `MANIFESTDB_PG_TORTURE=1` multiplies the rounds of every fault test (kills,
//! restarts, proxy faults) by 10.

pub mod child;
mod faults;
mod multi;
pub mod proxy;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use manifestdb::{FileCheck, Generation, PublishOptions, PublishOutcome, Store, TaskKey, VerifyOptions};

use crate::support::{PgDatabase, candidate, postgres_admin, run_spec, write_rows};

/// How many times the default rounds of the fault tests run (`MANIFESTDB_PG_TORTURE=1`: 10).
pub fn torture() -> u64 {
    if std::env::var_os("MANIFESTDB_PG_TORTURE").is_some_and(|v| !v.is_empty() && v != "0") { 10 } else { 1 }
}

/// A fresh database and a staging root shared by every process of a test.
pub struct PgEnv {
    pub staging: tempfile::TempDir,
    pub db: PgDatabase,
}

impl PgEnv {
    /// A fresh database on the test server, or None (the test returns: skipped, said loudly).
    pub fn new() -> Option<PgEnv> {
        let admin = postgres_admin()?;
        Some(PgEnv::on(&admin))
    }

    /// A fresh database on the server at `admin`.
    pub fn on(admin: &str) -> PgEnv {
        let env = PgEnv { staging: tempfile::tempdir().expect("tempdir"), db: PgDatabase::create(admin) };
        // The first open creates the store (schema, staging identity, marker).
        drop(env.open());
        env
    }

    pub fn url(&self) -> &str {
        self.db.url()
    }

    pub fn staging_root(&self) -> PathBuf {
        self.staging.path().join("staging")
    }

    /// Opens the store in this process.
    pub fn open(&self) -> Store {
        Store::open(self.url(), self.staging_root()).unwrap_or_else(|e| panic!("open the PostgreSQL store {}: {e}", self.url()))
    }

    /// Starts a child process of `role` on this store (through `url`, e.g. a proxy's).
    pub fn spawn(&self, role: &str, url: &str, vars: &[(&str, String)]) -> Proc {
        Proc::spawn(role, url, &self.staging_root(), vars)
    }

    /// The store verifies clean, files of retained generations included.
    #[track_caller]
    pub fn assert_verifies_clean(&self) {
        let mut store = self.open();
        let options = VerifyOptions { files: Some(FileCheck::Size), views: false, ..VerifyOptions::default() };
        let report = store.verify(&options).unwrap_or_else(|e| panic!("verify: {e}"));
        assert!(report.is_clean(), "the store does not verify clean:\n{report}");
    }
}

/// A child process and the lines it prints (`@@ ...`, the prefix stripped).
pub struct Proc {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Proc {
    pub fn spawn(role: &str, url: &str, staging: &std::path::Path, vars: &[(&str, String)]) -> Proc {
        let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
        cmd.args(["--exact", "pg::child::run", "--ignored", "--nocapture", "--test-threads=1"])
            .env(child::ROLE_ENV, role)
            .env(child::STORE_ENV, url)
            .env(child::STAGING_ENV, staging)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, value) in vars {
            cmd.env(name, value);
        }
        let mut child = cmd.spawn().expect("start a child process");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // libtest may print "test pg::child::run ... " before the child's first line.
                if let Some((_, rest)) = line.split_once("@@ ")
                    && tx.send(rest.to_owned()).is_err()
                {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Proc { child, stdin, lines, seen: Vec::new() }
    }

    /// Sends one command line.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").and_then(|()| stdin.flush()).expect("write to the child");
    }

    /// The next line, within `timeout`.
    #[track_caller]
    pub fn next(&mut self, timeout: Duration) -> String {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                self.seen.push(line.clone());
                line
            }
            Err(e) => panic!("no line from child {} within {timeout:?} ({e}); it printed {:?}", self.child.id(), self.seen),
        }
    }

    /// Every line printed so far, without waiting.
    pub fn drain(&mut self) -> &[String] {
        self.seen.extend(self.lines.try_iter());
        &self.seen
    }

    /// Waits for the line `ready`.
    #[track_caller]
    pub fn ready(&mut self) {
        let line = self.next(Duration::from_secs(120));
        assert_eq!(line, "ready", "the child did not start: {:?}", self.seen);
    }

    /// SIGKILL and reap; the lines printed until then.
    pub fn kill(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The reader thread sees EOF once the process is gone.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => self.seen.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
        std::mem::take(&mut self.seen)
    }

    /// Closes stdin and waits for the exit; the lines printed.
    pub fn finish(mut self) -> (std::process::ExitStatus, Vec<String>) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait for the child");
        self.seen.extend(self.lines.iter());
        (status, std::mem::take(&mut self.seen))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `ACK <generation> <run>` lines: acknowledged publishes.
pub fn acks(lines: &[String]) -> Vec<(u64, String)> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("ACK "))
        .map(|rest| {
            let (number, run) = rest.split_once(' ').expect("ACK <generation> <run>");
            (number.parse().expect("generation number"), run.to_owned())
        })
        .collect()
}

/// Every acknowledged publish is in the dataset's history, with the generation it was told.
#[track_caller]
pub fn assert_acknowledged_kept(store: &Store, dataset: &str, acknowledged: &[(u64, String)]) {
    let history: BTreeMap<u64, Generation> =
        store.snapshot().unwrap().history(dataset).unwrap().into_iter().map(|g| (g.number, g)).collect();
    for (number, run) in acknowledged {
        let kept = history.get(number).unwrap_or_else(|| panic!("acknowledged generation {number} ({run}) is lost"));
        assert_eq!(&kept.run, run, "generation {number} was acknowledged for run {run}");
    }
    // One generation per run: a retried publish never published twice.
    let mut runs: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for g in history.values() {
        runs.entry(g.run.as_str()).or_default().push(g.number);
    }
    for (run, numbers) in runs {
        assert_eq!(numbers.len(), 1, "run {run} published as several generations {numbers:?}");
    }
    // Generations are numbered without gaps, each the child of the previous.
    for (i, g) in history.values().enumerate() {
        assert_eq!(g.number, i as u64 + 1, "generation numbers have a gap: {:?}", history.keys().collect::<Vec<_>>());
        assert_eq!(g.parent, i as u64, "generation {} has parent {}", g.number, g.parent);
    }
}

/// Declares `run` of `dataset` with the given tasks and gives each a valid attempt, on `store`.
pub fn prepare_run(store: &Store, dataset: &str, run: &str, tasks: &[(&str, u64, i64)]) {
    let snapshot = format!("in@{run}");
    store.declare_run(&run_spec(dataset, run, &snapshot, tasks)).expect("declare");
    for (partition, rows, total) in tasks {
        let ticket = store.begin_attempt(&TaskKey::new(dataset, run, *partition)).expect("begin");
        let file = write_rows(&ticket.staging_dir, *rows, *total);
        store.finish_attempt(&ticket.key, &candidate(&snapshot, *rows, *total, file)).expect("finish");
        assert!(store.validate_attempt(&ticket.key, FileCheck::Size).expect("validate").is_valid());
    }
}

/// Publishes and expects a generation (published now or already).
#[track_caller]
pub fn published(store: &Store, dataset: &str, run: &str) -> Generation {
    match store.publish(dataset, run, &PublishOptions::default()) {
        Ok(PublishOutcome::Published(g) | PublishOutcome::AlreadyPublished(g)) => g,
        other => panic!("publish {dataset}/{run}: {other:?}"),
    }
}

/// A free TCP port on the loopback interface.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port()
}

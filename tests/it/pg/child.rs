//! The child processes of the PostgreSQL tests: this test binary, re-invoked on the ignored
//! [`run`] with a role. Each opens its own `Store` on the URL it is given and prints its answers
//! as `@@ ...` lines on stdout.
//!
//! Roles:
//! - `commands`: reads commands from stdin, one per line, and answers each:
//!   `publish DS RUN` → `published G` / `already G` / `refused` / `error MESSAGE`;
//!   `begin DS RUN PARTITION N` → `attempts A1,A2,...` (N begins) / `error MESSAGE`.
//! - `publish_loop`: declares, attempts, validates and publishes runs `PREFIX-1`, `PREFIX-2`, ...
//!   of `DATASET` (each replacing two of five partitions), printing `ACK G RUN` after each
//!   acknowledged publish; a failed step is retried (the store reopened) until it succeeds, so it
//!   keeps going through server restarts. Stops after `RUNS` runs (`done`) or when killed.
//! - `replace_all`: publishes runs `w-FROM` (default 1) to `w-RUNS` of `DATASET`, each replacing all `PARTS`
//!   partitions with totals equal to the run's number; `ACK G RUN` after each.
//! - `reader`: reads `DATASET` until stdin closes: in each snapshot the current generation, its
//!   manifest and every partition looked up alone must all be of one run; prints
//!   `reads N mixed M generations G` and the first mixed read, if any.

use std::io::BufRead;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use manifestdb::{FileCheck, PublishOptions, PublishOutcome, Store, TaskKey};

use crate::support::{candidate, run_spec, write_rows};

pub const ROLE_ENV: &str = "MANIFESTDB_PG_CHILD_ROLE";
pub const STORE_ENV: &str = "MANIFESTDB_PG_CHILD_STORE";
pub const STAGING_ENV: &str = "MANIFESTDB_PG_CHILD_STAGING";

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child needs {name}"))
}

fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "@@ {line}");
    let _ = out.flush();
}

struct Target {
    url: String,
    staging: PathBuf,
}

impl Target {
    /// Opens the store, retrying for up to `patience` (the server may be restarting).
    fn open(&self, patience: Duration) -> Store {
        let start = Instant::now();
        loop {
            match Store::open(&self.url, &self.staging) {
                Ok(store) => return store,
                Err(e) if start.elapsed() < patience => {
                    eprintln!("child {}: open failed, retrying: {e}", std::process::id());
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("child {}: cannot open {}: {e}", std::process::id(), self.url),
            }
        }
    }
}

/// Runs in a child process only (started by the tests of `pg`).
#[test]
#[ignore = "a child process of the PostgreSQL tests; does nothing unless started by them"]
fn run() {
    let Ok(role) = std::env::var(ROLE_ENV) else { return };
    let target = Target { url: var(STORE_ENV), staging: PathBuf::from(var(STAGING_ENV)) };
    match role.as_str() {
        "commands" => commands(&target),
        "publish_loop" => publish_loop(&target),
        "replace_all" => replace_all(&target),
        "reader" => reader(&target),
        other => panic!("unknown child role {other}"),
    }
}

fn commands(target: &Target) {
    let store = target.open(Duration::from_secs(30));
    say("ready");
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["publish", dataset, run] => match store.publish(dataset, run, &PublishOptions::default()) {
                Ok(PublishOutcome::Published(g)) => say(&format!("published {}", g.number)),
                Ok(PublishOutcome::AlreadyPublished(g)) => say(&format!("already {}", g.number)),
                Ok(PublishOutcome::Refused(_)) => say("refused"),
                Err(e) => say(&format!("error {e}")),
            },
            ["begin", dataset, run, partition, n] => {
                let task = TaskKey::new(*dataset, *run, *partition);
                let mut numbers = Vec::new();
                let mut failed = None;
                for _ in 0..n.parse::<u32>().expect("count") {
                    match store.begin_attempt(&task) {
                        Ok(ticket) => numbers.push(ticket.key.attempt.to_string()),
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                match failed {
                    None => say(&format!("attempts {}", numbers.join(","))),
                    Some(e) => say(&format!("error {e}")),
                }
            }
            ["quit"] => break,
            other => panic!("unknown command {other:?}"),
        }
    }
}

/// Retries `step` until it succeeds, reopening the store after each failure, for up to 2 minutes.
fn retried<T>(target: &Target, store: &mut Store, what: &str, mut step: impl FnMut(&Store) -> manifestdb::Result<T>) -> T {
    let start = Instant::now();
    loop {
        match step(store) {
            Ok(value) => return value,
            Err(e) if start.elapsed() < Duration::from_secs(120) => {
                eprintln!("child {}: {what} failed, retrying on a reopened store: {e}", std::process::id());
                std::thread::sleep(Duration::from_millis(100));
                *store = target.open(Duration::from_secs(120));
            }
            Err(e) => panic!("child {}: {what} kept failing for 2 minutes: {e}", std::process::id()),
        }
    }
}

fn publish_loop(target: &Target) {
    let dataset = var("DATASET");
    let prefix = var("PREFIX");
    let runs: u64 = std::env::var("RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(u64::MAX);
    let mut store = target.open(Duration::from_secs(120));
    say("ready");
    for i in 1..=runs {
        let run = format!("{prefix}-{i}");
        let snapshot = format!("in@{run}");
        let tasks: Vec<(String, u64, i64)> = (0..2).map(|k| (format!("p={}", (i + k) % 5), 2 + k, 10 * i as i64 + k as i64)).collect();
        let specs: Vec<(&str, u64, i64)> = tasks.iter().map(|(p, r, t)| (p.as_str(), *r, *t)).collect();
        retried(target, &mut store, "declare", |s| s.declare_run(&run_spec(&dataset, &run, &snapshot, &specs)));
        for (partition, rows, total) in &tasks {
            let task = TaskKey::new(dataset.as_str(), run.as_str(), partition.as_str());
            let ticket = retried(target, &mut store, "begin", |s| s.begin_attempt(&task));
            let file = write_rows(&ticket.staging_dir, *rows, *total);
            let c = candidate(&snapshot, *rows, *total, file);
            retried(target, &mut store, "finish", |s| s.finish_attempt(&ticket.key, &c));
            let verdict = retried(target, &mut store, "validate", |s| s.validate_attempt(&ticket.key, FileCheck::Size));
            assert!(verdict.is_valid(), "{verdict:?}");
        }
        let outcome = retried(target, &mut store, "publish", |s| s.publish(&dataset, &run, &PublishOptions::default()));
        match outcome {
            PublishOutcome::Published(g) | PublishOutcome::AlreadyPublished(g) => {
                assert_eq!(g.run, run, "told generation {} of another run", g.number);
                say(&format!("ACK {} {}", g.number, g.run));
            }
            PublishOutcome::Refused(r) => panic!("refused: {r}"),
        }
    }
    say("done");
}

fn replace_all(target: &Target) {
    let dataset = var("DATASET");
    let parts: u64 = var("PARTS").parse().expect("PARTS");
    let runs: u64 = var("RUNS").parse().expect("RUNS");
    let from: u64 = std::env::var("FROM").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let mut store = target.open(Duration::from_secs(30));
    say("ready");
    for i in from..=runs {
        let run = format!("w-{i}");
        let snapshot = format!("in@{run}");
        let partitions: Vec<String> = (0..parts).map(|k| format!("p={k}")).collect();
        let specs: Vec<(&str, u64, i64)> = partitions.iter().map(|p| (p.as_str(), 1, i as i64)).collect();
        retried(target, &mut store, "declare", |s| s.declare_run(&run_spec(&dataset, &run, &snapshot, &specs)));
        for partition in &partitions {
            let task = TaskKey::new(dataset.as_str(), run.as_str(), partition.as_str());
            let ticket = retried(target, &mut store, "begin", |s| s.begin_attempt(&task));
            let file = write_rows(&ticket.staging_dir, 1, i as i64);
            let c = candidate(&snapshot, 1, i as i64, file);
            retried(target, &mut store, "finish", |s| s.finish_attempt(&ticket.key, &c));
            retried(target, &mut store, "validate", |s| s.validate_attempt(&ticket.key, FileCheck::Size));
        }
        match retried(target, &mut store, "publish", |s| s.publish(&dataset, &run, &PublishOptions::default())) {
            PublishOutcome::Published(g) | PublishOutcome::AlreadyPublished(g) => say(&format!("ACK {} {}", g.number, g.run)),
            PublishOutcome::Refused(r) => panic!("refused: {r}"),
        }
    }
    say("done");
}

fn reader(target: &Target) {
    let dataset = var("DATASET");
    let parts: usize = var("PARTS").parse().expect("PARTS");
    let store = target.open(Duration::from_secs(30));
    // Stop when stdin closes.
    let (tx, stop) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
        let _ = tx.send(());
    });
    say("ready");
    let (mut reads, mut mixed, mut first_mixed) = (0u64, 0u64, None::<String>);
    let mut generations = std::collections::BTreeSet::new();
    while stop.try_recv().is_err() {
        let snapshot = store.snapshot().expect("snapshot");
        let Some(current) = snapshot.current(&dataset).expect("current") else { continue };
        let manifest = snapshot.manifest(&dataset, None).expect("manifest").expect("a manifest of the current generation");
        let run_number: i64 = current.run.trim_start_matches("w-").parse().expect("run number");
        let mut problems = Vec::new();
        if manifest.generation.number != current.number {
            problems.push(format!("manifest of generation {} beside current {}", manifest.generation.number, current.number));
        }
        if manifest.partitions.len() != parts {
            problems.push(format!("{} partitions", manifest.partitions.len()));
        }
        for entry in &manifest.partitions {
            if entry.run != current.run || entry.total != Some(run_number) {
                problems.push(format!(
                    "{} of run {} total {:?} in generation {} of {}",
                    entry.partition, entry.run, entry.total, current.number, current.run
                ));
            }
            // The same partition looked up alone, in the same snapshot.
            let alone = snapshot.partition(&dataset, &entry.partition, None).expect("partition").expect("present");
            if alone.run != current.run {
                problems.push(format!("{} alone: run {}", entry.partition, alone.run));
            }
        }
        reads += 1;
        generations.insert(current.number);
        if !problems.is_empty() {
            mixed += 1;
            first_mixed.get_or_insert(problems.join("; "));
        }
    }
    say(&format!("reads {reads} mixed {mixed} generations {}", generations.len()));
    if let Some(first) = first_mixed {
        say(&format!("first mixed read: {first}"));
    }
}

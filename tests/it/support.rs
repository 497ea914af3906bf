//! Shared helpers for the integration tests.

use std::path::{Path, PathBuf};

use manifestdb::{AttemptKey, AttemptTicket, Candidate, FileEntry, RunSpec, Store, TaskKey, TaskSpec, describe_file};

/// A store in a fresh temporary directory.
pub struct TestStore {
    pub dir: tempfile::TempDir,
    pub store: Store,
}

impl TestStore {
    pub fn new() -> TestStore {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path().join("store.redb"), dir.path().join("staging")).expect("open store");
        TestStore { dir, store }
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join("store.redb")
    }

    pub fn staging(&self) -> PathBuf {
        self.dir.path().join("staging")
    }

    pub fn reopen(self) -> TestStore {
        let TestStore { dir, store } = self;
        drop(store);
        let store = Store::open(dir.path().join("store.redb"), dir.path().join("staging")).expect("reopen store");
        TestStore { dir, store }
    }
}

/// A run spec with the given (partition, rows, total) tasks.
pub fn run_spec(dataset: &str, run: &str, snapshot: &str, tasks: &[(&str, u64, i64)]) -> RunSpec {
    RunSpec {
        dataset: dataset.into(),
        run: run.into(),
        snapshot: snapshot.into(),
        tasks: tasks
            .iter()
            .map(|(partition, rows, total)| TaskSpec { partition: (*partition).into(), expected_rows: *rows, expected_total: Some(*total) })
            .collect(),
        grain: None,
    }
}

/// Writes `rows` CSV lines whose unit column sums to `total` into `dir/part.csv`; returns its
/// file entry.
pub fn write_rows(dir: &Path, rows: u64, total: i64) -> FileEntry {
    let mut text = String::from("item,units\n");
    let mut remaining = total;
    for i in 0..rows {
        let units = if i + 1 == rows { remaining } else { total / rows.max(1) as i64 };
        remaining -= units;
        text.push_str(&format!("{i},{units}\n"));
    }
    std::fs::write(dir.join("part.csv"), text).expect("write part file");
    describe_file(dir, "part.csv").expect("describe part file")
}

/// Reads back `(rows, total)` of a partition file.
pub fn read_rows(path: &Path) -> (u64, i64) {
    let text = std::fs::read_to_string(path).expect("read part file");
    let mut rows = 0;
    let mut total = 0;
    for line in text.lines().skip(1) {
        let units: i64 = line.split(',').nth(1).expect("units column").parse().expect("units");
        rows += 1;
        total += units;
    }
    (rows, total)
}

/// The candidate of an attempt that wrote `rows` rows summing to `total`.
pub fn candidate(snapshot: &str, rows: u64, total: i64, file: FileEntry) -> Candidate {
    Candidate {
        snapshot: snapshot.into(),
        rows: Some(rows),
        total: Some(total),
        digest: Some(format!("rows={rows};total={total}")),
        files: vec![file],
    }
}

/// Begins an attempt, writes its output and finishes it.
pub fn run_attempt(store: &Store, task: &TaskKey, snapshot: &str, rows: u64, total: i64) -> AttemptTicket {
    let ticket = store.begin_attempt(task).expect("begin attempt");
    let file = write_rows(&ticket.staging_dir, rows, total);
    store.finish_attempt(&ticket.key, &candidate(snapshot, rows, total, file)).expect("finish attempt");
    ticket
}

#[allow(dead_code, reason = "used by some test modules only")]
pub fn key(task: &TaskKey, attempt: u32) -> AttemptKey {
    task.attempt(attempt)
}

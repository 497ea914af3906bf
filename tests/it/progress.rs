//! The progress hook of the long operations (validation, cleanup, verify): each stage first
//! reports its totals with nothing done, then counts up, never down, to exactly its totals; the
//! totals are the operation's files and their recorded sizes.

use std::cell::RefCell;
use std::path::Path;
use std::time::{Duration, SystemTime};

use manifestdb::{
    ApplyOptions, Candidate, CleanupOptions, DataFormat, FileCheck, FileEntry, Grain, Progress, ProgressStage, PublishOptions,
    PublishOutcome, ReadOnlyStore, RunMode, RunSpec, SkipReason, Store, StoreOptions, TaskKey, TaskSpec, VerifyOptions, describe_file,
};

use crate::support::TestDir;

/// Every report a hook received, in order.
#[derive(Default)]
struct Seen(RefCell<Vec<Progress>>);

impl Seen {
    fn hook(&self) -> impl Fn(Progress) + '_ {
        |p| self.0.borrow_mut().push(p)
    }

    fn take(&self) -> Vec<Progress> {
        std::mem::take(&mut *self.0.borrow_mut())
    }
}

/// Checks the reports of one call: its stages in this order, each announcing `(files, bytes)`
/// with nothing done, then monotone up to exactly those totals, with one report per file.
fn assert_stages(reports: &[Progress], expected: &[(ProgressStage, u64, u64)]) {
    let mut rest = reports;
    for &(stage, files, bytes) in expected {
        let n = rest.iter().take_while(|p| p.stage == stage).count();
        let (this, after) = rest.split_at(n);
        assert_eq!(this.len() as u64, files + 1, "{stage}: the totals, then one report per file: {this:?}");
        assert_eq!((this[0].files_done, this[0].bytes_done), (0, 0), "{stage} starts at zero: {this:?}");
        for p in this {
            assert_eq!((p.files_total, p.bytes_total), (files, bytes), "{stage}: the totals hold throughout: {p:?}");
            assert!(p.files_done <= p.files_total && p.bytes_done <= p.bytes_total, "{stage}: within the totals: {p:?}");
        }
        for pair in this.windows(2) {
            assert_eq!(pair[1].files_done, pair[0].files_done + 1, "{stage}: one file at a time: {pair:?}");
            assert!(pair[1].bytes_done >= pair[0].bytes_done, "{stage}: bytes never go back: {pair:?}");
        }
        let last = this[this.len() - 1];
        assert_eq!((last.files_done, last.bytes_done), (files, bytes), "{stage} ends at its totals");
        rest = after;
    }
    assert!(rest.is_empty(), "no stage beyond {expected:?}: {rest:?}");
}

fn sizes(files: &[FileEntry]) -> (u64, u64) {
    (files.len() as u64, files.iter().map(|f| f.size_bytes).sum())
}

/// Writes `n` CSV files of growing sizes at the (item) grain, one row per item, unique keys.
fn write_parts(dir: &Path, n: usize) -> Vec<FileEntry> {
    (0..n)
        .map(|i| {
            let mut text = String::from("item,units\n");
            for j in 0..(i + 1) * 50 {
                text.push_str(&format!("i{i}-{j},1\n"));
            }
            let name = format!("part-{i}.csv");
            std::fs::write(dir.join(&name), text).expect("write part");
            describe_file(dir, &name).expect("describe")
        })
        .collect()
}

/// The rows of `n` files of [`write_parts`].
fn rows_of(n: usize) -> u64 {
    (0..n as u64).map(|i| (i + 1) * 50).sum()
}

/// A declared run of one task at the (item) grain, an attempt finished with `files` written
/// by `write`.
fn finished_attempt(store: &Store, run: &str, write: impl FnOnce(&Path) -> Vec<FileEntry>) -> (manifestdb::AttemptKey, Vec<FileEntry>) {
    let task = TaskKey::new("ds", run, "p");
    let ticket = store.begin_attempt(&task).expect("begin");
    let files = write(&ticket.staging_dir);
    let rows = rows_of(files.len());
    let candidate =
        Candidate { snapshot: format!("s-{run}"), rows: Some(rows), total: Some(rows as i64), digest: None, files: files.clone() };
    store.finish_attempt(&ticket.key, &candidate).expect("finish");
    (ticket.key, files)
}

fn declare(store: &Store, run: &str, rows: u64) {
    store
        .declare_run(&RunSpec {
            dataset: "ds".into(),
            run: run.into(),
            snapshot: format!("s-{run}"),
            tasks: vec![TaskSpec { partition: "p".into(), expected_rows: rows, expected_total: Some(rows as i64) }],
            grain: Some(Grain::new(DataFormat::Csv, &["item"], "units")),
            trust_reported_figures: false,
        })
        .expect("declare");
}

#[test]
fn validation_reports_checking_reading_and_syncing_each_up_to_its_totals() {
    let dir = TestDir::new();
    let store = dir.open().expect("open");
    declare(&store, "r1", rows_of(6));
    let (key, files) = finished_attempt(&store, "r1", |d| write_parts(d, 6));
    let (n, bytes) = sizes(&files);
    assert!(bytes > 6 * 500, "files of some size: {bytes}");

    let seen = Seen::default();
    let verdict = store.validate_attempt_with_progress(&key, FileCheck::SizeAndChecksum, &seen.hook()).expect("validate");
    assert!(verdict.is_valid(), "{verdict:?}");
    assert_stages(
        &seen.take(),
        &[(ProgressStage::CheckingFiles, n, bytes), (ProgressStage::ReadingRows, n, bytes), (ProgressStage::SyncingFiles, n, bytes)],
    );
    // Validated again, the stored verdict answers: no file work, nothing reported.
    store.validate_attempt_with_progress(&key, FileCheck::SizeAndChecksum, &seen.hook()).expect("validate again");
    assert!(seen.take().is_empty());

    // An attempt with a file gone: checking counts it (by its recorded size), reading reads
    // the rest, and nothing is synced for an invalid candidate.
    let (key, files) = finished_attempt(&store, "r1", |d| write_parts(d, 4));
    let ticket_dir = dir.staging().join(store.snapshot().unwrap().attempt(&key).unwrap().unwrap().staging_rel);
    std::fs::remove_file(ticket_dir.join(&files[1].path)).expect("remove a part");
    let (n, bytes) = sizes(&files);
    let prepared = store.prepare_validation_with_progress(&key, FileCheck::Size, &seen.hook()).expect("prepare");
    assert!(!prepared.verdict().is_valid());
    let present: Vec<FileEntry> = files.iter().enumerate().filter(|(i, _)| *i != 1).map(|(_, f)| f.clone()).collect();
    let (present_n, present_bytes) = sizes(&present);
    assert_stages(&seen.take(), &[(ProgressStage::CheckingFiles, n, bytes), (ProgressStage::ReadingRows, present_n, present_bytes)]);
}

#[test]
fn a_read_only_handle_reports_its_preparation_of_a_validation() {
    let dir = TestDir::new();
    let store = dir.open().expect("open");
    declare(&store, "r1", rows_of(3));
    let (key, files) = finished_attempt(&store, "r1", |d| write_parts(d, 3));
    let (n, bytes) = sizes(&files);
    drop(store);
    let reader = ReadOnlyStore::open(dir.location()).expect("open read-only").with_staging_root(dir.staging()).expect("staging root");
    let seen = Seen::default();
    let prepared = reader.prepare_validation_with_progress(&key, FileCheck::SizeAndChecksum, &seen.hook()).expect("prepare");
    assert!(prepared.verdict().is_valid(), "{:?}", prepared.verdict());
    assert_stages(
        &seen.take(),
        &[(ProgressStage::CheckingFiles, n, bytes), (ProgressStage::ReadingRows, n, bytes), (ProgressStage::SyncingFiles, n, bytes)],
    );
}

#[test]
fn cleanup_reports_every_planned_path_across_batches_dry_run_and_execute() {
    let dir = TestDir::new();
    let options = StoreOptions { attempt_lifetime_max: Some(Duration::from_secs(1)), ..StoreOptions::default() };
    let store = dir.open_with(&options).expect("open");
    let old = SystemTime::now() - Duration::from_secs(3600);
    // Seven invalid attempts (the run expects one row; each has 150), their files dated an
    // hour back: cleanup candidates.
    declare(&store, "r1", 1);
    for _ in 0..7 {
        let (key, files) = finished_attempt(&store, "r1", |d| write_parts(d, 2));
        for f in &files {
            let rel = store.snapshot().unwrap().attempt(&key).unwrap().unwrap().staging_rel;
            let file = std::fs::File::options().write(true).open(dir.staging().join(rel).join(&f.path)).expect("open part");
            file.set_modified(old).expect("backdate");
        }
        assert!(!store.validate_attempt(&key, FileCheck::Size).expect("validate").is_valid());
    }
    let plan = store.plan_cleanup(&CleanupOptions { age_threshold: Duration::from_secs(60), force_short_threshold: false }).expect("plan");
    assert_eq!(plan.candidates.len(), 14, "{:?}", plan.candidates);
    let (n, bytes) = (plan.candidates.len() as u64, plan.candidates.iter().map(|p| p.size_bytes).sum::<u64>());

    let seen = Seen::default();
    for mode in [RunMode::DryRun, RunMode::Execute] {
        let apply = ApplyOptions { mode, batch_size: 3, ..ApplyOptions::default() };
        let report = store.apply_cleanup_with_progress(plan.id, &apply, &seen.hook()).expect("apply");
        assert_eq!(report.deleted.len(), 14, "{mode:?}: {:?}", report.skipped);
        assert_stages(&seen.take(), &[(ProgressStage::DeletingFiles, n, bytes)]);
    }
    // Applied again, every path is skipped as missing: still each one counted.
    let report =
        store.apply_cleanup_with_progress(plan.id, &ApplyOptions { mode: RunMode::Execute, ..ApplyOptions::default() }, &seen.hook());
    let missing = report.expect("apply again").skipped.iter().filter(|s| s.reason == SkipReason::Missing).count();
    assert_eq!(missing, 14);
    assert_stages(&seen.take(), &[(ProgressStage::DeletingFiles, n, bytes)]);
}

#[test]
fn verify_reports_every_file_retained_generations_reference() {
    let dir = TestDir::new();
    let store = dir.open().expect("open");
    let mut all = Vec::new();
    for (run, parts) in [("r1", 3), ("r2", 5)] {
        declare(&store, run, rows_of(parts));
        let (key, files) = finished_attempt(&store, run, |d| write_parts(d, parts));
        assert!(store.validate_attempt(&key, FileCheck::Size).expect("validate").is_valid());
        assert!(matches!(store.publish("ds", run, &PublishOptions::default()).expect("publish"), PublishOutcome::Published(_)));
        all.extend(files);
    }
    // Both generations are retained: r1's files (generation 1) and r2's (generation 2).
    let (n, bytes) = sizes(&all);
    let seen = Seen::default();
    let mut store = store;
    let options = VerifyOptions { files: Some(FileCheck::SizeAndChecksum), ..VerifyOptions::default() };
    let report = store.verify_with_progress(&options, &seen.hook()).expect("verify");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.files_checked, n);
    assert_stages(&seen.take(), &[(ProgressStage::CheckingFiles, n, bytes)]);
    // Without the file check there is nothing to count.
    store.verify_with_progress(&VerifyOptions::default(), &seen.hook()).expect("verify records");
    assert!(seen.take().is_empty());
    drop(store);

    let reader = ReadOnlyStore::open(dir.location()).expect("open read-only");
    let options = VerifyOptions { staging_root: Some(dir.staging()), ..options };
    let report = reader.verify_with_progress(&options, &seen.hook()).expect("verify read-only");
    assert_eq!(report.files_checked, n, "{report}");
    assert_stages(&seen.take(), &[(ProgressStage::CheckingFiles, n, bytes)]);
}

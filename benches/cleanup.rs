//! Cleanup planning time over a large staging root.
//!
//! Builds a store whose staging root holds `CLEANUP_BENCH_FILES` files (default 100 000):
//! 1000 attempts of one run (fewer for a smaller root: 100 files each), sharing the files equally; half of the attempts are
//! invalid, a quarter abandoned, a quarter still running (kept whatever their age). Then times `plan_cleanup` (walk of
//! the root + one read of the store's facts + the pure decision + persisting the plan) and a
//! dry-run `apply_cleanup` (which re-checks every candidate). Prints the figures.
//!
//! Run: `cargo bench --workspace --bench cleanup` (or `CLEANUP_BENCH_FILES=20000 cargo bench --workspace --bench cleanup`).

use std::time::{Duration, Instant, SystemTime};

use manifestdb::{ApplyOptions, Candidate, CleanupOptions, FileCheck, RunMode, RunSpec, Store, StoreOptions, TaskKey, TaskSpec};

/// Long enough that renewing a quarter of the attempts takes less time than one lease.
const LEASE: Duration = Duration::from_secs(2);

fn main() {
    let files: usize = std::env::var("CLEANUP_BENCH_FILES").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    // 100 files per attempt, at most 1000 attempts.
    let attempts = (files / 100).clamp(4, 1000);
    let per_attempt = files.div_ceil(attempts);
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions { attempt_lifetime_max: Some(LEASE), ..StoreOptions::default() };
    let store = Store::open_with_options(dir.path().join("store.redb"), dir.path().join("staging"), &options).expect("open");

    let setup = Instant::now();
    let tasks: Vec<TaskSpec> = (0..attempts)
        .map(|i| TaskSpec { partition: format!("date=2026-11-29/part={i:04}"), expected_rows: 1, expected_total: None })
        .collect();
    store
        .declare_run(&RunSpec {
            dataset: "bench".into(),
            run: "r1".into(),
            snapshot: "s1".into(),
            tasks: tasks.clone(),
            grain: None,
            trust_reported_figures: true,
        })
        .expect("declare");
    let old = SystemTime::now() - Duration::from_secs(3600);
    let mut written = 0;
    for (i, task) in tasks.iter().enumerate() {
        let key = TaskKey::new("bench", "r1", task.partition.as_str());
        let ticket = store.begin_attempt(&key).expect("begin");
        for f in 0..per_attempt {
            if written == files {
                break;
            }
            let path = ticket.staging_dir.join(format!("part-{f:05}.csv"));
            std::fs::write(&path, format!("{i},{f}\n")).expect("write");
            std::fs::File::options().write(true).open(&path).and_then(|file| file.set_modified(old)).expect("set_modified");
            written += 1;
        }
        if i % 2 == 0 {
            // Invalid: reports 2 rows, the task expects 1.
            let candidate = Candidate { snapshot: "s1".into(), rows: Some(2), total: None, digest: Some("d".into()), files: vec![] };
            store.finish_attempt(&ticket.key, &candidate).expect("finish");
            store.validate_attempt(&ticket.key, FileCheck::Size).expect("validate");
        } else if i % 4 == 1 {
            // Abandoned below, when its lease has run out; the others keep running.
        }
    }
    std::thread::sleep(LEASE + Duration::from_millis(100));
    // Abandon only the i % 4 == 1 attempts: renew the others first.
    for (i, task) in tasks.iter().enumerate() {
        if i % 4 == 3 {
            store.heartbeat(&TaskKey::new("bench", "r1", task.partition.as_str()).attempt(1)).expect("heartbeat");
        }
    }
    let abandoned = store.abandon_expired_attempts(RunMode::Execute).expect("abandon");
    println!("setup: {written} files under {attempts} attempts, {} abandoned, in {:.1?}", abandoned.len(), setup.elapsed());

    let cleanup = CleanupOptions { age_threshold: Duration::from_secs(60), force_short_threshold: false };
    let mut plan_times = Vec::new();
    let mut plan = None;
    for _ in 0..3 {
        let started = Instant::now();
        plan = Some(store.plan_cleanup(&cleanup).expect("plan"));
        plan_times.push(started.elapsed());
    }
    let plan = plan.expect("planned");
    plan_times.sort();
    let kept: u64 = plan.kept.iter().map(|(_, n)| n).sum();
    println!(
        "plan_cleanup over {written} staging files: median {:.1?} (min {:.1?}, max {:.1?}); {} candidates, {} unknown, {kept} kept",
        plan_times[1],
        plan_times[0],
        plan_times[2],
        plan.candidates.len(),
        plan.unknown.len()
    );
    let started = Instant::now();
    let report = store.apply_cleanup(plan.id, &ApplyOptions::default()).expect("dry run");
    println!(
        "apply_cleanup dry run (re-checks every candidate, batches of 1000): {:.1?}; would delete {} files",
        started.elapsed(),
        report.deleted.len()
    );
    let started = Instant::now();
    let report = store.apply_cleanup(plan.id, &ApplyOptions { mode: RunMode::Execute, ..ApplyOptions::default() }).expect("apply");
    println!(
        "apply_cleanup executed: {:.1?}; deleted {} files, {} directories, {} attempt records",
        started.elapsed(),
        report.deleted.len(),
        report.directories_removed,
        report.attempt_records_removed.len()
    );
    let size = std::fs::metadata(dir.path().join("store.redb")).map(|m| m.len()).unwrap_or(0);
    println!("store file after cleanup: {size} bytes");
}

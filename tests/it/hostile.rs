//! Cleanup and staging under adversity: a tree changing under the apply (a directory swapped
//! for a symlink to an outside folder in a loop), a wrong staging root, a planned file
//! replaced by another of the same size and modification time, and attempt leases raised by
//! dry runs or refused calls.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use manifestdb::{
    ATTEMPT_LIFETIME_MAX, ApplyOptions, Candidate, CleanupOptions, Error, FileCheck, RunMode, STAGING_ROOT_MARKER, SkipReason, Store,
    StoreOptions, TaskKey, describe_file,
};

use crate::support::{TestDir, new_location, on_postgres, run_spec};

const LEASE: Duration = Duration::from_secs(1);

fn options(lease: Option<Duration>) -> StoreOptions {
    StoreOptions { attempt_lifetime_max: lease, ..StoreOptions::default() }
}

fn open(dir: &TestDir) -> Store {
    dir.open_with(&options(Some(LEASE))).expect("open")
}

fn backdated(path: &Path) {
    let file = std::fs::File::options().write(true).open(path).expect("open");
    file.set_modified(SystemTime::now() - Duration::from_secs(3600)).expect("set_modified");
}

fn short_cleanup() -> CleanupOptions {
    CleanupOptions { age_threshold: Duration::from_secs(2), force_short_threshold: false }
}

fn execute() -> ApplyOptions {
    ApplyOptions { mode: RunMode::Execute, ..ApplyOptions::default() }
}

/// A dead (validated invalid) attempt of `partition` holding `files` old files; returns its
/// staging directory.
fn dead_attempt(store: &Store, run: &str, partition: &str, files: usize) -> PathBuf {
    let task = TaskKey::new("ds", run, partition);
    let ticket = store.begin_attempt(&task).expect("begin");
    for i in 0..files {
        let path = ticket.staging_dir.join(format!("f{i:05}"));
        std::fs::write(&path, format!("inside {i}\n")).expect("write");
        backdated(&path);
    }
    let candidate = Candidate { snapshot: "s".into(), rows: Some(999), total: None, digest: Some("d".into()), files: vec![] };
    store.finish_attempt(&ticket.key, &candidate).expect("finish");
    assert!(!store.validate_attempt(&ticket.key, FileCheck::Size).expect("validate").is_valid());
    ticket.staging_dir
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| entries.filter(|e| e.as_ref().is_ok_and(|e| e.path().is_file())).count())
}

#[test]
fn a_directory_swapped_for_a_symlink_during_apply_never_leads_outside_the_root() {
    const FILES: usize = 1000;
    const ROUNDS: usize = 3;
    let dir = TestDir::new();
    let store = open(&dir);
    let mut spec = run_spec("ds", "r", "s", &[("p", 1, 0)]);
    spec.tasks[0].expected_total = None;
    store.declare_run(&spec).expect("declare");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    // The outside folder holds files of the same names: any deletion that resolved a planned
    // path through the symlink would remove one of them.
    for i in 0..FILES {
        std::fs::write(outside.join(format!("f{i:05}")), format!("outside {i}\n")).expect("write");
    }
    let mut swaps_total = 0;
    let mut deleted_total = 0;
    for round in 0..ROUNDS {
        let attempt_dir = dead_attempt(&store, "r", "p", FILES);
        let plan = store.plan_cleanup(&short_cleanup()).expect("plan");
        // Earlier rounds' skipped files are planned again.
        assert!(plan.candidates.len() >= FILES, "round {round}");
        let link = attempt_dir.with_file_name(format!("swap-{round}"));
        std::os::unix::fs::symlink(&outside, &link).expect("symlink");
        let stop = AtomicBool::new(false);
        let swaps = AtomicU64::new(0);
        let report = std::thread::scope(|scope| {
            scope.spawn(|| {
                use rustix::fs::{CWD, RenameFlags, renameat_with};
                while !stop.load(Ordering::Relaxed) {
                    renameat_with(CWD, &attempt_dir, CWD, &link, RenameFlags::EXCHANGE).expect("renameat2(RENAME_EXCHANGE)");
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            });
            // Let the swapping start before the apply does.
            while swaps.load(Ordering::Relaxed) < 10 {
                std::thread::yield_now();
            }
            let report = store.apply_cleanup(plan.id, &ApplyOptions { batch_size: 100, ..execute() });
            stop.store(true, Ordering::Relaxed);
            report
        })
        .expect("apply");
        assert_eq!(count_files(&outside), FILES, "round {round}: files outside the root were deleted");
        // Earlier rounds' links, old enough by now, are unknown files and not to be deleted.
        let skipped: Vec<_> = report.skipped.iter().filter(|s| s.reason != SkipReason::UnknownNotRequested).collect();
        assert_eq!(report.deleted.len() + skipped.len(), plan.candidates.len(), "round {round}");
        assert!(skipped.iter().all(|s| s.reason == SkipReason::Changed || s.reason == SkipReason::Missing), "{skipped:?}");
        swaps_total += swaps.load(Ordering::Relaxed);
        deleted_total += report.deleted.len();
        // Put the directory back where it belongs for the next round's bookkeeping.
        if std::fs::symlink_metadata(&attempt_dir).expect("stat").file_type().is_symlink() {
            rustix::fs::renameat_with(rustix::fs::CWD, &attempt_dir, rustix::fs::CWD, &link, rustix::fs::RenameFlags::EXCHANGE)
                .expect("swap back");
        }
        // And remove the link: left behind, it would become an unknown path older than the
        // threshold by a later round's plan (how soon depends on how fast the rounds run).
        std::fs::remove_file(&link).expect("remove the link");
    }
    for i in 0..FILES {
        let text = std::fs::read_to_string(outside.join(format!("f{i:05}"))).expect("outside file");
        assert_eq!(text, format!("outside {i}\n"));
    }
    println!(
        "{ROUNDS} rounds of {FILES} planned files: {swaps_total} directory/symlink exchanges, {deleted_total} planned files deleted, 0 outside files deleted"
    );
    assert!(swaps_total > 0);
}

#[test]
fn a_wrong_staging_root_is_refused_before_anything_is_written_or_deleted() {
    let dir = TestDir::new();
    let db = dir.location();
    let store = open(&dir);
    let mut spec = run_spec("ds", "r", "s", &[("p", 1, 0)]);
    spec.tasks[0].expected_total = None;
    store.declare_run(&spec).expect("declare");
    dead_attempt(&store, "r", "p", 3);
    drop(store);

    // The parent of the real root (it holds the store file and the root itself).
    let err = Store::open_with_options(&db, dir.path(), &options(Some(LEASE))).expect_err("the parent of the root");
    assert!(matches!(err, Error::StagingRootMismatch { .. }), "{err}");
    assert!(err.to_string().contains("not this store's"), "{err}");
    // An unrelated folder holding a user's document.
    let documents = dir.path().join("documents");
    std::fs::create_dir_all(&documents).expect("mkdir");
    std::fs::write(documents.join("thesis.txt"), "years of work").expect("write");
    backdated(&documents.join("thesis.txt"));
    let err = Store::open_with_options(&db, &documents, &options(Some(LEASE))).expect_err("an unrelated folder");
    assert!(matches!(err, Error::StagingRootMismatch { .. }), "{err}");
    // Another store's staging root.
    let other = TestDir::new();
    drop(open(&other));
    let err = Store::open_with_options(&db, other.path().join("staging"), &options(Some(LEASE))).expect_err("another store's root");
    assert!(matches!(err, Error::StagingRootMismatch { .. }) && err.to_string().contains("another store"), "{err}");
    // A new store refuses a non-empty unmarked folder too.
    let (new_store, _new_db) = new_location(&dir.path().join("new"));
    let err = Store::open(&new_store, &documents).expect_err("a new store on a user's folder");
    assert!(matches!(err, Error::StagingRootMismatch { .. }), "{err}");
    if !on_postgres() {
        assert!(!new_store.exists(), "no store file was created");
    }
    assert!(std::fs::read_dir(&documents).expect("list").all(|e| e.expect("entry").file_name() == "thesis.txt"));
    assert_eq!(std::fs::read_to_string(documents.join("thesis.txt")).expect("document"), "years of work");

    // The right root opens; with its marker gone, cleanup and begin refuse.
    let store = open(&dir);
    let plan = store.plan_cleanup(&short_cleanup()).expect("plan");
    assert_eq!(plan.candidates.len(), 3);
    std::fs::remove_file(dir.path().join("staging").join(STAGING_ROOT_MARKER)).expect("remove marker");
    for err in [
        store.apply_cleanup(plan.id, &execute()).map(|_| ()).expect_err("apply"),
        store.plan_cleanup(&short_cleanup()).map(|_| ()).expect_err("plan"),
        store.begin_attempt(&TaskKey::new("ds", "r", "p")).map(|_| ()).expect_err("begin"),
    ] {
        assert!(matches!(err, Error::StagingRootMismatch { .. }), "{err}");
    }
    assert_eq!(count_files(&dir.path().join("staging/ds/r/p/@attempt-1")), 3, "nothing was deleted");
}

#[test]
fn a_planned_file_replaced_by_one_of_the_same_size_and_mtime_is_not_deleted() {
    let dir = TestDir::new();
    let store = open(&dir);
    let mut spec = run_spec("ds", "r", "s", &[("p", 1, 0)]);
    spec.tasks[0].expected_total = None;
    store.declare_run(&spec).expect("declare");
    let attempt_dir = dead_attempt(&store, "r", "p", 2);
    let plan = store.plan_cleanup(&short_cleanup()).expect("plan");
    assert_eq!(plan.candidates.len(), 2);
    let renamed = attempt_dir.join("f00000");
    let rewritten = attempt_dir.join("f00001");
    let planned = |path: &Path| plan.candidates.iter().find(|p| attempt_dir.join(Path::new(&p.path).file_name().unwrap()) == path).unwrap();
    let times = |path: &Path| {
        let p = planned(path);
        let t =
            rustix::fs::Timespec { tv_sec: (p.modified_at_ns / 1_000_000_000) as i64, tv_nsec: (p.modified_at_ns % 1_000_000_000) as _ };
        rustix::fs::Timestamps { last_access: t, last_modification: t }
    };
    // Let the clock move past the plan's observation, so that a status change is visible.
    std::thread::sleep(Duration::from_millis(30));
    // A new inode of the same size renamed in, its modification time set to the planned one.
    let tmp = attempt_dir.join("tmp");
    std::fs::write(&tmp, "new-de 0\n").expect("write");
    rustix::fs::utimensat(rustix::fs::CWD, &tmp, &times(&renamed), rustix::fs::AtFlags::empty()).expect("utimensat");
    std::fs::rename(&tmp, &renamed).expect("rename");
    // The same inode rewritten in place, same size, its modification time put back.
    std::fs::write(&rewritten, "NEWIDE 1\n").expect("rewrite");
    rustix::fs::utimensat(rustix::fs::CWD, &rewritten, &times(&rewritten), rustix::fs::AtFlags::empty()).expect("utimensat");
    for path in [&renamed, &rewritten] {
        let meta = std::fs::metadata(path).expect("stat");
        let p = planned(path);
        assert_eq!((meta.len(), meta.mtime() as u64 * 1_000_000_000 + meta.mtime_nsec() as u64), (p.size_bytes, p.modified_at_ns));
    }
    let report = store.apply_cleanup(plan.id, &execute()).expect("apply");
    assert!(report.deleted.is_empty(), "{:?}", report.deleted);
    assert_eq!(report.skipped.len(), 2);
    assert!(report.skipped.iter().all(|s| s.reason == SkipReason::Changed), "{:?}", report.skipped);
    assert_eq!(std::fs::read_to_string(&renamed).expect("kept"), "new-de 0\n");
    assert_eq!(std::fs::read_to_string(&rewritten).expect("kept"), "NEWIDE 1\n");
}

#[test]
fn only_a_write_that_commits_records_a_longer_lease_and_only_up_to_the_maximum() {
    let dir = TestDir::new();
    let (db, staging) = (dir.location(), dir.staging());
    let hour_ms = 3_600_000;
    drop(Store::open(&db, &staging).expect("create"));
    let reopen = |lease: Option<Duration>| Store::open_with_options(&db, &staging, &options(lease));
    // A dry run and a refused call with a longer lease record nothing.
    {
        let store = reopen(Some(2 * Duration::from_secs(3600))).expect("open");
        assert_eq!(store.attempt_lifetime_max_ms(), 2 * hour_ms, "the handle uses its longer lease");
        store.abandon_expired_attempts(RunMode::DryRun).expect("dry run");
        store.abandon_expired_attempts(RunMode::Execute).expect("nothing to abandon");
        assert!(store.declare_run(&run_spec("ds", "r", "s", &[])).is_err());
    }
    assert_eq!(reopen(None).expect("open").attempt_lifetime_max_ms(), hour_ms, "nothing recorded the longer lease");
    // A grouped write that commits records it; so does a plain one.
    {
        let store = reopen(Some(2 * Duration::from_secs(3600))).expect("open");
        store.declare_run(&run_spec("ds", "r", "s", &[("p", 1, 0)])).expect("declare");
    }
    assert_eq!(reopen(None).expect("open").attempt_lifetime_max_ms(), 2 * hour_ms);
    {
        let store = reopen(Some(3 * Duration::from_secs(3600))).expect("open");
        store.plan_cleanup(&CleanupOptions::default()).expect("plan");
    }
    assert_eq!(reopen(None).expect("open").attempt_lifetime_max_ms(), 3 * hour_ms);
    // Never above the maximum; never shrinks.
    for lease in [Duration::from_millis(u64::MAX), ATTEMPT_LIFETIME_MAX + Duration::from_millis(1)] {
        let err = reopen(Some(lease)).expect_err("over the maximum");
        assert!(matches!(err, Error::InvalidInput { what: "attempt lifetime", .. }), "{err}");
    }
    assert_eq!(
        reopen(Some(ATTEMPT_LIFETIME_MAX)).expect("the maximum itself").attempt_lifetime_max_ms(),
        ATTEMPT_LIFETIME_MAX.as_millis() as u64
    );
    assert_eq!(reopen(Some(LEASE)).expect("open").attempt_lifetime_max_ms(), 3 * hour_ms);
    let _ = describe_file;
}

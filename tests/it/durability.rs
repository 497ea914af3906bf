//! Published data is durable (DOMAIN 11), observed through the store's sync seam
//! (`manifestdb::testing::observe_syncs`, which sees every sync of staging data, a new store
//! file and its directories just before it runs, and can fail it).
//!
//! - Over the scripted workload on the fault-injecting backend (shipped mode): every file of
//!   every retained generation, and every directory from the file's own up to the staging
//!   root, was synced before the redb commit that stored its attempt's Valid verdict; each
//!   `begin_attempt` synced its attempt directory and its parent before returning; cleanup
//!   synced the directories it removed entries from.
//! - A failed sync of a candidate's file or directory refuses the candidate (no Valid verdict).
//! - Store creation syncs the parent of every directory it makes and fails when any of its
//!   syncs fails.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use manifestdb::testing::{self, FaultyBackend, Op, SyncEvent};
use manifestdb::{FileCheck, GateFailure, Store, StoreOptions, TaskKey, Verdict};

use crate::support::{TestStore, candidate, run_spec, write_rows};

type Log = Rc<RefCell<Vec<(SyncEvent, u64)>>>;

/// Runs `body` with every sync recorded together with the number of redb syncs the backend
/// had made at that moment.
fn recorded<R>(backend: &FaultyBackend, log: &Log, body: impl FnOnce() -> R) -> R {
    let (backend, log_in) = (backend.clone(), Rc::clone(log));
    testing::observe_syncs(
        move |event| {
            log_in.borrow_mut().push((event.clone(), backend.op_counts().2));
            Ok(())
        },
        body,
    )
}

#[test]
fn every_published_file_and_directory_was_synced_before_the_commit_that_made_it_valid() {
    if crate::support::redb_only("runs the scripted workload on redb's fault-injecting storage backend") {
        return;
    }
    let backend = FaultyBackend::new();
    let staging = tempfile::tempdir().unwrap();
    let store = Store::open_with_backend(backend.clone(), staging.path(), &StoreOptions::default()).unwrap();
    let root = store.staging_root().to_path_buf();
    let log: Log = Rc::default();
    // Per synced path: the redb sync count when it was first synced.
    let mut first_synced: BTreeMap<PathBuf, (bool, u64)> = BTreeMap::new();
    // Per attempt validated valid: the redb sync count just before its validation began.
    let mut valid_at: BTreeMap<(String, String, u32), u64> = BTreeMap::new();
    let (mut begins, mut cleanup_dir_syncs) = (0, 0);
    for op in testing::scripted_workload() {
        log.borrow_mut().clear();
        let redb_syncs_before = backend.op_counts().2;
        let outcome = recorded(&backend, &log, || testing::apply(&store, op));
        let events = log.borrow().clone();
        for (event, redb_syncs) in &events {
            first_synced.entry(event.path.clone()).or_insert((event.directory, *redb_syncs));
        }
        match (op, outcome.as_deref()) {
            (Op::Validate { run, part, attempt }, Ok("true")) => {
                assert!(backend.op_counts().2 > redb_syncs_before, "the verdict was committed");
                assert!(!events.is_empty(), "a valid verdict is stored only after syncs");
                for (event, redb_syncs) in &events {
                    assert_eq!(*redb_syncs, redb_syncs_before, "{event:?} was synced after the verdict's commit began");
                }
                valid_at.insert((testing::run_id(run), testing::partition_key(part), attempt), redb_syncs_before);
            }
            (Op::Begin { run, part }, Ok(summary)) => {
                let attempt: u32 = summary.trim_start_matches("attempt ").parse().unwrap();
                let task = TaskKey::new(testing::DATASET, testing::run_id(run), testing::partition_key(part));
                let info = store.snapshot().unwrap().attempt(&task.attempt(attempt)).unwrap().unwrap();
                let dir = root.join(&info.staging_rel);
                let synced: BTreeSet<&Path> = events.iter().filter(|(e, _)| e.directory).map(|(e, _)| e.path.as_path()).collect();
                assert!(synced.contains(dir.as_path()), "begin synced its new directory {}: {synced:?}", dir.display());
                assert!(synced.contains(dir.parent().unwrap()), "begin synced the parent of {}", dir.display());
                begins += 1;
            }
            (Op::ApplyCleanup, Ok(summary)) if !summary.starts_with("deleted 0 ") => {
                let dirs = events.iter().filter(|(e, _)| e.directory).count();
                assert!(dirs > 0, "cleanup that deleted files synced their directories: {summary}");
                cleanup_dir_syncs += dirs;
            }
            _ => {}
        }
    }
    // Every file of every retained generation, and every directory up to the root.
    let snapshot = store.snapshot().unwrap();
    let mut checked_files = 0;
    for generation in snapshot.history(testing::DATASET).unwrap() {
        let manifest = snapshot.manifest(testing::DATASET, Some(generation.number)).unwrap().unwrap();
        for entry in manifest.partitions {
            let before = valid_at[&(entry.run.clone(), entry.partition.clone(), entry.attempt)];
            let attempt_dir = root.join(&entry.staging_rel);
            for file in &entry.files {
                let path = attempt_dir.join(&file.path);
                let (directory, at) = first_synced.get(&path).copied().unwrap_or_else(|| panic!("{} was never synced", path.display()));
                assert!(!directory && at <= before, "{} synced as a file before the commit of its verdict", path.display());
                let mut dir = path.parent().unwrap();
                loop {
                    let (directory, at) =
                        first_synced.get(dir).copied().unwrap_or_else(|| panic!("directory {} was never synced", dir.display()));
                    assert!(directory && at <= before, "{} synced before the commit of the verdict", dir.display());
                    if dir == root {
                        break;
                    }
                    dir = dir.parent().unwrap();
                }
                checked_files += 1;
            }
        }
    }
    assert!(checked_files >= 4 && begins >= 10 && cleanup_dir_syncs > 0, "{checked_files} files, {begins} begins, {cleanup_dir_syncs}");
}

fn failing(predicate: impl Fn(&SyncEvent) -> bool + 'static) -> impl Fn(&SyncEvent) -> io::Result<()> + 'static {
    move |event| if predicate(event) { Err(io::Error::other("injected EIO")) } else { Ok(()) }
}

#[test]
fn a_candidate_whose_file_or_directory_cannot_be_synced_is_refused_and_a_retry_is_accepted() {
    let ts = TestStore::new();
    let store = &ts.store;
    store.declare_run(&run_spec("d", "r1", "s1", &[("p=a", 3, 30), ("p=b", 3, 30)])).unwrap();
    for (partition, fail_dirs) in [("p=a", false), ("p=b", true)] {
        let task = TaskKey::new("d", "r1", partition);
        let first = store.begin_attempt(&task).unwrap();
        let file = write_rows(&first.staging_dir, 3, 30);
        store.finish_attempt(&first.key, &candidate("s1", 3, 30, file)).unwrap();
        let verdict = testing::observe_syncs(failing(move |e| e.directory == fail_dirs), || {
            store.validate_attempt(&first.key, FileCheck::SizeAndChecksum)
        })
        .unwrap();
        match &verdict {
            Verdict::Invalid(failures) => assert!(
                failures
                    .iter()
                    .all(|f| matches!(f, GateFailure::FileUnreadable { message, .. } if message.contains("could not be made durable"))),
                "{failures:?}"
            ),
            Verdict::Valid => panic!("a candidate whose sync failed was accepted"),
        }
        assert_eq!(store.snapshot().unwrap().accepted(&task).unwrap(), None);
        // The verdict is final; the task is retried with a new attempt, which is accepted.
        let second = store.begin_attempt(&task).unwrap();
        let file = write_rows(&second.staging_dir, 3, 30);
        store.finish_attempt(&second.key, &candidate("s1", 3, 30, file)).unwrap();
        assert_eq!(store.validate_attempt(&second.key, FileCheck::SizeAndChecksum).unwrap(), Verdict::Valid);
        assert_eq!(store.snapshot().unwrap().accepted(&task).unwrap(), Some(second.key.attempt));
    }
}

#[test]
fn store_creation_syncs_every_directory_it_makes_and_fails_when_any_of_its_syncs_fails() {
    if crate::support::redb_only("about the crash-safe creation of the redb file") {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let events = |dir: &Path| {
        let log: Rc<RefCell<Vec<SyncEvent>>> = Rc::default();
        let log_in = Rc::clone(&log);
        let opened = testing::observe_syncs(
            move |event| {
                log_in.borrow_mut().push(event.clone());
                Ok(())
            },
            || Store::open(dir.join("meta/store.redb"), dir.join("data/staging")),
        );
        opened.unwrap().close().unwrap();
        log.take()
    };
    let clean = base.path().join("clean");
    let seen = events(&clean);
    let synced_dirs: BTreeSet<PathBuf> = seen.iter().filter(|e| e.directory).map(|e| e.path.clone()).collect();
    // The parent of every directory made (base/clean, base/clean/data, .../staging, .../meta).
    for dir in [base.path(), &clean, &clean.join("data"), &clean.join("meta")] {
        assert!(synced_dirs.contains(dir), "{} synced: {synced_dirs:?}", dir.display());
    }
    assert!(seen.iter().any(|e| !e.directory && e.path.parent() == Some(&clean.join("meta"))), "the new store file is synced");
    // Reopening an existing store creates nothing and syncs nothing.
    assert!(events(&clean).is_empty(), "an existing store costs no sync at open");
    for n in 0..seen.len() {
        let dir = base.path().join(format!("fail-{n}"));
        let count = Rc::new(RefCell::new(0usize));
        let count_in = Rc::clone(&count);
        let opened = testing::observe_syncs(
            move |_| {
                let mut seen = count_in.borrow_mut();
                *seen += 1;
                if *seen == n + 1 { Err(io::Error::other("injected EIO")) } else { Ok(()) }
            },
            || Store::open(dir.join("meta/store.redb"), dir.join("data/staging")),
        );
        let err = opened.expect_err("creation whose sync failed must fail");
        assert!(err.to_string().contains("injected EIO"), "sync {n} ({:?}): {err}", seen[n]);
    }
}

//! Published data is durable (DOMAIN 11), observed through the store's sync seam
//! (`manifestdb::testing::observe_syncs`, which sees every sync of staging data, a new store
//! file and its directories just before it runs, and can fail it).
//!
//! - Over the scripted workload on the fault-injecting backend (shipped mode): every file of
//!   every retained generation, and every directory from the file's own up to the staging
//!   root, was synced before the redb commit that stored its attempt's Valid verdict; a
//!   `begin_attempt` syncs nothing; cleanup synced the directories it removed entries from.
//! - Each directory on the way to a valid candidate's file was synced after the entry below it
//!   on that way was made (so its entry is durable), each file after it was written, all before
//!   the verdict's commit: a validation that skipped the sync of the file, of its attempt
//!   directory, or of a directory whose new entry it needs fails this, while directories this
//!   handle made durable earlier need no second sync.
//! - A failed sync of a candidate's file or directory refuses the candidate (no Valid verdict).
//! - Store creation syncs the parent of every directory it makes and fails when any of its
//!   syncs fails.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use manifestdb::testing::{self, FaultyBackend, Op, SyncEvent};
use manifestdb::{FileCheck, FileEntry, GateFailure, Store, StoreOptions, TaskKey, Verdict};

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
            (Op::Validate { run, part, attempt } | Op::FinishValidate { run, part, attempt, .. }, Ok("true")) => {
                assert!(backend.op_counts().2 > redb_syncs_before, "the verdict was committed");
                assert!(!events.is_empty(), "a valid verdict is stored only after syncs");
                for (event, redb_syncs) in &events {
                    assert_eq!(*redb_syncs, redb_syncs_before, "{event:?} was synced after the verdict's commit began");
                }
                valid_at.insert((testing::run_id(run), testing::partition_key(part), attempt), redb_syncs_before);
            }
            (Op::Begin { .. }, Ok(_)) => {
                assert!(events.is_empty(), "a begin syncs nothing: {events:?}");
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

/// Every file and directory below `root` with its inode.
fn tree(root: &Path) -> BTreeMap<PathBuf, u64> {
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                todo.push(entry.path());
            }
            out.insert(entry.path(), meta.ino());
        }
    }
    out
}

#[test]
fn each_directory_on_the_way_to_a_valid_file_was_synced_after_its_entry_was_made() {
    if crate::support::redb_only("runs the scripted workload on redb's fault-injecting storage backend") {
        return;
    }
    let backend = FaultyBackend::new();
    let staging = tempfile::tempdir().unwrap();
    let store = Store::open_with_backend(backend.clone(), staging.path(), &StoreOptions::default()).unwrap();
    let root = store.staging_root().to_path_buf();
    let log: Log = Rc::default();
    // Per path: the op that made it (its current inode), and per path the ops that synced it.
    let mut made_at: BTreeMap<PathBuf, usize> = BTreeMap::new();
    let mut synced_at: BTreeMap<PathBuf, Vec<usize>> = BTreeMap::new();
    let mut seen = tree(&root);
    let (mut checked, mut retries_checked) = (0, 0);
    for (i, op) in testing::scripted_workload().into_iter().enumerate() {
        log.borrow_mut().clear();
        let redb_syncs_before = backend.op_counts().2;
        let outcome = recorded(&backend, &log, || testing::apply(&store, op));
        for (event, redb_syncs) in log.borrow().iter() {
            assert_eq!(*redb_syncs, redb_syncs_before, "{event:?} ran before the op's first commit");
            synced_at.entry(event.path.clone()).or_default().push(i);
        }
        let now = tree(&root);
        for (path, inode) in &now {
            if seen.get(path) != Some(inode) {
                made_at.insert(path.clone(), i);
            }
        }
        seen = now;
        let (Op::Validate { run, part, attempt } | Op::FinishValidate { run, part, attempt, .. }, Ok("true")) = (op, outcome.as_deref())
        else {
            continue;
        };
        let key = TaskKey::new(testing::DATASET, testing::run_id(run), testing::partition_key(part)).attempt(attempt);
        let info = store.snapshot().unwrap().attempt(&key).unwrap().unwrap();
        let attempt_dir = root.join(&info.staging_rel);
        for file in &info.candidate.unwrap().files {
            // The way down: the file, then each directory up to the root, each with its child.
            let mut below = attempt_dir.join(&file.path);
            let synced_since =
                |path: &Path, since: usize| synced_at.get(path).is_some_and(|ops| ops.iter().any(|&at| at >= since && at <= i));
            assert!(synced_since(&below, made_at[&below]), "op {i}: {} was not synced after it was written", below.display());
            while let Some(dir) = below.parent() {
                let made = made_at[&below];
                assert!(
                    synced_since(dir, made),
                    "op {i} ({op:?}): {} was not synced after its entry {} was made (op {made}); synced at {:?}",
                    dir.display(),
                    below.display(),
                    synced_at.get(dir)
                );
                if dir == root {
                    break;
                }
                below = dir.to_path_buf();
            }
            checked += 1;
            if attempt > 1 {
                retries_checked += 1;
            }
        }
    }
    assert!(checked >= 6 && retries_checked >= 2, "{checked} files checked, {retries_checked} of retries");
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

/// The staging syncs of one call, in order: (path, directory).
fn syncs_of<R>(body: impl FnOnce() -> R) -> (R, Vec<(PathBuf, bool)>) {
    let log: Rc<RefCell<Vec<(PathBuf, bool)>>> = Rc::default();
    let log_in = Rc::clone(&log);
    let out = testing::observe_syncs(
        move |event| {
            log_in.borrow_mut().push((event.path.clone(), event.directory));
            Ok(())
        },
        body,
    );
    (out, log.take())
}

/// What the handle remembers as durable spares only what is still the same directory: the
/// declare makes the task's directory and syncs the parent of each directory it made, deepest
/// first; the first attempt then syncs its file, its attempt directory and the task's directory
/// (the attempt directory's new entry) and nothing above, as a retry does; a task directory
/// removed and made again (here by hand, where inode numbers are reused at once) has its new
/// entry synced again.
#[test]
fn a_first_attempt_and_a_retry_sync_only_what_is_new_and_a_directory_made_again_is_synced_again() {
    let ts = TestStore::new();
    let store = &ts.store;
    let root = store.staging_root().to_path_buf();
    let run_dir = root.join("d/r1");
    let (declared, synced) = syncs_of(|| store.declare_run(&run_spec("d", "r1", "s1", &[("p=a", 3, 30)])).unwrap());
    assert_eq!(declared, manifestdb::DeclareOutcome::Declared);
    assert!(run_dir.join("p=a").is_dir(), "the declare made the task's directory");
    assert_eq!(
        synced,
        vec![(run_dir.clone(), true), (root.join("d"), true), (root.clone(), true)],
        "the declare: the parent of each directory it made, deepest first"
    );
    let (_, synced) = syncs_of(|| store.declare_run(&run_spec("d", "r1", "s1", &[("p=a", 3, 30)])).unwrap());
    assert!(synced.is_empty(), "a re-declaration makes and syncs nothing: {synced:?}");
    let task = TaskKey::new("d", "r1", "p=a");
    let attempt = |expect_valid: bool| {
        let ticket = store.begin_attempt(&task).unwrap();
        let file = write_rows(&ticket.staging_dir, 3, 30);
        store.finish_attempt(&ticket.key, &candidate("s1", 3, 30, file)).unwrap();
        let (verdict, synced) = syncs_of(|| store.validate_attempt(&ticket.key, FileCheck::Size).unwrap());
        assert_eq!(verdict.is_valid(), expect_valid);
        (ticket.staging_dir, synced)
    };
    let (first, synced) = attempt(true);
    assert_eq!(
        synced,
        vec![(first.join("part.csv"), false), (first.clone(), true), (run_dir.join("p=a"), true)],
        "the first attempt: its file, its attempt directory and the task's directory"
    );
    let (second, synced) = attempt(true);
    assert_eq!(
        synced,
        vec![(second.join("part.csv"), false), (second.clone(), true), (run_dir.join("p=a"), true)],
        "a retry: its file, its attempt directory and the task's directory"
    );
    // The task's directory removed and made again by the next begin: a new directory, whose
    // entry in the run directory is not durable yet.
    std::fs::remove_dir_all(run_dir.join("p=a")).unwrap();
    let (third, synced) = attempt(true);
    assert_eq!(
        synced,
        vec![(third.join("part.csv"), false), (third.clone(), true), (run_dir.join("p=a"), true), (run_dir.clone(), true)],
        "the task directory made again: its entry in the run directory is synced again"
    );
}

/// A run declared through another handle (or before this one opened) left nothing in this
/// handle's record: its first validation syncs the file and every directory up to the root.
/// A declare of nested partitions syncs each directory holding a new entry once, children
/// before parents, and only those whose entries are new.
#[test]
fn a_declare_syncs_each_new_entry_once_and_another_handle_syncs_the_whole_chain() {
    let ts = TestStore::new();
    let root = ts.store.staging_root().to_path_buf();
    let tasks = [("date=1/region=eu", 3, 30), ("date=1/region=us", 3, 30), ("date=2/region=eu", 3, 30)];
    let (_, synced) = syncs_of(|| ts.store.declare_run(&run_spec("d", "r1", "s1", &tasks)).unwrap());
    let run_dir = root.join("d/r1");
    assert_eq!(
        synced,
        vec![
            (run_dir.join("date=1"), true),
            (run_dir.join("date=2"), true),
            (run_dir.clone(), true),
            (root.join("d"), true),
            (root.clone(), true)
        ],
        "each directory holding a new entry, once, after its children"
    );
    // A second run of the dataset: the dataset's directory is known durable, the root is not
    // synced again.
    let (_, synced) = syncs_of(|| ts.store.declare_run(&run_spec("d", "r2", "s1", &[("p=a", 3, 30)])).unwrap());
    assert_eq!(synced, vec![(root.join("d/r2"), true), (root.join("d"), true)], "only the new entries' directories");
    // Another handle on the same store: nothing recorded, the whole chain is synced.
    let ts = ts.reopen();
    let store = &ts.store;
    let task = TaskKey::new("d", "r1", "date=2/region=eu");
    let ticket = store.begin_attempt(&task).unwrap();
    let file = write_rows(&ticket.staging_dir, 3, 30);
    store.finish_attempt(&ticket.key, &candidate("s1", 3, 30, file)).unwrap();
    let (verdict, synced) = syncs_of(|| store.validate_attempt(&ticket.key, FileCheck::Size).unwrap());
    assert!(verdict.is_valid());
    let task_dir = run_dir.join("date=2/region=eu");
    assert_eq!(
        synced,
        vec![
            (ticket.staging_dir.join("part.csv"), false),
            (ticket.staging_dir.clone(), true),
            (task_dir.clone(), true),
            (run_dir.join("date=2"), true),
            (run_dir.clone(), true),
            (root.join("d"), true),
            (root.clone(), true),
        ],
        "a handle that made nothing durable syncs the whole chain"
    );
}

/// A symlink or a file where a task's directory goes refuses the declare before anything is
/// written, and nothing is made through the link.
#[test]
fn a_declare_refuses_a_symlink_or_a_file_on_a_tasks_way_and_writes_nothing() {
    let ts = TestStore::new();
    let root = ts.store.staging_root().to_path_buf();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.join("d/r1")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("d/r1/p=a")).unwrap();
    std::fs::create_dir_all(root.join("d/r2")).unwrap();
    std::fs::write(root.join("d/r2/p=a"), b"x").unwrap();
    for (run, why) in [("r1", "symlink"), ("r2", "not a directory")] {
        let err = ts.store.declare_run(&run_spec("d", run, "s1", &[("p=a/q=1", 3, 30)])).unwrap_err();
        assert!(matches!(err, manifestdb::Error::InvalidInput { .. }) && err.to_string().contains(why), "{run}: {err}");
        assert!(ts.store.snapshot().unwrap().run("d", run).unwrap().is_none(), "{run} was not declared");
    }
    assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none(), "nothing was made through the link");
}

/// `finish_and_validate`: one call records the candidate and stores its verdict; the files of
/// a valid candidate are synced before that one commit; calling again returns the stored
/// verdict; another candidate is refused; an invalid candidate is stored invalid.
#[test]
fn finish_and_validate_records_and_judges_in_one_commit_after_the_syncs() {
    if crate::support::redb_only("counts the commits of redb's fault-injecting backend") {
        return;
    }
    let backend = FaultyBackend::new();
    let staging = tempfile::tempdir().unwrap();
    let store = Store::open_with_backend(backend.clone(), staging.path(), &StoreOptions::default()).unwrap();
    store.declare_run(&run_spec("d", "r1", "s1", &[("p=a", 3, 30), ("p=b", 3, 30)])).unwrap();
    let task = TaskKey::new("d", "r1", "p=a");
    let ticket = store.begin_attempt(&task).unwrap();
    let file = write_rows(&ticket.staging_dir, 3, 30);
    let good = candidate("s1", 3, 30, file.clone());
    let log: Log = Rc::default();
    let before = backend.op_counts().2;
    let verdict = recorded(&backend, &log, || store.finish_and_validate(&ticket.key, &good, FileCheck::SizeAndChecksum)).unwrap();
    assert_eq!(verdict, Verdict::Valid);
    assert_eq!(backend.op_counts().2 - before, 2, "one two-phase commit");
    let events = log.borrow().clone();
    assert!(events.iter().any(|(e, _)| !e.directory && e.path == ticket.staging_dir.join("part.csv")), "the file was synced");
    assert!(events.iter().all(|(_, redb)| *redb == before), "every staging sync came before the commit: {events:?}");
    let info = store.snapshot().unwrap().attempt(&ticket.key).unwrap().unwrap();
    assert_eq!(info.candidate.as_ref(), Some(&good));
    assert_eq!(store.snapshot().unwrap().accepted(&task).unwrap(), Some(ticket.key.attempt));
    // Again: the stored verdict, nothing written.
    let before = backend.op_counts();
    assert_eq!(store.finish_and_validate(&ticket.key, &good, FileCheck::Size).unwrap(), Verdict::Valid);
    assert_eq!(backend.op_counts().2, before.2, "nothing committed again");
    // Another candidate for the same attempt is refused.
    let other = candidate("s1", 3, 30, FileEntry { size_bytes: file.size_bytes + 1, ..file });
    let err = store.finish_and_validate(&ticket.key, &other, FileCheck::Size).unwrap_err();
    assert!(matches!(err, manifestdb::Error::CandidateConflict { .. }), "{err}");
    // A candidate whose figures do not match is recorded and stored invalid.
    let task_b = TaskKey::new("d", "r1", "p=b");
    let ticket = store.begin_attempt(&task_b).unwrap();
    let file = write_rows(&ticket.staging_dir, 4, 30);
    let verdict = store.finish_and_validate(&ticket.key, &candidate("s1", 4, 30, file), FileCheck::Size).unwrap();
    assert!(!verdict.is_valid(), "{verdict:?}");
    let info = store.snapshot().unwrap().attempt(&ticket.key).unwrap().unwrap();
    assert!(info.candidate.is_some() && info.status == manifestdb::AttemptStatus::Validated(verdict));
    assert_eq!(store.snapshot().unwrap().accepted(&task_b).unwrap(), None);
    // An attempt never begun.
    let err = store.finish_and_validate(&task_b.attempt(9), &good, FileCheck::Size);
    assert!(matches!(err, Err(manifestdb::Error::UnknownAttempt { .. })), "{err:?}");
}

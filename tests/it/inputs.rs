//! Bad input gets a clear error and writes nothing: traversal in names, unknown runs, tasks
//! and attempts, conflicting declarations and finishes.

use manifestdb::{Candidate, DeclareOutcome, Error, FileCheck, FileEntry, FinishOutcome, TaskKey};

use crate::support::{TestStore, candidate, run_spec, write_rows};

#[test]
fn traversal_absolute_nul_and_overlong_partition_keys_are_refused() {
    let t = TestStore::new();
    let long = "x".repeat(5000);
    for bad in ["../../etc", "a/../../b", "/abs/olute", "nul\0byte", "a//b", ".", long.as_str()] {
        let err = t.store.declare_run(&run_spec("units", "r1", "s1", &[(bad, 1, 1)])).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { what: "partition key", .. }), "{bad:?}: {err}");
    }
    for bad in ["..", "a/b", "", "x\0"] {
        assert!(matches!(t.store.declare_run(&run_spec(bad, "r1", "s1", &[("p", 1, 1)])), Err(Error::InvalidInput { .. })), "{bad:?}");
        assert!(matches!(t.store.declare_run(&run_spec("units", bad, "s1", &[("p", 1, 1)])), Err(Error::InvalidInput { .. })), "{bad:?}");
    }
    // Nothing was declared and nothing left the staging root.
    assert!(t.store.snapshot().unwrap().run("units", "r1").unwrap().is_none());
    assert!(std::fs::read_dir(t.staging()).unwrap().all(|e| e.unwrap().file_name() == manifestdb::STAGING_ROOT_MARKER));
    assert!(!t.dir.path().join("etc").exists());
    // Lookups with such keys are refused too, not turned into paths.
    assert!(matches!(t.store.begin_attempt(&TaskKey::new("units", "r1", "../x")), Err(Error::InvalidInput { .. })));
}

#[test]
fn staging_directories_stay_inside_the_root_and_are_private() {
    let t = TestStore::new();
    let partitions = ["date=2026-11-29/region=eu", "date=2026-11-29/region=eu/@attempt-1", "weird %2F name", "ünïcode"];
    let specs: Vec<(&str, u64, i64)> = partitions.iter().map(|p| (*p, 1, 1)).collect();
    t.store.declare_run(&run_spec("units", "r1", "s1", &specs)).unwrap();
    let mut dirs = Vec::new();
    for p in partitions {
        for _ in 0..2 {
            let ticket = t.store.begin_attempt(&TaskKey::new("units", "r1", p)).unwrap();
            assert!(ticket.staging_dir.starts_with(t.store.staging_root()), "{:?}", ticket.staging_dir);
            assert!(ticket.staging_dir.is_dir());
            dirs.push(ticket.staging_dir);
        }
    }
    for (i, a) in dirs.iter().enumerate() {
        for b in &dirs[i + 1..] {
            assert!(!a.starts_with(b) && !b.starts_with(a), "{a:?} and {b:?} overlap");
        }
    }
}

#[test]
fn a_symlink_in_the_staging_tree_is_refused() {
    let t = TestStore::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.staging().join("units")).unwrap();
    std::os::unix::fs::symlink(outside.path(), t.staging().join("units/r1")).unwrap();
    // The declare makes the task directories: it refuses to make them through the link.
    let err = t.store.declare_run(&run_spec("units", "r1", "s1", &[("p", 1, 1)])).unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }) && err.to_string().contains("symlink"), "{err}");
    // Declared without the link, the run's directory swapped for it afterwards: the begin refuses.
    std::fs::remove_file(t.staging().join("units/r1")).unwrap();
    t.store.declare_run(&run_spec("units", "r1", "s1", &[("p", 1, 1)])).unwrap();
    std::fs::remove_dir_all(t.staging().join("units/r1")).unwrap();
    std::os::unix::fs::symlink(outside.path(), t.staging().join("units/r1")).unwrap();
    let err = t.store.begin_attempt(&TaskKey::new("units", "r1", "p")).unwrap_err();
    assert!(err.to_string().contains("symlink"), "{err}");
    assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none(), "nothing was created outside the root");
}

#[test]
fn unknown_run_task_and_attempt_are_refused() {
    let t = TestStore::new();
    t.store.declare_run(&run_spec("units", "r1", "s1", &[("p", 1, 1)])).unwrap();
    assert!(matches!(t.store.begin_attempt(&TaskKey::new("units", "r9", "p")), Err(Error::UnknownRun { .. })));
    assert!(matches!(t.store.begin_attempt(&TaskKey::new("units", "r1", "q")), Err(Error::UnknownTask { .. })));
    let ghost = TaskKey::new("units", "r1", "p").attempt(7);
    let c = Candidate { snapshot: "s1".into(), rows: Some(1), total: Some(1), digest: Some("d".into()), files: vec![] };
    assert!(matches!(t.store.finish_attempt(&ghost, &c), Err(Error::UnknownAttempt { attempt: 7, .. })));
    assert!(matches!(t.store.validate_attempt(&ghost, FileCheck::Size), Err(Error::UnknownAttempt { .. })));
    assert!(matches!(t.store.publish("units", "r9", &manifestdb::PublishOptions::default()), Err(Error::UnknownRun { .. })));
}

#[test]
fn redeclaring_identically_is_a_no_op_and_differently_an_error() {
    let t = TestStore::new();
    let spec = run_spec("units", "r1", "s1", &[("p", 1, 10), ("q", 2, 20)]);
    assert_eq!(t.store.declare_run(&spec).unwrap(), DeclareOutcome::Declared);
    assert_eq!(t.store.declare_run(&spec).unwrap(), DeclareOutcome::AlreadyDeclared);
    for other in [
        run_spec("units", "r1", "s2", &[("p", 1, 10), ("q", 2, 20)]),
        run_spec("units", "r1", "s1", &[("p", 1, 10)]),
        run_spec("units", "r1", "s1", &[("p", 1, 10), ("q", 2, 21)]),
        run_spec("units", "r1", "s1", &[("p", 1, 10), ("z", 2, 20)]),
    ] {
        assert!(matches!(t.store.declare_run(&other), Err(Error::RunConflict { .. })), "{other:?}");
    }
    assert_eq!(t.store.snapshot().unwrap().run("units", "r1").unwrap().unwrap().snapshot, "s1");
    let dup = run_spec("units", "r2", "s1", &[("p", 1, 10), ("p", 1, 10)]);
    assert!(matches!(t.store.declare_run(&dup), Err(Error::InvalidInput { .. })));
}

#[test]
fn finishing_is_idempotent_and_conflicting_content_is_refused() {
    let t = TestStore::new();
    t.store.declare_run(&run_spec("units", "r1", "s1", &[("p", 3, 30)])).unwrap();
    let ticket = t.store.begin_attempt(&TaskKey::new("units", "r1", "p")).unwrap();
    let file = write_rows(&ticket.staging_dir, 3, 30);
    let c = candidate("s1", 3, 30, file.clone());
    assert_eq!(t.store.finish_attempt(&ticket.key, &c).unwrap(), FinishOutcome::Recorded);
    assert_eq!(t.store.finish_attempt(&ticket.key, &c).unwrap(), FinishOutcome::AlreadyRecorded);
    let mut other = c.clone();
    other.rows = Some(4);
    assert!(matches!(t.store.finish_attempt(&ticket.key, &other), Err(Error::CandidateConflict { .. })));
    let stored = t.store.snapshot().unwrap().attempt(&ticket.key).unwrap().unwrap();
    assert_eq!(stored.candidate, Some(c.clone()));
    // File paths in a candidate must stay inside the staging directory.
    for bad in ["../escape.csv", "/etc/passwd", "a/../../b"] {
        let mut bad_candidate = c.clone();
        bad_candidate.files = vec![FileEntry { path: bad.into(), ..file.clone() }];
        let second = t.store.begin_attempt(&TaskKey::new("units", "r1", "p")).unwrap();
        let err = t.store.finish_attempt(&second.key, &bad_candidate).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { what: "file path", .. }), "{bad}: {err}");
    }
}

#[test]
fn validating_an_unfinished_attempt_is_refused() {
    let t = TestStore::new();
    t.store.declare_run(&run_spec("units", "r1", "s1", &[("p", 1, 1)])).unwrap();
    let ticket = t.store.begin_attempt(&TaskKey::new("units", "r1", "p")).unwrap();
    assert!(matches!(t.store.validate_attempt(&ticket.key, FileCheck::Size), Err(Error::AttemptState { state: "running", .. })));
}

/// Issue 32, item 7: what a writable open creates (the store's directory, the store file, the
/// staging root, the view root) is the owner's only by default, whatever the umask, so another
/// local user cannot read the store through its files; `group_access` opens it to the owner's
/// group (as a server's `socket_group_access` does its socket). What exists keeps its mode.
#[test]
fn a_new_store_its_staging_root_and_view_root_are_private_unless_group_access_is_asked() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    for (group_access, dir_mode, file_mode) in [(false, 0o700, 0o600), (true, 0o770, 0o660)] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("new/store");
        let options = manifestdb::StoreOptions {
            group_access,
            views: Some(manifestdb::ViewOptions::hard_links(tmp.path().join("views/daily")).with_trees(manifestdb::ViewTrees::All)),
            ..manifestdb::StoreOptions::default()
        };
        let store = manifestdb::Store::open_with_options(dir.join("store.redb"), dir.join("staging"), &options).unwrap();
        store.close().unwrap();
        for made in [tmp.path().join("new"), dir.clone(), dir.join("staging"), tmp.path().join("views"), tmp.path().join("views/daily")] {
            assert_eq!(mode(&made), dir_mode, "group access {group_access}: {}", made.display());
        }
        assert_eq!(mode(&dir.join("store.redb")), file_mode, "group access {group_access}: the store file");
        // An existing staging root keeps its mode.
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
        let other =
            manifestdb::Store::open_with_options(tmp.path().join("other.redb"), &shared, &manifestdb::StoreOptions::default()).unwrap();
        other.close().unwrap();
        assert_eq!(mode(&shared), 0o755, "an existing directory keeps its mode");
        assert_eq!(mode(&tmp.path().join("other.redb")), 0o600);
    }
}

//! The holes issue 11 found in the rules, each pinned: determinism against the digest the
//! partition currently holds, files lost after validation (refused at publish, then an
//! operator's invalidation), transient I/O errors during validation, symlinks in
//! `describe_file`, every task's staging path at declaration, the abandoned status, explicit
//! abandonment, and heartbeats of attempts whose run is published.

use std::os::unix::process::CommandExt;
use std::path::Path;

use manifestdb::{
    AbandonOutcome, AttemptStatus, Candidate, Error, FileCheck, GateFailure, InvalidateOutcome, PublishOptions, PublishOutcome,
    RefusalReason, RollbackOutcome, Store, TaskKey, Verdict, describe_file,
};

use crate::support::{TestStore, run_attempt, run_spec, write_rows};

fn declare(store: &Store, run: &str, snapshot: &str) {
    store.declare_run(&run_spec("units", run, snapshot, &[("p", 2, 10)])).expect("declare");
}

/// A valid attempt of `run` whose candidate carries `digest`.
fn attempt_with_digest(store: &Store, run: &str, snapshot: &str, digest: &str) -> u32 {
    let task = TaskKey::new("units", run, "p");
    let ticket = store.begin_attempt(&task).expect("begin");
    let file = write_rows(&ticket.staging_dir, 2, 10);
    let candidate = Candidate { snapshot: snapshot.into(), rows: Some(2), total: Some(10), digest: Some(digest.into()), files: vec![file] };
    store.finish_attempt(&ticket.key, &candidate).expect("finish");
    assert!(store.validate_attempt(&ticket.key, FileCheck::SizeAndChecksum).expect("validate").is_valid());
    ticket.key.attempt
}

fn publish(store: &Store, run: &str, reason: Option<&str>) -> PublishOutcome {
    store.publish("units", run, &PublishOptions { accept_nondeterminism: reason.map(str::to_owned) }).expect("publish")
}

fn refused_as_nondeterministic(outcome: &PublishOutcome) -> Option<String> {
    match outcome {
        PublishOutcome::Refused(refusal) => match &refusal.tasks[0].reason {
            RefusalReason::Nondeterministic { published_digest, .. } => Some(published_digest.clone()),
            _ => None,
        },
        _ => None,
    }
}

#[test]
fn determinism_compares_with_what_the_partition_currently_holds_from_the_snapshot() {
    let t = TestStore::new();
    let store = &t.store;
    for (run, digest) in [("r1", "d1"), ("r2", "d2"), ("r3", "d2"), ("r4", "d1"), ("r5", "d1"), ("r6", "d2")] {
        declare(store, run, "s");
        attempt_with_digest(store, run, "s", digest);
    }
    assert!(matches!(publish(store, "r1", None), PublishOutcome::Published(ref g) if g.number == 1));
    assert_eq!(refused_as_nondeterministic(&publish(store, "r2", None)).as_deref(), Some("d1"));
    assert!(matches!(publish(store, "r2", Some("fixed a rounding bug")), PublishOutcome::Published(ref g) if g.number == 2));
    // The override made d2 the current content: reproducing it publishes, reproducing the
    // superseded d1 is flagged.
    assert!(matches!(publish(store, "r3", None), PublishOutcome::Published(ref g) if g.number == 3), "reproducing current content");
    assert_eq!(refused_as_nondeterministic(&publish(store, "r4", None)).as_deref(), Some("d2"), "reproducing superseded content");
    // A rollback to generation 1 makes d1 current again: now d1 reproduces, d2 is flagged.
    assert!(matches!(store.rollback("units", 1, "alice", "d2 was wrong after all").expect("rollback"), RollbackOutcome::RolledBack(_)));
    assert!(matches!(publish(store, "r5", None), PublishOutcome::Published(_)));
    assert_eq!(refused_as_nondeterministic(&publish(store, "r6", None)).as_deref(), Some("d1"));
}

#[test]
fn a_lost_file_is_refused_at_publish_and_an_operator_invalidation_lets_the_next_valid_attempt_publish() {
    let t = TestStore::new();
    let store = &t.store;
    declare(store, "r1", "s");
    let task = TaskKey::new("units", "r1", "p");
    let first = run_attempt(store, &task, "s", 2, 10);
    let second = run_attempt(store, &task, "s", 2, 10);
    for ticket in [&first, &second] {
        assert!(store.validate_attempt(&ticket.key, FileCheck::Size).expect("validate").is_valid());
    }
    std::fs::remove_file(first.staging_dir.join("part.csv")).expect("lose the file");
    let PublishOutcome::Refused(refusal) = publish(store, "r1", None) else { panic!("published a missing file") };
    assert!(
        matches!(&refusal.tasks[0].reason, RefusalReason::Gate { attempt: 1, failures } if failures == &[GateFailure::FileMissing { path: "part.csv".into() }]),
        "{refusal}"
    );
    assert!(refusal.to_string().contains("part.csv"), "{refusal}");
    // A changed size is refused the same way.
    std::fs::write(second.staging_dir.join("part.csv"), "truncated").expect("damage");
    store.invalidate_attempt(&first.key, "alice", "part.csv deleted by a disk cleanup").expect("invalidate");
    let PublishOutcome::Refused(refusal) = publish(store, "r1", None) else { panic!("published a resized file") };
    assert!(
        matches!(&refusal.tasks[0].reason, RefusalReason::Gate { attempt: 2, failures } if matches!(failures[0], GateFailure::FileSizeMismatch { .. })),
        "{refusal}"
    );
    // Invalidating attempt 2 too leaves no accepted attempt; a new attempt takes over.
    let outcome = store.invalidate_attempt(&second.key, "alice", "part.csv truncated").expect("invalidate");
    assert_eq!(outcome, InvalidateOutcome::Invalidated { accepted_before: Some(2), accepted_after: None });
    assert_eq!(store.invalidate_attempt(&second.key, "alice", "again").expect("again"), InvalidateOutcome::AlreadyInvalid);
    let third = run_attempt(store, &task, "s", 2, 10);
    assert!(store.validate_attempt(&third.key, FileCheck::Size).expect("validate").is_valid());
    assert_eq!(store.snapshot().expect("snapshot").accepted(&task).expect("accepted"), Some(3));
    let PublishOutcome::Published(generation) = publish(store, "r1", None) else { panic!("not published") };
    let manifest = store.snapshot().expect("snapshot").manifest("units", Some(generation.number)).expect("manifest").expect("some");
    assert_eq!(manifest.partitions[0].attempt, 3);
    // The invalidation is recorded with actor and reason; a published run refuses more.
    let info = store.snapshot().expect("snapshot").attempt(&first.key).expect("read").expect("attempt");
    assert!(
        matches!(&info.status, AttemptStatus::Validated(Verdict::Invalid(f)) if matches!(&f[0], GateFailure::Invalidated { actor, reason, .. } if actor == "alice" && reason.contains("disk cleanup"))),
        "{:?}",
        info.status
    );
    assert!(matches!(store.invalidate_attempt(&third.key, "alice", "late"), Err(Error::RunPublished { .. })));
}

#[test]
fn invalidating_the_accepted_attempt_moves_acceptance_to_the_next_valid_one() {
    let t = TestStore::new();
    let store = &t.store;
    declare(store, "r1", "s");
    let task = TaskKey::new("units", "r1", "p");
    let tickets: Vec<_> = (0..3).map(|_| run_attempt(store, &task, "s", 2, 10)).collect();
    for ticket in tickets.iter().rev() {
        assert!(store.validate_attempt(&ticket.key, FileCheck::Size).expect("validate").is_valid());
    }
    let outcome = store.invalidate_attempt(&tickets[0].key, "bob", "files lost").expect("invalidate");
    assert_eq!(outcome, InvalidateOutcome::Invalidated { accepted_before: Some(1), accepted_after: Some(2) });
    std::fs::remove_file(tickets[0].staging_dir.join("part.csv")).expect("lose");
    let PublishOutcome::Published(generation) = publish(store, "r1", None) else { panic!("not published") };
    let manifest = store.snapshot().expect("snapshot").manifest("units", Some(generation.number)).expect("manifest").expect("some");
    assert_eq!(manifest.partitions[0].attempt, 2);
}

/// Validates attempt 1 of `units/r1/p` in the store at `location` with its staging root under
/// `dir` (for the child process).
fn validate_in(location: &Path, dir: &Path) -> Result<Verdict, Error> {
    let store = Store::open(location, dir.join("staging"))?;
    store.validate_attempt(&TaskKey::new("units", "r1", "p").attempt(1), FileCheck::Size)
}

#[test]
#[ignore = "the child process of the permission test; does nothing unless started by it"]
fn child_validates_without_permission() {
    let Some(dir) = std::env::var_os("MANIFESTDB_RULE_HOLES_DIR") else { return };
    let location = std::env::var_os("MANIFESTDB_RULE_HOLES_STORE").expect("the store's location");
    match validate_in(Path::new(&location), Path::new(&dir)) {
        Err(Error::Io { .. }) => std::process::exit(0),
        other => {
            eprintln!("expected an I/O error, got {other:?}");
            std::process::exit(1)
        }
    }
}

#[test]
fn a_permission_error_during_validation_is_an_error_to_retry_never_a_verdict() {
    use std::os::unix::fs::PermissionsExt;
    let t = TestStore::new();
    declare(&t.store, "r1", "s");
    let ticket = run_attempt(&t.store, &TaskKey::new("units", "r1", "p"), "s", 2, 10);
    let dir = t.dir.path().to_path_buf();
    let location = t.db_path();
    let attempt_dir = ticket.staging_dir.clone();
    std::fs::set_permissions(&attempt_dir, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    // `/proc/self` belongs to the effective user.
    if std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("/proc/self")) == 0 {
        // Root reads through any permission: validate in a child process that is not root.
        drop(t.store);
        for path in [dir.clone(), dir.join("staging")] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        }
        let mut walk = vec![dir.join("staging")];
        while let Some(d) = walk.pop() {
            for entry in std::fs::read_dir(&d).expect("list") {
                let path = entry.expect("entry").path();
                if path == attempt_dir {
                    continue;
                }
                let mode = if path.is_dir() { 0o777 } else { 0o666 };
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
                if path.is_dir() {
                    walk.push(path);
                }
            }
        }
        if !crate::support::on_postgres() {
            std::fs::set_permissions(&location, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        }
        let status = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--ignored", "--exact", "rule_holes::child_validates_without_permission", "--nocapture"])
            .env("MANIFESTDB_RULE_HOLES_DIR", &dir)
            .env("MANIFESTDB_RULE_HOLES_STORE", &location)
            .uid(65534)
            .gid(65534)
            .status()
            .expect("start the child");
        assert!(status.success(), "the child did not get an I/O error: {status}");
    } else {
        assert!(matches!(validate_in_store(&t.store), Err(Error::Io { .. })));
        drop(t.store);
    }
    // No verdict was stored: once the permission is back, the same attempt validates.
    std::fs::set_permissions(&attempt_dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    assert_eq!(validate_in(&location, &dir).expect("validate again"), Verdict::Valid);
}

fn validate_in_store(store: &Store) -> Result<Verdict, Error> {
    store.validate_attempt(&TaskKey::new("units", "r1", "p").attempt(1), FileCheck::Size)
}

#[test]
fn describe_file_refuses_symlinks_as_validation_does() {
    let t = TestStore::new();
    declare(&t.store, "r1", "s");
    let ticket = t.store.begin_attempt(&TaskKey::new("units", "r1", "p")).expect("begin");
    std::os::unix::fs::symlink("/etc/passwd", ticket.staging_dir.join("passwd")).expect("symlink");
    std::os::unix::fs::symlink("/etc", ticket.staging_dir.join("etc")).expect("symlink");
    for path in ["passwd", "etc/passwd"] {
        let err = describe_file(&ticket.staging_dir, path).expect_err("a symlink was followed");
        assert!(matches!(err, Error::InvalidInput { .. }), "{path}: {err}");
    }
    assert!(matches!(describe_file(&ticket.staging_dir, "absent.csv"), Err(Error::Io { .. })));
    std::fs::write(ticket.staging_dir.join("ok.csv"), "a,b\n").expect("write");
    assert_eq!(describe_file(&ticket.staging_dir, "ok.csv").expect("describe").size_bytes, 4);
}

#[test]
fn declare_run_checks_the_staging_path_of_every_task() {
    let t = TestStore::new();
    // Eleven components of 85 bytes that each encode to 255: within the partition limits,
    // but the staging path is too long.
    let long: Vec<String> = (0..11).map(|i| format!("{i}{}", "~".repeat(84))).collect();
    let long = long.join("/");
    let dataset = "d".repeat(200);
    let run = "r".repeat(200);
    let spec = manifestdb::RunSpec {
        dataset: dataset.clone(),
        run: run.clone(),
        snapshot: "s".into(),
        tasks: vec![
            manifestdb::TaskSpec { partition: "short".into(), expected_rows: 1, expected_total: None },
            manifestdb::TaskSpec { partition: long, expected_rows: 1, expected_total: None },
        ],
        grain: None,
        trust_reported_figures: true,
    };
    let err = t.store.declare_run(&spec).expect_err("the second task could never begin");
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert!(t.store.snapshot().expect("snapshot").run(&dataset, &run).expect("read").is_none());
}

#[test]
fn an_attempt_abandoned_explicitly_reads_as_abandoned_and_is_fenced_at_once() {
    let t = TestStore::new();
    let store = &t.store;
    declare(store, "r1", "s");
    let task = TaskKey::new("units", "r1", "p");
    let ticket = store.begin_attempt(&task).expect("begin");
    let AbandonOutcome::Abandoned { abandoned_at_ms } = store.abandon_attempt(&ticket.key).expect("abandon") else { panic!() };
    assert_eq!(store.abandon_attempt(&ticket.key).expect("again"), AbandonOutcome::AlreadyAbandoned { abandoned_at_ms });
    let info = store.snapshot().expect("snapshot").attempt(&ticket.key).expect("read").expect("attempt");
    assert_eq!(info.status, AttemptStatus::Abandoned { abandoned_at_ms });
    assert!(matches!(store.heartbeat(&ticket.key), Err(Error::AttemptAbandoned { .. })));
    let file = write_rows(&ticket.staging_dir, 2, 10);
    let candidate = Candidate { snapshot: "s".into(), rows: Some(2), total: Some(10), digest: Some("d".into()), files: vec![file] };
    assert!(matches!(store.finish_attempt(&ticket.key, &candidate), Err(Error::AttemptAbandoned { .. })));
    assert!(matches!(store.validate_attempt(&ticket.key, FileCheck::Size), Err(Error::AttemptAbandoned { .. })));
    let PublishOutcome::Refused(refusal) = publish(store, "r1", None) else { panic!("published") };
    assert!(refusal.to_string().contains("attempt 1 abandoned"), "{refusal}");
    // A finished attempt is not abandoned (it is invalidated instead).
    let finished = run_attempt(store, &task, "s", 2, 10);
    assert!(matches!(store.abandon_attempt(&finished.key), Err(Error::AttemptState { .. })));
}

#[test]
fn a_heartbeat_of_an_attempt_whose_run_is_published_is_refused() {
    let t = TestStore::new();
    let store = &t.store;
    declare(store, "r1", "s");
    let task = TaskKey::new("units", "r1", "p");
    let killed = store.begin_attempt(&task).expect("begin the killed try");
    attempt_with_digest(store, "r1", "s", "d");
    assert!(matches!(publish(store, "r1", None), PublishOutcome::Published(_)));
    assert!(matches!(store.heartbeat(&killed.key), Err(Error::RunPublished { .. })));
}

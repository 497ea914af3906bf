//! Publish refusals: completeness, row and total gates, foreign snapshots. Each leaves the
//! pointer where it was and names the failing task and reason.

use manifestdb::{
    AttemptStatus, Error, FileCheck, GateFailure, PublishOptions, PublishOutcome, PublishRefusal, RefusalReason, Store, TaskKey, Verdict,
};

use crate::support::{TestStore, candidate, run_attempt, run_spec, write_rows};

const EU: &str = "date=2026-11-29/region=eu";
const US: &str = "date=2026-11-29/region=us";

/// Publishes a first run so that the dataset has a current generation to stay on.
fn with_generation_one(store: &Store) {
    store.declare_run(&run_spec("units", "base", "s0", &[(EU, 1, 1), (US, 1, 1)])).unwrap();
    for p in [EU, US] {
        let t = run_attempt(store, &TaskKey::new("units", "base", p), "s0", 1, 1);
        assert!(store.validate_attempt(&t.key, FileCheck::Size).unwrap().is_valid());
    }
    assert!(matches!(store.publish("units", "base", &PublishOptions::default()).unwrap(), PublishOutcome::Published(_)));
}

fn refused(store: &Store, run: &str) -> PublishRefusal {
    match store.publish("units", run, &PublishOptions::default()).unwrap() {
        PublishOutcome::Refused(refusal) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn assert_still_on_generation_one(store: &Store) {
    let snapshot = store.snapshot().unwrap();
    let current = snapshot.current("units").unwrap().unwrap();
    assert_eq!((current.number, current.run.as_str()), (1, "base"));
    let manifest = snapshot.manifest("units", None).unwrap().unwrap();
    assert!(manifest.partitions.iter().all(|p| p.run == "base"));
    assert_eq!(snapshot.history("units").unwrap().len(), 1);
}

#[test]
fn missing_task_is_refused_and_pointer_stays() {
    let t = TestStore::new();
    with_generation_one(&t.store);
    t.store.declare_run(&run_spec("units", "r2", "s1", &[(EU, 3, 30), (US, 2, 20)])).unwrap();
    let eu = run_attempt(&t.store, &TaskKey::new("units", "r2", EU), "s1", 3, 30);
    t.store.validate_attempt(&eu.key, FileCheck::Size).unwrap();
    // The US task never ran.
    let refusal = refused(&t.store, "r2");
    assert_eq!(refusal.tasks.len(), 1);
    assert_eq!(refusal.tasks[0].partition, US);
    assert_eq!(refusal.tasks[0].reason, RefusalReason::NoAcceptedAttempt { attempts: vec![] });
    assert!(refusal.to_string().contains(US));
    assert_still_on_generation_one(&t.store);
}

#[test]
fn rows_off_by_one_is_refused_and_named() {
    let t = TestStore::new();
    with_generation_one(&t.store);
    t.store.declare_run(&run_spec("units", "r2", "s1", &[(EU, 3, 30)])).unwrap();
    let eu = run_attempt(&t.store, &TaskKey::new("units", "r2", EU), "s1", 2, 30);
    let verdict = t.store.validate_attempt(&eu.key, FileCheck::Size).unwrap();
    assert_eq!(verdict, Verdict::Invalid(vec![GateFailure::RowsMismatch { expected: 3, got: 2 }]));
    let refusal = refused(&t.store, "r2");
    let RefusalReason::NoAcceptedAttempt { attempts } = &refusal.tasks[0].reason else { panic!("{refusal:?}") };
    assert_eq!(attempts, &vec![(1, AttemptStatus::Validated(verdict))]);
    assert!(refusal.to_string().contains("rows 2 != expected 3"), "{refusal}");
    assert_still_on_generation_one(&t.store);
}

#[test]
fn total_off_is_refused_and_named() {
    let t = TestStore::new();
    with_generation_one(&t.store);
    t.store.declare_run(&run_spec("units", "r2", "s1", &[(EU, 3, 30)])).unwrap();
    let eu = run_attempt(&t.store, &TaskKey::new("units", "r2", EU), "s1", 3, 31);
    let verdict = t.store.validate_attempt(&eu.key, FileCheck::Size).unwrap();
    assert_eq!(verdict, Verdict::Invalid(vec![GateFailure::TotalMismatch { expected: 30, got: Some(31) }]));
    let refusal = refused(&t.store, "r2");
    assert!(refusal.to_string().contains("total 31 != expected 30"), "{refusal}");
    assert_still_on_generation_one(&t.store);
}

#[test]
fn foreign_snapshot_is_refused_at_finish_and_publish_stays_refused() {
    let t = TestStore::new();
    with_generation_one(&t.store);
    t.store.declare_run(&run_spec("units", "r2", "s1", &[(EU, 3, 30)])).unwrap();
    let ticket = t.store.begin_attempt(&TaskKey::new("units", "r2", EU)).unwrap();
    let file = write_rows(&ticket.staging_dir, 3, 30);
    let err = t.store.finish_attempt(&ticket.key, &candidate("s-other", 3, 30, file)).unwrap_err();
    assert!(matches!(&err, Error::ForeignSnapshot { expected, got, .. } if expected == "s1" && got == "s-other"), "{err}");
    // Nothing was recorded: the attempt is still running, and the publish names the task.
    let refusal = refused(&t.store, "r2");
    assert_eq!(refusal.tasks[0].reason, RefusalReason::NoAcceptedAttempt { attempts: vec![(1, AttemptStatus::Running)] });
    assert!(refusal.to_string().contains("attempt 1 running"), "{refusal}");
    assert_still_on_generation_one(&t.store);
}

#[test]
fn missing_or_altered_files_make_an_attempt_invalid() {
    let t = TestStore::new();
    t.store.declare_run(&run_spec("units", "r2", "s1", &[(EU, 3, 30), (US, 3, 30)])).unwrap();
    let eu = run_attempt(&t.store, &TaskKey::new("units", "r2", EU), "s1", 3, 30);
    std::fs::remove_file(eu.staging_dir.join("part.csv")).unwrap();
    let verdict = t.store.validate_attempt(&eu.key, FileCheck::Size).unwrap();
    assert_eq!(verdict, Verdict::Invalid(vec![GateFailure::FileMissing { path: "part.csv".into() }]));
    let us = run_attempt(&t.store, &TaskKey::new("units", "r2", US), "s1", 3, 30);
    std::fs::write(us.staging_dir.join("part.csv"), "item,units\n0,10\n1,10\n2,1X\n").unwrap();
    let verdict = t.store.validate_attempt(&us.key, FileCheck::SizeAndChecksum).unwrap();
    assert!(matches!(&verdict, Verdict::Invalid(f) if matches!(f[0], GateFailure::FileChecksumMismatch { .. })), "{verdict:?}");
}

//! Finding and validating the finished, unvalidated attempts of a run
//! (`Snapshot::pending_attempts`, `Store::validate_pending`): what a coordinator validates next.

use manifestdb::{AttemptStatus, Error, FileCheck, TaskKey};

use crate::support::{TestStore, run_attempt, run_spec};

const EU: &str = "date=2026-11-29/region=eu";
const US: &str = "date=2026-11-29/region=us";

#[test]
fn pending_attempts_are_the_finished_unvalidated_ones_in_partition_and_attempt_order() {
    let t = TestStore::new();
    let store = &t.store;
    store.declare_run(&run_spec("daily", "r1", "s1", &[(EU, 4, 40), (US, 3, 30)])).unwrap();
    let eu = TaskKey::new("daily", "r1", EU);
    let us = TaskKey::new("daily", "r1", US);
    let eu1 = run_attempt(store, &eu, "s1", 4, 40);
    let eu2 = run_attempt(store, &eu, "s1", 4, 40);
    let _running = store.begin_attempt(&eu).unwrap(); // attempt 3: no candidate yet
    let us1 = run_attempt(store, &us, "s1", 3, 31); // a wrong total: validates invalid
    let us2 = run_attempt(store, &us, "s1", 3, 30);
    let abandoned = store.begin_attempt(&us).unwrap(); // attempt 3, fenced
    store.abandon_attempt(&abandoned.key).unwrap();
    // Validated already: not pending.
    assert!(store.validate_attempt(&eu2.key, FileCheck::Size).unwrap().is_valid());

    let pending = store.snapshot().unwrap().pending_attempts("daily", "r1").unwrap();
    assert_eq!(pending, vec![eu1.key.clone(), us1.key.clone(), us2.key.clone()]);

    let results = store.validate_pending("daily", "r1", FileCheck::SizeAndChecksum).unwrap();
    let verdicts: Vec<_> = results.iter().map(|(key, verdict)| (key.clone(), verdict.as_ref().unwrap().is_valid())).collect();
    assert_eq!(verdicts, vec![(eu1.key.clone(), true), (us1.key.clone(), false), (us2.key.clone(), true)]);
    let snapshot = store.snapshot().unwrap();
    assert_eq!(snapshot.accepted(&eu).unwrap(), Some(1));
    assert_eq!(snapshot.accepted(&us).unwrap(), Some(2));
    assert!(matches!(snapshot.attempt(&us1.key).unwrap().unwrap().status, AttemptStatus::Validated(_)));
    // Nothing left: none pending is an empty answer, not an error.
    assert!(snapshot.pending_attempts("daily", "r1").unwrap().is_empty());
    assert!(store.validate_pending("daily", "r1", FileCheck::Size).unwrap().is_empty());
}

#[test]
fn an_attempt_whose_files_cannot_be_read_fails_alone() {
    let t = TestStore::new();
    let store = &t.store;
    store.declare_run(&run_spec("daily", "r1", "s1", &[(EU, 4, 40), (US, 3, 30)])).unwrap();
    let eu1 = run_attempt(store, &TaskKey::new("daily", "r1", EU), "s1", 4, 40);
    let us1 = run_attempt(store, &TaskKey::new("daily", "r1", US), "s1", 3, 30);
    // The EU attempt's file is lost: its verdict is invalid (file missing), the US one valid.
    std::fs::remove_file(eu1.staging_dir.join("part.csv")).unwrap();
    let results = store.validate_pending("daily", "r1", FileCheck::Size).unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].0, eu1.key);
    assert!(!results[0].1.as_ref().unwrap().is_valid());
    assert_eq!(results[1].0, us1.key);
    assert!(results[1].1.as_ref().unwrap().is_valid());
}

#[test]
fn pending_attempts_of_an_unknown_run_is_unknown_run() {
    let t = TestStore::new();
    let err = t.store.snapshot().unwrap().pending_attempts("daily", "nope").unwrap_err();
    assert!(matches!(err, Error::UnknownRun { .. }), "{err}");
    let err = t.store.validate_pending("daily", "nope", FileCheck::Size).unwrap_err();
    assert!(matches!(err, Error::UnknownRun { .. }), "{err}");
    assert!(matches!(t.store.snapshot().unwrap().pending_attempts("", "r").unwrap_err(), Error::InvalidInput { .. }));
}

//! The seeds' scenario end to end: a lost acknowledgement, a retry, two valid candidates, one
//! published.

use manifestdb::{FileCheck, PublishOptions, PublishOutcome, TaskKey};

use crate::support::{TestStore, read_rows, run_attempt, run_spec};

#[test]
fn lost_acknowledgement_and_retry_publish_exactly_one_attempt() {
    let t = TestStore::new();
    let store = &t.store;
    let eu = "date=2026-11-29/region=eu";
    let us = "date=2026-11-29/region=us";
    store.declare_run(&run_spec("daily_units", "run-1", "sales@1", &[(eu, 40, 1234), (us, 30, 999)])).unwrap();
    let eu_task = TaskKey::new("daily_units", "run-1", eu);
    let us_task = TaskKey::new("daily_units", "run-1", us);

    // Attempt 1 writes its file and finishes, but the scheduler never hears back...
    let first = run_attempt(store, &eu_task, "sales@1", 40, 1234);
    // ...so it retries on another worker, which also finishes.
    let second = run_attempt(store, &eu_task, "sales@1", 40, 1234);
    assert_eq!((first.key.attempt, second.key.attempt), (1, 2));
    assert_ne!(first.staging_dir, second.staging_dir);
    let us_attempt = run_attempt(store, &us_task, "sales@1", 30, 999);

    // Validation order does not matter: validate the retry first.
    assert!(store.validate_attempt(&second.key, FileCheck::SizeAndChecksum).unwrap().is_valid());
    assert!(store.validate_attempt(&first.key, FileCheck::SizeAndChecksum).unwrap().is_valid());
    assert!(store.validate_attempt(&us_attempt.key, FileCheck::Size).unwrap().is_valid());
    assert_eq!(store.snapshot().unwrap().accepted(&eu_task).unwrap(), Some(1));

    let outcome = store.publish("daily_units", "run-1", &PublishOptions::default()).unwrap();
    let PublishOutcome::Published(generation) = outcome else { panic!("refused: {outcome:?}") };
    assert_eq!(generation.number, 1);

    let manifest = store.snapshot().unwrap().manifest("daily_units", None).unwrap().unwrap();
    let entries: Vec<_> = manifest.partitions.iter().filter(|p| p.partition == eu).collect();
    assert_eq!(entries.len(), 1, "exactly one entry for the partition");
    assert_eq!(entries[0].attempt, 1, "the lower-numbered valid attempt is published");

    // A reader resolving the partition through the manifest sees the input's totals, not double.
    let (mut rows, mut total) = (0, 0);
    for file in &entries[0].files {
        let (r, s) = read_rows(&t.staging().join(&entries[0].staging_rel).join(&file.path));
        rows += r;
        total += s;
    }
    assert_eq!((rows, total), (40, 1234));
    assert_eq!((entries[0].rows, entries[0].total), (40, Some(1234)));

    // The retry's file exists on disk but is not in the manifest.
    let retry_file = second.staging_dir.join("part.csv");
    assert!(retry_file.exists());
    let second_rel = retry_file.strip_prefix(t.store.staging_root()).unwrap().parent().unwrap().to_str().unwrap().to_owned();
    assert!(manifest.partitions.iter().all(|p| p.staging_rel != second_rel));
}

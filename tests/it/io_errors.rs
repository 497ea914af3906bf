//! I/O errors and a full disk during a publish, in the concurrency mode `Store::open` ships
//! (the testing backend forwards redb's locks): the publish returns an error (never success),
//! the handle refuses further reads and writes until reopened, a reader in another process
//! keeps reading the last committed state meanwhile, and after reopening (with or without a
//! power loss) the store is consistent and retrying the publish is safe: exactly one generation
//! results.

use std::io::ErrorKind;

use manifestdb::testing::{self, FailMode, FaultyBackend, Op, OpKind, Tear};
use manifestdb::{Error, FileCheck, PublishOptions, PublishOutcome, ReadOnlyStore, Store, StoreOptions, VerifyOptions};

fn options() -> StoreOptions {
    StoreOptions { cache_size_bytes: 4 * 1024 * 1024, ..StoreOptions::default() }
}

/// A store with run 0 ready to publish (every task has a valid attempt), on a fresh backend:
/// the scripted workload up to its second publish (the first one is refused by design).
fn ready_to_publish() -> (FaultyBackend, tempfile::TempDir, Store) {
    let backend = FaultyBackend::new();
    let staging = tempfile::tempdir().unwrap();
    let store = Store::open_with_backend(backend.clone(), staging.path(), &options()).unwrap();
    let workload = testing::scripted_workload();
    let publishes: Vec<usize> = workload.iter().enumerate().filter(|(_, op)| matches!(op, Op::Publish { .. })).map(|(i, _)| i).collect();
    for op in &workload[..publishes[1]] {
        testing::apply(&store, *op).unwrap();
    }
    (backend, staging, store)
}

fn publish(store: &Store) -> Result<PublishOutcome, Error> {
    store.publish(testing::DATASET, &testing::run_id(0), &PublishOptions::default())
}

/// Reopens `image`, checks it verifies clean and that retrying the publish yields generation 1,
/// exactly once.
fn reopen_and_retry(image: Vec<u8>, staging: &std::path::Path) {
    let mut store = Store::open_with_backend(FaultyBackend::from_image(image), staging, &options()).expect("reopen");
    let full = VerifyOptions { files: Some(FileCheck::Size), ..VerifyOptions::default() };
    let report = store.verify(&full).unwrap();
    assert!(report.is_clean(), "{report}");
    let generation = match publish(&store).unwrap() {
        PublishOutcome::Published(g) | PublishOutcome::AlreadyPublished(g) => g,
        PublishOutcome::Refused(r) => panic!("retry refused: {r}"),
    };
    assert_eq!(generation.number, 1);
    assert!(matches!(publish(&store).unwrap(), PublishOutcome::AlreadyPublished(g) if g.number == 1));
    let history = store.snapshot().unwrap().history(testing::DATASET).unwrap();
    assert_eq!(history.len(), 1, "one generation, not a second one: {history:?}");
    let report = store.verify(&full).unwrap();
    assert!(report.is_clean(), "{report}");
}

/// The observable state before run 0's publish and after it (fault-free).
fn before_and_after() -> (Vec<String>, Vec<String>) {
    let (_backend, _staging, store) = ready_to_publish();
    let before = testing::dump(&store.snapshot().unwrap()).unwrap();
    assert!(matches!(publish(&store).unwrap(), PublishOutcome::Published(_)));
    (before, testing::dump(&store.snapshot().unwrap()).unwrap())
}

/// The poisoned handle refuses reads too; a reader in another process, opened while the
/// poisoned writer still holds the store, reads a committed state: one of `states`.
fn assert_reads_served_elsewhere(backend: &FaultyBackend, store: &Store, states: &[&[String]]) {
    let err = store.snapshot().expect_err("a poisoned handle refuses reads");
    assert!(matches!(err, Error::Poisoned { .. }), "{err}");
    assert!(err.to_string().contains("read-only handles keep reading"), "{err}");
    let reader =
        ReadOnlyStore::open_with_backend(backend.another_process(), &options()).expect("a reader opens beside the poisoned writer");
    let seen = testing::dump(&reader.snapshot().unwrap()).expect("the reader reads");
    assert!(states.contains(&seen.as_slice()), "the reader sees a committed state, not {seen:#?}");
}

/// Counts the mutating storage operations of one publish.
fn publish_ops() -> u64 {
    let (backend, _staging, store) = ready_to_publish();
    let before = backend.ops();
    assert!(matches!(publish(&store).unwrap(), PublishOutcome::Published(_)));
    backend.ops() - before
}

#[test]
fn every_failed_write_or_fsync_during_a_publish_is_an_error_that_poisons_the_handle_and_retrying_after_reopen_is_safe() {
    if crate::support::redb_only("file-level I/O errors injected into redb's storage backend") {
        return;
    }
    let ops = publish_ops();
    assert!(ops >= 2, "a publish writes and syncs");
    let (before, after) = before_and_after();
    let mut checked = 0;
    for n in 1..=ops {
        for kind in [OpKind::Any, OpKind::Sync] {
            let (backend, staging, store) = ready_to_publish();
            backend.fail_nth(kind, n, FailMode::Once, ErrorKind::Other);
            let outcome = publish(&store);
            if backend.injected_failures() == 0 {
                // Fewer operations of this kind than n: the publish went through untouched.
                assert!(matches!(outcome, Ok(PublishOutcome::Published(_))), "{outcome:?}");
                continue;
            }
            checked += 1;
            let err = outcome.expect_err("a publish whose write or fsync failed must not report success");
            assert!(matches!(err, Error::Storage { .. }), "{err}");
            // The handle refuses writes from now on, even though the injected failure was a one-off.
            let again = publish(&store).expect_err("a poisoned handle refuses writes");
            assert!(matches!(again, Error::Poisoned { .. }), "{again}");
            assert!(again.to_string().contains("reopen"), "{again}");
            // Reads are served by a reader handle: the state before the publish or, if the
            // failure hit after the commit point (outcome unknown), after it.
            assert_reads_served_elsewhere(&backend, &store, &[&before, &after]);
            drop(store);
            // Restart without power loss (the page cache survives) and with one (it does not).
            reopen_and_retry(backend.live_image(), staging.path());
            reopen_and_retry(backend.crash_image(Tear::LoseUnsynced), staging.path());
        }
    }
    println!("publish storage operations: {ops}; injected failures checked: {checked}");
    assert!(checked as u64 > ops, "both the Any and the Sync sweeps injected failures");
}

/// Checks a failure is a clear "disk full" error and that a reader still reads the last
/// committed state afterwards.
fn assert_disk_full(err: &Error, backend: &FaultyBackend, store: &Store, before: &[String]) {
    let message = err.to_string();
    assert!(message.contains("no space left on device"), "{message}");
    assert!(!err.is_corruption(), "a full disk is not corruption: {message}");
    assert!(matches!(publish(store), Err(Error::Poisoned { .. })));
    assert_reads_served_elsewhere(backend, store, &[before]);
}

#[test]
fn enospc_during_a_publish_is_a_clear_error_reads_are_served_and_publishing_resumes_after_reopen() {
    if crate::support::redb_only("file-level I/O errors injected into redb's storage backend") {
        return;
    }
    let (backend, staging, store) = ready_to_publish();
    let before = testing::dump(&store.snapshot().unwrap()).unwrap();
    backend.fail_nth(OpKind::Write, 1, FailMode::FromThenOn, ErrorKind::StorageFull);
    let err = publish(&store).expect_err("a publish that cannot write must fail");
    assert_disk_full(&err, &backend, &store, &before);
    drop(store);
    // Space becomes available: reopen on the same device, no manual repair, and publish.
    backend.clear_failures();
    let mut store = Store::open_with_backend(backend.clone(), staging.path(), &options()).unwrap();
    assert!(matches!(publish(&store).unwrap(), PublishOutcome::Published(g) if g.number == 1));
    let report = store.verify(&VerifyOptions { files: Some(FileCheck::Size), ..VerifyOptions::default() }).unwrap();
    assert!(report.is_clean(), "{report}");
}

#[test]
fn a_device_that_cannot_grow_refuses_a_large_write_clearly_and_recovers_once_it_can() {
    if crate::support::redb_only("file-level I/O errors injected into redb's storage backend") {
        return;
    }
    let (backend, staging, store) = ready_to_publish();
    let before = testing::dump(&store.snapshot().unwrap()).unwrap();
    backend.set_capacity_bytes(Some(backend.live_image().len() as u64));
    // A side effect with a payload larger than any free space must grow the file.
    let effect = manifestdb::EffectKey { dataset: testing::DATASET.into(), run: testing::run_id(0), effect: "big".into(), partition: None };
    let payload = vec![7u8; 4 * 1024 * 1024];
    let err = store.record_effect(&effect, &payload).expect_err("the device is full");
    assert_disk_full(&err, &backend, &store, &before);
    drop(store);
    backend.set_capacity_bytes(None);
    let mut store = Store::open_with_backend(backend.clone(), staging.path(), &options()).unwrap();
    assert!(store.record_effect(&effect, &payload).unwrap().newly_recorded);
    assert!(matches!(publish(&store).unwrap(), PublishOutcome::Published(g) if g.number == 1));
    let report = store.verify(&VerifyOptions { files: Some(FileCheck::Size), ..VerifyOptions::default() }).unwrap();
    assert!(report.is_clean(), "{report}");
}

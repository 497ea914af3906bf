//! The fault-injecting storage backend itself: what survives a power loss under each tear
//! mode, power loss at the k-th operation, injected failures and a full device.

use std::io::ErrorKind;

use manifestdb::testing::{FailMode, FaultyBackend, OpKind, Tear};
use redb::StorageBackend;

/// 8 durable bytes of 1, then two unsynced writes: 2s over the first half, 3s over the second.
fn backend_with_pending() -> FaultyBackend {
    let b = FaultyBackend::new();
    b.write(0, &[1; 8]).unwrap();
    b.sync_data().unwrap();
    b.write(0, &[2; 4]).unwrap();
    b.write(4, &[3; 4]).unwrap();
    b
}

#[test]
fn crash_images_keep_exactly_what_each_tear_mode_says() {
    if crate::support::redb_only("redb's fault-injecting storage backend") {
        return;
    }
    let b = backend_with_pending();
    assert_eq!(b.live_image(), [2, 2, 2, 2, 3, 3, 3, 3]);
    assert_eq!(b.pending_ops(), 2);
    assert_eq!(b.crash_image(Tear::LoseUnsynced), [1; 8]);
    assert_eq!(b.crash_image(Tear::KeepUnsynced), b.live_image());
    // Every pending op but the last write, and the first half of that one.
    assert_eq!(b.crash_image(Tear::TornLastWrite), [2, 2, 2, 2, 3, 3, 1, 1]);
    // A seeded subset is deterministic and only mixes durable and written bytes.
    let subset = b.crash_image(Tear::Subset { seed: 7 });
    assert_eq!(subset, b.crash_image(Tear::Subset { seed: 7 }));
    assert!(subset.iter().enumerate().all(|(i, v)| *v == 1 || *v == if i < 4 { 2 } else { 3 }), "{subset:?}");
}

#[test]
fn power_loss_at_k_fails_that_operation_and_every_later_one_and_freezes_the_durable_image() {
    if crate::support::redb_only("redb's fault-injecting storage backend") {
        return;
    }
    let b = FaultyBackend::new();
    b.power_loss_at(3);
    b.write(0, &[1; 4]).unwrap();
    b.sync_data().unwrap();
    assert!(b.write(0, &[9; 4]).is_err(), "operation 3 fails");
    assert!(b.powered_off());
    assert!(b.sync_data().is_err() && b.set_len(0).is_err(), "everything after fails too");
    assert_eq!(b.crash_image(Tear::KeepUnsynced), [1; 4], "the failed write never landed");
    let mut out = [0; 4];
    b.read(0, &mut out).unwrap();
    assert_eq!(out, [1; 4]);
    assert_eq!(b.ops(), 5);
}

#[test]
fn injected_failures_fire_once_or_from_then_on_and_a_failed_sync_persists_nothing() {
    if crate::support::redb_only("redb's fault-injecting storage backend") {
        return;
    }
    let b = FaultyBackend::new();
    b.fail_nth(OpKind::Sync, 2, FailMode::Once, ErrorKind::Other);
    b.write(0, &[1]).unwrap();
    b.sync_data().unwrap();
    b.write(0, &[2]).unwrap();
    assert!(b.sync_data().is_err(), "the second sync fails");
    assert_eq!(b.crash_image(Tear::LoseUnsynced), [1], "a failed sync made nothing durable");
    b.sync_data().unwrap();
    assert_eq!(b.injected_failures(), 1);

    let b = FaultyBackend::new();
    b.fail_nth(OpKind::Write, 1, FailMode::FromThenOn, ErrorKind::StorageFull);
    for _ in 0..3 {
        let err = b.write(0, &[1]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::StorageFull);
        assert!(err.to_string().contains("no space left on device"), "{err}");
    }
    b.set_len(4).unwrap();
    b.clear_failures();
    b.write(0, &[1]).unwrap();
}

#[test]
fn a_full_device_refuses_growth_but_not_overwrites() {
    if crate::support::redb_only("redb's fault-injecting storage backend") {
        return;
    }
    let b = FaultyBackend::new();
    b.set_len(8).unwrap();
    b.set_capacity_bytes(Some(8));
    b.write(0, &[5; 8]).unwrap();
    assert_eq!(b.write(4, &[5; 8]).unwrap_err().kind(), ErrorKind::StorageFull);
    assert_eq!(b.set_len(16).unwrap_err().kind(), ErrorKind::StorageFull);
    b.set_capacity_bytes(None);
    b.set_len(16).unwrap();
    assert_eq!(b.len().unwrap(), 16);
}

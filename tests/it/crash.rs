//! Every crash point: the scripted workload (`manifestdb::testing::scripted_workload`) runs on
//! the fault-injecting backend, loses power at storage operation k for every k, and the image
//! left behind (unsynced writes lost, the last one torn, all kept, or two seeded subsets of
//! them, some torn) is reopened and checked
//! against the fault-free reference run: the state is the last acknowledged step or the
//! interrupted one, every acknowledged publish is there, verify is clean, and finishing the
//! workload from there reaches the reference's final state.
//!
//! Every crash point is covered with all five images in the default run (a few seconds: the
//! harness keeps its stores in memory and its staging files in `/dev/shm` where available).

use manifestdb::StoreOptions;
use manifestdb::testing::{Reference, Tear, scripted_workload};

#[test]
fn every_crash_point_recovers_to_an_acknowledged_or_in_flight_state() {
    if crate::support::redb_only("power loss at every storage operation of redb's fault-injecting backend") {
        return;
    }
    sweep(&Reference::new(&scripted_workload()).expect("fault-free reference run"));
}

/// The same sweep on a writer without cross-process readers (redb's `ExclusiveWriter` mode:
/// one flush per commit instead of two), every begin durable. Begins without a flush, which a
/// power loss may forget by design, have their own test (`lazy_begins.rs`).
#[test]
fn every_crash_point_recovers_without_cross_process_readers() {
    if crate::support::redb_only("power loss at every storage operation of redb's fault-injecting backend") {
        return;
    }
    let options = StoreOptions { cross_process_readers: false, durable_begins: true, ..StoreOptions::default() };
    sweep(&Reference::with_options(&scripted_workload(), &options).expect("fault-free reference run"));
}

fn sweep(reference: &Reference) {
    let total = reference.storage_ops;
    let mut covered = 0u64;
    let mut images = 0u64;
    let mut recovered_in_flight = 0u64;
    let mut creation_lost = 0u64;
    let mut violations = Vec::new();
    // k = total + 1 crashes after the whole workload: the final state must survive as well.
    for k in 1..=total + 1 {
        covered += 1;
        // The three deterministic images and two seeded subsets of the unsynced writes. Each
        // image resumes in its own crash run's staging files: a recovery changes them, and a
        // copy would give every file a new inode (which cleanup's apply-time check refuses).
        let subsets = [Tear::Subset { seed: k }, Tear::Subset { seed: k.wrapping_mul(0x9e37_79b9) }];
        for tear in Tear::DETERMINISTIC.into_iter().chain(subsets) {
            let crashed = reference.crash_run(k).unwrap_or_else(|e| panic!("crash point {k}: {e}"));
            images += 1;
            match reference.recover(&crashed, crashed.backend.crash_image(tear)) {
                Ok(recovery) => {
                    recovered_in_flight += u64::from(recovery.recovered_step > crashed.acked);
                    creation_lost += u64::from(recovery.creation_lost.is_some());
                }
                Err(e) => violations.push(format!("crash point {k}, {tear:?}: {e}")),
            }
        }
    }
    println!(
        "crash points covered: {covered} ({} storage operations + 1 after the end), {images} crash images reopened \
         ({recovered_in_flight} recovered the in-flight step, {creation_lost} interrupted the unacknowledged creation of a \
         backend store and gave a clear error), {} violations",
        total,
        violations.len()
    );
    for violation in violations.iter().take(20) {
        println!("{}", violation.lines().next().unwrap_or(""));
    }
    assert!(violations.is_empty(), "{} violations, first: {}", violations.len(), violations[0]);
    assert!(covered > 50, "the workload should cross many storage operations, got {covered}");
}

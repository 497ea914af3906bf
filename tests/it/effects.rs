//! Side effects keyed by the work's natural key: a repeat records nothing new; effects become
//! ready in the publishing transaction.

use std::time::Duration;

use manifestdb::{ClaimOutcome, EffectKey, EffectStatus, Error, FileCheck, MarkOutcome, PublishOptions, PublishOutcome, TaskKey};

use crate::support::{TestStore, run_attempt, run_spec};

const LEASE: Duration = Duration::from_secs(60);

fn notify(partition: Option<&str>) -> EffectKey {
    EffectKey { dataset: "units".into(), run: "r1".into(), effect: "notify".into(), partition: partition.map(str::to_owned) }
}

#[test]
fn a_repeated_effect_records_nothing_and_returns_the_first() {
    let t = TestStore::new();
    t.store.declare_run(&run_spec("units", "r1", "s1", &[("p", 1, 1)])).unwrap();
    // Two attempts of the same task both try to record the effect: the key is the work's, not
    // the attempt's, so the second collides with the first.
    let first = t.store.record_effect(&notify(Some("p")), b"from attempt 1").unwrap();
    let second = t.store.record_effect(&notify(Some("p")), b"from attempt 2").unwrap();
    assert!(first.newly_recorded && !second.newly_recorded);
    assert_eq!(second.effect, first.effect);
    assert_eq!(second.effect.payload, b"from attempt 1");
    assert_eq!(t.store.snapshot().unwrap().effects("units", "r1").unwrap().len(), 1);
}

#[test]
fn effects_become_ready_when_their_run_publishes_and_are_marked_emitted_once() {
    let t = TestStore::new();
    t.store.declare_run(&run_spec("units", "r1", "s1", &[("p", 1, 1)])).unwrap();
    t.store.record_effect(&notify(Some("p")), b"x").unwrap();
    t.store.record_effect(&notify(None), b"run done").unwrap();
    assert!(t.store.snapshot().unwrap().ready_effects("units").unwrap().is_empty());
    assert!(matches!(t.store.mark_effect_emitted(&notify(None), None), Err(Error::EffectNotReady { .. })));
    assert!(matches!(t.store.claim_effect(&notify(None), "w1", LEASE), Err(Error::EffectNotReady { .. })));

    let ticket = run_attempt(&t.store, &TaskKey::new("units", "r1", "p"), "s1", 1, 1);
    t.store.validate_attempt(&ticket.key, FileCheck::Size).unwrap();
    assert!(matches!(t.store.publish("units", "r1", &PublishOptions::default()).unwrap(), PublishOutcome::Published(_)));

    let ready = t.store.snapshot().unwrap().ready_effects("units").unwrap();
    assert_eq!(ready.len(), 2);
    assert!(ready.iter().all(|e| e.status == EffectStatus::Ready { generation: 1 }));
    let MarkOutcome::Marked { effect: emitted } = t.store.mark_effect_emitted(&notify(None), None).unwrap() else {
        panic!("not marked");
    };
    assert!(matches!(emitted.status, EffectStatus::Emitted { generation: 1, .. }));
    assert_eq!(
        t.store.mark_effect_emitted(&notify(None), None).unwrap(),
        MarkOutcome::AlreadyEmitted { effect: emitted },
        "marking again changes nothing and says so"
    );
    let ready = t.store.snapshot().unwrap().ready_effects("units").unwrap();
    assert_eq!(ready.iter().map(|e| e.key.clone()).collect::<Vec<_>>(), vec![notify(Some("p"))]);

    // An effect recorded after the publish is ready at once.
    let late = t.store.record_effect(&EffectKey { effect: "audit".into(), ..notify(None) }, b"late").unwrap();
    assert_eq!(late.effect.status, EffectStatus::Ready { generation: 1 });
}

#[test]
fn effects_of_unknown_runs_or_partitions_are_refused() {
    let t = TestStore::new();
    t.store.declare_run(&run_spec("units", "r1", "s1", &[("p", 1, 1)])).unwrap();
    assert!(matches!(t.store.record_effect(&EffectKey { run: "nope".into(), ..notify(None) }, b""), Err(Error::UnknownRun { .. })));
    assert!(matches!(t.store.record_effect(&notify(Some("q")), b""), Err(Error::UnknownTask { .. })));
    assert!(matches!(t.store.mark_effect_emitted(&notify(Some("p")), None), Err(Error::UnknownEffect { .. })));
    assert!(matches!(t.store.claim_effect(&notify(Some("p")), "w1", LEASE), Err(Error::UnknownEffect { .. })));
}

/// A published run with one ready run-level effect `notify`.
fn ready_effect() -> TestStore {
    let t = TestStore::new();
    t.store.declare_run(&run_spec("units", "r1", "s1", &[("p", 1, 1)])).unwrap();
    t.store.record_effect(&notify(None), b"run done").unwrap();
    let ticket = run_attempt(&t.store, &TaskKey::new("units", "r1", "p"), "s1", 1, 1);
    t.store.validate_attempt(&ticket.key, FileCheck::Size).unwrap();
    assert!(matches!(t.store.publish("units", "r1", &PublishOptions::default()).unwrap(), PublishOutcome::Published(_)));
    t
}

#[test]
fn a_second_claim_within_the_lease_is_refused_and_only_the_claimant_marks() {
    let t = ready_effect();
    let ClaimOutcome::Claimed { effect, took_over_from: None } = t.store.claim_effect(&notify(None), "w1", LEASE).unwrap() else {
        panic!("first claim refused");
    };
    let claim = effect.claim.clone().expect("the claim is stored");
    assert_eq!(claim.claimant, "w1");
    assert_eq!(claim.expires_at_ms - claim.claimed_at_ms, 60_000);
    // Another emitter is refused, as a value, and nothing changes.
    match t.store.claim_effect(&notify(None), "w2", LEASE).unwrap() {
        ClaimOutcome::HeldByOther { effect } => assert_eq!(effect.claim.unwrap().claimant, "w1"),
        other => panic!("second claim not refused: {other:?}"),
    }
    // Neither it nor an emitter that does not claim may mark it while w1's claim is live.
    assert!(matches!(t.store.mark_effect_emitted(&notify(None), Some("w2")).unwrap(), MarkOutcome::ClaimedByOther { .. }));
    assert!(matches!(t.store.mark_effect_emitted(&notify(None), None).unwrap(), MarkOutcome::ClaimedByOther { .. }));
    let stored = t.store.snapshot().unwrap().effects("units", "r1").unwrap();
    assert_eq!(stored[0].status, EffectStatus::Ready { generation: 1 });
    // The claimant marks it; from then on every claim and mark says it was already emitted.
    assert!(matches!(t.store.mark_effect_emitted(&notify(None), Some("w1")).unwrap(), MarkOutcome::Marked { .. }));
    assert!(matches!(t.store.claim_effect(&notify(None), "w2", LEASE).unwrap(), ClaimOutcome::AlreadyEmitted { .. }));
    assert!(matches!(t.store.claim_effect(&notify(None), "w1", LEASE).unwrap(), ClaimOutcome::AlreadyEmitted { .. }));
    assert!(matches!(t.store.mark_effect_emitted(&notify(None), Some("w1")).unwrap(), MarkOutcome::AlreadyEmitted { .. }));
    let stored = t.store.snapshot().unwrap().effects("units", "r1").unwrap();
    assert!(matches!(stored[0].status, EffectStatus::Emitted { generation: 1, .. }));
    assert_eq!(stored[0].claim.as_ref().unwrap().claimant, "w1", "the claim says who emitted it");
}

#[test]
fn an_expired_claim_is_taken_over_and_the_old_claimant_can_no_longer_block() {
    let t = ready_effect();
    let short = Duration::from_millis(50);
    assert!(matches!(t.store.claim_effect(&notify(None), "w1", short).unwrap(), ClaimOutcome::Claimed { .. }));
    std::thread::sleep(Duration::from_millis(80));
    match t.store.claim_effect(&notify(None), "w2", LEASE).unwrap() {
        ClaimOutcome::Claimed { took_over_from, effect } => {
            assert_eq!(took_over_from.as_deref(), Some("w1"));
            assert_eq!(effect.claim.unwrap().claimant, "w2");
        }
        other => panic!("expired claim not taken over: {other:?}"),
    }
    // w1 has lost the claim: its mark is refused while w2's is live.
    assert!(matches!(t.store.mark_effect_emitted(&notify(None), Some("w1")).unwrap(), MarkOutcome::ClaimedByOther { .. }));
    assert!(matches!(t.store.mark_effect_emitted(&notify(None), Some("w2")).unwrap(), MarkOutcome::Marked { .. }));
}

#[test]
fn claims_survive_reopening_and_bad_claims_are_refused() {
    let t = ready_effect();
    assert!(matches!(t.store.claim_effect(&notify(None), "w1", LEASE).unwrap(), ClaimOutcome::Claimed { .. }));
    let t = t.reopen();
    assert!(matches!(t.store.claim_effect(&notify(None), "w2", LEASE).unwrap(), ClaimOutcome::HeldByOther { .. }));
    for (claimant, lease) in [("w1", Duration::ZERO), ("w1", Duration::from_secs(2 * 24 * 3600)), ("", LEASE), ("a\0b", LEASE)] {
        assert!(matches!(t.store.claim_effect(&notify(None), claimant, lease), Err(Error::InvalidInput { .. })), "{claimant:?} {lease:?}");
    }
}

#[test]
fn of_many_threads_claiming_at_once_exactly_one_gets_the_claim() {
    let t = ready_effect();
    let store = &t.store;
    let outcomes: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> =
            (0..16).map(|i| scope.spawn(move || store.claim_effect(&notify(None), &format!("w{i}"), LEASE).unwrap())).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let claimed = outcomes.iter().filter(|o| matches!(o, ClaimOutcome::Claimed { .. })).count();
    let held = outcomes.iter().filter(|o| matches!(o, ClaimOutcome::HeldByOther { .. })).count();
    assert_eq!((claimed, held), (1, 15), "{outcomes:?}");
}

/// Declares and publishes `units/r1` with one partition `p`, records its `notify` effect and
/// returns the key a receiver gets.
fn published_effect_key(store: &manifestdb::Store) -> String {
    store.declare_run(&run_spec("units", "r1", "s1", &[("p", 1, 1)])).unwrap();
    let ticket = run_attempt(store, &TaskKey::new("units", "r1", "p"), "s1", 1, 1);
    store.validate_attempt(&ticket.key, FileCheck::Size).unwrap();
    assert!(matches!(store.publish("units", "r1", &PublishOptions::default()).unwrap(), PublishOutcome::Published(_)));
    store.record_effect(&notify(Some("p")), b"x").unwrap().effect.idempotency_key()
}

#[test]
fn idempotency_keys_name_the_store_so_two_stores_never_collide_and_a_reopened_store_keeps_its_own() {
    let a = TestStore::new();
    let b = TestStore::new();
    let (key_a, key_b) = (published_effect_key(&a.store), published_effect_key(&b.store));
    assert_ne!(key_a, key_b, "the same dataset, run, effect and partition in two stores");
    assert_ne!(a.store.store_id(), b.store.store_id());
    assert_eq!(key_a, format!("{}/units/r1/notify/p", a.store.store_id()));
    assert_eq!(a.store.store_id().len(), 32);

    // Every path to the effect hands out the same key: a claim, a mark, the snapshot's reads.
    let claimed = a.store.claim_effect(&notify(Some("p")), "w1", LEASE).unwrap();
    assert_eq!(claimed.effect().idempotency_key(), key_a);
    assert_eq!(a.store.snapshot().unwrap().ready_effects("units").unwrap()[0].idempotency_key(), key_a);

    // Reopened (a restart; on PostgreSQL, another handle on the same database): the same id.
    let id = a.store.store_id().to_owned();
    let a = a.reopen();
    assert_eq!(a.store.store_id(), id);
    let marked = a.store.mark_effect_emitted(&notify(Some("p")), Some("w1")).unwrap();
    assert_eq!(marked.effect().idempotency_key(), key_a);
    assert_eq!(a.store.snapshot().unwrap().store_id().unwrap(), id);
    assert_eq!(a.store.snapshot().unwrap().effects("units", "r1").unwrap()[0].idempotency_key(), key_a);
    let reader = a.dir.read_only().unwrap();
    assert_eq!(reader.snapshot().unwrap().dataset_effects("units").unwrap()[0].idempotency_key(), key_a);
}

#[test]
fn a_store_created_anew_over_the_same_staging_root_has_another_id() {
    if crate::support::redb_only("deletes the redb file and creates the store again") {
        return;
    }
    let t = TestStore::new();
    let first = t.store.store_id().to_owned();
    let TestStore { store, dir } = t;
    drop(store);
    // The staging root holds only its marker, which the new store adopts: the staging
    // identity is the same, the store is not.
    std::fs::remove_file(dir.location()).unwrap();
    // Not within the millisecond of the first creation (never so in practice: the file was
    // removed in between).
    std::thread::sleep(Duration::from_millis(5));
    let again = dir.open().unwrap();
    assert_ne!(again.store_id(), first);
}

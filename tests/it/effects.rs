//! Side effects keyed by the work's natural key: a repeat records nothing new; effects become
//! ready in the publishing transaction.

use manifestdb::{EffectKey, EffectStatus, Error, FileCheck, PublishOptions, PublishOutcome, TaskKey};

use crate::support::{TestStore, run_attempt, run_spec};

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
    assert!(matches!(t.store.mark_effect_emitted(&notify(None)), Err(Error::EffectNotReady { .. })));

    let ticket = run_attempt(&t.store, &TaskKey::new("units", "r1", "p"), "s1", 1, 1);
    t.store.validate_attempt(&ticket.key, FileCheck::Size).unwrap();
    assert!(matches!(t.store.publish("units", "r1", &PublishOptions::default()).unwrap(), PublishOutcome::Published(_)));

    let ready = t.store.snapshot().unwrap().ready_effects("units").unwrap();
    assert_eq!(ready.len(), 2);
    assert!(ready.iter().all(|e| e.status == EffectStatus::Ready { generation: 1 }));
    let emitted = t.store.mark_effect_emitted(&notify(None)).unwrap();
    assert!(matches!(emitted.status, EffectStatus::Emitted { generation: 1, .. }));
    assert_eq!(t.store.mark_effect_emitted(&notify(None)).unwrap(), emitted, "marking again changes nothing");
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
    assert!(matches!(t.store.mark_effect_emitted(&notify(Some("p"))), Err(Error::UnknownEffect { .. })));
}

//! Publish semantics: partition scope, idempotent retries, determinism, history.

use manifestdb::{FileCheck, GenerationKind, PublishOptions, PublishOutcome, RefusalReason, Store, TaskKey};

use crate::support::{TestStore, candidate, run_spec, write_rows};

/// Runs one valid attempt per partition with the given digest and publishes the run.
fn publish_run(store: &Store, run: &str, snapshot: &str, partitions: &[(&str, u64, i64)], digest: &str) -> PublishOutcome {
    store.declare_run(&run_spec("units", run, snapshot, partitions)).unwrap();
    for (partition, rows, total) in partitions {
        let ticket = store.begin_attempt(&TaskKey::new("units", run, *partition)).unwrap();
        let file = write_rows(&ticket.staging_dir, *rows, *total);
        let mut c = candidate(snapshot, *rows, *total, file);
        c.digest = Some(format!("{digest}:{partition}"));
        store.finish_attempt(&ticket.key, &c).unwrap();
        assert!(store.validate_attempt(&ticket.key, FileCheck::Size).unwrap().is_valid());
    }
    store.publish("units", run, &PublishOptions::default()).unwrap()
}

#[test]
fn publishing_region_a_leaves_region_b_exactly_as_it_was() {
    let t = TestStore::new();
    let both = [("date=1/region=a", 3, 30), ("date=1/region=b", 4, 40), ("date=2/region=b", 5, 50)];
    assert!(matches!(publish_run(&t.store, "full", "s1", &both, "d"), PublishOutcome::Published(_)));
    let before = t.store.snapshot().unwrap().manifest("units", None).unwrap().unwrap();

    let PublishOutcome::Published(g2) = publish_run(&t.store, "a-only", "s2", &[("date=1/region=a", 6, 60)], "d") else { panic!() };
    assert_eq!((g2.number, g2.parent, g2.partitions_replaced), (2, 1, 1));
    let after = t.store.snapshot().unwrap().manifest("units", None).unwrap().unwrap();
    assert_eq!(after.partitions.len(), 3);
    for (old, new) in before.partitions.iter().zip(&after.partitions) {
        assert_eq!(old.partition, new.partition);
        if new.partition.ends_with("region=a") {
            assert_eq!((new.run.as_str(), new.rows, new.since_generation), ("a-only", 6, 2));
        } else {
            assert_eq!(old, new, "partition {} changed", new.partition);
        }
    }
    // The older generation is still readable as it was.
    let g1 = t.store.snapshot().unwrap().manifest("units", Some(1)).unwrap().unwrap();
    assert_eq!(g1, before);
}

#[test]
fn publishing_the_same_run_again_returns_the_same_generation() {
    let t = TestStore::new();
    let PublishOutcome::Published(first) = publish_run(&t.store, "r1", "s1", &[("p", 1, 1)], "d") else { panic!() };
    // The acknowledgement was lost; the caller retries, even after reopening the store.
    let t = t.reopen();
    let again = t.store.publish("units", "r1", &PublishOptions::default()).unwrap();
    assert_eq!(again, PublishOutcome::AlreadyPublished(first.clone()));
    let snapshot = t.store.snapshot().unwrap();
    assert_eq!(snapshot.history("units").unwrap(), vec![first]);
    assert_eq!(snapshot.run("units", "r1").unwrap().unwrap().published_generation, Some(1));
}

#[test]
fn rerun_on_the_same_snapshot_with_the_same_digest_publishes() {
    let t = TestStore::new();
    assert!(matches!(publish_run(&t.store, "r1", "s1", &[("p", 1, 1), ("q", 2, 2)], "d"), PublishOutcome::Published(_)));
    let outcome = publish_run(&t.store, "r1-rerun", "s1", &[("p", 1, 1)], "d");
    let PublishOutcome::Published(g2) = outcome else { panic!("{outcome:?}") };
    assert_eq!(g2.nondeterminism_accepted, None);
}

#[test]
fn rerun_on_the_same_snapshot_with_another_digest_is_refused_naming_the_partition() {
    let t = TestStore::new();
    assert!(matches!(publish_run(&t.store, "r1", "s1", &[("p", 1, 1), ("q", 2, 2)], "d"), PublishOutcome::Published(_)));
    let outcome = publish_run(&t.store, "r2", "s1", &[("p", 1, 1), ("q", 2, 2)], "other");
    let PublishOutcome::Refused(refusal) = outcome else { panic!("{outcome:?}") };
    let named: Vec<&str> = refusal.tasks.iter().map(|t| t.partition.as_str()).collect();
    assert_eq!(named, vec!["p", "q"]);
    assert!(matches!(
        &refusal.tasks[0].reason,
        RefusalReason::Nondeterministic { published_digest, published_run, published_generation: 1, .. }
            if published_digest == "d:p" && published_run == "r1"
    ));
    assert_eq!(t.store.snapshot().unwrap().current("units").unwrap().unwrap().number, 1);

    // With an explicit override the publish goes through and the history records why.
    let options = PublishOptions { accept_nondeterminism: Some("fixed rounding bug".into()) };
    let PublishOutcome::Published(g2) = t.store.publish("units", "r2", &options).unwrap() else { panic!() };
    let recorded = g2.nondeterminism_accepted.clone().unwrap();
    assert_eq!(recorded.reason, "fixed rounding bug");
    assert_eq!(recorded.partitions, vec!["p".to_string(), "q".to_string()]);
    assert_eq!(t.store.snapshot().unwrap().history("units").unwrap()[1], g2);
    assert_eq!(g2.kind, GenerationKind::Publish);
}

#[test]
fn a_new_snapshot_is_a_new_run_and_may_change_the_digest() {
    let t = TestStore::new();
    assert!(matches!(publish_run(&t.store, "r1", "s1", &[("p", 1, 1)], "d"), PublishOutcome::Published(_)));
    assert!(matches!(publish_run(&t.store, "r2", "s2", &[("p", 1, 1)], "changed"), PublishOutcome::Published(_)));
}

#[test]
fn history_lists_every_generation_in_order() {
    let t = TestStore::new();
    for (i, run) in ["a", "b", "c"].iter().enumerate() {
        let PublishOutcome::Published(g) = publish_run(&t.store, run, &format!("s{i}"), &[("p", 1, 1)], "d") else { panic!() };
        assert_eq!(g.number, i as u64 + 1);
    }
    let history = t.store.snapshot().unwrap().history("units").unwrap();
    let runs: Vec<(u64, &str)> = history.iter().map(|g| (g.number, g.run.as_str())).collect();
    assert_eq!(runs, vec![(1, "a"), (2, "b"), (3, "c")]);
    assert_eq!(t.store.snapshot().unwrap().datasets().unwrap(), vec!["units".to_string()]);
}

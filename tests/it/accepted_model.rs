//! The accepted attempt per task always equals the seeds' `accepted_manifest` model, whatever
//! the order attempts finish and are validated in.

use std::collections::BTreeMap;

use manifestdb::{FileCheck, PublishOptions, PublishOutcome, TaskKey};
use proptest::prelude::*;

use crate::support::{TestStore, candidate, run_spec, write_rows};

/// The seeds' reference, transcribed: sort by (task, attempt), first valid wins.
fn accepted_manifest(attempts: &[(String, u32, bool)]) -> BTreeMap<String, u32> {
    let mut sorted = attempts.to_vec();
    sorted.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let mut accepted = BTreeMap::new();
    for (task, attempt, valid) in sorted {
        if valid {
            accepted.entry(task).or_insert(attempt);
        }
    }
    accepted
}

/// Per task, per attempt: `Some(valid)` if it finishes, `None` if it never does.
fn plan_strategy() -> impl Strategy<Value = (Vec<Vec<Option<bool>>>, Vec<usize>)> {
    prop::collection::vec(prop::collection::vec(prop::option::weighted(0.85, any::<bool>()), 1..5), 1..4).prop_flat_map(|tasks| {
        let tokens: usize = tasks.iter().map(Vec::len).sum::<usize>() * 2;
        (Just(tasks), Just((0..tokens).collect::<Vec<_>>()).prop_shuffle())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn accepted_attempt_matches_the_seeds_model((tasks, order) in plan_strategy()) {
        let t = TestStore::new();
        let store = &t.store;
        let partitions: Vec<String> = (0..tasks.len()).map(|i| format!("region=r{i}")).collect();
        let specs: Vec<(&str, u64, i64)> = partitions.iter().map(|p| (p.as_str(), 5, 50)).collect();
        store.declare_run(&run_spec("ds", "run", "snap", &specs)).unwrap();

        // Begin every attempt up front (the store numbers them), remember the flat index.
        let mut flat = Vec::new();
        for (task_index, attempts) in tasks.iter().enumerate() {
            let task = TaskKey::new("ds", "run", &partitions[task_index]);
            for outcome in attempts {
                let ticket = store.begin_attempt(&task).unwrap();
                flat.push((task_index, ticket, *outcome));
            }
        }
        // Each attempt owns two tokens: the first one met finishes it, the second validates it.
        let mut seen = vec![0u8; flat.len()];
        for token in order {
            let i = token / 2;
            let (task_index, ticket, outcome) = &flat[i];
            let Some(valid) = outcome else { continue };
            seen[i] += 1;
            if seen[i] == 1 {
                let rows = if *valid { 5 } else { 4 };
                let file = write_rows(&ticket.staging_dir, rows, 50);
                store.finish_attempt(&ticket.key, &candidate("snap", rows, 50, file)).unwrap();
            } else {
                let verdict = store.validate_attempt(&ticket.key, FileCheck::Size).unwrap();
                prop_assert_eq!(verdict.is_valid(), *valid, "task {} attempt {}", task_index, ticket.key.attempt);
            }
        }

        let model = accepted_manifest(
            &flat.iter().filter_map(|(ti, ticket, outcome)| outcome.map(|v| (partitions[*ti].clone(), ticket.key.attempt, v))).collect::<Vec<_>>(),
        );
        let snapshot = store.snapshot().unwrap();
        for partition in &partitions {
            let accepted = snapshot.accepted(&TaskKey::new("ds", "run", partition)).unwrap();
            prop_assert_eq!(accepted, model.get(partition).copied(), "partition {}", partition);
        }
        drop(snapshot);

        match store.publish("ds", "run", &PublishOptions::default()).unwrap() {
            PublishOutcome::Published(_) => {
                prop_assert_eq!(model.len(), partitions.len());
                let manifest = store.snapshot().unwrap().manifest("ds", None).unwrap().unwrap();
                let published: BTreeMap<String, u32> = manifest.partitions.iter().map(|p| (p.partition.clone(), p.attempt)).collect();
                prop_assert_eq!(published, model);
            }
            PublishOutcome::Refused(refusal) => {
                let missing: Vec<&String> = partitions.iter().filter(|p| !model.contains_key(*p)).collect();
                let named: Vec<&String> = refusal.tasks.iter().map(|t| &t.partition).collect();
                prop_assert_eq!(named, missing);
            }
            other => prop_assert!(false, "unexpected outcome {:?}", other),
        }
    }
}

#[test]
fn the_seeds_reference_example_holds() {
    let attempts =
        vec![("day-47-part-2".to_string(), 1, true), ("day-47-part-2".to_string(), 2, true), ("day-47-part-3".to_string(), 1, true)];
    let model = accepted_manifest(&attempts);
    assert_eq!(model, BTreeMap::from([("day-47-part-2".to_string(), 1), ("day-47-part-3".to_string(), 1)]));
}

#[test]
fn a_verdict_after_publish_does_not_change_what_was_published() {
    let t = TestStore::new();
    let store = &t.store;
    store.declare_run(&run_spec("ds", "run", "snap", &[("p", 5, 50)])).unwrap();
    let task = TaskKey::new("ds", "run", "p");
    let slow = store.begin_attempt(&task).unwrap();
    let fast = store.begin_attempt(&task).unwrap();
    let file = write_rows(&fast.staging_dir, 5, 50);
    store.finish_attempt(&fast.key, &candidate("snap", 5, 50, file)).unwrap();
    assert!(store.validate_attempt(&fast.key, FileCheck::Size).unwrap().is_valid());
    let PublishOutcome::Published(generation) = store.publish("ds", "run", &PublishOptions::default()).unwrap() else { panic!() };
    // The slow first attempt finishes after the publish: recorded, validated, but the
    // published manifest and the accepted index stay on attempt 2.
    let file = write_rows(&slow.staging_dir, 5, 50);
    store.finish_attempt(&slow.key, &candidate("snap", 5, 50, file)).unwrap();
    assert!(store.validate_attempt(&slow.key, FileCheck::Size).unwrap().is_valid());
    let snapshot = store.snapshot().unwrap();
    assert_eq!(snapshot.accepted(&task).unwrap(), Some(2));
    assert_eq!(snapshot.partition("ds", "p", None).unwrap().unwrap().attempt, 2);
    assert_eq!(snapshot.current("ds").unwrap().unwrap(), generation);
    // And the published run takes no new attempts.
    assert!(matches!(store.begin_attempt(&task), Err(manifestdb::Error::RunPublished { generation: 1, .. })));
}

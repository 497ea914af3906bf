//! Many operations in one commit (`Store::run_batch`): each with its own outcome, a refused
//! one failing alone; and validation in two halves (files read before the write).

use manifestdb::{
    BATCH_OPS_MAX, BatchOp, BatchOutcome, ClaimOutcome, Error, FileCheck, FinishOutcome, MarkOutcome, PublishOptions, PublishOutcome,
    TaskKey, Verdict,
};

use crate::support::{TestDir, TestStore, candidate, run_attempt, run_spec, write_rows};

fn begin(partition: &str) -> BatchOp {
    serde_json::from_value(serde_json::json!({"op": "begin", "dataset": "units", "run": "r1", "partition": partition})).unwrap()
}

#[test]
fn a_batch_runs_every_operation_with_its_own_outcome_and_a_refused_one_fails_alone() {
    let t = TestStore::new();
    t.store.declare_run(&run_spec("units", "r1", "s1", &[("a", 2, 700), ("b", 1, 5)])).unwrap();
    let ops = vec![begin("a"), begin("nope"), begin("a"), begin("b")];
    let results = t.store.run_batch(&ops).unwrap();
    assert_eq!(results.len(), 4);
    let attempt = |i: usize| match &results[i] {
        Ok(BatchOutcome::Begin(ticket)) => ticket.clone(),
        other => panic!("op {i}: {other:?}"),
    };
    assert!(matches!(results[1], Err(Error::UnknownTask { .. })), "{:?}", results[1]);
    // Later operations see earlier ones' writes: two begins of one task, consecutive numbers.
    let (a1, a2, b1) = (attempt(0), attempt(2), attempt(3));
    assert_eq!((a1.key.attempt, a2.key.attempt, b1.key.attempt), (1, 2, 1));
    assert_ne!(a1.staging_dir, a2.staging_dir);
    assert!(a1.staging_dir.is_dir() && a2.staging_dir.is_dir() && b1.staging_dir.is_dir());

    // Finishes: one good, one conflicting with it (refused alone), one of an unknown attempt.
    let file = write_rows(&a1.staging_dir, 2, 700);
    let good = candidate("s1", 2, 700, file.clone());
    let mut other = good.clone();
    other.digest = Some("different".into());
    let finish = |attempt: u32, c: &manifestdb::Candidate| BatchOp::Finish {
        dataset: "units".into(),
        run: "r1".into(),
        partition: "a".into(),
        attempt,
        candidate: c.clone(),
    };
    let results = t.store.run_batch(&[finish(1, &good), finish(1, &other), finish(9, &good), finish(1, &good)]).unwrap();
    assert!(matches!(results[0], Ok(BatchOutcome::Finish(FinishOutcome::Recorded))), "{:?}", results[0]);
    assert!(matches!(results[1], Err(Error::CandidateConflict { .. })), "{:?}", results[1]);
    assert!(matches!(results[2], Err(Error::UnknownAttempt { .. })), "{:?}", results[2]);
    assert!(matches!(results[3], Ok(BatchOutcome::Finish(FinishOutcome::AlreadyRecorded))), "{:?}", results[3]);

    // Validations (files checked before the transaction), and a refused one beside them.
    let validate = |partition: &str, attempt: u32| BatchOp::Validate {
        dataset: "units".into(),
        run: "r1".into(),
        partition: partition.into(),
        attempt,
        checksums: true,
    };
    let results = t.store.run_batch(&[validate("a", 1), validate("b", 1)]).unwrap();
    assert!(matches!(&results[0], Ok(BatchOutcome::Validate(v)) if v.is_valid()), "{:?}", results[0]);
    assert!(matches!(results[1], Err(Error::AttemptState { .. })), "b#1 has not finished: {:?}", results[1]);

    // Everything acknowledged is durable; nothing of the refused operations was written.
    let t = t.reopen();
    let snapshot = t.store.snapshot().unwrap();
    assert_eq!(snapshot.attempts(&TaskKey::new("units", "r1", "a")).unwrap().len(), 2);
    assert_eq!(snapshot.attempts(&TaskKey::new("units", "r1", "b")).unwrap().len(), 1);
    assert_eq!(snapshot.accepted(&TaskKey::new("units", "r1", "a")).unwrap(), Some(1));
    let stored = snapshot.attempt(&TaskKey::new("units", "r1", "a").attempt(1)).unwrap().unwrap();
    assert_eq!(stored.candidate.unwrap().digest, good.digest);
}

#[test]
fn a_batch_of_many_begins_gives_each_its_own_outcome_while_its_directories_are_made_beside_the_write() {
    // 40 begins: enough for their task directories to be made on a thread of their own while
    // the transaction runs. The outcomes are the ones a batch of few begins gives.
    let t = TestStore::new();
    let partitions: Vec<String> = (0..40).map(|i| format!("p{i:02}")).collect();
    let tasks: Vec<(&str, u64, i64)> = partitions.iter().map(|p| (p.as_str(), 1, 1)).collect();
    t.store.declare_run(&run_spec("units", "r1", "s1", &tasks)).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let run_dir = t.staging().join("units/r1");
    // The declare made the task directories: two of them are swapped for a symlink and a file.
    std::fs::remove_dir(run_dir.join("p07")).unwrap();
    std::fs::remove_dir(run_dir.join("p08")).unwrap();
    std::os::unix::fs::symlink(outside.path(), run_dir.join("p07")).unwrap();
    std::fs::write(run_dir.join("p08"), b"not a directory").unwrap();
    let mut ops: Vec<BatchOp> = partitions.iter().map(|p| begin(p)).collect();
    ops.insert(3, begin("nope"));
    ops.insert(20, begin("p03"));
    ops.insert(
        30,
        BatchOp::Finish {
            dataset: "units".into(),
            run: "r1".into(),
            partition: "p01".into(),
            attempt: 9,
            candidate: candidate("s1", 1, 1, write_rows(outside.path(), 1, 1)),
        },
    );
    let results = t.store.run_batch(&ops).unwrap();
    assert_eq!(results.len(), 43);
    let mut tickets = Vec::new();
    for (op, result) in ops.iter().zip(&results) {
        match (op, result) {
            (BatchOp::Begin { partition, .. }, Err(Error::UnknownTask { .. })) if partition == "nope" => {}
            (BatchOp::Begin { partition, .. }, Err(err @ Error::InvalidInput { .. })) if partition == "p07" => {
                assert!(err.to_string().contains("symlink"), "{err}")
            }
            (BatchOp::Begin { partition, .. }, Err(err @ Error::InvalidInput { .. })) if partition == "p08" => {
                assert!(err.to_string().contains("not a directory"), "{err}")
            }
            (BatchOp::Finish { .. }, Err(Error::UnknownAttempt { .. })) => {}
            (BatchOp::Begin { partition, .. }, Ok(BatchOutcome::Begin(ticket)))
                if !["nope", "p07", "p08"].contains(&partition.as_str()) =>
            {
                assert_eq!(&ticket.key.task.partition, partition);
                assert!(ticket.staging_dir.is_dir() && ticket.staging_dir.starts_with(&run_dir), "{}", ticket.staging_dir.display());
                tickets.push(ticket.clone());
            }
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    // Two begins of p03 in one batch: consecutive numbers, the second in the order given.
    let p03: Vec<u32> = tickets.iter().filter(|t| t.key.task.partition == "p03").map(|t| t.key.attempt).collect();
    assert_eq!(p03, [1, 2]);
    assert_eq!(tickets.len(), 39, "40 begins of new partitions, two refused, and a second of p03");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1, "nothing but the test's own file outside the root");
    // Every begin acknowledged is durable, and nothing of the refused ones was written.
    let t = t.reopen();
    let snapshot = t.store.snapshot().unwrap();
    for ticket in &tickets {
        assert!(snapshot.attempt(&ticket.key).unwrap().is_some(), "{:?}", ticket.key);
    }
    for refused in ["p07", "p08"] {
        assert!(snapshot.attempts(&TaskKey::new("units", "r1", refused)).unwrap().is_empty(), "{refused}");
    }
}

#[test]
fn effects_in_a_batch_are_claimed_once_and_marked_by_the_claimant() {
    let t = TestStore::new();
    t.store.declare_run(&run_spec("units", "r1", "s1", &[("p", 1, 1)])).unwrap();
    let line = |json: &str| -> BatchOp { serde_json::from_str(json).unwrap() };
    let results = t
        .store
        .run_batch(&[line(r#"{"op": "record_effect", "dataset": "units", "run": "r1", "effect": "notify", "payload": "hi"}"#)])
        .unwrap();
    assert!(matches!(&results[0], Ok(BatchOutcome::RecordEffect(r)) if r.newly_recorded), "{:?}", results[0]);
    let ticket = run_attempt(&t.store, &TaskKey::new("units", "r1", "p"), "s1", 1, 1);
    t.store.validate_attempt(&ticket.key, FileCheck::Size).unwrap();
    assert!(matches!(t.store.publish("units", "r1", &PublishOptions::default()).unwrap(), PublishOutcome::Published(_)));
    let results = t
        .store
        .run_batch(&[
            line(r#"{"op": "claim_effect", "dataset": "units", "run": "r1", "effect": "notify", "claimant": "w1", "lease_ms": 60000}"#),
            line(r#"{"op": "claim_effect", "dataset": "units", "run": "r1", "effect": "notify", "claimant": "w2", "lease_ms": 60000}"#),
            line(r#"{"op": "mark_emitted", "dataset": "units", "run": "r1", "effect": "notify", "claimant": "w2"}"#),
            line(r#"{"op": "mark_emitted", "dataset": "units", "run": "r1", "effect": "notify", "claimant": "w1"}"#),
            line(r#"{"op": "mark_emitted", "dataset": "units", "run": "r1", "effect": "notify", "claimant": "w1"}"#),
            line(r#"{"op": "claim_effect", "dataset": "units", "run": "r1", "effect": "nope", "claimant": "w1", "lease_ms": 60000}"#),
        ])
        .unwrap();
    assert!(matches!(results[0], Ok(BatchOutcome::ClaimEffect(ClaimOutcome::Claimed { .. }))), "{:?}", results[0]);
    assert!(matches!(results[1], Ok(BatchOutcome::ClaimEffect(ClaimOutcome::HeldByOther { .. }))), "{:?}", results[1]);
    assert!(matches!(results[2], Ok(BatchOutcome::MarkEmitted(MarkOutcome::ClaimedByOther { .. }))), "{:?}", results[2]);
    assert!(matches!(results[3], Ok(BatchOutcome::MarkEmitted(MarkOutcome::Marked { .. }))), "{:?}", results[3]);
    assert!(matches!(results[4], Ok(BatchOutcome::MarkEmitted(MarkOutcome::AlreadyEmitted { .. }))), "{:?}", results[4]);
    assert!(matches!(results[5], Err(Error::UnknownEffect { .. })), "{:?}", results[5]);
}

#[test]
fn a_batch_over_the_limit_runs_nothing_and_malformed_operations_do_not_parse() {
    let t = TestStore::new();
    t.store.declare_run(&run_spec("units", "r1", "s1", &[("a", 1, 1)])).unwrap();
    let ops = vec![begin("a"); BATCH_OPS_MAX + 1];
    assert!(matches!(t.store.run_batch(&ops), Err(Error::InvalidInput { .. })));
    assert!(t.store.snapshot().unwrap().attempts(&TaskKey::new("units", "r1", "a")).unwrap().is_empty());
    assert!(t.store.run_batch(&[]).unwrap().is_empty());
    for bad in [
        r#"{"op": "publish", "dataset": "units", "run": "r1"}"#,
        r#"{"op": "begin", "dataset": "units", "run": "r1"}"#,
        r#"{"op": "begin", "dataset": "units", "run": "r1", "partition": "a", "extra": 1}"#,
        r#"{"dataset": "units", "run": "r1", "partition": "a"}"#,
    ] {
        assert!(serde_json::from_str::<BatchOp>(bad).is_err(), "{bad}");
    }
    // A name with `..` is refused for its operation alone.
    let results = t.store.run_batch(&[begin("../x"), begin("a")]).unwrap();
    assert!(matches!(results[0], Err(Error::InvalidInput { .. })), "{:?}", results[0]);
    assert!(matches!(results[1], Ok(BatchOutcome::Begin(_))), "{:?}", results[1]);
}

#[test]
fn a_prepared_validation_stores_its_verdict_unless_another_was_stored_first() {
    let t = TestStore::new();
    t.store.declare_run(&run_spec("units", "r1", "s1", &[("a", 2, 700)])).unwrap();
    let ticket = run_attempt(&t.store, &TaskKey::new("units", "r1", "a"), "s1", 2, 700);
    let prepared = t.store.prepare_validation(&ticket.key, FileCheck::SizeAndChecksum).unwrap();
    assert!(prepared.verdict().is_valid());
    // Nothing is stored by preparing: the task has no accepted attempt yet.
    assert_eq!(t.store.snapshot().unwrap().accepted(&TaskKey::new("units", "r1", "a")).unwrap(), None);
    // Another validator stores its verdict first (the file is gone by then: invalid); it stands.
    std::fs::remove_file(ticket.staging_dir.join("part.csv")).unwrap();
    assert!(!t.store.validate_attempt(&ticket.key, FileCheck::Size).unwrap().is_valid());
    let stored = t.store.store_validation(&prepared).unwrap();
    assert!(matches!(stored, Verdict::Invalid(_)), "{stored:?}");

    // A verdict prepared under another staging root is refused.
    let other = TestDir::new();
    let other_store = other.open().unwrap();
    other_store.declare_run(&run_spec("units", "r1", "s1", &[("a", 2, 700)])).unwrap();
    let other_ticket = run_attempt(&other_store, &TaskKey::new("units", "r1", "a"), "s1", 2, 700);
    let foreign = other_store.prepare_validation(&other_ticket.key, FileCheck::Size).unwrap();
    let t2 = TestStore::new();
    t2.store.declare_run(&run_spec("units", "r1", "s1", &[("a", 2, 700)])).unwrap();
    run_attempt(&t2.store, &TaskKey::new("units", "r1", "a"), "s1", 2, 700);
    assert!(matches!(t2.store.store_validation(&foreign), Err(Error::InvalidInput { .. })));
}

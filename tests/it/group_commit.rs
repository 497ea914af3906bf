//! Group commit seen from the public API: many threads beginning, finishing and validating at
//! once get exactly the results a sequential execution would give.

use std::collections::BTreeMap;
use std::sync::Barrier;

use manifestdb::{AttemptStatus, Error, FileCheck, Store, TaskKey, Verdict};

use crate::support::{TestStore, candidate, run_spec, write_rows};

const ROWS: u64 = 10;
const TOTAL: i64 = 100;

fn partition(i: usize) -> String {
    format!("part={i:03}")
}

fn declare(store: &Store, tasks: usize) {
    let partitions: Vec<String> = (0..tasks).map(partition).collect();
    let specs: Vec<(&str, u64, i64)> = partitions.iter().map(|p| (p.as_str(), ROWS, TOTAL)).collect();
    store.declare_run(&run_spec("ds", "run-1", "snap@1", &specs)).unwrap();
}

/// One begin + finish + validate cycle; the candidate is valid iff `valid`. Returns the attempt
/// number and the verdict.
fn cycle(store: &Store, task: &TaskKey, valid: bool) -> (u32, Verdict) {
    let ticket = store.begin_attempt(task).unwrap();
    let total = if valid { TOTAL } else { TOTAL - 1 };
    let file = write_rows(&ticket.staging_dir, ROWS, total);
    store.finish_attempt(&ticket.key, &candidate("snap@1", ROWS, total, file)).unwrap();
    let verdict = store.validate_attempt(&ticket.key, FileCheck::SizeAndChecksum).unwrap();
    (ticket.key.attempt, verdict)
}

/// Whether cycle `j` of worker `w` writes a valid candidate: a fixed, mixed plan.
fn plan(w: usize, j: usize) -> bool {
    !(w + 2 * j).is_multiple_of(3)
}

#[test]
fn many_threads_on_shared_tasks_get_distinct_dense_attempts_and_the_right_accepted_one() {
    let t = TestStore::new();
    let store = &t.store;
    let (tasks, workers, cycles) = (4, 24, 5);
    declare(store, tasks);
    let barrier = Barrier::new(workers);
    let results: Vec<(TaskKey, u32, bool, Verdict)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let task = TaskKey::new("ds", "run-1", partition(w % tasks));
                    barrier.wait();
                    (0..cycles)
                        .map(|j| {
                            let (attempt, verdict) = cycle(store, &task, plan(w, j));
                            (task.clone(), attempt, plan(w, j), verdict)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });

    let mut per_task: BTreeMap<TaskKey, BTreeMap<u32, bool>> = BTreeMap::new();
    for (task, attempt, valid, verdict) in &results {
        assert_eq!(verdict.is_valid(), *valid, "{task}#{attempt}: {verdict:?}");
        let previous = per_task.entry(task.clone()).or_default().insert(*attempt, *valid);
        assert!(previous.is_none(), "attempt {task}#{attempt} was handed out twice");
    }
    let snapshot = store.snapshot().unwrap();
    for (task, attempts) in &per_task {
        let numbers: Vec<u32> = attempts.keys().copied().collect();
        let expected: Vec<u32> = (1..=(workers / tasks * cycles) as u32).collect();
        assert_eq!(numbers, expected, "attempt numbers of {task} are dense from 1");
        let lowest_valid = attempts.iter().find(|(_, valid)| **valid).map(|(n, _)| *n);
        assert_eq!(snapshot.accepted(task).unwrap(), lowest_valid, "accepted attempt of {task}");
        for info in snapshot.attempts(task).unwrap() {
            let AttemptStatus::Validated(verdict) = &info.status else { panic!("{}: {:?}", info.key, info.status) };
            assert_eq!(verdict.is_valid(), attempts[&info.key.attempt], "stored verdict of {}", info.key);
        }
    }
}

/// One task as the store holds it: each attempt's number, status and candidate digest, and the
/// accepted attempt.
type TaskState = (Vec<(u32, AttemptStatus, Option<String>)>, Option<u32>);

/// The store's view of every task.
fn state(store: &Store, tasks: usize) -> Vec<TaskState> {
    let snapshot = store.snapshot().unwrap();
    (0..tasks)
        .map(|i| {
            let task = TaskKey::new("ds", "run-1", partition(i));
            let attempts = snapshot
                .attempts(&task)
                .unwrap()
                .into_iter()
                .map(|a| (a.key.attempt, a.status, a.candidate.and_then(|c| c.digest)))
                .collect();
            (attempts, snapshot.accepted(&task).unwrap())
        })
        .collect()
}

#[test]
fn concurrent_execution_leaves_the_same_state_as_sequential_execution() {
    // One worker per task keeps each task's own order fixed, so the sequential run is the
    // reference for the whole final state; the workers still share batches across tasks.
    let (tasks, cycles) = (16, 6);
    let concurrent = TestStore::new();
    declare(&concurrent.store, tasks);
    let barrier = Barrier::new(tasks);
    std::thread::scope(|scope| {
        for w in 0..tasks {
            let (store, barrier) = (&concurrent.store, &barrier);
            scope.spawn(move || {
                let task = TaskKey::new("ds", "run-1", partition(w));
                barrier.wait();
                for j in 0..cycles {
                    cycle(store, &task, plan(w, j));
                }
            });
        }
    });
    let sequential = TestStore::new();
    declare(&sequential.store, tasks);
    for w in 0..tasks {
        let task = TaskKey::new("ds", "run-1", partition(w));
        for j in 0..cycles {
            cycle(&sequential.store, &task, plan(w, j));
        }
    }
    // Compare what is durable: the concurrent store's state after reopening it.
    let concurrent = concurrent.reopen();
    assert_eq!(state(&concurrent.store, tasks), state(&sequential.store, tasks));
}

#[test]
fn refusals_among_concurrent_writes_fail_only_themselves() {
    let t = TestStore::new();
    let store = &t.store;
    let tasks = 8;
    declare(store, tasks);
    let barrier = Barrier::new(2 * tasks);
    std::thread::scope(|scope| {
        for w in 0..tasks {
            let barrier = &barrier;
            // A good worker...
            scope.spawn(move || {
                let task = TaskKey::new("ds", "run-1", partition(w));
                barrier.wait();
                let (attempt, verdict) = cycle(store, &task, true);
                assert_eq!((attempt, verdict), (1, Verdict::Valid));
            });
            // ...next to one whose every request is refused on its merits.
            scope.spawn(move || {
                barrier.wait();
                let unknown = TaskKey::new("ds", "run-1", "part=none");
                assert!(matches!(store.begin_attempt(&unknown), Err(Error::UnknownTask { .. })));
                let missing = TaskKey::new("ds", "run-1", partition(w)).attempt(99);
                let file = manifestdb::FileEntry { path: "part.csv".into(), size_bytes: 1, crc32: 0 };
                assert!(matches!(
                    store.finish_attempt(&missing, &candidate("snap@1", ROWS, TOTAL, file)),
                    Err(Error::UnknownAttempt { .. })
                ));
            });
        }
    });
    // Nothing poisoned the handle, and every good attempt is accepted.
    let snapshot = store.snapshot().unwrap();
    for w in 0..tasks {
        assert_eq!(snapshot.accepted(&TaskKey::new("ds", "run-1", partition(w))).unwrap(), Some(1));
    }
    declare(store, tasks);
}

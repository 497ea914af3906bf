//! Criterion micro-benchmarks of manifestdb's read paths and CPU-bound helpers.
//!
//! Durable writes are measured by `benches/throughput.rs`, side by side with the disk's limit;
//! these benches cover what a reader and a validator pay per call, which the disk does not
//! dominate: opening a snapshot, resolving one partition, reading a whole manifest, re-reading a
//! stored verdict, and checksumming a file.
//!
//! Run with `cargo bench --workspace --bench micro`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use manifestdb::{Candidate, FileCheck, PublishOptions, PublishOutcome, RunSpec, Store, TaskKey, TaskSpec, file_crc32};

const PARTITIONS: usize = 1_000;

fn partition(i: usize) -> String {
    format!("p={i:07}")
}

/// A store holding one dataset of `PARTITIONS` published partitions.
fn published_store(dir: &std::path::Path) -> Store {
    let store = Store::open(dir.join("store.redb"), dir.join("staging")).expect("open store");
    let spec = RunSpec {
        dataset: "ds".into(),
        run: "run-1".into(),
        snapshot: "snap".into(),
        tasks: (0..PARTITIONS).map(|i| TaskSpec { partition: partition(i), expected_rows: 0, expected_total: None }).collect(),
        grain: None,
        trust_reported_figures: true,
    };
    store.declare_run(&spec).expect("declare");
    std::thread::scope(|scope| {
        for t in 0..16 {
            let store = &store;
            scope.spawn(move || {
                for i in (t..PARTITIONS).step_by(16) {
                    let ticket = store.begin_attempt(&TaskKey::new("ds", "run-1", partition(i))).expect("begin");
                    let candidate =
                        Candidate { snapshot: "snap".into(), rows: Some(0), total: None, digest: Some("d".into()), files: Vec::new() };
                    store.finish_attempt(&ticket.key, &candidate).expect("finish");
                    store.validate_attempt(&ticket.key, FileCheck::Size).expect("validate");
                }
            });
        }
    });
    match store.publish("ds", "run-1", &PublishOptions::default()).expect("publish") {
        PublishOutcome::Published(_) => store,
        other => panic!("publish refused: {other:?}"),
    }
}

fn reads(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = published_store(dir.path());
    c.bench_function("snapshot_open", |b| b.iter(|| black_box(store.snapshot().expect("snapshot"))));
    let snapshot = store.snapshot().expect("snapshot");
    let mut i = 0;
    c.bench_function("partition_lookup_1k", |b| {
        b.iter(|| {
            i = (i + 7919) % PARTITIONS;
            black_box(snapshot.partition("ds", &partition(i), None).expect("lookup"))
        })
    });
    c.bench_function("manifest_1k_partitions", |b| b.iter(|| black_box(snapshot.manifest("ds", None).expect("manifest"))));
    let task = TaskKey::new("ds", "run-1", partition(0));
    // A verdict, once stored, is returned without a write: the cost of a repeated validation.
    c.bench_function("validate_stored_verdict", |b| {
        b.iter(|| black_box(store.validate_attempt(&task.attempt(1), FileCheck::Size).expect("validate")))
    });
}

fn checksums(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("part.bin");
    std::fs::write(&path, vec![0x5Au8; 1 << 20]).expect("write");
    c.bench_function("file_crc32_1mib", |b| b.iter(|| black_box(file_crc32(&path).expect("crc"))));
}

criterion_group!(benches, reads, checksums);
criterion_main!(benches);

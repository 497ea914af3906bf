//! A staging root on S3-compatible object storage (feature `s3`), against a real server: the
//! `s3s-fs` process `scripts/s3-server start` runs on loopback (no in-process mock). Every test
//! needs `MANIFESTDB_TEST_S3` (the bucket URL the script prints, with the `AWS_*` environment
//! beside it); without it each says loudly that it was skipped, and with `CI=true` it fails.
//!
//! Each test works under a prefix of its own in the bucket, so tests run in parallel.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use manifestdb::{
    Candidate, DataFormat, FileCheck, GateFailure, Grain, PublishOptions, PublishOutcome, RunSpec, Store, TaskKey, TaskSpec, Verdict,
    VerifyOptions, describe_file, list_staged_files,
};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::support::{PgDatabase, new_location, postgres_admin};

/// The bucket URL of the test server.
const S3_ENV: &str = "MANIFESTDB_TEST_S3";

/// A fresh prefix in the test bucket, with a client for playing the worker; `None` (said
/// loudly) without a server, a failure under `CI=true`.
#[track_caller]
fn s3_prefix() -> Option<S3Prefix> {
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    let bucket_url = match std::env::var(S3_ENV) {
        Ok(url) if !url.is_empty() => url,
        _ => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{test}: CI=true but {S3_ENV} is not set: object-storage tests must run in CI (.ci/run starts a server)");
            }
            eprintln!(
                "\n*** SKIPPED {test}: no S3-compatible server ({S3_ENV} is not set). Start one with \
                 `scripts/s3-server install && eval \"$(scripts/s3-server start)\"` ***\n"
            );
            return None;
        }
    };
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() % 1_000_000_000_000;
    let prefix = format!("t{}-{}-{nanos}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    let bucket = bucket_url.strip_prefix("s3://").expect("MANIFESTDB_TEST_S3 is s3://BUCKET").trim_end_matches('/').to_owned();
    let store = AmazonS3Builder::from_env().with_bucket_name(&bucket).build().expect("an S3 client from the environment");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    Some(S3Prefix { url: format!("s3://{bucket}/{prefix}"), prefix, store: Arc::new(store), runtime })
}

/// A prefix of the test bucket and a client on it.
struct S3Prefix {
    /// `s3://bucket/prefix`: the staging root the store is given.
    url: String,
    prefix: String,
    store: Arc<dyn ObjectStore>,
    runtime: tokio::runtime::Runtime,
}

impl S3Prefix {
    fn key(&self, rel: &str) -> ObjectPath {
        ObjectPath::parse(format!("{}/{rel}", self.prefix)).expect("an object key")
    }

    /// Writes an object below the root, as a worker does (`rel` relative to the root).
    fn put(&self, rel: &str, bytes: &[u8]) {
        self.runtime.block_on(self.store.put(&self.key(rel), PutPayload::from(bytes.to_vec()))).expect("PUT");
    }

    /// The attempt's path relative to the root, from its staging URL.
    fn rel_of(&self, staging_dir: &std::path::Path) -> String {
        let text = staging_dir.to_str().expect("a URL");
        text.strip_prefix(&format!("{}/", self.url)).unwrap_or_else(|| panic!("{text} is not below {}", self.url)).to_owned()
    }
}

fn csv(rows: &[(u32, u32, i64)]) -> Vec<u8> {
    let mut out = String::from("store,item,units\n");
    for (store, item, units) in rows {
        out.push_str(&format!("{store},{item},{units}\n"));
    }
    out.into_bytes()
}

fn csv_run(dataset: &str, tasks: &[(&str, u64, i64)]) -> RunSpec {
    let mut spec = RunSpec::new(dataset, "r1", "snap@1").with_grain(Grain::new(DataFormat::Csv, &["store", "item"], "units"));
    for (partition, rows, total) in tasks {
        spec = spec.with_task(TaskSpec::new(*partition, *rows).with_total(*total));
    }
    spec
}

/// A candidate of every object the attempt wrote, as `attempt finish --scan` makes it.
fn scanned(staging_dir: &std::path::Path) -> Candidate {
    let mut candidate = Candidate::new("snap@1");
    for path in list_staged_files(staging_dir).expect("listing the attempt's prefix") {
        candidate = candidate.with_file(describe_file(staging_dir, &path).expect("describing an object"));
    }
    candidate
}

/// On the suite's layer (a redb file, or a fresh PostgreSQL database under
/// `MANIFESTDB_TEST_LAYER=postgres`).
#[test]
fn a_run_staged_on_s3_with_a_retried_attempt_publishes_each_partition_exactly_once() {
    let Some(s3) = s3_prefix() else { return };
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let (location, _db) = new_location(dir.path());
    let (other_location, _other_db) = new_location(other.path());
    protocol_with_a_retried_attempt(&s3, dir.path(), &location, &other_location);
}

/// The metadata on PostgreSQL whatever the suite's layer (with `MANIFESTDB_TEST_POSTGRES`; the
/// test says it skipped without one, and fails under `CI=true`), staging on S3: coordinators on
/// many hosts, workers on many hosts, nothing shared but the database and the bucket.
#[test]
fn a_run_with_its_metadata_on_postgres_and_staging_on_s3_publishes_each_partition_exactly_once() {
    let Some(s3) = s3_prefix() else { return };
    let Some(admin) = postgres_admin() else { return };
    let (db, other_db) = (PgDatabase::create(&admin), PgDatabase::create(&admin));
    let dir = tempfile::tempdir().unwrap();
    protocol_with_a_retried_attempt(&s3, dir.path(), &PathBuf::from(db.url()), &PathBuf::from(other_db.url()));
}

/// The protocol with staging on `s3`, the store at `location` (`dir` the local directory beside
/// it; `other` another store's location, which must not adopt the same root).
fn protocol_with_a_retried_attempt(s3: &S3Prefix, dir: &std::path::Path, location: &std::path::Path, other: &std::path::Path) {
    let store = Store::open(location, &s3.url).expect("a store staging on S3");
    assert_eq!(store.staging_url(), Some(s3.url.as_str()));
    store.declare_run(&csv_run("daily", &[("region=eu", 2, 700), ("region=us", 1, 50)])).unwrap();

    // region=eu: attempt 1 writes and finishes, its acknowledgement is lost, the scheduler
    // retries: attempt 2 writes the same rows into a prefix of its own.
    let eu = TaskKey::new("daily", "r1", "region=eu");
    let first = store.begin_attempt(&eu).unwrap();
    let second = store.begin_attempt(&eu).unwrap();
    assert_ne!(first.staging_dir, second.staging_dir, "two attempts never share a prefix");
    for ticket in [&first, &second] {
        assert!(ticket.staging_dir.to_str().unwrap().starts_with(&format!("{}/", s3.url)), "{:?}", ticket.staging_dir);
        s3.put(&format!("{}/part-0.csv", s3.rel_of(&ticket.staging_dir)), &csv(&[(1, 7, 300)]));
        s3.put(&format!("{}/sub/part-1.csv", s3.rel_of(&ticket.staging_dir)), &csv(&[(2, 7, 400)]));
    }
    let us = TaskKey::new("daily", "r1", "region=us");
    let only = store.begin_attempt(&us).unwrap();
    s3.put(&format!("{}/part.csv", s3.rel_of(&only.staging_dir)), &csv(&[(5, 1, 50)]));
    // Nothing was made on the local disk for staging: at most the store file is there.
    let local: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).filter(|name| name != "store.redb").collect();
    assert!(local.is_empty(), "{local:?}");

    for ticket in [&second, &first, &only] {
        let candidate = scanned(&ticket.staging_dir);
        assert!(!candidate.files.is_empty());
        let verdict = store.finish_and_validate(&ticket.key, &candidate, FileCheck::SizeAndChecksum).unwrap();
        assert!(verdict.is_valid(), "{:?}: {verdict:?}", ticket.key);
    }
    match store.publish("daily", "r1", &PublishOptions::default()).unwrap() {
        PublishOutcome::Published(generation) => assert_eq!(generation.number, 1),
        other => panic!("not published: {other:?}"),
    }
    let manifest = store.snapshot().unwrap().manifest("daily", None).unwrap().expect("published");
    let summary: Vec<(String, u32, u64, Option<i64>)> =
        manifest.partitions.iter().map(|p| (p.partition.clone(), p.attempt, p.rows, p.total)).collect();
    // The lowest valid attempt of each task, once; the input's totals.
    assert_eq!(summary, vec![("region=eu".into(), 1, 2, Some(700)), ("region=us".into(), 1, 1, Some(50))]);
    let eu_entry = &manifest.partitions[0];
    assert_eq!(eu_entry.staging_dir.as_deref(), Some(first.staging_dir.as_path()), "the manifest points at the attempt's prefix");
    assert_eq!(eu_entry.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), vec!["part-0.csv", "sub/part-1.csv"]);

    // A second publish of the same run changes nothing.
    assert!(!matches!(store.publish("daily", "r1", &PublishOptions::default()).unwrap(), PublishOutcome::Published(g) if g.number != 1));
    store.close().unwrap();
    // Reopened over the same root (its marker names the store), and refused over another
    // store's root.
    let again = Store::open(location, &s3.url).expect("reopened");
    again.close().unwrap();
    match Store::open(other, &s3.url) {
        Err(manifestdb::Error::StagingRootMismatch { .. }) => {}
        other => panic!("another store adopted a root in use: {other:?}"),
    }
}

#[test]
fn a_truncated_a_replaced_and_a_missing_object_are_refused_with_their_reasons() {
    let Some(s3) = s3_prefix() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (location, _db) = new_location(dir.path());
    let store = Store::open(&location, &s3.url).unwrap();
    store.declare_run(&csv_run("d", &[("p=1", 2, 30)])).unwrap();
    let task = TaskKey::new("d", "r1", "p=1");
    let body = csv(&[(1, 1, 10), (2, 2, 20)]);
    let mut verdicts = Vec::new();
    for damage in ["truncated", "replaced", "missing"] {
        let ticket = store.begin_attempt(&task).unwrap();
        let rel = format!("{}/part.csv", s3.rel_of(&ticket.staging_dir));
        s3.put(&rel, &body);
        let candidate = scanned(&ticket.staging_dir);
        store.finish_attempt(&ticket.key, &candidate).unwrap();
        match damage {
            "truncated" => s3.put(&rel, &body[..body.len() - 4]),
            // Same size, other content: only the checksum tells.
            "replaced" => s3.put(&rel, &csv(&[(1, 1, 10), (2, 2, 90)])),
            _ => s3.runtime.block_on(s3.store.delete(&s3.key(&rel))).unwrap(),
        }
        verdicts.push(store.validate_attempt(&ticket.key, FileCheck::SizeAndChecksum).unwrap());
    }
    let reasons: Vec<&Vec<GateFailure>> = verdicts
        .iter()
        .map(|v| match v {
            Verdict::Invalid(failures) => failures,
            Verdict::Valid => panic!("a damaged object was accepted: {verdicts:?}"),
        })
        .collect();
    // Each names the object and what happened to it (beside what reading it at the grain found).
    assert!(reasons[0].iter().any(|r| matches!(r, GateFailure::FileSizeMismatch { path, .. } if path == "part.csv")), "{:?}", reasons[0]);
    assert!(
        reasons[1].iter().any(|r| matches!(r, GateFailure::FileChecksumMismatch { path, .. } if path == "part.csv")),
        "{:?}",
        reasons[1]
    );
    assert!(reasons[2].iter().any(|r| matches!(r, GateFailure::FileMissing { path } if path == "part.csv")), "{:?}", reasons[2]);
    // Nothing valid: the run cannot publish.
    assert!(matches!(store.publish("d", "r1", &PublishOptions::default()).unwrap(), PublishOutcome::Refused(_)));
}

#[test]
fn verify_with_checksums_rereads_objects_and_catches_one_replaced_after_publish() {
    let Some(s3) = s3_prefix() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (location, _db) = new_location(dir.path());
    let mut store = Store::open(&location, &s3.url).unwrap();
    store.declare_run(&csv_run("d", &[("p=1", 2, 30)])).unwrap();
    let ticket = store.begin_attempt(&TaskKey::new("d", "r1", "p=1")).unwrap();
    let rel = format!("{}/part.csv", s3.rel_of(&ticket.staging_dir));
    s3.put(&rel, &csv(&[(1, 1, 10), (2, 2, 20)]));
    assert!(store.finish_and_validate(&ticket.key, &scanned(&ticket.staging_dir), FileCheck::Size).unwrap().is_valid());
    assert!(matches!(store.publish("d", "r1", &PublishOptions::default()).unwrap(), PublishOutcome::Published(_)));

    let checks = VerifyOptions { files: Some(FileCheck::SizeAndChecksum), ..VerifyOptions::default() };
    let clean = store.verify(&checks).unwrap();
    assert_eq!(clean.files_checked, 1);
    assert!(clean.findings.is_empty(), "{:?}", clean.findings);

    // The published object replaced by one of the same size: only a re-read sees it.
    s3.put(&rel, &csv(&[(1, 1, 10), (2, 2, 90)]));
    let by_size = store.verify(&VerifyOptions { files: Some(FileCheck::Size), ..VerifyOptions::default() }).unwrap();
    assert!(by_size.findings.is_empty(), "sizes alone cannot tell: {:?}", by_size.findings);
    let report = store.verify(&checks).unwrap();
    let found: Vec<(&str, String)> = report.findings.iter().map(|f| (f.table, f.message.clone())).collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "files");
    assert!(found[0].1.contains("crc32"), "{found:?}");
    assert!(report.findings[0].key.ends_with("/part.csv"), "{:?}", report.findings[0].key);
}

#[test]
fn parquet_objects_validate_with_the_digest_of_the_same_file_on_a_local_root() {
    let Some(s3) = s3_prefix() else { return };
    let bytes = parquet_bytes(&[(1, 10), (2, 20), (3, 30)]);
    let grain = Grain::new(DataFormat::Parquet, &["id"], "units");
    let spec = RunSpec::new("pq", "r1", "snap@1").with_task(TaskSpec::new("p=1", 3).with_total(60)).with_grain(grain);
    let task = TaskKey::new("pq", "r1", "p=1");
    let mut digests = Vec::new();
    let dir = tempfile::tempdir().unwrap();
    for root in [s3.url.clone(), dir.path().join("staging").display().to_string()] {
        let db = dir.path().join(format!("store-{}.redb", digests.len()));
        let store = Store::open(&db, PathBuf::from(&root)).unwrap();
        store.declare_run(&spec).unwrap();
        let ticket = store.begin_attempt(&task).unwrap();
        if root.starts_with("s3://") {
            s3.put(&format!("{}/part.parquet", s3.rel_of(&ticket.staging_dir)), &bytes);
        } else {
            std::fs::write(ticket.staging_dir.join("part.parquet"), &bytes).unwrap();
        }
        let verdict = store.finish_and_validate(&ticket.key, &scanned(&ticket.staging_dir), FileCheck::SizeAndChecksum).unwrap();
        assert!(verdict.is_valid(), "{root}: {verdict:?}");
        let info = store.snapshot().unwrap().attempt(&ticket.key).unwrap().expect("the attempt");
        let figures = info.reconciliation.expect("figures computed at the grain");
        digests.push((figures.computed_rows, figures.computed_total, figures.computed_digest));
    }
    assert_eq!(digests[0], digests[1], "object and local file give the same figures and digest");
    assert_eq!(digests[0].0, Some(3));
}

fn parquet_bytes(rows: &[(i64, i64)]) -> Vec<u8> {
    use arrow_array::{ArrayRef, Int64Array, RecordBatch};
    let ids: ArrayRef = Arc::new(Int64Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>()));
    let units: ArrayRef = Arc::new(Int64Array::from(rows.iter().map(|r| r.1).collect::<Vec<_>>()));
    let batch = RecordBatch::try_from_iter([("id", ids), ("units", units)]).unwrap();
    let mut out = Vec::new();
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    out
}

impl S3Prefix {
    /// The object at `rel` (relative to the root), whole.
    fn get(&self, rel: &str) -> Vec<u8> {
        let got = self.runtime.block_on(async { self.store.get(&self.key(rel)).await?.bytes().await });
        got.unwrap_or_else(|e| panic!("GET {rel}: {e}")).to_vec()
    }

    /// Whether an object is at `rel` (relative to the root).
    fn exists(&self, rel: &str) -> bool {
        match self.runtime.block_on(self.store.head(&self.key(rel))) {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => false,
            Err(e) => panic!("HEAD {rel}: {e}"),
        }
    }
}

#[test]
fn cleanup_of_an_object_root_deletes_dead_attempts_objects_never_a_live_or_published_ones() {
    use manifestdb::{ApplyOptions, CleanupOptions, CleanupReason, RunMode, SkipReason, StoreOptions};
    let Some(s3) = s3_prefix() else { return };
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions { attempt_lifetime_max: Some(std::time::Duration::from_secs(1)), ..StoreOptions::default() };
    let (location, _db) = new_location(dir.path());
    let store = Store::open_with_options(&location, &s3.url, &options).unwrap();
    // r1 is published; r2 has a live attempt (never abandoned: it may still be writing) and an
    // abandoned one.
    store.declare_run(&csv_run("d", &[("p=done", 1, 5)]).clone()).unwrap();
    let r2 = RunSpec::new("d", "r2", "snap@1")
        .with_grain(Grain::new(DataFormat::Csv, &["store", "item"], "units"))
        .with_task(TaskSpec::new("p=live", 1).with_total(5))
        .with_task(TaskSpec::new("p=dead", 1).with_total(5));
    store.declare_run(&r2).unwrap();
    let body = csv(&[(1, 1, 5)]);
    let done = store.begin_attempt(&TaskKey::new("d", "r1", "p=done")).unwrap();
    let done_rel = format!("{}/part.csv", s3.rel_of(&done.staging_dir));
    s3.put(&done_rel, &body);
    assert!(store.finish_and_validate(&done.key, &scanned(&done.staging_dir), FileCheck::SizeAndChecksum).unwrap().is_valid());
    assert!(matches!(store.publish("d", "r1", &PublishOptions::default()).unwrap(), PublishOutcome::Published(_)));
    let live = store.begin_attempt(&TaskKey::new("d", "r2", "p=live")).unwrap();
    let live_rel = format!("{}/part.csv", s3.rel_of(&live.staging_dir));
    s3.put(&live_rel, &body);
    let dead = store.begin_attempt(&TaskKey::new("d", "r2", "p=dead")).unwrap();
    let dead_rel = s3.rel_of(&dead.staging_dir);
    s3.put(&format!("{dead_rel}/a.csv"), &body);
    s3.put(&format!("{dead_rel}/b.csv"), &body);
    store.abandon_attempt(&dead.key).unwrap();
    s3.put("stray/file.csv", &body);

    // Older than the threshold (S3's last-modified has a resolution of a second).
    std::thread::sleep(std::time::Duration::from_millis(3200));
    let plan =
        store.plan_cleanup(&CleanupOptions { age_threshold: std::time::Duration::from_secs(2), ..CleanupOptions::default() }).unwrap();
    let mut candidates: Vec<&str> = plan.candidates.iter().map(|p| p.path.as_str()).collect();
    candidates.sort();
    assert_eq!(candidates, vec![format!("{dead_rel}/a.csv"), format!("{dead_rel}/b.csv")]);
    assert!(plan.candidates.iter().all(|p| p.reason != CleanupReason::Unknown));
    assert_eq!(plan.unknown.iter().map(|p| p.path.as_str()).collect::<Vec<_>>(), vec!["stray/file.csv"]);

    // Re-checked before each delete: an object written again since the plan is skipped.
    s3.put(&format!("{dead_rel}/b.csv"), &csv(&[(9, 9, 5)]));
    let applied =
        store.apply_cleanup(plan.id, &ApplyOptions { mode: RunMode::Execute, delete_unknown: true, ..ApplyOptions::default() }).unwrap();
    let mut deleted = applied.deleted.clone();
    deleted.sort();
    assert_eq!(deleted, vec![format!("{dead_rel}/a.csv"), "stray/file.csv".to_owned()]);
    assert_eq!(applied.skipped.len(), 1, "{:?}", applied.skipped);
    assert_eq!(applied.skipped[0].reason, SkipReason::Changed);
    assert!(!s3.exists(&format!("{dead_rel}/a.csv")) && !s3.exists("stray/file.csv"));
    assert!(s3.exists(&live_rel), "a live attempt's object was deleted");
    assert!(s3.exists(&done_rel), "a published object was deleted");
    assert!(s3.exists(manifestdb::STAGING_ROOT_MARKER), "the root's marker was deleted");
    // The live worker finishes after the cleanup: its attempt validates.
    assert!(store.finish_and_validate(&live.key, &scanned(&live.staging_dir), FileCheck::SizeAndChecksum).unwrap().is_valid());
    let mut store = store;
    let report = store.verify(&VerifyOptions { files: Some(FileCheck::SizeAndChecksum), ..VerifyOptions::default() }).unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

impl S3Prefix {
    /// Another client on the same prefix, with a runtime of its own: for a worker in a thread
    /// of its own (a client's connections belong to the runtime that opened them).
    fn worker(&self) -> S3Prefix {
        let bucket = self.url.strip_prefix("s3://").and_then(|rest| rest.split('/').next()).expect("s3://BUCKET/PREFIX").to_owned();
        let store = AmazonS3Builder::from_env().with_bucket_name(&bucket).build().expect("an S3 client from the environment");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        S3Prefix { url: self.url.clone(), prefix: self.prefix.clone(), store: Arc::new(store), runtime }
    }

    /// Every object below `rel`, relative to the root.
    fn list(&self, rel: &str) -> Vec<String> {
        use futures_util::StreamExt;
        let prefix = self.key(rel);
        let metas: Vec<_> = self.runtime.block_on(self.store.list(Some(&prefix)).collect());
        let mut out: Vec<String> = metas
            .into_iter()
            .map(|m| m.expect("LIST").location.as_ref().strip_prefix(&format!("{}/", self.prefix)).expect("below the root").to_owned())
            .collect();
        out.sort();
        out
    }
}

/// A worker that keeps writing into its prefix after its attempt was abandoned (a zombie: the
/// scheduler gave up on it, it did not hear), while the task's retry writes and cleanup runs
/// again and again: the zombie can neither finish nor validate, nothing it wrote reaches a
/// generation, cleanup never deletes an object of the live attempt whatever it plans while
/// that attempt writes, and once the zombie stops, cleanup leaves nothing of it.
#[test]
fn a_zombie_writing_after_its_attempt_was_abandoned_never_publishes_and_cleanup_racing_a_live_attempt_spares_it() {
    use manifestdb::{ApplyOptions, CleanupOptions, RunMode, StoreOptions};
    use std::sync::atomic::AtomicBool;
    let Some(s3) = s3_prefix() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (location, _db) = new_location(dir.path());
    let options = StoreOptions { attempt_lifetime_max: Some(std::time::Duration::from_secs(1)), ..StoreOptions::default() };
    let mut store = Store::open_with_options(&location, &s3.url, &options).unwrap();
    store.declare_run(&csv_run("d", &[("p=1", 1, 5)])).unwrap();
    let task = TaskKey::new("d", "r1", "p=1");
    let zombie = store.begin_attempt(&task).unwrap();
    let zombie_rel = s3.rel_of(&zombie.staging_dir);
    s3.put(&format!("{zombie_rel}/part.csv"), &csv(&[(1, 1, 5)]));
    store.abandon_attempt(&zombie.key).unwrap();
    let live = store.begin_attempt(&task).unwrap();
    let live_rel = s3.rel_of(&live.staging_dir);

    let stop = AtomicBool::new(false);
    let header_only = csv(&[]);
    let live_written = std::thread::scope(|scope| {
        // The zombie: new objects, and its first one written again, until told to stop.
        let zombie_worker = s3.worker();
        let zombie_rel = &zombie_rel;
        let (stop, header_only) = (&stop, &header_only);
        scope.spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                zombie_worker.put(&format!("{zombie_rel}/late-{i}.csv"), &csv(&[(9, 9, 99)]));
                zombie_worker.put(&format!("{zombie_rel}/part.csv"), &csv(&[(9, 9, 99)]));
                i += 1;
                std::thread::sleep(std::time::Duration::from_millis(30));
            }
        });
        // The retry, writing for as long as cleanup runs: files without rows, then its rows.
        let live_worker = s3.worker();
        let live_rel = &live_rel;
        let writer = scope.spawn(move || {
            let mut written = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let rel = format!("{live_rel}/empty-{i}.csv");
                live_worker.put(&rel, header_only);
                written.push(rel);
                i += 1;
                std::thread::sleep(std::time::Duration::from_millis(30));
            }
            live_worker.put(&format!("{live_rel}/part.csv"), &csv(&[(1, 1, 5)]));
            written.push(format!("{live_rel}/part.csv"));
            written
        });
        // The zombie can neither finish nor validate.
        match store.finish_attempt(&zombie.key, &scanned(&zombie.staging_dir)) {
            Err(manifestdb::Error::AttemptAbandoned { .. }) => {}
            other => panic!("an abandoned attempt finished: {other:?}"),
        }
        match store.validate_attempt(&zombie.key, FileCheck::SizeAndChecksum) {
            Err(manifestdb::Error::AttemptAbandoned { .. }) | Err(manifestdb::Error::AttemptState { .. }) => {}
            other => panic!("an abandoned attempt validated: {other:?}"),
        }
        // Cleanup, again and again while both write (the age threshold above the lifetime;
        // S3's last-modified times are whole seconds).
        let threshold = std::time::Duration::from_secs(2);
        let mut deleted = 0;
        for _ in 0..4 {
            std::thread::sleep(std::time::Duration::from_millis(1100));
            let plan = store.plan_cleanup(&CleanupOptions { age_threshold: threshold, ..CleanupOptions::default() }).unwrap();
            for planned in plan.candidates.iter().chain(&plan.unknown) {
                assert!(planned.path.starts_with(&format!("{zombie_rel}/")), "planned outside the zombie's prefix: {}", planned.path);
            }
            let applied = store.apply_cleanup(plan.id, &ApplyOptions { mode: RunMode::Execute, ..ApplyOptions::default() }).unwrap();
            assert!(applied.deleted.iter().all(|p| p.starts_with(&format!("{zombie_rel}/"))), "{:?}", applied.deleted);
            deleted += applied.deleted.len();
        }
        assert!(deleted > 0, "cleanup deleted none of the zombie's aged objects");
        stop.store(true, Ordering::SeqCst);
        writer.join().expect("the live worker")
    });
    // Every object the live attempt wrote is there; it validates and publishes, the zombie's
    // objects nowhere in the generation.
    assert_eq!(s3.list(&live_rel), {
        let mut w = live_written.clone();
        w.sort();
        w
    });
    assert!(store.finish_and_validate(&live.key, &scanned(&live.staging_dir), FileCheck::SizeAndChecksum).unwrap().is_valid());
    assert!(matches!(store.publish("d", "r1", &PublishOptions::default()).unwrap(), PublishOutcome::Published(_)));
    let manifest = store.snapshot().unwrap().manifest("d", None).unwrap().expect("published");
    assert_eq!(manifest.partitions[0].attempt, live.key.attempt);
    assert_eq!(manifest.partitions[0].staging_dir.as_deref(), Some(live.staging_dir.as_path()));
    // The zombie stopped: once its last objects are old enough, cleanup leaves nothing of it.
    std::thread::sleep(std::time::Duration::from_millis(3200));
    // (Were the zombie's prefix ever empty between two of its writes, cleanup would have
    // removed its attempt's record, and what it wrote after would be objects no attempt owns:
    // listed as unknown, deleted when asked.)
    let plan =
        store.plan_cleanup(&CleanupOptions { age_threshold: std::time::Duration::from_secs(2), ..CleanupOptions::default() }).unwrap();
    assert!(plan.unknown.iter().chain(&plan.candidates).all(|p| p.path.starts_with(&format!("{zombie_rel}/"))), "{plan:?}");
    let everything = ApplyOptions { mode: RunMode::Execute, delete_unknown: true, ..ApplyOptions::default() };
    store.apply_cleanup(plan.id, &everything).unwrap();
    assert_eq!(s3.list(&zombie_rel), Vec::<String>::new(), "the zombie's objects outlived cleanup");
    assert_eq!(s3.list(&live_rel).len(), live_written.len(), "a published object was deleted");
    let report = store.verify(&VerifyOptions { files: Some(FileCheck::SizeAndChecksum), ..VerifyOptions::default() }).unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

/// Figures, printed (nothing is asserted about speed): the attempt cycle (begin, write 1 MiB,
/// finish with a scan, validate with checksums) with staging on the S3 server against a local
/// root, and validation throughput of one CSV partition read from each. Quick by default (8
/// cycles, a 16 MiB partition); `MANIFESTDB_S3_FIGURES_CYCLES` and `MANIFESTDB_S3_FIGURES_MB`
/// make it longer. Run it alone: `cargo test --workspace --test it -- --nocapture
/// objects::figures`.
#[test]
fn figures_attempt_cycle_and_validation_throughput_on_s3_beside_a_local_root() {
    let Some(s3) = s3_prefix() else { return };
    let number = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let cycles = number("MANIFESTDB_S3_FIGURES_CYCLES", 8);
    let partition_mb = number("MANIFESTDB_S3_FIGURES_MB", 16);
    // 1 MiB of rows (about 18 bytes a row), and the partition of `partition_mb` MiB.
    let rows_of = |bytes: usize| {
        let mut out = String::from("store,item,units\n");
        let mut n = 0u64;
        while out.len() < bytes {
            out.push_str(&format!("{},{},{}\n", n / 1000, n % 1000, n % 7));
            n += 1;
        }
        (out.into_bytes(), n, (0..n).map(|i| (i % 7) as i64).sum::<i64>())
    };
    let (cycle_body, cycle_rows, cycle_total) = rows_of(1 << 20);
    let (big_body, big_rows, big_total) = rows_of(partition_mb << 20);
    let dir = tempfile::tempdir().unwrap();
    let mut lines = Vec::new();
    for (name, root) in [("s3", s3.url.clone()), ("local", dir.path().join("staging").display().to_string())] {
        let store = Store::open(dir.path().join(format!("{name}.redb")), PathBuf::from(&root)).unwrap();
        let mut spec = RunSpec::new("cycle", "r1", "snap@1").with_grain(Grain::new(DataFormat::Csv, &["store", "item"], "units"));
        for i in 0..cycles {
            spec = spec.with_task(TaskSpec::new(format!("p={i}"), cycle_rows).with_total(cycle_total));
        }
        spec = spec.with_task(TaskSpec::new("p=big", big_rows).with_total(big_total));
        store.declare_run(&spec).unwrap();
        let write = |ticket: &manifestdb::AttemptTicket, body: &[u8]| {
            if name == "s3" {
                s3.put(&format!("{}/part.csv", s3.rel_of(&ticket.staging_dir)), body);
            } else {
                std::fs::write(ticket.staging_dir.join("part.csv"), body).unwrap();
            }
        };
        let started = std::time::Instant::now();
        for i in 0..cycles {
            let ticket = store.begin_attempt(&TaskKey::new("cycle", "r1", format!("p={i}"))).unwrap();
            write(&ticket, &cycle_body);
            let verdict = store.finish_and_validate(&ticket.key, &scanned(&ticket.staging_dir), FileCheck::SizeAndChecksum).unwrap();
            assert!(verdict.is_valid(), "{verdict:?}");
        }
        let cycle_ms = started.elapsed().as_secs_f64() * 1000.0 / cycles as f64;
        let ticket = store.begin_attempt(&TaskKey::new("cycle", "r1", "p=big")).unwrap();
        write(&ticket, &big_body);
        let candidate = scanned(&ticket.staging_dir);
        store.finish_attempt(&ticket.key, &candidate).unwrap();
        let started = std::time::Instant::now();
        assert!(store.validate_attempt(&ticket.key, FileCheck::Size).unwrap().is_valid());
        let mb_per_s = big_body.len() as f64 / (1 << 20) as f64 / started.elapsed().as_secs_f64();
        lines.push(format!(
            "{name:>5}: attempt cycle (begin, write 1 MiB, finish --scan, validate with checksums) {cycle_ms:.1} ms; \
             validation at the grain of a {partition_mb} MiB CSV partition {mb_per_s:.0} MB/s"
        ));
        store.close().unwrap();
    }
    println!("staging on S3 (s3s-fs on loopback) beside a local root, {cycles} cycles:\n{}", lines.join("\n"));
}

mod table;

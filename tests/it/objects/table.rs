//! A Parquet dataset's Delta table on S3-compatible object storage (`--views s3://...`), against
//! the real `s3s-fs` server: publishes of one partition each, Python's deltalake reading every
//! retained version over S3 (`storage_options` with the endpoint) and summing exactly what the
//! store says, expiry, another writer's append reported and never absorbed. Needs
//! `MANIFESTDB_TEST_S3` and the `AWS_*` environment beside it, and python3 with deltalake (each
//! test says loudly that it was skipped without them, and fails under `CI=true`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use manifestdb::{
    DataFormat, FileCheck, Grain, PublishOptions, PublishOutcome, RetentionPolicy, RunMode, RunSpec, Store, StoreOptions, TaskKey,
    TaskSpec, ViewOptions,
};

use super::{S3Prefix, parquet_bytes, s3_prefix};
use crate::engines::deltalake_available;

const DATASET: &str = "sales";

/// deltalake over S3: prints `{version: {partition: [rows, units]}}` for each version given,
/// `{"error": ...}` for one it cannot read. The storage options are the test server's.
const READ_VERSIONS: &str = r#"
import json, os, sys
from deltalake import DeltaTable
url = sys.argv[1]
opts = {"AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"], "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"], "AWS_REGION": os.environ["AWS_REGION"],
        "AWS_ALLOW_HTTP": "true"}
out = {}
for v in sys.argv[2:]:
    try:
        t = DeltaTable(url, version=int(v), storage_options=opts).to_pyarrow_table().to_pydict()
        parts = {}
        for region, units in zip(t["region"], t["units"]):
            p = parts.setdefault("region=" + region, [0, 0])
            p[0] += 1
            p[1] += units
        out[v] = parts
    except Exception as e:
        out[v] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
print(json.dumps(out))
sys.stdout.flush()
os._exit(0)
"#;

/// deltalake appends rows to the table on S3, as another writer would.
const APPEND: &str = r#"
import os, sys
import pyarrow as pa
from deltalake import write_deltalake
url = sys.argv[1]
opts = {"AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"], "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"], "AWS_REGION": os.environ["AWS_REGION"],
        "AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
t = pa.table({"id": pa.array([900, 901], pa.int64()), "units": pa.array([1000, 7], pa.int64()), "region": ["eu", "eu"]})
write_deltalake(url, t, mode="append", storage_options=opts)
sys.stdout.flush()
os._exit(0)
"#;

pub(super) fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new("python3").args(["-c", script]).args(args).output().expect("run python3");
    assert!(out.status.success(), "python failed ({args:?}): {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `{partition: (rows, units)}` of generation `n` as the store records it.
fn store_says(store: &Store, n: u64) -> BTreeMap<String, (u64, i64)> {
    let manifest = store.snapshot().unwrap().manifest(DATASET, Some(n)).unwrap().expect("a retained generation");
    manifest.partitions.iter().map(|p| (p.partition.clone(), (p.rows, p.total.expect("a total")))).collect()
}

fn spec(run: &str, partitions: &[(usize, i64)]) -> RunSpec {
    let mut spec = RunSpec::new(DATASET, run, format!("snap@{run}")).with_grain(Grain::new(DataFormat::Parquet, &["id"], "units"));
    for &(p, units) in partitions {
        spec = spec.with_task(TaskSpec::new(format!("region=r{p}"), 2).with_total(units + 1));
    }
    spec
}

/// A candidate of every object the attempt wrote, of input snapshot `snapshot`.
fn scanned_as(staging_dir: &std::path::Path, snapshot: &str) -> manifestdb::Candidate {
    let mut candidate = manifestdb::Candidate::new(snapshot);
    for path in manifestdb::list_staged_files(staging_dir).expect("listing the attempt's prefix") {
        candidate = candidate.with_file(manifestdb::describe_file(staging_dir, &path).expect("describing an object"));
    }
    candidate
}

/// Declares, stages (a worker's PUTs), validates and publishes one run.
fn publish(store: &Store, s3: &S3Prefix, run: &str, partitions: &[(usize, i64)]) -> u64 {
    store.declare_run(&spec(run, partitions)).unwrap();
    for &(p, units) in partitions {
        let ticket = store.begin_attempt(&TaskKey::new(DATASET, run, format!("region=r{p}"))).unwrap();
        let rel = s3.rel_of(&ticket.staging_dir);
        s3.put(&format!("{rel}/part-0.parquet"), &parquet_bytes(&[(p as i64 * 10, units), (p as i64 * 10 + 1, 1)]));
        let verdict = store
            .finish_and_validate(&ticket.key, &scanned_as(&ticket.staging_dir, &format!("snap@{run}")), FileCheck::SizeAndChecksum)
            .unwrap();
        assert!(verdict.is_valid(), "{verdict:?}");
    }
    match store.publish(DATASET, run, &PublishOptions::default()).unwrap() {
        PublishOutcome::Published(generation) => generation.number,
        other => panic!("not published: {other:?}"),
    }
}

/// The `view --json` document's `table` part for generation `n`.
fn table_doc(store: &Store, n: Option<u64>) -> serde_json::Value {
    let snapshot = store.snapshot().unwrap();
    manifestdb::documents::operator::view(&snapshot, DATASET, None, n).expect("view document")["table"].clone()
}

/// deltalake reads each retained generation at the version `view --json` names for it, and
/// finds exactly what the store records; returns the versions read.
fn check_every_retained_version(store: &Store, table: &str) -> Vec<u64> {
    let history = store.snapshot().unwrap().history(DATASET).unwrap();
    let mut versions = BTreeMap::new();
    for generation in &history {
        let doc = table_doc(store, Some(generation.number));
        let version = doc["version"].as_u64().unwrap_or_else(|| panic!("generation {} has no version: {doc}", generation.number));
        versions.insert(version.to_string(), generation.number);
    }
    let args: Vec<&str> = std::iter::once(table).chain(versions.keys().map(String::as_str)).collect();
    let read: serde_json::Value = serde_json::from_str(&python(READ_VERSIONS, &args)).expect("deltalake's JSON");
    for (version, &generation) in &versions {
        let found: BTreeMap<String, (u64, i64)> = read[version]
            .as_object()
            .unwrap_or_else(|| panic!("version {version}: {}", read[version]))
            .iter()
            .map(|(k, v)| {
                assert!(k != "error", "deltalake could not read version {version}: {v}");
                (k.clone(), (v[0].as_u64().unwrap(), v[1].as_i64().unwrap()))
            })
            .collect();
        assert_eq!(found, store_says(store, generation), "version {version} (generation {generation}) as deltalake reads it");
    }
    let mut read: Vec<u64> = versions.keys().map(|v| v.parse().unwrap()).collect();
    read.sort_unstable();
    read
}

/// Opens the store staging at `<prefix>/staging` with its views at `<prefix>/views`.
fn open(s3: &S3Prefix, db: &std::path::Path) -> Store {
    let options = StoreOptions { views: Some(ViewOptions::copies(format!("{}/views", s3.url))), ..StoreOptions::default() };
    Store::open_with_options(db, format!("{}/staging", s3.url), &options).expect("a store staging on S3 with its views there")
}

#[test]
fn publishes_with_the_delta_table_on_s3_read_the_same_in_deltalake_at_every_retained_version_and_expiry_lets_go() {
    let Some(s3) = s3_prefix() else { return };
    if !deltalake_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.redb");
    let store = open(&s3, &db);
    let table = format!("{}/views/{DATASET}/table", s3.url);
    assert_eq!(store.delta_table(DATASET).ok(), None, "no generation yet");
    // Generation 1: four partitions; then one partition replaced per publish.
    assert_eq!(publish(&store, &s3, "r1", &[(0, 10), (1, 20), (2, 30), (3, 40)]), 1);
    assert_eq!(store.delta_table(DATASET).unwrap(), PathBuf::from(&table));
    for (i, p) in [2usize, 0, 2].into_iter().enumerate() {
        let n = publish(&store, &s3, &format!("r{}", i + 2), &[(p, 100 * (i as i64 + 1))]);
        assert_eq!(n, i as u64 + 2);
        let doc = table_doc(&store, None);
        assert_eq!(doc["latest_generation"], n, "{doc}");
        assert_eq!(doc["lagging"], false, "{doc}");
    }
    // The change commits: each publish's version removes and adds one partition's file.
    let log = s3.list("views/sales/table/_delta_log");
    let commit = s3.get(&format!("views/sales/table/_delta_log/{:020}.json", 3));
    let text = String::from_utf8(commit).unwrap();
    assert_eq!(text.matches("\"add\"").count(), 1, "{text}");
    assert_eq!(text.matches("\"remove\"").count(), 1, "{text}");
    assert!(text.contains("\"appId\":\"manifestdb\"") && text.contains("\"version\":4"), "the txn action: {text}");
    // Every data file is a copy inside the table; no add names a staging object.
    assert!(!text.contains("/staging/"), "{text}");
    assert!(log.iter().all(|n| !n.contains(".tmp")), "{log:?}");
    let versions = check_every_retained_version(&store, &table);
    assert_eq!(versions, vec![0, 1, 2, 3]);
    // verify reads the table on the server: nothing to report.
    let report = store.snapshot().unwrap().verify(&manifestdb::VerifyOptions { views: true, ..Default::default() });
    assert!(report.findings.is_empty(), "{:?}", report.findings);
    // The generation manifests, with each file's URL in the table.
    let manifest: serde_json::Value = serde_json::from_slice(&s3.get("views/sales/manifests/v4/_manifest.json")).unwrap();
    let url = manifest["partitions"][2]["files"][0]["url"].as_str().expect("a URL").to_owned();
    assert!(url.starts_with(&format!("{table}/data/region=r2/g4-a1-")), "{url}");
    // A directory view is refused, saying where the exact file list is.
    match store.snapshot().unwrap().view_path(DATASET, None) {
        Err(manifestdb::Error::NoView { reason, .. }) => assert!(reason.contains("_manifest.json"), "{reason}"),
        other => panic!("a directory view on object storage: {other:?}"),
    }

    // Expiry keeps 2: the older log entries go (behind a checkpoint), the retained versions
    // read as before, and the copies and manifests only expired generations named are deleted.
    let report = store
        .expire_generations(DATASET, &RetentionPolicy { keep_last: 2, rollback_window: std::time::Duration::ZERO }, RunMode::Execute)
        .unwrap();
    assert_eq!(report.expired, vec![1, 2]);
    let log = s3.list("views/sales/table/_delta_log");
    assert!(!log.iter().any(|n| n.ends_with(&format!("{:020}.json", 0))), "version 0 left: {log:?}");
    assert!(log.iter().any(|n| n.ends_with(&format!("{:020}.checkpoint.parquet", 2))), "no checkpoint at the boundary: {log:?}");
    assert_eq!(check_every_retained_version(&store, &table), vec![2, 3]);
    let data = s3.list("views/sales/table/data");
    assert_eq!(data.len(), 5, "the copies generations 3 and 4 name ({data:?})");
    assert!(!data.iter().any(|n| n.contains("region=r0/g1-") || n.contains("region=r2/g1-")), "an expired copy left: {data:?}");
    assert!(!s3.exists("views/sales/manifests/v1/_manifest.json") && s3.exists("views/sales/manifests/v3/_manifest.json"));
    store.close().unwrap();

    // Reopened without naming the views: the recorded root on S3 is kept.
    let again = Store::open(&db, format!("{}/staging", s3.url)).unwrap();
    assert_eq!(again.view_root().map(PathBuf::from), Some(PathBuf::from(format!("{}/views", s3.url))));
    let status = again.sync_view(DATASET).unwrap().expect("a status");
    assert_eq!((status.table_version, status.foreign_versions.len(), status.table_restored), (Some(3), 0, 0), "{status:?}");

    // A copy another writer's vacuum took: verify names it, `view sync` copies it again.
    let taken = data.iter().find(|n| n.contains("region=r1/")).expect("a copy of region=r1").clone();
    s3.runtime.block_on(object_store::ObjectStoreExt::delete(&s3.store, &s3.key(&taken))).expect("DELETE");
    let report = again.snapshot().unwrap().verify(&manifestdb::VerifyOptions { views: true, ..Default::default() });
    assert!(format!("{:?}", report.findings).contains("missing or not of its"), "{:?}", report.findings);
    let status = again.sync_view(DATASET).unwrap().expect("a status");
    assert_eq!(status.table_restored, 1, "{status:?}");
    assert!(s3.exists(&taken));
    let report = again.snapshot().unwrap().verify(&manifestdb::VerifyOptions { views: true, ..Default::default() });
    assert!(report.findings.is_empty(), "{:?}", report.findings);
    assert_eq!(check_every_retained_version(&again, &table), vec![2, 3]);
}

#[test]
fn a_foreign_append_to_the_table_on_s3_is_reported_never_absorbed() {
    let Some(s3) = s3_prefix() else { return };
    if !deltalake_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = open(&s3, &dir.path().join("store.redb"));
    let table = format!("{}/views/{DATASET}/table", s3.url);
    publish(&store, &s3, "r1", &[(0, 10), (1, 20)]);
    python(APPEND, &[&table]);
    // verify reports the other writer's version and the lagging table, from the server.
    let report = store.snapshot().unwrap().verify(&manifestdb::VerifyOptions { views: true, ..Default::default() });
    let found = format!("{:?}", report.findings);
    assert!(found.contains("another writer") && found.contains("the table lags"), "{found}");
    // The view document says the table lags behind another writer's version.
    let doc = table_doc(&store, None);
    assert_eq!((doc["foreign_versions"][0]["version"].as_u64(), doc["lagging"].as_bool()), (Some(1), Some(true)), "{doc}");
    // A sync reports it and commits the store's generation on top, exactly: the append is not
    // absorbed.
    let status = store.sync_view(DATASET).unwrap().expect("a status");
    assert_eq!((status.foreign_versions.clone(), status.table_version), (vec![1], Some(2)), "{status:?}");
    let read: serde_json::Value = serde_json::from_str(&python(READ_VERSIONS, &[&table, "1", "2"])).unwrap();
    assert_eq!(read["1"]["region=eu"][0], 2, "deltalake reads the foreign version with its append: {read}");
    assert!(read["2"].get("region=eu").is_none(), "the append was absorbed: {read}");
    // The next publish commits on top, its change only.
    publish(&store, &s3, "r2", &[(1, 50)]);
    let doc = table_doc(&store, None);
    assert_eq!((doc["latest_version"].as_u64(), doc["latest_generation"].as_u64()), (Some(3), Some(2)), "{doc}");
    let read: serde_json::Value = serde_json::from_str(&python(READ_VERSIONS, &[&table, "3"])).unwrap();
    assert_eq!((read["3"].get("region=eu"), &read["3"]["region=r1"][1]), (None, &serde_json::json!(51)), "{read}");
    assert_eq!(check_every_retained_version(&store, &table), vec![2, 3]);
}

#[test]
fn a_view_root_on_s3_is_refused_for_local_staging_another_bucket_or_directory_trees() {
    let Some(s3) = s3_prefix() else { return };
    let dir = tempfile::tempdir().unwrap();
    let views = format!("{}/views", s3.url);
    let local = StoreOptions { views: Some(ViewOptions::copies(&views)), ..StoreOptions::default() };
    match Store::open_with_options(dir.path().join("a.redb"), dir.path().join("staging"), &local) {
        Err(manifestdb::Error::ViewRoot { reason, .. }) => assert!(reason.contains("staging root on object storage"), "{reason}"),
        other => panic!("a local staging root with views on S3: {other:?}"),
    }
    let staging = format!("{}/staging", s3.url);
    let trees = StoreOptions { views: Some(ViewOptions::copies(&views).with_trees(manifestdb::ViewTrees::All)), ..StoreOptions::default() };
    match Store::open_with_options(dir.path().join("b.redb"), &staging, &trees) {
        Err(manifestdb::Error::ViewRoot { reason, .. }) => assert!(reason.contains("directory views cannot exist"), "{reason}"),
        other => panic!("directory trees on S3: {other:?}"),
    }
    let other_bucket = StoreOptions { views: Some(ViewOptions::copies("s3://another-bucket/views")), ..StoreOptions::default() };
    match Store::open_with_options(dir.path().join("c.redb"), &staging, &other_bucket) {
        Err(manifestdb::Error::ViewRoot { reason, .. }) => assert!(reason.contains("bucket"), "{reason}"),
        other => panic!("a view root in another bucket: {other:?}"),
    }
    let nested = StoreOptions { views: Some(ViewOptions::copies(format!("{staging}/views"))), ..StoreOptions::default() };
    match Store::open_with_options(dir.path().join("d.redb"), &staging, &nested) {
        Err(manifestdb::Error::ViewRoot { reason, .. }) => assert!(reason.contains("nested"), "{reason}"),
        other => panic!("a view root inside the staging root: {other:?}"),
    }
    let local_views = StoreOptions { views: Some(ViewOptions::copies(dir.path().join("views"))), ..StoreOptions::default() };
    match Store::open_with_options(dir.path().join("e.redb"), &staging, &local_views) {
        Err(manifestdb::Error::ViewRoot { reason, .. }) => assert!(reason.contains("--views s3://"), "{reason}"),
        other => panic!("a local view root for staging on S3: {other:?}"),
    }
}

/// deltalake's side of the figure: a table of `partitions` partitions of `rows` rows each on
/// S3, then `repeats` overwrites of one partition (`mode="overwrite", predicate=...`), each
/// timed inside the process; prints `{"create_s", "overwrite_s": [...]}`. Put-if-absent
/// commits (`conditional_put: etag`), as the store's.
const DELTALAKE_FIGURE: &str = r#"
import json, os, sys, time
import pyarrow as pa
from deltalake import write_deltalake
url, partitions, rows, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
opts = {k: os.environ[k] for k in ["AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"]}
opts["AWS_ALLOW_HTTP"] = "true"
opts["conditional_put"] = "etag"
def part(p, units):
    return pa.table({"id": pa.array(range(rows), pa.int64()), "units": pa.array([units] * rows, pa.int64()),
                     "region": ["r%d" % p] * rows})
t0 = time.perf_counter()
write_deltalake(url, pa.concat_tables([part(p, 1) for p in range(partitions)]), partition_by=["region"], storage_options=opts)
create = time.perf_counter() - t0
times = []
for i in range(repeats):
    data = part(7, i + 2)
    t0 = time.perf_counter()
    write_deltalake(url, data, mode="overwrite", predicate="region = 'r7'", partition_by=["region"], storage_options=opts)
    times.append(time.perf_counter() - t0)
print(json.dumps({"create_s": create, "overwrite_s": times}))
sys.stdout.flush()
os._exit(0)
"#;

/// Figure (printed, not asserted; quick by default): a publish of 1 of 100 partitions with the
/// Delta table on S3 beside deltalake's `write_deltalake(..., mode="overwrite", predicate=...)`
/// of the same partition, against the same server in one run. The store's publish is timed
/// from the call to its return (the store's commit, the server-side copy and its read-back
/// check, the footer read, the Delta commit and the retention's listing); the attempt's
/// staging and validation happen before it, as deltalake's data is in memory before its call.
/// `MANIFESTDB_S3_FIGURES_ROWS` sets the rows per partition (default 10,000). It stages 200
/// partitions (about 40 s on two shared cores), so it runs only when asked
/// (`MANIFESTDB_S3_TABLE_FIGURE=1`, as `.ci/run`'s figures step does): `MANIFESTDB_S3_TABLE_FIGURE=1
/// cargo test -p manifestdb-tests --test it -- --nocapture objects::table::figures`. s3s-fs
/// answers a LIST by walking the whole bucket, so take it in a bucket holding little else.
#[test]
fn figures_publish_of_one_of_100_partitions_with_the_table_on_s3_beside_write_deltalake() {
    let Some(s3) = s3_prefix() else { return };
    if std::env::var("MANIFESTDB_S3_TABLE_FIGURE").map_or(true, |v| v != "1") {
        eprintln!("\n*** SKIPPED the Delta-table-on-S3 figure: set MANIFESTDB_S3_TABLE_FIGURE=1 to take it ***\n");
        return;
    }
    if !deltalake_available() {
        return;
    }
    let rows: i64 = std::env::var("MANIFESTDB_S3_FIGURES_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let (partitions, repeats) = (100usize, 5usize);
    let dir = tempfile::tempdir().unwrap();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let file = |units: i64| -> Vec<u8> {
        let data: Vec<(i64, i64)> = (0..rows).map(|i| (i, units)).collect();
        parquet_bytes(&data)
    };
    // The store: one run of 100 partitions, then `repeats` runs of partition r7.
    let mut publish_s: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (label, views) in [("with the Delta table on S3", true), ("without views (baseline)", false)] {
        let options = StoreOptions {
            views: views.then(|| ViewOptions::copies(format!("{}/{label:.4}-views", s3.url).replace(' ', "_"))),
            ..StoreOptions::default()
        };
        let staging = format!("{}/{}-staging", s3.url, label.split(' ').next().unwrap_or("x"));
        let store = Store::open_with_options(dir.path().join(format!("{views}.redb")), &staging, &options).unwrap();
        let stage = |run: &str, parts: &[usize], units: i64| {
            let mut spec = RunSpec::new(DATASET, run, format!("snap@{run}")).with_grain(Grain::new(DataFormat::Parquet, &["id"], "units"));
            for &p in parts {
                spec = spec.with_task(TaskSpec::new(format!("region=r{p}"), rows as u64).with_total(units * rows));
            }
            store.declare_run(&spec).unwrap();
            let body = file(units);
            for &p in parts {
                let ticket = store.begin_attempt(&TaskKey::new(DATASET, run, format!("region=r{p}"))).unwrap();
                let rel = s3.rel_of(&ticket.staging_dir);
                s3.put(&format!("{rel}/part-0.parquet"), &body);
                let candidate = scanned_as(&ticket.staging_dir, &format!("snap@{run}"));
                assert!(store.finish_and_validate(&ticket.key, &candidate, FileCheck::SizeAndChecksum).unwrap().is_valid());
            }
        };
        stage("r0", &(0..partitions).collect::<Vec<_>>(), 1);
        assert!(matches!(store.publish(DATASET, "r0", &PublishOptions::default()).unwrap(), PublishOutcome::Published(_)));
        for i in 0..repeats {
            let run = format!("r{}", i + 1);
            stage(&run, &[7], i as i64 + 2);
            let t0 = std::time::Instant::now();
            let outcome = store.publish(DATASET, &run, &PublishOptions::default()).unwrap();
            publish_s.entry(label).or_default().push(t0.elapsed().as_secs_f64());
            assert!(matches!(outcome, PublishOutcome::Published(_)), "{outcome:?}");
        }
        if views {
            let doc = table_doc(&store, None);
            assert_eq!(doc["lagging"], false, "{doc}");
        }
        store.close().unwrap();
    }
    let url = format!("{}/deltalake/{DATASET}", s3.url);
    let out: serde_json::Value =
        serde_json::from_str(&python(DELTALAKE_FIGURE, &[&url, &partitions.to_string(), &rows.to_string(), &repeats.to_string()]))
            .expect("the figure's JSON");
    let deltalake: Vec<f64> = out["overwrite_s"].as_array().expect("times").iter().filter_map(serde_json::Value::as_f64).collect();
    let bytes = file(1).len();
    println!(
        "\nFIGURE publish of 1 of {partitions} partitions ({rows} rows, {bytes} bytes of Parquet each), s3s-fs on loopback, \
         median of {repeats} (min):"
    );
    println!("| what | median | min |\n|---|---|---|");
    for (label, times) in &publish_s {
        let min = times.iter().copied().fold(f64::INFINITY, f64::min);
        println!("| manifestdb publish, {label} | {:.1} ms | {:.1} ms |", median(times.clone()) * 1e3, min * 1e3);
    }
    let min = deltalake.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "| deltalake write_deltalake(mode=\"overwrite\", predicate=\"region = 'r7'\") | {:.1} ms | {:.1} ms |",
        median(deltalake.clone()) * 1e3,
        min * 1e3
    );
}

/// Twelve publishes in one handle (the kernel's snapshot of each commit reused by the next
/// while the log lists what that commit left), across the checkpoint of version 10: every
/// version reads in deltalake as its generation, and the log has its checkpoint.
#[test]
fn twelve_publishes_in_one_handle_cross_a_checkpoint_and_every_version_reads_as_its_generation() {
    let Some(s3) = s3_prefix() else { return };
    if !deltalake_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = open(&s3, &dir.path().join("store.redb"));
    let table = format!("{}/views/{DATASET}/table", s3.url);
    publish(&store, &s3, "r0", &[(0, 1), (1, 2), (2, 3)]);
    for i in 1..12usize {
        publish(&store, &s3, &format!("r{i}"), &[(i % 3, 10 * i as i64)]);
    }
    let log = s3.list("views/sales/table/_delta_log");
    assert!(log.iter().any(|n| n.ends_with(&format!("{:020}.checkpoint.parquet", 10))), "no checkpoint at version 10: {log:?}");
    assert_eq!(check_every_retained_version(&store, &table), (0..12).collect::<Vec<u64>>());
}

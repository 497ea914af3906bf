//! Real readers from PyPI over the published views and the Delta table of a Parquet dataset
//! (issue 28, "Tests with real readers"): three generations with retried attempts left in
//! staging; for every retained generation, DuckDB, pandas, polars and pyarrow over its view directory
//! (`Store::view_path`, `current` resolved once) and deltalake and polars over the Delta table
//! (`DeltaTable(path)`, `DeltaTable(path, version=N-1)`; DuckDB's `delta_scan` only where its
//! extension is installed) sum exactly what `show --json` says; the same after a rollback and
//! after expiries; a reader of the staging tree overcounts, by the retried attempts' totals.
//!
//! Outside CI the test skips, saying so, when Python lacks one of the readers; in CI
//! (`CI=true`) that fails it (`.ci/run` installs them). The readers read local files only.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use manifestdb::{
    Candidate, DataFormat, Error, FileCheck, FileEntry, Grain, PublishOptions, PublishOutcome, RetentionPolicy, RollbackOutcome, RunMode,
    RunSpec, Store, StoreOptions, TaskKey, TaskSpec, ViewOptions, describe_file,
};

use crate::support::TestDir;

const DATASET: &str = "sales";
pub(crate) const PARTITIONS: [&str; 4] =
    ["date=2026-11-27/region=eu", "date=2026-11-27/region=us", "date=2026-11-28/region=eu", "date=2026-11-28/region=us"];

const READERS: &str = r#"
import json, sys
import duckdb, pandas as pd, polars as pl, pyarrow.dataset as pads
path = sys.argv[1]
def rows(pairs):
    return sorted([str(d), str(r), int(s)] for d, r, s in pairs)
out = {}
out["duckdb"] = rows(duckdb.sql(
    f"SELECT CAST(date AS VARCHAR), region, sum(units) FROM read_parquet('{path}/**/*.parquet', hive_partitioning = true) GROUP BY ALL"
).fetchall())
df = pl.read_parquet(f"{path}/**/*.parquet", hive_partitioning=True)
g = df.group_by(["date", "region"]).agg(pl.col("units").sum())
out["polars"] = rows(zip(g["date"].cast(pl.String).to_list(), g["region"].to_list(), g["units"].to_list()))
t = pads.dataset(path, format="parquet", partitioning="hive").to_table().group_by(["date", "region"]).aggregate([("units", "sum")])
out["pyarrow"] = rows(zip(t["date"].to_pylist(), t["region"].to_pylist(), t["units_sum"].to_pylist()))
p = pd.read_parquet(path).groupby(["date", "region"], observed=True)["units"].sum()
out["pandas"] = rows((d, r, s) for (d, r), s in p.items())
print(json.dumps(out))
"#;

fn readers_available() -> bool {
    let ok =
        Command::new("python3").args(["-c", "import duckdb, pandas, polars, pyarrow.dataset"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI=true but Python lacks duckdb, pandas, polars or pyarrow (.ci/run installs them)"
        );
        println!("SKIPPED: python3 cannot import duckdb, pandas, polars and pyarrow (pip install duckdb pandas polars pyarrow)");
    }
    ok
}

/// Every engine's `[date, region, sum]` rows over `path`.
fn read_with_engines(path: &Path) -> BTreeMap<String, Vec<(String, String, i64)>> {
    let out = Command::new("python3").args(["-c", READERS]).arg(path).output().expect("run python3");
    assert!(out.status.success(), "readers failed over {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("readers' JSON");
    doc.as_object()
        .expect("object")
        .iter()
        .map(|(engine, rows)| {
            let rows = rows
                .as_array()
                .unwrap()
                .iter()
                .map(|r| (r[0].as_str().unwrap().to_owned(), r[1].as_str().unwrap().to_owned(), r[2].as_i64().unwrap()))
                .collect();
            (engine.clone(), rows)
        })
        .collect()
}

/// What `show --json -g N` says generation `generation` holds (the same document,
/// `documents::reads::show`): `(date, region, total)` per partition.
/// `(date, region, total)` per partition, sorted.
type Sums = Vec<(String, String, i64)>;

/// A reader's `[[date, region, sum], ...]` as [`Sums`].
fn sums(v: &serde_json::Value) -> Sums {
    v.as_array()
        .expect("rows")
        .iter()
        .map(|r| (r[0].as_str().expect("date").to_owned(), r[1].as_str().expect("region").to_owned(), r[2].as_i64().expect("sum")))
        .collect()
}

fn store_says(store: &Store, generation: u64) -> Sums {
    store_says_of(store, DATASET, generation)
}

/// As [`store_says`], for any dataset whose partitions are `date=.../region=...`.
pub(crate) fn store_says_of(store: &Store, dataset: &str, generation: u64) -> Vec<(String, String, i64)> {
    let snapshot = store.snapshot().unwrap();
    let doc = manifestdb::documents::reads::show(&snapshot, dataset, Some(generation), None).expect("show's document");
    let mut out: Vec<(String, String, i64)> = doc["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| {
            let key = p["partition"].as_str().expect("partition");
            let field = |name: &str| key.split('/').find_map(|c| c.strip_prefix(name)).expect("hive key").to_owned();
            (field("date="), field("region="), p["total"].as_i64().expect("total"))
        })
        .collect();
    out.sort();
    out
}

fn write_parquet(dir: &Path, units: &[i64]) -> FileEntry {
    let schema = Arc::new(Schema::new(vec![
        Field::new("store", DataType::Int64, false),
        Field::new("item", DataType::Utf8, false),
        Field::new("units", DataType::Int64, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from((0..units.len() as i64).collect::<Vec<_>>())),
        Arc::new(StringArray::from(vec!["apple"; units.len()])),
        Arc::new(Int64Array::from(units.to_vec())),
    ];
    let batch = RecordBatch::try_new(schema, columns).expect("batch");
    let file = std::fs::File::create(dir.join("part-0.parquet")).expect("create");
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    describe_file(dir, "part-0.parquet").expect("describe")
}

/// Publishes run `run` over `partitions` (`(index, total)`), each with one valid attempt, and
/// a second valid attempt (the lost acknowledgement) for those in `retried`.
fn publish(store: &Store, run: &str, partitions: &[(usize, i64)], retried: &[usize]) -> u64 {
    publish_retried(store, DATASET, run, partitions, retried)
}

/// [`publish`] to `dataset`, no attempt retried.
pub(crate) fn publish_to(store: &Store, dataset: &str, run: &str, partitions: &[(usize, i64)]) -> u64 {
    publish_retried(store, dataset, run, partitions, &[])
}

fn publish_retried(store: &Store, dataset: &str, run: &str, partitions: &[(usize, i64)], retried: &[usize]) -> u64 {
    let snapshot = format!("{dataset}@{run}");
    store
        .declare_run(&RunSpec {
            dataset: dataset.into(),
            run: run.into(),
            snapshot: snapshot.clone(),
            tasks: partitions
                .iter()
                .map(|(i, total)| TaskSpec { partition: PARTITIONS[*i].into(), expected_rows: 2, expected_total: Some(*total) })
                .collect(),
            grain: Some(Grain::new(DataFormat::Parquet, &["store", "item"], "units")),
            trust_reported_figures: false,
        })
        .expect("declare");
    for (i, total) in partitions {
        for _ in 0..if retried.contains(i) { 2 } else { 1 } {
            let ticket = store.begin_attempt(&TaskKey::new(dataset, run, PARTITIONS[*i])).expect("begin");
            let file = write_parquet(&ticket.staging_dir, &[total - 1, 1]);
            let candidate = Candidate { snapshot: snapshot.clone(), rows: None, total: None, digest: None, files: vec![file] };
            store.finish_attempt(&ticket.key, &candidate).expect("finish");
            store.validate_attempt(&ticket.key, FileCheck::SizeAndChecksum).expect("validate");
        }
    }
    match store.publish(dataset, run, &PublishOptions::default()).expect("publish") {
        PublishOutcome::Published(g) => g.number,
        other => panic!("{other:?}"),
    }
}

/// Every retained generation's view read by every engine equals the store's manifest.
fn check_retained(store: &Store) -> usize {
    let history = store.snapshot().unwrap().history(DATASET).unwrap();
    for generation in &history {
        let view = store.view_path(DATASET, Some(generation.number)).expect("view path");
        let expected = store_says(store, generation.number);
        for (engine, seen) in read_with_engines(&view.path) {
            assert_eq!(seen, expected, "{engine} over generation {}'s view {}", generation.number, view.path.display());
        }
    }
    // `current` resolved once is the current generation's view.
    let current = std::fs::canonicalize(store.view_root().unwrap().join(DATASET).join("current")).unwrap();
    assert_eq!(current, store.view_path(DATASET, None).unwrap().path);
    history.len()
}

const DELTA_READERS: &str = r#"
import json, sys
from deltalake import DeltaTable
import polars as pl
path, versions = sys.argv[1], json.loads(sys.argv[2])
def rows(t):
    t = t.group_by(["date", "region"]).aggregate([("units", "sum")])
    return sorted([str(d), str(r), int(s)] for d, r, s in zip(t["date"].to_pylist(), t["region"].to_pylist(), t["units_sum"].to_pylist()))
out = {"latest": DeltaTable(path).version()}
out["deltalake"] = rows(DeltaTable(path).to_pyarrow_table())
g = pl.read_delta(path).group_by(["date", "region"]).agg(pl.col("units").sum())
out["polars"] = sorted([str(d), str(r), int(s)] for d, r, s in zip(g["date"].to_list(), g["region"].to_list(), g["units"].to_list()))
for v in versions:
    out[f"deltalake@{v}"] = rows(DeltaTable(path, version=v).to_pyarrow_table())
    g = pl.read_delta(path, version=v).group_by(["date", "region"]).agg(pl.col("units").sum())
    out[f"polars@{v}"] = sorted([str(d), str(r), int(s)] for d, r, s in zip(g["date"].to_list(), g["region"].to_list(), g["units"].to_list()))
try:
    DeltaTable(path, version=versions[0] - 1)
    out["before_oldest"] = "readable"
except Exception as e:
    out["before_oldest"] = type(e).__name__
import duckdb
# Never a download at test time: the extension is used only where it is installed already.
con = duckdb.connect(config={"autoinstall_known_extensions": False})
try:
    con.sql("LOAD delta")
    out["duckdb"] = sorted([str(d), str(r), int(s)] for d, r, s in con.sql(
        f"SELECT CAST(date AS VARCHAR), region, sum(units) FROM delta_scan('{path}') GROUP BY ALL").fetchall())
except Exception as e:
    out["duckdb_skipped"] = "DuckDB's delta extension is not installed (installing it is a download): " + str(e).splitlines()[0][:120]
print(json.dumps(out))
"#;

pub(crate) fn deltalake_available() -> bool {
    let ok = Command::new("python3").args(["-c", "import deltalake, polars, duckdb"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "CI=true but Python lacks deltalake or polars (.ci/run installs them)");
        println!("SKIPPED: python3 cannot import deltalake and polars (pip install deltalake polars)");
    }
    ok
}

/// The Delta table over every retained generation: the latest version read by deltalake and
/// polars (and DuckDB's `delta_scan` where its extension is installed) sums what the store's
/// current generation says; `version = N - 1` for every retained N equals generation N; the
/// table's version is the current generation - 1.
fn check_delta(store: &Store) -> serde_json::Value {
    let snapshot = store.snapshot().unwrap();
    let history = snapshot.history(DATASET).unwrap();
    let table = store.view_root().unwrap().join(DATASET).join("table");
    let versions: Vec<u64> = history.iter().map(|g| g.number - 1).collect();
    let out = Command::new("python3")
        .args(["-c", DELTA_READERS])
        .arg(&table)
        .arg(serde_json::to_string(&versions).unwrap())
        .output()
        .expect("run python3");
    assert!(out.status.success(), "Delta readers failed over {}: {}", table.display(), String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("readers' JSON");
    let current = snapshot.current(DATASET).unwrap().unwrap().number;
    assert_eq!(doc["latest"], current - 1, "Delta version = generation - 1");
    for engine in ["deltalake", "polars", "duckdb"] {
        if doc.get(engine).is_some() {
            assert_eq!(sums(&doc[engine]), store_says(store, current), "{engine} over the latest version");
        }
    }
    if let Some(reason) = doc.get("duckdb_skipped") {
        println!("DuckDB delta_scan skipped: {reason}");
    }
    for generation in &history {
        for engine in ["deltalake", "polars"] {
            assert_eq!(
                sums(&doc[format!("{engine}@{}", generation.number - 1)]),
                store_says(store, generation.number),
                "{engine} at version {} (generation {})",
                generation.number - 1,
                generation.number
            );
        }
    }
    doc
}

/// The actions of one Delta commit: (adds, removes, every add's numRecords present).
fn delta_actions(table: &Path, version: u64) -> (usize, usize, bool) {
    let text = std::fs::read_to_string(table.join("_delta_log").join(format!("{version:020}.json"))).expect("the commit");
    let (mut adds, mut removes, mut stats) = (0, 0, true);
    for line in text.lines() {
        let action: serde_json::Value = serde_json::from_str(line).expect("a JSON action");
        if let Some(add) = action.get("add") {
            adds += 1;
            let s: serde_json::Value = serde_json::from_str(add["stats"].as_str().unwrap_or("{}")).unwrap_or_default();
            stats &= s["numRecords"].as_i64().is_some_and(|n| n > 0);
        }
        if action.get("remove").is_some() {
            removes += 1;
        }
    }
    (adds, removes, stats)
}

/// Every reader of the issue over one Parquet dataset: three generations with retried
/// attempts left in staging, then a rollback, an expiry and one more publish. At each step
/// DuckDB, pandas, polars and pyarrow over every retained generation's view (`current` resolved once)
/// and deltalake and polars over the Delta table (its latest version and `version = N - 1` for
/// every retained N) sum exactly what `show --json` says; each Delta commit adds and removes
/// exactly the partitions its generation replaced; a reader of the staging tree overcounts.
#[test]
fn readers_of_the_views_and_the_delta_table_sum_what_show_says_through_rollback_and_expiry() {
    if !readers_available() || !deltalake_available() {
        return;
    }
    let dir = TestDir::new();
    let store = dir
        .open_with(&StoreOptions {
            views: Some(ViewOptions::hard_links(dir.path().join("views")).with_trees(manifestdb::ViewTrees::All)),
            ..StoreOptions::default()
        })
        .expect("open");
    let table = store.view_root().unwrap().join(DATASET).join("table");
    assert_eq!(publish(&store, "r1", &[(0, 100), (1, 70), (2, 50), (3, 30)], &[0]), 1);
    assert_eq!(delta_actions(&table, 0), (4, 0, true), "version 0 adds the four partitions");
    assert_eq!(publish(&store, "r2", &[(1, 71), (2, 51)], &[2]), 2);
    assert_eq!(delta_actions(&table, 1), (2, 2, true), "version 1 replaces exactly the two partitions generation 2 replaced");
    assert_eq!(publish(&store, "r3", &[(3, 33)], &[3]), 3);
    assert_eq!(delta_actions(&table, 2), (1, 1, true));
    assert_eq!(check_retained(&store), 3);
    check_delta(&store);

    // A reader of the staging tree counts every attempt: the retried partitions twice.
    let staging = dir.path().join("staging").join(DATASET);
    let out = Command::new("python3")
        .args(["-c", "import duckdb, sys; print(duckdb.sql(f\"SELECT sum(units) FROM read_parquet('{sys.argv[1]}/**/*.parquet')\").fetchall()[0][0])"])
        .arg(&staging)
        .output()
        .expect("run python3");
    assert!(out.status.success(), "DuckDB over the staging tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let staged: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("a sum");
    let every_run: i64 = (100 + 70 + 50 + 30) + (71 + 51) + 33;
    let retried: i64 = 100 + 51 + 33;
    let current: i64 = store_says(&store, 3).iter().map(|(_, _, t)| t).sum();
    assert_eq!(current, 71 + 51 + 100 + 33);
    assert_eq!(staged, every_run + retried, "the staging tree holds every attempt of every run");
    println!(
        "a reader of the staging tree sums {staged}, {} more than the current generation's {current}: every run's output ({every_run}) \
         plus the retried attempts ({retried})",
        staged - current
    );

    // A rollback is a new generation with its own view and a new Delta version restoring the
    // rolled-back generation's files; the older views and versions stay readable.
    let RollbackOutcome::RolledBack(rolled) = store.rollback(DATASET, 1, "ops", "bad upstream").expect("rollback") else {
        panic!("refused");
    };
    assert_eq!(rolled.number, 4);
    assert_eq!(store_says(&store, 4), store_says(&store, 1));
    assert_eq!(delta_actions(&table, 3), (3, 3, true), "version 3 restores the three partitions generations 2 and 3 replaced");
    assert_eq!(check_retained(&store), 4);
    check_delta(&store);

    // Expiry: the expired generations' views are gone and asking for one names the oldest
    // retained; the table gets a checkpoint at the oldest retained version and loses the older
    // log entries (reading an expired version fails) and the data files only expired versions
    // named; the retained generations still read exactly, as views and as versions.
    assert_eq!(data_files(&table), named_by_views(&store), "the table's data files are those the retained views hold");
    let report = store
        .expire_generations(DATASET, &RetentionPolicy { keep_last: 2, rollback_window: Duration::ZERO }, RunMode::Execute)
        .expect("expire");
    assert_eq!(report.expired, [1, 2]);
    match store.view_path(DATASET, Some(1)) {
        Err(Error::GenerationNotRetained { generation: 1, oldest_retained: Some(3), .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(check_retained(&store), 2);
    let doc = check_delta(&store);
    assert_ne!(doc["before_oldest"], "readable", "version 1 (generation 2, expired) is still readable");
    let log = table.join("_delta_log");
    assert!(log.join(format!("{:020}.checkpoint.parquet", 2)).exists(), "a checkpoint at the oldest retained version");
    assert!(!log.join(format!("{:020}.json", 0)).exists() && !log.join(format!("{:020}.json", 1)).exists(), "expired versions' commits");
    assert_eq!(data_files(&table), named_by_views(&store), "no data file a retained version names is gone");

    // One more publish and expiry: generation 3 expires, and with it the data files only it
    // (and the expired ones) named.
    assert_eq!(publish(&store, "r5", &[(0, 105)], &[]), 5);
    assert_eq!(delta_actions(&table, 4), (1, 1, true));
    let before = data_files(&table).len();
    let report = store
        .expire_generations(DATASET, &RetentionPolicy { keep_last: 2, rollback_window: Duration::ZERO }, RunMode::Execute)
        .expect("expire");
    assert_eq!(report.expired, [3]);
    assert_eq!(check_retained(&store), 2);
    let doc = check_delta(&store);
    assert_ne!(doc["before_oldest"], "readable", "version 2 (generation 3, expired) is still readable");
    assert!(log.join(format!("{:020}.checkpoint.parquet", 3)).exists(), "a checkpoint at the oldest retained version");
    let after = data_files(&table);
    assert_eq!(after, named_by_views(&store), "the table's data files are those the retained views hold");
    assert!(after.len() < before, "the data files only expired versions named are gone ({before} before, {} after)", after.len());
}

/// The Parquet files under the table's data directory, relative to it.
fn data_files(table: &Path) -> std::collections::BTreeSet<String> {
    let data = table.join("data");
    walk_files(&data)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .map(|p| p.strip_prefix(&data).unwrap().display().to_string())
        .collect()
}

/// The Parquet files of every retained generation's view, relative to the view directory.
fn named_by_views(store: &Store) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for generation in store.snapshot().unwrap().history(DATASET).unwrap() {
        let view = store.view_path(DATASET, Some(generation.number)).expect("view path").path;
        out.extend(
            walk_files(&view)
                .into_iter()
                .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
                .map(|p| p.strip_prefix(&view).unwrap().display().to_string()),
        );
    }
    out
}

fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk_files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_csv_dataset_keeps_the_directory_view_and_gets_no_delta_table() {
    let dir = TestDir::new();
    let views = dir.path().join("views");
    let store = dir
        .open_with(&StoreOptions {
            views: Some(ViewOptions::hard_links(&views).with_trees(manifestdb::ViewTrees::All)),
            ..StoreOptions::default()
        })
        .expect("open");
    let spec = RunSpec {
        grain: Some(Grain::new(DataFormat::Csv, &["item"], "units")),
        trust_reported_figures: false,
        ..crate::support::run_spec("csv", "r1", "s1", &[("p=1", 2, 10)])
    };
    store.declare_run(&spec).expect("declare");
    let ticket = store.begin_attempt(&TaskKey::new("csv", "r1", "p=1")).expect("begin");
    let file = crate::support::write_rows(&ticket.staging_dir, 2, 10);
    let candidate = Candidate { snapshot: "s1".into(), rows: None, total: None, digest: None, files: vec![file] };
    store.finish_attempt(&ticket.key, &candidate).expect("finish");
    assert!(store.validate_attempt(&ticket.key, FileCheck::Size).expect("validate").is_valid());
    match store.publish("csv", "r1", &PublishOptions::default()).expect("publish") {
        PublishOutcome::Published(_) => {}
        other => panic!("{other:?}"),
    }
    let status = store.sync_view("csv").unwrap().unwrap();
    assert_eq!(status.table_version, None);
    assert!(views.join("csv/current").exists());
    assert!(!views.join("csv/_delta_log").exists() && !views.join("csv/table").exists());
    match store.delta_table("csv") {
        Err(Error::ViewRefused { reason, .. }) => assert!(reason.contains("Delta table's data files are Parquet"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

/// A Parquet file whose columns have other types than the dataset's published files is refused
/// at validation (`ColumnsMismatch`, naming both), before it could give the Delta table two
/// schemas; the same columns and types pass.
#[test]
fn a_parquet_file_of_another_schema_is_refused_at_validation() {
    let dir = TestDir::new();
    let store = dir
        .open_with(&StoreOptions {
            views: Some(ViewOptions::hard_links(dir.path().join("views")).with_trees(manifestdb::ViewTrees::All)),
            ..StoreOptions::default()
        })
        .expect("open");
    assert_eq!(publish(&store, "r1", &[(0, 100), (1, 70)], &[]), 1);
    store
        .declare_run(&RunSpec {
            dataset: DATASET.into(),
            run: "r2".into(),
            snapshot: "sales@r2".into(),
            tasks: vec![TaskSpec { partition: PARTITIONS[0].into(), expected_rows: 2, expected_total: Some(100) }],
            grain: Some(Grain::new(DataFormat::Parquet, &["store", "item"], "units")),
            trust_reported_figures: false,
        })
        .expect("declare");
    let ticket = store.begin_attempt(&TaskKey::new(DATASET, "r2", PARTITIONS[0])).expect("begin");
    // `store` as a 32-bit integer: a valid grain key, but not the dataset's type.
    let schema = Arc::new(Schema::new(vec![
        Field::new("store", DataType::Int32, false),
        Field::new("item", DataType::Utf8, false),
        Field::new("units", DataType::Int64, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(arrow_array::Int32Array::from(vec![0, 1])),
        Arc::new(StringArray::from(vec!["apple"; 2])),
        Arc::new(Int64Array::from(vec![99, 1])),
    ];
    let batch = RecordBatch::try_new(schema, columns).expect("batch");
    let file = std::fs::File::create(ticket.staging_dir.join("part-0.parquet")).expect("create");
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    let entry = describe_file(&ticket.staging_dir, "part-0.parquet").expect("describe");
    let candidate = Candidate { snapshot: "sales@r2".into(), rows: None, total: None, digest: None, files: vec![entry] };
    store.finish_attempt(&ticket.key, &candidate).expect("finish");
    match store.validate_attempt(&ticket.key, FileCheck::SizeAndChecksum).expect("validate") {
        manifestdb::Verdict::Invalid(failures) => {
            let text: Vec<String> = failures.iter().map(ToString::to_string).collect();
            assert!(
                failures.iter().any(|f| matches!(f, manifestdb::GateFailure::ColumnsMismatch { got, expected, .. }
                    if got.contains(&"store Int32".to_owned()) && expected.contains(&"store Int64".to_owned()))),
                "{text:?}"
            );
        }
        other => panic!("a file of another schema passed: {other:?}"),
    }
    // The dataset's own schema passes.
    let ticket = store.begin_attempt(&TaskKey::new(DATASET, "r2", PARTITIONS[0])).expect("begin");
    let entry = write_parquet(&ticket.staging_dir, &[99, 1]);
    let candidate = Candidate { snapshot: "sales@r2".into(), rows: None, total: None, digest: None, files: vec![entry] };
    store.finish_attempt(&ticket.key, &candidate).expect("finish");
    assert!(store.validate_attempt(&ticket.key, FileCheck::SizeAndChecksum).expect("validate").is_valid());
}

/// A symlink planted in place of the Delta log is refused, not followed: the kernel would write
/// where it points.
#[test]
fn a_symlink_in_place_of_the_delta_log_is_refused_not_followed() {
    let dir = TestDir::new();
    let store = dir
        .open_with(&StoreOptions {
            views: Some(ViewOptions::hard_links(dir.path().join("views")).with_trees(manifestdb::ViewTrees::All)),
            ..StoreOptions::default()
        })
        .expect("open");
    assert_eq!(publish(&store, "r1", &[(0, 100), (1, 70)], &[]), 1);
    let table = store.view_root().unwrap().join(DATASET).join("table");
    assert!(table.join("_delta_log").is_dir(), "the first publish wrote the table");
    std::fs::remove_dir_all(table.join("_delta_log")).expect("remove the log");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::os::unix::fs::symlink(&elsewhere, table.join("_delta_log")).expect("symlink");
    match store.sync_view(DATASET) {
        Err(Error::ViewRefused { reason, .. }) => assert!(reason.contains("symlink"), "{reason}"),
        other => panic!("a symlinked log was not refused: {other:?}"),
    }
    assert_eq!(std::fs::read_dir(&elsewhere).expect("list").count(), 0, "nothing written through the symlink");
}

const CONCURRENT_DELTA_READER: &str = r#"
import json, os, sys
from deltalake import DeltaTable
import polars as pl
path, stop = sys.argv[1], sys.argv[2]
def rows(dates, regions, sums):
    return sorted([str(d), str(r), int(s)] for d, r, s in zip(dates, regions, sums))
def emit(doc):
    print(json.dumps(doc), flush=True)
while not os.path.exists(stop):
    try:
        dt = DeltaTable(path)
        t = dt.to_pyarrow_table().group_by(["date", "region"]).aggregate([("units", "sum")])
        emit({"engine": "deltalake", "version": dt.version(),
              "rows": rows(t["date"].to_pylist(), t["region"].to_pylist(), t["units_sum"].to_pylist())})
    except Exception as e:
        emit({"engine": "deltalake", "error": f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"})
    try:
        g = pl.read_delta(path).group_by(["date", "region"]).agg(pl.col("units").sum())
        emit({"engine": "polars", "rows": rows(g["date"].to_list(), g["region"].to_list(), g["units"].to_list())})
    except Exception as e:
        emit({"engine": "polars", "error": f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"})
"#;

/// deltalake and polars read the Delta table's latest version in a loop while a publisher
/// replaces 2 of the 4 partitions per generation and expires all but the last 3 generations
/// every third one (6 s, or `MANIFESTDB_VIEW_STRESS_SECS`). Every read that answers holds one
/// generation's partitions exactly: deltalake's the generation its version maps to (version + 1),
/// polars' some generation's; 0 mixed. A read that fails (a version expired under it) is
/// counted as retryable, never as an answer. In the default configuration (no directory trees),
/// so each publish is the table's change commit.
#[test]
fn delta_readers_during_publishes_and_expiry_read_one_generation_each() {
    if !readers_available() || !deltalake_available() {
        return;
    }
    let seconds: f64 = std::env::var("MANIFESTDB_VIEW_STRESS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(6.0);
    let dir = TestDir::new();
    let store = dir
        .open_with(&StoreOptions { views: Some(ViewOptions::hard_links(dir.path().join("views"))), ..StoreOptions::default() })
        .expect("open");
    let table = store.view_root().unwrap().join(DATASET).join("table");
    // Generation g's partitions, as `store_says` gives them; index 0 is unused.
    let mut states: Vec<Vec<(String, String, i64)>> = vec![Vec::new()];
    assert_eq!(publish(&store, "r1", &[(0, 1000), (1, 1001), (2, 1002), (3, 1003)], &[]), 1);
    states.push(store_says(&store, 1));
    let stop = dir.path().join("stop");
    let reader = Command::new("python3")
        .args(["-c", CONCURRENT_DELTA_READER])
        .arg(&table)
        .arg(&stop)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the Delta readers");
    let start = std::time::Instant::now();
    let mut generation: u64 = 1;
    let mut expired = 0;
    while start.elapsed().as_secs_f64() < seconds || generation < 7 {
        generation += 1;
        let first = (generation as usize * 2) % PARTITIONS.len();
        let replaced: Vec<(usize, i64)> =
            (0..2).map(|j| (first + j) % PARTITIONS.len()).map(|i| (i, generation as i64 * 1000 + i as i64)).collect();
        assert_eq!(publish(&store, &format!("r{generation}"), &replaced, &[]), generation);
        states.push(store_says(&store, generation));
        if generation.is_multiple_of(3) {
            let report = store
                .expire_generations(DATASET, &RetentionPolicy { keep_last: 3, rollback_window: Duration::ZERO }, RunMode::Execute)
                .expect("expire");
            expired += report.expired.len();
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    std::fs::write(&stop, b"").expect("stop the readers");
    let out = reader.wait_with_output().expect("the readers' output");
    assert!(out.status.success(), "the Delta readers failed");
    let mut counts: BTreeMap<(String, &str), usize> = BTreeMap::new();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let doc: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        let engine = doc["engine"].as_str().expect("engine").to_owned();
        if let Some(error) = doc["error"].as_str() {
            *counts.entry((engine.clone(), "failed")).or_default() += 1;
            *errors.entry(format!("{engine}: {}", error.chars().take(70).collect::<String>())).or_default() += 1;
            continue;
        }
        let seen = sums(&doc["rows"]);
        let verdict = match doc["version"].as_u64() {
            // deltalake names the version it read: it must be exactly that version's generation.
            Some(version) => {
                let generation = version as usize + 1;
                assert!(generation < states.len(), "deltalake read version {version}, which no publish made");
                if seen == states[generation] { "exact" } else { "mixed" }
            }
            None if states.contains(&seen) => "exact",
            None => "mixed",
        };
        *counts.entry((engine, verdict)).or_default() += 1;
    }
    println!(
        "Delta readers over the latest version for {elapsed:.1} s during {} publishes and {expired} expired generations: {counts:?} {errors:?}",
        generation - 1
    );
    for engine in ["deltalake", "polars"] {
        assert_eq!(counts.get(&(engine.to_owned(), "mixed")), None, "{engine} read a mix of generations");
        let exact = counts.get(&(engine.to_owned(), "exact")).copied().unwrap_or(0);
        assert!(exact >= 3, "too few {engine} reads answered: {exact}");
    }
    assert!(expired > 0, "the loop expired nothing");
}

const SPARK_READER: &str = r#"
import json, sys
from pyspark.sql import SparkSession, functions as F
spark = (SparkSession.builder.master("local[1]").appName("manifestdb-views")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
         .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
def rows(df):
    return sorted([str(r[0]), str(r[1]), int(r[2])] for r in df.groupBy("date", "region").agg(F.sum("units")).collect())
out = {"version": spark.version, "parquet": {}, "csv": {}}
# The reading chapter's lines, as written there.
for path in json.loads(sys.argv[1]):
    out["parquet"][path] = rows(spark.read.parquet(path))
for path in json.loads(sys.argv[2]):
    out["csv"][path] = rows(spark.read.option("header", True).csv(path))
spark.stop()
print(json.dumps(out))
"#;

/// Whether Spark can run here: PyPI's pyspark importable and a Java runtime. Skipped, saying
/// so, where it cannot; `MANIFESTDB_TEST_SPARK=1` (set by `.ci/run` once its install worked)
/// makes a missing Spark a failure.
fn spark_available() -> bool {
    let python = Command::new("python3").args(["-c", "import pyspark"]).output().is_ok_and(|o| o.status.success());
    let java = Command::new("java").arg("-version").output().is_ok_and(|o| o.status.success());
    if !(python && java) {
        assert_ne!(std::env::var("MANIFESTDB_TEST_SPARK").as_deref(), Ok("1"), "MANIFESTDB_TEST_SPARK=1 but pyspark or java is missing");
        println!("SKIPPED: Spark needs python3 with pyspark (pip install pyspark) and a Java runtime (pyspark {python}, java {java})");
    }
    python && java
}

/// Spark (PyPI pyspark, local mode) reads every retained generation's view of a Parquet and of
/// a CSV dataset with the reading chapter's one line (`spark.read.parquet(V)`,
/// `spark.read.option("header", True).csv(V)`): hive columns discovered, `_manifest.json`
/// hidden, each sum exactly what `show --json -g N` says, with retried attempts left in
/// staging. Spark's Delta reader is not tested: it needs the delta-spark jars, a download.
#[test]
fn spark_reads_each_retained_view_of_a_parquet_and_a_csv_dataset_exactly() {
    use crate::support::{run_attempt, run_spec};

    if !spark_available() {
        return;
    }
    let dir = TestDir::new();
    let store = dir
        .open_with(&StoreOptions {
            views: Some(ViewOptions::hard_links(dir.path().join("views")).with_trees(manifestdb::ViewTrees::All)),
            ..StoreOptions::default()
        })
        .expect("open");
    assert_eq!(publish(&store, "r1", &[(0, 100), (1, 70), (2, 50), (3, 30)], &[0]), 1);
    assert_eq!(publish(&store, "r2", &[(1, 71), (2, 51)], &[2]), 2);
    const CSV: &str = "units_csv";
    for (generation, partitions) in [(1u64, vec![(0usize, 10i64), (1, 20), (2, 30), (3, 40)]), (2, vec![(3, 44)])] {
        let run = format!("c{generation}");
        let snapshot = format!("csv@{generation}");
        let tasks: Vec<(&str, u64, i64)> = partitions.iter().map(|(i, total)| (PARTITIONS[*i], 2, *total)).collect();
        store.declare_run(&run_spec(CSV, &run, &snapshot, &tasks)).expect("declare");
        for (partition, rows, total) in &tasks {
            // Two valid attempts of the first task: the retry whose acknowledgement was lost.
            let attempts = if *partition == tasks[0].0 { 2 } else { 1 };
            for _ in 0..attempts {
                let ticket = run_attempt(&store, &TaskKey::new(CSV, &run, *partition), &snapshot, *rows, *total);
                store.validate_attempt(&ticket.key, FileCheck::SizeAndChecksum).expect("validate");
            }
        }
        match store.publish(CSV, &run, &PublishOptions::default()).expect("publish") {
            PublishOutcome::Published(g) => assert_eq!(g.number, generation),
            other => panic!("{other:?}"),
        }
    }
    let views = |dataset: &str| -> Vec<(String, Sums)> {
        store
            .snapshot()
            .unwrap()
            .history(dataset)
            .unwrap()
            .iter()
            .map(|g| {
                let path = store.view_path(dataset, Some(g.number)).expect("view path").path.display().to_string();
                (path, store_says_of(&store, dataset, g.number))
            })
            .collect()
    };
    let (parquet, csv) = (views(DATASET), views(CSV));
    let paths = |v: &[(String, Sums)]| serde_json::to_string(&v.iter().map(|(p, _)| p).collect::<Vec<_>>()).unwrap();
    let out = Command::new("python3").args(["-c", SPARK_READER]).arg(paths(&parquet)).arg(paths(&csv)).output().expect("run python3");
    assert!(out.status.success(), "Spark failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let doc: serde_json::Value = serde_json::from_str(stdout.lines().last().expect("Spark's JSON")).expect("Spark's JSON");
    for (format, expected) in [("parquet", &parquet), ("csv", &csv)] {
        assert_eq!(expected.len(), 2, "two retained generations of the {format} dataset");
        for (path, says) in expected {
            assert_eq!(&sums(&doc[format][path]), says, "Spark over {path}");
        }
    }
    println!("Spark {} read {} Parquet and {} CSV views exactly", doc["version"], parquet.len(), csv.len());
}

//! Real readers from PyPI over the published views of a Parquet dataset (issue 28, "Tests with
//! real readers"): three generations with retried attempts left in staging; for every retained
//! generation, DuckDB, polars and pyarrow over its view directory (`Store::view_path`, `current`
//! resolved once) sum exactly what the store's manifest says; the same after a rollback and
//! after an expiry (and the expired generation's view is refused, naming the oldest retained);
//! a reader of the staging tree overcounts, by the retried attempts' totals.
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
const PARTITIONS: [&str; 4] =
    ["date=2026-11-27/region=eu", "date=2026-11-27/region=us", "date=2026-11-28/region=eu", "date=2026-11-28/region=us"];

const READERS: &str = r#"
import json, sys
import duckdb, polars as pl, pyarrow.dataset as pads
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
print(json.dumps(out))
"#;

fn readers_available() -> bool {
    let ok = Command::new("python3").args(["-c", "import duckdb, polars, pyarrow.dataset"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI=true but Python lacks duckdb, polars or pyarrow (.ci/run installs them)"
        );
        println!("SKIPPED: python3 cannot import duckdb, polars and pyarrow (pip install duckdb polars pyarrow)");
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

/// What the store says generation `generation` holds: `(date, region, total)` per partition.
fn store_says(store: &Store, generation: u64) -> Vec<(String, String, i64)> {
    let manifest = store.snapshot().unwrap().manifest(DATASET, Some(generation)).unwrap().expect("retained");
    let mut out: Vec<(String, String, i64)> = manifest
        .partitions
        .iter()
        .map(|p| {
            let field = |key: &str| p.partition.split('/').find_map(|c| c.strip_prefix(key)).unwrap().to_owned();
            (field("date="), field("region="), p.total.expect("total"))
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
    let snapshot = format!("sales@{run}");
    store
        .declare_run(&RunSpec {
            dataset: DATASET.into(),
            run: run.into(),
            snapshot: snapshot.clone(),
            tasks: partitions
                .iter()
                .map(|(i, total)| TaskSpec { partition: PARTITIONS[*i].into(), expected_rows: 2, expected_total: Some(*total) })
                .collect(),
            grain: Some(Grain::new(DataFormat::Parquet, &["store", "item"], "units")),
        })
        .expect("declare");
    for (i, total) in partitions {
        for _ in 0..if retried.contains(i) { 2 } else { 1 } {
            let ticket = store.begin_attempt(&TaskKey::new(DATASET, run, PARTITIONS[*i])).expect("begin");
            let file = write_parquet(&ticket.staging_dir, &[total - 1, 1]);
            let candidate = Candidate { snapshot: snapshot.clone(), rows: None, total: None, digest: None, files: vec![file] };
            store.finish_attempt(&ticket.key, &candidate).expect("finish");
            store.validate_attempt(&ticket.key, FileCheck::SizeAndChecksum).expect("validate");
        }
    }
    match store.publish(DATASET, run, &PublishOptions::default()).expect("publish") {
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

#[test]
fn duckdb_polars_and_pyarrow_over_each_retained_view_sum_what_the_store_says() {
    if !readers_available() {
        return;
    }
    let dir = TestDir::new();
    let store = dir
        .open_with(&StoreOptions { views: Some(ViewOptions::hard_links(dir.path().join("views"))), ..StoreOptions::default() })
        .expect("open");
    assert_eq!(publish(&store, "r1", &[(0, 100), (1, 70), (2, 50), (3, 30)], &[0]), 1);
    assert_eq!(publish(&store, "r2", &[(1, 71), (2, 51)], &[2]), 2);
    assert_eq!(publish(&store, "r3", &[(3, 33)], &[3]), 3);
    assert_eq!(check_retained(&store), 3);

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
    assert_eq!(staged, every_run + retried, "the staging tree holds every attempt of every run");
    println!(
        "a reader of the staging tree sums {staged}: every run's output ({every_run}) plus the retried attempts ({retried}); the current view sums {}",
        store_says(&store, 3).iter().map(|(_, _, t)| t).sum::<i64>()
    );

    // A rollback is a new generation with its own view; the older views stay readable.
    let RollbackOutcome::RolledBack(rolled) = store.rollback(DATASET, 1, "ops", "bad upstream").expect("rollback") else {
        panic!("refused");
    };
    assert_eq!(rolled.number, 4);
    assert_eq!(store_says(&store, 4), store_says(&store, 1));
    assert_eq!(check_retained(&store), 4);

    // Expiry: the expired generations' views are gone and asking for one names the oldest
    // retained; the retained ones still read exactly.
    let report = store
        .expire_generations(DATASET, &RetentionPolicy { keep_last: 2, rollback_window: Duration::ZERO }, RunMode::Execute)
        .expect("expire");
    assert_eq!(report.expired, [1, 2]);
    match store.view_path(DATASET, Some(1)) {
        Err(Error::GenerationNotRetained { generation: 1, oldest_retained: Some(3), .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(check_retained(&store), 2);
}

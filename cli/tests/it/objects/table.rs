//! The Delta table on S3 (`--views s3://...`) when its commit meets a fault, through the fault
//! proxy in front of the real `s3s-fs` server: a commit that never lands, one that lands with
//! its answers lost, and one that loses the race for its version to another writer. Each leaves
//! the table readable (deltalake over S3), reports what is on the server, and the next open or
//! `view sync` settles it.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Fault, fault_proxy, parquet_bytes, put, s3_root};
use crate::support::{Run, command, finish};

/// deltalake over S3: the latest version and its `{partition: units}`.
const READ_LATEST: &str = r#"
import json, os, sys
from deltalake import DeltaTable
opts = {k: os.environ[k] for k in ["AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"]}
opts["AWS_ALLOW_HTTP"] = "true"
dt = DeltaTable(sys.argv[1], storage_options=opts)
t = dt.to_pyarrow_table().to_pydict()
parts = {}
for region, units in zip(t["region"], t["units"]):
    parts[region] = parts.get(region, 0) + units
print(json.dumps({"version": dt.version(), "units": parts}))
sys.stdout.flush()
os._exit(0)
"#;

fn read_latest(table: &str) -> serde_json::Value {
    let out = Command::new("python3").args(["-c", READ_LATEST, table]).output().expect("run python3");
    assert!(out.status.success(), "deltalake could not read {table}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("deltalake's JSON")
}

fn deltalake_available() -> bool {
    let ok = Command::new("python3").args(["-c", "import deltalake, pyarrow"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "CI=true but Python lacks deltalake");
        eprintln!("\n*** SKIPPED: python3 cannot import deltalake and pyarrow ***\n");
    }
    ok
}

/// A store staging at `<root>/staging` with its views at `<root>/views`.
struct Lake {
    _dir: tempfile::TempDir,
    store: std::path::PathBuf,
    staging: String,
    views: String,
}

impl Lake {
    fn new(root: &str) -> Lake {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store.redb");
        let lake = Lake { _dir: dir, store, staging: format!("{root}/staging"), views: format!("{root}/views") };
        lake.run(&["init"]).code(0);
        lake
    }

    fn command(&self, endpoint: Option<&str>) -> Command {
        let mut cmd = command();
        if let Some(endpoint) = endpoint {
            cmd.env("AWS_ENDPOINT_URL", endpoint);
        }
        cmd.arg("--store").arg(&self.store).arg("--staging").arg(&self.staging).arg("--views").arg(&self.views);
        cmd
    }

    fn run(&self, args: &[&str]) -> Run {
        finish(self.command(None).args(args))
    }

    fn table(&self) -> String {
        format!("{}/d/table", self.views)
    }

    /// Declares run `run`, whose partitions `region=X` each get one Parquet object of `units`,
    /// and validates each attempt (every call straight to the server).
    fn stage(&self, run: &str, partitions: &[(&str, i64)]) {
        let mut declare = vec!["run", "declare", "--dataset", "d", "--run", run, "--snapshot", run];
        let tasks: Vec<String> = partitions.iter().map(|(p, units)| format!("region={p}:1:{units}")).collect();
        for task in &tasks {
            declare.extend(["--task", task.as_str()]);
        }
        declare.extend(["--grain", "store,item", "--measure", "units", "--format", "parquet"]);
        self.run(&declare).code(0);
        for (p, units) in partitions {
            let partition = format!("region={p}");
            let task = ["--dataset", "d", "--run", run, "--partition", partition.as_str()];
            self.run(&[&["attempt", "begin"][..], &task].concat()).code(0);
            let body = parquet_bytes(&[[1, 1, *units]]).expect("pyarrow writes Parquet");
            put(&format!("{}/d/{run}/{partition}/@attempt-1/part.parquet", self.staging), body);
            self.run(&[&["attempt", "finish", "--snapshot", run, "--scan"][..], &task, &["--attempt", "1"]].concat()).code(0);
            self.run(&[&["attempt", "validate"][..], &task, &["--attempt", "1"]].concat()).code(0);
        }
    }

    fn table_doc(&self) -> serde_json::Value {
        self.run(&["--json", "view", "d"]).code(0).json()["table"].clone()
    }
}

/// The error document a failed call printed last on stderr (the kernel's own log lines come
/// before it).
fn error_doc(run: &Run) -> serde_json::Value {
    let last = run.stderr.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("stderr does not end with JSON ({e}):\n{}", run.stderr))
}

/// Whether `head` is the PUT of a Delta commit (`_delta_log/<version>.json`).
fn is_commit_put(head: &[u8]) -> bool {
    let head = String::from_utf8_lossy(head);
    let line = head.lines().next().unwrap_or_default().to_owned();
    line.starts_with("PUT ") && line.contains("/_delta_log/") && line.contains(".json ")
}

/// A publish whose Delta commit never reaches the server (every commit PUT refused): exit 8
/// (the outcome is unknown to the tool: it cannot tell a refused request from a lost answer),
/// the table still reads the previous generation, `view --json` says it lags, and the next
/// `view sync` commits the generation.
#[test]
fn a_commit_to_the_table_on_s3_that_never_lands_is_outcome_unknown_and_view_sync_settles_it() {
    let Some(root) = s3_root() else { return };
    if parquet_bytes(&[[1, 1, 1]]).is_none() || !deltalake_available() {
        return;
    }
    let lake = Lake::new(&root);
    lake.stage("r1", &[("a", 10), ("b", 20)]);
    lake.run(&["publish", "--dataset", "d", "--run", "r1"]).code(0);
    lake.stage("r2", &[("a", 15)]);
    let endpoint = std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL beside MANIFESTDB_TEST_S3");
    let proxy = fault_proxy(&endpoint, |head| if is_commit_put(head) { Fault::Refuse } else { Fault::Pass });
    let cut = finish(lake.command(Some(&proxy)).args(["--json", "publish", "--dataset", "d", "--run", "r2"]));
    cut.code(8);
    assert_eq!(error_doc(&cut)["error"]["kind"], "outcome_unknown", "{}", cut.stderr);
    let secret = std::env::var("AWS_SECRET_ACCESS_KEY").unwrap();
    assert!(!cut.stderr.contains(&secret) && !cut.stdout.contains(&secret), "the secret key was printed");
    // The store committed generation 2; the table on the server still holds generation 1,
    // readable, and the view document says what is there.
    let read = read_latest(&lake.table());
    assert_eq!(read, serde_json::json!({"version": 0, "units": {"a": 10, "b": 20}}), "{read}");
    let doc = lake.table_doc();
    assert_eq!((doc["latest_generation"].as_u64(), doc["lagging"].as_bool()), (Some(1), Some(true)), "{doc}");
    // `view sync` (straight to the server) settles it: the generation is committed once.
    lake.run(&["view", "sync", "d"]).code(0);
    let doc = lake.table_doc();
    assert_eq!((doc["latest_version"].as_u64(), doc["latest_generation"].as_u64()), (Some(1), Some(2)), "{doc}");
    assert_eq!(read_latest(&lake.table())["units"], serde_json::json!({"a": 15, "b": 20}));
}

/// A publish whose Delta commit lands but whose answers are all lost from its PUT on (the
/// client's retries and its read-back included): exit 8; the table on the server holds the
/// generation (what the server has, reported as such), and `view sync` commits nothing again.
#[test]
fn a_commit_to_the_table_on_s3_that_lands_with_its_answers_lost_is_settled_from_the_log_never_committed_twice() {
    let Some(root) = s3_root() else { return };
    if parquet_bytes(&[[1, 1, 1]]).is_none() || !deltalake_available() {
        return;
    }
    let lake = Lake::new(&root);
    lake.stage("r1", &[("a", 10), ("b", 20)]);
    lake.run(&["publish", "--dataset", "d", "--run", "r1"]).code(0);
    lake.stage("r2", &[("b", 25)]);
    let endpoint = std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL beside MANIFESTDB_TEST_S3");
    let outage = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&outage);
    let proxy = fault_proxy(&endpoint, move |head| {
        if is_commit_put(head) {
            seen.store(true, Ordering::SeqCst);
        }
        if seen.load(Ordering::SeqCst) { Fault::LoseAnswer } else { Fault::Pass }
    });
    let cut = finish(lake.command(Some(&proxy)).args(["--json", "publish", "--dataset", "d", "--run", "r2"]));
    cut.code(8);
    assert!(outage.load(Ordering::SeqCst), "the commit's PUT never went through the proxy");
    assert_eq!(error_doc(&cut)["error"]["kind"], "outcome_unknown", "{}", cut.stderr);
    // The commit landed: the view document reads it from the server.
    let doc = lake.table_doc();
    assert_eq!((doc["latest_version"].as_u64(), doc["latest_generation"].as_u64()), (Some(1), Some(2)), "{doc}");
    assert_eq!(read_latest(&lake.table()), serde_json::json!({"version": 1, "units": {"a": 10, "b": 25}}));
    let synced = lake.run(&["--json", "view", "sync", "d"]).code(0).json();
    let status = &synced["synced"][0];
    assert_eq!(status["table_version"], 1, "the generation was committed again: {synced}");
    assert_eq!(status["foreign_versions"], serde_json::json!([]), "{synced}");
}

/// Another writer takes the commit's version between the store's read and its PUT: the server
/// refuses the store's PUT (`If-None-Match: *`), the other writer's commit stays as written,
/// the publish says the table lags (exit 1), and the next `view sync` reports the other
/// writer's version and commits the generation on top.
#[test]
fn a_commit_to_the_table_on_s3_that_loses_the_race_for_its_version_never_overwrites_the_winner() {
    let Some(root) = s3_root() else { return };
    if parquet_bytes(&[[1, 1, 1]]).is_none() || !deltalake_available() {
        return;
    }
    let lake = Lake::new(&root);
    lake.stage("r1", &[("a", 10)]);
    lake.run(&["publish", "--dataset", "d", "--run", "r1"]).code(0);
    lake.stage("r2", &[("a", 12)]);
    let endpoint = std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL beside MANIFESTDB_TEST_S3");
    let winner = b"{\"commitInfo\":{\"operation\":\"WRITE\",\"engineInfo\":\"racer\"}}\n".to_vec();
    let key = format!("{}/_delta_log/{:020}.json", lake.table(), 1);
    let (race_key, race_body) = (key.clone(), winner.clone());
    let raced = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&raced);
    let proxy = fault_proxy(&endpoint, move |head| {
        if is_commit_put(head) && !done.swap(true, Ordering::SeqCst) {
            // The other writer's commit lands first (straight to the server).
            put(&race_key, &race_body);
        }
        Fault::Pass
    });
    let lost = finish(lake.command(Some(&proxy)).args(["--json", "publish", "--dataset", "d", "--run", "r2"]));
    lost.code(1);
    assert!(raced.load(Ordering::SeqCst), "the commit's PUT never went through the proxy");
    assert!(lost.stderr.contains("another writer"), "{}", lost.stderr);
    let doc = lake.table_doc();
    assert_eq!((doc["latest_version"].as_u64(), doc["latest_generation"].as_u64()), (Some(1), None), "{doc}");
    assert_eq!(doc["foreign_versions"][0]["engine"], "racer", "the winner's commit was overwritten: {doc}");
    lake.run(&["view", "sync", "d"]).code(0);
    let doc = lake.table_doc();
    assert_eq!((doc["latest_version"].as_u64(), doc["latest_generation"].as_u64()), (Some(2), Some(2)), "{doc}");
    assert_eq!(read_latest(&lake.table())["units"], serde_json::json!({"a": 12}));
}

/// `view --json` of a dataset whose table is on S3 names its exact files (the staging objects)
/// and its table's URL; a directory view is refused with where to read instead.
#[test]
fn view_json_of_a_table_on_s3_gives_the_file_list_and_the_table_url() {
    let Some(root) = s3_root() else { return };
    if parquet_bytes(&[[1, 1, 1]]).is_none() {
        return;
    }
    let lake = Lake::new(&root);
    lake.stage("r1", &[("a", 10)]);
    lake.run(&["publish", "--dataset", "d", "--run", "r1"]).code(0);
    let doc = lake.run(&["--json", "view", "d"]).code(0).json();
    assert_eq!(doc["table"]["path"], lake.table(), "{doc}");
    let url = doc["manifest"]["partitions"][0]["files"][0]["url"].as_str();
    assert!(url.is_some_and(|u| u.starts_with(&format!("{}/data/region=a/g1-a1-", lake.table()))), "{doc}");
    let trees = lake.run(&["--view-trees", "all", "view", "sync"]);
    trees.code(2);
    assert!(trees.stderr.contains("directory views cannot exist"), "{}", trees.stderr);
}

//! The Delta table among other writers and after damage (issue 37, items 3 and 4): the store
//! finds which version holds which generation by its `txn` action, never by counting versions;
//! a real delta-rs writer (PyPI `deltalake`) appending, overwriting, deleting, optimizing and
//! vacuuming is reported (`view --json`, `verify`) and never absorbed (the store's next commit,
//! or `view sync`, restores its generation's exact files on top); files a `vacuum` took are
//! placed again from staging; an emptied, cut short or edited commit is cut from the log and
//! committed again; a writer's staged upload left by a crash is never counted as a version.
//! Every version a reader opens holds exactly its generation, read by deltalake.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use manifestdb::{FileCheck, Store, StoreOptions, VerifyOptions, ViewOptions};

use crate::engines::{deltalake_available, publish_to, store_says_of};
use crate::support::TestDir;

const DATASET: &str = "sales";

/// Reads the table with deltalake: `{"latest": N, "<version>": rows}` for every version in
/// `versions`; `rows` are `[[date, region, sum(units)]]`, sorted.
const READ_VERSIONS: &str = r#"
import json, os, sys
from deltalake import DeltaTable
path, versions = sys.argv[1], json.loads(sys.argv[2])
def rows(t):
    t = t.group_by(["date", "region"]).aggregate([("units", "sum")])
    return sorted([str(d), str(r), int(s)] for d, r, s in zip(t["date"].to_pylist(), t["region"].to_pylist(), t["units_sum"].to_pylist()))
out = {"latest": DeltaTable(path).version()}
for v in versions:
    out[str(v)] = rows(DeltaTable(path, version=v).to_pyarrow_table())
print(json.dumps(out), flush=True)
# Past here only the interpreter's teardown, where deltalake's runtime threads once aborted the
# process ("terminate called without an active exception", 1 run of 4): skip it.
os._exit(0)
"#;

/// One delta-rs operation on the table: `append`, `overwrite`, `delete`, `optimize`, `vacuum`.
const FOREIGN: &str = r#"
import os, sys
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
path, op = sys.argv[1], sys.argv[2]
dt = DeltaTable(path)
schema = dt.schema().to_arrow()
def rows(units, region):
    cols = {}
    for f in schema:
        name = f.name
        if name == "units": cols[name] = pa.array(units, type=pa.int64())
        elif name == "store": cols[name] = pa.array(list(range(len(units))), type=pa.int64())
        elif name == "item": cols[name] = pa.array(["pear"] * len(units))
        elif name == "date": cols[name] = pa.array(["2026-11-27"] * len(units))
        elif name == "region": cols[name] = pa.array([region] * len(units))
    return pa.table(cols)
if op == "append":
    write_deltalake(path, rows([1000, 7], "eu"), mode="append")
elif op == "overwrite":
    write_deltalake(path, rows([5], "us"), mode="overwrite")
elif op == "delete":
    dt.delete("region = 'eu'")
elif op == "optimize":
    # Two small files in one partition, then compaction: an append and an OPTIMIZE commit.
    write_deltalake(path, rows([3], "eu"), mode="append")
    DeltaTable(path).optimize.compact()
elif op == "vacuum":
    dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)
else:
    raise SystemExit("unknown op " + op)
sys.stdout.flush()
os._exit(0)  # skip the interpreter's teardown (see READ_VERSIONS)
"#;

fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new("python3").args(["-c", script]).args(args).output().expect("run python3");
    assert!(out.status.success(), "python failed ({args:?}): {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The table's `view --json` document's `table` part.
fn table_doc(store: &Store, generation: Option<u64>) -> serde_json::Value {
    let snapshot = store.snapshot().unwrap();
    let doc = manifestdb::documents::operator::view(&snapshot, DATASET, None, generation).expect("view document");
    doc["table"].clone()
}

/// Every retained generation, read by deltalake at the version `view --generation N --json`
/// names, holds exactly what the store says; the latest version holds the current one.
fn check_every_version(store: &Store, table: &Path) {
    let snapshot = store.snapshot().unwrap();
    let current = snapshot.current(DATASET).unwrap().unwrap().number;
    let mut versions: BTreeMap<u64, u64> = BTreeMap::new();
    for generation in snapshot.history(DATASET).unwrap() {
        let doc = table_doc(store, Some(generation.number));
        let version = doc["version"].as_u64().unwrap_or_else(|| panic!("no version holds generation {}: {doc}", generation.number));
        versions.insert(generation.number, version);
    }
    let list: Vec<u64> = versions.values().copied().collect();
    let doc: serde_json::Value =
        serde_json::from_str(&python(READ_VERSIONS, &[table.to_str().unwrap(), &serde_json::to_string(&list).unwrap()])).unwrap();
    let latest_doc = table_doc(store, None);
    assert_eq!(doc["latest"], latest_doc["latest_version"], "view --json reads the latest version from the log");
    assert_eq!(latest_doc["latest_generation"], current, "the latest version holds the current generation");
    assert_eq!(latest_doc["lagging"], false, "{latest_doc}");
    for (generation, version) in versions {
        let seen: Vec<(String, String, i64)> = doc[version.to_string()]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r[0].as_str().unwrap().to_owned(), r[1].as_str().unwrap().to_owned(), r[2].as_i64().unwrap()))
            .collect();
        assert_eq!(seen, store_says_of(store, DATASET, generation), "deltalake at version {version} (generation {generation})");
    }
}

fn views_findings(store: &mut Store) -> Vec<String> {
    let report = store
        .verify(&VerifyOptions { integrity_check: false, files: Some(FileCheck::Size), staging_root: None, views: true })
        .expect("verify");
    report.findings.iter().filter(|f| f.table == "views").map(|f| format!("{}: {}", f.key, f.message)).collect()
}

fn open(dir: &TestDir) -> Store {
    dir.open_with(&StoreOptions {
        views: Some(ViewOptions::hard_links(dir.path().join("views")).with_trees(manifestdb::ViewTrees::All)),
        ..StoreOptions::default()
    })
    .expect("open")
}

/// Each delta-rs operation takes a version; the store's next publish commits on top of it and
/// its version holds exactly its generation; `view --json` and `verify` name the foreign
/// version; a foreign commit on top with no new generation is undone by `view sync` (the
/// current generation committed again); files a full vacuum at retention 0 took from older
/// retained versions are reported by `verify` and placed again by `view sync`.
#[test]
fn foreign_delta_writers_are_reported_and_never_bend_the_mapping() {
    if !deltalake_available() {
        return;
    }
    let dir = TestDir::new();
    let mut store = open(&dir);
    let table = store.view_root().unwrap().join(DATASET).join("table");
    let t = table.to_str().unwrap().to_owned();
    assert_eq!(publish_to(&store, DATASET, "r1", &[(0, 100), (1, 70), (2, 50), (3, 30)]), 1);
    assert_eq!(publish_to(&store, DATASET, "r2", &[(1, 71)]), 2);
    check_every_version(&store, &table);
    assert!(views_findings(&mut store).is_empty(), "{:?}", views_findings(&mut store));

    let mut foreign: Vec<u64> = Vec::new();
    for (i, (op, operation)) in
        [("append", "WRITE"), ("overwrite", "WRITE"), ("delete", "DELETE"), ("optimize", "OPTIMIZE")].into_iter().enumerate()
    {
        let before = table_doc(&store, None)["latest_version"].as_u64().unwrap();
        python(FOREIGN, &[&t, op]);
        let doc = table_doc(&store, None);
        let version = doc["latest_version"].as_u64().unwrap();
        assert!(version > before, "{op} committed a version");
        foreign.extend(before + 1..=version);
        assert_eq!(doc["lagging"], true, "after {op}: {doc}");
        assert!(doc["latest_generation"].is_null(), "after {op}: {doc}");
        let listed: Vec<u64> = doc["foreign_versions"].as_array().unwrap().iter().map(|f| f["version"].as_u64().unwrap()).collect();
        assert_eq!(listed, foreign, "after {op}");
        let last = doc["foreign_versions"].as_array().unwrap().last().cloned().unwrap();
        assert_eq!(last["operation"], operation, "after {op}: {doc}");
        let findings = views_findings(&mut store);
        assert!(findings.iter().any(|f| f.contains(&format!("version {version} was committed by another writer"))), "{findings:?}");
        // A publish commits its generation on top, with exactly its files.
        let generation = publish_to(&store, DATASET, &format!("f{i}"), &[(i % 4, 200 + i as i64)]);
        assert_eq!(table_doc(&store, Some(generation))["version"], version + 1, "after {op}");
        check_every_version(&store, &table);
    }

    // A foreign commit on top and no new generation: `view sync` commits the current one again.
    python(FOREIGN, &[&t, "append"]);
    let status = store.sync_view(DATASET).expect("sync").expect("a view");
    let latest = table_doc(&store, None);
    assert_eq!(status.table_version, latest["latest_version"].as_u64());
    assert!(status.foreign_versions.len() > foreign.len(), "{status:?}");
    check_every_version(&store, &table);

    // A full vacuum at retention 0 removes the files only older versions name: verify says
    // so, view sync places them again, every retained version reads exactly.
    python(FOREIGN, &[&t, "vacuum"]);
    let findings = views_findings(&mut store);
    assert!(findings.iter().any(|f| f.contains("missing or not of its")), "vacuum's removals are found: {findings:?}");
    let status = store.sync_view(DATASET).expect("sync").expect("a view");
    assert!(status.table_restored > 0, "{status:?}");
    check_every_version(&store, &table);
    let findings = views_findings(&mut store);
    assert!(findings.iter().all(|f| f.contains("committed by another writer")), "only the foreign versions stay findings: {findings:?}");
}

/// An emptied newest commit (a power loss on a file system that drops unsynced data) is found
/// by the next writable open, cut from the log and committed again; a commit cut short in the
/// middle of the log, one cut at a line boundary (a valid but incomplete commit) and an emptied
/// version 0 are found by `view sync`, which reports the versions it cut; a writer's staged
/// upload (`...json#1`) is removed, never a version; after each, every version deltalake opens
/// holds exactly its generation.
#[test]
fn a_damaged_delta_log_is_cut_back_and_committed_again() {
    damaged_log_cut_back_and_committed_again(manifestdb::ViewTrees::All);
}

/// The same without directory trees (the default): the open's check and the publishes take the
/// change path, which leaves every damage to the full sync.
#[test]
fn a_damaged_delta_log_is_cut_back_and_committed_again_without_trees() {
    damaged_log_cut_back_and_committed_again(manifestdb::ViewTrees::Off);
}

fn damaged_log_cut_back_and_committed_again(trees: manifestdb::ViewTrees) {
    if !deltalake_available() {
        return;
    }
    let dir = TestDir::new();
    let open = |dir: &TestDir| -> Store {
        dir.open_with(&StoreOptions {
            views: Some(ViewOptions::hard_links(dir.path().join("views")).with_trees(trees.clone())),
            ..StoreOptions::default()
        })
        .expect("open")
    };
    let store = open(&dir);
    let table = store.view_root().unwrap().join(DATASET).join("table");
    let log = table.join("_delta_log");
    let commit = |v: u64| log.join(format!("{v:020}.json"));
    assert_eq!(publish_to(&store, DATASET, "r1", &[(0, 100), (1, 70), (2, 50), (3, 30)]), 1);
    assert_eq!(publish_to(&store, DATASET, "r2", &[(1, 71), (2, 51)]), 2);
    assert_eq!(publish_to(&store, DATASET, "r3", &[(3, 33)]), 3);
    check_every_version(&store, &table);

    // The newest commit emptied: the writable open repairs it.
    drop(store);
    std::fs::write(commit(2), b"").unwrap();
    std::fs::write(log.join(format!("{:020}.json#1", 3)), b"{\"add\":").unwrap();
    let mut store = open(&dir);
    assert!(std::fs::metadata(commit(2)).unwrap().len() > 0, "the emptied commit was written again");
    assert!(!log.join(format!("{:020}.json#1", 3)).exists(), "the staged upload is removed");
    check_every_version(&store, &table);
    assert!(views_findings(&mut store).is_empty(), "{:?}", views_findings(&mut store));

    // A commit in the middle cut short (not at a line end): view sync cuts from it.
    let text = std::fs::read(commit(1)).unwrap();
    std::fs::write(commit(1), &text[..text.len() - 7]).unwrap();
    let findings = views_findings(&mut store);
    assert!(findings.iter().any(|f| f.contains("version 1 is cut short")), "{findings:?}");
    let status = store.sync_view(DATASET).expect("sync").expect("a view");
    assert_eq!(status.table_repaired, [1, 2], "{status:?}");
    check_every_version(&store, &table);

    // A commit cut at a line boundary: every line parses, but its files are not its
    // generation's; the full check of view sync finds it.
    let text = String::from_utf8(std::fs::read(commit(2)).unwrap()).unwrap();
    let kept: String = text.lines().filter(|l| !l.starts_with("{\"add\"")).map(|l| format!("{l}\n")).collect();
    assert_ne!(kept, text, "version 2 has an add to drop");
    std::fs::write(commit(2), kept).unwrap();
    let status = store.sync_view(DATASET).expect("sync").expect("a view");
    assert_eq!(status.table_repaired, [2], "{status:?}");
    check_every_version(&store, &table);

    // A checkpoint cut short (written at every 10th version): the open cuts the log back to
    // before it (or writes it again whole) and every version reads exactly.
    for run in 4..=11 {
        publish_to(&store, DATASET, &format!("r{run}"), &[(run % 4, 300 + run as i64)]);
    }
    let checkpoint = log.join(format!("{:020}.checkpoint.parquet", 10));
    assert!(checkpoint.is_file(), "a checkpoint at version 10");
    let bytes = std::fs::read(&checkpoint).unwrap();
    std::fs::write(&checkpoint, &bytes[..bytes.len() / 2]).unwrap();
    let status = store.sync_view(DATASET).expect("sync").expect("a view");
    assert!(status.table_repaired.contains(&10), "{status:?}");
    // Written again (whole: its footer reads; its actions may differ from the first one's,
    // as the full sync's commits carry what the kernel's scan gave) or gone.
    if let Ok(file) = std::fs::File::open(&checkpoint) {
        assert!(parquet::file::reader::SerializedFileReader::new(file).is_ok(), "the checkpoint is whole again");
    }
    check_every_version(&store, &table);

    // Version 0 emptied: nothing before it to keep, the log is written again from the store.
    std::fs::write(commit(0), b"").unwrap();
    let status = store.sync_view(DATASET).expect("sync").expect("a view");
    assert_eq!(status.table_repaired.first(), Some(&0), "{status:?}");
    check_every_version(&store, &table);
    assert!(views_findings(&mut store).is_empty(), "{:?}", views_findings(&mut store));
}

/// The table's directory holds only what a Delta table holds, beside the views: a full
/// delta-rs `vacuum` at retention 0 leaves every view file in place (before the layout change
/// it deleted every `v<N>/**` file and `_manifest.json`); a table of the earlier layout
/// (`_delta_log/` and `data/` right in the dataset's directory) is moved into `table/` by the
/// next writable open, also when a crash stopped an earlier move part way; after each step
/// every version reads exactly and `verify` finds nothing.
#[test]
fn the_table_lives_beside_the_views_and_its_vacuum_never_touches_them() {
    if !deltalake_available() {
        return;
    }
    let dir = TestDir::new();
    let mut store = open(&dir);
    let table = dir.path().join("views").join(DATASET).join("table");
    assert_eq!(publish_to(&store, DATASET, "r1", &[(0, 100), (1, 70), (2, 50), (3, 30)]), 1);
    assert_eq!(publish_to(&store, DATASET, "r2", &[(1, 71)]), 2);
    let dataset_dir = dir.path().join("views").join(DATASET);
    assert_eq!(store.delta_table(DATASET).unwrap(), dataset_dir.join("table"));
    let mut names: Vec<String> =
        std::fs::read_dir(&table).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["_delta_log", "data"], "the table's directory holds only the log and the data files");

    python(FOREIGN, &[table.to_str().unwrap(), "vacuum"]);
    // Findings about the table (vacuum's commits, the files it took), none about a view.
    let findings = views_findings(&mut store);
    assert!(findings.iter().all(|f| f.contains("/table")), "{findings:?}");
    for generation in [1, 2] {
        let view = store.view_path(DATASET, Some(generation)).unwrap().path;
        assert!(view.join("_manifest.json").is_file(), "vacuum left generation {generation}'s view alone");
    }
    store.sync_view(DATASET).unwrap();
    check_every_version(&store, &table);

    // The earlier layout, moved by the next writable open.
    drop(store);
    for name in ["_delta_log", "data"] {
        std::fs::rename(table.join(name), dataset_dir.join(name)).unwrap();
    }
    std::fs::remove_dir(&table).unwrap();
    let mut store = open(&dir);
    assert!(table.join("_delta_log").is_dir() && !dataset_dir.join("_delta_log").exists(), "the open moved the table");
    check_every_version(&store, &table);
    assert!(views_findings(&mut store).iter().all(|f| f.contains("committed by another writer")), "{:?}", views_findings(&mut store));

    // A move a crash stopped part way: the log already in `.table-moving`, the data not yet.
    drop(store);
    std::fs::create_dir(dataset_dir.join(".table-moving")).unwrap();
    std::fs::rename(table.join("_delta_log"), dataset_dir.join(".table-moving/_delta_log")).unwrap();
    std::fs::rename(table.join("data"), dataset_dir.join("data")).unwrap();
    std::fs::remove_dir(&table).unwrap();
    let store = open(&dir);
    assert!(!dataset_dir.join(".table-moving").exists() && !dataset_dir.join("data").exists());
    check_every_version(&store, &table);
}

/// The actions of version `version`'s commit: `(adds, removes)`, each the partition directories
/// they name, sorted.
fn commit_actions(table: &Path, version: u64) -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(table.join("_delta_log").join(format!("{version:020}.json"))).expect("read commit");
    let (mut adds, mut removes) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let action: serde_json::Value = serde_json::from_str(line).expect("a JSON action");
        for (kind, out) in [("add", &mut adds), ("remove", &mut removes)] {
            if let Some(path) = action[kind]["path"].as_str() {
                let decoded = path.replace("%3D", "=");
                let dir = decoded.trim_start_matches("data/").rsplit_once('/').map(|(d, _)| d.to_owned()).unwrap_or_default();
                out.push(dir);
            }
        }
    }
    adds.sort();
    removes.sort();
    (adds, removes)
}

/// Without directory trees (the default) a publish commits to the table only the change its
/// run made, read from the store without scanning the table (the files its partitions held in
/// the parent removed, their new files added): over 14 publishes of one or two partitions
/// (one bringing a partition new to the dataset), past the first checkpoint, each commit names
/// exactly the run's partitions and every retained version deltalake opens holds exactly its
/// generation; after a foreign append on top, the next publish still leaves exactly its
/// generation (the full sync takes over), and the one after goes back to committing changes.
#[test]
fn a_publish_commits_only_its_change_and_every_version_holds_its_generation() {
    if !deltalake_available() {
        return;
    }
    let dir = TestDir::new();
    let mut store = dir
        .open_with(&StoreOptions { views: Some(ViewOptions::hard_links(dir.path().join("views"))), ..StoreOptions::default() })
        .expect("open");
    let table = store.view_root().unwrap().join(DATASET).join("table");
    assert_eq!(publish_to(&store, DATASET, "r0", &[(0, 100), (1, 70), (2, 50)]), 1);
    let mut runs: Vec<Vec<(usize, i64)>> = (1..=12).map(|i| vec![(i % 3, 100 + i as i64)]).collect();
    runs.insert(4, vec![(3, 30), (0, 99)]);
    for (i, run) in runs.iter().enumerate() {
        let generation = publish_to(&store, DATASET, &format!("r{}", i + 1), run);
        let version = table_doc(&store, Some(generation))["version"].as_u64().expect("a version holds it");
        let (adds, removes) = commit_actions(&table, version);
        let mut named: Vec<String> = run.iter().map(|(p, _)| crate::engines::PARTITIONS[*p].to_owned()).collect();
        named.sort();
        assert_eq!(adds, named, "generation {generation} adds its run's partitions' files only");
        // The fifth run brings partition 3, new to the dataset: nothing of it to remove.
        let replaced: Vec<String> = named.iter().filter(|p| i != 4 || **p != crate::engines::PARTITIONS[3]).cloned().collect();
        assert_eq!(removes, replaced, "generation {generation} removes what its partitions held before, nothing else");
    }
    let log: Vec<String> =
        std::fs::read_dir(table.join("_delta_log")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(log.iter().any(|n| n.starts_with("00000000000000000010.checkpoint")), "a checkpoint at version 10: {log:?}");
    check_every_version(&store, &table);
    assert!(views_findings(&mut store).is_empty(), "{:?}", views_findings(&mut store));

    // A foreign append on top: the next publish restores exactly its generation.
    python(FOREIGN, &[table.to_str().unwrap(), "append"]);
    publish_to(&store, DATASET, "after-append", &[(1, 500)]);
    check_every_version(&store, &table);
    let generation = publish_to(&store, DATASET, "after-that", &[(2, 600)]);
    let version = table_doc(&store, Some(generation))["version"].as_u64().expect("a version holds it");
    assert_eq!(
        commit_actions(&table, version),
        (vec![crate::engines::PARTITIONS[2].to_owned()], vec![crate::engines::PARTITIONS[2].to_owned()])
    );
    check_every_version(&store, &table);
}

/// Every data file any of `versions` of the table holds (deltalake's own list), relative to the
/// table's data directory.
fn files_of_versions(table: &Path, versions: &[u64]) -> std::collections::BTreeSet<String> {
    const FILES: &str = "import json, os, sys, urllib.parse\n\
                         from deltalake import DeltaTable\n\
                         data = os.path.join(sys.argv[1], 'data')\n\
                         def rel(u):\n\
                         \x20   p = urllib.parse.unquote(urllib.parse.urlparse(u).path) if u.startswith('file:') else u\n\
                         \x20   return os.path.relpath(p, data)\n\
                         print(json.dumps(sorted({rel(u) for v in json.loads(sys.argv[2]) for u in DeltaTable(sys.argv[1], version=v).file_uris()})))";
    let out = python(FILES, &[table.to_str().unwrap(), &serde_json::to_string(versions).unwrap()]);
    let files: Vec<String> = serde_json::from_str(&out).expect("a list of files");
    files.into_iter().collect()
}

/// The files under the table's data directory, relative to it.
fn table_data_files(table: &Path) -> std::collections::BTreeSet<String> {
    let data = table.join("data");
    let mut out = std::collections::BTreeSet::new();
    let mut stack = vec![data.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("listing the data directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.strip_prefix(&data).unwrap().display().to_string());
            }
        }
    }
    out
}

/// Issue 37, "expiry removes O(what expired)": in the default configuration (the change
/// commit), an expiry's retention finds the data files to remove in the log (the files whose
/// last action is a `remove` at or before the oldest retained version), not by walking the
/// data directory against every retained manifest: after publishes, a rollback (which adds
/// older files again) and expiries, the data directory holds exactly the files deltalake lists
/// for the retained versions, every retained version reads its generation, and `verify` finds
/// nothing.
#[test]
fn an_expiry_removes_the_data_files_the_log_says_no_retained_version_names() {
    use manifestdb::{RetentionPolicy, RollbackOutcome, RunMode};
    if !deltalake_available() {
        return;
    }
    let dir = TestDir::new();
    let mut store = dir
        .open_with(&StoreOptions { views: Some(ViewOptions::hard_links(dir.path().join("views"))), ..StoreOptions::default() })
        .expect("open");
    let table = store.view_root().unwrap().join(DATASET).join("table");
    assert_eq!(publish_to(&store, DATASET, "r0", &[(0, 100), (1, 70), (2, 50), (3, 30)]), 1);
    assert_eq!(publish_to(&store, DATASET, "r1", &[(1, 71), (2, 51)]), 2);
    assert_eq!(publish_to(&store, DATASET, "r2", &[(3, 33)]), 3);
    // A rollback to generation 2 adds generation 1's partition 3 files again.
    let RollbackOutcome::RolledBack(rolled) = store.rollback(DATASET, 2, "ops", "bad upstream").expect("rollback") else {
        panic!("refused");
    };
    assert_eq!(rolled.number, 4);
    assert_eq!(publish_to(&store, DATASET, "r4", &[(0, 104)]), 5);
    let versions = |store: &Store| -> Vec<u64> {
        store
            .snapshot()
            .unwrap()
            .history(DATASET)
            .unwrap()
            .iter()
            .map(|g| table_doc(store, Some(g.number))["version"].as_u64().expect("a version holds it"))
            .collect()
    };
    let before = table_data_files(&table);
    assert_eq!(before, files_of_versions(&table, &versions(&store)), "before any expiry");
    for (keep, expired) in [(3, vec![1, 2]), (1, vec![3, 4])] {
        let report = store
            .expire_generations(DATASET, &RetentionPolicy { keep_last: keep, rollback_window: std::time::Duration::ZERO }, RunMode::Execute)
            .expect("expire");
        assert_eq!(report.expired, expired);
        let retained = versions(&store);
        let left = table_data_files(&table);
        assert_eq!(left, files_of_versions(&table, &retained), "after expiring {expired:?}: exactly what the retained versions hold");
        check_every_version(&store, &table);
        assert!(views_findings(&mut store).is_empty(), "{:?}", views_findings(&mut store));
    }
    let after = table_data_files(&table);
    assert_eq!(after.len(), 4, "one file per partition of generation 5: {after:?}");
    assert!(before.len() > after.len());
}

//! Published views: `current` names only a complete view of a generation the store holds
//! (DOMAIN.md invariant 13), through retried attempts, crashes between commit and swap,
//! rollback, expiry, cleanup and hostile file-system states.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use manifestdb::{
    ApplyOptions, CleanupOptions, Error, FileCheck, PublishOptions, PublishOutcome, RetentionPolicy, RollbackOutcome, RunMode, Store,
    StoreOptions, TaskKey, VerifyOptions, ViewManifest, ViewMode, ViewOptions,
};

use crate::support::{TestDir, read_rows, run_attempt, run_spec};

const DATASET: &str = "daily_units";

struct Env {
    store: Store,
    dir: TestDir,
}

fn options(views: &Path, mode: ViewMode) -> StoreOptions {
    StoreOptions {
        views: Some(ViewOptions { root: views.to_path_buf(), mode, trees: Some(manifestdb::ViewTrees::All) }),
        ..StoreOptions::default()
    }
}

impl Env {
    fn new() -> Env {
        Env::with_mode(ViewMode::HardLink)
    }

    fn with_mode(mode: ViewMode) -> Env {
        let dir = TestDir::new();
        let store = dir.open_with(&options(&dir.path().join("views"), mode)).expect("open store with views");
        Env { store, dir }
    }

    fn views(&self) -> PathBuf {
        self.dir.path().join("views")
    }

    fn dataset_dir(&self) -> PathBuf {
        self.views().join(DATASET)
    }

    /// Reopens the store without naming the views: the recorded view root is used.
    fn reopen(self) -> Env {
        let Env { store, dir } = self;
        drop(store);
        let store = dir.open().expect("reopen store");
        Env { store, dir }
    }

    /// The generation `current` names, if any.
    fn current_target(&self) -> Option<u64> {
        let target = std::fs::read_link(self.dataset_dir().join("current")).ok()?;
        target.to_str()?.strip_prefix('v')?.parse().ok()
    }

    fn view_findings(&self) -> Vec<String> {
        let report = self.store.snapshot().expect("snapshot").verify(&VerifyOptions {
            files: Some(FileCheck::SizeAndChecksum),
            integrity_check: false,
            ..VerifyOptions::default()
        });
        report.findings.iter().filter(|f| f.table == "views").map(ToString::to_string).collect()
    }
}

/// Declares a run, runs one attempt per partition (two for `retried`, both valid: the lost
/// acknowledgement of the seeds' scenario), validates and publishes.
fn publish(store: &Store, run: &str, parts: &[(&str, u64, i64)], retried: &[&str]) -> manifestdb::Result<PublishOutcome> {
    let snapshot = format!("input@{run}");
    store.declare_run(&run_spec(DATASET, run, &snapshot, parts))?;
    for (partition, rows, total) in parts {
        let task = TaskKey::new(DATASET, run, *partition);
        let attempts = if retried.contains(partition) { 2 } else { 1 };
        for _ in 0..attempts {
            let ticket = run_attempt(store, &task, &snapshot, *rows, *total);
            store.validate_attempt(&ticket.key, FileCheck::SizeAndChecksum)?;
        }
    }
    store.publish(DATASET, run, &PublishOptions::default())
}

fn published(outcome: manifestdb::Result<PublishOutcome>) -> u64 {
    match outcome.expect("publish") {
        PublishOutcome::Published(g) | PublishOutcome::AlreadyPublished(g) => g.number,
        PublishOutcome::Refused(r) => panic!("refused: {r}"),
    }
}

/// Every regular file under `dir` (following nothing), relative, with `(rows, total)` for CSVs.
fn files_under(dir: &Path) -> BTreeMap<String, (u64, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("list") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("meta");
            if meta.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "csv") {
                let rel = path.strip_prefix(dir).expect("inside").to_string_lossy().into_owned();
                out.insert(rel, read_rows(&path));
            }
        }
    }
    out
}

/// The path of `partition`'s file `part.csv` inside a view of the store's current generation:
/// named after the partition version holding it (`g<since>-a<attempt>-part.csv`).
fn view_rel(store: &Store, partition: &str) -> String {
    let entry = store.snapshot().unwrap().partition(DATASET, partition, None).unwrap().expect("partition in the current generation");
    format!("{partition}/g{}-a{}-part.csv", entry.since_generation, entry.attempt)
}

const PARTS: [(&str, u64, i64); 3] = [("date=1/region=eu", 4, 100), ("date=1/region=us", 3, 70), ("date=2/region=eu", 2, 50)];

#[test]
fn current_holds_exactly_one_attempt_per_partition_after_retries() {
    let env = Env::new();
    let generation = published(publish(&env.store, "r1", &PARTS, &["date=1/region=eu", "date=2/region=eu"]));
    assert_eq!(env.current_target(), Some(generation));
    let current = env.dataset_dir().join("current");
    let seen = files_under(&current);
    let expected: BTreeMap<String, (u64, i64)> =
        PARTS.iter().map(|(p, rows, total)| (format!("{p}/g{generation}-a1-part.csv"), (*rows, *total))).collect();
    assert_eq!(seen, expected, "one file per partition, the partition's own rows and total");
    // The staging tree holds both attempts of the retried partitions.
    let staged: i64 = files_under(&env.dir.path().join("staging")).values().map(|(_, t)| t).sum();
    assert_eq!(staged, 100 + 70 + 50 + 100 + 50);
    let manifest = ViewManifest::read(current.join("_manifest.json")).expect("manifest");
    assert_eq!((manifest.generation, manifest.dataset.as_str(), manifest.file_mode.as_str()), (generation, DATASET, "hard_link"));
    assert_eq!(manifest.totals.total, Some(220));
    assert_eq!(manifest.totals.files, 3);
    for p in &manifest.partitions {
        assert_eq!(p.attempt, 1, "the lowest valid attempt is the one in the view");
    }
    // Hard links: the view's file is the accepted attempt's file, no copy.
    use std::os::unix::fs::MetadataExt;
    let entry = env.store.snapshot().unwrap().partition(DATASET, "date=1/region=eu", None).unwrap().unwrap();
    let staged = std::fs::metadata(entry.staging_dir.expect("absolute staging dir").join("part.csv")).unwrap();
    let linked = std::fs::metadata(current.join(view_rel(&env.store, "date=1/region=eu"))).unwrap();
    assert_eq!((staged.dev(), staged.ino()), (linked.dev(), linked.ino()));
    assert!(env.view_findings().is_empty(), "{:?}", env.view_findings());
}

#[test]
fn copy_mode_copies_and_checks_every_byte() {
    let env = Env::with_mode(ViewMode::Copy);
    let generation = published(publish(&env.store, "r1", &PARTS, &[]));
    let current = env.dataset_dir().join("current");
    assert_eq!(files_under(&current).len(), 3);
    use std::os::unix::fs::MetadataExt;
    let entry = env.store.snapshot().unwrap().partition(DATASET, "date=1/region=eu", None).unwrap().unwrap();
    let staged = std::fs::metadata(entry.staging_dir.unwrap().join("part.csv")).unwrap();
    let copied = std::fs::metadata(current.join(view_rel(&env.store, "date=1/region=eu"))).unwrap();
    assert_ne!(staged.ino(), copied.ino(), "a copy, not a link");
    assert_eq!(ViewManifest::read(current.join("_manifest.json")).unwrap().file_mode, "copy");
    assert_eq!(env.current_target(), Some(generation));
    assert!(env.view_findings().is_empty(), "{:?}", env.view_findings());
}

/// Every file operation of the view build of generation 2 fails in turn, as a crash there
/// would stop it. `current` must then name a complete view of a stored generation (v1, or v2
/// once the swap's rename happened), and a sync (reopen or `sync_view`) must bring it to v2.
#[test]
fn a_crash_at_any_view_operation_leaves_current_on_a_complete_view() {
    let second: [(&str, u64, i64); 2] = [("date=1/region=eu", 5, 120), ("date=3/region=eu", 1, 9)];
    // Count the operations of a clean build of generation 2.
    let total = {
        let env = Env::new();
        published(publish(&env.store, "r1", &PARTS, &[]));
        env.store.inject_view_failure(None);
        published(publish(&env.store, "r2", &second, &["date=3/region=eu"]));
        env.store.view_operations()
    };
    assert!(total >= 15, "a build has at least mkdir, links, syncs, manifest, rename and swap: {total}");
    for k in 0..total {
        let env = Env::new();
        published(publish(&env.store, "r1", &PARTS, &[]));
        env.store.inject_view_failure(Some(k));
        match publish(&env.store, "r2", &second, &[]) {
            Err(Error::ViewLagging { generation: 2, .. }) => {}
            other => panic!("operation {k}: expected the view to lag, got {other:?}"),
        }
        let target = env.current_target();
        assert!(matches!(target, Some(1 | 2)), "operation {k}: current names {target:?}");
        // Whatever current names is complete: the only acceptable finding is the lag itself.
        let findings: Vec<String> = env.view_findings().into_iter().filter(|f| !f.contains("the view lags")).collect();
        assert!(findings.is_empty(), "operation {k}: {findings:?}");
        let expected = if target == Some(1) { 220 } else { 120 + 70 + 50 + 9 };
        let seen: i64 = files_under(&env.dataset_dir().join("current")).values().map(|(_, t)| t).sum();
        assert_eq!(seen, expected, "operation {k}: current's data is exactly one generation's");
        // Bring it up to date: by reopening (even k) or by an explicit sync (odd k).
        let env = if k % 2 == 0 {
            env.reopen()
        } else {
            let status = env.store.sync_view(DATASET).expect("sync").expect("a status");
            assert_eq!(status.generation, 2);
            env
        };
        assert_eq!(env.current_target(), Some(2), "operation {k}: after sync");
        assert!(env.view_findings().is_empty(), "operation {k}: after sync: {:?}", env.view_findings());
        let leftovers: Vec<String> = std::fs::read_dir(env.dataset_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".building") || n.starts_with(".expired") || n == ".current-new")
            .collect();
        assert!(leftovers.is_empty(), "operation {k}: leftovers {leftovers:?}");
    }
    println!("view crash points covered: {total}");
}

#[test]
fn a_crash_building_the_first_view_leaves_no_current() {
    let total = {
        let env = Env::new();
        env.store.inject_view_failure(None);
        published(publish(&env.store, "r1", &PARTS, &[]));
        env.store.view_operations()
    };
    for k in 0..total {
        let env = Env::new();
        env.store.inject_view_failure(Some(k));
        assert!(matches!(publish(&env.store, "r1", &PARTS, &[]), Err(Error::ViewLagging { generation: 1, .. })), "operation {k}");
        let target = env.current_target();
        assert!(matches!(target, None | Some(1)), "operation {k}: {target:?}");
        if target.is_some() {
            assert_eq!(files_under(&env.dataset_dir().join("current")).len(), 3, "operation {k}");
        }
        // A retried publish returns the same generation and repairs the view.
        assert_eq!(published(env.store.publish(DATASET, "r1", &PublishOptions::default())), 1);
        assert_eq!(env.current_target(), Some(1));
        assert!(env.view_findings().is_empty(), "operation {k}: {:?}", env.view_findings());
    }
}

#[test]
fn rollback_moves_current_to_the_restored_content() {
    let env = Env::new();
    published(publish(&env.store, "r1", &PARTS[..1], &[]));
    published(publish(&env.store, "r2", &[("date=1/region=eu", 2, 7), ("date=9/region=eu", 1, 1)], &[]));
    assert_eq!(files_under(&env.dataset_dir().join("current")).len(), 2);
    let RollbackOutcome::RolledBack(generation) = env.store.rollback(DATASET, 1, "ops", "bad data").expect("rollback") else {
        panic!("refused");
    };
    assert_eq!(env.current_target(), Some(generation.number));
    let seen = files_under(&env.dataset_dir().join("current"));
    assert_eq!(
        seen,
        BTreeMap::from([(view_rel(&env.store, "date=1/region=eu"), (4, 100))]),
        "the partition the rollback removed is absent"
    );
    let manifest = ViewManifest::read(env.dataset_dir().join("current/_manifest.json")).unwrap();
    assert_eq!((manifest.kind.as_str(), manifest.restored), ("rollback", Some(1)));
    // The views of generations 1 and 2 are retained, complete, beside the new one.
    assert!(env.dataset_dir().join("v1").is_dir() && env.dataset_dir().join("v2").is_dir());
    assert!(env.view_findings().is_empty(), "{:?}", env.view_findings());
}

#[test]
fn expiry_removes_expired_views_and_cleanup_spares_retained_ones() {
    let env = Env::new();
    for (i, total) in [10i64, 20, 30, 40].iter().enumerate() {
        published(publish(&env.store, &format!("r{i}"), &[("date=1/region=eu", 2, *total)], &["date=1/region=eu"]));
    }
    let policy = RetentionPolicy { keep_last: 2, rollback_window: Duration::ZERO };
    let dry = env.store.expire_generations(DATASET, &policy, RunMode::DryRun).unwrap();
    assert_eq!(dry.expired, [1, 2]);
    assert!(env.dataset_dir().join("v1").exists(), "a dry run removes nothing");
    let report = env.store.expire_generations(DATASET, &policy, RunMode::Execute).unwrap();
    assert_eq!(report.views_removed, [1, 2]);
    assert!(!env.dataset_dir().join("v1").exists() && !env.dataset_dir().join("v2").exists());
    assert!(env.dataset_dir().join("v3").is_dir() && env.dataset_dir().join("v4").is_dir());
    // The expired trees were renamed away (`.expired-v<N>`) before the expiry returned; a
    // thread of their own removes them, and is waited for here.
    env.store.wait_for_view_removals();
    let left: Vec<String> = std::fs::read_dir(env.dataset_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".expired"))
        .collect();
    assert!(left.is_empty(), "the expired views' trees are all removed: {left:?}");
    // Cleanup with a short threshold deletes the expired generations' and duplicate attempts'
    // files, never a file a retained view links, and nothing under the view root.
    let before_views = files_under(&env.views());
    let plan = env.store.plan_cleanup(&CleanupOptions { age_threshold: Duration::from_millis(1), force_short_threshold: true }).unwrap();
    assert!(!plan.candidates.is_empty());
    let applied = env.store.apply_cleanup(plan.id, &ApplyOptions { mode: RunMode::Execute, ..ApplyOptions::default() }).unwrap();
    assert!(!applied.deleted.is_empty());
    assert_eq!(files_under(&env.views()), before_views, "cleanup touched nothing under the view root");
    assert!(env.view_findings().is_empty(), "{:?}", env.view_findings());
    for v in ["v3", "v4"] {
        let seen = files_under(&env.dataset_dir().join(v));
        assert_eq!(seen.len(), 1, "{v} complete");
    }
}

#[test]
fn a_publish_right_after_an_expiry_works_beside_the_removal_of_the_expired_trees() {
    let env = Env::new();
    // Views of 40 partitions each: their removal is still under way when the publish below runs.
    let parts: Vec<String> = (0..40).map(|i| format!("date=1/p={i:02}")).collect();
    let spec: Vec<(&str, u64, i64)> = parts.iter().map(|p| (p.as_str(), 1, 1)).collect();
    for i in 0..6 {
        published(publish(&env.store, &format!("r{i}"), &spec, &[]));
    }
    let report = env
        .store
        .expire_generations(DATASET, &RetentionPolicy { keep_last: 1, rollback_window: Duration::ZERO }, RunMode::Execute)
        .unwrap();
    assert_eq!(report.views_removed, [1, 2, 3, 4, 5]);
    for v in 1..=5 {
        assert!(!env.dataset_dir().join(format!("v{v}")).exists(), "v{v} unreachable once the expiry returned");
    }
    // The publish's view sync leaves the trees being removed to their thread.
    let generation = published(publish(&env.store, "r6", &spec[..3], &[]));
    assert_eq!(env.current_target(), Some(generation));
    env.store.wait_for_view_removals();
    let names: BTreeSet<String> =
        std::fs::read_dir(env.dataset_dir()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.iter().any(|n| n.starts_with(".expired") || n.starts_with(".building")), "{names:?}");
    assert!(names.contains("v6") && names.contains("v7"), "{names:?}");
    assert!(env.view_findings().is_empty(), "{:?}", env.view_findings());
    // A removal the process did not finish (a crash) leaves a leftover the next sync removes.
    std::fs::create_dir_all(env.dataset_dir().join(".expired-v3/date=1/p=00")).unwrap();
    std::fs::write(env.dataset_dir().join(".expired-v3/date=1/p=00/part.csv"), "a\n1\n").unwrap();
    env.store.sync_view(DATASET).unwrap();
    assert!(!env.dataset_dir().join(".expired-v3").exists(), "the next sync removes a leftover tree");
}

#[test]
fn an_expiry_by_a_handle_that_was_not_told_about_views_still_removes_them() {
    let env = Env::new();
    for i in 0..3 {
        published(publish(&env.store, &format!("r{i}"), &[("p=1", 1, i)], &[]));
    }
    // The view root is recorded in the store: a plain open keeps the views.
    let env = env.reopen();
    assert!(env.store.view_root().is_some());
    let report = env
        .store
        .expire_generations(DATASET, &RetentionPolicy { keep_last: 1, rollback_window: Duration::ZERO }, RunMode::Execute)
        .unwrap();
    assert_eq!(report.views_removed, [1, 2]);
    assert_eq!(env.current_target(), Some(3));
    assert!(env.view_findings().is_empty(), "{:?}", env.view_findings());
}

#[test]
fn a_reader_holding_an_old_view_reads_it_unchanged_through_a_publish() {
    use std::io::Read;
    let env = Env::new();
    published(publish(&env.store, "r1", &PARTS, &[]));
    // The reader resolves `current` once (as engines do when they list the directory) and
    // keeps reading from that view.
    let resolved = std::fs::canonicalize(env.dataset_dir().join("current")).unwrap();
    assert!(resolved.ends_with("v1"));
    let mut open = std::fs::File::open(resolved.join(view_rel(&env.store, "date=1/region=eu"))).unwrap();
    let mut first_half = vec![0u8; 8];
    open.read_exact(&mut first_half).unwrap();
    published(publish(&env.store, "r2", &[("date=1/region=eu", 6, 600)], &[]));
    assert_eq!(env.current_target(), Some(2));
    let mut rest = Vec::new();
    open.read_to_end(&mut rest).unwrap();
    let whole = [first_half, rest].concat();
    let text = String::from_utf8(whole).unwrap();
    let total: i64 = text.lines().skip(1).map(|l| l.split(',').nth(1).unwrap().parse::<i64>().unwrap()).sum();
    assert_eq!(total, 100, "the open file still holds generation 1's data");
    assert_eq!(files_under(&resolved).values().map(|(_, t)| t).sum::<i64>(), 220, "v1 is unchanged");
    assert_eq!(files_under(&env.dataset_dir().join("current")).values().map(|(_, t)| t).sum::<i64>(), 600 + 70 + 50);
}

#[test]
fn verify_reports_missing_links_extra_files_and_a_lagging_current() {
    let env = Env::new();
    published(publish(&env.store, "r1", &PARTS, &[]));
    let v1 = env.dataset_dir().join("v1");
    std::fs::remove_file(v1.join(view_rel(&env.store, "date=1/region=us"))).unwrap();
    std::fs::write(v1.join("date=1/region=eu/extra.csv"), "x\n").unwrap();
    let findings = env.view_findings();
    assert!(findings.iter().any(|f| f.contains("region=us/g1-a1-part.csv") && f.contains("missing")), "{findings:?}");
    assert!(findings.iter().any(|f| f.contains("extra.csv") && f.contains("extra file")), "{findings:?}");
    // A lagging current (as a crash between commit and swap leaves it).
    env.store.inject_view_failure(Some(0));
    assert!(publish(&env.store, "r2", &[("p=2", 1, 1)], &[]).is_err());
    let findings = env.view_findings();
    assert!(findings.iter().any(|f| f.contains("current") && f.contains("lags")), "{findings:?}");
}

#[test]
fn a_view_root_inside_the_staging_root_or_around_it_is_refused() {
    let dir = TestDir::new();
    let staging = dir.staging();
    for root in [staging.join("views"), staging.clone(), dir.path().to_path_buf()] {
        let err = dir.open_with(&options(&root, ViewMode::HardLink)).expect_err("refused");
        assert!(matches!(err, Error::ViewRoot { .. }), "{root:?}: {err}");
        assert!(err.to_string().contains("staging root"), "{err}");
    }
    assert!(!staging.join("views").exists(), "nothing was created inside the staging root");
    // Nothing was recorded: a plain open has no views.
    let store = dir.open().unwrap();
    assert!(store.view_root().is_none());
}

#[test]
fn a_view_root_on_another_file_system_is_refused_for_hard_links_and_works_with_copies() {
    use std::os::unix::fs::MetadataExt;
    let shm = Path::new("/dev/shm");
    let dir = TestDir::new();
    let other = match tempfile::tempdir_in(shm) {
        Ok(other) if std::fs::metadata(other.path()).unwrap().dev() != std::fs::metadata(dir.path()).unwrap().dev() => other,
        _ => {
            println!("SKIPPED: /dev/shm is missing or on the same file system as the temporary directory");
            return;
        }
    };
    let root = other.path().join("views");
    let err = dir.open_with(&options(&root, ViewMode::HardLink)).expect_err("refused");
    assert!(err.to_string().contains("another file system") && err.to_string().contains("copy"), "{err}");
    let store = dir.open_with(&options(&root, ViewMode::Copy)).expect("copy mode crosses file systems");
    published(publish(&store, "r1", &PARTS, &["date=1/region=eu"]));
    assert_eq!(files_under(&root.join(DATASET).join("current")).values().map(|(_, t)| t).sum::<i64>(), 220);
}

#[test]
fn an_existing_directory_that_is_not_a_view_is_refused_and_left_alone() {
    let env = Env::new();
    let foreign = env.dataset_dir();
    std::fs::create_dir_all(foreign.join("current")).unwrap();
    std::fs::write(foreign.join("precious.csv"), "keep me\n").unwrap();
    let err = publish(&env.store, "r1", &PARTS, &[]).expect_err("view refused");
    let Error::ViewLagging { source, .. } = &err else { panic!("{err}") };
    assert!(matches!(**source, Error::ViewRefused { .. }), "{source}");
    assert!(err.to_string().contains("not a manifestdb view directory"), "{err}");
    assert_eq!(std::fs::read_to_string(foreign.join("precious.csv")).unwrap(), "keep me\n");
    assert!(foreign.join("current").is_dir(), "nothing deleted");
    // The publish itself committed.
    assert_eq!(env.store.snapshot().unwrap().current(DATASET).unwrap().map(|g| g.number), Some(1));
}

#[test]
fn a_symlink_in_place_of_the_dataset_directory_or_current_is_refused() {
    let env = Env::new();
    let elsewhere = env.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, env.dataset_dir()).unwrap();
    let err = publish(&env.store, "r1", &PARTS, &[]).expect_err("refused");
    assert!(err.to_string().contains("symlink"), "{err}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the link");
    // A dataset directory whose `current` is a real directory.
    std::fs::remove_file(env.dataset_dir()).unwrap();
    std::fs::create_dir(env.dataset_dir()).unwrap();
    std::fs::write(env.dataset_dir().join(".manifestdb-view"), "").unwrap();
    std::fs::create_dir(env.dataset_dir().join("current")).unwrap();
    let err = env.store.sync_view(DATASET).expect_err("refused");
    assert!(err.to_string().contains("not a symlink"), "{err}");
    assert!(env.dataset_dir().join("current").is_dir());
}

#[test]
fn a_partition_path_a_view_cannot_hold_is_refused_without_writing() {
    let env = Env::new();
    // Partition keys with `..` never reach the store; these do, and a view cannot place them.
    for (run, partition) in [("r1", ".hidden/x=1"), ("r2", "a\\b")] {
        let err = publish(&env.store, run, &[(partition, 1, 1)], &[]).expect_err("refused");
        assert!(matches!(&err, Error::ViewLagging { source, .. } if matches!(**source, Error::ViewRefused { .. })), "{err}");
        assert_eq!(env.current_target(), None, "no view was made current");
    }
    // The plan is refused before the file system is touched.
    assert!(!env.dataset_dir().exists(), "no view, no leftover");
}

#[test]
fn manifests_give_absolute_paths() {
    let env = Env::new();
    published(publish(&env.store, "r1", &PARTS, &[]));
    let manifest = env.store.snapshot().unwrap().manifest(DATASET, None).unwrap().unwrap();
    for entry in &manifest.partitions {
        let dir = entry.staging_dir.as_ref().expect("known root");
        assert!(dir.is_absolute() && dir.join(&entry.files[0].path).is_file(), "{dir:?}");
    }
    let reader = env.dir.read_only().unwrap();
    assert!(reader.snapshot().unwrap().manifest(DATASET, None).unwrap().unwrap().partitions[0].staging_dir.is_none());
    let reader = reader.with_staging_root(env.dir.path().join("staging")).unwrap();
    let entry = &reader.snapshot().unwrap().manifest(DATASET, None).unwrap().unwrap().partitions[0];
    assert!(entry.staging_dir.as_ref().unwrap().is_absolute());
    assert_eq!(reader.snapshot().unwrap().views().unwrap().map(|v| v.root), Some(std::fs::canonicalize(env.views()).unwrap()));
}

/// Issue 28 item 1: an engine lists the files through `current` while it names generation 1,
/// a publish replacing one partition swaps `current` to generation 2, and the engine then
/// opens every listed path through `current`. Each read returns generation 1's bytes (the
/// partition was carried over: same name, same file) or fails with "not found" (it was
/// replaced: its new file has another name); never generation 2's bytes under a listed name.
#[test]
fn a_stale_listing_of_current_reads_its_own_generation_or_not_found() {
    let env = Env::new();
    published(publish(&env.store, "r1", &PARTS, &[]));
    let current = env.dataset_dir().join("current");
    let listed: BTreeMap<String, Vec<u8>> =
        files_under(&current).into_keys().map(|rel| (rel.clone(), std::fs::read(current.join(&rel)).unwrap())).collect();
    assert_eq!(listed.len(), 3);
    // The new attempt writes the same file name (`part.csv`) with other rows.
    published(publish(&env.store, "r2", &[("date=1/region=eu", 6, 600)], &[]));
    assert_eq!(env.current_target(), Some(2));
    let (mut same, mut not_found) = (0, 0);
    for (rel, bytes) in &listed {
        match std::fs::read(current.join(rel)) {
            Ok(now) => {
                assert_eq!(&now, bytes, "{rel}: a stale listing read another generation's bytes under the name it listed");
                same += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => not_found += 1,
            Err(e) => panic!("{rel}: {e}"),
        }
    }
    assert_eq!((same, not_found), (2, 1), "two partitions carried over, one replaced");
    // A fresh listing sees generation 2 whole.
    assert_eq!(files_under(&current).values().map(|(_, t)| t).sum::<i64>(), 600 + 70 + 50);
}

/// Issue 28 item 2: a view whose `_manifest.json` was truncated (as a power loss before its
/// sync leaves it) and whose data file was removed is found damaged by `view sync`, which
/// rebuilds it beside the damaged one and swaps it in whole; reading the damaged manifest is
/// a damage error (corrupt), not a usage error.
#[test]
fn view_sync_rebuilds_a_truncated_manifest_and_a_missing_file() {
    let env = Env::new();
    published(publish(&env.store, "r1", &PARTS, &[]));
    let v1 = env.dataset_dir().join("v1");
    std::fs::File::create(v1.join("_manifest.json")).unwrap();
    std::fs::remove_file(v1.join(view_rel(&env.store, "date=1/region=us"))).unwrap();
    let err = ViewManifest::read(v1.join("_manifest.json")).expect_err("an empty manifest");
    assert!(matches!(err, Error::ViewDamaged { .. }), "{err:?}");
    assert_eq!(err.kind(), manifestdb::ErrorKind::Corrupt);
    assert!(!env.view_findings().is_empty());
    let status = env.store.sync_view(DATASET).expect("sync").expect("status");
    assert_eq!((status.repaired.as_slice(), status.built, status.swapped), (&[1][..], false, false));
    assert!(env.view_findings().is_empty(), "{:?}", env.view_findings());
    assert_eq!(ViewManifest::read(v1.join("_manifest.json")).unwrap().generation, 1);
    assert_eq!(files_under(&env.dataset_dir().join("current")).values().map(|(_, t)| t).sum::<i64>(), 220);
    assert!(env.store.sync_view(DATASET).unwrap().unwrap().repaired.is_empty(), "a sound view is left as it is");
    // The next writable open repairs too: a manifest removed, a file cut short.
    std::fs::remove_file(v1.join("_manifest.json")).unwrap();
    let env = env.reopen();
    assert!(env.view_findings().is_empty(), "{:?}", env.view_findings());
    let leftovers: Vec<String> = std::fs::read_dir(env.dataset_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n != ".manifestdb-view")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// In copy mode a copied data file cut short (a power loss dropping its unsynced data) is
/// found by its size and rebuilt.
#[test]
fn view_sync_rebuilds_a_copy_cut_short() {
    let env = Env::with_mode(ViewMode::Copy);
    published(publish(&env.store, "r1", &PARTS, &[]));
    let file = env.dataset_dir().join("v1").join(view_rel(&env.store, "date=1/region=eu"));
    std::fs::OpenOptions::new().write(true).open(&file).unwrap().set_len(0).unwrap();
    let status = env.store.sync_view(DATASET).expect("sync").expect("status");
    assert_eq!(status.repaired, [1]);
    assert_eq!(read_rows(&file), (4, 100));
    assert!(env.view_findings().is_empty(), "{:?}", env.view_findings());
}

/// The reading patterns the reading chapter names, each checked in one deterministic sequence
/// (list and read partition A, then a publish replacing every partition, then list and read
/// partition B): a lazy lister that walks *through* `current` one directory at a time resolves
/// `current` again at each step and sums two generations (the chapter says so: never read this
/// way); the same walk over the directory `current` named when the reader began (resolved
/// once: `realpath`, `view --json`'s `path`, `Store::view_path`) sums exactly its generation;
/// a list-first reader through `current` that listed before the publish reads its own
/// generation or fails with not-found, never a mix.
#[test]
fn a_lazy_lister_through_current_mixes_and_the_resolved_path_never_does() {
    let env = Env::new();
    let parts = [("date=1/region=eu", 2, 10), ("date=1/region=us", 2, 20)];
    let first = published(publish(&env.store, "r1", &parts, &[]));
    let current = env.dataset_dir().join("current");
    let resolved = env.store.view_path(DATASET, None).expect("view path").path;
    assert_eq!(std::fs::canonicalize(&current).unwrap(), resolved);
    let sum = |dir: &Path| files_under(dir).values().map(|(_, t)| t).sum::<i64>();
    // Step 1: partition A, through `current` and through the resolved path.
    let (lazy_a, resolved_a) = (sum(&current.join(parts[0].0)), sum(&resolved.join(parts[0].0)));
    // A list-first reader lists every file through `current` now.
    let listed: Vec<PathBuf> = files_under(&current).keys().map(|rel| current.join(rel)).collect();
    // A publish replaces both partitions.
    let second = published(publish(&env.store, "r2", &[("date=1/region=eu", 2, 1000), ("date=1/region=us", 2, 2000)], &[]));
    assert_eq!(second, first + 1);
    // Step 2: partition B.
    let (lazy_b, resolved_b) = (sum(&current.join(parts[1].0)), sum(&resolved.join(parts[1].0)));
    assert_eq!(lazy_a + lazy_b, 10 + 2000, "the lazy walk through `current` mixed generations {first} and {second}");
    assert_eq!(resolved_a + resolved_b, 10 + 20, "the walk over the resolved v{first} read exactly generation {first}");
    // The list-first reader opens what it listed: every path is its own generation's bytes or
    // gone (each file is named after the partition version holding it), never the new ones.
    for path in &listed {
        match std::fs::read_to_string(path) {
            Ok(_) => assert!(path.to_string_lossy().contains(&format!("g{first}-")), "{} is generation {first}'s", path.display()),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{}", path.display()),
        }
    }
}

/// The names in the dataset's directory under the view root.
fn dataset_entries(dir: &Path) -> BTreeSet<String> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
        Err(e) => panic!("listing {}: {e}", dir.display()),
    }
}

/// `(rows, total)` summed over a generation's file list.
fn list_figures(list: &manifestdb::FileList) -> (u64, i64) {
    list.files.iter().map(|f| read_rows(f)).fold((0, 0), |(r, t), (rows, total)| (r + rows, t + total))
}

#[test]
fn a_new_view_root_builds_no_directory_trees_and_its_file_list_is_each_generation_exactly() {
    let dir = TestDir::new();
    let views = dir.path().join("views");
    let store = dir.open_with(&StoreOptions { views: Some(ViewOptions::hard_links(&views)), ..StoreOptions::default() }).expect("open");
    assert_eq!(store.snapshot().unwrap().views().unwrap().and_then(|v| v.trees), Some(manifestdb::ViewTrees::Off));
    published(publish(&store, "r1", &PARTS, &["date=1/region=us"]));
    // A new run replacing one partition.
    published(publish(&store, "r2", &[("date=1/region=eu", 5, 9)], &[]));
    // Neither `current` nor any `v<N>`: nothing under the view root grows with the dataset.
    let entries = dataset_entries(&views.join(DATASET));
    assert!(!entries.contains("current") && !entries.iter().any(|n| n.starts_with('v')), "{entries:?}");
    match store.view_path(DATASET, None) {
        Err(Error::NoView { reason, .. }) => assert!(reason.contains("no directory trees"), "{reason}"),
        other => panic!("expected NoView, got {other:?}"),
    }
    // Each generation's list names one accepted attempt per partition: generation 2 holds the
    // replaced partition's new content and the two carried over, generation 1 its own.
    let second = store.view_files(DATASET, None).unwrap();
    assert_eq!((second.generation, second.is_current, second.files.len()), (2, true, 3));
    assert_eq!(list_figures(&second), (5 + 3 + 2, 9 + 70 + 50));
    let first = store.view_files(DATASET, Some(1)).unwrap();
    assert_eq!((first.generation, first.is_current), (1, false));
    assert_eq!(list_figures(&first), (4 + 3 + 2, 100 + 70 + 50));
    // The retried partition is listed once, by its accepted attempt.
    let accepted = store.snapshot().unwrap().partition(DATASET, "date=1/region=us", None).unwrap().unwrap();
    let us: Vec<&PathBuf> = second.files.iter().filter(|f| f.to_string_lossy().contains("region=us")).collect();
    assert_eq!(us.len(), 1, "{us:?}");
    assert!(us[0].starts_with(accepted.staging_dir.as_ref().unwrap()), "{us:?} is not the accepted attempt's");
    // Nothing for verify to report.
    let report = store.snapshot().unwrap().verify(&VerifyOptions {
        files: Some(FileCheck::SizeAndChecksum),
        integrity_check: false,
        ..VerifyOptions::default()
    });
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

#[test]
fn trees_turned_off_remove_current_and_every_tree_and_turned_on_for_one_dataset_build_its_own() {
    let env = Env::new();
    published(publish(&env.store, "r1", &PARTS, &[]));
    published(publish(&env.store, "r2", &[("date=1/region=eu", 5, 9)], &[]));
    assert_eq!(env.current_target(), Some(2));
    let Env { store, dir } = env;
    drop(store);
    let views = dir.path().join("views");
    // Off: the writable open's sync removes `current` first, then every tree.
    let off = ViewOptions::hard_links(&views).with_trees(manifestdb::ViewTrees::Off);
    let store = dir.open_with(&StoreOptions { views: Some(off), ..StoreOptions::default() }).expect("open with trees off");
    store.wait_for_view_removals();
    let entries = dataset_entries(&views.join(DATASET));
    assert!(
        !entries.contains("current")
            && !entries.iter().any(|n| n.starts_with('v') || n.starts_with(".expired") || n.starts_with(".building")),
        "{entries:?}"
    );
    drop(store);
    // A plain open keeps the recorded choice.
    let store = dir.open().expect("reopen");
    assert_eq!(store.snapshot().unwrap().views().unwrap().and_then(|v| v.trees), Some(manifestdb::ViewTrees::Off));
    published(publish(&store, "r3", &[("date=2/region=eu", 1, 1)], &[]));
    assert!(!views.join(DATASET).join("current").exists());
    drop(store);
    // Trees for this dataset only: the open builds the current generation's.
    let only = ViewOptions::hard_links(&views).with_trees(manifestdb::ViewTrees::only([DATASET]));
    let store = dir.open_with(&StoreOptions { views: Some(only), ..StoreOptions::default() }).expect("open with trees for one");
    let status = store.sync_view(DATASET).unwrap().expect("a generation");
    assert!(status.trees);
    assert_eq!(std::fs::read_link(views.join(DATASET).join("current")).unwrap(), PathBuf::from("v3"));
    let viewed = files_under(&store.view_path(DATASET, None).unwrap().path);
    assert_eq!(
        viewed.values().fold((0, 0), |(r, t), (rows, total)| (r + rows, t + total)),
        list_figures(&store.view_files(DATASET, None).unwrap())
    );
}

#[test]
fn a_view_root_recorded_before_the_choice_of_trees_keeps_trees_for_every_dataset() {
    if crate::support::redb_only("makes a store of the earlier format by removing a record from the redb file by hand") {
        return;
    }
    let dir = TestDir::new();
    let views = dir.path().join("views");
    let store = dir.open_with(&StoreOptions { views: Some(ViewOptions::hard_links(&views)), ..StoreOptions::default() }).expect("open");
    published(publish(&store, "r1", &PARTS, &[]));
    drop(store);
    // A store written before the choice existed has the view root's record and no other.
    {
        let db = redb::Database::open(dir.location()).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(redb::TableDefinition::<&[u8], &[u8]>::new("meta_v1")).unwrap();
            assert!(meta.remove(b"view_trees".as_slice()).unwrap().is_some(), "the choice is recorded under `view_trees`");
        }
        txn.commit().unwrap();
    }
    let store = dir.open().expect("reopen");
    assert_eq!(store.snapshot().unwrap().views().unwrap().and_then(|v| v.trees), Some(manifestdb::ViewTrees::All));
    // Its readers of `current` keep working: the open built the tree, and the next publish moves it.
    published(publish(&store, "r2", &[("date=1/region=eu", 5, 9)], &[]));
    assert_eq!(std::fs::read_link(views.join(DATASET).join("current")).unwrap(), PathBuf::from("v2"));
}

#[test]
fn verify_reports_a_current_left_beside_a_dataset_without_trees() {
    let dir = TestDir::new();
    let views = dir.path().join("views");
    let store = dir.open_with(&StoreOptions { views: Some(ViewOptions::hard_links(&views)), ..StoreOptions::default() }).expect("open");
    published(publish(&store, "r1", &PARTS, &[]));
    std::os::unix::fs::symlink("v1", views.join(DATASET).join("current")).unwrap();
    let report = store.snapshot().unwrap().verify(&VerifyOptions { integrity_check: false, ..VerifyOptions::default() });
    assert!(report.findings.iter().any(|f| f.table == "views" && f.message.contains("no directory trees")), "{:?}", report.findings);
    // `view sync` removes it.
    store.sync_view(DATASET).unwrap();
    assert!(std::fs::symlink_metadata(views.join(DATASET).join("current")).is_err());
}

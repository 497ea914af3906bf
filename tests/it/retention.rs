//! Retention, rollback, attempt leases and cleanup of staging files.
//!
//! File ages are set with `File::set_modified` instead of sleeping; leases and rollback
//! windows are short and configured per store. The randomized test prints the files planned,
//! deleted and skipped (run with `--nocapture` to see them).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use manifestdb::{
    ApplyOptions, Candidate, CleanupOptions, CleanupReason, EffectKey, EffectStatus, Error, FileCheck, GenerationKind, KeepReason,
    PublishOptions, PublishOutcome, RetentionPolicy, RollbackOutcome, RollbackRefusal, RunMode, SkipReason, Store, StoreOptions, TaskKey,
    describe_file,
};
use proptest::prelude::*;

use crate::support::{TestDir, TestStore, on_postgres, run_spec};

const HOUR: Duration = Duration::from_secs(3600);

/// A store with a short attempt lease.
struct Fixture {
    store: Store,
    dir: TestDir,
}

impl Fixture {
    fn new(lease: Duration) -> Fixture {
        let dir = TestDir::new();
        let options = StoreOptions { attempt_lifetime_max: Some(lease), ..StoreOptions::default() };
        let store = dir.open_with(&options).expect("open");
        Fixture { store, dir }
    }

    fn root(&self) -> PathBuf {
        self.store.staging_root().to_path_buf()
    }
}

fn set_mtime(path: &Path, when: SystemTime) {
    let file = std::fs::File::options().write(true).open(path).expect("open for set_modified");
    file.set_modified(when).expect("set_modified");
}

/// Dates a symlink itself (not its target) an hour back.
fn backdate_link(path: &Path) {
    use rustix::fs::{AtFlags, CWD, Timespec, Timestamps, utimensat};
    let secs = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64 - 3600;
    let t = Timespec { tv_sec: secs, tv_nsec: 0 };
    utimensat(CWD, path, &Timestamps { last_access: t, last_modification: t }, AtFlags::SYMLINK_NOFOLLOW).expect("utimensat");
}

fn hash(bytes: &[u8]) -> u32 {
    crc32fast_like(bytes)
}

/// CRC32 (IEEE) without another dev-dependency: the store exposes it for files only.
fn crc32fast_like(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

static UNIQUE: AtomicU64 = AtomicU64::new(0);

/// Writes a file with unique content into `dir`, dated `age` ago (or in the future for a
/// negative age), and returns its content hash.
fn write_file(dir: &Path, name: &str, modified: SystemTime) -> u32 {
    let content = format!("{}:{}\n", dir.display(), UNIQUE.fetch_add(1, Ordering::Relaxed));
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(&path, &content).expect("write");
    set_mtime(&path, modified);
    hash(content.as_bytes())
}

fn old() -> SystemTime {
    SystemTime::now() - HOUR
}

/// Begins an attempt of `task`, writes `part.csv`, finishes it as valid (or invalid) and
/// validates it. Returns the attempt number and the file's staging-relative path.
fn valid_attempt(store: &Store, task: &TaskKey, snapshot: &str, rows: u64, valid: bool) -> (u32, String) {
    let ticket = store.begin_attempt(task).expect("begin");
    write_file(&ticket.staging_dir, "part.csv", old());
    let file = describe_file(&ticket.staging_dir, "part.csv").expect("describe");
    let reported = if valid { rows } else { rows + 1 };
    let candidate =
        Candidate { snapshot: snapshot.into(), rows: Some(reported), total: Some(0), digest: Some(format!("{task}")), files: vec![file] };
    store.finish_attempt(&ticket.key, &candidate).expect("finish");
    assert_eq!(store.validate_attempt(&ticket.key, FileCheck::Size).expect("validate").is_valid(), valid);
    let rel = ticket.staging_dir.strip_prefix(store.staging_root()).expect("inside root").join("part.csv");
    (ticket.key.attempt, rel.to_str().expect("utf8").to_owned())
}

/// Declares and publishes a run of `dataset` filling `partitions` with one valid attempt each.
fn publish_run(store: &Store, dataset: &str, run: &str, partitions: &[&str]) -> u64 {
    let snapshot = format!("snap-{run}");
    let tasks: Vec<(&str, u64, i64)> = partitions.iter().map(|p| (*p, 1, 0)).collect();
    let mut spec = run_spec(dataset, run, &snapshot, &tasks);
    for task in &mut spec.tasks {
        task.expected_total = None;
    }
    store.declare_run(&spec).expect("declare");
    for partition in partitions {
        valid_attempt(store, &TaskKey::new(dataset, run, *partition), &snapshot, 1, true);
    }
    match store.publish(dataset, run, &PublishOptions::default()).expect("publish") {
        PublishOutcome::Published(generation) => generation.number,
        other => panic!("not published: {other:?}"),
    }
}

fn content_of(store: &Store, dataset: &str, generation: u64) -> Vec<(String, String, u32)> {
    let manifest = store.snapshot().unwrap().manifest(dataset, Some(generation)).unwrap().expect("generation exists");
    manifest.partitions.iter().map(|p| (p.partition.clone(), p.run.clone(), p.attempt)).collect()
}

fn execute() -> ApplyOptions {
    ApplyOptions { mode: RunMode::Execute, ..ApplyOptions::default() }
}

fn short_cleanup() -> CleanupOptions {
    CleanupOptions { age_threshold: Duration::from_secs(60), force_short_threshold: false }
}

#[test]
fn rollback_restores_an_earlier_generation_as_a_new_one_and_leaves_effects_alone() {
    let t = TestStore::new();
    let store = &t.store;
    assert_eq!(publish_run(store, "ds", "r1", &["a", "b"]), 1);
    assert_eq!(publish_run(store, "ds", "r2", &["b", "c"]), 2);
    let effect = EffectKey { dataset: "ds".into(), run: "r2".into(), effect: "notify".into(), partition: None };
    store.record_effect(&effect, b"sent once").unwrap();
    store.mark_effect_emitted(&effect, None).unwrap();

    let RollbackOutcome::RolledBack(generation) = store.rollback("ds", 1, "alice", "bad data in r2").unwrap() else { panic!("refused") };
    assert_eq!((generation.number, generation.parent), (3, 2));
    assert_eq!(generation.kind, GenerationKind::Rollback { restored: 1, actor: "alice".into(), reason: "bad data in r2".into() });
    assert_eq!(generation.partitions_replaced, 2, "b rewritten, c removed; a unchanged");
    assert_eq!(content_of(store, "ds", 3), content_of(store, "ds", 1));
    assert_eq!(store.snapshot().unwrap().current("ds").unwrap().unwrap().number, 3);
    // The emitted effect stays emitted; nothing became ready again.
    let snapshot = store.snapshot().unwrap();
    assert!(snapshot.ready_effects("ds").unwrap().is_empty());
    assert!(matches!(snapshot.effects("ds", "r2").unwrap()[0].status, EffectStatus::Emitted { .. }));
    drop(snapshot);

    // Rolling forward again restores c.
    let RollbackOutcome::RolledBack(forward) = store.rollback("ds", 2, "alice", "r2 was fine").unwrap() else { panic!("refused") };
    assert_eq!(content_of(store, "ds", forward.number), content_of(store, "ds", 2));

    // Refusals are values and write nothing.
    assert_eq!(store.rollback("ds", 4, "a", "r").unwrap(), RollbackOutcome::Refused(RollbackRefusal::AlreadyCurrent { generation: 4 }));
    assert_eq!(
        store.rollback("ds", 9, "a", "r").unwrap(),
        RollbackOutcome::Refused(RollbackRefusal::Unknown { requested: 9, current: Some(4) })
    );
    assert_eq!(
        store.rollback("nope", 1, "a", "r").unwrap(),
        RollbackOutcome::Refused(RollbackRefusal::Unknown { requested: 1, current: None })
    );
    assert!(matches!(store.rollback("ds", 1, "", "r"), Err(Error::InvalidInput { .. })));
    assert_eq!(store.snapshot().unwrap().history("ds").unwrap().len(), 4);

    // The rollback is durable: a reopened store reads the same current generation.
    if !on_postgres() {
        assert!(t.db_path().exists());
    }
    let t = t.reopen();
    assert_eq!(t.store.snapshot().unwrap().current("ds").unwrap().unwrap().number, 4);
    assert_eq!(content_of(&t.store, "ds", 4), content_of(&t.store, "ds", 2));
}

#[test]
fn expiry_keeps_the_newest_generations_and_what_they_see() {
    let f = Fixture::new(HOUR);
    let store = &f.store;
    publish_run(store, "ds", "r1", &["a", "b"]);
    publish_run(store, "ds", "r2", &["a"]);
    publish_run(store, "ds", "r3", &["a"]);
    publish_run(store, "ds", "r4", &["b"]);
    let before: Vec<_> = (3..=4).map(|g| content_of(store, "ds", g)).collect();
    let policy = RetentionPolicy { keep_last: 2, rollback_window: Duration::ZERO };

    let dry = store.expire_generations("ds", &policy, RunMode::DryRun).unwrap();
    assert_eq!((dry.expired.clone(), dry.oldest_retained), (vec![1, 2], 3));
    assert_eq!(store.snapshot().unwrap().history("ds").unwrap().len(), 4, "a dry run changes nothing");

    let report = store.expire_generations("ds", &policy, RunMode::Execute).unwrap();
    assert_eq!(report.expired, vec![1, 2]);
    // a@1 and a@2 are superseded by a@3; b@1 is still visible in 3 and stays.
    assert_eq!(report.versions_removed, 2);
    let after: Vec<_> = (3..=4).map(|g| content_of(store, "ds", g)).collect();
    assert_eq!(before, after, "retained generations read the same");
    assert!(store.snapshot().unwrap().generation("ds", 2).unwrap().is_none());
    assert_eq!(
        store.rollback("ds", 2, "a", "r").unwrap(),
        RollbackOutcome::Refused(RollbackRefusal::Expired { requested: 2, oldest_retained: 3 })
    );
    // Publishing an expired run again says so instead of reporting corruption.
    assert!(matches!(store.publish("ds", "r1", &PublishOptions::default()), Err(Error::GenerationExpired { generation: 1, .. })));
    // The window keeps everything young, whatever the count.
    let wide = RetentionPolicy { keep_last: 1, rollback_window: HOUR };
    assert!(store.expire_generations("ds", &wide, RunMode::Execute).unwrap().expired.is_empty());
}

#[test]
fn an_attempt_past_its_lease_is_abandoned_and_cannot_finish_but_a_heartbeat_keeps_it() {
    let lease = Duration::from_millis(1000);
    let f = Fixture::new(lease);
    let store = &f.store;
    store.declare_run(&run_spec("ds", "r", "s", &[("p", 1, 0)])).unwrap();
    let task = TaskKey::new("ds", "r", "p");
    let silent = store.begin_attempt(&task).unwrap();
    let alive = store.begin_attempt(&task).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let lease_now = store.heartbeat(&alive.key).unwrap();
    assert_eq!(lease_now.expires_at_ms, lease_now.heartbeat_at_ms + 1000);
    std::thread::sleep(Duration::from_millis(700));

    assert_eq!(store.abandon_expired_attempts(RunMode::DryRun).unwrap(), vec![silent.key.clone()]);
    assert_eq!(store.abandon_expired_attempts(RunMode::Execute).unwrap(), vec![silent.key.clone()]);
    assert!(store.abandon_expired_attempts(RunMode::Execute).unwrap().is_empty(), "recorded once");

    write_file(&silent.staging_dir, "part.csv", old());
    let file = describe_file(&silent.staging_dir, "part.csv").unwrap();
    let candidate = Candidate { snapshot: "s".into(), rows: Some(1), total: Some(0), digest: Some("d".into()), files: vec![file] };
    assert!(matches!(store.finish_attempt(&silent.key, &candidate), Err(Error::AttemptAbandoned { attempt: 1, .. })));
    assert!(matches!(store.heartbeat(&silent.key), Err(Error::AttemptAbandoned { .. })));
    // The attempt that kept its lease finishes normally.
    write_file(&alive.staging_dir, "part.csv", old());
    let file = describe_file(&alive.staging_dir, "part.csv").unwrap();
    store.finish_attempt(&alive.key, &Candidate { files: vec![file], ..candidate }).unwrap();
    assert!(matches!(store.heartbeat(&alive.key), Err(Error::AttemptState { .. })), "a finished attempt has no lease");
}

#[test]
fn a_threshold_not_above_the_attempt_lifetime_is_refused_unless_forced() {
    let f = Fixture::new(Duration::from_secs(600));
    let short = CleanupOptions { age_threshold: Duration::from_secs(600), force_short_threshold: false };
    assert!(matches!(
        f.store.plan_cleanup(&short),
        Err(Error::CleanupThresholdTooShort { age_threshold_ms: 600_000, attempt_lifetime_max_ms: 600_000 })
    ));
    let plan = f.store.plan_cleanup(&CleanupOptions { force_short_threshold: true, ..short }).unwrap();
    assert!(f.store.cleanup_plan(plan.id).unwrap().is_some());
    // A plan made under a short lease is refused by a handle whose lease now reaches it.
    let plan = f.store.plan_cleanup(&CleanupOptions { age_threshold: Duration::from_secs(601), force_short_threshold: false }).unwrap();
    let Fixture { dir, store } = f;
    drop(store);
    let longer = StoreOptions { attempt_lifetime_max: Some(Duration::from_secs(3600)), ..StoreOptions::default() };
    let store = dir.open_with(&longer).unwrap();
    assert!(matches!(store.apply_cleanup(plan.id, &execute()), Err(Error::CleanupThresholdTooShort { .. })));
    assert!(matches!(store.apply_cleanup(999, &ApplyOptions::default()), Err(Error::UnknownCleanupPlan { plan: 999 })));
}

/// Everything under `dir` with its content hash (not following symlinks).
fn tree(dir: &Path) -> BTreeMap<PathBuf, Option<u32>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name() == manifestdb::STAGING_ROOT_MARKER {
                continue;
            }
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(entry.path());
            }
            let content = kind.is_file().then(|| hash(&std::fs::read(entry.path()).unwrap()));
            out.insert(entry.path(), content);
        }
    }
    out
}

#[test]
fn symlinks_out_of_the_root_are_never_followed_and_dotdot_does_nothing() {
    let f = Fixture::new(Duration::from_secs(1));
    let store = &f.store;
    let root = f.root();
    let outside = f.dir.path().join("outside");
    std::fs::create_dir_all(outside.join("deep")).unwrap();
    write_file(&outside, "secret", old());
    write_file(&outside, "deep/other", old());
    let outside_before = tree(&outside);
    let store_file = f.dir.location();

    // An invalid attempt whose directory gets a link planted in it, links at the root to a
    // directory and a file outside, and a link to the parent of the root.
    store.declare_run(&run_spec("ds", "r", "s", &[("p", 1, 0)])).unwrap();
    let task = TaskKey::new("ds", "r", "p");
    let (_, rel) = valid_attempt(store, &task, "s", 1, false);
    let attempt_dir = root.join(Path::new(&rel).parent().unwrap());
    std::os::unix::fs::symlink(&outside, attempt_dir.join("escape")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("escape-dir")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), root.join("escape-file")).unwrap();
    std::os::unix::fs::symlink("..", root.join("up")).unwrap();
    std::os::unix::fs::symlink("../..", attempt_dir.join("up2")).unwrap();
    for link in [attempt_dir.join("escape"), root.join("escape-dir"), root.join("escape-file"), root.join("up"), attempt_dir.join("up2")] {
        backdate_link(&link);
    }
    // Names that merely look like traversal are ordinary names.
    write_file(&root, "..data", old());
    write_file(&root.join("..."), "x", old());

    let plan = store.plan_cleanup(&short_cleanup()).unwrap();
    let all: Vec<&str> = plan.candidates.iter().chain(&plan.unknown).map(|p| p.path.as_str()).collect();
    assert!(all.iter().all(|p| !p.starts_with("up/") && !p.starts_with("escape-dir/") && !p.contains("/escape/")), "{all:?}");
    assert!(all.contains(&"escape-dir") && all.contains(&"up"), "links are seen as themselves: {all:?}");
    let report = store.apply_cleanup(plan.id, &ApplyOptions { delete_unknown: true, ..execute() }).unwrap();
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);

    assert_eq!(tree(&outside), outside_before, "nothing outside the root changed");
    if !on_postgres() {
        assert!(store_file.exists(), "the store file beside the root survives");
    }
    assert!(!root.join("escape-dir").exists() && !root.join("up").exists(), "the links themselves were removed");
    assert!(!root.join("..data").exists() && !root.join("...").exists());
    let left: Vec<_> = std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, [manifestdb::STAGING_ROOT_MARKER], "the root is empty but for its marker, and still there");
    assert!(root.is_dir());
}

#[test]
fn a_plan_applied_after_the_state_changed_skips_the_changed_paths() {
    let f = Fixture::new(Duration::from_secs(1));
    let store = &f.store;
    let root = f.root();
    store.declare_run(&run_spec("ds", "r", "s", &[("p", 1, 0)])).unwrap();
    let task = TaskKey::new("ds", "r", "p");
    let mut rels = Vec::new();
    for _ in 0..5 {
        rels.push(valid_attempt(store, &task, "s", 1, false).1);
    }
    write_file(&root, "stray.txt", old());

    let plan = store.plan_cleanup(&short_cleanup()).unwrap();
    assert_eq!(plan.candidates.len(), 5);
    assert!(plan.candidates.iter().all(|p| p.reason == CleanupReason::Invalid));
    assert_eq!(plan.unknown.iter().map(|p| p.path.as_str()).collect::<Vec<_>>(), ["stray.txt"]);

    // Between plan and apply: one file grows, one is touched, one vanishes, one directory on
    // the way is swapped for a symlink to a look-alike outside the root.
    std::fs::write(root.join(&rels[0]), "grown and different").unwrap();
    set_mtime(&root.join(&rels[0]), old());
    set_mtime(&root.join(&rels[1]), old() - Duration::from_secs(1));
    std::fs::remove_file(root.join(&rels[2])).unwrap();
    let swapped_dir = root.join(Path::new(&rels[3]).parent().unwrap());
    let decoy = f.dir.path().join("decoy");
    std::fs::rename(&swapped_dir, &decoy).unwrap();
    std::os::unix::fs::symlink(&decoy, &swapped_dir).unwrap();

    let report = store.apply_cleanup(plan.id, &execute()).unwrap();
    let skipped: HashMap<&str, &SkipReason> = report.skipped.iter().map(|s| (s.path.as_str(), &s.reason)).collect();
    assert_eq!(skipped[rels[0].as_str()], &SkipReason::Changed);
    assert_eq!(skipped[rels[1].as_str()], &SkipReason::Changed);
    assert_eq!(skipped[rels[2].as_str()], &SkipReason::Missing);
    assert_eq!(skipped[rels[3].as_str()], &SkipReason::Changed);
    assert_eq!(skipped["stray.txt"], &SkipReason::UnknownNotRequested);
    assert_eq!(report.deleted, vec![rels[4].clone()]);
    assert!(decoy.join("part.csv").exists(), "the file behind the swapped directory survives");
    assert!(root.join("stray.txt").exists(), "unknown files stay without the flag");
    assert!(root.join(&rels[0]).exists() && root.join(&rels[1]).exists());
    // A fresh plan picks the changed files up again (they are still dead and old).
    let again = store.plan_cleanup(&short_cleanup()).unwrap();
    assert_eq!(again.candidates.len(), 2, "{:?}", again.candidates);
}

/// Issue 39, item 6: a plan applied one batch at a time, each batch on a handle of its own
/// (the store closed and opened again between them, as `gc apply` does), re-checks each batch
/// against the state of its own time (a file rewritten after the first batch is skipped), and
/// ends with the report and the pruning one call gives; the counts run on across the handles.
#[test]
fn a_plan_applied_one_batch_per_handle_rechecks_each_batch() {
    let lease = Duration::from_secs(1);
    let options = StoreOptions { attempt_lifetime_max: Some(lease), ..StoreOptions::default() };
    let Fixture { mut store, dir } = Fixture::new(lease);
    let root = store.staging_root().to_path_buf();
    store.declare_run(&run_spec("ds", "r", "s", &[("p", 1, 0)])).unwrap();
    let task = TaskKey::new("ds", "r", "p");
    for _ in 0..4 {
        valid_attempt(&store, &task, "s", 1, false);
    }
    let plan = store.plan_cleanup(&short_cleanup()).unwrap();
    let order: Vec<String> = plan.candidates.iter().map(|p| p.path.clone()).collect();
    assert_eq!(order.len(), 4);

    let seen = std::cell::RefCell::new(Vec::new());
    let hook = |p: manifestdb::Progress| seen.borrow_mut().push((p.files_done, p.files_total));
    let apply_options = ApplyOptions { batch_size: 1, ..execute() };
    let mut apply = store.start_cleanup_apply(plan.id, &apply_options).unwrap();
    let mut batches = 0;
    loop {
        let more = store.apply_cleanup_batch(&mut apply, &hook).unwrap();
        batches += 1;
        assert_eq!(apply.paths_taken(), (batches, 4));
        if batches == 1 {
            assert_eq!(apply.report().deleted, vec![order[0].clone()]);
            // After the first batch, before the third: rewritten, so no longer what was planned.
            std::fs::write(root.join(&order[2]), "rewritten after the plan").unwrap();
            set_mtime(&root.join(&order[2]), old());
        }
        store.close().unwrap();
        store = dir.open_with(&options).unwrap();
        if !more {
            break;
        }
    }
    assert_eq!(batches, 4);
    let report = store.finish_cleanup_apply(apply).unwrap();
    assert_eq!(report.plan, plan.id);
    assert_eq!(report.deleted, vec![order[0].clone(), order[1].clone(), order[3].clone()]);
    assert_eq!(
        report.skipped.iter().map(|s| (s.path.as_str(), &s.reason)).collect::<Vec<_>>(),
        [(order[2].as_str(), &SkipReason::Changed)]
    );
    assert_eq!(report.attempt_records_removed.len(), 3, "the attempts whose directories are gone: {:?}", report.attempt_records_removed);
    assert!(root.join(&order[2]).exists() && !root.join(&order[3]).exists());
    // The totals before the first batch, then one file more per batch, across the handles.
    assert_eq!(seen.into_inner(), [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]);
}

#[test]
fn dry_run_is_the_default_and_deletes_nothing() {
    let f = Fixture::new(Duration::from_secs(1));
    let store = &f.store;
    store.declare_run(&run_spec("ds", "r", "s", &[("p", 1, 0)])).unwrap();
    let (_, rel) = valid_attempt(store, &TaskKey::new("ds", "r", "p"), "s", 1, false);
    let plan = store.plan_cleanup(&short_cleanup()).unwrap();
    let report = store.apply_cleanup(plan.id, &ApplyOptions::default()).unwrap();
    assert_eq!(report.mode, RunMode::DryRun);
    assert_eq!(report.deleted, vec![rel.clone()]);
    assert!(f.root().join(&rel).exists());
    assert_eq!(report.attempt_records_removed.len(), 0, "its directory still holds the file");
    // Executed, the file goes, and then the attempt's record (its directory is gone).
    let report = store.apply_cleanup(plan.id, &execute()).unwrap();
    assert_eq!(report.deleted, vec![rel.clone()]);
    assert!(!f.root().join(&rel).exists());
    assert_eq!(report.attempt_records_removed, vec![TaskKey::new("ds", "r", "p").attempt(1)]);
    assert!(store.snapshot().unwrap().attempts(&TaskKey::new("ds", "r", "p")).unwrap().is_empty());
}

#[test]
fn rollback_inside_the_window_works_after_a_cleanup_and_outside_it_is_refused() {
    let f = Fixture::new(Duration::from_millis(10));
    let store = &f.store;
    let window = Duration::from_millis(1500);
    let policy = RetentionPolicy { keep_last: 1, rollback_window: window };
    for run in ["r1", "r2", "r3"] {
        publish_run(store, "ds", run, &["a"]);
    }
    // An attempt of a later run that is abandoned.
    store.declare_run(&run_spec("ds", "r4", "snap-r4", &[("a", 1, 0)])).unwrap();
    let lost = store.begin_attempt(&TaskKey::new("ds", "r4", "a")).unwrap();
    write_file(&lost.staging_dir, "part.csv", old());
    std::thread::sleep(Duration::from_millis(20));
    store.abandon_expired_attempts(RunMode::Execute).unwrap();

    assert!(store.expire_generations("ds", &policy, RunMode::Execute).unwrap().expired.is_empty());
    let plan = store.plan_cleanup(&short_cleanup()).unwrap();
    store.apply_cleanup(plan.id, &execute()).unwrap();
    let gen1 = content_of(store, "ds", 1);
    let RollbackOutcome::RolledBack(restored) = store.rollback("ds", 1, "ops", "inside the window").unwrap() else { panic!("refused") };
    let manifest = store.snapshot().unwrap().manifest("ds", Some(restored.number)).unwrap().unwrap();
    assert_eq!(content_of(store, "ds", restored.number), gen1);
    for p in &manifest.partitions {
        for file in &p.files {
            assert!(f.root().join(&p.staging_rel).join(&file.path).is_file(), "restored files survived the cleanup");
        }
    }

    std::thread::sleep(window + Duration::from_millis(100));
    let report = store.expire_generations("ds", &policy, RunMode::Execute).unwrap();
    assert_eq!(report.expired, vec![1, 2, 3]);
    assert_eq!(
        store.rollback("ds", 2, "ops", "outside the window").unwrap(),
        RollbackOutcome::Refused(RollbackRefusal::Expired { requested: 2, oldest_retained: 4 })
    );
    // Now r2's and r3's files are garbage; r1's are what generation 4 holds.
    let plan = store.plan_cleanup(&short_cleanup()).unwrap();
    let runs: BTreeSet<&str> = plan.candidates.iter().map(|p| p.path.split('/').nth(1).unwrap()).collect();
    assert_eq!(runs, BTreeSet::from(["r2", "r3"]));
    store.apply_cleanup(plan.id, &execute()).unwrap();
    for p in &manifest.partitions {
        for file in &p.files {
            assert!(f.root().join(&p.staging_rel).join(&file.path).is_file());
        }
    }
}

/// Runs `runs` runs of two partitions, each task with an abandoned attempt, an invalid one and
/// a valid one; every ten runs, with `retention`, applies the whole retention cycle. Returns
/// the store file's size after each tenth run.
fn churn(f: &Fixture, runs: usize, retention: bool) -> Vec<u64> {
    let store = &f.store;
    let policy = RetentionPolicy { keep_last: 3, rollback_window: Duration::ZERO };
    let mut sizes = Vec::new();
    for i in 0..runs {
        let run = format!("r{i}");
        let snapshot = format!("s{i}");
        store.declare_run(&run_spec("ds", &run, &snapshot, &[("a", 1, 0), ("b", 1, 0)])).unwrap();
        for partition in ["a", "b"] {
            let task = TaskKey::new("ds", run.as_str(), partition);
            let lost = store.begin_attempt(&task).unwrap();
            write_file(&lost.staging_dir, "part.csv", old());
            valid_attempt(store, &task, &snapshot, 1, false);
            valid_attempt(store, &task, &snapshot, 1, true);
        }
        assert!(matches!(store.publish("ds", &run, &PublishOptions::default()).unwrap(), PublishOutcome::Published(_)));
        if i % 10 == 9 {
            if retention {
                std::thread::sleep(Duration::from_millis(2));
                store.abandon_expired_attempts(RunMode::Execute).unwrap();
                store.expire_generations("ds", &policy, RunMode::Execute).unwrap();
                let plan = store.plan_cleanup(&short_cleanup()).unwrap();
                let report = store.apply_cleanup(plan.id, &execute()).unwrap();
                assert!(report.skipped.is_empty());
                assert!(store.snapshot().unwrap().history("ds").unwrap().len() <= 3);
            }
            if !on_postgres() {
                // The redb file's size; a PostgreSQL database's size is the server's business.
                sizes.push(std::fs::metadata(f.dir.location()).unwrap().len());
            }
        }
    }
    sizes
}

#[test]
fn store_size_stays_bounded_with_retention_applied() {
    let runs = 60;
    let f = Fixture::new(Duration::from_millis(1));
    let sizes = churn(&f, runs, true);
    eprintln!("store size every 10 runs with retention (bytes): {sizes:?}");
    // Only the accepted attempt of each run keeps its record; the others are gone.
    let snapshot = f.store.snapshot().unwrap();
    for i in 0..runs {
        let attempts = snapshot.attempts(&TaskKey::new("ds", format!("r{i}"), "a")).unwrap();
        assert_eq!(attempts.iter().map(|a| a.key.attempt).collect::<Vec<_>>(), vec![3], "run r{i}");
    }
    // Files left: the retained generations' only (3 generations x 2 partitions at most).
    let left = tree(&f.root()).values().filter(|v| v.is_some()).count();
    assert!(left <= 6, "{left} files left");
    // A generous bound: what remains per run is its run, task and accepted-attempt records
    // (a few hundred bytes); everything else (retries, generations, versions) is removed.
    if !on_postgres() {
        let last = *sizes.last().unwrap();
        assert!(last < 2 * 1024 * 1024, "store grew to {last} bytes");
    }
}

// ---------------------------------------------------------------------------------------
// The randomized test.

#[derive(Debug, Clone)]
enum Op {
    /// Declare a run over a subset of the partitions (bit mask).
    Declare(u8),
    /// Begin an attempt of some task of some unpublished run; its file may be dated in the
    /// future.
    Begin {
        run: usize,
        task: usize,
        future: bool,
    },
    /// Finish a running attempt, valid or not, and validate it (or leave it unvalidated).
    Finish {
        pick: usize,
        valid: bool,
        validate: bool,
    },
    Heartbeat(usize),
    /// Record abandoned every attempt past its (1 ms) lease.
    Abandon,
    /// A zombie: an abandoned attempt's worker writes another file and tries to finish.
    Zombie(usize),
    Publish(usize),
    Rollback(usize),
    Expire(u64),
    /// A file the store knows nothing about.
    Stray {
        nested: bool,
    },
    Cleanup {
        delete_unknown: bool,
    },
    /// Plan a cleanup now, apply it later (other operations may run in between).
    Plan,
    Apply {
        delete_unknown: bool,
    },
    /// Rewrite a file of an attempt that can no longer be used (so a pending plan is stale).
    Touch(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (1u8..8).prop_map(Op::Declare),
        5 => (0usize..8, 0usize..3, prop::bool::weighted(0.1)).prop_map(|(run, task, future)| Op::Begin { run, task, future }),
        4 => (0usize..16, prop::bool::weighted(0.8), prop::bool::weighted(0.85))
            .prop_map(|(pick, valid, validate)| Op::Finish { pick, valid, validate }),
        1 => (0usize..16).prop_map(Op::Heartbeat),
        2 => Just(Op::Abandon),
        1 => (0usize..16).prop_map(Op::Zombie),
        3 => (0usize..8).prop_map(Op::Publish),
        1 => (0usize..8).prop_map(Op::Rollback),
        1 => (1u64..4).prop_map(Op::Expire),
        1 => any::<bool>().prop_map(|nested| Op::Stray { nested }),
        2 => any::<bool>().prop_map(|delete_unknown| Op::Cleanup { delete_unknown }),
        2 => Just(Op::Plan),
        2 => any::<bool>().prop_map(|delete_unknown| Op::Apply { delete_unknown }),
        2 => (0usize..16).prop_map(Op::Touch),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelState {
    Running,
    Finished,
    Valid,
    Invalid,
    Abandoned,
}

#[derive(Debug)]
struct ModelAttempt {
    task: TaskKey,
    number: u32,
    dir: PathBuf,
    state: ModelState,
    /// File name -> content hash.
    files: BTreeMap<String, u32>,
}

#[derive(Debug)]
struct ModelRun {
    name: String,
    partitions: Vec<String>,
    published: bool,
}

/// Totals over one case, for the report.
#[derive(Debug, Default)]
struct Figures {
    planned: u64,
    unknown_planned: u64,
    deleted: u64,
    skipped: u64,
}

/// Totals over every case: candidates planned, unknown files planned, deleted, skipped.
static TOTALS: [AtomicU64; 4] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

const PARTITIONS: [&str; 3] = ["p0", "p1", "p2"];

struct Sim {
    f: Fixture,
    runs: Vec<ModelRun>,
    attempts: Vec<ModelAttempt>,
    /// Stray files: path -> content hash.
    strays: BTreeMap<PathBuf, u32>,
    /// Files dated in the future: never deleted.
    future: BTreeSet<PathBuf>,
    figures: Figures,
    strays_made: u32,
    /// A plan made and not yet applied.
    pending: Option<manifestdb::CleanupPlan>,
}

impl Sim {
    fn new() -> Sim {
        Sim {
            f: Fixture::new(Duration::from_millis(1)),
            runs: Vec::new(),
            attempts: Vec::new(),
            strays: BTreeMap::new(),
            future: BTreeSet::new(),
            figures: Figures::default(),
            strays_made: 0,
            pending: None,
        }
    }

    fn store(&self) -> &Store {
        &self.f.store
    }

    fn cleanup_options() -> CleanupOptions {
        CleanupOptions { age_threshold: Duration::from_millis(50), force_short_threshold: false }
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Declare(mask) => {
                let name = format!("r{}", self.runs.len());
                let partitions: Vec<&str> = PARTITIONS.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, p)| *p).collect();
                let tasks: Vec<(&str, u64, i64)> = partitions.iter().map(|p| (*p, 1, 0)).collect();
                let mut spec = run_spec("ds", &name, &format!("snap-{name}"), &tasks);
                spec.tasks.iter_mut().for_each(|t| t.expected_total = None);
                self.store().declare_run(&spec).unwrap();
                self.runs.push(ModelRun { name, partitions: partitions.iter().map(|p| (*p).to_owned()).collect(), published: false });
            }
            Op::Begin { run, task, future } => {
                let Some(run) = self.runs.get(run % self.runs.len().max(1)) else { return };
                if run.published {
                    return;
                }
                let key = TaskKey::new("ds", run.name.as_str(), run.partitions[task % run.partitions.len()].as_str());
                let ticket = self.store().begin_attempt(&key).unwrap();
                let when = if *future { SystemTime::now() + HOUR } else { old() };
                let h = write_file(&ticket.staging_dir, "part.csv", when);
                if *future {
                    self.future.insert(ticket.staging_dir.join("part.csv"));
                }
                self.attempts.push(ModelAttempt {
                    task: key,
                    number: ticket.key.attempt,
                    dir: ticket.staging_dir,
                    state: ModelState::Running,
                    files: BTreeMap::from([("part.csv".to_owned(), h)]),
                });
            }
            Op::Finish { pick, valid, validate } => {
                let running: Vec<usize> = (0..self.attempts.len()).filter(|i| self.attempts[*i].state == ModelState::Running).collect();
                let Some(&i) = running.get(pick % running.len().max(1)) else { return };
                let a = &self.attempts[i];
                let key = a.task.attempt(a.number);
                let file = describe_file(&a.dir, "part.csv").unwrap();
                let rows = if *valid { 1 } else { 2 };
                let snapshot = format!("snap-{}", a.task.run);
                let candidate =
                    Candidate { snapshot, rows: Some(rows), total: None, digest: Some(a.task.partition.clone()), files: vec![file] };
                self.store().finish_attempt(&key, &candidate).unwrap();
                let mut state = ModelState::Finished;
                if *validate {
                    let verdict = self.store().validate_attempt(&key, FileCheck::Size).unwrap();
                    assert_eq!(verdict.is_valid(), *valid);
                    state = if *valid { ModelState::Valid } else { ModelState::Invalid };
                }
                self.attempts[i].state = state;
            }
            Op::Heartbeat(pick) => {
                let Some(a) = self.attempts.get(pick % self.attempts.len().max(1)) else { return };
                let result = self.store().heartbeat(&a.task.attempt(a.number));
                match a.state {
                    ModelState::Running => assert!(result.is_ok(), "{result:?}"),
                    ModelState::Abandoned => {
                        assert!(matches!(result, Err(Error::AttemptAbandoned { .. } | Error::UnknownAttempt { .. })), "{result:?}")
                    }
                    _ => assert!(result.is_err()),
                }
            }
            Op::Abandon => {
                std::thread::sleep(Duration::from_millis(2));
                let abandoned = self.store().abandon_expired_attempts(RunMode::Execute).unwrap();
                for key in abandoned {
                    let a = self.attempts.iter_mut().find(|a| a.task == key.task && a.number == key.attempt).expect("known attempt");
                    assert_eq!(a.state, ModelState::Running, "only running attempts are abandoned");
                    a.state = ModelState::Abandoned;
                }
                assert!(self.attempts.iter().all(|a| a.state != ModelState::Running), "every lease has run out");
            }
            Op::Zombie(pick) => {
                let abandoned: Vec<usize> = (0..self.attempts.len()).filter(|i| self.attempts[*i].state == ModelState::Abandoned).collect();
                let Some(&i) = abandoned.get(pick % abandoned.len().max(1)) else { return };
                let a = &mut self.attempts[i];
                if !a.dir.is_dir() {
                    return; // Cleaned up already: a zombie would fail to write.
                }
                let name = format!("late-{}.csv", a.files.len());
                let h = write_file(&a.dir, &name, old());
                a.files.insert(name, h);
                let file = describe_file(&a.dir, "part.csv");
                if let Ok(file) = file {
                    let candidate = Candidate {
                        snapshot: format!("snap-{}", a.task.run),
                        rows: Some(1),
                        total: None,
                        digest: Some(a.task.partition.clone()),
                        files: vec![file],
                    };
                    let result = self.f.store.finish_attempt(&a.task.attempt(a.number), &candidate);
                    assert!(matches!(result, Err(Error::AttemptAbandoned { .. } | Error::UnknownAttempt { .. })), "{result:?}");
                }
            }
            Op::Publish(pick) => {
                let Some(run) = self.runs.get(pick % self.runs.len().max(1)) else { return };
                let name = run.name.clone();
                match self.store().publish("ds", &name, &PublishOptions::default()) {
                    Ok(PublishOutcome::Published(_)) => self.runs.iter_mut().find(|r| r.name == name).unwrap().published = true,
                    Ok(_) => {}
                    Err(Error::GenerationExpired { .. }) => assert!(run.published),
                    Err(e) => panic!("publish failed: {e}"),
                }
            }
            Op::Rollback(pick) => {
                let history = self.store().snapshot().unwrap().history("ds").unwrap();
                let Some(target) = history.get(pick % history.len().max(1)) else { return };
                let expected = content_of(self.store(), "ds", target.number);
                match self.store().rollback("ds", target.number, "prop", "random").unwrap() {
                    RollbackOutcome::RolledBack(g) => assert_eq!(content_of(self.store(), "ds", g.number), expected),
                    RollbackOutcome::Refused(RollbackRefusal::AlreadyCurrent { .. }) => {}
                    other => panic!("rollback to a retained generation refused: {other:?}"),
                }
            }
            Op::Expire(keep_last) => {
                let policy = RetentionPolicy { keep_last: *keep_last, rollback_window: Duration::ZERO };
                let report = self.store().expire_generations("ds", &policy, RunMode::Execute).unwrap();
                let history = self.store().snapshot().unwrap().history("ds").unwrap();
                assert!(history.len() as u64 <= *keep_last);
                for expired in report.expired {
                    assert!(matches!(
                        self.store().rollback("ds", expired, "prop", "expired").unwrap(),
                        RollbackOutcome::Refused(RollbackRefusal::Expired { .. })
                    ));
                }
            }
            Op::Stray { nested } => {
                let dir = if *nested { self.f.root().join("ds").join("loose") } else { self.f.root() };
                let name = format!("stray-{}", self.strays_made);
                self.strays_made += 1;
                let h = write_file(&dir, &name, old());
                self.strays.insert(dir.join(name), h);
            }
            Op::Cleanup { delete_unknown } => {
                self.apply(&Op::Plan);
                self.apply(&Op::Apply { delete_unknown: *delete_unknown });
            }
            Op::Plan => {
                let plan = self.store().plan_cleanup(&Sim::cleanup_options()).unwrap();
                self.figures.planned += plan.candidates.len() as u64;
                self.figures.unknown_planned += plan.unknown.len() as u64;
                self.pending = Some(plan);
            }
            Op::Apply { delete_unknown } => {
                if let Some(plan) = self.pending.take() {
                    self.apply_plan(&plan, *delete_unknown);
                }
            }
            Op::Touch(pick) => {
                let dead: Vec<usize> = (0..self.attempts.len())
                    .filter(|i| matches!(self.attempts[*i].state, ModelState::Invalid | ModelState::Abandoned))
                    .collect();
                let Some(&i) = dead.get(pick % dead.len().max(1)) else { return };
                let a = &mut self.attempts[i];
                let Some(name) = a.files.keys().find(|name| a.dir.join(name).is_file()).cloned() else { return };
                let h = write_file(&a.dir, &name, old() + Duration::from_secs(1));
                let path = a.dir.join(&name);
                a.files.insert(name, h);
                // It is no longer dated in the future.
                self.future.remove(&path);
            }
        }
    }

    fn cleanup(&mut self, delete_unknown: bool) {
        self.apply(&Op::Cleanup { delete_unknown });
    }

    fn apply_plan(&mut self, plan: &manifestdb::CleanupPlan, delete_unknown: bool) {
        let protected = self.protected();
        let report = self.store().apply_cleanup(plan.id, &ApplyOptions { mode: RunMode::Execute, delete_unknown, batch_size: 3 }).unwrap();
        self.figures.deleted += report.deleted.len() as u64;
        self.figures.skipped += report.skipped.iter().filter(|s| s.reason != SkipReason::UnknownNotRequested).count() as u64;
        for (path, h) in &protected {
            let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("protected file {} is gone: {e}", path.display()));
            assert_eq!(hash(&bytes), *h, "protected file {} changed", path.display());
        }
        if !delete_unknown {
            for (path, h) in &self.strays {
                assert_eq!(hash(&std::fs::read(path).expect("unknown files stay without the flag")), *h);
            }
        }
        for path in &self.future {
            assert!(path.exists(), "a future-dated file was deleted: {}", path.display());
        }
        self.strays.retain(|path, _| path.exists());
    }

    /// Files that must survive any cleanup now: those of every retained generation, and of
    /// every attempt that may still run or still be published. Computed from the model's
    /// attempt states and the store's manifests, with the content hashes the model recorded.
    fn protected(&self) -> BTreeMap<PathBuf, u32> {
        let root = self.f.root();
        let hashes: HashMap<PathBuf, u32> =
            self.attempts.iter().flat_map(|a| a.files.iter().map(|(name, h)| (a.dir.join(name), *h))).collect();
        let mut out = BTreeMap::new();
        let snapshot = self.store().snapshot().unwrap();
        for generation in snapshot.history("ds").unwrap() {
            for p in snapshot.manifest("ds", Some(generation.number)).unwrap().unwrap().partitions {
                for file in p.files {
                    let path = root.join(&p.staging_rel).join(&file.path);
                    out.insert(path.clone(), hashes[&path]);
                }
            }
        }
        for a in &self.attempts {
            let published = self.runs.iter().any(|r| r.name == a.task.run && r.published);
            let live = match a.state {
                ModelState::Running => true,
                ModelState::Finished | ModelState::Valid => !published,
                ModelState::Invalid | ModelState::Abandoned => false,
            };
            if live {
                out.extend(a.files.iter().map(|(name, h)| (a.dir.join(name), *h)));
            }
        }
        out
    }

    /// Ends the case: every lease runs out, history shrinks to the current generation, and
    /// two cleanups later exactly the protected and future-dated files remain.
    fn finish(mut self) -> Figures {
        self.apply(&Op::Abandon);
        self.apply(&Op::Expire(1));
        self.cleanup(true);
        self.cleanup(true);
        let mut expected: BTreeSet<PathBuf> = self.protected().into_keys().collect();
        expected.extend(self.future.iter().cloned());
        let left: BTreeSet<PathBuf> = tree(&self.f.root()).into_iter().filter(|(_, h)| h.is_some()).map(|(p, _)| p).collect();
        assert_eq!(left, expected, "every orphan past the threshold is removed, nothing else");
        self.figures
    }
}

proptest! {
    // RETENTION_CASES=500 for a longer run.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("RETENTION_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        max_shrink_iters: 50,
        ..ProptestConfig::default()
    })]

    #[test]
    fn cleanup_never_deletes_live_files_and_eventually_removes_every_orphan(ops in prop::collection::vec(op(), 1..60)) {
        let mut sim = Sim::new();
        sim.apply(&Op::Declare(0b111));
        for op in &ops {
            sim.apply(op);
        }
        let figures = sim.finish();
        for (slot, v) in TOTALS.iter().zip([figures.planned, figures.unknown_planned, figures.deleted, figures.skipped]) {
            slot.fetch_add(v, Ordering::Relaxed);
        }
        let [planned, unknown, deleted, skipped] = [0, 1, 2, 3].map(|i| TOTALS[i].load(Ordering::Relaxed));
        eprintln!("cleanup totals so far: {planned} candidates and {unknown} unknown files planned, {deleted} deleted, {skipped} skipped");
    }
}

#[test]
fn keep_reasons_are_reported() {
    let f = Fixture::new(Duration::from_millis(1));
    let store = &f.store;
    store.declare_run(&run_spec("ds", "r", "s", &[("p", 1, 0)])).unwrap();
    let task = TaskKey::new("ds", "r", "p");
    let running = store.begin_attempt(&task).unwrap();
    write_file(&running.staging_dir, "x", old());
    valid_attempt(store, &task, "s", 1, true);
    let plan = store.plan_cleanup(&short_cleanup()).unwrap();
    assert!(plan.candidates.is_empty());
    let kept: HashMap<KeepReason, u64> = plan.kept.iter().copied().collect();
    assert_eq!(kept.get(&KeepReason::MayBeRunning), Some(&1), "running attempts are kept even past their lease until abandoned");
    assert_eq!(kept.get(&KeepReason::ValidUnpublished), Some(&1));
}

#[test]
fn a_handle_opened_with_a_shorter_lifetime_uses_the_longest_recorded_one() {
    let dir = TestDir::new();
    let (db, staging) = (dir.location(), dir.staging());
    let six_hours = std::time::Duration::from_secs(6 * 3600);
    let scheduler =
        Store::open_with_options(&db, &staging, &StoreOptions { attempt_lifetime_max: Some(six_hours), ..StoreOptions::default() })
            .unwrap();
    assert_eq!(scheduler.attempt_lifetime_max_ms(), 6 * 3600 * 1000);
    drop(scheduler);
    // An operator's process with the default (1 hour) lifetime: it must not plan a cleanup
    // whose threshold lies inside the scheduler's 6-hour lease.
    let operator = Store::open(&db, &staging).unwrap();
    assert_eq!(operator.attempt_lifetime_max_ms(), 6 * 3600 * 1000);
    let options = CleanupOptions { age_threshold: std::time::Duration::from_secs(2 * 3600), ..CleanupOptions::default() };
    assert!(matches!(operator.plan_cleanup(&options), Err(Error::CleanupThresholdTooShort { .. })));
}

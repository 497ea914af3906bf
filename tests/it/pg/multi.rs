//! Several coordinator processes against one PostgreSQL store.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use manifestdb::TaskKey;

use super::proxy::{Fault, Proxy};
use super::{PgEnv, Proc, acks, assert_acknowledged_kept, prepare_run};

const ANSWER: Duration = Duration::from_secs(120);

/// The `host:port` of a URL `postgres://user@host:port/db`.
pub fn host_port(url: &str) -> String {
    let rest = url.split_once('@').map_or(url, |(_, rest)| rest);
    rest.split_once('/').map_or(rest, |(hp, _)| hp).to_owned()
}

#[test]
fn four_processes_racing_to_publish_one_run_publish_one_generation_and_are_all_told_it() {
    let Some(env) = PgEnv::new() else { return };
    let store = env.open();
    let mut procs: Vec<Proc> = (0..4).map(|_| env.spawn("commands", env.url(), &[])).collect();
    for p in &mut procs {
        p.ready();
    }
    let mut told = Vec::new();
    for round in 1..=5 {
        let run = format!("r{round}");
        prepare_run(&store, "race", &run, &[("p=a", 2, 10 + round), ("p=b", 3, 20 + round)]);
        // The four commands go out back to back: the processes race.
        for p in &mut procs {
            p.send(&format!("publish race {run}"));
        }
        let answers: Vec<String> = procs.iter_mut().map(|p| p.next(ANSWER)).collect();
        let published = answers.iter().filter(|a| a.starts_with("published ")).count();
        assert_eq!(published, 1, "round {round}: exactly one process publishes: {answers:?}");
        let numbers: BTreeSet<u64> = answers
            .iter()
            .map(|a| match a.split_once(' ') {
                Some(("published" | "already", n)) => n.parse().expect("number"),
                _ => panic!("round {round}: {a}"),
            })
            .collect();
        assert_eq!(numbers.len(), 1, "round {round}: every caller is told the same generation: {answers:?}");
        let number = *numbers.first().unwrap();
        assert_eq!(number, round as u64, "one generation per run, in order");
        told.push((number, run));
    }
    assert_acknowledged_kept(&store, "race", &told);
    assert_eq!(store.snapshot().unwrap().history("race").unwrap().len(), 5);
    for p in procs {
        let (status, _) = p.finish();
        assert!(status.success(), "{status}");
    }
    env.assert_verifies_clean();
}

#[test]
fn eight_processes_beginning_attempts_of_one_task_get_distinct_numbers() {
    const EACH: u32 = 25;
    let Some(env) = PgEnv::new() else { return };
    let store = env.open();
    store.declare_run(&crate::support::run_spec("many", "r1", "s", &[("p=1", 1, 1)])).unwrap();
    let mut procs: Vec<Proc> = (0..8).map(|_| env.spawn("commands", env.url(), &[])).collect();
    for p in &mut procs {
        p.ready();
    }
    for p in &mut procs {
        p.send(&format!("begin many r1 p=1 {EACH}"));
    }
    let mut numbers = Vec::new();
    for p in &mut procs {
        let answer = p.next(ANSWER);
        let list = answer.strip_prefix("attempts ").unwrap_or_else(|| panic!("{answer}"));
        let mine: Vec<u32> = list.split(',').map(|n| n.parse().unwrap()).collect();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "one process's attempts are increasing: {mine:?}");
        numbers.extend(mine);
    }
    let distinct: BTreeSet<u32> = numbers.iter().copied().collect();
    assert_eq!(distinct.len(), numbers.len(), "no attempt number given twice");
    assert_eq!(distinct, (1..=8 * EACH).collect::<BTreeSet<u32>>(), "numbers 1..=200 without gaps");
    let task = TaskKey::new("many", "r1", "p=1");
    let stored = store.snapshot().unwrap().attempts(&task).unwrap();
    assert_eq!(stored.len(), (8 * EACH) as usize);
    let dirs: BTreeSet<_> = (1..=8 * EACH).map(|n| env.staging_root().join(format!("many/r1/p=1/@attempt-{n}"))).collect();
    assert!(dirs.iter().all(|d| d.is_dir()), "every attempt has its own staging directory");
    for p in procs {
        p.finish();
    }
}

/// Polls until the database shows a session that is idle inside a transaction that has written
/// (has a transaction id): a publish waiting for its COMMIT.
fn wait_for_open_write_transaction(env: &PgEnv) -> bool {
    let mut client = env.db.client();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let row = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND state = 'idle in transaction' AND backend_xid IS NOT NULL",
                &[],
            )
            .expect("pg_stat_activity");
        if row.get::<_, i64>(0) > 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn publishes_of_two_datasets_do_not_wait_for_each_other() {
    let Some(env) = PgEnv::new() else { return };
    let store = env.open();
    prepare_run(&store, "alpha", "r1", &[("p=1", 2, 10), ("p=2", 2, 20)]);
    prepare_run(&store, "beta", "r1", &[("p=1", 3, 30)]);
    // Process A reaches the server through a proxy that holds every COMMIT: its publish does its
    // writes and then waits, its transaction open (its locks held), until released.
    let proxy = Proxy::start(&host_port(env.url()));
    let mut a = env.spawn("commands", &env.db.url_via(&proxy.address()), &[]);
    let mut b = env.spawn("commands", env.url(), &[]);
    a.ready();
    b.ready();
    proxy.arm(Fault::HoldCommits);
    a.send("publish alpha r1");
    let deadline = Instant::now() + Duration::from_secs(60);
    while proxy.held() == 0 {
        assert!(Instant::now() < deadline, "A's publish never sent its COMMIT");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(wait_for_open_write_transaction(&env), "A's publish holds an open write transaction at its COMMIT");
    // Meanwhile B publishes the other dataset: it completes while A's transaction is still open.
    b.send("publish beta r1");
    let answer = b.next(ANSWER);
    assert_eq!(answer, "published 1", "B's publish of beta while A's publish of alpha is open");
    let (held, said) = (proxy.held(), a.drain().to_vec());
    assert!(held >= 1 && said == ["ready"], "A was still waiting for its COMMIT when B was done: {held} held, A said {said:?}");
    proxy.release();
    assert_eq!(a.next(ANSWER), "published 1", "A's publish completes once released");
    let snapshot = store.snapshot().unwrap();
    assert_eq!(snapshot.current("alpha").unwrap().map(|g| g.run), Some("r1".to_owned()));
    assert_eq!(snapshot.current("beta").unwrap().map(|g| g.run), Some("r1".to_owned()));
    drop(snapshot);
    a.finish();
    b.finish();
    env.assert_verifies_clean();
}

#[test]
fn a_reader_process_never_sees_a_mixed_generation() {
    const PARTS: u64 = 4;
    let Some(env) = PgEnv::new() else { return };
    let vars = |runs: u64| vec![("DATASET", "mixed".to_owned()), ("PARTS", PARTS.to_string()), ("RUNS", runs.to_string())];
    // The first generation exists before the reader starts.
    let mut writer = env.spawn("replace_all", env.url(), &vars(1));
    writer.ready();
    assert_eq!(writer.next(ANSWER), "ACK 1 w-1");
    writer.next(ANSWER);
    drop(writer);
    let mut reader = env.spawn("reader", env.url(), &vars(0));
    reader.ready();
    // Runs w-2 to w-30, each replacing every partition.
    let mut more = vars(30);
    more.push(("FROM", "2".to_owned()));
    let mut writer = env.spawn("replace_all", env.url(), &more);
    writer.ready();
    let (status, lines) = writer.finish();
    assert!(status.success(), "writer: {status} {lines:?}");
    assert_eq!(acks(&lines).len(), 29, "{lines:?}");
    let (status, lines) = reader.finish();
    assert!(status.success(), "reader: {status}");
    let summary = lines.iter().find(|l| l.starts_with("reads ")).unwrap_or_else(|| panic!("{lines:?}"));
    let words: Vec<u64> = summary.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let (reads, mixed, generations) = (words[0], words[1], words[2]);
    println!("reader process: {reads} reads, {mixed} mixed, {generations} generations seen");
    assert_eq!(mixed, 0, "{lines:?}");
    assert!(reads > 0 && generations >= 2, "the reader read while generations changed: {summary}");
    env.assert_verifies_clean();
}

/// Leases and fencing across coordinators: two handles on one database and staging root, each
/// with its own connections (two coordinators; on two hosts they would share only these). An
/// attempt whose lease ran out, abandoned through B, can neither finish nor renew its lease
/// through A; cleanup planned and applied through B deletes the abandoned attempt's output and
/// never the output of an attempt that A keeps alive with heartbeats, although both outputs
/// are dated an hour back; the live attempt then finishes and validates through A.
#[test]
fn an_attempt_abandoned_through_one_coordinator_is_fenced_on_another_and_cleanup_spares_a_live_one() {
    use manifestdb::{ApplyOptions, CleanupOptions, Error, FileCheck, RunMode, Store, StoreOptions};

    use crate::support::{PgDatabase, candidate, postgres_admin, run_spec, write_rows};

    let Some(admin) = postgres_admin() else { return };
    // Made here rather than by `PgEnv::new`, whose first open records the default lease.
    let env = PgEnv { staging: tempfile::tempdir().expect("tempdir"), db: PgDatabase::create(&admin) };
    // Long enough that a heartbeat delayed by a loaded server still renews it in time.
    let lease = Duration::from_secs(3);
    let options = StoreOptions { attempt_lifetime_max: Some(lease), ..StoreOptions::default() };
    let a = Store::open_with_options(env.url(), env.staging_root(), &options).expect("coordinator A");
    let b = Store::open_with_options(env.url(), env.staging_root(), &options).expect("coordinator B");
    assert_eq!(b.attempt_lifetime_max_ms(), 3000);
    a.declare_run(&run_spec("ds", "r1", "snap@1", &[("p=1", 2, 10), ("p=2", 2, 10)])).expect("declare");
    let silent = a.begin_attempt(&TaskKey::new("ds", "r1", "p=1")).expect("begin");
    let live = a.begin_attempt(&TaskKey::new("ds", "r1", "p=2")).expect("begin");
    let silent_file = write_rows(&silent.staging_dir, 2, 10);
    let live_file = write_rows(&live.staging_dir, 2, 10);
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    for path in [silent.staging_dir.join(&silent_file.path), live.staging_dir.join(&live_file.path)] {
        std::fs::File::options().write(true).open(&path).and_then(|f| f.set_modified(an_hour_ago)).expect("backdate");
    }
    // A renews `live` past the lease; `silent` sends nothing.
    let until = Instant::now() + lease + Duration::from_secs(1);
    while Instant::now() < until {
        a.heartbeat(&live.key).expect("heartbeat through A");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(b.abandon_expired_attempts(RunMode::Execute).expect("abandon through B"), vec![silent.key.clone()]);
    // The fence B recorded holds on A.
    let finished = a.finish_attempt(&silent.key, &candidate("snap@1", 2, 10, silent_file.clone()));
    assert!(matches!(finished, Err(Error::AttemptAbandoned { .. })), "finish through A: {finished:?}");
    let renewed = a.heartbeat(&silent.key);
    assert!(matches!(renewed, Err(Error::AttemptAbandoned { .. })), "heartbeat through A: {renewed:?}");
    // Cleanup through B, while A keeps the live attempt's lease.
    a.heartbeat(&live.key).expect("heartbeat through A");
    let plan = b.plan_cleanup(&CleanupOptions { age_threshold: Duration::from_secs(4), force_short_threshold: false }).expect("plan");
    let report = b.apply_cleanup(plan.id, &ApplyOptions { mode: RunMode::Execute, ..ApplyOptions::default() }).expect("apply");
    assert!(!silent.staging_dir.join(&silent_file.path).exists(), "the abandoned attempt's output is deleted: {report:?}");
    assert!(live.staging_dir.join(&live_file.path).exists(), "the live attempt's output stays: {report:?}");
    a.finish_attempt(&live.key, &candidate("snap@1", 2, 10, live_file)).expect("finish through A");
    assert!(a.validate_attempt(&live.key, FileCheck::SizeAndChecksum).expect("validate through A").is_valid());
    env.assert_verifies_clean();
}

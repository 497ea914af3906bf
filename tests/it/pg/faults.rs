//! Faults between coordinators and the PostgreSQL server, each ending with nothing acknowledged
//! lost and the store verifying clean: SIGKILLed coordinator processes, an immediate restart of
//! the server under load (on a server of the test's own), and a TCP proxy that drops the reply to
//! COMMIT or stops forwarding.
//!
//! Default rounds are short; `MANIFESTDB_PG_TORTURE=1` runs ten times as many.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use manifestdb::{PublishOptions, PublishOutcome, Store};

use super::multi::host_port;
use super::proxy::{Fault, Proxy};
use super::{PgEnv, Proc, acks, assert_acknowledged_kept, free_port, prepare_run, published, torture};
use crate::support::postgres_admin;

struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        Rng(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

fn publish_loop(env: &PgEnv, url: &str, dataset: &str, prefix: &str, runs: Option<u64>) -> Proc {
    let mut vars = vec![("DATASET", dataset.to_owned()), ("PREFIX", prefix.to_owned())];
    if let Some(runs) = runs {
        vars.push(("RUNS", runs.to_string()));
    }
    env.spawn("publish_loop", url, &vars)
}

#[test]
fn sigkilled_coordinators_lose_nothing_acknowledged_and_leave_a_store_that_verifies() {
    let Some(env) = PgEnv::new() else { return };
    let rounds = 6 * torture();
    let seed = Rng::seeded();
    println!("seed {}", seed.0);
    let mut rng = seed;
    let mut acknowledged = Vec::new();
    let mut kills = 0;
    for round in 0..rounds {
        // Two coordinators publish into the same dataset at once; each is killed at its own
        // random moment, mid-declare, mid-attempt or mid-publish.
        let mut procs: Vec<Proc> = (0..2).map(|c| publish_loop(&env, env.url(), "killed", &format!("k{round}c{c}"), None)).collect();
        for p in &mut procs {
            p.ready();
        }
        let started = Instant::now();
        let mut delays: Vec<Duration> = (0..2).map(|_| Duration::from_millis(150 + rng.below(2500))).collect();
        delays.sort();
        for (p, delay) in procs.into_iter().zip(delays) {
            std::thread::sleep(delay.saturating_sub(started.elapsed()));
            acknowledged.extend(acks(&p.kill()));
            kills += 1;
        }
    }
    // A coordinator started after the kills works on the same store.
    let (status, lines) = publish_loop(&env, env.url(), "killed", "after", Some(2)).finish();
    assert!(status.success(), "{status}: {lines:?}");
    acknowledged.extend(acks(&lines));
    let store = env.open();
    assert_acknowledged_kept(&store, "killed", &acknowledged);
    println!("pg kills survived: {kills} kills, {} acknowledged publishes, 0 lost", acknowledged.len());
    assert!(acknowledged.len() >= 2, "the coordinators published between kills");
    drop(store);
    env.assert_verifies_clean();
}

/// A PostgreSQL server of the test's own (`scripts/pg-server` on a free port and a private
/// directory), stopped and deleted when dropped. Never the shared server: this one gets
/// restarted.
struct OwnServer {
    dir: PathBuf,
    port: u16,
}

impl OwnServer {
    fn script() -> PathBuf {
        crate::support::repo_root().join("scripts/pg-server")
    }

    fn command(&self, verb: &str) -> std::process::Output {
        Command::new("bash")
            .arg(OwnServer::script())
            .arg(verb)
            .env("MANIFESTDB_PG_DIR", &self.dir)
            .env("MANIFESTDB_PG_PORT", self.port.to_string())
            .output()
            .expect("run scripts/pg-server")
    }

    fn start() -> OwnServer {
        let server = OwnServer { dir: PathBuf::from(format!("/tmp/pg-14t-{}-{}", std::process::id(), free_port())), port: free_port() };
        let out = server.command("start");
        assert!(
            out.status.success(),
            "scripts/pg-server start: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        server
    }

    fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn restart_immediate(&self) {
        let out = self.command("restart-immediate");
        assert!(out.status.success(), "pg_ctl restart -m immediate: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.command("stop");
    }
}

/// Waits until the coordinators have acknowledged `more` publishes beyond `from`.
fn wait_for_acks(procs: &mut [Proc], from: usize, more: usize, what: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let total: usize = procs.iter_mut().map(|p| acks(p.drain()).len()).sum();
        if total >= from + more {
            return total;
        }
        assert!(Instant::now() < deadline, "no progress {what}: {total} acknowledged publishes");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_immediate_restart_of_the_server_under_load_loses_nothing_acknowledged() {
    // Needs the PostgreSQL binaries the shared server runs on; the restarted server is our own.
    if postgres_admin().is_none() {
        return;
    }
    let server = OwnServer::start();
    let env = PgEnv::on(&server.admin_url());
    let mut procs: Vec<Proc> = (0..2).map(|c| publish_loop(&env, env.url(), "restarted", &format!("c{c}"), None)).collect();
    for p in &mut procs {
        p.ready();
    }
    let restarts = 2 * torture();
    let mut total = 0;
    for restart in 0..restarts {
        total = wait_for_acks(&mut procs, total, 3, &format!("before restart {restart}"));
        server.restart_immediate();
    }
    // The coordinators carry on after the last restart: each retries its step on a reopened store.
    total = wait_for_acks(&mut procs, total, 4, "after the last restart");
    let mut acknowledged = Vec::new();
    for p in procs {
        acknowledged.extend(acks(&p.kill()));
    }
    assert!(acknowledged.len() >= total);
    let store = env.open();
    assert_acknowledged_kept(&store, "restarted", &acknowledged);
    println!("pg immediate restarts survived: {restarts} restarts, {} acknowledged publishes, 0 lost", acknowledged.len());
    drop(store);
    env.assert_verifies_clean();
}

/// The generations of `run` in `dataset`, as the server has them.
fn truth(store: &Store, dataset: &str, run: &str) -> Vec<u64> {
    store.snapshot().unwrap().history(dataset).unwrap().into_iter().filter(|g| g.run == run).map(|g| g.number).collect()
}

/// Opens the store through `url`, retrying for a while (a proxy may have cut the connection).
fn open_via(url: &str, staging: &Path) -> Store {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match Store::open(url, staging) {
            Ok(store) => return store,
            Err(e) => {
                assert!(Instant::now() < deadline, "open through the proxy: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// What one faulty publish told its caller.
#[derive(Default, Debug)]
struct Tally {
    fired: u64,
    truth: u64,
    errors: u64,
}

/// Checks a publish's outcome against the server and settles it by the caller's retry: an error
/// or the truth, never a success the server does not have, and one generation for the run.
#[track_caller]
fn settle(result: manifestdb::Result<PublishOutcome>, via: &str, env: &PgEnv, dataset: &str, run: &str, tally: &mut Tally) -> bool {
    let direct = env.open();
    match result {
        Ok(PublishOutcome::Published(g) | PublishOutcome::AlreadyPublished(g)) => {
            tally.truth += 1;
            assert_eq!(g.run, run);
            assert_eq!(truth(&direct, dataset, run), vec![g.number], "the caller was told generation {} of {run}", g.number);
        }
        Ok(PublishOutcome::Refused(r)) => panic!("refused: {r}"),
        Err(e) => {
            tally.errors += 1;
            eprintln!("publish of {run} through the faulty proxy: error (the caller retries): {e}");
        }
    }
    let errored = tally.errors > 0;
    // The caller's retry, on a fresh handle through the (now healthy) proxy, settles it.
    let retry = open_via(via, &env.staging_root());
    let g = published(&retry, dataset, run);
    assert_eq!(truth(&direct, dataset, run), vec![g.number], "after the retry: one generation of {run}");
    match retry.publish(dataset, run, &PublishOptions::default()).unwrap() {
        PublishOutcome::AlreadyPublished(again) => assert_eq!(again.number, g.number),
        other => panic!("a second retry of {run}: {other:?}"),
    }
    errored
}

#[test]
fn a_lost_reply_to_commit_is_an_error_or_the_truth_and_the_retry_settles_it() {
    let Some(env) = PgEnv::new() else { return };
    let proxy = Proxy::start(&host_port(env.url()));
    let via = env.db.url_via(&proxy.address());
    let direct = env.open();
    let mut coordinator = open_via(&via, &env.staging_root());
    let mut tally = Tally::default();
    for round in 1..=3 * torture() {
        // The reply to the first, then the second COMMIT of the publish call is lost (if the call
        // has a second one; a retry inside the library counts too).
        for k in 1..=2 {
            let run = format!("r{round}-{k}");
            prepare_run(&direct, "lost", &run, &[("p=1", 2, round as i64), ("p=2", 1, k)]);
            let fired_before = proxy.fired();
            proxy.arm(Fault::DropCommitReply(k as u64));
            let result = coordinator.publish("lost", &run, &PublishOptions::default());
            proxy.disarm();
            tally.fired += proxy.fired() - fired_before;
            let errors_before = tally.errors;
            settle(result, &via, &env, "lost", &run, &mut tally);
            if tally.errors > errors_before {
                // A caller that saw an error carries on with a fresh handle.
                coordinator = open_via(&via, &env.staging_root());
            }
        }
    }
    println!("lost COMMIT replies: {tally:?} ({} COMMITs seen by the proxy)", proxy.commits_seen());
    assert!(tally.fired >= 3 * torture(), "the reply to the publish's COMMIT was dropped in every round: {tally:?}");
    drop(coordinator);
    assert_acknowledged_kept(&direct, "lost", &[]);
    env.assert_verifies_clean();
}

#[test]
fn a_network_that_stops_forwarding_gives_an_error_or_the_truth_and_the_retry_settles_it() {
    // How long a publish on a connection that went silent may take to give up, at most.
    // (The layer's deadline per round trip is 30 s; its settling of an unknown outcome 60 s.)
    const BOUND: Duration = Duration::from_secs(180);
    let Some(env) = PgEnv::new() else { return };
    let proxy = Proxy::start(&host_port(env.url()));
    let via = env.db.url_via(&proxy.address());
    let direct = env.open();
    let mut tally = Tally::default();
    let cases = [Fault::StallNow, Fault::StallAfterCommit(1)];
    for round in 1..=torture() {
        for (i, fault) in cases.iter().enumerate() {
            let run = format!("r{round}-{i}");
            prepare_run(&direct, "stalled", &run, &[("p=1", 2, round as i64)]);
            let coordinator = open_via(&via, &env.staging_root());
            let fired_before = proxy.fired();
            proxy.arm(*fault);
            let (tx, rx) = mpsc::channel();
            let run_in = run.clone();
            let started = Instant::now();
            std::thread::spawn(move || {
                let _ = tx.send(coordinator.publish("stalled", &run_in, &PublishOptions::default()));
            });
            let result = rx.recv_timeout(BOUND).unwrap_or_else(|_| {
                panic!("{fault:?}: the publish did not return within {BOUND:?} on a connection that stopped forwarding")
            });
            println!("{fault:?}: the publish returned after {:?}: {result:?}", started.elapsed());
            proxy.disarm();
            proxy.cut_all();
            tally.fired += proxy.fired() - fired_before;
            settle(result, &via, &env, "stalled", &run, &mut tally);
        }
    }
    println!("stalled connections: {tally:?}");
    assert_acknowledged_kept(&direct, "stalled", &[]);
    env.assert_verifies_clean();
}

/// Issue 32, item 9: an open whose connections are lost while it reads the schema version (an
/// immediate restart of the server) rides it out as operations in flight do, writable and
/// read-only alike.
#[test]
fn an_open_rides_out_connections_lost_while_it_reads_the_schema() {
    let Some(env) = PgEnv::new() else { return };
    let proxy = Proxy::start(&host_port(env.url()));
    let via = env.db.url_via(&proxy.address());
    for (what, cuts) in [("a writable open", 3u64), ("a read-only open", 2)] {
        let fired_before = proxy.fired();
        proxy.arm(Fault::CutAtFirstQuery(cuts));
        let started = Instant::now();
        let opened = if what == "a writable open" {
            Store::open(&via, env.staging_root()).map(drop)
        } else {
            manifestdb::ReadOnlyStore::open(&via).map(drop)
        };
        proxy.disarm();
        let fired = proxy.fired() - fired_before;
        println!("{what}: {fired} connections cut at their first query; opened after {:?}", started.elapsed());
        assert_eq!(fired, cuts, "{what}: the proxy cut the connections");
        opened.unwrap_or_else(|e| panic!("{what} failed although the server came back at once: {e}"));
    }
}

/// Issue 39, item 4 (a cut link): a write call whose snapshot read loses its connection (the
/// snapshot was taken, the link is cut at its first read) runs again whole on a new connection,
/// so declare, begin, validate and a batch each succeed, and each is done once: the task has
/// one attempt, numbered as if nothing had been lost.
#[test]
fn a_write_call_whose_snapshot_read_loses_its_connection_runs_again_whole() {
    let Some(env) = PgEnv::new() else { return };
    let proxy = Proxy::start(&host_port(env.url()));
    let via = env.db.url_via(&proxy.address());
    let store = open_via(&via, &env.staging_root());
    let cut = |what: &str, cuts: u64, call: &mut dyn FnMut()| {
        let fired_before = proxy.fired();
        proxy.arm(Fault::CutSnapshotRead(cuts));
        call();
        proxy.disarm();
        assert_eq!(proxy.fired() - fired_before, cuts, "{what}: the proxy cut the snapshot's read {cuts} times");
    };
    let spec = crate::support::run_spec("cut", "r1", "in@r1", &[("p=1", 2, 5)]);
    cut("declare", 2, &mut || assert_eq!(store.declare_run(&spec).expect("declare"), manifestdb::DeclareOutcome::Declared));
    let task = manifestdb::TaskKey::new("cut", "r1", "p=1");
    let mut ticket = None;
    cut("begin", 3, &mut || ticket = Some(store.begin_attempt(&task).expect("begin")));
    let ticket = ticket.expect("begun");
    let file = crate::support::write_rows(&ticket.staging_dir, 2, 5);
    store.finish_attempt(&ticket.key, &crate::support::candidate("in@r1", 2, 5, file)).expect("finish");
    cut("validate", 2, &mut || {
        assert!(store.validate_attempt(&ticket.key, manifestdb::FileCheck::Size).expect("validate").is_valid());
    });
    let begin = manifestdb::BatchOp::Begin { dataset: "cut".into(), run: "r1".into(), partition: "p=1".into() };
    cut("batch", 1, &mut || {
        let results = store.run_batch(std::slice::from_ref(&begin)).expect("batch");
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    });
    let attempts = env.open().snapshot().unwrap().attempts(&task).unwrap();
    let numbers: Vec<u32> = attempts.iter().map(|a| a.key.attempt).collect();
    assert_eq!(numbers.len(), 2, "one attempt begun by the begin, one by the batch, none twice: {numbers:?}");
    assert_eq!(numbers[1], numbers[0] + 1, "consecutive numbers: {numbers:?}");
    assert_eq!(numbers[0], ticket.key.attempt);
}

/// Issue 39, item 4 (immediate restarts): threads beginning, finishing and validating attempts
/// without pause through two `pg_ctl restart -m immediate` of the server each get every call
/// through (each rides the restart out, its snapshot reads included), and each task has exactly
/// the attempts its thread was told of.
#[test]
fn begins_and_validations_ride_out_immediate_restarts_of_the_server() {
    if postgres_admin().is_none() {
        return;
    }
    let server = OwnServer::start();
    let env = PgEnv::on(&server.admin_url());
    let store = std::sync::Arc::new(env.open());
    const THREADS: usize = 3;
    let partitions: Vec<String> = (0..THREADS).map(|t| format!("p={t}")).collect();
    let tasks: Vec<(&str, u64, i64)> = partitions.iter().map(|p| (p.as_str(), 1, 1)).collect();
    store.declare_run(&crate::support::run_spec("restarted", "r1", "in@r1", &tasks)).expect("declare");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, stop, calls) = (store.clone(), stop.clone(), calls.clone());
            std::thread::spawn(move || {
                let task = manifestdb::TaskKey::new("restarted", "r1", format!("p={t}"));
                let mut told = Vec::new();
                let mut failures = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let cycle = || -> manifestdb::Result<u32> {
                        let ticket = store.begin_attempt(&task)?;
                        let file = crate::support::write_rows(&ticket.staging_dir, 1, 1);
                        store.finish_attempt(&ticket.key, &crate::support::candidate("in@r1", 1, 1, file))?;
                        store.validate_attempt(&ticket.key, manifestdb::FileCheck::Size)?;
                        Ok(ticket.key.attempt)
                    };
                    match cycle() {
                        Ok(attempt) => told.push(attempt),
                        Err(e) => failures.push(e.to_string()),
                    }
                    calls.fetch_add(3, std::sync::atomic::Ordering::SeqCst);
                }
                (task, told, failures)
            })
        })
        .collect();
    for restart in 0..2 * torture() {
        let before = calls.load(std::sync::atomic::Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(60);
        while calls.load(std::sync::atomic::Ordering::SeqCst) < before + 30 {
            assert!(Instant::now() < deadline, "no progress before restart {restart}");
            std::thread::sleep(Duration::from_millis(20));
        }
        server.restart_immediate();
    }
    let before = calls.load(std::sync::atomic::Ordering::SeqCst);
    while calls.load(std::sync::atomic::Ordering::SeqCst) < before + 30 {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let direct = env.open();
    let mut total = 0;
    for worker in workers {
        let (task, told, failures) = worker.join().expect("worker");
        assert!(failures.is_empty(), "{task}: calls failed through the restarts: {failures:?}");
        let stored: Vec<u32> = direct.snapshot().unwrap().attempts(&task).unwrap().iter().map(|a| a.key.attempt).collect();
        assert_eq!(stored, told, "{task}: the attempts stored are those the thread was told of");
        total += told.len();
    }
    println!("immediate restarts ridden out: {} restarts, {total} begin-finish-validate cycles, 0 failed", 2 * torture());
}

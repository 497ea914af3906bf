//! Begins without a flush of their own (a writer opened without cross-process readers and
//! without durable begins), on the fault-injecting backend: after a power loss (the image with
//! every unsynced write lost, the last one torn, or all kept) a begin that was acknowledged and
//! then forgotten never has its attempt number or its staging directory issued again, and its
//! worker's finish gets `UnknownAttempt`; a clean close forgets nothing and skips nothing; with
//! `durable_begins` every acknowledged begin survives a power loss.

use std::path::Path;

use manifestdb::testing::{FaultyBackend, Tear};
use manifestdb::{Candidate, Error, FileCheck, ReadOnlyStore, RunSpec, Store, StoreOptions, TaskKey, TaskSpec};

fn options(durable_begins: bool) -> StoreOptions {
    StoreOptions { cache_size_bytes: 4 * 1024 * 1024, cross_process_readers: false, durable_begins, ..StoreOptions::default() }
}

fn declare(store: &Store) {
    let spec = RunSpec {
        dataset: "ds".into(),
        run: "r1".into(),
        snapshot: "s1".into(),
        tasks: ["p=1", "p=2"].map(|p| TaskSpec { partition: p.into(), expected_rows: 1, expected_total: None }).to_vec(),
        grain: None,
        trust_reported_figures: true,
    };
    store.declare_run(&spec).unwrap();
}

fn task(partition: &str) -> TaskKey {
    TaskKey::new("ds", "r1", partition)
}

/// What a worker writes into its staging directory, and reports.
fn work(dir: &Path) -> Candidate {
    std::fs::write(dir.join("part.csv"), "item\n1\n").unwrap();
    let file = manifestdb::describe_file(dir, "part.csv").unwrap();
    Candidate { snapshot: "s1".into(), rows: Some(1), total: None, digest: Some("d".into()), files: vec![file] }
}

/// fsync/fdatasync calls of the store file so far.
fn syncs(backend: &FaultyBackend) -> u64 {
    backend.op_counts().2
}

#[test]
fn a_forgotten_begin_never_has_its_number_or_its_directory_issued_again() {
    if crate::support::redb_only("power loss on redb's fault-injecting backend") {
        return;
    }
    for tear in Tear::DETERMINISTIC {
        let backend = FaultyBackend::new();
        let staging = tempfile::tempdir().unwrap();
        let store = Store::open_with_backend(backend.clone(), staging.path(), &options(false)).unwrap();
        declare(&store);
        // Attempt 1 of p=1, validated: its verdict's commit is durable, and so is the begin.
        let first = store.begin_attempt(&task("p=1")).unwrap();
        store.finish_and_validate(&first.key, &work(&first.staging_dir), FileCheck::Size).unwrap();
        // Attempt 2: acknowledged without a flush; its worker writes its output.
        let before = syncs(&backend);
        let forgotten = store.begin_attempt(&task("p=1")).unwrap();
        assert_eq!(syncs(&backend), before, "{tear:?}: a begin in a recorded run flushes nothing");
        assert_eq!(forgotten.key.attempt, 2);
        let forgotten_output = work(&forgotten.staging_dir);
        // The first begin of another task of the run: also without a flush.
        let also_forgotten = store.begin_attempt(&task("p=2")).unwrap();
        assert_eq!(also_forgotten.key.attempt, 1);
        assert_eq!(syncs(&backend), before, "{tear:?}");
        backend.power_loss_now();
        drop(store);

        let image = backend.crash_image(tear);
        let mut store = Store::open_with_backend(FaultyBackend::from_image(image), staging.path(), &options(false)).unwrap();
        let snapshot = store.snapshot().unwrap();
        let kept = snapshot.attempt(&forgotten.key).unwrap().is_some();
        assert!(!kept, "{tear:?}: a begin without a flush did not survive the power loss");
        // Its worker's finish: the store does not know the attempt, so the task is retried.
        let err = store.finish_and_validate(&forgotten.key, &forgotten_output, FileCheck::Size).unwrap_err();
        assert!(matches!(err, Error::UnknownAttempt { .. }), "{tear:?}: {err}");
        // The retry takes the number after the forgotten one, and another directory.
        let retry = store.begin_attempt(&task("p=1")).unwrap();
        assert_eq!(retry.key.attempt, 3, "{tear:?}: attempt 2 was issued once and is never issued again");
        assert_ne!(retry.staging_dir, forgotten.staging_dir);
        assert!(forgotten.staging_dir.join("part.csv").exists(), "{tear:?}: the forgotten worker's output is left alone");
        // p=2's forgotten attempt 1 is not issued again either.
        let other = store.begin_attempt(&task("p=2")).unwrap();
        assert_eq!(other.key.attempt, 2, "{tear:?}");
        assert_ne!(other.staging_dir, also_forgotten.staging_dir);
        store.finish_and_validate(&retry.key, &work(&retry.staging_dir), FileCheck::Size).unwrap();
        let report = store.verify(&manifestdb::VerifyOptions::default()).unwrap();
        assert!(report.is_clean(), "{tear:?}: {report}");
    }
}

#[test]
fn a_clean_close_keeps_every_begin_and_skips_no_number() {
    if crate::support::redb_only("redb's fault-injecting backend") {
        return;
    }
    let backend = FaultyBackend::new();
    let staging = tempfile::tempdir().unwrap();
    let store = Store::open_with_backend(backend.clone(), staging.path(), &options(false)).unwrap();
    declare(&store);
    let before = syncs(&backend);
    let begun = store.begin_attempt(&task("p=1")).unwrap();
    let recorded = syncs(&backend) - before;
    assert!(recorded >= 1, "the run's record is committed durably before its first begin without a flush");
    // A second begin of the same task before a durable commit flushes: at most one begin per
    // task can be forgotten.
    let before = syncs(&backend);
    let again = store.begin_attempt(&task("p=1")).unwrap();
    assert!(syncs(&backend) > before, "the task's second begin since the last durable commit flushes");
    let before = syncs(&backend);
    let other = store.begin_attempt(&task("p=2")).unwrap();
    assert_eq!(syncs(&backend), before, "a begin in a recorded run flushes nothing");
    store.close().unwrap();
    // The close made every begin durable: a power loss now forgets none.
    backend.power_loss_now();
    let store =
        Store::open_with_backend(FaultyBackend::from_image(backend.crash_image(Tear::LoseUnsynced)), staging.path(), &options(false))
            .unwrap();
    for ticket in [&begun, &again, &other] {
        store.finish_and_validate(&ticket.key, &work(&ticket.staging_dir), FileCheck::Size).unwrap();
    }
    assert_eq!((again.key.attempt, other.key.attempt), (2, 1));
    assert_eq!(store.begin_attempt(&task("p=1")).unwrap().key.attempt, 3, "no number skipped after a clean close");
}

#[test]
fn with_durable_begins_an_acknowledged_begin_survives_a_power_loss() {
    if crate::support::redb_only("power loss on redb's fault-injecting backend") {
        return;
    }
    let backend = FaultyBackend::new();
    let staging = tempfile::tempdir().unwrap();
    let store = Store::open_with_backend(backend.clone(), staging.path(), &options(true)).unwrap();
    declare(&store);
    let before = syncs(&backend);
    let begun = store.begin_attempt(&task("p=1")).unwrap();
    assert_eq!(syncs(&backend) - before, 1, "one flush: redb's one-phase commit without cross-process readers");
    backend.power_loss_now();
    drop(store);
    let store =
        Store::open_with_backend(FaultyBackend::from_image(backend.crash_image(Tear::LoseUnsynced)), staging.path(), &options(true))
            .unwrap();
    store.finish_and_validate(&begun.key, &work(&begun.staging_dir), FileCheck::Size).unwrap();
    assert_eq!(store.begin_attempt(&task("p=1")).unwrap().key.attempt, 2);
}

#[test]
fn without_cross_process_readers_a_reader_elsewhere_is_refused_until_the_writer_closes() {
    if crate::support::redb_only("redb's locks") {
        return;
    }
    let backend = FaultyBackend::new();
    let staging = tempfile::tempdir().unwrap();
    let store = Store::open_with_backend(backend.clone(), staging.path(), &options(false)).unwrap();
    declare(&store);
    let err = ReadOnlyStore::open_with_backend(backend.another_process(), &StoreOptions::default()).unwrap_err();
    assert!(matches!(err, Error::AlreadyOpen { .. }), "{err}");
    store.close().unwrap();
    let reader = ReadOnlyStore::open_with_backend(backend.another_process(), &StoreOptions::default()).unwrap();
    assert!(reader.snapshot().unwrap().run("ds", "r1").unwrap().is_some());
}

const CHILD_ENV: &str = "MANIFESTDB_LAZY_CHILD_DIR";

/// The child of the kill test below: begins p=1 without a flush, says so, and waits to be
/// killed.
#[test]
#[ignore = "the kill test's child process; does nothing unless started by it"]
fn child_begins_without_a_flush_and_waits() {
    let Some(dir) = std::env::var_os(CHILD_ENV).map(std::path::PathBuf::from) else { return };
    let store = Store::open_with_options(dir.join("store.redb"), dir.join("staging"), &options(false)).expect("child opens the store");
    declare(&store);
    let ticket = store.begin_attempt(&task("p=1")).expect("child begins");
    println!("BEGUN {}", ticket.key.attempt);
    std::thread::sleep(std::time::Duration::from_secs(120));
}

/// A writer SIGKILLed after a begin without a flush; `Store::recover` (what `manifestdb
/// recover` and a reader's open run) repairs the file and settles the run, so the next writer
/// (with cross-process readers, as the CLI opens it) never issues that attempt number again.
#[test]
fn a_killed_writer_s_begin_is_settled_by_recover_and_never_issued_again() {
    if crate::support::redb_only("redb recovery of a killed writer's file") {
        return;
    }
    use std::io::{BufRead, BufReader};
    let base = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "lazy_begins::child_begins_without_a_flush_and_waits", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, base.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the child");
    let stdout = child.stdout.take().unwrap();
    let begun = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.split_once("BEGUN ").map(|(_, number)| number.trim().to_owned()));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(begun.as_deref(), Some("1"), "the child began attempt 1");
    let path = base.path().join("store.redb");
    assert!(Store::recover(&path).unwrap(), "the killed writer's store needed recovery");
    let store = Store::open(&path, base.path().join("staging")).unwrap();
    // A kill loses no page the child wrote, only what it had not written: attempt 1 may be on
    // record or not; either way the next begin skips the number after the durable one.
    let kept = store.snapshot().unwrap().attempt(&task("p=1").attempt(1)).unwrap().is_some();
    let next = store.begin_attempt(&task("p=1")).unwrap().key.attempt;
    assert_eq!(next, if kept { 3 } else { 2 }, "attempt 1 kept: {kept}");
    assert_eq!(store.begin_attempt(&task("p=2")).unwrap().key.attempt, 2, "every task of the run skipped one number");
}

/// `POST /v1/attempts/begin` on a server over a store like `serve --exclusive`'s: `p=1`'s
/// second begin over HTTP, and `p=2`'s first.
fn begin_over_http(client: &mut manifestdb::server::Client, partition: &str) -> (u32, std::path::PathBuf) {
    let body = serde_json::json!({ "dataset": "ds", "run": "r1", "partition": partition });
    let answer = client.request("POST", "/v1/attempts/begin", Some(&body)).expect("begin request");
    assert_eq!(answer.status, 200, "{}", answer.body);
    let attempt = answer.body["attempt"].as_u64().expect("attempt number");
    (u32::try_from(attempt).expect("small"), answer.body["staging_dir"].as_str().expect("staging_dir").into())
}

/// The same guarantees through the HTTP server (`serve --exclusive` opens the store so): a
/// begin over HTTP is answered without a flush of its own, a power loss may forget it, and its
/// number and directory are never issued again; with durable begins (`--durable-begins`)
/// every begin answered over HTTP flushes and survives the power loss.
#[test]
fn over_http_an_exclusive_server_s_begins_skip_their_flush_unless_durable() {
    if crate::support::redb_only("power loss on redb's fault-injecting backend") {
        return;
    }
    use manifestdb::server::{Client, Listen, Server, ServerOptions};
    use std::sync::Arc;
    for durable in [false, true] {
        let backend = FaultyBackend::new();
        let dir = tempfile::tempdir().unwrap();
        let staging = dir.path().join("staging");
        let store = Arc::new(Store::open_with_backend(backend.clone(), &staging, &options(durable)).unwrap());
        declare(&store);
        // Attempt 1 of p=1, validated in process: its verdict's commit is durable.
        let first = store.begin_attempt(&task("p=1")).unwrap();
        store.finish_and_validate(&first.key, &work(&first.staging_dir), FileCheck::Size).unwrap();
        let socket = dir.path().join("manifestdb.sock");
        let server = Server::start(Arc::clone(&store), &ServerOptions::unix(&socket)).expect("start the server");
        let mut client = Client::new(Listen::Unix(socket)).expect("client");

        let before = syncs(&backend);
        let (second, second_dir) = begin_over_http(&mut client, "p=1");
        let between = syncs(&backend);
        let (other, other_dir) = begin_over_http(&mut client, "p=2");
        assert_eq!((second, other), (2, 1));
        let flushes = (between - before, syncs(&backend) - between);
        if durable {
            assert!(flushes.0 >= 1 && flushes.1 >= 1, "durable begins: each begin answered over HTTP flushed: {flushes:?}");
        } else {
            assert_eq!(flushes, (0, 0), "a begin over HTTP on an exclusive store is answered before its flush");
        }
        backend.power_loss_now();
        drop(client);
        drop(server.shutdown().expect("stop the server"));
        drop(store);

        let image = backend.crash_image(Tear::LoseUnsynced);
        let store = Store::open_with_backend(FaultyBackend::from_image(image), &staging, &options(durable)).unwrap();
        let kept = store.snapshot().unwrap().attempt(&task("p=1").attempt(2)).unwrap().is_some();
        assert_eq!(kept, durable, "durable begins {durable}: attempt 2 survived the power loss: {kept}");
        let retry = store.begin_attempt(&task("p=1")).unwrap();
        assert_eq!(retry.key.attempt, 3, "durable begins {durable}: attempt 2 is issued once, never again");
        assert_ne!(retry.staging_dir, second_dir);
        let next = store.begin_attempt(&task("p=2")).unwrap();
        assert_eq!(next.key.attempt, 2, "durable begins {durable}");
        assert_ne!(next.staging_dir, other_dir);
    }
}

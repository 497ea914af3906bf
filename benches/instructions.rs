//! Instructions per operation (issue 15), counted by callgrind: repeatable whatever else the
//! machine does, unlike the wall-clock figures of the rest of the harness.
//!
//! `cargo bench --workspace --bench throughput -- --instructions [--quick]` builds the stores natively (the
//! parent process: runs to publish, a published dataset of 10,000 partitions, on manifestdb and
//! on the SQLite mirror of the harness), then runs one child process per operation and system
//! under `valgrind --tool=callgrind --toggle-collect=*instructions_counted_region*`. The child
//! opens the store, does one warm-up operation (page cache, prepared statements), then runs N
//! operations of one kind, each through [`counted`], the only function callgrind collects in:
//! the file's total is the instructions of exactly those N operations (and whatever they call),
//! never the setup, the open or the warm-up. The parent divides by N. A first row counts the
//! floor under every durable write, one small insert committed on bare redb (in manifestdb's
//! `SingleWriter` mode) and on bare SQLite, with the harness's own `BareRedb` and `BareSqlite`.
//!
//! Why `--toggle-collect` rather than client requests (the `crabgrind` crate, or valgrind's
//! `callgrind.h` macros): it needs nothing at build time (the bench package is compiled by
//! `cargo clippy --all-targets` everywhere, with or without valgrind's headers), no `unsafe`,
//! and the counted region is a named function that a reader can find; valgrind and its
//! `callgrind_annotate` (the well-kept tools) do the rest.
//!
//! Counts are user-space instructions: a syscall (an `fsync`, a `pwrite`) counts as the few
//! instructions that issue it, not the kernel's work, which the CPU-per-cycle figures of the
//! timed harness include. The profiles stay in `target/tmp/callgrind/` for
//! `callgrind_annotate --inclusive=yes target/tmp/callgrind/callgrind.out.<op>.<system>`.

use std::path::{Path, PathBuf};
use std::process::Command;

use manifestdb::{FileCheck, PublishOptions, PublishOutcome, Store, TaskKey};
use rusqlite::{Connection, TransactionBehavior, params};

use super::{
    BareRedb, BareSqlite, Report, Res, empty_candidate, md_prepare, partition, run_spec, sqlite_begin, sqlite_cycle, sqlite_declare,
    sqlite_finish, sqlite_open, sqlite_publish, sqlite_validate,
};

/// The operations counted, in the order printed.
/// `bare_commit` is the floor under every durable write: one small insert committed, on bare
/// redb in manifestdb's mode (`SingleWriter`, two-phase commit) and on bare SQLite (WAL,
/// `synchronous=FULL`), each on a fresh file. `bare_commit_2tables` commits one insert into
/// each of two tables: the difference is what one more table written costs a commit (a begin
/// and a verdict write two tables, a finish one).
const OPERATIONS: [&str; 8] =
    ["bare_commit", "bare_commit_2tables", "begin", "finish", "validate", "publish_1task", "publish_1000tasks", "manifest_10k_partitions"];

/// Partitions of the manifest read; tasks of the large publish.
const MANIFEST_PARTITIONS: usize = 10_000;
const PUBLISH_TASKS: usize = 1_000;

/// How many operations of each kind are counted (the first, uncounted, warm-up comes on top).
#[derive(Clone, Copy)]
struct Counts {
    cycles: usize,
    publish_1task: usize,
    publish_1000tasks: usize,
    manifest: usize,
}

const QUICK: Counts = Counts { cycles: 50, publish_1task: 20, publish_1000tasks: 2, manifest: 3 };
const FULL: Counts = Counts { cycles: 200, publish_1task: 100, publish_1000tasks: 5, manifest: 10 };

impl Counts {
    fn of(self, operation: &str) -> usize {
        match operation {
            "publish_1task" => self.publish_1task,
            "publish_1000tasks" => self.publish_1000tasks,
            "manifest_10k_partitions" => self.manifest,
            _ => self.cycles,
        }
    }
}

/// The counted region: callgrind collects only while this function runs
/// (`--toggle-collect=*instructions_counted_region*`). Never inlined, so the name exists.
#[inline(never)]
fn instructions_counted_region(operation: &mut dyn FnMut() -> Res<()>) -> Res<()> {
    operation()
}

/// Runs `operation` inside the counted region if `count`, else outside it (the warm-up).
fn counted(count: bool, mut operation: impl FnMut() -> Res<()>) -> Res<()> {
    if count { instructions_counted_region(&mut operation) } else { operation() }
}

fn store_path(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("store.redb"), dir.join("staging"))
}

fn sqlite_paths(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("store.sqlite"), dir.join("sqlite-staging"))
}

fn publish_dataset(tasks: usize) -> &'static str {
    if tasks == 1 { "pub1" } else { "pub1k" }
}

/// The parent's setup, natively: for each system, `n + 1` prepared runs of 1 and of 1,000 tasks
/// (each replacing the same partitions of its dataset, every task with a valid attempt) and one
/// published dataset of 10,000 partitions. The attempt cycles need no setup beyond a declared
/// run, which the child makes.
fn setup(dir: &Path, counts: Counts) -> Res<()> {
    let (db, staging) = store_path(dir);
    let store = Store::open(db, staging)?;
    let (sqlite_db, sqlite_staging) = sqlite_paths(dir);
    let mut conn = sqlite_open(&sqlite_db)?;
    // Setup only: the same rows, without a device flush per transaction (the children reopen
    // with synchronous=FULL, the harness's setting).
    conn.pragma_update(None, "synchronous", "OFF")?;
    for (tasks, n) in [(1, counts.publish_1task), (PUBLISH_TASKS, counts.publish_1000tasks)] {
        let dataset = publish_dataset(tasks);
        for i in 0..=n {
            let spec = run_spec(dataset, &format!("r{i}"), (0..tasks).map(partition));
            md_prepare(&store, &spec, 64)?;
            sqlite_declare(&mut conn, &spec)?;
            for task in &spec.tasks {
                sqlite_cycle(&mut conn, &sqlite_staging, dataset, &spec.run, &task.partition)?;
            }
        }
    }
    let spec = run_spec("manifest", "r0", (0..MANIFEST_PARTITIONS).map(partition));
    md_prepare(&store, &spec, 64)?;
    match store.publish("manifest", "r0", &PublishOptions::default())? {
        PublishOutcome::Published(_) => {}
        other => return Err(format!("the manifest dataset did not publish: {other:?}").into()),
    }
    sqlite_declare(&mut conn, &spec)?;
    for task in &spec.tasks {
        sqlite_cycle(&mut conn, &sqlite_staging, "manifest", "r0", &task.partition)?;
    }
    sqlite_publish(&mut conn, "manifest", "r0")?;
    store.close()?;
    Ok(())
}

/// The child (run under callgrind): `n` counted operations of one kind after one warm-up.
pub(crate) fn child(operation: &str, system: &str, dir: &Path, n: usize) -> Res<()> {
    match system {
        "manifestdb" => md_child(operation, dir, n),
        "sqlite" => sqlite_child(operation, dir, n),
        other => Err(format!("unknown system {other}").into()),
    }
}

fn md_child(operation: &str, dir: &Path, n: usize) -> Res<()> {
    if let Some(tables) = operation.strip_prefix("bare_commit") {
        let path = dir.join(format!("bare-single-writer{tables}.redb"));
        let redb = BareRedb::open(&path, redb::ConcurrencyMode::SingleWriter)?;
        let mut redb = if tables == "_2tables" { redb.with_two_tables() } else { redb };
        for i in 0..=n {
            counted(i > 0, || redb.op().map(drop))?;
        }
        return Ok(());
    }
    let (db, staging) = store_path(dir);
    let store = Store::open(db, staging)?;
    match operation {
        "begin" | "finish" | "validate" => {
            // The harness's attempt cycle on one task, counting one of its three operations.
            let run = format!("cycles-{operation}");
            let spec = run_spec("cycles", &run, std::iter::once(partition(0)));
            store.declare_run(&spec)?;
            let task = TaskKey::new("cycles", &run, partition(0));
            let candidate = empty_candidate(&spec.snapshot);
            for i in 0..=n {
                let mut ticket = None;
                counted(i > 0 && operation == "begin", || {
                    ticket = Some(store.begin_attempt(&task)?);
                    Ok(())
                })?;
                let key = ticket.ok_or("no ticket")?.key;
                counted(i > 0 && operation == "finish", || Ok(store.finish_attempt(&key, &candidate).map(drop)?))?;
                let mut valid = false;
                counted(i > 0 && operation == "validate", || {
                    valid = store.validate_attempt(&key, FileCheck::Size)?.is_valid();
                    Ok(())
                })?;
                if !valid {
                    return Err(format!("attempt {key} is invalid").into());
                }
            }
        }
        "publish_1task" | "publish_1000tasks" => {
            let dataset = publish_dataset(if operation == "publish_1task" { 1 } else { PUBLISH_TASKS });
            for i in 0..=n {
                let mut outcome = None;
                counted(i > 0, || {
                    outcome = Some(store.publish(dataset, &format!("r{i}"), &PublishOptions::default())?);
                    Ok(())
                })?;
                if !matches!(outcome, Some(PublishOutcome::Published(_))) {
                    return Err(format!("publish of {dataset}/r{i} did not publish: {outcome:?}").into());
                }
            }
        }
        "manifest_10k_partitions" => {
            for i in 0..=n {
                // A reader's read: a snapshot, then the current manifest.
                let mut partitions = 0;
                counted(i > 0, || {
                    let manifest = store.snapshot()?.manifest("manifest", None)?.ok_or("no manifest")?;
                    partitions = manifest.partitions.len();
                    Ok(())
                })?;
                if partitions != MANIFEST_PARTITIONS {
                    return Err(format!("the manifest holds {partitions} partitions").into());
                }
            }
        }
        other => return Err(format!("unknown operation {other}").into()),
    }
    Ok(())
}

/// One partition of a SQLite manifest: the columns of a manifestdb `PartitionEntry`, decoded
/// into owned values as manifestdb's read decodes its records.
#[allow(dead_code)] // The fields are read only by the decode itself.
struct SqliteEntry {
    partition: String,
    generation: i64,
    run: String,
    attempt: i64,
    snapshot: String,
    rows: i64,
    total: Option<i64>,
    digest: String,
    staging_rel: String,
    files: Option<Vec<u8>>,
}

/// The SQLite mirror of a manifest read: in one read transaction, the pointer, the generation
/// record and, for each partition, its newest version at or below that generation.
fn sqlite_manifest(conn: &mut Connection, dataset: &str) -> Res<usize> {
    let txn = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
    let number: i64 = txn.prepare_cached("SELECT generation FROM pointers WHERE dataset=?1")?.query_row(params![dataset], |r| r.get(0))?;
    let (_run, _snapshot, _published_at): (String, String, i64) = txn
        .prepare_cached("SELECT run, snapshot, published_at_ms FROM generations WHERE dataset=?1 AND generation=?2")?
        .query_row(params![dataset, number], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    let mut select = txn.prepare_cached(
        "SELECT v.partition, v.generation, v.run, v.attempt, v.snapshot, v.rows, v.total, v.digest, v.staging_rel, v.files \
         FROM partition_versions v WHERE v.dataset=?1 AND v.generation = (SELECT max(w.generation) FROM partition_versions w \
         WHERE w.dataset=v.dataset AND w.partition=v.partition AND w.generation<=?2) ORDER BY v.partition",
    )?;
    let entries = select
        .query_map(params![dataset, number], |r| {
            Ok(SqliteEntry {
                partition: r.get(0)?,
                generation: r.get(1)?,
                run: r.get(2)?,
                attempt: r.get(3)?,
                snapshot: r.get(4)?,
                rows: r.get(5)?,
                total: r.get(6)?,
                digest: r.get(7)?,
                staging_rel: r.get(8)?,
                files: r.get(9)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    drop(select);
    txn.commit()?;
    Ok(entries.len())
}

fn sqlite_child(operation: &str, dir: &Path, n: usize) -> Res<()> {
    if let Some(tables) = operation.strip_prefix("bare_commit") {
        let sqlite = BareSqlite::open(&dir.join(format!("bare{tables}.sqlite")))?;
        let mut sqlite = if tables == "_2tables" { sqlite.with_two_tables() } else { sqlite };
        for i in 0..=n {
            counted(i > 0, || sqlite.op().map(drop))?;
        }
        return Ok(());
    }
    let (db, staging) = sqlite_paths(dir);
    let mut conn = sqlite_open(&db)?;
    match operation {
        "begin" | "finish" | "validate" => {
            let run = format!("cycles-{operation}");
            sqlite_declare(&mut conn, &run_spec("cycles", &run, std::iter::once(partition(0))))?;
            let partition = partition(0);
            for i in 0..=n {
                let mut begun = None;
                counted(i > 0 && operation == "begin", || {
                    begun = Some(sqlite_begin(&mut conn, &staging, "cycles", &run, &partition)?);
                    Ok(())
                })?;
                let (attempt, snapshot) = begun.ok_or("no attempt")?;
                counted(i > 0 && operation == "finish", || sqlite_finish(&mut conn, "cycles", &run, &partition, attempt, &snapshot))?;
                counted(i > 0 && operation == "validate", || sqlite_validate(&mut conn, "cycles", &run, &partition, attempt, &snapshot))?;
            }
        }
        "publish_1task" | "publish_1000tasks" => {
            let dataset = publish_dataset(if operation == "publish_1task" { 1 } else { PUBLISH_TASKS });
            for i in 0..=n {
                counted(i > 0, || sqlite_publish(&mut conn, dataset, &format!("r{i}")).map(drop))?;
            }
        }
        "manifest_10k_partitions" => {
            for i in 0..=n {
                let mut partitions = 0;
                counted(i > 0, || {
                    partitions = sqlite_manifest(&mut conn, "manifest")?;
                    Ok(())
                })?;
                if partitions != MANIFEST_PARTITIONS {
                    return Err(format!("the SQLite manifest holds {partitions} partitions").into());
                }
            }
        }
        other => return Err(format!("unknown operation {other}").into()),
    }
    Ok(())
}

/// The instructions callgrind collected, from the `totals:` (or `summary:`) line of its file.
fn collected(profile: &Path) -> Res<u64> {
    let text = std::fs::read_to_string(profile)?;
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("totals:").or_else(|| l.strip_prefix("summary:")))
        .ok_or_else(|| format!("no totals in {}", profile.display()))?;
    Ok(line.split_whitespace().next().ok_or("empty totals")?.parse()?)
}

/// Runs one child under callgrind and returns its instructions per operation.
fn measure(profiles: &Path, dir: &Path, operation: &str, system: &str, n: usize) -> Res<f64> {
    let profile = profiles.join(format!("callgrind.out.{operation}.{system}"));
    let output = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", profile.display()))
        .arg("--collect-atstart=no")
        .arg("--toggle-collect=*instructions_counted_region*")
        .arg(std::env::current_exe()?)
        .args(["--instructions-child", operation, system])
        .arg(dir)
        .arg(n.to_string())
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "callgrind child {operation} {system} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let total = collected(&profile)?;
    if total == 0 {
        return Err(format!("callgrind collected nothing for {operation} {system}: is the counted region inlined?").into());
    }
    Ok(total as f64 / n as f64)
}

/// `--instructions`: the setup, one callgrind child per operation and system, a table, the
/// figures in `report`.
pub(crate) fn figures(dir: &Path, report: &mut Report, quick: bool) -> Res<()> {
    if Command::new("valgrind").arg("--version").output().is_err() {
        return Err("valgrind is not installed (apt-get install -y valgrind)".into());
    }
    let counts = if quick { QUICK } else { FULL };
    let profiles = Path::new(env!("CARGO_TARGET_TMPDIR")).join("callgrind");
    std::fs::create_dir_all(&profiles)?;
    println!("setting up the stores (native, not counted)");
    let started = std::time::Instant::now();
    setup(dir, counts)?;
    println!("setup took {:.1} s", started.elapsed().as_secs_f64());
    let mut rows = Vec::new();
    for operation in OPERATIONS {
        let n = counts.of(operation);
        println!("counting {n} x {operation} under callgrind ({:.1} s so far)", started.elapsed().as_secs_f64());
        let md = measure(&profiles, dir, operation, "manifestdb", n)?;
        let sqlite = measure(&profiles, dir, operation, "sqlite", n)?;
        // The bare commit's first column is bare redb, not manifestdb: its key says so.
        let ours = if operation.starts_with("bare_commit") { "redb_instructions_per" } else { "instructions_per" };
        report.put(&format!("{ours}_{operation}"), md, "instructions (callgrind)");
        report.put(&format!("sqlite_instructions_per_{operation}"), sqlite, "instructions (callgrind)");
        report.ratio(
            &format!("instructions_{operation}_vs_sqlite"),
            &format!("{ours}_{operation}"),
            &format!("sqlite_instructions_per_{operation}"),
        );
        rows.push((operation, n, md, sqlite));
    }
    println!();
    println!("{:<26} {:>6} {:>16} {:>16} {:>8}", "instructions per operation", "n", "manifestdb", "SQLite", "ratio");
    for (operation, n, md, sqlite) in rows {
        println!("{operation:<26} {n:>6} {:>16} {:>16} {:>8.2}", thousands(md), thousands(sqlite), md / sqlite);
    }
    println!("bare_commit: one small insert committed on bare redb (SingleWriter, manifestdb's mode) beside bare SQLite");
    println!("bare_commit_2tables: one insert into each of two tables, committed once");
    // What one more table written costs a commit: what fewer tables per operation could save.
    report.difference("redb_instructions_per_table_more", "redb_instructions_per_bare_commit_2tables", "redb_instructions_per_bare_commit");
    report.difference(
        "sqlite_instructions_per_table_more",
        "sqlite_instructions_per_bare_commit_2tables",
        "sqlite_instructions_per_bare_commit",
    );
    println!("profiles: {} (callgrind_annotate --inclusive=yes FILE)", profiles.display());
    Ok(())
}

fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

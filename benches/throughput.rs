//! Commit throughput of manifestdb, side by side in one run with the disk's own limit, a bare
//! redb commit and the same workloads on SQLite (WAL, synchronous=FULL).
//!
//! `cargo bench --workspace --bench throughput -- --quick` runs small sizes (a smoke run, well under three
//! minutes); without `--quick` it runs the full sizes of issue 6. Human-readable lines go to
//! standard output as each figure is measured; the last line is one JSON object with every raw
//! figure, the sizes used and the ratios. Every run also prints the exact fsync/fdatasync
//! count of each operation (redb's of the store file and the staging syncs of DOMAIN 11);
//! `-- --fsyncs` prints only those; `-- --server-only` only the server's figures (attempt cycles
//! through `manifestdb::server` from 1, 8 and 64 clients beside the library directly and the CLI
//! without a server, and 1,000 begins in one `manifestdb batch` beside separate CLI begins);
//! `-- --declare-only` only the cost of a declare of 100,000 tasks (which makes their staging
//! directories); `-- --cli-batch-only` only the batch of begins beside separate CLI begins
//! (with the bare `mkdir`s that bound it); `-- --gc-apply-only` only the longest wait of a
//! begin of another process during a `gc apply --execute` of 30,000 files;
//! `-- --instructions [--quick]` only the instructions per operation counted by callgrind beside
//! SQLite's (begin, finish, validate, publish of 1 and 1,000 tasks, a manifest read of 10,000
//! partitions; see `benches/instructions.rs`); `-- --postgres-only` only the PostgreSQL section
//! (publishes and attempt cycles at 1, 8 and 64 client threads on a PostgreSQL store beside redb
//! and SQLite; see `benches/postgres.rs`), which every run includes when
//! `MANIFESTDB_TEST_POSTGRES` names a server.
//!
//! Everything lives in one temporary directory under cargo's target directory, so the raw
//! fsync loop, redb, SQLite and manifestdb all write to the same filesystem.
//!
//! How noise is kept out of the ratios (the machines are shared and their disks' latency drifts
//! tenfold within minutes): the single-commit figures (fsync, bare redb in both modes, a
//! manifestdb publish, a SQLite publish, a SQLite commit) are timed one operation at a time,
//! interleaved, and reported as 1 / median latency (1 / mean is printed too); the attempt-cycle
//! figures run in rounds, each round running every variant for the same window; the scaling
//! comparisons interleave their two datasets publish by publish and compare medians.
//!
//! How the large stores are built (honestly, through the public API only): a run with many
//! tasks is declared in one transaction, its attempts are begun, finished and validated from
//! 64 threads (so group commit batches them), and it is published in one publish. The dataset
//! of 1M partitions is 10 such runs of 100k tasks; the 1M-attempt store is the same store. The
//! history of 100k generations is 100k one-task runs prepared by 16 threads and published one
//! by one from the main thread, each publish a real durable one. Candidates report no files
//! (zero expected rows), so setup pays for the store, not for writing test files.

mod figures;
mod instructions;
mod postgres;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use manifestdb::server::{Client, Listen, Server, ServerOptions, socket_path};
use manifestdb::{
    Candidate, FileCheck, PublishOptions, PublishOutcome, RetentionPolicy, RunMode, RunSpec, Store, StoreOptions, TaskKey, TaskSpec,
    VerifyOptions, ViewOptions,
};
use redb::{Builder, ConcurrencyMode, Database, TableDefinition};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde_json::{Map, Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = std::result::Result<T, BoxError>;

/// The sizes of one mode.
#[derive(Clone, Copy)]
struct Sizes {
    quick: bool,
    /// Durable single commits timed per side-by-side figure, interleaved op by op.
    interleaved: usize,
    /// Rounds of the attempt-cycle figures: every loop runs once per round, so each figure
    /// samples the same stretches of a noisy shared disk.
    rounds: usize,
    /// How long each attempt-cycle loop (and the lookup loop) runs in each round.
    measure: Duration,
    /// Publishes timed per scaling figure, interleaved between the two datasets compared.
    publishes: usize,
    /// Task counts of the per-task publish cost (keys t10, t1k, t100k).
    t_small: usize,
    t_mid: usize,
    t_big: usize,
    /// Runs of `t_big` tasks making the big dataset (keys: 1m partitions, 1m attempts).
    big_runs: usize,
    /// Earlier generations of the long history (key: 100k).
    history: usize,
}

const FULL: Sizes = Sizes {
    quick: false,
    interleaved: 400,
    rounds: 5,
    measure: Duration::from_secs(1),
    publishes: 20,
    t_small: 10,
    t_mid: 1_000,
    t_big: 100_000,
    big_runs: 10,
    history: 100_000,
};

const QUICK: Sizes = Sizes {
    quick: true,
    interleaved: 60,
    rounds: 3,
    measure: Duration::from_millis(400),
    publishes: 10,
    t_small: 10,
    t_mid: 1_000,
    t_big: 5_000,
    big_runs: 4,
    history: 1_000,
};

/// The figures collected so far, printed as they come and as JSON at the end.
struct Report {
    figures: Map<String, Value>,
    /// The unit of each figure `put` printed, for the book's figures table.
    units: BTreeMap<String, String>,
}

impl Report {
    fn new() -> Report {
        Report { figures: Map::new(), units: BTreeMap::new() }
    }

    fn put(&mut self, key: &str, value: f64, unit: &str) {
        println!("{key:<44} {value:>14.2} {unit}");
        self.figures.insert(key.to_owned(), json!((value * 1000.0).round() / 1000.0));
        self.units.insert(key.to_owned(), unit.to_owned());
    }

    /// Prints the figures as one JSON line (the harness's last line) and, with `--record`,
    /// keeps them for the book's figures table as the run `throughput[-section][-quick]`.
    fn finish(&self, args: &[String], section: &str, quick: bool) -> Res<()> {
        println!("{}", serde_json::to_string(&self.figures)?);
        if figures::requested(args) {
            let run = format!(
                "throughput{}{}",
                if section.is_empty() { String::new() } else { format!("-{section}") },
                if quick { "-quick" } else { "" }
            );
            let flags: Vec<&str> = args.iter().skip(1).map(String::as_str).filter(|a| *a != "--record" && *a != "--bench").collect();
            let command =
                format!("cargo bench --workspace --bench throughput{}{}", if flags.is_empty() { "" } else { " -- " }, flags.join(" "));
            figures::record(&run, &command, &self.figures, &self.units)?;
        }
        Ok(())
    }

    fn get(&self, key: &str) -> f64 {
        self.figures.get(key).and_then(Value::as_f64).unwrap_or(f64::NAN)
    }

    fn ratio(&mut self, key: &str, numerator: &str, denominator: &str) {
        let value = self.get(numerator) / self.get(denominator);
        self.put(key, value, "(ratio)");
    }

    fn difference(&mut self, key: &str, minuend: &str, subtrahend: &str) {
        let value = self.get(minuend) - self.get(subtrahend);
        self.put(key, value, "(difference)");
    }
}

fn per_second(count: u64, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64()
}

fn median_ms(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples.get(samples.len() / 2).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

// ---------------------------------------------------------------------------------------------
// (a) and (b): the disk's limit and a bare redb commit.

/// (a) The disk's limit: a 4 KiB `pwrite` + `fdatasync` over a 1 MiB preallocated file.
struct RawFile {
    file: File,
    block: Vec<u8>,
    n: u64,
}

impl RawFile {
    fn open(dir: &Path) -> Res<RawFile> {
        let file = OpenOptions::new().create(true).truncate(true).read(true).write(true).open(dir.join("raw-fsync.bin"))?;
        let block = vec![0xA5u8; 4096];
        for i in 0..256u64 {
            file.write_at(&block, i * 4096)?;
        }
        file.sync_all()?;
        Ok(RawFile { file, block, n: 0 })
    }

    fn op(&mut self) -> Res<Duration> {
        let start = Instant::now();
        self.file.write_at(&self.block, (self.n % 256) * 4096)?;
        self.file.sync_data()?;
        self.n += 1;
        Ok(start.elapsed())
    }
}

const REDB_TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("bench");
/// The second table of a bare commit that writes two (the instruction count's per-table cost).
const REDB_TABLE_2: TableDefinition<u64, &[u8]> = TableDefinition::new("bench2");

/// (b) One small value inserted and committed (Immediate durability, redb's default), in
/// redb's default mode (`ExclusiveWriter`: one-phase commit) or in the mode manifestdb opens
/// its store with (`SingleWriter`, so that other processes can read while the scheduler
/// writes, which makes redb commit in two phases, each with a flush).
struct BareRedb {
    db: Database,
    n: u64,
    /// Whether each commit also inserts into a second table.
    two_tables: bool,
}

impl BareRedb {
    fn open(path: &Path, mode: ConcurrencyMode) -> Res<BareRedb> {
        Ok(BareRedb { db: Builder::new().set_concurrency_mode(mode).create(path)?, n: 0, two_tables: false })
    }

    /// Each commit inserts one value into each of two tables.
    fn with_two_tables(mut self) -> BareRedb {
        self.two_tables = true;
        self
    }

    fn op(&mut self) -> Res<Duration> {
        let start = Instant::now();
        let txn = self.db.begin_write()?;
        txn.open_table(REDB_TABLE)?.insert(self.n, [7u8; 64].as_slice())?;
        if self.two_tables {
            txn.open_table(REDB_TABLE_2)?.insert(self.n, [7u8; 64].as_slice())?;
        }
        txn.commit()?;
        self.n += 1;
        Ok(start.elapsed())
    }
}

// ---------------------------------------------------------------------------------------------
// (c) manifestdb.

fn partition(i: usize) -> String {
    format!("p={i:07}")
}

fn empty_candidate(snapshot: &str) -> Candidate {
    Candidate { snapshot: snapshot.to_owned(), rows: Some(0), total: None, digest: Some("sha256:0".to_owned()), files: Vec::new() }
}

/// Begin + finish + validate of one attempt, each durable.
fn md_cycle(store: &Store, task: &TaskKey, snapshot: &str) -> Res<()> {
    let ticket = store.begin_attempt(task)?;
    store.finish_attempt(&ticket.key, &empty_candidate(snapshot))?;
    let verdict = store.validate_attempt(&ticket.key, FileCheck::Size)?;
    if !verdict.is_valid() {
        return Err(format!("attempt {} is invalid: {verdict:?}", ticket.key).into());
    }
    Ok(())
}

/// Begin + one `finish_and_validate` of one attempt (the embedded scheduler's path): two
/// durable writes.
fn md_cycle_fused(store: &Store, task: &TaskKey, snapshot: &str) -> Res<()> {
    let ticket = store.begin_attempt(task)?;
    let verdict = store.finish_and_validate(&ticket.key, &empty_candidate(snapshot), FileCheck::Size)?;
    if !verdict.is_valid() {
        return Err(format!("attempt {} is invalid: {verdict:?}", ticket.key).into());
    }
    Ok(())
}

/// Fused attempt cycles per second on one thread, on one task.
fn md_cycles_fused(store: &Store, run: &str, measure: Duration) -> Res<(u64, Duration)> {
    let spec = run_spec("cycles-fused", run, std::iter::once(partition(0)));
    store.declare_run(&spec)?;
    let task = TaskKey::new("cycles-fused", run, partition(0));
    let (mut count, start) = (0, Instant::now());
    while start.elapsed() < measure {
        md_cycle_fused(store, &task, &spec.snapshot)?;
        count += 1;
    }
    Ok((count, start.elapsed()))
}

fn run_spec(dataset: &str, run: &str, partitions: impl Iterator<Item = String>) -> RunSpec {
    RunSpec {
        dataset: dataset.to_owned(),
        run: run.to_owned(),
        snapshot: format!("snap-{run}"),
        tasks: partitions.map(|partition| TaskSpec { partition, expected_rows: 0, expected_total: None }).collect(),
        grain: None,
        trust_reported_figures: true,
    }
}

/// Declares a run over `partitions` and gives each task a valid attempt, from `threads` threads.
fn md_prepare(store: &Store, spec: &RunSpec, threads: usize) -> Res<()> {
    store.declare_run(spec)?;
    let next = AtomicU64::new(0);
    std::thread::scope(|scope| -> Res<()> {
        let handles: Vec<_> = (0..threads.min(spec.tasks.len()).max(1))
            .map(|_| {
                scope.spawn(|| -> Res<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                        let Some(task) = spec.tasks.get(i) else { return Ok(()) };
                        md_cycle(store, &TaskKey::new(&spec.dataset, &spec.run, &task.partition), &spec.snapshot)?;
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().map_err(|_| "setup thread panicked")??;
        }
        Ok(())
    })
}

fn md_publish(store: &Store, dataset: &str, run: &str) -> Res<Duration> {
    let start = Instant::now();
    let outcome = store.publish(dataset, run, &PublishOptions::default())?;
    let elapsed = start.elapsed();
    match outcome {
        PublishOutcome::Published(_) => Ok(elapsed),
        other => Err(format!("publish of {dataset}/{run} did not publish: {other:?}").into()),
    }
}

/// Prepares (untimed) and publishes (timed) `count` one-task runs replacing `partition`.
fn md_one_task_publishes(store: &Store, dataset: &str, tag: &str, partition: &str, count: usize) -> Res<Vec<Duration>> {
    (0..count)
        .map(|i| {
            let run = format!("{tag}-{i}");
            md_prepare(store, &run_spec(dataset, &run, std::iter::once(partition.to_owned())), 1)?;
            md_publish(store, dataset, &run)
        })
        .collect()
}

/// Attempt cycles per second from `threads` threads, each on its own task.
fn md_cycles(store: &Store, run: &str, threads: usize, measure: Duration) -> Res<(u64, Duration)> {
    let spec = run_spec("cycles", run, (0..threads).map(partition));
    store.declare_run(&spec)?;
    let count = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|scope| -> Res<()> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (spec, count) = (&spec, &count);
                scope.spawn(move || -> Res<()> {
                    let task = TaskKey::new("cycles", run, partition(t));
                    while start.elapsed() < measure {
                        md_cycle(store, &task, &spec.snapshot)?;
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        for handle in handles {
            handle.join().map_err(|_| "cycle thread panicked")??;
        }
        Ok(())
    })?;
    Ok((count.load(Ordering::Relaxed), start.elapsed()))
}

// ---------------------------------------------------------------------------------------------
// (d) SQLite: the same tables (same primary keys, WITHOUT ROWID so each is one keyed B-tree
// like a redb table), the same reads and writes, one transaction per operation.

const SQLITE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (dataset TEXT NOT NULL, run TEXT NOT NULL, snapshot TEXT NOT NULL, task_count INTEGER NOT NULL,
  declared_at_ms INTEGER NOT NULL, published_generation INTEGER, PRIMARY KEY (dataset, run)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tasks (dataset TEXT NOT NULL, run TEXT NOT NULL, partition TEXT NOT NULL, expected_rows INTEGER NOT NULL,
  expected_total INTEGER, next_attempt INTEGER NOT NULL, PRIMARY KEY (dataset, run, partition)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS attempts (dataset TEXT NOT NULL, run TEXT NOT NULL, partition TEXT NOT NULL, attempt INTEGER NOT NULL,
  started_at_ms INTEGER NOT NULL, staging_rel TEXT NOT NULL, c_snapshot TEXT, c_rows INTEGER, c_total INTEGER, c_digest TEXT,
  c_files BLOB, verdict TEXT, PRIMARY KEY (dataset, run, partition, attempt)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS accepted (dataset TEXT NOT NULL, run TEXT NOT NULL, partition TEXT NOT NULL, attempt INTEGER NOT NULL,
  PRIMARY KEY (dataset, run, partition)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS partition_versions (dataset TEXT NOT NULL, partition TEXT NOT NULL, generation INTEGER NOT NULL,
  run TEXT NOT NULL, attempt INTEGER NOT NULL, snapshot TEXT NOT NULL, rows INTEGER NOT NULL, total INTEGER, digest TEXT NOT NULL,
  staging_rel TEXT NOT NULL, files BLOB, PRIMARY KEY (dataset, partition, generation)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS generations (dataset TEXT NOT NULL, generation INTEGER NOT NULL, parent INTEGER NOT NULL, run TEXT NOT NULL,
  snapshot TEXT NOT NULL, published_at_ms INTEGER NOT NULL, partitions_replaced INTEGER NOT NULL, PRIMARY KEY (dataset, generation)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pointers (dataset TEXT NOT NULL PRIMARY KEY, generation INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS published_digests (dataset TEXT NOT NULL, snapshot TEXT NOT NULL, partition TEXT NOT NULL, digest TEXT NOT NULL,
  run TEXT NOT NULL, generation INTEGER NOT NULL, PRIMARY KEY (dataset, snapshot, partition)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS effects (dataset TEXT NOT NULL, run TEXT NOT NULL, effect TEXT NOT NULL, partition TEXT NOT NULL,
  payload BLOB, status TEXT NOT NULL, generation INTEGER, PRIMARY KEY (dataset, run, effect, partition)) WITHOUT ROWID;
";

fn sqlite_open(path: &Path) -> Res<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(600))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(SQLITE_SCHEMA)?;
    Ok(conn)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn sqlite_declare(conn: &mut Connection, spec: &RunSpec) -> Res<()> {
    let txn = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let exists: Option<String> =
        txn.query_row("SELECT snapshot FROM runs WHERE dataset=?1 AND run=?2", params![spec.dataset, spec.run], |r| r.get(0)).optional()?;
    if exists.is_some() {
        return Err(format!("run {} declared twice", spec.run).into());
    }
    txn.execute(
        "INSERT INTO runs VALUES (?1, ?2, ?3, ?4, ?5, NULL)",
        params![spec.dataset, spec.run, spec.snapshot, spec.tasks.len() as i64, now_ms()],
    )?;
    {
        let mut insert = txn.prepare_cached("INSERT INTO tasks VALUES (?1, ?2, ?3, ?4, ?5, 1)")?;
        for task in &spec.tasks {
            insert.execute(params![spec.dataset, spec.run, task.partition, task.expected_rows as i64, task.expected_total])?;
        }
    }
    txn.commit()?;
    Ok(())
}

/// The SQLite mirror of begin + finish + validate: the same reads, the same rows written, the
/// same staging directory created, three durable transactions.
fn sqlite_cycle(conn: &mut Connection, staging: &Path, dataset: &str, run: &str, partition: &str) -> Res<()> {
    let (next, snapshot) = sqlite_begin(conn, staging, dataset, run, partition)?;
    sqlite_finish(conn, dataset, run, partition, next, &snapshot)?;
    sqlite_validate(conn, dataset, run, partition, next, &snapshot)
}

/// The SQLite mirror of `begin_attempt`: returns the attempt number and the run's snapshot.
fn sqlite_begin(conn: &mut Connection, staging: &Path, dataset: &str, run: &str, partition: &str) -> Res<(i64, String)> {
    let txn = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let (snapshot, published): (String, Option<i64>) = txn
        .prepare_cached("SELECT snapshot, published_generation FROM runs WHERE dataset=?1 AND run=?2")?
        .query_row(params![dataset, run], |r| Ok((r.get(0)?, r.get(1)?)))?;
    if published.is_some() {
        return Err("run published".into());
    }
    let next: i64 = txn
        .prepare_cached("SELECT next_attempt FROM tasks WHERE dataset=?1 AND run=?2 AND partition=?3")?
        .query_row(params![dataset, run, partition], |r| r.get(0))?;
    let exists: Option<i64> = txn
        .prepare_cached("SELECT 1 FROM attempts WHERE dataset=?1 AND run=?2 AND partition=?3 AND attempt=?4")?
        .query_row(params![dataset, run, partition, next], |r| r.get(0))
        .optional()?;
    if exists.is_some() {
        return Err("attempt exists".into());
    }
    let staging_rel = format!("{dataset}/{run}/{partition}/@attempt-{next}");
    fs::create_dir_all(staging.join(&staging_rel))?;
    txn.prepare_cached("UPDATE tasks SET next_attempt=?4 WHERE dataset=?1 AND run=?2 AND partition=?3")?.execute(params![
        dataset,
        run,
        partition,
        next + 1
    ])?;
    let now = now_ms();
    txn.prepare_cached(
        "INSERT INTO attempts (dataset, run, partition, attempt, started_at_ms, staging_rel) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![dataset, run, partition, next, now, staging_rel])?;
    txn.commit()?;
    Ok((next, snapshot))
}

/// The SQLite mirror of `finish_attempt` with an empty candidate of `snapshot`.
fn sqlite_finish(conn: &mut Connection, dataset: &str, run: &str, partition: &str, next: i64, snapshot: &str) -> Res<()> {
    let txn = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let run_snapshot: String =
        txn.prepare_cached("SELECT snapshot FROM runs WHERE dataset=?1 AND run=?2")?.query_row(params![dataset, run], |r| r.get(0))?;
    let existing: Option<String> = txn
        .prepare_cached("SELECT c_digest FROM attempts WHERE dataset=?1 AND run=?2 AND partition=?3 AND attempt=?4")?
        .query_row(params![dataset, run, partition, next], |r| r.get(0))?;
    if existing.is_some() || run_snapshot != snapshot {
        return Err("candidate already recorded".into());
    }
    txn.prepare_cached(
        "UPDATE attempts SET c_snapshot=?5, c_rows=0, c_total=NULL, c_digest='sha256:0', c_files=x'' \
         WHERE dataset=?1 AND run=?2 AND partition=?3 AND attempt=?4",
    )?
    .execute(params![dataset, run, partition, next, snapshot])?;
    txn.commit()?;
    Ok(())
}

/// The SQLite mirror of `validate_attempt` of attempt `next`, whose run has `snapshot`.
fn sqlite_validate(conn: &mut Connection, dataset: &str, run: &str, partition: &str, next: i64, snapshot: &str) -> Res<()> {
    // Validate: read outside the write transaction (as manifestdb does), then store the verdict
    // and update the accepted index.
    let (expected_rows, c_rows, c_snapshot): (i64, i64, String) = {
        let txn = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
        let expected_rows: i64 = txn
            .prepare_cached("SELECT expected_rows FROM tasks WHERE dataset=?1 AND run=?2 AND partition=?3")?
            .query_row(params![dataset, run, partition], |r| r.get(0))?;
        let (c_rows, c_snapshot) = txn
            .prepare_cached("SELECT c_rows, c_snapshot FROM attempts WHERE dataset=?1 AND run=?2 AND partition=?3 AND attempt=?4")?
            .query_row(params![dataset, run, partition, next], |r| Ok((r.get(0)?, r.get(1)?)))?;
        txn.commit()?;
        (expected_rows, c_rows, c_snapshot)
    };
    let valid = expected_rows == c_rows && c_snapshot == snapshot;
    let txn = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let stored: Option<String> = txn
        .prepare_cached("SELECT verdict FROM attempts WHERE dataset=?1 AND run=?2 AND partition=?3 AND attempt=?4")?
        .query_row(params![dataset, run, partition, next], |r| r.get(0))?;
    if stored.is_none() {
        let published: Option<i64> = txn
            .prepare_cached("SELECT published_generation FROM runs WHERE dataset=?1 AND run=?2")?
            .query_row(params![dataset, run], |r| r.get(0))?;
        let current: Option<i64> = txn
            .prepare_cached("SELECT attempt FROM accepted WHERE dataset=?1 AND run=?2 AND partition=?3")?
            .query_row(params![dataset, run, partition], |r| r.get(0))
            .optional()?;
        txn.prepare_cached("UPDATE attempts SET verdict=?5 WHERE dataset=?1 AND run=?2 AND partition=?3 AND attempt=?4")?
            .execute(params![dataset, run, partition, next, if valid { "valid" } else { "invalid" }])?;
        if published.is_none() && valid && current.is_none_or(|c| next < c) {
            txn.prepare_cached("INSERT OR REPLACE INTO accepted VALUES (?1, ?2, ?3, ?4)")?
                .execute(params![dataset, run, partition, next])?;
        }
    }
    txn.commit()?;
    Ok(())
}

/// The SQLite mirror of a publish: one transaction reading the run, each task's accepted
/// attempt, its candidate and published digest, then writing the versions, digests, the
/// generation, the run, its effects and the pointer.
fn sqlite_publish(conn: &mut Connection, dataset: &str, run: &str) -> Res<Duration> {
    let start = Instant::now();
    let txn = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let (snapshot, published): (String, Option<i64>) = txn
        .prepare_cached("SELECT snapshot, published_generation FROM runs WHERE dataset=?1 AND run=?2")?
        .query_row(params![dataset, run], |r| Ok((r.get(0)?, r.get(1)?)))?;
    if published.is_some() {
        return Err("already published".into());
    }
    let current: i64 = txn
        .prepare_cached("SELECT generation FROM pointers WHERE dataset=?1")?
        .query_row(params![dataset], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    let number = current + 1;
    type Row = (String, i64, String, String, i64, Option<i64>, String, Vec<u8>, Option<String>);
    let rows: Vec<Row> = {
        let mut select = txn.prepare_cached(
            "SELECT t.partition, a.attempt, v.staging_rel, v.c_snapshot, v.c_rows, v.c_total, v.c_digest, v.c_files, v.verdict \
             FROM tasks t LEFT JOIN accepted a USING (dataset, run, partition) \
             LEFT JOIN attempts v ON v.dataset=t.dataset AND v.run=t.run AND v.partition=t.partition AND v.attempt=a.attempt \
             WHERE t.dataset=?1 AND t.run=?2",
        )?;
        let mapped = select.query_map(params![dataset, run], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?, r.get(8)?))
        })?;
        mapped.collect::<Result<_, _>>()?
    };
    {
        let mut digest = txn.prepare_cached("SELECT digest FROM published_digests WHERE dataset=?1 AND snapshot=?2 AND partition=?3")?;
        let mut version = txn.prepare_cached("INSERT INTO partition_versions VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)")?;
        let mut new_digest = txn.prepare_cached("INSERT INTO published_digests VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
        for (partition, attempt, staging_rel, c_snapshot, c_rows, c_total, c_digest, c_files, verdict) in &rows {
            if verdict.as_deref() != Some("valid") || *c_snapshot != snapshot {
                return Err(format!("task {partition} has no valid accepted attempt").into());
            }
            let earlier: Option<String> = digest.query_row(params![dataset, snapshot, partition], |r| r.get(0)).optional()?;
            if earlier.as_ref().is_some_and(|d| d != c_digest) {
                return Err("non-deterministic".into());
            }
            version.execute(params![
                dataset,
                partition,
                number,
                run,
                attempt,
                c_snapshot,
                c_rows,
                c_total,
                c_digest,
                staging_rel,
                c_files
            ])?;
            if earlier.is_none() {
                new_digest.execute(params![dataset, snapshot, partition, c_digest, run, number])?;
            }
        }
    }
    txn.prepare_cached("INSERT INTO generations VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")?.execute(params![
        dataset,
        number,
        current,
        run,
        snapshot,
        now_ms(),
        rows.len() as i64
    ])?;
    txn.prepare_cached("UPDATE runs SET published_generation=?3 WHERE dataset=?1 AND run=?2")?.execute(params![dataset, run, number])?;
    txn.prepare_cached("UPDATE effects SET status='ready', generation=?3 WHERE dataset=?1 AND run=?2 AND status='recorded'")?
        .execute(params![dataset, run, number])?;
    txn.prepare_cached("INSERT OR REPLACE INTO pointers VALUES (?1, ?2)")?.execute(params![dataset, number])?;
    txn.commit()?;
    Ok(start.elapsed())
}

/// SQLite's own bare commit: one small row inserted per transaction (WAL, synchronous=FULL).
struct BareSqlite {
    conn: Connection,
    n: i64,
    /// Whether each commit also inserts into a second table (in one transaction).
    two_tables: bool,
}

impl BareSqlite {
    fn open(path: &Path) -> Res<BareSqlite> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(
            "CREATE TABLE bench (k INTEGER PRIMARY KEY, v BLOB NOT NULL); CREATE TABLE bench2 (k INTEGER PRIMARY KEY, v BLOB NOT NULL)",
        )?;
        Ok(BareSqlite { conn, n: 0, two_tables: false })
    }

    /// Each commit inserts one row into each of two tables.
    fn with_two_tables(mut self) -> BareSqlite {
        self.two_tables = true;
        self
    }

    fn op(&mut self) -> Res<Duration> {
        let start = Instant::now();
        if self.two_tables {
            let txn = self.conn.transaction()?;
            txn.prepare_cached("INSERT INTO bench VALUES (?1, ?2)")?.execute(params![self.n, [7u8; 64].as_slice()])?;
            txn.prepare_cached("INSERT INTO bench2 VALUES (?1, ?2)")?.execute(params![self.n, [7u8; 64].as_slice()])?;
            txn.commit()?;
        } else {
            self.conn.prepare_cached("INSERT INTO bench VALUES (?1, ?2)")?.execute(params![self.n, [7u8; 64].as_slice()])?;
        }
        self.n += 1;
        Ok(start.elapsed())
    }
}

fn sqlite_cycles(db: &Path, staging: &Path, run: &str, threads: usize, measure: Duration) -> Res<(u64, Duration)> {
    sqlite_declare(&mut sqlite_open(db)?, &run_spec("cycles", run, (0..threads).map(partition)))?;
    let count = AtomicU64::new(0);
    let barrier = std::sync::Barrier::new(threads + 1);
    let mut start = Instant::now();
    std::thread::scope(|scope| -> Res<()> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (count, barrier) = (&count, &barrier);
                scope.spawn(move || -> Res<()> {
                    // Each thread has its own connection, opened before the clock starts, and
                    // commits its own work.
                    let conn = sqlite_open(db);
                    barrier.wait();
                    let (mut conn, partition, start) = (conn?, partition(t), Instant::now());
                    while start.elapsed() < measure {
                        sqlite_cycle(&mut conn, staging, "cycles", run, &partition)?;
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        barrier.wait();
        start = Instant::now();
        for handle in handles {
            handle.join().map_err(|_| "sqlite thread panicked")??;
        }
        Ok(())
    })?;
    Ok((count.load(Ordering::Relaxed), start.elapsed()))
}

fn sqlite_one_task_publishes(conn: &mut Connection, staging: &Path, dataset: &str, tag: &str, count: usize) -> Res<Vec<Duration>> {
    (0..count)
        .map(|i| {
            let run = format!("{tag}-{i}");
            sqlite_declare(conn, &run_spec(dataset, &run, std::iter::once(partition(0))))?;
            sqlite_cycle(conn, staging, dataset, &run, &partition(0))?;
            sqlite_publish(conn, dataset, &run)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// (e) scaling.

/// Builds a dataset by publishing `runs` runs of `tasks` new partitions each; returns the time
/// of each publish.
fn md_build_dataset(store: &Store, dataset: &str, runs: usize, tasks: usize) -> Res<Vec<Duration>> {
    (0..runs)
        .map(|r| {
            let run = format!("bulk-{r}");
            md_prepare(store, &run_spec(dataset, &run, (r * tasks..(r + 1) * tasks).map(partition)), 64)?;
            md_publish(store, dataset, &run)
        })
        .collect()
}

/// Gives `dataset` `generations` generations: one-task runs prepared by 16 threads and
/// published one by one by this thread as they become ready.
fn md_build_history(store: &Store, dataset: &str, generations: usize) -> Res<()> {
    let next = AtomicU64::new(0);
    let (ready, published) = mpsc::channel::<String>();
    std::thread::scope(|scope| -> Res<()> {
        let handles: Vec<_> = (0..16)
            .map(|_| {
                let (next, ready) = (&next, ready.clone());
                scope.spawn(move || -> Res<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                        if i >= generations {
                            return Ok(());
                        }
                        let run = format!("h-{i}");
                        md_prepare(store, &run_spec(dataset, &run, std::iter::once(partition(0))), 1)?;
                        ready.send(run).map_err(|_| "publisher gone")?;
                    }
                })
            })
            .collect();
        drop(ready);
        for run in published {
            md_publish(store, dataset, &run)?;
        }
        for handle in handles {
            handle.join().map_err(|_| "history thread panicked")??;
        }
        Ok(())
    })
}

/// `verify` (records and references, without redb's integrity check, which reads the whole
/// file whatever manifestdb does) on two stores of their own, holding one dataset with 1,000
/// and 8,000 one-task generations. Each generation adds one version entry, one generation
/// record and one run with its task and attempt, so a linear verify costs 8 times as much on
/// the second store, a quadratic one 64 times.
///
/// The two are timed side by side, alternately, 5 times each, and the median of each is put:
/// wall time, and the thread's CPU time, which leaves out the time other processes of a shared
/// machine hold the core (a run of 100 ms is preempted far more often than one of 10 ms, which
/// inflates the wall-time ratio on a loaded machine). Instruction counts, the repeatable measure:
/// `benches/examples/verify_scaling.rs` under callgrind.
fn verify_figures(dir: &Path, report: &mut Report) -> Res<()> {
    let open = |generations: usize| -> Res<Store> {
        let store_dir = dir.join(format!("verify-{generations}"));
        let store = Store::open(store_dir.join("store.redb"), store_dir.join("staging"))?;
        md_build_history(&store, "hist", generations)?;
        Ok(store)
    };
    let mut stores = [open(1_000)?, open(8_000)?];
    let options = VerifyOptions { integrity_check: false, ..VerifyOptions::default() };
    let mut wall = [Vec::new(), Vec::new()];
    let mut cpu = [Vec::new(), Vec::new()];
    for _ in 0..5 {
        for (i, store) in stores.iter_mut().enumerate() {
            let (started, cpu_started) = (Instant::now(), thread_cpu());
            let report = store.verify(&options)?;
            wall[i].push(started.elapsed());
            cpu[i].push(thread_cpu().saturating_sub(cpu_started));
            if !report.is_clean() {
                return Err(format!("verify found problems in a fresh store: {report}").into());
            }
        }
    }
    let [wall_1k, wall_8k] = wall;
    let [cpu_1k, cpu_8k] = cpu;
    report.put("verify_ms_1k_generations", median_ms(wall_1k), "ms (median of 5, wall)");
    report.put("verify_ms_8k_generations", median_ms(wall_8k), "ms (median of 5, wall)");
    report.put("verify_cpu_ms_1k_generations", median_ms(cpu_1k), "ms (median of 5, thread CPU)");
    report.put("verify_cpu_ms_8k_generations", median_ms(cpu_8k), "ms (median of 5, thread CPU)");
    report.ratio("verify_8k_vs_1k_generations", "verify_ms_8k_generations", "verify_ms_1k_generations");
    report.ratio("verify_cpu_8k_vs_1k_generations", "verify_cpu_ms_8k_generations", "verify_cpu_ms_1k_generations");
    Ok(())
}

/// The CPU time this thread has used so far.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec.try_into().unwrap_or(0), t.tv_nsec.try_into().unwrap_or(0))
}

/// Single-partition lookups per second through one read snapshot, over `partitions` keys.
fn md_lookups(store: &Store, dataset: &str, partitions: usize, measure: Duration) -> Res<f64> {
    let snapshot = store.snapshot()?;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let start = Instant::now();
    let mut count = 0u64;
    while start.elapsed() < measure {
        for _ in 0..256 {
            // xorshift: a spread of keys without a dependency.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let key = partition((state % partitions as u64) as usize);
            if snapshot.partition(dataset, &key, None)?.is_none() {
                return Err(format!("partition {key} missing").into());
            }
            count += 1;
        }
    }
    Ok(per_second(count, start.elapsed()))
}

/// CPU time (user + system) this process has used so far, from `/proc/self/stat` (clock ticks
/// of 10 ms on Linux, so only meaningful over windows of a second or more).
fn cpu_seconds() -> Res<f64> {
    let stat = fs::read_to_string("/proc/self/stat")?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').ok_or("malformed /proc/self/stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11).ok_or("no utime")?.parse::<u64>()? + fields.get(12).ok_or("no stime")?.parse::<u64>()?;
    Ok(ticks as f64 / 100.0)
}

/// Mean time to create one staging-like directory (4 levels, the last one new) on the store's
/// filesystem: the part of `begin_attempt` that is neither redb nor manifestdb.
fn mkdir_us(dir: &Path, count: usize) -> Res<f64> {
    let root = dir.join("mkdir-probe/ds/run");
    fs::create_dir_all(&root)?;
    let start = Instant::now();
    for i in 0..count {
        fs::create_dir_all(root.join(format!("p={i:07}/@attempt-1")))?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / count as f64)
}

fn vm_hwm_kib() -> Res<u64> {
    let status = fs::read_to_string("/proc/self/status")?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).ok_or("no VmHWM in /proc/self/status")?;
    Ok(line.split_whitespace().nth(1).ok_or("malformed VmHWM")?.parse()?)
}

/// The child process of the RSS figure: opens the store, works on it (lookups over the big
/// dataset, an attempt cycle, a one-partition publish), prints its peak RSS in KiB.
fn rss_child(db: &Path, staging: &Path, partitions: usize) -> Res<()> {
    let store = Store::open(db, staging)?;
    md_lookups(&store, "big", partitions, Duration::from_millis(500))?;
    md_one_task_publishes(&store, "big", "rss", &partition(1), 1)?;
    let snapshot = store.snapshot()?;
    let manifest = snapshot.current("big")?.ok_or("no current generation")?;
    drop(snapshot);
    drop(store);
    println!("generation {} vm_hwm_kib {}", manifest.number, vm_hwm_kib()?);
    Ok(())
}

fn rss_of_child(db: &Path, staging: &Path, partitions: usize) -> Res<f64> {
    let output = std::process::Command::new(std::env::current_exe()?)
        .arg("--rss-child")
        .arg(db)
        .arg(staging)
        .arg(partitions.to_string())
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!("rss child failed: {stdout} {}", String::from_utf8_lossy(&output.stderr)).into());
    }
    let kib: f64 = stdout
        .lines()
        .rev()
        .find_map(|l| l.split("vm_hwm_kib ").nth(1))
        .ok_or_else(|| format!("no figure from the rss child: {stdout}"))?
        .trim()
        .parse()?;
    Ok(kib / 1024.0)
}

// ---------------------------------------------------------------------------------------------

/// Interleaves one-task publishes into several datasets (A, B, A, B, ...) so that each sees
/// the same disk conditions; returns the publish times per dataset.
fn md_interleaved_publishes(store: &Store, datasets: &[&str], tag: &str, count: usize) -> Res<Vec<Vec<Duration>>> {
    let mut samples = vec![Vec::with_capacity(count); datasets.len()];
    for i in 0..count {
        for (d, dataset) in datasets.iter().enumerate() {
            samples[d].extend(md_one_task_publishes(store, dataset, &format!("{tag}-{i}"), &partition(0), 1)?);
        }
    }
    Ok(samples)
}

/// Declares a run over `partitions` partitions of `dataset`, each task with one valid attempt
/// that wrote one small CSV file (views link files, so the attempts need some).
fn md_prepare_with_files(store: &Store, dataset: &str, run: &str, partitions: usize) -> Res<()> {
    let spec = RunSpec {
        dataset: dataset.to_owned(),
        run: run.to_owned(),
        snapshot: format!("snap-{run}"),
        tasks: (0..partitions)
            .map(|i| TaskSpec { partition: format!("date=2026-11-29/p={i:05}"), expected_rows: 2, expected_total: None })
            .collect(),
        grain: None,
        trust_reported_figures: true,
    };
    store.declare_run(&spec)?;
    let next = AtomicU64::new(0);
    std::thread::scope(|scope| -> Res<()> {
        let handles: Vec<_> = (0..16.min(spec.tasks.len()))
            .map(|_| {
                scope.spawn(|| -> Res<()> {
                    while let Some(task) = spec.tasks.get(next.fetch_add(1, Ordering::Relaxed) as usize) {
                        md_attempt_with_file(store, &spec, &task.partition)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for handle in handles {
            handle.join().map_err(|_| "setup thread panicked")??;
        }
        Ok(())
    })
}

/// One valid attempt that wrote one small CSV file.
fn md_attempt_with_file(store: &Store, spec: &RunSpec, partition: &str) -> Res<()> {
    let (dataset, run) = (spec.dataset.as_str(), spec.run.as_str());
    {
        let ticket = store.begin_attempt(&TaskKey::new(dataset, run, partition))?;
        std::fs::write(ticket.staging_dir.join("part-0.csv"), format!("store,units\n1,{}\n2,7\n", run.len()))?;
        let candidate = Candidate {
            snapshot: spec.snapshot.clone(),
            rows: Some(2),
            total: None,
            digest: Some(format!("d-{run}")),
            files: vec![manifestdb::describe_file(&ticket.staging_dir, "part-0.csv")?],
        };
        store.finish_attempt(&ticket.key, &candidate)?;
        store.validate_attempt(&ticket.key, FileCheck::Size)?;
    }
    Ok(())
}

/// Declares a run of `dataset` replacing `partitions` (their keys as `md_prepare_with_files`
/// names them, `date=2026-11-29/p=NNNNN`) with one valid attempt each.
fn md_prepare_some_with_files(store: &Store, dataset: &str, run: &str, partitions: &[usize]) -> Res<()> {
    let spec = RunSpec {
        dataset: dataset.to_owned(),
        run: run.to_owned(),
        snapshot: format!("snap-{run}"),
        tasks: partitions
            .iter()
            .map(|i| TaskSpec { partition: format!("date=2026-11-29/p={i:05}"), expected_rows: 2, expected_total: None })
            .collect(),
        grain: None,
        trust_reported_figures: true,
    };
    store.declare_run(&spec)?;
    for task in &spec.tasks {
        md_attempt_with_file(store, &spec, &task.partition)?;
    }
    Ok(())
}

/// Expiry of 40 generations' views (issue 28 item 5: under 1 s): a dataset of 1,000
/// partitions published 41 times (each later publish replacing 10 partitions), so each of the
/// 40 expiring views holds 1,000 files in 1,000 partition directories; then one
/// `expire_generations` keeping the last, timed, views and all.
fn view_expiry_figure(dir: &Path, report: &mut Report) -> Res<()> {
    let options = StoreOptions {
        views: Some(ViewOptions::hard_links(dir.join("views-expiry")).with_trees(manifestdb::ViewTrees::All)),
        ..StoreOptions::default()
    };
    let store = Store::open_with_options(dir.join("views-expiry.redb"), dir.join("staging-views-expiry"), &options)?;
    let dataset = "view-expiry";
    md_prepare_with_files(&store, dataset, "r0", 1000)?;
    md_publish(&store, dataset, "r0")?;
    for g in 1..=40usize {
        let run = format!("r{g}");
        let replaced: Vec<usize> = (0..10).map(|j| (g * 10 + j) % 1000).collect();
        md_prepare_some_with_files(&store, dataset, &run, &replaced)?;
        md_publish(&store, dataset, &run)?;
    }
    let policy = RetentionPolicy { keep_last: 1, rollback_window: Duration::ZERO };
    let start = Instant::now();
    let expired = store.expire_generations(dataset, &policy, RunMode::Execute)?;
    let elapsed = start.elapsed();
    store.wait_for_view_removals();
    let reclaimed = start.elapsed();
    if expired.views_removed.len() != 40 {
        return Err(format!("expected 40 views removed, got {}", expired.views_removed.len()).into());
    }
    let left: Vec<String> = fs::read_dir(dir.join("views-expiry").join(dataset))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|name| name.starts_with(".expired"))
        .collect();
    if !left.is_empty() {
        return Err(format!("expired trees left after the removal: {left:?}").into());
    }
    report.put(
        "view_expiry_ms_40_generations_1000p",
        elapsed.as_secs_f64() * 1e3,
        "ms (one expiry of 40 views of 1,000 files each: until the call returns, the views unreachable)",
    );
    report.put(
        "view_expiry_reclaimed_ms_40_generations_1000p",
        reclaimed.as_secs_f64() * 1e3,
        "ms (the same, until their trees are removed in the background)",
    );
    Ok(())
}

/// One Parquet file of `rows` rows (`store` Int64, `item` Utf8, `units` Int64) in `dir`.
fn parquet_part(dir: &Path, rows: usize, units: i64) -> Res<manifestdb::FileEntry> {
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("store", DataType::Int64, false),
        Field::new("item", DataType::Utf8, false),
        Field::new("units", DataType::Int64, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from((0..rows as i64).collect::<Vec<_>>())),
        Arc::new(StringArray::from(vec!["apple"; rows])),
        Arc::new(Int64Array::from(vec![units; rows])),
    ];
    let batch = RecordBatch::try_new(schema, columns)?;
    let mut writer = parquet::arrow::ArrowWriter::try_new(File::create(dir.join("part-0.parquet"))?, batch.schema(), None)?;
    writer.write(&batch)?;
    writer.close()?;
    Ok(manifestdb::describe_file(dir, "part-0.parquet")?)
}

/// A run of `dataset` over `partitions` (`region=NNN`), one valid Parquet attempt each;
/// `grain`: declared at the Parquet grain (so the dataset gets a Delta table), else none.
fn md_prepare_parquet(store: &Store, dataset: &str, run: &str, partitions: &[usize], grain: bool) -> Res<()> {
    let spec = RunSpec {
        dataset: dataset.to_owned(),
        run: run.to_owned(),
        snapshot: format!("snap-{run}"),
        tasks: partitions
            .iter()
            .map(|i| TaskSpec { partition: format!("region={i:03}"), expected_rows: 100, expected_total: None })
            .collect(),
        grain: grain.then(|| manifestdb::Grain::new(manifestdb::DataFormat::Parquet, &["store", "item"], "units")),
        trust_reported_figures: !grain,
    };
    store.declare_run(&spec)?;
    for task in &spec.tasks {
        let ticket = store.begin_attempt(&TaskKey::new(dataset, run, &task.partition))?;
        let file = parquet_part(&ticket.staging_dir, 100, run.len() as i64)?;
        // Without a grain the worker reports its figures (the store computes none).
        let (rows, digest) = if grain { (None, None) } else { (Some(100), Some(format!("d-{run}-{}", task.partition))) };
        let candidate = Candidate { snapshot: spec.snapshot.clone(), rows, total: None, digest, files: vec![file] };
        store.finish_attempt(&ticket.key, &candidate)?;
        store.validate_attempt(&ticket.key, FileCheck::Size)?;
    }
    Ok(())
}

const DELTALAKE_REPLACE: &str = r#"
import sys, time, json
import pyarrow as pa
from deltalake import write_deltalake
path, partitions, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def part(i, units):
    n = 100
    return pa.table({"store": pa.array(range(n), pa.int64()), "item": ["apple"] * n, "units": pa.array([units] * n, pa.int64()),
                     "region": ["%03d" % i] * n})
write_deltalake(path, pa.concat_tables([part(i, 1) for i in range(partitions)]), partition_by=["region"])
samples = []
for r in range(rounds):
    t = part(r % partitions, r + 2)
    start = time.perf_counter()
    write_deltalake(path, t, mode="overwrite", predicate="region = '%03d'" % (r % partitions))
    samples.append((time.perf_counter() - start) * 1e3)
samples.sort()
print(json.dumps({"median_ms": samples[len(samples) // 2]}))
"#;

/// The Delta table's cost (issue 28 item 5): replacing one partition of a 100-partition
/// Parquet dataset through manifestdb in the default view configuration (publish: the commit
/// and the Delta commit, no directory trees) beside the same publish on a dataset without a
/// Delta table (the same files, no declared grain: its file list only), so the Delta commit's
/// share is the difference; and beside
/// `deltalake.write_deltalake(..., mode="overwrite", predicate=...)` replacing one partition
/// of the same data (delta-rs from PyPI; skipped, saying so, where Python lacks it).
fn delta_figures(dir: &Path, report: &mut Report, rounds: usize) -> Res<()> {
    let options = StoreOptions {
        views: Some(ViewOptions::hard_links(dir.join("views-delta")).with_trees(manifestdb::ViewTrees::Off)),
        ..StoreOptions::default()
    };
    let store = Store::open_with_options(dir.join("views-delta.redb"), dir.join("staging-views-delta"), &options)?;
    let all: Vec<usize> = (0..100).collect();
    for (dataset, grain) in [("delta-on", true), ("delta-off", false)] {
        md_prepare_parquet(&store, dataset, "r0", &all, grain)?;
        md_publish(&store, dataset, "r0")?;
    }
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for r in 1..=rounds {
        let run = format!("r{r}");
        let replaced = [r % 100];
        md_prepare_parquet(&store, "delta-on", &run, &replaced, true)?;
        md_prepare_parquet(&store, "delta-off", &run, &replaced, false)?;
        on.push(md_publish(&store, "delta-on", &run)?);
        off.push(md_publish(&store, "delta-off", &run)?);
    }
    let status = store.sync_view("delta-on")?.ok_or("no view status")?;
    if status.table_version != Some(rounds as u64) {
        return Err(format!("the Delta table is at version {:?}, expected {rounds}", status.table_version).into());
    }
    report.put(
        "delta_publish_ms_1_of_100p",
        median_ms(on),
        "ms (median: publish and Delta commit, one Parquet partition replaced, default views)",
    );
    report.put(
        "delta_publish_ms_1_of_100p_without_table",
        median_ms(off),
        "ms (median: the same publish, no Delta table: a file list only)",
    );
    let share = report.figures.get("delta_publish_ms_1_of_100p").and_then(Value::as_f64).unwrap_or(0.0)
        - report.figures.get("delta_publish_ms_1_of_100p_without_table").and_then(Value::as_f64).unwrap_or(0.0);
    report.put("delta_commit_share_ms", share, "ms (the Delta commit's share of that publish: the difference)");
    let out = std::process::Command::new("python3")
        .args(["-c", DELTALAKE_REPLACE])
        .arg(dir.join("deltalake-table"))
        .arg("100")
        .arg(rounds.to_string())
        .output();
    match out {
        Ok(out) if out.status.success() => {
            let doc: Value = serde_json::from_slice(&out.stdout)?;
            report.put(
                "deltalake_overwrite_ms_1_of_100p",
                doc["median_ms"].as_f64().unwrap_or(f64::NAN),
                "ms (median: write_deltalake overwrite with a predicate, delta-rs from PyPI)",
            );
            report.ratio("delta_publish_vs_deltalake_ratio", "delta_publish_ms_1_of_100p", "deltalake_overwrite_ms_1_of_100p");
        }
        Ok(out) => println!("deltalake comparison skipped: {}", String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")),
        Err(e) => println!("deltalake comparison skipped: python3: {e}"),
    }
    Ok(())
}

/// The published table's cost as the dataset grows (issue 37, "a publish costs what it
/// changes"). Per N, four stores, each publish a new run replacing ONE partition, interleaved:
/// the default view configuration (no directory trees: a Parquet dataset's Delta table, and a
/// dataset without a table read through its file list), the same with directory trees for every
/// dataset (the table and trees; trees alone), and a store without views. Prints the median ms
/// per publish of each, their ratios to the store without views, the bytes each generation adds
/// under the view root (directories and files of their own: the data files are links to
/// staging), and the time of one expiry of 40 generations in the default configuration.
/// Trees are measured up to N = 10,000 (their cost is linear in N; at 100,000 the setup alone
/// would take an hour). Opt-in: `cargo bench --workspace --bench throughput -- --table-scaling
/// [--quick]` (N = 100 and 1,000 quick; 100, 1,000, 10,000 and 100,000 full).
fn table_scaling(dir: &Path, report: &mut Report, sizes: &[usize], rounds: usize) -> Res<()> {
    for &n in sizes {
        let trees_too = n <= 10_000;
        let open = |name: &str, views: Option<manifestdb::ViewTrees>| -> Res<Store> {
            let options = StoreOptions {
                views: views.map(|t| ViewOptions::hard_links(dir.join(format!("scaling-views-{name}-{n}"))).with_trees(t)),
                ..StoreOptions::default()
            };
            Ok(Store::open_with_options(
                dir.join(format!("scaling-{name}-{n}.redb")),
                dir.join(format!("scaling-staging-{name}-{n}")),
                &options,
            )?)
        };
        let default = open("default", Some(manifestdb::ViewTrees::Off))?;
        let trees = if trees_too { Some(open("trees", Some(manifestdb::ViewTrees::All))?) } else { None };
        let without = open("without", None)?;
        let all: Vec<usize> = (0..n).collect();
        // "scaling" has a Parquet grain (a Delta table); "list" has none (figures reported), so
        // no table: in the default configuration it is read through its file list only.
        let mut cases: Vec<(&Store, &str, bool)> = vec![(&default, "scaling", true), (&default, "list", false)];
        if let Some(t) = &trees {
            cases.push((t, "scaling", true));
            cases.push((t, "trees", false));
        }
        cases.push((&without, "scaling", true));
        for &(store, dataset, grain) in &cases {
            md_prepare_parquet(store, dataset, "r0", &all, grain)?;
            md_publish(store, dataset, "r0")?;
        }
        let bytes_before: Vec<u64> =
            [Some(&default), trees.as_ref()].iter().map(|s| s.map_or(Ok(0), view_root_bytes)).collect::<Res<_>>()?;
        let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); cases.len()];
        for r in 1..=rounds {
            let run = format!("r{r}");
            let replaced = [(r * 7919) % n];
            for &(store, dataset, grain) in &cases {
                md_prepare_parquet(store, dataset, &run, &replaced, grain)?;
            }
            for (i, &(store, dataset, _)) in cases.iter().enumerate() {
                samples[i].push(md_publish(store, dataset, &run)?);
            }
        }
        let bytes_after: Vec<u64> =
            [Some(&default), trees.as_ref()].iter().map(|s| s.map_or(Ok(0), view_root_bytes)).collect::<Res<_>>()?;
        // The default store's bytes are the table dataset's (a dataset without a table adds
        // nothing there); the trees store's are shared by its two datasets' generations.
        let per_generation = |i: usize| bytes_after[i].saturating_sub(bytes_before[i]) as f64 / ((i + 1) * rounds) as f64;
        let key = |suffix: &str| format!("table_publish_ms_1_of_{n}p{suffix}");
        let mut samples = samples.into_iter();
        let mut next = || samples.next().map(median_ms).unwrap_or(f64::NAN);
        report.put(&key(""), next(), "ms (median: one partition replaced; default views: the Delta table, no directory trees)");
        report.put(&key("_file_list"), next(), "ms (median: the same, a dataset without a table: its file list only)");
        if trees_too {
            report.put(&key("_with_trees"), next(), "ms (median: the same, with directory trees and the table)");
            report.put(&key("_views_only"), next(), "ms (median: the same, directory trees only, no table)");
        }
        report.put(&key("_without_views"), next(), "ms (median: the same publish, a store without views)");
        report.ratio(&format!("table_publish_ratio_{n}p"), &key(""), &key("_without_views"));
        // The floor under the table's share, on this file system in this run: the syncs a Delta
        // commit of one new file needs and nothing else (the data file's new link and its
        // directory synced; the commit written, synced, linked into place, its directory synced).
        let floor = median_ms(delta_commit_floor(&dir.join(format!("scaling-floor-{n}")), rounds)?);
        report.put(&format!("table_floor_ms_{n}p"), floor, "ms (median: the bare syncs of a one-file Delta commit: 1 file, 2 directories)");
        if let Some(without) = report.figures.get(&key("_without_views")).and_then(Value::as_f64) {
            report.put(
                &format!("table_publish_ratio_floor_{n}p"),
                (without + floor) / without,
                "(ratio: the publish without views plus those bare syncs, over the publish)",
            );
        }
        report.ratio(&format!("table_publish_file_list_ratio_{n}p"), &key("_file_list"), &key("_without_views"));
        // The Delta commit's share: the table dataset's publish less the list-only one's.
        report.difference(&format!("table_delta_share_ms_{n}p"), &key(""), &key("_file_list"));
        report.put(
            &format!("table_bytes_per_generation_{n}p"),
            per_generation(0),
            "bytes (new under the view root per generation, default views)",
        );
        if trees_too {
            report.ratio(&format!("table_publish_with_trees_ratio_{n}p"), &key("_with_trees"), &key("_without_views"));
            report.ratio(&format!("table_publish_views_only_ratio_{n}p"), &key("_views_only"), &key("_without_views"));
            report.put(
                &format!("table_bytes_per_generation_{n}p_with_trees"),
                per_generation(1),
                "bytes (new under the view root per generation, trees and table)",
            );
        }
        // Expiry of 40 generations in the default configuration: publish up to 41, keep 1.
        for g in rounds + 1..=40 {
            let run = format!("r{g}");
            md_prepare_parquet(&default, "scaling", &run, &[(g * 7919) % n], true)?;
            md_publish(&default, "scaling", &run)?;
        }
        let policy = RetentionPolicy { keep_last: 1, rollback_window: Duration::ZERO };
        let start = Instant::now();
        let expired = default.expire_generations("scaling", &policy, RunMode::Execute)?;
        let elapsed = start.elapsed();
        if expired.expired.len() != 40 {
            return Err(format!("expected 40 generations expired, got {}", expired.expired.len()).into());
        }
        // The next publish applies the table's retention (checkpoint, old log entries and data files).
        md_prepare_parquet(&default, "scaling", "after-expiry", &[1 % n], true)?;
        let after = md_publish(&default, "scaling", "after-expiry")?;
        report.put(
            &format!("table_expiry_ms_40_generations_{n}p"),
            elapsed.as_secs_f64() * 1e3,
            "ms (one expiry of 40 generations, default views)",
        );
        report.put(
            &format!("table_publish_after_expiry_ms_{n}p"),
            after.as_secs_f64() * 1e3,
            "ms (the publish after it, which removes the expired log entries and data files)",
        );
        // A writable open (what every CLI command pays first): the default store, whose open
        // checks each dataset's view and table, against the store without views.
        drop((default, trees, without));
        let (mut opens, mut opens_without) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let start = Instant::now();
            drop(open("default", Some(manifestdb::ViewTrees::Off))?);
            opens.push(start.elapsed());
            let start = Instant::now();
            drop(open("without", None)?);
            opens_without.push(start.elapsed());
        }
        report.put(&format!("table_open_ms_{n}p"), median_ms(opens), "ms (median: a writable open, default views)");
        report.put(&format!("table_open_ms_{n}p_without_views"), median_ms(opens_without), "ms (median: a writable open, no views)");
        report.ratio(&format!("table_open_ratio_{n}p"), &format!("table_open_ms_{n}p"), &format!("table_open_ms_{n}p_without_views"));
    }
    Ok(())
}

/// `rounds` timings of the bare syncs a Delta commit of one new data file makes: a hard link of
/// the data file into its partition directory and that directory's fsync; a commit file
/// written, fsynced, hard-linked to its final name and the log directory fsynced.
fn delta_commit_floor(dir: &Path, rounds: usize) -> Res<Vec<Duration>> {
    let (data, log) = (dir.join("data"), dir.join("log"));
    fs::create_dir_all(&data)?;
    fs::create_dir_all(&log)?;
    let source = dir.join("source.parquet");
    fs::write(&source, [0u8; 4096])?;
    fs::File::open(&source)?.sync_all()?;
    let mut out = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let start = Instant::now();
        fs::hard_link(&source, data.join(format!("f{r}.parquet")))?;
        fs::File::open(&data)?.sync_all()?;
        let temp = log.join(format!(".{r:020}.json.tmp"));
        let mut file = fs::File::create(&temp)?;
        std::io::Write::write_all(&mut file, &[b'{'; 1500])?;
        file.sync_all()?;
        fs::hard_link(&temp, log.join(format!("{r:020}.json")))?;
        fs::File::open(&log)?.sync_all()?;
        out.push(start.elapsed());
        fs::remove_file(&temp)?;
    }
    Ok(out)
}

/// Bytes on disk under a store's view root that are its own: directories and files with one
/// link (the data files are links to the staging files, counted there).
fn view_root_bytes(store: &Store) -> Res<u64> {
    use std::os::unix::fs::MetadataExt;
    let Some(root) = store.view_root() else { return Ok(0) };
    let mut total = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d)? {
            let entry = entry?;
            let meta = fs::symlink_metadata(entry.path())?;
            if meta.is_dir() {
                total += meta.blocks() * 512;
                stack.push(entry.path());
            } else if meta.nlink() == 1 {
                total += meta.blocks() * 512;
            }
        }
    }
    Ok(total)
}

/// The cost of a view: publishes of 1 and 1,000 partitions (each publish replaces them all, so
/// its view links every file again) on a store without views and one with hard-link views,
/// interleaved; and the time of a view build alone (a `sync_view` that must rebuild the current
/// view), per 1,000 files.
fn view_figures(dir: &Path, report: &mut Report, publishes: usize) -> Res<()> {
    let off = Store::open(dir.join("views-off.redb"), dir.join("staging-views-off"))?;
    let options = StoreOptions {
        views: Some(ViewOptions::hard_links(dir.join("views")).with_trees(manifestdb::ViewTrees::All)),
        ..StoreOptions::default()
    };
    let on = Store::open_with_options(dir.join("views-on.redb"), dir.join("staging-views-on"), &options)?;
    for partitions in [1usize, 1000] {
        let dataset = format!("view-{partitions}p");
        let (mut t_off, mut t_on, mut builds) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..publishes {
            let run = format!("r{i}");
            md_prepare_with_files(&off, &dataset, &run, partitions)?;
            md_prepare_with_files(&on, &dataset, &run, partitions)?;
            t_off.push(md_publish(&off, &dataset, &run)?);
            t_on.push(md_publish(&on, &dataset, &run)?);
            // Drop the view just built (untimed) and time its rebuild alone.
            let status = on.sync_view(&dataset)?.ok_or("no view status")?;
            std::fs::remove_dir_all(status.path.as_ref().ok_or("the dataset has no directory tree")?)?;
            let start = Instant::now();
            let rebuilt = on.sync_view(&dataset)?.ok_or("no view status")?;
            builds.push(start.elapsed());
            if !rebuilt.built {
                return Err("the view was not rebuilt".into());
            }
        }
        let key = if partitions == 1 { "1p" } else { "1000p" };
        report.put(&format!("publish_ms_{key}_without_views"), median_ms(t_off), "ms (median)");
        report.put(&format!("publish_ms_{key}_with_views"), median_ms(t_on), "ms (median, includes the view build and swap)");
        report.ratio(
            &format!("views_publish_ratio_{key}"),
            &format!("publish_ms_{key}_with_views"),
            &format!("publish_ms_{key}_without_views"),
        );
        let build = median_ms(builds);
        report.put(&format!("view_build_ms_{key}"), build, "ms (median, build of v<N> alone)");
        if partitions == 1000 {
            report.put("view_build_ms_per_1000_files", build, "ms per 1,000 files (hard links, all synced)");
        }
    }
    view_floor_figures(dir, report, publishes)
}

/// The floor under a view of 1,000 partitions on this file system, measured in the same run:
/// 1,000 bare `mkdir` in one directory (a view makes one directory per partition, serialised on
/// the parent's lock) and 1,000 bare `link`; then their removal (`unlink`, `rmdir`) on one
/// thread, which an expiry pays per view (its `rmdir`s mostly wait for the journal, so an
/// expiry removes several views at once). No sync: the view's syncs overlap its build.
fn view_floor_figures(dir: &Path, report: &mut Report, rounds: usize) -> Res<()> {
    let base = dir.join("view-floor");
    fs::create_dir_all(&base)?;
    let source = base.join("source.csv");
    fs::write(&source, "store,units\n1,2\n")?;
    let (mut mkdirs, mut links, mut syncs, mut removals) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let parent = base.join(format!("r{r}"));
        fs::create_dir(&parent)?;
        let dirs: Vec<_> = (0..1000).map(|i| parent.join(format!("p={i:05}"))).collect();
        let start = Instant::now();
        for d in &dirs {
            fs::create_dir(d)?;
        }
        mkdirs.push(start.elapsed());
        let start = Instant::now();
        for d in &dirs {
            fs::hard_link(&source, d.join("part-0.csv"))?;
        }
        links.push(start.elapsed());
        // Each directory's own fsync (a view's contract: every directory synced, never one
        // `syncfs`), on 32 threads as the view build syncs.
        let start = Instant::now();
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| -> Res<()> {
            let workers: Vec<_> = (0..32)
                .map(|_| {
                    scope.spawn(|| -> std::io::Result<()> {
                        while let Some(d) = dirs.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                            fs::File::open(d)?.sync_all()?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for worker in workers {
                worker.join().map_err(|_| "a sync thread panicked")??;
            }
            Ok(())
        })?;
        syncs.push(start.elapsed());
        let start = Instant::now();
        for d in &dirs {
            fs::remove_file(d.join("part-0.csv"))?;
            fs::remove_dir(d)?;
        }
        removals.push(start.elapsed());
    }
    report.put("view_floor_mkdir_ms_1000", median_ms(mkdirs), "ms (median: 1,000 bare mkdir in one directory)");
    report.put("view_floor_link_ms_1000", median_ms(links), "ms (median: 1,000 bare hard links, one per directory)");
    report.put("view_floor_dir_fsync_ms_1000", median_ms(syncs), "ms (median: an fsync of each of those 1,000 directories, 32 threads)");
    report.put("view_floor_remove_ms_1000", median_ms(removals), "ms (median: removing those 1,000 links and directories)");
    // The least a publish of 1,000 partitions with a view can cost against one without, on
    // this file system in this run: the publish, plus the view's bare mkdirs, links and
    // directory fsyncs (nothing else: no manifest, no swap, no checks).
    let figure = |key: &str| report.figures.get(key).and_then(Value::as_f64);
    if let (Some(publish), Some(mkdir), Some(link), Some(sync)) = (
        figure("publish_ms_1000p_without_views"),
        figure("view_floor_mkdir_ms_1000"),
        figure("view_floor_link_ms_1000"),
        figure("view_floor_dir_fsync_ms_1000"),
    ) {
        report.put(
            "views_publish_ratio_floor_1000p",
            (publish + mkdir + link + sync) / publish,
            "(ratio: publish without views plus the bare mkdirs, links and directory fsyncs, over the publish)",
        );
    }
    Ok(())
}

/// Syncs each operation makes, counted exactly (not timed): redb's through the testing backend
/// (the store opened in the shipped mode, as `Store::open` opens a file) and the staging syncs
/// through the store's sync seam. One task writing one file; the first begin of a task creates
/// its directories, a retry's begin only its own.
fn fsyncs_per_operation(report: &mut Report, prefix: &str, options: &manifestdb::StoreOptions) -> Res<()> {
    use manifestdb::testing::{FaultyBackend, observe_syncs};
    use std::cell::Cell;
    use std::rc::Rc;

    let backend = FaultyBackend::new();
    let staging = tempfile::tempdir()?;
    let staging_syncs = Rc::new(Cell::new(0u64));
    let counter = Rc::clone(&staging_syncs);
    let count = |report: &mut Report, name: &str, op: &mut dyn FnMut() -> Res<()>| -> Res<()> {
        let (redb_before, staging_before) = (backend.op_counts().2, staging_syncs.get());
        op()?;
        let redb = backend.op_counts().2 - redb_before;
        let staging = staging_syncs.get() - staging_before;
        report.put(&format!("fsyncs_{prefix}{name}_redb"), redb as f64, "fsync/fdatasync of the store file");
        report.put(&format!("fsyncs_{prefix}{name}_staging"), staging as f64, "fsync/fdatasync of staging files and directories");
        Ok(())
    };
    observe_syncs(
        move |_| {
            counter.set(counter.get() + 1);
            Ok(())
        },
        || -> Res<()> {
            let mut store = None;
            count(report, "create", &mut || {
                store = Some(Store::open_with_backend(backend.clone(), staging.path(), options)?);
                Ok(())
            })?;
            let opened = store.take().ok_or("no store")?;
            let spec = RunSpec {
                dataset: "fs".into(),
                run: "r1".into(),
                snapshot: "s1".into(),
                tasks: ["date=2026-12-01/region=eu", "date=2026-12-01/region=us"]
                    .map(|p| TaskSpec { partition: p.into(), expected_rows: 1, expected_total: Some(5) })
                    .to_vec(),
                grain: None,
                trust_reported_figures: true,
            };
            let task = TaskKey::new("fs", "r1", "date=2026-12-01/region=eu");
            let store = &opened;
            count(report, "declare", &mut || Ok(store.declare_run(&spec).map(drop)?))?;
            let mut ticket = None;
            count(report, "begin_first", &mut || {
                ticket = Some(store.begin_attempt(&task)?);
                Ok(())
            })?;
            let mut retry = None;
            count(report, "begin_retry", &mut || {
                retry = Some(store.begin_attempt(&task)?);
                Ok(())
            })?;
            let (ticket, retry) = (ticket.ok_or("no ticket")?, retry.ok_or("no ticket")?);
            let output = |dir: &Path| -> Res<Candidate> {
                fs::write(dir.join("part.csv"), "item,units\n0,5\n")?;
                let file = manifestdb::describe_file(dir, "part.csv")?;
                Ok(Candidate { snapshot: "s1".into(), rows: Some(1), total: Some(5), digest: Some("d".into()), files: vec![file] })
            };
            let candidate = output(&ticket.staging_dir)?;
            count(report, "finish", &mut || Ok(store.finish_attempt(&ticket.key, &candidate).map(drop)?))?;
            count(report, "validate_1file", &mut || Ok(store.validate_attempt(&ticket.key, FileCheck::Size).map(drop)?))?;
            // The retry begun above, now that its task's directories are durable.
            let candidate = output(&retry.staging_dir)?;
            count(report, "finish_retry", &mut || Ok(store.finish_attempt(&retry.key, &candidate).map(drop)?))?;
            count(report, "validate_1file_retry", &mut || Ok(store.validate_attempt(&retry.key, FileCheck::Size).map(drop)?))?;
            // A begin and one `finish_and_validate`: a third attempt of the task, and the first
            // attempt of a second task of the run (its own partition directory).
            for (name, partition) in [("retry", "date=2026-12-01/region=eu"), ("first", "date=2026-12-01/region=us")] {
                let task = TaskKey::new("fs", "r1", partition);
                let mut ticket = None;
                count(report, &format!("begin_{name}_fused"), &mut || {
                    ticket = Some(store.begin_attempt(&task)?);
                    Ok(())
                })?;
                let ticket = ticket.ok_or("no ticket")?;
                let candidate = output(&ticket.staging_dir)?;
                count(report, &format!("finish_and_validate_1file_{name}"), &mut || {
                    Ok(store.finish_and_validate(&ticket.key, &candidate, FileCheck::Size).map(drop)?)
                })?;
            }
            count(report, "publish", &mut || Ok(store.publish("fs", "r1", &PublishOptions::default()).map(drop)?))?;
            let mut opened = Some(opened);
            count(report, "close", &mut || Ok(opened.take().ok_or("no store")?.close()?))?;
            count(report, "reopen", &mut || {
                opened = Some(Store::open_with_backend(backend.clone(), staging.path(), options)?);
                Ok(())
            })?;
            drop(opened);
            Ok(())
        },
    )?;
    // Whole attempt cycles, store and staging syncs together.
    let sum = |report: &Report, ops: &[&str]| -> f64 {
        ops.iter()
            .flat_map(|op| ["redb", "staging"].map(|side| format!("fsyncs_{prefix}{op}_{side}")))
            .map(|key| report.figures.get(&key).and_then(Value::as_f64).unwrap_or(f64::NAN))
            .sum()
    };
    let cycles: [(&str, &[&str], &str); 4] = [
        (
            "syncs_per_attempt_cycle_first",
            &["begin_first", "finish", "validate_1file"],
            "begin, finish, validate; first attempt of a new run's task, one file",
        ),
        ("syncs_per_attempt_cycle_retry", &["begin_retry", "finish_retry", "validate_1file_retry"], "the same for a retry"),
        (
            "syncs_per_attempt_cycle_fused_first",
            &["begin_first_fused", "finish_and_validate_1file_first"],
            "begin, finish_and_validate; first attempt of a task of a known run, one file",
        ),
        ("syncs_per_attempt_cycle_fused_retry", &["begin_retry_fused", "finish_and_validate_1file_retry"], "the same for a retry"),
    ];
    for (key, ops, note) in cycles {
        let total = sum(report, ops);
        // `syncs_per_attempt_cycle_first` becomes `syncs_per_attempt_cycle_exclusive_first`.
        let key = match prefix.strip_suffix('_') {
            Some(mode) => key.replacen("cycle_", &format!("cycle_{mode}_"), 1),
            None => key.to_owned(),
        };
        report.put(&key, total, note);
    }
    Ok(())
}

/// The cost of declaring a run of 100,000 tasks, which makes the tasks' staging directories
/// and syncs the directories holding them once (so that a task's first validation syncs only
/// what its attempt added): the whole declare timed on a fresh store, with the staging syncs it
/// made counted.
fn declare_figures(dir: &Path, report: &mut Report) -> Res<()> {
    use std::cell::Cell;
    use std::rc::Rc;
    const TASKS: usize = 100_000;
    let store = Store::open_with_options(dir.join("declare.redb"), dir.join("declare-staging"), &exclusive_options())?;
    let spec = run_spec("declared", "r1", (0..TASKS).map(partition));
    let syncs = Rc::new(Cell::new(0u64));
    let counter = Rc::clone(&syncs);
    let start = Instant::now();
    manifestdb::testing::observe_syncs(
        move |_| {
            counter.set(counter.get() + 1);
            Ok(())
        },
        || store.declare_run(&spec),
    )?;
    let elapsed = start.elapsed();
    report.put("declare_ms_100k_tasks", elapsed.as_secs_f64() * 1e3, "ms (one declare: records, task directories, their syncs)");
    report.put("declare_us_per_task_100k", elapsed.as_secs_f64() * 1e6 / TASKS as f64, "us/task");
    report.put("declare_staging_syncs_100k_tasks", syncs.get() as f64, "fsyncs of staging directories by that declare");
    Ok(())
}

/// A writer without cross-process readers: redb's `ExclusiveWriter` mode (one flush per
/// commit) and begins without a flush of their own.
fn exclusive_options() -> manifestdb::StoreOptions {
    manifestdb::StoreOptions { cross_process_readers: false, ..manifestdb::StoreOptions::default() }
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--rss-child") {
        let arg = |n: usize| args.get(i + n).cloned().ok_or("missing rss child argument");
        return rss_child(Path::new(&arg(1)?), Path::new(&arg(2)?), arg(3)?.parse()?);
    }
    if let Some(i) = args.iter().position(|a| a == "--instructions-child") {
        // One operation kind under callgrind, started by `--instructions` (benches/instructions.rs).
        let arg = |n: usize| args.get(i + n).cloned().ok_or("missing instructions child argument");
        return instructions::child(&arg(1)?, &arg(2)?, Path::new(&arg(3)?), arg(4)?.parse()?);
    }
    if args.iter().any(|a| a == "--fsyncs") {
        // Only the exact sync counts per operation (no timing): `cargo bench --workspace --bench throughput -- --fsyncs`.
        let mut report = Report::new();
        fsyncs_per_operation(&mut report, "", &manifestdb::StoreOptions::default())?;
        fsyncs_per_operation(&mut report, "exclusive_", &exclusive_options())?;
        report.finish(&args, "fsyncs", false)?;
        return Ok(());
    }
    let sizes = if args.iter().any(|a| a == "--quick") { QUICK } else { FULL };
    let root = tempfile::Builder::new().prefix("manifestdb-throughput-").tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let dir = root.path();
    let staging = dir.join("staging");
    let mut report = Report::new();
    let started = Instant::now();
    println!("manifestdb throughput ({} mode) in {}", if sizes.quick { "quick" } else { "full" }, dir.display());
    if args.iter().any(|a| a == "--instructions") {
        // Instructions per operation under callgrind (issue 15): `cargo bench --workspace --bench throughput -- --instructions`.
        instructions::figures(dir, &mut report, sizes.quick)?;
        report.figures.insert("instructions_mode".to_owned(), json!(if sizes.quick { "quick" } else { "full" }));
        report.finish(&args, "instructions", sizes.quick)?;
        return Ok(());
    }
    if args.iter().any(|a| a == "--declare-only") {
        // Only the cost of a declare of 100,000 tasks: `cargo bench --workspace --bench throughput -- --declare-only`.
        declare_figures(dir, &mut report)?;
        report.finish(&args, "declare", sizes.quick)?;
        return Ok(());
    }
    if args.iter().any(|a| a == "--cli-batch-only") {
        // Only the batch of begins against separate CLI begins (issue 12):
        // `cargo bench --workspace --bench throughput -- --cli-batch-only [--quick]`.
        cli_batch_figures(&cli_binary()?, &dir.join("cli-batch"), &mut report, if sizes.quick { 201 } else { 1002 })?;
        report.finish(&args, "cli-batch", sizes.quick)?;
        return Ok(());
    }
    if args.iter().any(|a| a == "--gc-apply-only") {
        // How long a begin of another process waits while `gc apply --execute` deletes 30,000
        // files (issue 39): `cargo bench --workspace --bench throughput -- --gc-apply-only [--quick]`.
        gc_apply_figures(&cli_binary()?, &dir.join("gc-apply"), &mut report, if sizes.quick { 3_000 } else { 30_000 })?;
        report.finish(&args, "gc-apply", sizes.quick)?;
        return Ok(());
    }
    if args.iter().any(|a| a == "--server-only") {
        // Only the server's figures (issue 12): `cargo bench --workspace --bench throughput -- --server-only`.
        server_figures(dir, &mut report, sizes)?;
        report.finish(&args, "server", sizes.quick)?;
        return Ok(());
    }
    if args.iter().any(|a| a == "--postgres-only") {
        // Only the PostgreSQL section (issue 14): `cargo bench --workspace --bench throughput -- --postgres-only`.
        postgres::figures(dir, &mut report, sizes)?;
        report.finish(&args, "postgres", sizes.quick)?;
        return Ok(());
    }
    if args.iter().any(|a| a == "--verify-only") {
        // Only verify's cost against history (issue 10): `cargo bench --workspace --bench throughput -- --verify-only`.
        verify_figures(dir, &mut report)?;
        report.finish(&args, "verify", sizes.quick)?;
        return Ok(());
    }
    if args.iter().any(|a| a == "--table-scaling") {
        // `--n 100000` (or `--n 100,1000`) measures those sizes alone, recorded under their own
        // name when it is one size (the full set takes long at 100,000).
        let only: Option<Vec<usize>> = args
            .iter()
            .position(|a| a == "--n")
            .and_then(|i| args.get(i + 1))
            .map(|v| v.split(',').map(str::parse).collect::<Result<Vec<usize>, _>>())
            .transpose()
            .map_err(|e| format!("--n takes sizes such as 100,1000: {e}"))?;
        let sizes_n: &[usize] = match &only {
            Some(n) => n,
            None if sizes.quick => &[100, 1000],
            None => &[100, 1000, 10_000, 100_000],
        };
        table_scaling(dir, &mut report, sizes_n, if sizes.quick { 5 } else { 9 })?;
        let name = match only.as_deref() {
            Some([n]) => format!("table-scaling-{n}p"),
            _ => "table-scaling".to_owned(),
        };
        report.finish(&args, &name, sizes.quick)?;
        return Ok(());
    }
    if args.iter().any(|a| a == "--views-only") {
        // Only the cost of views (issues 13, 28): `cargo bench --workspace --bench throughput -- --views-only`.
        view_figures(dir, &mut report, if sizes.quick { 3 } else { 7 })?;
        view_expiry_figure(dir, &mut report)?;
        delta_figures(dir, &mut report, if sizes.quick { 5 } else { 15 })?;
        report.finish(&args, "views", sizes.quick)?;
        return Ok(());
    }

    // (a) to (d), one durable commit at a time, interleaved op by op (fsync, redb, redb in
    // manifestdb's mode, a manifestdb publish, a SQLite publish, a SQLite commit, and again),
    // so that every figure samples the same moments of a noisy shared disk.
    let store = Store::open(dir.join("main.redb"), &staging)?;
    // The same operations on a writer without cross-process readers (`exclusive_options`).
    let exclusive = Store::open_with_options(dir.join("exclusive.redb"), dir.join("exclusive-staging"), &exclusive_options())?;
    let sqlite_db = dir.join("main.sqlite");
    let sqlite_staging = dir.join("sqlite-staging");
    let mut conn = sqlite_open(&sqlite_db)?;
    let mut raw = RawFile::open(dir)?;
    let mut redb_exclusive = BareRedb::open(&dir.join("bare-exclusive.redb"), ConcurrencyMode::ExclusiveWriter)?;
    let mut redb_single = BareRedb::open(&dir.join("bare-single.redb"), ConcurrencyMode::SingleWriter)?;
    let mut sqlite_bare = BareSqlite::open(&dir.join("bare.sqlite"))?;
    let names = [
        "fsync_4k",
        "redb_commit",
        "redb_single_writer_commit",
        "publish_1task",
        "sqlite_publish_1task",
        "sqlite_commit",
        "publish_1task_exclusive",
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(sizes.interleaved); names.len()];
    for i in 0..sizes.interleaved {
        samples[0].push(raw.op()?);
        samples[1].push(redb_exclusive.op()?);
        samples[2].push(redb_single.op()?);
        samples[3].extend(md_one_task_publishes(&store, "pub", &format!("one-{i}"), &partition(0), 1)?);
        samples[4].extend(sqlite_one_task_publishes(&mut conn, &sqlite_staging, "pub", &format!("one-{i}"), 1)?);
        samples[5].push(sqlite_bare.op()?);
        samples[6].extend(md_one_task_publishes(&exclusive, "pub", &format!("one-{i}"), &partition(0), 1)?);
    }
    drop((raw, redb_exclusive, redb_single, sqlite_bare));
    for (name, times) in names.iter().zip(samples) {
        let mean = times.iter().sum::<Duration>().as_secs_f64() / times.len() as f64;
        report.put(&format!("{name}_mean_per_s"), 1.0 / mean, "/s (1 / mean latency)");
        let p50 = median_ms(times);
        report.put(&format!("{name}_p50_ms"), p50, "ms (median latency)");
        report.put(&format!("{name}_per_s"), 1000.0 / p50, "/s (1 / median latency)");
    }

    // (c) and (d): attempt cycles from 1, 8 and 64 threads, in rounds.
    // Each figure also records the process's CPU time per cycle: on two cores, once flushes
    // are cheap, CPU (not the disk) bounds what batching can gain.
    let mut tally: BTreeMap<String, (u64, Duration, f64)> = BTreeMap::new();
    let mut add = |key: String, cpu_before: f64, (count, elapsed): (u64, Duration)| -> Res<()> {
        let entry = tally.entry(key).or_default();
        entry.0 += count;
        entry.1 += elapsed;
        entry.2 += cpu_seconds()? - cpu_before;
        Ok(())
    };
    for round in 0..sizes.rounds {
        println!("attempt cycles, round {} of {}", round + 1, sizes.rounds);
        for threads in [1, 8, 64] {
            let run = format!("cycles-{threads}-{round}");
            let cpu = cpu_seconds()?;
            add(format!("attempt_cycles_per_s_{threads}t"), cpu, md_cycles(&store, &run, threads, sizes.measure)?)?;
            if threads == 1 {
                let cpu = cpu_seconds()?;
                add("attempt_cycles_fused_per_s_1t".to_owned(), cpu, md_cycles_fused(&store, &run, sizes.measure)?)?;
                let cpu = cpu_seconds()?;
                add("attempt_cycles_exclusive_per_s_1t".to_owned(), cpu, md_cycles(&exclusive, &run, 1, sizes.measure)?)?;
                let cpu = cpu_seconds()?;
                add("attempt_cycles_fused_exclusive_per_s_1t".to_owned(), cpu, md_cycles_fused(&exclusive, &run, sizes.measure)?)?;
            }
            let cpu = cpu_seconds()?;
            add(
                format!("sqlite_attempt_cycles_per_s_{threads}t"),
                cpu,
                sqlite_cycles(&sqlite_db, &sqlite_staging, &run, threads, sizes.measure)?,
            )?;
        }
    }
    drop(conn);
    for (key, (count, elapsed, cpu)) in &tally {
        let what = if key.contains("fused") { "cycles/s (begin + finish_and_validate)" } else { "cycles/s (begin, finish, validate)" };
        report.put(key, per_second(*count, *elapsed), what);
        let cpu_key = key.replace("_per_s_", "_cpu_us_per_cycle_");
        report.put(&cpu_key, cpu * 1e6 / (*count).max(1) as f64, "us CPU per cycle (user + system)");
    }
    report.put("mkdir_staging_dir_us", mkdir_us(dir, if sizes.quick { 2_000 } else { 20_000 })?, "us (mean)");

    // (e) scaling. Per-task publish cost: fresh datasets of t_small and t_mid tasks (median of
    // 3 each), and the first and the last of the runs of t_big tasks that build the big dataset
    // (one sample each: a third fresh build of t_big tasks would cost as much as the big
    // dataset's runs, so `per_task_100k_vs_1k` compares one sample with a median of 3).
    for (key, tasks) in [("t10", sizes.t_small), ("t1k", sizes.t_mid)] {
        let times = (0..3)
            .map(|i| md_build_dataset(&store, &format!("scale-{key}-{i}"), 1, tasks).map(|t| t.first().copied().unwrap_or_default()))
            .collect::<Res<Vec<_>>>()?;
        report.put(&format!("publish_us_per_task_{key}"), median_ms(times) * 1000.0 / tasks as f64, "us/task (median of 3)");
    }
    println!("building the big dataset: {} runs of {} tasks", sizes.big_runs, sizes.t_big);
    let setup = Instant::now();
    let times = md_build_dataset(&store, "big", sizes.big_runs, sizes.t_big)?;
    let big_partitions = sizes.big_runs * sizes.t_big;
    report.put("setup_big_dataset_s", setup.elapsed().as_secs_f64(), "s (setup, not a figure of merit)");
    // The first run publishes into a fresh dataset, as the t10 and t1k runs do; the last one
    // into a dataset already holding all the other runs' partitions.
    let first = times.first().copied().unwrap_or_default();
    let last = times.last().copied().unwrap_or_default();
    report.put("publish_us_per_task_t100k", first.as_secs_f64() * 1e6 / sizes.t_big as f64, "us/task (into a fresh dataset)");
    report.put("publish_us_per_task_t100k_last_run", last.as_secs_f64() * 1e6 / sizes.t_big as f64, "us/task (into the big dataset)");
    md_build_dataset(&store, "small", 1, 10)?;
    let samples = md_interleaved_publishes(&store, &["small", "big"], "one", sizes.publishes)?;
    let mut samples = samples.into_iter();
    report.put("publish_1partition_ms_into_10", median_ms(samples.next().unwrap_or_default()), "ms (median)");
    report.put("publish_1partition_ms_into_1m", median_ms(samples.next().unwrap_or_default()), "ms (median)");
    report.put("lookups_per_s", md_lookups(&store, "big", big_partitions, sizes.measure)?, "lookups/s (one snapshot)");

    // Views: publish with vs without, and the build alone.
    println!("views: publishes of 1 and 1,000 partitions with and without views; expiry of 40 views");
    view_figures(dir, &mut report, if sizes.quick { 3 } else { 7 })?;
    delta_figures(dir, &mut report, if sizes.quick { 5 } else { 15 })?;
    view_expiry_figure(dir, &mut report)?;

    // The server: cycles through it from 1, 8 and 64 clients beside the library and the CLI.
    server_figures(dir, &mut report, sizes)?;

    // PostgreSQL: publishes and attempt cycles at 1, 8 and 64 clients beside redb and SQLite.
    postgres::figures(dir, &mut report, sizes)?;

    // History: 10 vs `history` earlier generations.
    println!("building a history of {} generations", sizes.history);
    let setup = Instant::now();
    md_build_history(&store, "hist-10", 10)?;
    md_build_history(&store, "hist-long", sizes.history)?;
    report.put("setup_history_s", setup.elapsed().as_secs_f64(), "s (setup, not a figure of merit)");
    let samples = md_interleaved_publishes(&store, &["hist-10", "hist-long"], "one", sizes.publishes)?;
    let mut samples = samples.into_iter();
    report.put("publish_ms_after_10_generations", median_ms(samples.next().unwrap_or_default()), "ms (median)");
    report.put("publish_ms_after_100k_generations", median_ms(samples.next().unwrap_or_default()), "ms (median)");

    // Verify's cost against history: linear, so 8 times the generations cost about 8 times.
    println!("verify on 1k and 8k generations");
    verify_figures(dir, &mut report)?;

    // Peak RSS of a fresh process holding the store (it holds every attempt made above).
    drop(store);
    report.put("rss_mib_1m_attempts", rss_of_child(&dir.join("main.redb"), &staging, big_partitions)?, "MiB (VmHWM of a child)");

    fsyncs_per_operation(&mut report, "", &manifestdb::StoreOptions::default())?;
    fsyncs_per_operation(&mut report, "exclusive_", &exclusive_options())?;
    declare_figures(dir, &mut report)?;

    // Ratios.
    report.ratio("publish_vs_redb", "publish_1task_per_s", "redb_commit_per_s");
    report.ratio("publish_vs_redb_single_writer", "publish_1task_per_s", "redb_single_writer_commit_per_s");
    report.ratio("redb_single_writer_vs_redb", "redb_single_writer_commit_per_s", "redb_commit_per_s");
    report.ratio("publish_vs_fsync", "publish_1task_per_s", "fsync_4k_per_s");
    report.ratio("publish_vs_sqlite", "publish_1task_per_s", "sqlite_publish_1task_per_s");
    report.ratio("attempts_vs_sqlite_1t", "attempt_cycles_per_s_1t", "sqlite_attempt_cycles_per_s_1t");
    report.ratio("attempts_fused_vs_sqlite_1t", "attempt_cycles_fused_per_s_1t", "sqlite_attempt_cycles_per_s_1t");
    report.ratio("attempts_exclusive_vs_sqlite_1t", "attempt_cycles_exclusive_per_s_1t", "sqlite_attempt_cycles_per_s_1t");
    report.ratio("attempts_fused_exclusive_vs_sqlite_1t", "attempt_cycles_fused_exclusive_per_s_1t", "sqlite_attempt_cycles_per_s_1t");
    report.ratio("publish_exclusive_vs_sqlite", "publish_1task_exclusive_per_s", "sqlite_publish_1task_per_s");
    report.ratio("attempts_vs_sqlite_8t", "attempt_cycles_per_s_8t", "sqlite_attempt_cycles_per_s_8t");
    // CPU per cycle at one thread against SQLite's (issue 15's target: at most 1).
    report.ratio("attempt_cpu_vs_sqlite_1t", "attempt_cycles_cpu_us_per_cycle_1t", "sqlite_attempt_cycles_cpu_us_per_cycle_1t");
    report.ratio("group_commit_speedup_8t", "attempt_cycles_per_s_8t", "attempt_cycles_per_s_1t");
    report.ratio("group_commit_speedup_64t", "attempt_cycles_per_s_64t", "attempt_cycles_per_s_1t");
    report.ratio("per_task_100k_vs_1k", "publish_us_per_task_t100k", "publish_us_per_task_t1k");
    report.ratio("publish_1m_vs_10_partitions", "publish_1partition_ms_into_1m", "publish_1partition_ms_into_10");
    report.ratio("publish_100k_vs_fresh_history", "publish_ms_after_100k_generations", "publish_ms_after_10_generations");
    report.put("total_s", started.elapsed().as_secs_f64(), "s");

    let sizes_json: BTreeMap<&str, Value> = BTreeMap::from([
        ("mode", json!(if sizes.quick { "quick" } else { "full" })),
        ("interleaved_commits", json!(sizes.interleaved)),
        ("rounds", json!(sizes.rounds)),
        ("measure_s_per_round", json!(sizes.measure.as_secs_f64())),
        ("publishes_timed", json!(sizes.publishes)),
        ("t10", json!(sizes.t_small)),
        ("t1k", json!(sizes.t_mid)),
        ("t100k", json!(sizes.t_big)),
        ("partitions_1m", json!(big_partitions)),
        ("generations_100k", json!(sizes.history)),
        ("attempts_1m", json!(big_partitions)),
    ]);
    report.figures.insert("sizes".to_owned(), json!(sizes_json));
    report.finish(&args, "", sizes.quick)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The server (issue 12): attempt cycles through `manifestdb::server` from 1, 8 and 64 clients
// (each a thread with its own connection over the Unix socket), beside the library called
// directly from as many threads on the same store, and beside the CLI without a server (each
// call a process that opens the store, as a scheduler calling the tool does).

/// Begin + finish + validate of one attempt through the server.
fn server_cycle(client: &mut Client, dataset: &str, run: &str, partition: &str, snapshot: &str, fused: bool) -> Res<()> {
    let task = json!({"dataset": dataset, "run": run, "partition": partition});
    let ticket = client.request("POST", "/v1/attempts/begin", Some(&task))?;
    let attempt = ticket.body["attempt"].as_u64().ok_or_else(|| format!("begin failed: {}", ticket.body))?;
    let finish = json!({
        "dataset": dataset, "run": run, "partition": partition, "attempt": attempt,
        "candidate": {"snapshot": snapshot, "rows": 0, "digest": "sha256:0"},
    });
    if fused {
        // One request, one commit for the candidate and its verdict.
        let verdict = client.request("POST", "/v1/attempts/finish-and-validate", Some(&finish))?;
        if verdict.body["verdict"] != "valid" {
            return Err(format!("finish-and-validate failed: {}", verdict.body).into());
        }
        return Ok(());
    }
    let finished = client.request("POST", "/v1/attempts/finish", Some(&finish))?;
    if finished.status != 200 {
        return Err(format!("finish failed: {}", finished.body).into());
    }
    let validate = json!({"dataset": dataset, "run": run, "partition": partition, "attempt": attempt});
    let verdict = client.request("POST", "/v1/attempts/validate", Some(&validate))?;
    if verdict.body["verdict"] != "valid" {
        return Err(format!("validate failed: {}", verdict.body).into());
    }
    Ok(())
}

/// Attempt cycles per second through the server from `clients` client threads (`fused`: a
/// begin and a finish-and-validate each, else a begin, a finish and a validate).
fn server_cycles(store: &Store, address: &Listen, run: &str, clients: usize, measure: Duration, fused: bool) -> Res<(u64, Duration)> {
    let spec = run_spec("cycles", run, (0..clients).map(partition));
    store.declare_run(&spec)?;
    let count = AtomicU64::new(0);
    let mut connected: Vec<Client> = (0..clients).map(|_| Client::new(address.clone())).collect::<Result<_, _>>()?;
    let start = Instant::now();
    std::thread::scope(|scope| -> Res<()> {
        let handles: Vec<_> = connected
            .iter_mut()
            .enumerate()
            .map(|(t, client)| {
                let (spec, count) = (&spec, &count);
                scope.spawn(move || -> Res<()> {
                    let partition = partition(t);
                    while start.elapsed() < measure {
                        server_cycle(client, "cycles", run, &partition, &spec.snapshot, fused)?;
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        for handle in handles {
            handle.join().map_err(|_| "client thread panicked")??;
        }
        Ok(())
    })?;
    Ok((count.load(Ordering::Relaxed), start.elapsed()))
}

/// The built `manifestdb` binary beside this bench's (`target/release/`), built (or brought up
/// to date) first, so the figures are of this tree's CLI.
fn cli_binary() -> Res<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    let profile_dir = exe.parent().and_then(Path::parent).ok_or("no target directory")?;
    let binary = profile_dir.join("manifestdb");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(cargo).args(["build", "--release", "--quiet", "-p", "manifestdb-cli"]).status()?;
    if !status.success() || !binary.exists() {
        return Err(format!("could not build {}", binary.display()).into());
    }
    Ok(binary)
}

/// Runs the CLI on the store in `dir` with `stdin`; fails unless it exits 0.
fn cli_run(cli: &Path, dir: &Path, args: &[&str], stdin: Option<&str>) -> Res<String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(cli)
        .arg("--dir")
        .arg(dir)
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(text) = stdin {
        child.stdin.take().ok_or("no stdin")?.write_all(text.as_bytes())?;
    }
    let output = child.wait_with_output()?;
    if !output.status.success() {
        return Err(format!("manifestdb {args:?} failed: {}", String::from_utf8_lossy(&output.stderr)).into());
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// `separate` attempt begins as as many `manifestdb attempt begin` processes, beside batches of
/// 1,000 begin lines through `manifestdb batch`, on one store without a server, in one run; the
/// ratio of their begins per second (issue 12's target: at least 50). Measured in
/// [`CLI_BATCH_ROUNDS`] rounds, each a third of the separate begins then one batch (of new
/// partitions of a run of their own), so both sample the same stretches of a shared disk.
fn cli_batch_figures(cli: &Path, dir: &Path, report: &mut Report, separate: usize) -> Res<()> {
    const BATCH: usize = 1000;
    cli_run(cli, dir, &["init"], None)?;
    let per_round = separate.div_ceil(CLI_BATCH_ROUNDS);
    for round in 0..CLI_BATCH_ROUNDS {
        for (run, count) in [(format!("separate-{round}"), per_round), (format!("batch-{round}"), BATCH)] {
            let tasks: Vec<Value> = (0..count).map(|i| json!({"partition": partition(i), "expected_rows": 0})).collect();
            let spec = json!({"dataset": "cli", "run": run, "snapshot": "s", "tasks": tasks, "trust_reported_figures": true}).to_string();
            cli_run(cli, dir, &["run", "declare", "--from", "-"], Some(&spec))?;
        }
    }
    println!(
        "cli: {} separate attempt begins and {CLI_BATCH_ROUNDS} batches of {BATCH}, in {CLI_BATCH_ROUNDS} rounds",
        per_round * CLI_BATCH_ROUNDS
    );
    let (mut separate_elapsed, mut batch_elapsed, mut mkdir_elapsed) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for round in 0..CLI_BATCH_ROUNDS {
        let run = format!("separate-{round}");
        let started = Instant::now();
        for i in 0..per_round {
            cli_run(cli, dir, &["attempt", "begin", "-d", "cli", "-r", &run, "-p", &partition(i)], None)?;
        }
        separate_elapsed += started.elapsed();
        let run = format!("batch-{round}");
        let lines: String = (0..BATCH)
            .map(|i| json!({"op": "begin", "dataset": "cli", "run": run, "partition": partition(i)}).to_string() + "\n")
            .collect();
        let started = Instant::now();
        let out = cli_run(cli, dir, &["batch"], Some(&lines))?;
        batch_elapsed += started.elapsed();
        let ok = out.lines().filter(|l| l.contains("\"ok\":true")).count();
        if ok != BATCH {
            return Err(format!("the batch acknowledged {ok} of {BATCH} begins").into());
        }
        // The kernel's part alone: the two directories each of those begins made (its new
        // partition's and its attempt's), as bare `mkdir`s on the same file system.
        let bare = dir.join(format!("bare-mkdirs-{round}"));
        fs::create_dir(&bare)?;
        let started = Instant::now();
        for i in 0..BATCH {
            let partition_dir = bare.join(partition(i));
            fs::create_dir(&partition_dir)?;
            fs::create_dir(partition_dir.join("@attempt-1"))?;
        }
        mkdir_elapsed += started.elapsed();
        // Made durable untimed: otherwise the next round's batch, whose one `syncfs` flushes
        // the whole file system, would write them out in its own time.
        rustix::fs::syncfs(fs::File::open(&bare)?)?;
    }
    let (separate, batches) = ((per_round * CLI_BATCH_ROUNDS) as u64, CLI_BATCH_ROUNDS as u32);
    report.put("cli_separate_begins_per_s", per_second(separate, separate_elapsed), "begins/s (one CLI process each)");
    report.put(
        "cli_batch_begins_per_s",
        per_second(BATCH as u64 * u64::from(batches), batch_elapsed),
        "begins/s (`manifestdb batch` of 1,000)",
    );
    report.put("cli_1000_separate_begins_s", separate_elapsed.as_secs_f64() * 1000.0 / separate as f64, "s for 1,000 separate begins");
    report.put("cli_batch_of_1000_begins_s", (batch_elapsed / batches).as_secs_f64(), "s for one batch of 1,000 begins (mean)");
    report.put(
        "bare_mkdir_pairs_per_s",
        per_second(BATCH as u64 * u64::from(batches), mkdir_elapsed),
        "pairs of bare mkdirs/s (a batched begin's directories alone)",
    );
    report.ratio("cli_batch_vs_separate_begins", "cli_batch_begins_per_s", "cli_separate_begins_per_s");
    // The ceiling of the ratio above on this file system (a batch that did nothing but its
    // directories), and how close to it the batch came.
    report.ratio("bare_mkdirs_vs_separate_begins", "bare_mkdir_pairs_per_s", "cli_separate_begins_per_s");
    report.ratio("cli_batch_vs_bare_mkdirs", "cli_batch_begins_per_s", "bare_mkdir_pairs_per_s");
    Ok(())
}

/// The longest time a `manifestdb attempt begin` of another process waits for the store while
/// `manifestdb gc apply --execute` deletes `files` files (batches of 1,000, the default): the
/// apply holds the store one batch at a time and lets waiting writers in between batches. The
/// begins run one after another, each a process of its own with `--wait 60s`, for as long as the
/// apply runs; each is timed from its start to its exit (so a begin that found the store free
/// counts its own run, about 10 ms). Printed beside the apply's time per batch, the bound.
fn gc_apply_figures(cli: &Path, dir: &Path, report: &mut Report, files: usize) -> Res<()> {
    const BATCH: usize = 1000;
    cli_run(cli, dir, &["init"], None)?;
    let declare = |run: &str| {
        cli_run(
            cli,
            dir,
            &["run", "declare", "--trust-reported-figures", "-d", "gc", "-r", run, "--snapshot", "s", "--task", "p=0:0"],
            None,
        )
    };
    declare("doomed")?;
    declare("live")?;
    // One attempt of `files` files, abandoned: the plan deletes them all.
    let ticket: Value =
        serde_json::from_str(&cli_run(cli, dir, &["--json", "attempt", "begin", "-d", "gc", "-r", "doomed", "-p", "p=0"], None)?)?;
    let staging_dir = ticket["staging_dir"].as_str().ok_or("no staging dir")?.to_owned();
    let attempt = ticket["attempt"].as_u64().ok_or("no attempt number")?.to_string();
    for i in 0..files {
        fs::write(Path::new(&staging_dir).join(format!("part-{i:06}.csv")), "x\n")?;
    }
    cli_run(cli, dir, &["attempt", "abandon", "-d", "gc", "-r", "doomed", "-p", "p=0", "-a", &attempt], None)?;
    let plan: Value =
        serde_json::from_str(&cli_run(cli, dir, &["--json", "gc", "plan", "--age-threshold", "0s", "--force-short-threshold"], None)?)?;
    let id = plan["plan"].as_u64().ok_or("no plan id")?.to_string();
    println!("gc apply: {files} files in batches of {BATCH}, `attempt begin`s of another process meanwhile");
    let started = Instant::now();
    let mut apply = std::process::Command::new(cli)
        .arg("--dir")
        .arg(dir)
        .args(["--json", "gc", "apply", "--plan", &id, "--execute"])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    // The apply's document (every deleted path) is read as it comes: a full pipe would stop it.
    let mut pipe = apply.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut pipe, &mut bytes).map(|_| bytes)
    });
    let mut waits: Vec<Duration> = Vec::new();
    while apply.try_wait()?.is_none() {
        let begun = Instant::now();
        cli_run(cli, dir, &["--wait", "60s", "attempt", "begin", "-d", "gc", "-r", "live", "-p", "p=0"], None)?;
        waits.push(begun.elapsed());
    }
    let applied = started.elapsed();
    let output = apply.wait_with_output()?;
    if !output.status.success() {
        return Err(format!("gc apply failed: {} (its message above)", output.status).into());
    }
    let stdout = reader.join().map_err(|_| "the reader of the apply's output panicked")??;
    let doc: Value = serde_json::from_slice(&stdout)?;
    let deleted = doc["deleted"].as_array().map_or(0, Vec::len);
    if deleted != files {
        return Err(format!("gc apply deleted {deleted} of {files} files").into());
    }
    waits.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let batches = files.div_ceil(BATCH);
    let k = files / 1000;
    report.put(
        &format!("gc_apply_{k}k_files_s"),
        applied.as_secs_f64(),
        &format!("s (gc apply --execute of {files} files, batches of {BATCH}, begins of another process running meanwhile)"),
    );
    report.put(
        &format!("gc_apply_{k}k_batch_ms"),
        ms(applied) / batches as f64,
        "ms (the apply's time per batch of 1,000 files: the bound on a begin's wait)",
    );
    report.put(
        &format!("gc_apply_{k}k_begins"),
        waits.len() as f64,
        "begins (attempt begin processes that ran during the apply, one after another)",
    );
    report.put(
        &format!("gc_apply_{k}k_begin_wait_median_ms"),
        waits.get(waits.len() / 2).map_or(f64::NAN, |d| ms(*d)),
        "ms (median wall time of those begins, the process's own run included)",
    );
    report.put(
        &format!("gc_apply_{k}k_begin_wait_max_ms"),
        waits.last().map_or(f64::NAN, |d| ms(*d)),
        "ms (the longest of those begins: the longest a begin waited during the apply)",
    );
    Ok(())
}

/// Rounds of [`cli_batch_figures`].
const CLI_BATCH_ROUNDS: usize = 3;

/// Attempt cycles per second through the CLI without a server: three processes per cycle,
/// each opening the store for writing.
fn cli_cycles(cli: &Path, dir: &Path, run: &str, measure: Duration) -> Res<(u64, Duration)> {
    let call = |args: &[&str]| -> Res<Value> {
        let output = std::process::Command::new(cli).arg("--dir").arg(dir).arg("--json").args(args).output()?;
        if !output.status.success() {
            return Err(format!("manifestdb {args:?} failed: {}", String::from_utf8_lossy(&output.stderr)).into());
        }
        Ok(serde_json::from_slice(&output.stdout)?)
    };
    let snapshot = format!("snap-{run}");
    call(&["run", "declare", "--trust-reported-figures", "-d", "cycles", "-r", run, "--snapshot", &snapshot, "--task", "p=0:0"])?;
    let mut count = 0;
    let start = Instant::now();
    while start.elapsed() < measure {
        let ticket = call(&["attempt", "begin", "-d", "cycles", "-r", run, "-p", "p=0"])?;
        let attempt = ticket["attempt"].as_u64().ok_or("no attempt number")?.to_string();
        let key = ["-d", "cycles", "-r", run, "-p", "p=0", "--attempt", attempt.as_str()];
        let mut finish = vec!["attempt", "finish"];
        finish.extend(key);
        finish.extend(["--snapshot", snapshot.as_str(), "--rows", "0", "--digest", "sha256:0"]);
        call(&finish)?;
        let mut validate = vec!["attempt", "validate"];
        validate.extend(key);
        call(&validate)?;
        count += 1;
    }
    Ok((count, start.elapsed()))
}

/// The server figures and their ratios, measured in rounds so that each variant samples the
/// same stretches of the disk.
fn server_figures(dir: &Path, report: &mut Report, sizes: Sizes) -> Res<()> {
    let served_dir = dir.join("served");
    fs::create_dir_all(&served_dir)?;
    let store = Arc::new(Store::open(served_dir.join("store.redb"), served_dir.join("staging"))?);
    let server = Server::start(Arc::clone(&store), &ServerOptions::unix(socket_path(&served_dir.join("store.redb"))))?;
    let cli_dir = dir.join("cli");
    let cli = cli_binary()?;
    let output = std::process::Command::new(&cli).arg("--dir").arg(&cli_dir).arg("init").output()?;
    if !output.status.success() {
        return Err(format!("manifestdb init failed: {}", String::from_utf8_lossy(&output.stderr)).into());
    }
    let mut tally: BTreeMap<String, (u64, Duration)> = BTreeMap::new();
    for round in 0..sizes.rounds {
        println!("server attempt cycles, round {} of {}", round + 1, sizes.rounds);
        for clients in [1, 8, 64] {
            let run = format!("server-{clients}-{round}");
            let (count, elapsed) = server_cycles(&store, server.address(), &run, clients, sizes.measure, false)?;
            let entry = tally.entry(format!("server_attempt_cycles_per_s_{clients}c")).or_default();
            (entry.0, entry.1) = (entry.0 + count, entry.1 + elapsed);
            if clients != 8 {
                let run = format!("server-fused-{clients}-{round}");
                let (count, elapsed) = server_cycles(&store, server.address(), &run, clients, sizes.measure, true)?;
                let entry = tally.entry(format!("server_fused_attempt_cycles_per_s_{clients}c")).or_default();
                (entry.0, entry.1) = (entry.0 + count, entry.1 + elapsed);
            }
            let run = format!("direct-{clients}-{round}");
            let (count, elapsed) = md_cycles(&store, &run, clients, sizes.measure)?;
            let entry = tally.entry(format!("server_store_direct_cycles_per_s_{clients}t")).or_default();
            (entry.0, entry.1) = (entry.0 + count, entry.1 + elapsed);
        }
        let (count, elapsed) = cli_cycles(&cli, &cli_dir, &format!("cli-{round}"), sizes.measure)?;
        let entry = tally.entry("cli_no_server_attempt_cycles_per_s".to_owned()).or_default();
        (entry.0, entry.1) = (entry.0 + count, entry.1 + elapsed);
    }
    server.shutdown()?;
    // The same through a server holding the store alone (`serve --exclusive`: one flush per
    // commit, no process but the server opens the file), side by side with that store direct.
    let exclusive_dir = dir.join("served-exclusive");
    fs::create_dir_all(&exclusive_dir)?;
    let exclusive =
        Arc::new(Store::open_with_options(exclusive_dir.join("store.redb"), exclusive_dir.join("staging"), &exclusive_options())?);
    let exclusive_server = Server::start(Arc::clone(&exclusive), &ServerOptions::unix(socket_path(&exclusive_dir.join("store.redb"))))?;
    for round in 0..sizes.rounds {
        println!("exclusive server attempt cycles, round {} of {}", round + 1, sizes.rounds);
        for clients in [1, 64] {
            let run = format!("server-{clients}-{round}");
            let (count, elapsed) = server_cycles(&exclusive, exclusive_server.address(), &run, clients, sizes.measure, false)?;
            let entry = tally.entry(format!("server_exclusive_attempt_cycles_per_s_{clients}c")).or_default();
            (entry.0, entry.1) = (entry.0 + count, entry.1 + elapsed);
            let run = format!("server-fused-{clients}-{round}");
            let (count, elapsed) = server_cycles(&exclusive, exclusive_server.address(), &run, clients, sizes.measure, true)?;
            let entry = tally.entry(format!("server_exclusive_fused_attempt_cycles_per_s_{clients}c")).or_default();
            (entry.0, entry.1) = (entry.0 + count, entry.1 + elapsed);
            let run = format!("direct-{clients}-{round}");
            let (count, elapsed) = md_cycles(&exclusive, &run, clients, sizes.measure)?;
            let entry = tally.entry(format!("server_exclusive_store_direct_cycles_per_s_{clients}t")).or_default();
            (entry.0, entry.1) = (entry.0 + count, entry.1 + elapsed);
        }
    }
    exclusive_server.shutdown()?;
    for (key, (count, elapsed)) in &tally {
        let unit = if key.contains("fused") {
            "cycles/s (2 durable writes each: begin, finish-and-validate)"
        } else {
            "cycles/s (3 durable writes each)"
        };
        report.put(key, per_second(*count, *elapsed), unit);
    }
    for n in [1, 64] {
        report.ratio(
            &format!("server_exclusive_vs_direct_{n}"),
            &format!("server_exclusive_attempt_cycles_per_s_{n}c"),
            &format!("server_exclusive_store_direct_cycles_per_s_{n}t"),
        );
        report.ratio(
            &format!("server_exclusive_vs_server_{n}"),
            &format!("server_exclusive_attempt_cycles_per_s_{n}c"),
            &format!("server_attempt_cycles_per_s_{n}c"),
        );
        report.ratio(
            &format!("server_fused_vs_server_{n}"),
            &format!("server_fused_attempt_cycles_per_s_{n}c"),
            &format!("server_attempt_cycles_per_s_{n}c"),
        );
        report.ratio(
            &format!("server_exclusive_fused_vs_server_{n}"),
            &format!("server_exclusive_fused_attempt_cycles_per_s_{n}c"),
            &format!("server_attempt_cycles_per_s_{n}c"),
        );
    }
    for n in [1, 8, 64] {
        report.ratio(
            &format!("server_vs_direct_{n}"),
            &format!("server_attempt_cycles_per_s_{n}c"),
            &format!("server_store_direct_cycles_per_s_{n}t"),
        );
    }
    report.ratio("server_64c_vs_cli_no_server", "server_attempt_cycles_per_s_64c", "cli_no_server_attempt_cycles_per_s");
    // 1,000 begins through `manifestdb batch` against separate CLI begins (1,000 in the full
    // run, 200 in the quick one).
    cli_batch_figures(&cli, &dir.join("cli-batch"), report, if sizes.quick { 200 } else { 1000 })?;
    Ok(())
}

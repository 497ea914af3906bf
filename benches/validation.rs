//! Validation that reads the data: throughput of `validate_attempt` on a run with a grain
//! (rows per second and MB per second, CSV and Parquet partitions of 1M rows), beside DuckDB
//! computing the same count, sum and duplicate-key check on the same files in the same run,
//! both on one core; and the peak memory of validating a partition of 10M unique keys.
//!
//! `cargo bench --workspace --bench validation` runs the full sizes; `-- --quick` runs 100k rows and 1M
//! keys (a smoke run). DuckDB comes from Python (`pip install duckdb`); without it the DuckDB
//! lines say so and the rest still runs. Every figure is printed; nothing is asserted.
//!
//! `-- --only csv` or `-- --only parquet` measures that format alone, without DuckDB and the
//! peak-memory child (for a profiler: `valgrind --tool=callgrind
//! --toggle-collect='*read_partition*' <bench binary> --quick --only parquet` counts the
//! instructions of reading and checking alone).
//!
//! Each figure is the best of five runs, in wall-clock seconds and in the CPU seconds of the
//! process (`CLOCK_PROCESS_CPUTIME_ID` here, `time.process_time()` for DuckDB): on a shared,
//! loaded machine the CPU figures are the steadier comparison, since time spent waiting for a
//! core counts in wall time only.
//!
//! The peak memory figure comes from a child process (this binary, re-executed) that writes
//! its partition streaming and then validates it, so its `VmHWM` is validation's own.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use manifestdb::{Candidate, DataFormat, FileCheck, Grain, RunSpec, Store, TaskKey, TaskSpec, describe_file};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const CHILD_ENV: &str = "MANIFESTDB_VALIDATION_BENCH_CHILD";

/// Row `i` of a partition with unique (store, item) keys.
fn row(i: u64) -> (i64, String, i64) {
    ((i / 1000) as i64, format!("item-{:04}", i % 1000), (i % 97) as i64)
}

fn write_csv(path: &Path, rows: u64) -> Result<(), BoxError> {
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    writeln!(out, "store,item,units")?;
    for i in 0..rows {
        let (store, item, units) = row(i);
        writeln!(out, "{store},{item},{units}")?;
    }
    out.flush()?;
    Ok(())
}

fn write_parquet(path: &Path, rows: u64) -> Result<(), BoxError> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("store", DataType::Int64, false),
        Field::new("item", DataType::Utf8, false),
        Field::new("units", DataType::Int64, false),
    ]));
    let mut writer = parquet::arrow::ArrowWriter::try_new(File::create(path)?, schema.clone(), None)?;
    let mut start = 0;
    while start < rows {
        let end = (start + 65_536).min(rows);
        let rows: Vec<_> = (start..end).map(row).collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>())),
            Arc::new(StringArray::from(rows.iter().map(|r| r.1.as_str()).collect::<Vec<_>>())),
            Arc::new(Int64Array::from(rows.iter().map(|r| r.2).collect::<Vec<_>>())),
        ];
        writer.write(&RecordBatch::try_new(schema.clone(), columns)?)?;
        start = end;
    }
    writer.close()?;
    Ok(())
}

fn expected_total(rows: u64) -> i64 {
    (0..rows).map(|i| row(i).2).sum()
}

/// This process's CPU time so far, in seconds (0 if the clock cannot be read).
fn cpu_seconds() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable timespec for the call's duration.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } != 0 {
        return 0.0;
    }
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Wall-clock and CPU seconds of one measured call.
#[derive(Clone, Copy)]
struct Timing {
    wall: f64,
    cpu: f64,
}

impl Timing {
    fn best(self, other: Timing) -> Timing {
        Timing { wall: self.wall.min(other.wall), cpu: self.cpu.min(other.cpu) }
    }
}

/// Validates a partition file through the store; returns the seconds `validate_attempt` took.
fn validate(dir: &Path, name: &str, format: DataFormat, rows: u64, file: &Path) -> Result<Timing, BoxError> {
    let root = dir.join(format!("store-{name}"));
    let store = Store::open(root.join("store.redb"), root.join("staging"))?;
    store.declare_run(&RunSpec {
        dataset: "bench".into(),
        run: name.into(),
        snapshot: "s".into(),
        tasks: vec![TaskSpec { partition: "p".into(), expected_rows: rows, expected_total: Some(expected_total(rows)) }],
        grain: Some(Grain::new(format, &["store", "item"], "units")),
        trust_reported_figures: false,
    })?;
    let ticket = store.begin_attempt(&TaskKey::new("bench", name, "p"))?;
    let leaf = file.file_name().and_then(|n| n.to_str()).ok_or("file name")?;
    fs::hard_link(file, ticket.staging_dir.join(leaf))?;
    let candidate =
        Candidate { snapshot: "s".into(), rows: None, total: None, digest: None, files: vec![describe_file(&ticket.staging_dir, leaf)?] };
    store.finish_attempt(&ticket.key, &candidate)?;
    let (started, cpu) = (Instant::now(), cpu_seconds());
    let verdict = store.validate_attempt(&ticket.key, FileCheck::Size)?;
    let timing = Timing { wall: started.elapsed().as_secs_f64(), cpu: cpu_seconds() - cpu };
    if !verdict.is_valid() {
        return Err(format!("the bench partition was refused: {verdict:?}").into());
    }
    Ok(timing)
}

const DUCKDB: &str = r#"
import sys, time, duckdb
con = duckdb.connect()
con.execute("SET threads=1")
for path, reader in [(sys.argv[1], "read_csv('%s', header=true, columns={'store':'BIGINT','item':'VARCHAR','units':'BIGINT'})"),
                     (sys.argv[2], "read_parquet('%s')")]:
    q = "select count(*), sum(units), count(*) - count(distinct (store, item)) from " + (reader % path)
    best, best_cpu = None, None
    for _ in range(5):
        t, c = time.perf_counter(), time.process_time()
        r = con.execute(q).fetchone()
        t, c = time.perf_counter() - t, time.process_time() - c
        best = t if best is None else min(best, t)
        best_cpu = c if best_cpu is None else min(best_cpu, c)
    print(best, best_cpu, r[0], r[1], r[2])
"#;

/// DuckDB's best-of-five seconds for the CSV and the Parquet query, or why there are none.
fn duckdb(csv: &Path, parquet: &Path) -> Result<Vec<(Timing, String)>, String> {
    let output = Command::new("python3")
        .args(["-c", DUCKDB, &csv.display().to_string(), &parquet.display().to_string()])
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "DuckDB unavailable (pip install duckdb): {}",
            String::from_utf8_lossy(&output.stderr).lines().last().unwrap_or("")
        ));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let figures = |line: &str| {
        let mut fields = line.splitn(3, ' ');
        let wall = fields.next()?.parse().ok()?;
        let cpu = fields.next()?.parse().ok()?;
        Some((Timing { wall, cpu }, fields.next()?.to_owned()))
    };
    Ok(text.lines().filter_map(figures).collect())
}

fn vm_hwm_kib() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The child: write `rows` unique keys as CSV streaming, validate, print the peak memory.
fn child(rows: u64) -> Result<(), BoxError> {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let path = dir.path().join("keys.csv");
    write_csv(&path, rows)?;
    let before = vm_hwm_kib().unwrap_or(0);
    let seconds = validate(dir.path(), "memory", DataFormat::Csv, rows, &path)?.wall;
    let after = vm_hwm_kib().unwrap_or(0);
    println!(
        "peak memory validating {rows} unique keys (CSV, {:.0} MB): VmHWM {:.1} MiB (before validation {:.1} MiB), {seconds:.2} s",
        fs::metadata(&path)?.len() as f64 / 1e6,
        after as f64 / 1024.0,
        before as f64 / 1024.0
    );
    Ok(())
}

fn main() -> Result<(), BoxError> {
    if let Some(rows) = std::env::var(CHILD_ENV).ok().and_then(|v| v.parse().ok()) {
        return child(rows);
    }
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).map(String::as_str);
    let (rows, memory_rows): (u64, u64) = if quick { (100_000, 1_000_000) } else { (1_000_000, 10_000_000) };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let csv = dir.path().join("part.csv");
    let parquet = dir.path().join("part.parquet");
    write_csv(&csv, rows)?;
    write_parquet(&parquet, rows)?;
    println!("validation at a grain ({} mode): {rows} rows, unique (store, item) keys, one core", if quick { "quick" } else { "full" });
    // The run's conditions: on a shared machine the figures mean little without them.
    let load = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("  load average (1, 5, 15 min) at the start: {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(", "));
    let duck = if only.is_some() { Err("not run with --only".to_owned()) } else { duckdb(&csv, &parquet) };
    for (i, (format, path)) in [(DataFormat::Csv, &csv), (DataFormat::Parquet, &parquet)].into_iter().enumerate() {
        if only.is_some_and(|name| name != format.name()) {
            continue;
        }
        let bytes = fs::metadata(path)?.len() as f64;
        // Best of five, like DuckDB's figure.
        let mut best = Timing { wall: f64::INFINITY, cpu: f64::INFINITY };
        for round in 0..5 {
            best = best.best(validate(dir.path(), &format!("{}-{round}", format.name()), format, rows, path)?);
        }
        println!(
            "  manifestdb {:<8} {:>6.3} s ({:.3} s CPU)  {:>10.0} rows/s  {:>7.1} MB/s  ({:.1} MB)",
            format.name(),
            best.wall,
            best.cpu,
            rows as f64 / best.wall,
            bytes / best.wall / 1e6,
            bytes / 1e6
        );
        match &duck {
            Ok(figures) => match figures.get(i) {
                Some((duck, result)) => println!(
                    "  duckdb     {:<8} {:>6.3} s ({:.3} s CPU)  {:>10.0} rows/s  {:>7.1} MB/s  (count, sum, duplicates: {result}); manifestdb at {:.2}x DuckDB's speed ({:.2}x in CPU time)",
                    format.name(),
                    duck.wall,
                    duck.cpu,
                    rows as f64 / duck.wall,
                    bytes / duck.wall / 1e6,
                    duck.wall / best.wall,
                    duck.cpu / best.cpu
                ),
                None => println!("  duckdb     {:<8} no figure", format.name()),
            },
            Err(why) => println!("  duckdb     {:<8} {why}", format.name()),
        }
    }
    if only.is_some() {
        return Ok(());
    }
    let status = Command::new(std::env::current_exe()?).env(CHILD_ENV, memory_rows.to_string()).status()?;
    if !status.success() {
        return Err(format!("the peak-memory child failed: {status}").into());
    }
    Ok(())
}

//! The main job: a small single-host scheduler runs a daily-units pipeline through manifestdb.
//!
//! Seeded sales for a few days and regions are aggregated into daily units per store-item,
//! one task per (date, region) partition, on worker threads. Two uncertain outcomes are
//! injected: a worker writes its file, reports its candidate and dies before its
//! acknowledgement reaches the scheduler; and a slow attempt exceeds the scheduler's timeout
//! and is retried while it is still running. A third attempt writes a duplicated store-item
//! under correct-looking counts: the run declares its grain (`store, item`, measure `units`),
//! so validation reads the file, names the duplicate key and refuses it, and the retry is the
//! one published. Every finished attempt is validated, the run is
//! published in one transaction, side effects are emitted once per partition, and the totals
//! read back through the current generation are printed beside the input's true totals. A
//! rerun on the same input snapshot, whose workers write their rows in another order, must
//! reproduce every canonical digest (computed by the store from the rows, not the bytes).
//!
//! The store publishes views (`STORE_DIR/views`), with a directory tree for this dataset (the
//! per-dataset choice `ViewTrees`; a new view root has none, so a publish costs what it
//! changes): after the publish, `views/daily_units/current` names the generation's directory
//! `v<N>`, a plain directory tree holding exactly the published files, one per partition, under
//! `date=…/region=…` directories, with `_manifest.json`. Give an engine the resolved directory,
//! never a glob through `current` (which the next publish moves while the engine lists and
//! reads): `V=$(realpath STORE_DIR/views/daily_units/current)` (or the first line of
//! `manifestdb view daily_units`), then DuckDB: `read_csv('$V/**/*.csv', hive_partitioning =
//! true)`. Every generation also has its exact file list (`manifestdb view daily_units
//! --files`, `Store::view_files`), with or without a tree.
//!
//! Exits non-zero if any total differs from the input's.
//!
//! ```text
//! cargo run --release --example daily_units [-- STORE_DIR]
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use manifestdb::{
    AttemptStatus, AttemptTicket, Candidate, DataFormat, EffectKey, FileCheck, Grain, PublishOptions, PublishOutcome, RunSpec, Store,
    StoreOptions, TaskKey, TaskSpec, ViewOptions, ViewTrees, describe_file,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const DATASET: &str = "daily_units";
const DAYS: [&str; 3] = ["2026-11-27", "2026-11-28", "2026-11-29"];
const REGIONS: [&str; 4] = ["eu", "us", "apac", "latam"];
const SEED: u64 = 20261129;
const WORKERS: usize = 4;
/// How long the scheduler waits for an attempt's acknowledgement before retrying it.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(400);

/// One sale in the input: which store sold how many units of which item.
#[derive(Clone, Copy)]
struct Sale {
    store: u32,
    item: u32,
    units: i64,
}

/// The pinned input: sales per partition, and the snapshot id that names them.
struct Input {
    snapshot: String,
    sales: BTreeMap<String, Vec<Sale>>,
}

fn partition_key(day: &str, region: &str) -> String {
    format!("date={day}/region={region}")
}

fn generate_input() -> Input {
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut sales = BTreeMap::new();
    let mut hasher = crc32fast::Hasher::new();
    for day in DAYS {
        for region in REGIONS {
            let count = rng.random_range(300..900);
            let rows: Vec<Sale> = (0..count)
                .map(|_| Sale { store: rng.random_range(1..12), item: rng.random_range(1..40), units: rng.random_range(1..20) })
                .collect();
            for sale in &rows {
                hasher.update(&[sale.store.to_le_bytes(), sale.item.to_le_bytes()].concat());
                hasher.update(&sale.units.to_le_bytes());
            }
            sales.insert(partition_key(day, region), rows);
        }
    }
    Input { snapshot: format!("sales@seed{SEED}-crc{:08x}", hasher.finalize()), sales }
}

/// The step's pure computation: daily units per (store, item), in a canonical order.
fn aggregate(sales: &[Sale]) -> BTreeMap<(u32, u32), i64> {
    let mut out = BTreeMap::new();
    for sale in sales {
        *out.entry((sale.store, sale.item)).or_insert(0) += sale.units;
    }
    out
}

/// What the input says each task must produce: rows at the declared grain (one per
/// store-item) and the total of units.
fn expectations(input: &Input) -> Vec<TaskSpec> {
    input
        .sales
        .iter()
        .map(|(partition, sales)| TaskSpec {
            partition: partition.clone(),
            expected_rows: aggregate(sales).len() as u64,
            expected_total: Some(sales.iter().map(|s| s.units).sum()),
        })
        .collect()
}

/// The output's declared grain: one row per (store, item), measure `units`, CSV files.
fn grain() -> Grain {
    Grain::new(DataFormat::Csv, &["store", "item"], "units")
}

/// How an attempt misbehaves, to inject the uncertain outcome.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    None,
    /// Writes, finishes, then dies before its acknowledgement reaches the scheduler.
    LoseAcknowledgement,
    /// Takes longer than the scheduler's timeout, then finishes normally.
    Slow,
    /// Writes one store-item twice (a second row under an existing row's key, in place of
    /// another row): the row count and the units total still equal the expectations, and the
    /// worker reports them. Only reading the data at the grain catches it.
    DuplicateRow,
}

/// The order a worker writes its rows in: the step is deterministic in content, not in order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RowOrder {
    Ascending,
    Descending,
}

/// A worker's body: compute into the attempt's private staging directory, report the
/// candidate, record the side effect under the work's natural key, acknowledge.
fn execute(store: &Store, input: &Input, ticket: &AttemptTicket, fault: Fault, order: RowOrder) -> manifestdb::Result<bool> {
    let partition = &ticket.key.task.partition;
    let output = aggregate(&input.sales[partition]);
    if fault == Fault::Slow {
        thread::sleep(ATTEMPT_TIMEOUT * 3);
    }
    let mut rows: Vec<((u32, u32), i64)> = output.iter().map(|(k, u)| (*k, *u)).collect();
    if fault == Fault::DuplicateRow && rows.len() >= 2 {
        // The second row takes the first row's key: same row count, same total.
        rows[1].0 = rows[0].0;
    }
    if order == RowOrder::Descending {
        rows.reverse();
    }
    let mut csv = String::from("store,item,units\n");
    for ((store_id, item), units) in &rows {
        csv.push_str(&format!("{store_id},{item},{units}\n"));
    }
    let path = ticket.staging_dir.join("part-0.csv");
    std::fs::write(&path, &csv).map_err(|e| manifestdb::Error::Io { context: format!("writing {}", path.display()), source: e })?;
    // The run declares its grain, so the store reads the file and computes rows, total,
    // duplicate keys and the canonical digest itself; the worker's counts are cross-checks
    // and it reports no digest (the store's is the one a publish records and compares).
    let candidate = Candidate {
        snapshot: input.snapshot.clone(),
        rows: Some(rows.len() as u64),
        total: Some(rows.iter().map(|(_, u)| u).sum()),
        digest: None,
        files: vec![describe_file(&ticket.staging_dir, "part-0.csv")?],
    };
    store.finish_attempt(&ticket.key, &candidate)?;
    // The notification is keyed by (dataset, run, effect, partition): every attempt of the
    // task records the same key, so a retry cannot send a second one.
    let effect = EffectKey {
        dataset: DATASET.into(),
        run: ticket.key.task.run.clone(),
        effect: "notify-forecast".into(),
        partition: Some(partition.clone()),
    };
    store.record_effect(&effect, format!("units ready for {partition}").as_bytes())?;
    Ok(fault != Fault::LoseAcknowledgement)
}

/// Runs every task of a run to at least one acknowledged, valid attempt, retrying on timeout
/// and on an invalid verdict, and returns the worker threads still running (slow attempts
/// outliving their timeout).
fn schedule(
    store: &Arc<Store>,
    input: &Arc<Input>,
    run: &str,
    faults: &HashMap<String, Fault>,
    order: RowOrder,
    verbose: bool,
) -> Vec<thread::JoinHandle<()>> {
    let (ack_tx, ack_rx) = mpsc::channel::<(String, u32, bool)>();
    let mut pending: Vec<String> = input.sales.keys().cloned().collect();
    let mut handles = Vec::new();
    let mut launched = 0usize;
    while !pending.is_empty() {
        let mut in_flight = HashMap::new();
        for partition in pending.drain(..) {
            let task = TaskKey::new(DATASET, run, &partition);
            let ticket = match store.begin_attempt(&task) {
                Ok(ticket) => ticket,
                Err(err) => panic!("cannot begin an attempt of {task}: {err}"),
            };
            // Faults hit the first attempt of the chosen tasks only.
            let fault = if ticket.key.attempt == 1 { faults.get(&partition).copied().unwrap_or(Fault::None) } else { Fault::None };
            if verbose {
                println!(
                    "  begin   {task} attempt {}{}",
                    ticket.key.attempt,
                    if fault == Fault::None { String::new() } else { format!("  [{fault:?}]") }
                );
            }
            in_flight.insert(partition.clone(), ticket.key.attempt);
            let (store, input, tx) = (Arc::clone(store), Arc::clone(input), ack_tx.clone());
            handles.push(thread::spawn(move || {
                let acknowledged = match execute(&store, &input, &ticket, fault, order) {
                    Ok(acknowledged) => acknowledged,
                    Err(err) => {
                        eprintln!("  attempt {} failed: {err}", ticket.key);
                        false
                    }
                };
                if acknowledged {
                    let _ = tx.send((ticket.key.task.partition.clone(), ticket.key.attempt, true));
                }
            }));
            launched += 1;
            if launched.is_multiple_of(WORKERS) {
                thread::sleep(Duration::from_millis(5));
            }
        }
        // Wait for acknowledgements until the timeout; anything unacknowledged is retried.
        // An acknowledged attempt is validated at once (the store reads its file at the
        // declared grain); an invalid one is retried like a lost one.
        let deadline = std::time::Instant::now() + ATTEMPT_TIMEOUT;
        while !in_flight.is_empty() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match ack_rx.recv_timeout(left) {
                Ok((partition, attempt, _)) => {
                    if in_flight.get(&partition) != Some(&attempt) {
                        continue;
                    }
                    in_flight.remove(&partition);
                    let key = TaskKey::new(DATASET, run, &partition).attempt(attempt);
                    match store.validate_attempt(&key, FileCheck::SizeAndChecksum) {
                        Ok(manifestdb::Verdict::Invalid(failures)) => {
                            let reasons: Vec<String> = failures.iter().map(ToString::to_string).collect();
                            println!("  refused {key}: {}; retrying", reasons.join("; "));
                            pending.push(partition);
                        }
                        Ok(_) => {}
                        Err(err) => {
                            println!("  validation of {key} failed: {err}; retrying");
                            pending.push(partition);
                        }
                    }
                }
                Err(_) => break,
            }
        }
        for (partition, attempt) in in_flight {
            println!("  timeout {DATASET}/{run}/{partition} attempt {attempt}: retrying");
            pending.push(partition);
        }
    }
    handles
}

/// The coordinator: validates every finished attempt of the run (including those whose
/// acknowledgement was lost), then publishes.
fn validate_and_publish(store: &Store, run: &str, input: &Input, verbose: bool) -> manifestdb::Result<PublishOutcome> {
    for partition in input.sales.keys() {
        let task = TaskKey::new(DATASET, run, partition);
        for attempt in store.snapshot()?.attempts(&task)? {
            if attempt.status == AttemptStatus::Finished {
                let verdict = store.validate_attempt(&attempt.key, FileCheck::SizeAndChecksum)?;
                if verbose {
                    println!("  verdict {} -> {}", attempt.key, if verdict.is_valid() { "valid" } else { "invalid" });
                }
            }
        }
    }
    store.publish(DATASET, run, &PublishOptions::default())
}

/// A reader: resolves each partition's files through the current generation and sums them.
fn read_back(store: &Store) -> manifestdb::Result<BTreeMap<String, (u64, i64)>> {
    let manifest = store
        .snapshot()?
        .manifest(DATASET, None)?
        .ok_or_else(|| manifestdb::Error::UnknownRun { dataset: DATASET.into(), run: "(none published)".into() })?;
    let mut totals = BTreeMap::new();
    for entry in &manifest.partitions {
        let (mut rows, mut units) = (0u64, 0i64);
        for file in &entry.files {
            let (r, u) = sum_csv(&store.staging_root().join(&entry.staging_rel).join(&file.path));
            rows += r;
            units += u;
        }
        totals.insert(entry.partition.clone(), (rows, units));
    }
    Ok(totals)
}

fn sum_csv(path: &Path) -> (u64, i64) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut rows = 0;
    let mut units = 0;
    for line in text.lines().skip(1) {
        rows += 1;
        units += line.rsplit(',').next().and_then(|u| u.parse::<i64>().ok()).unwrap_or(0);
    }
    (rows, units)
}

/// What a naive reader that lists every file under the run's staging tree would count.
fn naive_directory_total(root: &Path) -> i64 {
    let mut total = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "csv") {
                total += sum_csv(&path).1;
            }
        }
    }
    total
}

fn run_pipeline(dir: &Path) -> manifestdb::Result<bool> {
    // A directory tree for this small dataset (readers list it), none for any other.
    let views = ViewOptions::hard_links(dir.join("views")).with_trees(ViewTrees::only([DATASET]));
    let options = StoreOptions { views: Some(views), ..StoreOptions::default() };
    let store = Arc::new(Store::open_with_options(dir.join("store.redb"), dir.join("staging"), &options)?);
    let input = Arc::new(generate_input());
    println!("store {}; input snapshot {}", dir.display(), input.snapshot);
    let run = "daily-2026-11-29";
    store.declare_run(&RunSpec {
        dataset: DATASET.into(),
        run: run.into(),
        snapshot: input.snapshot.clone(),
        tasks: expectations(&input),
        grain: Some(grain()),
        trust_reported_figures: false,
    })?;

    let faults = HashMap::from([
        (partition_key("2026-11-28", "eu"), Fault::LoseAcknowledgement),
        (partition_key("2026-11-29", "us"), Fault::Slow),
        (partition_key("2026-11-27", "apac"), Fault::DuplicateRow),
    ]);
    println!("\nscheduling run {run} on {WORKERS} workers");
    let stragglers = schedule(&store, &input, run, &faults, RowOrder::Ascending, true);
    println!("\ncoordinator");
    let outcome = validate_and_publish(&store, run, &input, true)?;
    let generation = match &outcome {
        PublishOutcome::Published(g) | PublishOutcome::AlreadyPublished(g) => g.number,
        PublishOutcome::Refused(refusal) => {
            println!("{refusal}");
            return Ok(false);
        }
    };
    println!("  published generation {generation}");

    // Emit side effects once: they became ready in the publishing transaction.
    let ready = store.snapshot()?.ready_effects(DATASET)?;
    for effect in &ready {
        store.mark_effect_emitted(&effect.key, None)?;
    }
    println!("  emitted {} notifications for {} partitions", ready.len(), input.sales.len());

    // The slow attempt finishes after the publish; it changes nothing that was published.
    for handle in stragglers {
        let _ = handle.join();
    }
    let before = store.snapshot()?.manifest(DATASET, None)?;
    validate_and_publish(&store, run, &input, true)?;
    let unchanged = store.snapshot()?.manifest(DATASET, None)? == before;
    println!("  late attempts validated after publish; manifest unchanged: {unchanged}");

    // The attempt that wrote a duplicated row under correct counts was refused by reading the
    // data, and its retry is what the generation holds.
    let duplicated = partition_key("2026-11-27", "apac");
    let attempts = store.snapshot()?.attempts(&TaskKey::new(DATASET, run, &duplicated))?;
    let refused = attempts.first().is_some_and(|a| {
        matches!(&a.status, AttemptStatus::Validated(manifestdb::Verdict::Invalid(f))
            if f.iter().any(|f| matches!(f, manifestdb::GateFailure::DuplicateGrainKey { .. })))
    });
    let held = before.as_ref().and_then(|m| m.partitions.iter().find(|p| p.partition == duplicated)).map(|p| p.attempt);
    let duplicate_refused = refused && held.is_some_and(|a| a > 1);
    if let Some(r) = attempts.first().and_then(|a| a.reconciliation.as_ref()) {
        println!(
            "  {duplicated} attempt 1 reported rows {:?} total {:?} (= expected {} / {:?}); the store read {:?} rows, {} duplicate key(s): refused {refused}; published attempt {held:?}",
            r.reported_rows, r.reported_total, r.expected_rows, r.expected_total, r.computed_rows, r.duplicate_keys
        );
    }

    // A reader computes totals through the current generation.
    let read = read_back(&store)?;
    println!("\n{:<32} {:>8} {:>10} {:>10} {:>6}", "partition (date/region)", "rows", "units", "input", "ok");
    let mut all_ok = unchanged && ready.len() == input.sales.len();
    for (partition, sales) in &input.sales {
        let truth: i64 = sales.iter().map(|s| s.units).sum();
        let (rows, units) = read.get(partition).copied().unwrap_or((0, 0));
        let ok = units == truth;
        all_ok &= ok;
        println!("{partition:<32} {rows:>8} {units:>10} {truth:>10} {:>6}", if ok { "yes" } else { "NO" });
    }
    let truth_total: i64 = input.sales.values().flatten().map(|s| s.units).sum();
    let published_total: i64 = read.values().map(|(_, u)| u).sum();
    let naive = naive_directory_total(&store.staging_root().join(DATASET).join(run));
    println!("\nall partitions: published {published_total}, input {truth_total}; a reader listing every staging file would count {naive}");
    // A reader that lists the published view instead sees exactly the generation: it asks
    // for the view's directory (as `manifestdb view` prints it; `current` resolved once).
    let view = store.view_path(DATASET, None)?.path;
    let view_total = naive_directory_total(&view);
    println!("a reader listing every file under {} counts {view_total}", view.display());
    all_ok &= view_total == truth_total;
    // A reader given the generation's exact file list counts the same, tree or not.
    let list = store.view_files(DATASET, None)?;
    let list_total: i64 = list.files.iter().map(|f| sum_csv(f).1).sum();
    println!("a reader given generation {}'s {} files counts {list_total}", list.generation, list.files.len());
    all_ok &= list_total == truth_total;

    // Determinism: a rerun on the same input snapshot must reproduce every digest.
    let rerun = "daily-2026-11-29-rerun";
    store.declare_run(&RunSpec {
        dataset: DATASET.into(),
        run: rerun.into(),
        snapshot: input.snapshot.clone(),
        tasks: expectations(&input),
        grain: Some(grain()),
        trust_reported_figures: false,
    })?;
    // The rerun's workers write their rows in the opposite order: the bytes differ, the rows
    // do not, and the store's canonical digest sees only the rows.
    for handle in schedule(&store, &input, rerun, &HashMap::new(), RowOrder::Descending, false) {
        let _ = handle.join();
    }
    let rerun_outcome = validate_and_publish(&store, rerun, &input, false)?;
    let reproduced = matches!(rerun_outcome, PublishOutcome::Published(_));
    println!("rerun on snapshot {}: {}", input.snapshot, if reproduced { "same digests, published" } else { "REFUSED" });
    if let PublishOutcome::Refused(refusal) = &rerun_outcome {
        println!("{refusal}");
    }
    let first_manifest = before.as_ref().map(|m| m.partitions.clone()).unwrap_or_default();
    let rerun_manifest = store.snapshot()?.manifest(DATASET, None)?.map(|m| m.partitions).unwrap_or_default();
    let mut same_rows_other_bytes = !first_manifest.is_empty() && first_manifest.len() == rerun_manifest.len();
    for (a, b) in first_manifest.iter().zip(&rerun_manifest) {
        same_rows_other_bytes &= a.partition == b.partition && a.digest == b.digest && a.files[0].crc32 != b.files[0].crc32;
    }
    if let (Some(a), Some(b)) = (first_manifest.first(), rerun_manifest.first()) {
        println!(
            "  {}: file crc32 {:08x} -> {:08x} (rows written in another order), canonical digest {} both times",
            a.partition, a.files[0].crc32, b.files[0].crc32, a.digest
        );
    }
    println!("rerun wrote every partition's rows in another order and reproduced every canonical digest: {same_rows_other_bytes}");
    all_ok &= reproduced && same_rows_other_bytes && published_total == truth_total && duplicate_refused;
    Ok(all_ok)
}

fn main() -> ExitCode {
    let kept = std::env::args_os().nth(1).map(std::path::PathBuf::from);
    let temp = match kept {
        Some(_) => None,
        None => match tempfile::tempdir() {
            Ok(dir) => Some(dir),
            Err(err) => {
                eprintln!("cannot create a temporary directory: {err}");
                return ExitCode::FAILURE;
            }
        },
    };
    let dir = kept.unwrap_or_else(|| temp.as_ref().map(|t| t.path().to_path_buf()).unwrap_or_default());
    match run_pipeline(&dir) {
        Ok(true) => {
            println!("\nOK: every partition's total equals the input's; nothing doubled.");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            eprintln!("\nFAILED: published totals differ from the input's.");
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

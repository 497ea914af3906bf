//! `verify`'s cost against history, for a profiler: builds (once) a store holding one dataset
//! with `GENERATIONS` one-task generations, the same history as the throughput harness's
//! `verify_ms_*_generations` figures, then runs `Store::verify` (records and references,
//! without redb's integrity check) `ROUNDS` times and prints each time.
//!
//! ```text
//! cargo build --release -p manifestdb-bench --example verify_scaling
//! target/release/examples/verify_scaling DIR GENERATIONS [ROUNDS] [--build-only] [--integrity]
//! valgrind --tool=callgrind --toggle-collect='*Store*verify*' \
//!     target/release/examples/verify_scaling DIR 8000 1
//! ```
//!
//! The instruction counts at 1k and 8k generations are the repeatable measure of how verify
//! scales (a linear verify: 8 times the instructions); wall time on a shared machine is not.

use std::path::PathBuf;
use std::time::Instant;

use manifestdb::{Candidate, FileCheck, PublishOptions, PublishOutcome, RunSpec, Store, TaskKey, TaskSpec, VerifyOptions};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flags: Vec<&str> = args.iter().filter(|a| a.starts_with("--")).map(String::as_str).collect();
    let plain: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let (Some(dir), Some(generations)) = (plain.first(), plain.get(1)) else {
        return Err("usage: verify_scaling DIR GENERATIONS [ROUNDS] [--build-only] [--integrity]".into());
    };
    let generations: usize = generations.parse()?;
    let rounds: usize = plain.get(2).map(|r| r.parse()).transpose()?.unwrap_or(3);
    let dir = PathBuf::from(dir).join(format!("verify-{generations}"));
    let fresh = !dir.join("store.redb").exists();
    let mut store = Store::open(dir.join("store.redb"), dir.join("staging"))?;
    if fresh {
        let started = Instant::now();
        for i in 0..generations {
            let run = format!("h-{i}");
            let spec = RunSpec {
                dataset: "hist".into(),
                run: run.clone(),
                snapshot: format!("snap-{run}"),
                tasks: vec![TaskSpec { partition: "p=0000000".into(), expected_rows: 0, expected_total: None }],
                grain: None,
                trust_reported_figures: true,
            };
            store.declare_run(&spec)?;
            let ticket = store.begin_attempt(&TaskKey::new("hist", &run, "p=0000000"))?;
            let candidate = Candidate {
                snapshot: spec.snapshot.clone(),
                rows: Some(0),
                total: None,
                digest: Some("sha256:0".into()),
                files: Vec::new(),
            };
            store.finish_attempt(&ticket.key, &candidate)?;
            if !store.validate_attempt(&ticket.key, FileCheck::Size)?.is_valid() {
                return Err(format!("attempt {} is invalid", ticket.key).into());
            }
            match store.publish("hist", &run, &PublishOptions::default())? {
                PublishOutcome::Published(_) => {}
                other => return Err(format!("publish of {run} did not publish: {other:?}").into()),
            }
        }
        println!("built {generations} generations in {:.1} s", started.elapsed().as_secs_f64());
    }
    if flags.contains(&"--build-only") {
        return Ok(());
    }
    let options = VerifyOptions { integrity_check: flags.contains(&"--integrity"), ..VerifyOptions::default() };
    for _ in 0..rounds {
        let started = Instant::now();
        let report = store.verify(&options)?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        if !report.is_clean() {
            return Err(format!("verify found problems in a fresh store: {report}").into());
        }
        println!("verify {generations} generations: {ms:.2} ms ({} records)", report.records_total());
    }
    Ok(())
}

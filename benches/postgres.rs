//! The PostgreSQL section of the throughput harness (issue 14): publishes per second and attempt
//! cycles per second at 1, 8 and 64 client threads, on a PostgreSQL store beside a redb store and
//! the harness's SQLite mirror, in the same run and in the same rounds.
//!
//! It runs when a server is available: `MANIFESTDB_TEST_POSTGRES` (or `MANIFESTDB_BENCH_POSTGRES`)
//! names an admin URL (`scripts/pg-server start` prints one; `.ci/run` starts one), and the
//! harness makes a fresh database there for the run and drops it afterwards. Alone:
//! `cargo bench --bench throughput -- --postgres-only [--quick]`.
//!
//! - **Publishes**: each client thread publishes one-task runs of its own dataset (a scheduler
//!   per dataset, the scale-out case). The runs are prepared first (declared, one attempt begun,
//!   finished and validated), untimed; then every thread starts at one barrier and publishes its
//!   share; the figure is publishes / wall time until the last thread is done.
//! - **Attempt cycles**: begin + finish + validate of one attempt, each thread on its own task of
//!   one run (the harness's `md_cycles` and `sqlite_cycles`), for the same window per variant.
//!
//! Before each timed phase the store's connection pool is warmed for that many clients (each
//! thread holds a snapshot, one pooled connection, until all do), so connecting is not timed.
//! Every variant runs once per round, interleaved, so each samples the same moments of a noisy
//! machine. Ratios printed: 64 and 8 clients against one on PostgreSQL (target: 64 clients at
//! least 8x one), and PostgreSQL against redb and SQLite at each client count. Nothing about speed
//! is asserted.

use std::path::Path;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use manifestdb::{Store, TaskKey};

use crate::{
    Report, Res, Sizes, md_cycle, md_cycles, per_second, run_spec, sqlite_cycle, sqlite_cycles, sqlite_declare, sqlite_open, sqlite_publish,
};

const CLIENTS: [usize; 3] = [1, 8, 64];

/// The admin URL of the PostgreSQL server to measure on, if one is configured.
pub fn server_url() -> Option<String> {
    ["MANIFESTDB_BENCH_POSTGRES", "MANIFESTDB_TEST_POSTGRES"].iter().find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
}

/// A database made for this run, dropped at the end.
struct Database {
    admin: String,
    name: String,
    url: String,
}

impl Database {
    fn create(admin: &str) -> Res<Database> {
        let name = format!("mdb_bench_{}_{}", std::process::id(), crate::now_ms());
        let mut client = postgres::Client::connect(admin, postgres::NoTls)?;
        client.batch_execute(&format!("CREATE DATABASE {name}"))?;
        let (head, _) = admin.rsplit_once('/').ok_or("an admin URL ending in /<database>")?;
        Ok(Database { admin: admin.to_owned(), url: format!("{head}/{name}"), name })
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

/// Warms the store's connection pool for `clients` threads (a no-op on redb): each thread takes a
/// snapshot (one pooled connection on PostgreSQL) and holds it until all have one, so the timed
/// phase does not pay for opening connections.
fn warm(store: &Store, clients: usize) -> Res<()> {
    let barrier = Barrier::new(clients);
    std::thread::scope(|scope| -> Res<()> {
        let handles: Vec<_> = (0..clients)
            .map(|_| {
                let barrier = &barrier;
                scope.spawn(move || -> Res<()> {
                    let snapshot = store.snapshot();
                    barrier.wait();
                    drop(snapshot?);
                    Ok(())
                })
            })
            .collect();
        for handle in handles {
            handle.join().map_err(|_| "warm-up thread panicked")??;
        }
        Ok(())
    })
}

/// Publishes each thread makes per round, by client count.
fn publishes_per_thread(sizes: Sizes, clients: usize) -> usize {
    match (sizes.quick, clients) {
        (true, 1) => 40,
        (true, 8) => 10,
        (true, _) => 3,
        (false, 1) => 150,
        (false, 8) => 40,
        (false, _) => 10,
    }
}

/// Prepares `count` one-task runs of dataset `pub-{client}` per client thread, then publishes
/// them from `clients` threads at once; returns (publishes, wall time).
fn store_publishes(store: &Store, tag: &str, clients: usize, count: usize) -> Res<(u64, Duration)> {
    let dataset = |c: usize| format!("pub-{clients}c-{c}");
    let run = |i: usize| format!("{tag}-{i}");
    // Untimed: prepare every run (16 threads; PostgreSQL takes them concurrently).
    let next = AtomicU64::new(0);
    let total = clients * count;
    std::thread::scope(|scope| -> Res<()> {
        let handles: Vec<_> = (0..16.min(total))
            .map(|_| {
                scope.spawn(|| -> Res<()> {
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed) as usize;
                        if n >= total {
                            return Ok(());
                        }
                        let (c, i) = (n % clients, n / clients);
                        let spec = run_spec(&dataset(c), &run(i), std::iter::once("p=0".to_owned()));
                        store.declare_run(&spec)?;
                        md_cycle(store, &TaskKey::new(&spec.dataset, &spec.run, "p=0"), &spec.snapshot)?;
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().map_err(|_| "prepare thread panicked")??;
        }
        Ok(())
    })?;
    warm(store, clients)?;
    let barrier = Barrier::new(clients + 1);
    let mut start = Instant::now();
    std::thread::scope(|scope| -> Res<()> {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let (barrier, dataset, run) = (&barrier, &dataset, &run);
                scope.spawn(move || -> Res<()> {
                    barrier.wait();
                    for i in 0..count {
                        crate::md_publish(store, &dataset(c), &run(i))?;
                    }
                    Ok(())
                })
            })
            .collect();
        barrier.wait();
        start = Instant::now();
        for handle in handles {
            handle.join().map_err(|_| "publish thread panicked")??;
        }
        Ok(())
    })?;
    Ok((total as u64, start.elapsed()))
}

/// The same on the SQLite mirror: each thread with its own connection.
fn sqlite_publishes(db: &Path, staging: &Path, tag: &str, clients: usize, count: usize) -> Res<(u64, Duration)> {
    let dataset = |c: usize| format!("pub-{clients}c-{c}");
    let run = |i: usize| format!("{tag}-{i}");
    let mut conn = sqlite_open(db)?;
    for c in 0..clients {
        for i in 0..count {
            sqlite_declare(&mut conn, &run_spec(&dataset(c), &run(i), std::iter::once("p=0".to_owned())))?;
            sqlite_cycle(&mut conn, staging, &dataset(c), &run(i), "p=0")?;
        }
    }
    drop(conn);
    let barrier = Barrier::new(clients + 1);
    let mut start = Instant::now();
    std::thread::scope(|scope| -> Res<()> {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let (barrier, dataset, run) = (&barrier, &dataset, &run);
                scope.spawn(move || -> Res<()> {
                    let conn = sqlite_open(db);
                    barrier.wait();
                    let mut conn = conn?;
                    for i in 0..count {
                        sqlite_publish(&mut conn, &dataset(c), &run(i))?;
                    }
                    Ok(())
                })
            })
            .collect();
        barrier.wait();
        start = Instant::now();
        for handle in handles {
            handle.join().map_err(|_| "sqlite publish thread panicked")??;
        }
        Ok(())
    })?;
    Ok(((clients * count) as u64, start.elapsed()))
}

/// The PostgreSQL section: see the module's documentation.
pub fn figures(dir: &Path, report: &mut Report, sizes: Sizes) -> Res<()> {
    let Some(admin) = server_url() else {
        println!(
            "PostgreSQL section SKIPPED: no server (start one with scripts/pg-server start and export \
             MANIFESTDB_TEST_POSTGRES=\"$(scripts/pg-server url)\")"
        );
        return Ok(());
    };
    let database = Database::create(&admin)?;
    println!("PostgreSQL section on a fresh database of {admin}");
    let pg = Store::open(&database.url, dir.join("pg-staging"))?;
    let redb = Store::open(dir.join("pg-beside.redb"), dir.join("pg-beside-staging"))?;
    let sqlite_db = dir.join("pg-beside.sqlite");
    let sqlite_staging = dir.join("pg-beside-sqlite-staging");
    type Tally = std::collections::BTreeMap<String, (u64, Duration)>;
    let mut tally: Tally = Tally::new();
    let mut add = |key: String, (count, elapsed): (u64, Duration)| {
        let entry = tally.entry(key).or_default();
        entry.0 += count;
        entry.1 += elapsed;
    };
    let rounds = if sizes.quick { 2 } else { sizes.rounds };
    for round in 0..rounds {
        println!("PostgreSQL section, round {} of {rounds}", round + 1);
        for clients in CLIENTS {
            let count = publishes_per_thread(sizes, clients);
            let tag = format!("r{round}");
            add(format!("pg_publishes_per_s_{clients}c"), store_publishes(&pg, &tag, clients, count)?);
            add(format!("pg_redb_publishes_per_s_{clients}c"), store_publishes(&redb, &tag, clients, count)?);
            add(format!("pg_sqlite_publishes_per_s_{clients}c"), sqlite_publishes(&sqlite_db, &sqlite_staging, &tag, clients, count)?);
            let run = format!("pgcycles-{clients}-{round}");
            warm(&pg, clients)?;
            add(format!("pg_attempt_cycles_per_s_{clients}c"), md_cycles(&pg, &run, clients, sizes.measure)?);
            add(format!("pg_redb_attempt_cycles_per_s_{clients}c"), md_cycles(&redb, &run, clients, sizes.measure)?);
            add(
                format!("pg_sqlite_attempt_cycles_per_s_{clients}c"),
                sqlite_cycles(&sqlite_db, &sqlite_staging, &run, clients, sizes.measure)?,
            );
        }
    }
    for (key, (count, elapsed)) in &tally {
        let unit = if key.contains("publishes") { "publishes/s (one-task runs, a dataset per client)" } else { "cycles/s (3 writes each)" };
        report.put(key, per_second(*count, *elapsed), unit);
    }
    for what in ["publishes", "attempt_cycles"] {
        for clients in [8, 64] {
            report.ratio(&format!("pg_{what}_{clients}c_vs_1c"), &format!("pg_{what}_per_s_{clients}c"), &format!("pg_{what}_per_s_1c"));
        }
        for clients in CLIENTS {
            let pg_key = format!("pg_{what}_per_s_{clients}c");
            report.ratio(&format!("pg_{what}_vs_redb_{clients}c"), &pg_key, &format!("pg_redb_{what}_per_s_{clients}c"));
            report.ratio(&format!("pg_{what}_vs_sqlite_{clients}c"), &pg_key, &format!("pg_sqlite_{what}_per_s_{clients}c"));
        }
    }
    println!(
        "PostgreSQL: 64 clients publish at {:.2}x one client (target >= 8x); attempt cycles {:.2}x",
        report.get("pg_publishes_64c_vs_1c"),
        report.get("pg_attempt_cycles_64c_vs_1c")
    );
    drop(pg);
    Ok(())
}

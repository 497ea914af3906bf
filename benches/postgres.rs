//! The PostgreSQL section of the throughput harness (issue 14): publishes per second and attempt
//! cycles per second at 1, 8 and 64 client threads, on a PostgreSQL store beside a redb store and
//! the harness's SQLite mirror, in the same run and in the same rounds.
//!
//! It runs when a server is available: `MANIFESTDB_TEST_POSTGRES` (or `MANIFESTDB_BENCH_POSTGRES`)
//! names an admin URL (`scripts/pg-server start` prints one; `.ci/run` starts one), and the
//! harness makes a fresh database there for the run and drops it afterwards. Alone:
//! `cargo bench --workspace --bench throughput -- --postgres-only [--quick]`.
//!
//! A second server across a network link, as a coordinator on another host than the database
//! sees it: `MANIFESTDB_BENCH_POSTGRES_REMOTE` names its admin URL (`scripts/pg-netns start`: a
//! server in a network namespace behind a veth pair that delays every packet, 1 ms each way by
//! default). Every PostgreSQL variant then runs on it too, in the same rounds, and its figures
//! carry the prefix `pg_remote_` where the loopback server's carry `pg_`. For each server the
//! section also prints the round trip it measured under (`{pg,pg_remote}_round_trip_ms`: the
//! median of 50 `SELECT 1` on one connection, per round) and how many times an operation ran
//! again after a conflict (a deadlock; a serialization failure under the first, SERIALIZABLE
//! design), per publish and per attempt cycle at each client count
//! (`{pg,pg_remote}_reruns_per_{publish,cycle}_{1,8,64}c`, from the layer's debug events).
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
//! machine. Ratios printed, for each server: 64 and 8 clients against one (target: 64 clients at
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
    env_url(&["MANIFESTDB_BENCH_POSTGRES", "MANIFESTDB_TEST_POSTGRES"])
}

/// The admin URL of the server across a network link (`scripts/pg-netns url`), if one is
/// configured: `MANIFESTDB_BENCH_POSTGRES_REMOTE`.
fn remote_url() -> Option<String> {
    env_url(&["MANIFESTDB_BENCH_POSTGRES_REMOTE"])
}

fn env_url(names: &[&str]) -> Option<String> {
    names.iter().find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
}

/// Reruns of PostgreSQL operations in this process so far: the layer's debug event for each
/// operation run again after a deadlock (SQLSTATE 40P01), a serialization failure (40001) or a pointer
/// that moved under it, counted by [`RerunCounter`].
static RERUNS: AtomicU64 = AtomicU64::new(0);

/// A `tracing` subscriber that only counts the PostgreSQL layer's rerun events. The section runs
/// one variant at a time, so the count taken around a variant is that variant's.
struct RerunCounter;

impl tracing::Subscriber for RerunCounter {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.is_event() && metadata.target().starts_with("manifestdb::pg") && *metadata.level() == tracing::Level::DEBUG
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(bool);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" && format!("{value:?}").starts_with("conflict: running the operation again") {
                    self.0 = true;
                }
            }
        }
        let mut message = Message(false);
        event.record(&mut message);
        if message.0 {
            RERUNS.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// What one timed variant did: operations, wall time, and reruns among them.
#[derive(Default)]
struct Timed {
    count: u64,
    elapsed: Duration,
    reruns: u64,
}

/// Runs `timed` (which returns operations and wall time) and counts the reruns during it.
fn counting_reruns(timed: impl FnOnce() -> Res<(u64, Duration)>) -> Res<Timed> {
    let before = RERUNS.load(Ordering::Relaxed);
    let (count, elapsed) = timed()?;
    Ok(Timed { count, elapsed, reruns: RERUNS.load(Ordering::Relaxed) - before })
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
/// them from `clients` threads at once; returns the publishes, their wall time and their reruns.
fn store_publishes(store: &Store, tag: &str, clients: usize, count: usize) -> Res<Timed> {
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
    counting_reruns(|| {
        let elapsed = released_together(clients, |c, release| {
            release();
            for i in 0..count {
                crate::md_publish(store, &dataset(c), &run(i))?;
            }
            Ok(())
        })?;
        Ok((total as u64, elapsed))
    })
}

/// Runs `work(c)` on threads `c` in `0..clients`; each calls `release` once its untimed setup is
/// done, and all go on together. Returns the wall time from that release until the last is done.
fn released_together(clients: usize, work: impl Fn(usize, &dyn Fn()) -> Res<()> + Sync) -> Res<Duration> {
    let barrier = Barrier::new(clients + 1);
    let mut start = Instant::now();
    std::thread::scope(|scope| -> Res<()> {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let (barrier, work) = (&barrier, &work);
                scope.spawn(move || -> Res<()> {
                    work(c, &|| {
                        barrier.wait();
                    })
                })
            })
            .collect();
        barrier.wait();
        start = Instant::now();
        for handle in handles {
            handle.join().map_err(|_| "client thread panicked")??;
        }
        Ok(())
    })?;
    Ok(start.elapsed())
}

/// The same on the SQLite mirror: each thread with its own connection.
fn sqlite_publishes(db: &Path, staging: &Path, tag: &str, clients: usize, count: usize) -> Res<Timed> {
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
    let elapsed = released_together(clients, |c, release| {
        let conn = sqlite_open(db);
        release();
        let mut conn = conn?;
        for i in 0..count {
            sqlite_publish(&mut conn, &dataset(c), &run(i))?;
        }
        Ok(())
    })?;
    Ok(Timed { count: (clients * count) as u64, elapsed, reruns: 0 })
}

/// A PostgreSQL server the section measures on: a fresh database there and a store on it.
struct Server {
    /// The figures' prefix: `pg` (the loopback server) or `pg_remote`.
    prefix: &'static str,
    /// How the output names it.
    label: &'static str,
    store: Store,
    /// Round trips of `SELECT 1` on one connection, 50 per round.
    round_trips: Vec<Duration>,
    // Dropped after `store`, whose connections are into it.
    database: Database,
}

impl Server {
    fn open(prefix: &'static str, label: &'static str, admin: String, staging: &Path) -> Res<Server> {
        let database = Database::create(&admin)?;
        println!("PostgreSQL section: the {label} server, a fresh database of {admin}");
        let store = Store::open(&database.url, staging)?;
        Ok(Server { prefix, label, store, round_trips: Vec::new(), database })
    }

    /// Times 50 `SELECT 1` on one connection (opened first, untimed).
    fn time_round_trips(&mut self) -> Res<()> {
        let mut client = postgres::Client::connect(&self.database.url, postgres::NoTls)?;
        client.simple_query("SELECT 1")?;
        for _ in 0..50 {
            let start = Instant::now();
            client.simple_query("SELECT 1")?;
            self.round_trips.push(start.elapsed());
        }
        Ok(())
    }
}

/// The PostgreSQL section: see the module's documentation.
pub fn figures(dir: &Path, report: &mut Report, sizes: Sizes) -> Res<()> {
    let mut servers = Vec::new();
    if let Some(admin) = server_url() {
        servers.push(Server::open("pg", "loopback", admin, &dir.join("pg-staging"))?);
    }
    if let Some(admin) = remote_url() {
        servers.push(Server::open("pg_remote", "remote", admin, &dir.join("pg-remote-staging"))?);
    }
    if servers.is_empty() {
        println!(
            "PostgreSQL section SKIPPED: no server (start one with scripts/pg-server start and export \
             MANIFESTDB_TEST_POSTGRES=\"$(scripts/pg-server url)\"; for the remote figures, scripts/pg-netns start and \
             MANIFESTDB_BENCH_POSTGRES_REMOTE=\"$(scripts/pg-netns url)\")"
        );
        return Ok(());
    }
    let redb = Store::open(dir.join("pg-beside.redb"), dir.join("pg-beside-staging"))?;
    let sqlite_db = dir.join("pg-beside.sqlite");
    let sqlite_staging = dir.join("pg-beside-sqlite-staging");
    // Counts the reruns (see `RERUNS`); a subscriber set before (none is, in this harness) wins.
    let _ = tracing::subscriber::set_global_default(RerunCounter);
    type Tally = std::collections::BTreeMap<String, Timed>;
    let mut tally: Tally = Tally::new();
    let mut add = |key: String, timed: Timed| {
        let entry = tally.entry(key).or_default();
        entry.count += timed.count;
        entry.elapsed += timed.elapsed;
        entry.reruns += timed.reruns;
    };
    let rounds = if sizes.quick { 2 } else { sizes.rounds };
    for round in 0..rounds {
        println!("PostgreSQL section, round {} of {rounds}", round + 1);
        for server in &mut servers {
            server.time_round_trips()?;
        }
        for clients in CLIENTS {
            let count = publishes_per_thread(sizes, clients);
            let tag = format!("r{round}");
            for server in &servers {
                add(format!("{}_publishes_per_s_{clients}c", server.prefix), store_publishes(&server.store, &tag, clients, count)?);
            }
            add(format!("pg_redb_publishes_per_s_{clients}c"), store_publishes(&redb, &tag, clients, count)?);
            add(format!("pg_sqlite_publishes_per_s_{clients}c"), sqlite_publishes(&sqlite_db, &sqlite_staging, &tag, clients, count)?);
            let run = format!("pgcycles-{clients}-{round}");
            for server in &servers {
                warm(&server.store, clients)?;
                let timed = counting_reruns(|| md_cycles(&server.store, &run, clients, sizes.measure))?;
                add(format!("{}_attempt_cycles_per_s_{clients}c", server.prefix), timed);
            }
            add(format!("pg_redb_attempt_cycles_per_s_{clients}c"), counting_reruns(|| md_cycles(&redb, &run, clients, sizes.measure))?);
            add(
                format!("pg_sqlite_attempt_cycles_per_s_{clients}c"),
                counting_reruns(|| sqlite_cycles(&sqlite_db, &sqlite_staging, &run, clients, sizes.measure))?,
            );
        }
    }
    for (key, timed) in &tally {
        let unit = if key.contains("publishes") { "publishes/s (one-task runs, a dataset per client)" } else { "cycles/s (3 writes each)" };
        report.put(key, per_second(timed.count, timed.elapsed), unit);
    }
    // Reruns per operation, PostgreSQL's only (redb and SQLite have none of this layer's).
    for server in &servers {
        for clients in CLIENTS {
            for (what, per) in [("publishes", "publish"), ("attempt_cycles", "cycle")] {
                if let Some(timed) = tally.get(&format!("{}_{what}_per_s_{clients}c", server.prefix)) {
                    let key = format!("{}_reruns_per_{per}_{clients}c", server.prefix);
                    report.put(
                        &key,
                        timed.reruns as f64 / timed.count.max(1) as f64,
                        "(operations run again after a deadlock, serialization failure or moved pointer)",
                    );
                }
            }
        }
    }
    for server in servers {
        let Server { prefix: pg, label, mut round_trips, .. } = server;
        round_trips.sort();
        let median_ms = round_trips.get(round_trips.len() / 2).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0);
        report.put(&format!("{pg}_round_trip_ms"), median_ms, "ms (median of 50 SELECT 1 per round, one connection)");
        for what in ["publishes", "attempt_cycles"] {
            for clients in [8, 64] {
                report.ratio(
                    &format!("{pg}_{what}_{clients}c_vs_1c"),
                    &format!("{pg}_{what}_per_s_{clients}c"),
                    &format!("{pg}_{what}_per_s_1c"),
                );
            }
            for clients in CLIENTS {
                let pg_key = format!("{pg}_{what}_per_s_{clients}c");
                report.ratio(&format!("{pg}_{what}_vs_redb_{clients}c"), &pg_key, &format!("pg_redb_{what}_per_s_{clients}c"));
                report.ratio(&format!("{pg}_{what}_vs_sqlite_{clients}c"), &pg_key, &format!("pg_sqlite_{what}_per_s_{clients}c"));
            }
        }
        println!(
            "PostgreSQL ({label}, round trip {median_ms:.2} ms): 64 clients publish at {:.2}x one client (target >= 8x); attempt cycles {:.2}x",
            report.get(&format!("{pg}_publishes_64c_vs_1c")),
            report.get(&format!("{pg}_attempt_cycles_64c_vs_1c"))
        );
    }
    Ok(())
}

//! The PostgreSQL storage layer (feature `postgres`): the store's metadata in a PostgreSQL
//! database, for schedulers that span hosts. The staging root stays a directory every host
//! mounts.
//!
//! - `schema.rs`: the tables (the redb layer's tables and frames, the pointer with a real
//!   generation column) and the versioned migrations applied at open.
//! - `meta.rs`: [`PgMeta`], the layer's [`crate::meta::Meta`] over one transaction.
//! - `error.rs`: PostgreSQL's errors as `StorageError` kinds, and which ones are retried.
//! - `conn.rs`: one connection, with a deadline on every round trip (a network that stops
//!   forwarding without closing must not hang a call).
//! - `call.rs`: one write call's budget: a call whose snapshot read lost its connection before
//!   anything of it committed runs again from its start, within the same 60 s.
//! - this file: the connection pool and the transaction runner.
//!
//! Every operation is one transaction on a connection of its own (many run at once: no single
//! writer), at READ COMMITTED under strict two-phase locking (`locks.rs`): every record it
//! reads or writes is covered, before its statement runs, by a transaction-level advisory lock
//! on the part of the store it belongs to (a task, a run, a dataset's pointer and history, the
//! store), so operations on disjoint parts run side by side and conflicting ones wait for each
//! other, and the schedule is serializable. (SERIALIZABLE, the first design, was correct too,
//! but its predicate locks are per index page: 64 clients on 64 different tasks or datasets
//! aborted each other 2 to 15 times per operation; see the book's performance chapter.) The runner
//! ([`PgLayer::write`]):
//! - runs the whole operation again after a deadlock (SQLSTATE 40P01: the server ended one of
//!   two operations that waited for each other's locks), a serialization failure (40001, not
//!   expected at this isolation) or a pointer that moved under it, up to [`RERUNS_MAX`] times
//!   with a jittered, growing pause;
//! - runs it again on a new connection after the connection was lost before its COMMIT was
//!   sent (nothing of it can have committed), for up to [`RECONNECT_TIME_MAX`];
//! - after the connection was lost *during* COMMIT (the outcome unknown), settles the outcome
//!   before anything else ([`PgLayer::settle`]): before the COMMIT was sent, the transaction
//!   inserted its witness row (a random token, `manifestdb.commits`) and read its id; on a new
//!   connection, while the old backend still runs that transaction it is waited for and, past
//!   a few seconds, terminated, so the transaction ends one way or the other; then the witness
//!   is visible (it committed: the operation's value is returned, as if the reply had arrived)
//!   or not (it aborted: the operation runs again). The id alone cannot say: a server that
//!   crashed before the commit record was durable gives the id to another transaction. This
//!   holds for every operation (a begin is never done twice, a publish is answered with its
//!   generation). Only if the server cannot
//!   be reached for [`RECONNECT_TIME_MAX`] does the call fail, with an error that says the
//!   outcome is unknown; then the same call again settles it (a publish answers
//!   `AlreadyPublished` with the generation, or publishes once).
//!
//! A write call also reads a snapshot before its transaction (`Store::begin_attempt` reads the
//! task, a validation the attempt); a snapshot lost with its connection cannot be read again,
//! so the store runs such a call whole again ([`PgLayer::whole_call`], `call.rs`) if nothing of
//! it committed. The reconnecting of a call's snapshots, its transactions and these reruns
//! share one deadline, [`RECONNECT_TIME_MAX`] from the call's start.
//!
//! Time: the operation's clock reading is the database server's (`now()` of the
//! transaction), so lease expiry, heartbeats and effect claims compare times of one clock
//! whatever host the coordinators run on.

pub(crate) mod call;
pub(crate) mod conn;
pub(crate) mod error;
pub(crate) mod locks;
pub(crate) mod meta;
pub(crate) mod schema;
#[cfg(test)]
mod tests;

use std::str::FromStr;
use std::time::{Duration, Instant};

use tokio_postgres::SimpleQueryMessage;
use tokio_postgres::types::Type;

use self::conn::{Conn, PgError};
use self::error::Retry;
pub(crate) use self::meta::PgMeta;
use crate::error::{Error, Result, StorageErrorKind};
use crate::meta::TxnEnd;

/// How many times one operation runs again after deadlocks, serialization failures or a
/// pointer that moved under it, before the conflict is the caller's error
/// ([`StorageErrorKind::Conflict`]). Each rerun follows another transaction's progress (the
/// server ends one of a deadlocked pair, the other goes on), so this bounds how many
/// competitors may win before this one.
pub(crate) const RERUNS_MAX: u32 = 200;

/// Reruns of every operation so far, for the tests' and the throughput figures' reports.
#[cfg(test)]
pub(crate) static RERUNS_SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How long the runner keeps reconnecting after the connection was lost (the server
/// restarting, a network cut), and how long it keeps settling a COMMIT whose reply was lost,
/// before failing the call: 60 seconds.
pub(crate) const RECONNECT_TIME_MAX: Duration = Duration::from_secs(60);

/// How long a COMMIT whose reply was lost may stay in progress on its old backend before the
/// runner terminates that backend (`pg_terminate_backend`), so its transaction ends.
const IN_PROGRESS_WAIT_MAX: Duration = Duration::from_secs(5);

/// The most connections one store handle opens: at least as many as client threads that
/// should run transactions at once. Connections are opened on demand and closed after a
/// minute unused.
pub(crate) const CONNECTIONS_MAX: u32 = 64;

/// The PostgreSQL URL `location` is, if its string form starts with `postgres://` or
/// `postgresql://`; otherwise it names a redb file.
pub(crate) fn postgres_url(location: &std::path::Path) -> Option<&str> {
    location.to_str().filter(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}

/// Makes the pool's connections.
#[derive(Debug)]
pub(crate) struct Manager {
    config: tokio_postgres::Config,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = PgError;

    fn connect(&self) -> std::result::Result<Conn, PgError> {
        Conn::connect(&self.config)
    }

    fn is_valid(&self, conn: &mut Conn) -> std::result::Result<(), PgError> {
        conn.batch("", "a check of the connection")
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.is_closed()
    }
}

impl std::error::Error for PgError {}

type Pooled = r2d2::PooledConnection<Manager>;

/// A store's PostgreSQL database: a pool of connections, each running one operation's
/// transaction at a time.
pub(crate) struct PgLayer {
    pool: r2d2::Pool<Manager>,
    /// The URL without its password, for messages.
    shown: String,
    /// How long a write keeps reconnecting and settling: [`RECONNECT_TIME_MAX`] (shorter only
    /// in the layer's own tests).
    reconnect_time_max: Duration,
}

impl std::fmt::Debug for PgLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLayer").field("location", &self.shown).finish_non_exhaustive()
    }
}

/// The URL without its password.
fn shown(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.find(':') {
                Some(colon) => format!("{}{}:***{}", &url[..scheme + 3], &credentials[..colon], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// The client configuration of `url`: its own settings, plus manifestdb's defaults for what
/// it leaves out (a connect time-out, TCP keepalives and a TCP user time-out, so a dead peer
/// is noticed in seconds, not in the kernel's quarter of an hour).
fn config(url: &str) -> Result<tokio_postgres::Config> {
    let mut config = tokio_postgres::Config::from_str(url)
        .map_err(|e| Error::invalid("PostgreSQL URL", &shown(url), format!("is not a PostgreSQL connection URL: {e}")))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(10));
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(Duration::from_secs(20));
    }
    if config.get_application_name().is_none() {
        config.application_name("manifestdb");
    }
    config.keepalives(true).keepalives_idle(Duration::from_secs(10)).keepalives_interval(Duration::from_secs(2)).keepalives_retries(5);
    Ok(config)
}

/// A pooled connection that is inside a transaction until [`Txn::end`]; dropped before that
/// (an error, a panic), it rolls back so the connection goes back to the pool clean.
struct Txn {
    conn: Pooled,
    open: bool,
}

impl Drop for Txn {
    fn drop(&mut self) {
        if self.open {
            // A failed rollback means the connection is gone; the pool then drops it.
            let _ = self.conn.batch("ROLLBACK", "ROLLBACK");
        }
    }
}

/// What a lost COMMIT turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    Committed,
    Aborted,
}

impl PgLayer {
    /// Connects to the database at `url` and, for a writable open (`migrate`), brings its schema
    /// to this build's version; a read-only open only checks it.
    pub(crate) fn open(url: &str, migrate: bool) -> Result<PgLayer> {
        let config = config(url)?;
        let shown = shown(url);
        // The first connection is made directly, not through the pool: a database that does
        // not exist or a refused password is answered at once with the server's error (the
        // pool would only report a time-out). A connection that cannot be made (the server
        // not up yet, restarting) or is lost while the schema is read or migrated is tried
        // again on a new one, for as long as an operation in flight rides out a lost
        // connection ([`RECONNECT_TIME_MAX`]): the migrations are one transaction each,
        // applied once whatever was lost, and reading the version changes nothing.
        retry_lost_connection("opening the store", || {
            let mut first = Conn::connect(&config).map_err(|e| Error::postgres("connecting to PostgreSQL", &e))?;
            if migrate { schema::migrate(&mut first).map(|_| ()) } else { schema::check(&mut first) }
        })?;
        let manager = Manager { config };
        let pool = r2d2::Pool::builder()
            .max_size(CONNECTIONS_MAX)
            .min_idle(Some(0))
            .idle_timeout(Some(Duration::from_secs(60)))
            // How long a call waits for a connection (all 64 busy, or the server unreachable)
            // before its runner counts a lost connection and tries again.
            .connection_timeout(Duration::from_secs(10))
            // A connection is checked when it is taken from the pool only if it reports itself
            // closed; a silently dead one fails its first statement, which the runner retries.
            .test_on_check_out(false)
            .build_unchecked(manager);
        Ok(PgLayer { pool, shown, reconnect_time_max: RECONNECT_TIME_MAX })
    }

    /// Runs a write call of the store (reads of snapshots, then write transactions) as
    /// [`call::whole_call`] does: again from its start after a snapshot read lost its
    /// connection, if nothing of it committed, within [`RECONNECT_TIME_MAX`].
    pub(crate) fn whole_call<T>(&self, call: impl FnMut() -> Result<T>) -> Result<T> {
        call::whole_call(&self.shown, self.reconnect_time_max, call)
    }

    /// A connection from the pool.
    pub(crate) fn connection(&self) -> Result<Pooled> {
        self.pool.get().map_err(|e| {
            Error::postgres_layer("connecting to PostgreSQL", StorageErrorKind::Io, format!("no connection to {}: {e}", self.shown))
        })
    }

    /// Runs `body` in one read-write transaction (READ COMMITTED, under the locks of `locks.rs`)
    /// and commits it if it says so, with
    /// the retries and the settling of a lost COMMIT described in the module's documentation.
    /// `body` gets the transaction and the database server's clock reading (milliseconds since
    /// the epoch); it may run several times, each on a fresh snapshot.
    pub(crate) fn write<T>(&self, context: &'static str, mut body: impl FnMut(&mut PgMeta<'_>, u64) -> Result<TxnEnd<T>>) -> Result<T> {
        // The running call's deadline (`call.rs`), or this transaction's own.
        let deadline = call::deadline(Instant::now(), self.reconnect_time_max);
        let mut reruns = 0u32;
        loop {
            let step = self.try_once(context, &mut body);
            match step {
                Step::Done(result) => {
                    // Committed, or perhaps committed (a lost COMMIT not settled), or (a body
                    // that wrote nothing) answered: the call must not run again.
                    let outcome_unknown =
                        matches!(&result, Err(Error::Storage { source, .. }) if source.kind() == StorageErrorKind::OutcomeUnknown);
                    if result.is_ok() || outcome_unknown {
                        call::note_committed();
                    }
                    return result;
                }
                Step::Rerun(err) => {
                    #[cfg(test)]
                    RERUNS_SEEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(context, error = %err, reruns, "conflict: running the operation again (a deadlock, a serialization failure or a moved pointer)");
                    reruns += 1;
                    if reruns > RERUNS_MAX {
                        return Err(err);
                    }
                    pause(reruns);
                }
                Step::Reconnect(err) => {
                    if Instant::now() >= deadline {
                        // Every way here (a connection lost before COMMIT was sent, a lost
                        // COMMIT settled as aborted) left nothing of the operation committed:
                        // say so, so that a caller does not treat it as an outcome to settle.
                        return Err(nothing_committed(context, &self.shown, self.reconnect_time_max, Some(err)));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    fn try_once<T>(&self, context: &'static str, body: &mut impl FnMut(&mut PgMeta<'_>, u64) -> Result<TxnEnd<T>>) -> Step<T> {
        let conn = match self.connection() {
            Ok(conn) => conn,
            Err(err) => return Step::Reconnect(err),
        };
        let mut txn = Txn { conn, open: false };
        let (now_ms, backend) = match begin(&mut txn.conn, "BEGIN ISOLATION LEVEL READ COMMITTED") {
            Ok(started) => started,
            Err(e) => return step_after(context, &e),
        };
        txn.open = true;
        let mut meta = PgMeta::new(&mut txn.conn, now_ms);
        let outcome = body(&mut meta, now_ms);
        let (fault, writes) = (meta.fault, meta.writes);
        match outcome {
            Err(err) => match fault {
                Some(Retry::Rerun) => Step::Rerun(err),
                Some(Retry::Reconnect) => Step::Reconnect(err),
                _ => Step::Done(Err(err)),
            },
            Ok(TxnEnd::Abort(value)) if writes > 0 => {
                // A refusal after a write: a bug of the operation (each one reads everything
                // before its first write). Nothing of it is committed.
                debug_assert!(false, "an operation wrote and then refused");
                txn.open = false;
                let _ = txn.conn.batch("ROLLBACK", "ROLLBACK");
                Step::Done(Ok(value))
            }
            Ok(TxnEnd::Abort(value)) => {
                // Nothing was written; the reads were made under locks, so the answer stands.
                // COMMIT (or ROLLBACK, the same here) releases the locks.
                txn.open = false;
                match txn.conn.batch("COMMIT", "COMMIT") {
                    Ok(()) => Step::Done(Ok(value)),
                    Err(e) => step_after(context, &e),
                }
            }
            Ok(TxnEnd::Commit(value)) => {
                let lost = match witness(&mut txn.conn, now_ms, backend) {
                    Ok(lost) => lost,
                    Err(e) => return step_after(context, &e),
                };
                txn.open = false;
                match txn.conn.batch("COMMIT", "COMMIT") {
                    Ok(()) => {
                        forget_old_witnesses(&mut txn.conn, lost.token);
                        Step::Done(Ok(value))
                    }
                    Err(e) => match error::retry_of(&e) {
                        Retry::Rerun => Step::Rerun(Error::postgres(context, &e)),
                        Retry::No => Step::Done(Err(Error::postgres(context, &e))),
                        Retry::Reconnect => {
                            drop(txn);
                            tracing::warn!(xid = lost.xid, backend, error = %e, "connection lost during COMMIT: settling its outcome");
                            match self.settle(&lost) {
                                Ok(Settled::Committed) => Step::Done(Ok(value)),
                                // Nothing of it committed: the operation runs again.
                                Ok(Settled::Aborted) => Step::Reconnect(Error::postgres(context, &e)),
                                Err(err) => Step::Done(Err(err)),
                            }
                        }
                    },
                }
            }
        }
    }

    /// Settles the outcome of the transaction `lost` names, whose COMMIT was sent and whose reply
    /// was lost, on a new connection, by [`settle_rule`]: while its old backend still runs it
    /// (past [`IN_PROGRESS_WAIT_MAX`] that backend is ended, so it ends one way or the other),
    /// it is waited for; once it has ended, it committed exactly if its witness row is visible.
    pub(crate) fn settle(&self, lost: &LostCommit) -> Result<Settled> {
        let started = Instant::now();
        let mut terminated = false;
        // The old backend, only while it runs this very transaction, begun before the COMMIT
        // was sent: a process id or a transaction id the server gave out again after a crash
        // belongs to a backend started later.
        let xid32 = i64::try_from(lost.xid % (1 << 32)).unwrap_or(0);
        let began = lost.began_ms as f64 / 1000.0;
        let old_backend = "FROM pg_stat_activity WHERE pid = $1 AND backend_xid::text::int8 = $2 \
                           AND backend_start <= to_timestamp($3::float8 + 0.001)";
        let old_backend_params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 3] =
            [(&lost.backend, Type::INT4), (&xid32, Type::INT8), (&began, Type::FLOAT8)];
        loop {
            let answer = self.connection().and_then(|mut conn| {
                let query = |conn: &mut Pooled, sql: &str, params: &[(&(dyn tokio_postgres::types::ToSql + Sync), Type)]| {
                    conn.query(sql, params).map_err(|e| Error::postgres("settling a commit", &e))
                };
                let rows = query(&mut conn, &format!("SELECT EXISTS (SELECT 1 {old_backend})"), &old_backend_params)?;
                let running: bool = rows.first().and_then(|row| row.try_get(0).ok()).unwrap_or(false);
                // Read after the backend was seen gone (a statement of its own, so a snapshot
                // of its own): a transaction that left the server's list of running ones is
                // visible to every later snapshot if it committed.
                let witnessed = if running {
                    None
                } else {
                    let rows = query(
                        &mut conn,
                        "SELECT EXISTS (SELECT 1 FROM manifestdb.commits WHERE token = $1 \
                         AND at BETWEEN to_timestamp($2::float8) - interval '1 second' AND to_timestamp($2::float8) + interval '1 second'), \
                         now() < to_timestamp($2::float8) + $3::float8 * interval '1 second'",
                        &[(&lost.token, Type::INT8), (&began, Type::FLOAT8), (&(WITNESS_TRUSTED.as_secs_f64()), Type::FLOAT8)],
                    )?;
                    let row = rows.first();
                    let seen: bool = row.and_then(|row| row.try_get(0).ok()).unwrap_or(false);
                    let kept: bool = row.and_then(|row| row.try_get(1).ok()).unwrap_or(false);
                    if !seen && !kept {
                        return Err(Error::postgres_layer(
                            "settling a commit",
                            StorageErrorKind::OutcomeUnknown,
                            format!(
                                "transaction {} began more than {} s ago and its witness may have been deleted: the outcome \
                                 of the commit is unknown",
                                lost.xid,
                                WITNESS_TRUSTED.as_secs()
                            ),
                        ));
                    }
                    Some(seen)
                };
                let settled = settle_rule(running, witnessed);
                if settled.is_none() && !terminated && started.elapsed() > IN_PROGRESS_WAIT_MAX {
                    // Still running: its backend has not finished its COMMIT (or has not
                    // noticed its client is gone). Ended now, and its transaction with it:
                    // committed if its commit record was written, aborted otherwise.
                    query(&mut conn, &format!("SELECT pg_terminate_backend(pid) {old_backend}"), &old_backend_params)?;
                    terminated = true;
                }
                Ok(settled)
            });
            match answer {
                Ok(Some(settled)) => {
                    tracing::info!(xid = lost.xid, ?settled, "lost COMMIT settled");
                    return Ok(settled);
                }
                Ok(None) => {}
                // The server answered the question with an error: the outcome stays unknown.
                Err(err) if !is_lost_connection(&err) => {
                    if matches!(&err, Error::Storage { source, .. } if source.kind() == StorageErrorKind::OutcomeUnknown) {
                        return Err(err);
                    }
                    return Err(Error::postgres_layer(
                        "settling a commit",
                        StorageErrorKind::OutcomeUnknown,
                        format!(
                            "asking whether transaction {}, whose COMMIT reply was lost, committed failed: {err}; the outcome \
                             is unknown; the same call again settles it",
                            lost.xid
                        ),
                    ));
                }
                Err(_) => {}
            }
            if started.elapsed() > self.reconnect_time_max {
                return Err(Error::postgres_layer(
                    "settling a commit",
                    StorageErrorKind::OutcomeUnknown,
                    format!(
                        "the connection to {} was lost during COMMIT and the server could not be asked within {} s whether \
                         transaction {} committed: the outcome is unknown; the same call again settles it",
                        self.shown,
                        self.reconnect_time_max.as_secs(),
                        lost.xid
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `body` in one read-only transaction at REPEATABLE READ: every read sees one
    /// committed state (one snapshot), whatever commits meanwhile. A lost connection is retried
    /// on a new one, for up to [`RECONNECT_TIME_MAX`].
    #[cfg(test)]
    pub(crate) fn read<T>(&self, context: &'static str, mut body: impl FnMut(&mut PgMeta<'_>) -> Result<T>) -> Result<T> {
        let started = Instant::now();
        loop {
            let mut fault = None;
            let result = self.read_once(context, &mut body, &mut fault);
            match result {
                Err(err)
                    if fault.is_none_or(|f| f == Retry::Reconnect)
                        && is_lost_connection(&err)
                        && started.elapsed() < RECONNECT_TIME_MAX =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                other => return other,
            }
        }
    }

    #[cfg(test)]
    fn read_once<T>(
        &self,
        context: &'static str,
        body: &mut impl FnMut(&mut PgMeta<'_>) -> Result<T>,
        fault: &mut Option<Retry>,
    ) -> Result<T> {
        let conn = self.connection()?;
        let mut txn = Txn { conn, open: false };
        let (now_ms, _) =
            begin(&mut txn.conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").map_err(|e| Error::postgres(context, &e))?;
        txn.open = true;
        let mut meta = PgMeta::read_only(&mut txn.conn, now_ms);
        let value = body(&mut meta);
        *fault = meta.fault;
        value
    }

    /// A read snapshot: one connection in one `REPEATABLE READ READ ONLY` transaction, so every
    /// read through it sees the same committed state, until it is dropped. Opening it retries a
    /// lost connection for up to [`RECONNECT_TIME_MAX`]; a connection lost later fails the
    /// snapshot's reads (its state cannot be had again).
    pub(crate) fn begin_read(&self) -> Result<PgRead> {
        let context = "beginning a read";
        let deadline = call::deadline(Instant::now(), self.reconnect_time_max);
        loop {
            let attempt = self.connection().and_then(|conn| {
                let mut txn = Txn { conn, open: false };
                let (now_ms, _) =
                    begin(&mut txn.conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").map_err(|e| Error::postgres(context, &e))?;
                txn.open = true;
                Ok((txn, now_ms))
            });
            match attempt {
                Ok((txn, now_ms)) => return Ok(PgRead { txn: parking_lot::Mutex::new(txn), now_ms }),
                Err(err) if is_lost_connection(&err) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(err) => {
                    if is_lost_connection(&err) {
                        call::note_read_lost();
                    }
                    return Err(err);
                }
            }
        }
    }
}

/// A read snapshot of a PostgreSQL store (see [`PgLayer::begin_read`]).
pub(crate) struct PgRead {
    txn: parking_lot::Mutex<Txn>,
    /// The server's clock when the snapshot was taken.
    now_ms: u64,
}

impl std::fmt::Debug for PgRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgRead").finish_non_exhaustive()
    }
}

impl PgRead {
    /// Runs `body` over the snapshot's reads. A read that lost the connection is told to the
    /// running write call, if any (`call.rs`), which may then run again whole.
    pub(crate) fn read<T>(&self, body: impl FnOnce(&mut dyn crate::meta::MetaRead) -> Result<T>) -> Result<T> {
        let mut txn = self.txn.lock();
        let mut meta = PgMeta::read_only(&mut txn.conn, self.now_ms);
        let result = body(&mut meta);
        if result.is_err() && meta.fault == Some(Retry::Reconnect) {
            call::note_read_lost();
        }
        result
    }
}

/// How one try of an operation ended.
enum Step<T> {
    Done(Result<T>),
    /// Nothing committed; run again after a pause.
    Rerun(Error),
    /// Nothing committed; run again on a new connection.
    Reconnect(Error),
}

fn step_after<T>(context: &'static str, e: &PgError) -> Step<T> {
    match error::retry_of(e) {
        Retry::Rerun => Step::Rerun(Error::postgres(context, e)),
        Retry::Reconnect => Step::Reconnect(Error::postgres(context, e)),
        Retry::No => Step::Done(Err(Error::postgres(context, e))),
    }
}

/// Whether `err` is a lost connection (retried by reconnecting).
/// Runs `attempt` until it succeeds, fails otherwise than by a lost connection (an I/O-kind
/// storage error: the connection closed, reset or refused, the server shutting down or
/// starting), or [`RECONNECT_TIME_MAX`] has passed. For work that changes nothing or is
/// idempotent (an open's reads and migrations).
pub(crate) fn retry_lost_connection<T>(what: &'static str, mut attempt: impl FnMut() -> Result<T>) -> Result<T> {
    let started = Instant::now();
    loop {
        match attempt() {
            Err(err) if is_lost_connection(&err) && started.elapsed() < RECONNECT_TIME_MAX => {
                tracing::debug!(what, error = %err, "connection lost: trying again on a new one");
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// The error of a write that gave up reconnecting: the connection was lost (or the pool had
/// none) before its COMMIT was sent, or a lost COMMIT was settled as aborted, for the whole
/// [`RECONNECT_TIME_MAX`]. Nothing of the operation was committed; `last` is the last failure.
fn nothing_committed(context: &'static str, shown: &str, waited: Duration, last: Option<Error>) -> Error {
    let last = last.map_or_else(String::new, |err| format!(" (last error: {err})"));
    Error::postgres_layer(
        context,
        StorageErrorKind::Io,
        format!(
            "no connection to {shown} that could run the transaction within {} s: nothing of this call was committed; \
             calling it again is safe{last}",
            waited.as_secs()
        ),
    )
}

fn is_lost_connection(err: &Error) -> bool {
    matches!(err, Error::Storage { source, .. } if source.kind() == StorageErrorKind::Io)
}

/// Opens a transaction with `begin` and reads, in the same round trip, the server's clock (the
/// transaction's `now()`, in milliseconds since the epoch) and the backend's process id.
fn begin(conn: &mut Conn, begin: &str) -> std::result::Result<(u64, i32), PgError> {
    let messages = conn.simple(&format!("{begin}; SELECT (extract(epoch FROM now()) * 1000)::int8, pg_backend_pid()"))?;
    let row = messages.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => Some(row),
        _ => None,
    });
    let now_ms = row.and_then(|r| r.get(0)).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let backend = row.and_then(|r| r.get(1)).and_then(|v| v.parse::<i32>().ok()).unwrap_or(0);
    Ok((now_ms, backend))
}

/// What settles a COMMIT whose reply was lost: the transaction's id, the backend it ran on,
/// when it began (the server's clock, milliseconds since the epoch) and the token of its
/// witness row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LostCommit {
    pub(crate) xid: u64,
    pub(crate) backend: i32,
    pub(crate) began_ms: u64,
    pub(crate) token: i64,
}

/// The rule that settles a lost COMMIT from what the server shows, read in this order: whether
/// the old backend still runs the transaction, then (only once it does not) whether its
/// witness row is visible. Running: not settled yet. Ended: committed exactly if the witness
/// is visible; the transaction's id is not asked about, because a server that crashed before
/// the commit record was durable gives that id to another transaction after its restart.
pub(crate) fn settle_rule(running: bool, witnessed: Option<bool>) -> Option<Settled> {
    match (running, witnessed) {
        (true, _) | (false, None) => None,
        (false, Some(true)) => Some(Settled::Committed),
        (false, Some(false)) => Some(Settled::Aborted),
    }
}

/// How long a witness row is kept: rows older are deleted (about every thousandth commit).
pub(crate) const WITNESS_KEPT: Duration = Duration::from_secs(600);

/// How old a lost transaction may be for its missing witness to mean "aborted": a minute short
/// of [`WITNESS_KEPT`], so a deletion running meanwhile cannot have taken it. A transaction
/// older than this (begun 9 minutes before its COMMIT was lost) is an unknown outcome.
const WITNESS_TRUSTED: Duration = Duration::from_secs(540);

/// Writes the transaction's witness row, just before its COMMIT, and returns what settles that
/// COMMIT if its reply is lost (assigning the transaction an id: only called for a transaction
/// that wrote).
fn witness(conn: &mut Conn, began_ms: u64, backend: i32) -> std::result::Result<LostCommit, PgError> {
    let token = i64::from_le_bytes(random_u64().to_le_bytes());
    let rows = conn.query(
        "INSERT INTO manifestdb.commits (at, token) VALUES (now(), $1) RETURNING pg_current_xact_id()::text",
        &[(&token, Type::INT8)],
    )?;
    let text: Option<String> = rows.first().and_then(|row| row.try_get(0).ok());
    let xid = text.and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
    Ok(LostCommit { xid, backend, began_ms, token })
}

/// Deletes the witness rows older than [`WITNESS_KEPT`] after about one commit in 1,024 (those
/// whose random token ends in ten zero bits), outside any transaction. Best effort: a failure
/// is logged and leaves the rows for a later commit.
fn forget_old_witnesses(conn: &mut Conn, token: i64) {
    if token & 0x3ff != 0 {
        return;
    }
    let sql = format!("DELETE FROM manifestdb.commits WHERE at < now() - interval '{} seconds'", WITNESS_KEPT.as_secs());
    if let Err(e) = conn.batch(&sql, "deleting old commit witnesses") {
        tracing::debug!(error = %e, "old commit witnesses not deleted this time");
    }
}

/// 64 random bits from the kernel; if it cannot give them, the clock's nanoseconds, the
/// process id and a counter, mixed (unique within this process, unpredictable enough for a
/// pause's jitter and a witness token).
fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    match rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()) {
        Ok(8) => u64::from_le_bytes(bytes),
        _ => {
            static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
            let count = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (nanos ^ (u64::from(std::process::id()) << 40) ^ count.wrapping_mul(0x9e37_79b9_7f4a_7c15)).rotate_left(17)
        }
    }
}

/// The pause before rerun `n`: growing from about 1 ms to at most 50 ms, jittered, so racing
/// transactions spread out instead of colliding again.
fn pause(n: u32) {
    let ceiling_us = (1000u64 << n.min(6)).min(50_000);
    let random = random_u64();
    std::thread::sleep(Duration::from_micros(ceiling_us / 2 + random % (ceiling_us / 2 + 1)));
}

//! The PostgreSQL schema and its versioned migrations.
//!
//! Every table of the store lives in the PostgreSQL schema `manifestdb` under the very name it
//! has in redb (`runs_v1`, ...), as `(key bytea primary key, value bytea)`: the same composite
//! keys (`crate::schema`) and the same codec frames (`codec.rs`), whose checksum covers the
//! table name and the key, so a value read under another key or table fails its checksum and
//! `records::decode` applies the same checks as on redb. bytea compares byte by byte (shorter
//! first on a common prefix), so a prefix of key fields is one contiguous key range here too.
//!
//! The one exception is `pointers_v1`: it has a real `generation` column beside the framed
//! value, so moving a pointer is a compare-and-swap in the write itself
//! (`UPDATE ... WHERE key = $1 AND generation = $from`), not a read then a write.
//!
//! Migrations run at every writable open, in one transaction holding a transaction-level
//! advisory lock, so concurrent opens on several hosts apply each migration once; the versions
//! applied are rows of `manifestdb.migrations`. A database whose schema is newer than this
//! build's is refused ([`Error::UnsupportedSchema`]); a read-only open migrates nothing and
//! refuses an older schema as well.
//!
//! Invariant: the schema version of a database only grows, one migration at a time, each
//! migration committed with the row recording it.

use tokio_postgres::types::Type;

use super::conn::{Conn, PgError};
use crate::error::{Error, Result};
use crate::schema::{ALL_TABLES, POINTERS};

/// The schema version this build writes and reads.
pub(crate) const SCHEMA_VERSION: u32 = 3;

/// The key of the advisory lock that serialises migrations: "mfstdb01" as a big-endian
/// number. Transaction-level, so a crashed opener never leaves it held.
const MIGRATION_LOCK_KEY: i64 = 0x6d66_7374_6462_3031;

/// A migration: the version it brings the schema to, and its SQL.
struct Migration {
    version: u32,
    sql: fn() -> String,
}

/// Every migration, in version order. A new version appends one; none is ever changed.
const MIGRATIONS: &[Migration] =
    &[Migration { version: 1, sql: version_1 }, Migration { version: 2, sql: version_2 }, Migration { version: 3, sql: version_3 }];

/// Version 1: a table per record table, and the pointer with its generation column.
fn version_1() -> String {
    let mut sql = String::new();
    for def in ALL_TABLES {
        if def == POINTERS {
            sql.push_str(&format!(
                "CREATE TABLE manifestdb.{} (key bytea PRIMARY KEY, generation bigint NOT NULL CHECK (generation > 0), \
                 value bytea NOT NULL);\n",
                def.name
            ));
        } else {
            sql.push_str(&format!("CREATE TABLE manifestdb.{} (key bytea PRIMARY KEY, value bytea NOT NULL);\n", def.name));
        }
    }
    sql
}

/// Version 2: the tables are unchanged; what changed is how transactions exclude each other.
/// Version 1's builds ran SERIALIZABLE and took no advisory locks, so one of them writing
/// beside a build that relies on the locks (`locks.rs`) would not be excluded by them: the
/// version says so, and a version-1 build refuses to open the database once it is migrated
/// (stop every process of the older build before the first open of a newer one).
fn version_2() -> String {
    "COMMENT ON SCHEMA manifestdb IS 'manifestdb store; read-write transactions take the advisory locks of schema version 2';\n".to_owned()
}

/// Version 3: the commit witnesses (`manifestdb.commits`). Every read-write transaction
/// inserts one row, a random token under its start time, just before its COMMIT; a COMMIT
/// whose reply was lost is settled by whether that row is visible (`PgLayer::settle`), which
/// stays true when the server crashed and gave the transaction's id to another one. A
/// version-2 build writes no witness, so its lost commits would be settled as aborted by this
/// build: it refuses the database once it is migrated (stop every process of the older build
/// before the first open of a newer one). The rows are deleted once older than
/// `WITNESS_KEPT`.
fn version_3() -> String {
    "CREATE TABLE manifestdb.commits (at timestamptz NOT NULL, token bigint NOT NULL, PRIMARY KEY (at, token));\n\
     COMMENT ON TABLE manifestdb.commits IS 'manifestdb commit witnesses: one row per read-write transaction, \
     deleted after 10 minutes';\n"
        .to_owned()
}

/// What [`migrate`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Migrated {
    /// The schema version found before.
    pub(crate) from: u32,
    /// The schema version now (this build's).
    pub(crate) to: u32,
}

fn failed(context: &'static str) -> impl Fn(PgError) -> Error {
    move |e| Error::postgres(context, &e)
}

/// Runs `body` in one transaction on `conn` (`begin` opens it), committing if it succeeds and
/// rolling back otherwise.
fn in_transaction<T>(conn: &mut Conn, begin: &str, body: impl FnOnce(&mut Conn) -> Result<T>) -> Result<T> {
    let context = "a schema transaction";
    conn.batch(begin, "BEGIN").map_err(failed(context))?;
    match body(conn) {
        Ok(value) => {
            conn.batch("COMMIT", "COMMIT").map_err(failed(context))?;
            Ok(value)
        }
        Err(err) => {
            // A failed rollback means the connection is gone, which ends the transaction too.
            let _ = conn.batch("ROLLBACK", "ROLLBACK");
            Err(err)
        }
    }
}

/// Brings the database's schema to [`SCHEMA_VERSION`], in one transaction under the migration
/// lock; refuses a newer schema.
pub(crate) fn migrate(conn: &mut Conn) -> Result<Migrated> {
    let context = "migrating the PostgreSQL schema";
    // A database already at this build's version (every open but the first) needs neither the
    // lock nor a transaction: two plain statements, so concurrent opens do not queue behind
    // each other. Versions only grow, so what they read stays true.
    if let Some(found) = recorded_version(conn)? {
        if found > SCHEMA_VERSION {
            return Err(Error::UnsupportedSchema { found, supported: SCHEMA_VERSION });
        }
        if found == SCHEMA_VERSION {
            return Ok(Migrated { from: found, to: found });
        }
    }
    in_transaction(conn, "BEGIN", |conn| {
        conn.query("SELECT pg_advisory_xact_lock($1)", &[(&MIGRATION_LOCK_KEY, Type::INT8)]).map_err(failed(context))?;
        conn.batch(
            "CREATE SCHEMA IF NOT EXISTS manifestdb;
             CREATE TABLE IF NOT EXISTS manifestdb.migrations (
                 version integer PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now()
             );",
            "a migration",
        )
        .map_err(failed(context))?;
        let from = read_version(conn)?;
        if from > SCHEMA_VERSION {
            return Err(Error::UnsupportedSchema { found: from, supported: SCHEMA_VERSION });
        }
        for migration in MIGRATIONS.iter().filter(|m| m.version > from) {
            conn.batch(&(migration.sql)(), "a migration").map_err(failed(context))?;
            let version = i32::try_from(migration.version).unwrap_or(i32::MAX);
            conn.execute("INSERT INTO manifestdb.migrations (version) VALUES ($1)", &[(&version, Type::INT4)]).map_err(failed(context))?;
            tracing::info!(version = migration.version, "PostgreSQL schema migrated");
        }
        Ok(Migrated { from, to: SCHEMA_VERSION })
    })
}

/// Checks, without changing anything, that the database holds this build's schema (a
/// read-only open).
pub(crate) fn check(conn: &mut Conn) -> Result<()> {
    let context = "reading the PostgreSQL schema version";
    let found = recorded_version(conn)?;
    match found {
        None => Err(Error::io(
            "opening a PostgreSQL store read-only",
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the database holds no manifestdb store (open it writable once, with Store::open, to create one)",
            ),
        )),
        Some(found) if found > SCHEMA_VERSION => Err(Error::UnsupportedSchema { found, supported: SCHEMA_VERSION }),
        Some(found) if found < SCHEMA_VERSION => Err(Error::postgres_layer(
            context,
            crate::StorageErrorKind::NotAStore,
            format!(
                "the database's manifestdb schema is version {found}, older than this build's {SCHEMA_VERSION} \
                 (open it writable once, with Store::open, to migrate it)"
            ),
        )),
        Some(_) => Ok(()),
    }
}

/// The recorded schema version, or `None` for a database without the migrations table, read
/// without a transaction.
fn recorded_version(conn: &mut Conn) -> Result<Option<u32>> {
    let context = "reading the PostgreSQL schema version";
    let rows = conn.query("SELECT to_regclass('manifestdb.migrations') IS NOT NULL", &[]).map_err(failed(context))?;
    let exists: bool = rows.first().and_then(|row| row.try_get(0).ok()).unwrap_or(false);
    if exists { read_version(conn).map(Some) } else { Ok(None) }
}

fn read_version(conn: &mut Conn) -> Result<u32> {
    let context = "reading the PostgreSQL schema version";
    let rows = conn.query("SELECT coalesce(max(version), 0) FROM manifestdb.migrations", &[]).map_err(failed(context))?;
    let found: i32 = rows
        .first()
        .ok_or_else(|| Error::postgres_layer(context, crate::StorageErrorKind::Other, "no row"))?
        .try_get(0)
        .map_err(|e| Error::postgres(context, &PgError::Client(e)))?;
    Ok(u32::try_from(found).unwrap_or(0))
}

/// Records a schema version this build does not know, as a newer build would have: for the
/// test that such a database is refused.
#[cfg(test)]
pub(crate) fn pretend_newer(conn: &mut Conn, version: u32) -> Result<()> {
    let version = i32::try_from(version).unwrap_or(i32::MAX);
    conn.execute("INSERT INTO manifestdb.migrations (version) VALUES ($1)", &[(&version, Type::INT4)])
        .map_err(failed("recording a schema version"))?;
    Ok(())
}

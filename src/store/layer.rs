//! The storage layers a store runs on, behind one crate-private interface.
//!
//! `Store`, `ReadOnlyStore` and `Snapshot` are written once, over [`Layer`] (a writable
//! store's engine), [`ReadLayer`] (a read-only handle's) and [`ReadTxn`] (one consistent
//! read). What a layer provides is all the rest of the crate may ask of it:
//! - [`Layer::write`]: one operation's body in one transaction, committed durably if the body
//!   says so. The body sees the transaction only as [`Meta`]; a layer that runs transactions
//!   concurrently may run it again after a serialization failure, so a body keeps no effect
//!   of an earlier run but its idempotent file work;
//! - [`Layer::write_grouped`]: the same for a small write that may share its transaction and
//!   commit with concurrent callers (redb: group commit, `group.rs`; a layer with concurrent
//!   transactions runs it as [`Layer::write`]). A batch of operations is one such body;
//! - [`Layer::begin_read`] / [`ReadLayer::begin_read`]: a consistent read, [`ReadTxn`], whose
//!   reads are [`MetaRead`];
//! - [`Layer::whole_call`]: one write call of the store (snapshot reads, then transactions),
//!   run again whole by a layer whose snapshot can be lost with its connection;
//! - closing. Opening and creating are the layer's own (`store/mod.rs` for redb, `crate::pg`
//!   for PostgreSQL); the format and staging-identity checks of an open are written once over
//!   [`Meta`] (`initialize_records`, `configure_views`), and the rest of an open once for both
//!   (`Store::assemble`).
//!
//! Poisoning, panic containment, the attempt lease and everything about files stay in the
//! store, above the layer. Nothing outside this file, `meta_redb.rs`, `tables.rs`,
//! `group.rs`, `engine_error.rs`, the open path in `mod.rs`, verify's integrity check and the
//! testing backend names redb, and nothing outside `src/pg/` names the PostgreSQL client (the
//! test below checks both on the sources).

use redb::{Database, ReadOnlyDatabase, ReadTransaction, ReadableDatabase};

use super::contain::{DropContained, Poison};
use std::sync::Arc;

use super::group::GroupCommit;
use super::meta_redb::{RedbMeta, RedbRead};
use super::undo::UndoLog;
use crate::error::{Error, Result};
use crate::meta::{Meta, MetaRead, TxnEnd};

/// A writable store's storage layer.
pub(crate) enum Layer {
    /// A redb file (or a custom redb backend).
    Redb(RedbLayer),
    /// A PostgreSQL database (`crate::pg`): concurrent SERIALIZABLE transactions.
    #[cfg(feature = "postgres")]
    Postgres(crate::pg::PgLayer),
}

/// The redb layer of a writable store: the database and its group-commit queue.
pub(crate) struct RedbLayer {
    pub(super) db: DropContained<Database>,
    /// The queue of grouped writes (see `group.rs`).
    pub(super) group: GroupCommit,
    /// Begins without a flush (`lazy.rs`): `Some` on a writer opened without cross-process
    /// readers and without durable begins.
    pub(super) lazy: Option<super::lazy::LazyBegins>,
    /// The store file's undo log (`undo.rs`), told of every commit; `None` on a custom backend.
    pub(super) undo: Option<Arc<UndoLog>>,
}

impl Layer {
    /// Runs `body` in one transaction of its own and commits it if `body` says so.
    pub(super) fn write<T>(&self, context: &'static str, body: impl FnMut(&mut dyn Meta) -> Result<TxnEnd<T>>) -> Result<T> {
        match self {
            Layer::Redb(redb) => redb.write(context, body),
            #[cfg(feature = "postgres")]
            Layer::Postgres(pg) => {
                let mut body = body;
                pg.write(context, |meta, _| body(meta))
            }
        }
    }

    /// Whether a storage failure on a write path must poison the handle. redb: yes (a failed
    /// fsync cannot be retried and trusted, and redb refuses the handle's later operations
    /// anyway). PostgreSQL: no: the server owns durability, a failed transaction left nothing
    /// behind, and the next operation runs on a connection of its own.
    pub(super) fn poisons_on_failure(&self) -> bool {
        match self {
            Layer::Redb(_) => true,
            #[cfg(feature = "postgres")]
            Layer::Postgres(_) => false,
        }
    }

    /// Runs `body` in a transaction it may share with concurrent grouped calls; returns once
    /// the commit holding its write is durable (see `group.rs` for redb's guarantees). Poisons
    /// `poison` when the shared transaction fails.
    pub(super) fn write_grouped<T>(
        &self,
        poison: &Poison,
        context: &'static str,
        body: impl FnMut(&mut dyn Meta) -> Result<TxnEnd<T>>,
    ) -> Result<T> {
        match self {
            Layer::Redb(redb) => redb.write_grouped(poison, context, body),
            // Concurrent transactions instead of a shared one: every call commits its own.
            #[cfg(feature = "postgres")]
            Layer::Postgres(pg) => {
                let _ = poison;
                let mut body = body;
                pg.write(context, |meta, _| body(meta))
            }
        }
    }

    /// A consistent read of the store as of now.
    pub(super) fn begin_read(&self) -> Result<ReadTxn> {
        match self {
            Layer::Redb(redb) => Ok(ReadTxn::Redb(redb.db.begin_read().map_err(|e| Error::storage("beginning a read", e))?)),
            #[cfg(feature = "postgres")]
            Layer::Postgres(pg) => Ok(ReadTxn::Postgres(pg.begin_read()?)),
        }
    }

    /// Runs one write call of the store (its snapshot reads, then its transactions). redb: once.
    /// PostgreSQL: again from its start if a read of one of its snapshots lost its connection
    /// before anything of it committed, within the layer's 60 s of reconnecting
    /// (`crate::pg::call`).
    pub(super) fn whole_call<T>(&self, call: impl FnMut() -> Result<T>) -> Result<T> {
        match self {
            Layer::Redb(_) => {
                let mut call = call;
                call()
            }
            #[cfg(feature = "postgres")]
            Layer::Postgres(pg) => pg.whole_call(call),
        }
    }

    /// Closes the store, reporting a failure of its last writes or syncs.
    pub(super) fn close(self) -> Result<()> {
        match self {
            Layer::Redb(redb) => redb.db.into_inner().close().map_err(|e| Error::storage("closing the store", e)),
            // Dropping the pool closes its connections; nothing is pending.
            #[cfg(feature = "postgres")]
            Layer::Postgres(pg) => {
                drop(pg);
                Ok(())
            }
        }
    }
}

impl RedbLayer {
    /// After a successful durable commit: what it wrote stands (the undo log restarts), and
    /// every begin before it is durable.
    pub(super) fn commit_done(&self) {
        if let Some(undo) = &self.undo {
            undo.commit_done();
        }
        if let Some(lazy) = &self.lazy {
            lazy.durable_commit_done();
        }
    }

    /// Runs `body` in a write transaction shared with every concurrent grouped call, committed
    /// once for all of them (`group.rs`). Returns `body`'s own result once that commit is
    /// durable.
    pub(super) fn write_grouped<T>(
        &self,
        poison: &Poison,
        context: &'static str,
        body: impl FnOnce(&mut dyn Meta) -> Result<TxnEnd<T>>,
    ) -> Result<T> {
        self.write_grouped_as(poison, context, || true, body)
    }

    /// As [`RedbLayer::write_grouped`]; `durable`, asked once `body` has asked for a commit,
    /// says whether its write needs a durable commit (a begin allowed to skip its flush,
    /// `lazy.rs`, does not); see [`GroupCommit::write`].
    pub(super) fn write_grouped_as<T>(
        &self,
        poison: &Poison,
        context: &'static str,
        durable: impl FnOnce() -> bool,
        body: impl FnOnce(&mut dyn Meta) -> Result<TxnEnd<T>>,
    ) -> Result<T> {
        self.group.write(&self.db, poison, context, durable, body, || self.commit_done())
    }

    fn write<T>(&self, context: &'static str, mut body: impl FnMut(&mut dyn Meta) -> Result<TxnEnd<T>>) -> Result<T> {
        let txn = self.db.begin_write().map_err(|e| Error::storage(context, e))?;
        // The tables the body opened close with its `RedbMeta`, before the commit.
        let end = body(&mut RedbMeta::new(&txn))?;
        match end {
            TxnEnd::Commit(value) => {
                txn.commit().map_err(|e| Error::storage(context, e))?;
                self.commit_done();
                Ok(value)
            }
            TxnEnd::Abort(value) => {
                txn.abort().map_err(|e| Error::storage(context, e))?;
                Ok(value)
            }
        }
    }
}

/// A read-only handle's storage layer.
pub(crate) enum ReadLayer {
    /// A redb file opened read-only (or a custom redb backend).
    Redb(DropContained<ReadOnlyDatabase>),
    /// A PostgreSQL database, read through REPEATABLE READ READ ONLY transactions.
    #[cfg(feature = "postgres")]
    Postgres(crate::pg::PgLayer),
}

impl ReadLayer {
    /// A consistent read of the store as of now.
    pub(super) fn begin_read(&self) -> Result<ReadTxn> {
        match self {
            ReadLayer::Redb(db) => Ok(ReadTxn::Redb(db.begin_read().map_err(|e| Error::storage("beginning a read", e))?)),
            #[cfg(feature = "postgres")]
            ReadLayer::Postgres(pg) => Ok(ReadTxn::Postgres(pg.begin_read()?)),
        }
    }

    /// Closes the handle and releases its locks.
    pub(super) fn close(self) -> Result<()> {
        match self {
            ReadLayer::Redb(db) => db.into_inner().close().map_err(|e| Error::storage("closing the store", e)),
            #[cfg(feature = "postgres")]
            ReadLayer::Postgres(pg) => {
                drop(pg);
                Ok(())
            }
        }
    }
}

/// One consistent read of the store (a `Snapshot`'s): every read through it comes from one
/// committed state.
pub(crate) enum ReadTxn {
    /// A redb read transaction; each read opens the tables it needs once ([`RedbRead`]).
    Redb(ReadTransaction),
    /// A PostgreSQL REPEATABLE READ READ ONLY transaction on a connection of its own.
    #[cfg(feature = "postgres")]
    Postgres(crate::pg::PgRead),
}

impl ReadTxn {
    /// Runs `body` over this read's [`MetaRead`].
    pub(super) fn read<T>(&self, body: impl FnOnce(&mut dyn MetaRead) -> Result<T>) -> Result<T> {
        match self {
            ReadTxn::Redb(txn) => body(&mut RedbRead::new(txn)),
            #[cfg(feature = "postgres")]
            ReadTxn::Postgres(read) => read.read(body),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The seam, checked on the sources: only a storage layer's own files name its engine's
    //! API, so `rules/`, `ops/`, `meta.rs`, `Snapshot` and the `Store` operations stay
    //! layer-agnostic.

    use std::path::{Path, PathBuf};

    /// The files (relative to `src/`) that may name redb's API: the redb layer, its open path,
    /// verify's integrity check (and the in-memory overlay backend it runs on), and the testing
    /// backend.
    const REDB_FILES: &[&str] = &[
        "store/meta_redb.rs",
        "store/overlay.rs",
        "store/tables.rs",
        "store/group.rs",
        "store/layer.rs",
        "store/engine_error.rs",
        "store/undo.rs",
        "store/lazy.rs",
        "store/mod.rs",
        "verify.rs",
        "testing.rs",
    ];

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("listing the sources") {
            let path = entry.expect("listing the sources").path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    #[test]
    fn only_the_storage_layers_name_an_engine() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        assert!(files.iter().any(|f| f.ends_with("ops/publish.rs")), "the sources were found under {}", src.display());
        for file in files {
            let rel = file.strip_prefix(&src).expect("under src/").to_string_lossy().replace('\\', "/");
            let text = std::fs::read_to_string(&file).expect("reading a source file");
            let code: Vec<&str> = text.lines().filter(|line| !line.trim_start().starts_with("//")).collect();
            let names = |needle: &str| code.iter().any(|line| line.contains(needle));
            // Needles split, so that this file does not match them itself.
            if names(concat!("redb", "::")) || names(concat!("use ", "redb")) {
                assert!(REDB_FILES.contains(&rel.as_str()), "{rel} names redb's API outside the redb layer");
            }
            if names(concat!("tokio_", "postgres")) || names(concat!("postgres", "::")) {
                assert!(rel.starts_with("pg/"), "{rel} names the PostgreSQL client outside src/pg/");
            }
        }
    }
}

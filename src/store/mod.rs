//! The store: opening and creating, the write operations, and read snapshots, over a storage
//! layer (`layer.rs`; redb's open, creation and recovery are here).
//!
//! Invariant: every state change is one transaction of the layer committed durably (redb:
//! immediate durability); an operation refused on its merits writes nothing; after any
//! storage failure on a write path the handle refuses further writes until reopened.

mod attempts;
mod batch;
mod begin_dirs;
mod cleanup;
mod contain;
mod engine_error;
mod files;
mod group;
mod handles;
mod layer;
mod lazy;
mod meta_redb;
mod overlay;
mod read;
mod retention;
mod staging_root;
mod tables;
mod undo;
mod walk;
mod write;

use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use redb::{Builder, ConcurrencyMode, Database, DatabaseError, StorageBackend, WriteTransaction};

pub use cleanup::CleanupApply;
use contain::{DropContained, contain_open};
pub(crate) use contain::{ENGINE, Poison};
/// For the view root's creation.
/// For `verify`: file observation without following symlinks.
pub(crate) use files::observe;
pub use files::{describe_file, file_crc32, list_staged_files};
use layer::{Layer, ReadLayer, RedbLayer};
pub use read::Snapshot;
use undo::{UndoFile, UndoLog};
pub use write::{EFFECT_CLAIM_LEASE_MAX, PreparedValidation};

use crate::error::{Error, Result};
use crate::meta::Meta;
pub(crate) use crate::meta::TxnEnd;
use crate::model::TaskKey;
use crate::records::{MetaRecord, ViewTreesRecord, ViewsRecord};
use crate::rules::staging::{self, MarkerSeen, RootAction};
use crate::schema::{ALL_TABLES, FORMAT_VERSION, META, META_FORMAT_KEY};
use crate::views::{Check, ViewMode, ViewOptions, ViewStatus, Views};
use meta_redb::RedbMeta;
use staging_root::RootSeen;
pub(crate) use staging_root::StagingRoot;

/// How a store is opened.
///
/// Start from the defaults and change what you need:
///
/// ```
/// use manifestdb::{Store, StoreOptions, ViewOptions};
///
/// # fn main() -> Result<(), manifestdb::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let options = StoreOptions {
///     // Publish views (and a Delta table per Parquet dataset) under `views/`.
///     views: Some(ViewOptions::hard_links(dir.path().join("views"))),
///     // Files and directories the open creates readable by the owner's group too.
///     group_access: true,
///     ..StoreOptions::default()
/// };
/// let store = Store::open_with_options(dir.path().join("store.redb"), dir.path().join("staging"), &options)?;
/// assert_eq!(store.view_root(), Some(std::fs::canonicalize(dir.path().join("views")).unwrap().as_path()));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// Memory redb may use to cache pages, in bytes. redb's own default is 1 GiB per database,
    /// far more than a scheduler's metadata needs; manifestdb's default is 64 MiB.
    pub cache_size_bytes: usize,
    /// The attempt lease: how long an attempt may go without finishing or sending a heartbeat
    /// ([`Store::heartbeat`]) before [`Store::abandon_expired_attempts`] records it abandoned.
    /// Cleanup age thresholds must exceed it.
    ///
    /// The lease belongs to the store, not to a handle: the store records the longest lease any
    /// writer asked for, and every handle uses the longer of the recorded one and its own
    /// ([`Store::attempt_lifetime_max_ms`]). `None` (the default) uses the recorded lease,
    /// [`DEFAULT_ATTEMPT_LIFETIME`] for a new store; `Some(d)` raises it to `d` if longer. It
    /// never shrinks: attempts begun under a longer lease may still be running. So an operator's
    /// process (the CLI) can neither abandon the scheduler's attempts early nor plan a cleanup
    /// inside their lease.
    ///
    /// A longer lease is recorded only by the first write of this handle that commits (in the
    /// same transaction): opening, a dry run or a refused operation records nothing. A lease
    /// longer than [`ATTEMPT_LIFETIME_MAX`] is refused when the store is opened.
    pub attempt_lifetime_max: Option<std::time::Duration>,
    /// Validation of a run with a grain: the longest CSV record (one row, quoted newlines
    /// included) it reads, in bytes. A longer record makes the row unparsable and stops reading
    /// that file, so a 2 GiB line costs no more memory than this. Default 16 MiB.
    pub csv_record_bytes_max: usize,
    /// Validation of a run with a grain: the estimated memory of the exact in-memory set of
    /// grain keys, in bytes (the allocated key arena and hash table). Past it the set is sorted
    /// and spilled to a private directory under the staging root, and the runs are merged at
    /// the end (see the book, `docs/src/library.md`). Default 64 MiB.
    pub grain_key_bytes_in_memory_max: usize,
    /// Publish views: after every publish and rollback commit, the dataset's current
    /// generation is given to engines under `<root>/<dataset>/`: a Parquet dataset's Delta
    /// table (`table/`) gets a version holding it, and for the datasets with directory trees
    /// ([`crate::ViewTrees`], none by default) it is materialised as `v<N>/` (hard links or
    /// copies of the accepted files plus `_manifest.json`) and `current` is moved to it (see
    /// [`crate::ViewOptions`] and `views.rs`). Off by default.
    ///
    /// Like the lease, the view root belongs to the store once set: it is recorded, and every
    /// later writable handle opened with `None` keeps the recorded views up to date (so an
    /// operator's rollback or expiry moves or removes views too). `Some` records a new root or
    /// mode (and, with [`ViewOptions::trees`] `Some`, a new choice of trees); views under an old
    /// root are then left untouched.
    pub views: Option<ViewOptions>,
    /// Who may read and write what a writable open creates: the store file, its directory,
    /// the staging root and the view root. `false` (the default): the owner only (files 0600,
    /// directories 0700), whatever the umask, so no other local user reads the store through
    /// its files. `true`: the owner's group too (0660, 0770), matching a server's socket made
    /// for the group (`ServerOptions::socket_group_access`, feature `server`). Only what is
    /// created is given a mode: an existing file or directory keeps its own (`chmod` it).
    pub group_access: bool,
    /// Whether processes other than the writer may open the store read-only ([`ReadOnlyStore`],
    /// the CLI's read verbs) while it is open for writing. `true` (the default): redb's
    /// `SingleWriter` mode, whose every commit is two-phase (two flushes of the store file) so
    /// that another process never follows a commit whose pages are not on disk. `false`: redb's
    /// `ExclusiveWriter` mode, which locks the whole file: every commit is one flush, and begins
    /// may skip theirs (see [`StoreOptions::durable_begins`]); a reader in another process is
    /// refused ([`Error::AlreadyOpen`]) until the writer closes. For an embedded scheduler
    /// that reads through its own handle. redb file only; the PostgreSQL layer ignores it.
    pub cross_process_readers: bool,
    /// With [`StoreOptions::cross_process_readers`] `false`: `false` (the default) lets
    /// [`Store::begin_attempt`] commit without a flush of its own, made durable by the handle's
    /// next durable commit (a finish, a verdict, a publish, the close). A power loss or a crash
    /// may then forget an acknowledged begin; its attempt number and staging directory are never
    /// issued again (the task's next begin takes the number after it), and its worker's
    /// finish gets [`Error::UnknownAttempt`], so the task is retried (see the book's
    /// crash-safety chapter). `true`: every begin is durable when it returns. Ignored (every
    /// begin durable) with cross-process readers, which redb allows no commit without a flush.
    pub durable_begins: bool,
}

/// The mode of a directory a writable open creates (see [`StoreOptions::group_access`]).
pub(crate) fn created_dir_mode(group_access: bool) -> u32 {
    if group_access { 0o770 } else { 0o700 }
}

/// The mode of the store file a writable open creates (see [`StoreOptions::group_access`]).
pub(crate) fn created_file_mode(group_access: bool) -> u32 {
    if group_access { 0o660 } else { 0o600 }
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            cache_size_bytes: 64 * 1024 * 1024,
            attempt_lifetime_max: None,
            views: None,
            csv_record_bytes_max: 16 * 1024 * 1024,
            grain_key_bytes_in_memory_max: 64 * 1024 * 1024,
            group_access: false,
            cross_process_readers: true,
            durable_begins: false,
        }
    }
}

/// A store opened for writing: the scheduler's handle.
///
/// One process at a time may hold a `Store` on a file; other processes may open it read-only
/// ([`ReadOnlyStore`]) meanwhile. `Store` is `Send + Sync`: share it between worker threads
/// behind an `Arc`. Each call is one transaction; the crate's front page walks through the
/// whole protocol.
///
/// ```
/// use manifestdb::{DataFormat, Error, Grain, RunSpec, Store, TaskKey, TaskSpec};
///
/// # fn main() -> Result<(), Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path().join("store.redb"), dir.path().join("staging"))?;
/// let grain = Grain::new(DataFormat::Csv, &["store", "item"], "units");
/// store.declare_run(&RunSpec::new("daily", "r1", "sales@v42").with_task(TaskSpec::new("region=eu", 2)).with_grain(grain))?;
/// let ticket = store.begin_attempt(&TaskKey::new("daily", "r1", "region=eu"))?;
/// assert!(ticket.staging_dir.starts_with(store.staging_root()));
/// // A second writer on the same file is refused while this handle lives.
/// assert!(matches!(Store::open(dir.path().join("store.redb"), dir.path().join("staging")), Err(Error::AlreadyOpen { .. })));
/// # Ok(())
/// # }
/// ```
pub struct Store {
    /// The storage layer: the engine's database and its transactions (see `layer.rs`).
    layer: Layer,
    db_path: Option<PathBuf>,
    /// The staging root, local or on object storage (`staging_root.rs`).
    staging: StagingRoot,
    /// Set by the first storage failure on a write path or panic inside redb; see
    /// [`Error::Poisoned`] and `contain.rs`.
    poison: Poison,
    /// The attempt lease in force: the recorded one, or this handle's if longer.
    attempt_lifetime_max_ms: u64,
    /// This handle's lease when it is longer than the recorded one and not recorded yet (0:
    /// nothing to record). The next committing write records it (see [`Store::record_lease`]).
    lease_to_record: AtomicU64,
    /// The staging identity the store records; the root's marker must name it.
    staging_identity: String,
    /// The store's identity ([`Store::store_id`]), made from its meta record.
    store_id: String,
    /// [`StoreOptions::csv_record_bytes_max`].
    csv_record_bytes_max: usize,
    /// [`StoreOptions::grain_key_bytes_in_memory_max`].
    grain_key_bytes_in_memory_max: usize,
    /// The view root, if the store publishes views.
    views: Option<Views>,
    /// The staging directories this handle made durable, each synced once (`files.rs`).
    durable_dirs: files::DurableDirs,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("db_path", &self.db_path).field("staging_root", &self.staging.path()).finish()
    }
}

/// Refuses a PostgreSQL URL in a build without the PostgreSQL layer, which would otherwise
/// take it for the path of a store file.
#[cfg(not(feature = "postgres"))]
fn refuse_postgres_url(location: &Path) -> Result<()> {
    match location.to_str() {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => Err(Error::invalid(
            "store location",
            url,
            "this build of manifestdb has no PostgreSQL layer; enable the crate's `postgres` feature",
        )),
        _ => Ok(()),
    }
}

fn builder(options: &StoreOptions) -> Builder {
    let mut builder = Builder::new();
    let mode = if options.cross_process_readers { ConcurrencyMode::SingleWriter } else { ConcurrencyMode::ExclusiveWriter };
    builder.set_cache_size(options.cache_size_bytes).set_concurrency_mode(mode);
    builder
}

/// A builder for a writable open that tells whether redb had to repair the store (its last
/// writer crashed): `lazy::settle_after_open` needs to know.
fn writable_builder(options: &StoreOptions) -> (Builder, Arc<AtomicBool>) {
    let repaired = Arc::new(AtomicBool::new(false));
    let mut builder = builder(options);
    let flag = Arc::clone(&repaired);
    builder.set_repair_callback(move |_| flag.store(true, Ordering::Release));
    (builder, repaired)
}

fn open_error(path: &Path, err: DatabaseError) -> Error {
    match err {
        DatabaseError::DatabaseAlreadyOpen => Error::AlreadyOpen { path: path.to_path_buf() },
        // Only a read-only open reaches this (manifestdb sets no repair callback), after its own
        // recovery could not run: redb's message, "Database repair aborted.", says too little.
        err @ DatabaseError::RepairAborted => Error::storage(
            "opening the store: it was not closed cleanly (its writer crashed) and needs recovery; run `manifestdb recover` \
             on it (or open it with Store::open)",
            err,
        ),
        other => Error::storage("opening the store", other),
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The name of the marker file in a staging root. It names the staging identity its store
/// records: a store refuses (with [`Error::StagingRootMismatch`]) a staging root whose marker
/// is missing, damaged or another store's, unless the root is empty (then the marker is
/// written). Cleanup never lists or deletes it. Do not remove it.
pub const STAGING_ROOT_MARKER: &str = ".manifestdb-staging-root";

/// The attempt lease of a new store whose creator asked for none: 1 hour.
pub const DEFAULT_ATTEMPT_LIFETIME: std::time::Duration = std::time::Duration::from_secs(3600);

/// The longest attempt lease a store records: 30 days. A longer one is refused when a store
/// is opened, so that no typo (or `u64::MAX`) can make every attempt unabandonable forever.
pub const ATTEMPT_LIFETIME_MAX: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

fn lifetime_ms(options: &StoreOptions) -> Result<Option<u64>> {
    let Some(requested) = options.attempt_lifetime_max else { return Ok(None) };
    if requested > ATTEMPT_LIFETIME_MAX {
        return Err(Error::invalid(
            "attempt lifetime",
            &format!("{} ms", requested.as_millis()),
            format!("is longer than the maximum of {} ms (30 days)", ATTEMPT_LIFETIME_MAX.as_millis()),
        ));
    }
    Ok(Some(u64::try_from(requested.as_millis()).unwrap_or(u64::MAX)))
}

fn inspect_root(fd: &OwnedFd, path: &Path) -> Result<(MarkerSeen, bool)> {
    let marker = match handles::read_marker(fd.as_fd()) {
        Ok(handles::Marker::Absent) => MarkerSeen::Absent,
        Ok(handles::Marker::Present(id)) => MarkerSeen::Present(id),
        Ok(handles::Marker::Damaged(why)) => MarkerSeen::Damaged(why),
        Err(e) => return Err(Error::io(format!("reading the staging-root marker in {}", path.display()), e)),
    };
    let empty = handles::is_empty_but_marker(fd.as_fd()).map_err(|e| Error::io(format!("listing staging root {}", path.display()), e))?;
    Ok((marker, empty))
}

fn root_refused(root: &RootSeen, detail: String) -> Error {
    Error::StagingRootMismatch { path: root.root.path().to_path_buf(), detail }
}

/// The staging identity a new store takes for `root`, or why the root is refused.
fn identity_for_new_store(root: &RootSeen) -> Result<String> {
    match staging::decide(None, &root.marker, root.empty_but_marker) {
        Ok(RootAction::Claim(Some(found))) => Ok(found),
        Ok(_) => handles::new_identity().map_err(|e| Error::io("drawing a staging identity", e)),
        Err(detail) => Err(root_refused(root, detail)),
    }
}

/// What [`initialize`] found.
struct Initialized {
    /// The lease recorded in the store.
    recorded_lease_ms: u64,
    staging_identity: String,
    /// When the store was created, as its meta record holds it (with the staging identity, the
    /// store's identity).
    created_at_ms: u64,
    /// The root's marker is to be written once the transaction committed.
    write_marker: bool,
    /// Whether the transaction wrote anything (tables created, a new format record): an
    /// initialized store needs no commit, so reopening it costs no sync.
    wrote: bool,
}

/// Creates every table and the format record, or checks the format of an existing store and
/// that `root` is its staging root. A new store records `new_identity` (drawn if `None`) and
/// the lease asked for (the default if none).
fn initialize(
    txn: &WriteTransaction,
    attempt_lifetime_max_ms: Option<u64>,
    root: &RootSeen,
    new_identity: Option<&str>,
) -> Result<Initialized> {
    let existing: std::collections::BTreeSet<String> = txn
        .list_tables()
        .map_err(|e| Error::storage("listing tables", e))?
        .map(|handle| redb::TableHandle::name(&handle).to_owned())
        .collect();
    let mut wrote = false;
    for def in ALL_TABLES {
        if !existing.contains(def.name) {
            txn.open_table(tables::definition(def)).map_err(|e| Error::storage("creating tables", e))?;
            wrote = true;
        }
    }
    let mut init = initialize_records(&mut RedbMeta::new(txn), attempt_lifetime_max_ms, root, new_identity)?;
    init.wrote |= wrote;
    Ok(init)
}

/// The format record of a store: checks an existing one (its format, and that `root` is its
/// staging root), or writes a new store's, with `new_identity` (drawn if `None`) and the lease
/// asked for (the default if none).
fn initialize_records(
    meta: &mut dyn Meta,
    attempt_lifetime_max_ms: Option<u64>,
    root: &RootSeen,
    new_identity: Option<&str>,
) -> Result<Initialized> {
    let default_ms = u64::try_from(DEFAULT_ATTEMPT_LIFETIME.as_millis()).unwrap_or(u64::MAX);
    match meta.store_format()? {
        Some(record) if record.format_version == FORMAT_VERSION => {
            let action = staging::decide(Some(&record.staging_identity), &root.marker, root.empty_but_marker)
                .map_err(|detail| root_refused(root, detail))?;
            Ok(Initialized {
                recorded_lease_ms: record.attempt_lifetime_max_ms,
                write_marker: action != RootAction::Use,
                staging_identity: record.staging_identity,
                created_at_ms: record.created_at_ms,
                wrote: false,
            })
        }
        Some(record) => Err(Error::UnsupportedFormat { found: record.format_version, supported: FORMAT_VERSION }),
        None => {
            let staging_identity = match new_identity {
                Some(identity) => identity.to_owned(),
                None => identity_for_new_store(root)?,
            };
            let record = MetaRecord {
                format_version: FORMAT_VERSION,
                created_at_ms: meta.now_ms(),
                attempt_lifetime_max_ms: attempt_lifetime_max_ms.unwrap_or(default_ms),
                staging_identity,
            };
            meta.put_store_format(&record)?;
            Ok(Initialized {
                recorded_lease_ms: record.attempt_lifetime_max_ms,
                staging_identity: record.staging_identity,
                created_at_ms: record.created_at_ms,
                write_marker: true,
                wrote: true,
            })
        }
    }
}

impl Store {
    /// Opens the store at `db_path`, creating it if it does not exist, with `staging_root` as
    /// the directory under which every attempt gets its private staging directory (created if
    /// missing). With the `s3` feature, `staging_root` may be `s3://bucket/prefix`: a staging
    /// root on S3-compatible object storage, the client configured from the `AWS_*`
    /// environment (see the book's chapter on object storage); each attempt's staging directory
    /// is then its prefix's URL.
    ///
    /// Creation is crash-safe: the file is built under a temporary name, synced, linked into
    /// place and the directory synced, so a crash leaves either no store or a complete one.
    ///
    /// # Errors
    /// [`Error::AlreadyOpen`] if another handle or process has it open for writing;
    /// [`Error::UnsupportedFormat`] for a store of another format; I/O and storage errors.
    pub fn open(db_path: impl AsRef<Path>, staging_root: impl AsRef<Path>) -> Result<Store> {
        Store::open_with_options(db_path, staging_root, &StoreOptions::default())
    }

    /// As [`Store::open`], with options.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_with_options(db_path: impl AsRef<Path>, staging_root: impl AsRef<Path>, options: &StoreOptions) -> Result<Store> {
        let db_path = db_path.as_ref();
        #[cfg(not(feature = "postgres"))]
        refuse_postgres_url(db_path)?;
        let lease_ms = lifetime_ms(options)?;
        let root = StagingRoot::open(staging_root.as_ref(), options.group_access)?;
        #[cfg(feature = "postgres")]
        if let Some(url) = crate::pg::postgres_url(db_path) {
            return contain_open("opening the store", || Store::open_postgres(url, root, lease_ms, options));
        }
        // Shared with the store file's undo log: a handle that finds damage puts back what it
        // wrote (`undo.rs`).
        let poison = Poison::default();
        poison.contain("opening the store", || {
            if !db_path.exists() {
                create_file(db_path, options, lease_ms, &root)?;
            }
            let (backend, undo) = open_store_file(db_path, &poison)?;
            let (builder, repaired) = writable_builder(options);
            let db = builder.create_with_backend(backend).map_err(|e| open_error(db_path, e))?;
            undo.opened();
            let repaired = repaired.load(Ordering::Acquire);
            Store::finish_open(db, Some(db_path.to_path_buf()), root, lease_ms, options, poison.clone(), Some(undo), repaired, false)
        })
    }

    /// Opens an existing store writable and exclusively, as [`Store::open_with_options`] does,
    /// but keeps every write of the handle in memory (`overlay.rs`): the store file keeps its
    /// bytes, its length and its modification time, and neither the staging root's marker nor
    /// the views are written. For a check that needs a writer's handle and must write nothing
    /// (redb's integrity check, [`Store::verify_without_writing`]); nothing committed through
    /// the handle lasts. A PostgreSQL URL opens as [`Store::open_with_options`] does (that
    /// layer has no file to keep).
    pub(crate) fn open_check_only(db_path: &Path, staging_root: &Path, options: &StoreOptions) -> Result<Store> {
        #[cfg(not(feature = "postgres"))]
        refuse_postgres_url(db_path)?;
        #[cfg(feature = "postgres")]
        if crate::pg::postgres_url(db_path).is_some() {
            return Store::open_with_options(db_path, staging_root, options);
        }
        if !db_path.exists() {
            return Err(Error::io(
                format!("opening store {}", db_path.display()),
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            ));
        }
        let lease_ms = lifetime_ms(options)?;
        let root = StagingRoot::open(staging_root, options.group_access)?;
        let poison = Poison::default();
        poison.contain("opening the store", || {
            // Opened for writing only because redb's byte-range write locks need it: nothing is
            // written through it.
            let file = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(db_path)
                .map_err(|e| Error::storage("opening the store", redb::Error::Io(e)))?;
            let len = file.metadata().map_err(|e| Error::io(format!("inspecting {}", db_path.display()), e))?.len();
            if len == 0 {
                return Err(Error::Storage {
                    context: "opening the store",
                    source: crate::error::StorageError::new(crate::StorageErrorKind::NotAStore, "the store file is empty", None),
                });
            }
            let backend = overlay::OverlayFile::new(file).map_err(|e| open_error(db_path, e))?;
            let (builder, repaired) = writable_builder(options);
            let db = builder.create_with_backend(backend).map_err(|e| open_error(db_path, e))?;
            let repaired = repaired.load(Ordering::Acquire);
            Store::finish_open(db, Some(db_path.to_path_buf()), root, lease_ms, options, poison.clone(), None, repaired, true)
        })
    }

    /// Opens (or creates) a store on a custom redb storage backend, for example the
    /// fault-injecting one the crash tests use. No file-level creation protocol applies.
    ///
    /// The store is opened exactly as [`Store::open`] opens a file (same concurrency mode, so
    /// the same two-phase commits and locks): the backend must support redb's byte-range
    /// locks, as the testing backend does by forwarding them to a real lock file.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_with_backend(backend: impl StorageBackend, staging_root: impl AsRef<Path>, options: &StoreOptions) -> Result<Store> {
        let lease_ms = lifetime_ms(options)?;
        let root = StagingRoot::open(staging_root.as_ref(), options.group_access)?;
        let poison = Poison::default();
        poison.contain("opening the store", || {
            let (builder, repaired) = writable_builder(options);
            let db = builder.create_with_backend(backend).map_err(|e| open_error(Path::new("<backend>"), e))?;
            let repaired = repaired.load(Ordering::Acquire);
            Store::finish_open(db, None, root, lease_ms, options, poison.clone(), None, repaired, false)
        })
    }

    #[expect(clippy::too_many_arguments, reason = "the parts of an open, each its own kind")]
    fn finish_open(
        db: Database,
        db_path: Option<PathBuf>,
        root: RootSeen,
        lease_ms: Option<u64>,
        options: &StoreOptions,
        poison: Poison,
        undo: Option<std::sync::Arc<UndoLog>>,
        repaired: bool,
        check_only: bool,
    ) -> Result<Store> {
        // Owned at the boundary from here on, so that dropping it on a failed open is contained.
        let db = DropContained::new(db);
        let lazy = (!options.cross_process_readers && !options.durable_begins).then(lazy::LazyBegins::default);
        let layer = RedbLayer { db, group: group::GroupCommit::default(), undo, lazy };
        let checked = (|| -> Result<(Initialized, Option<Views>)> {
            let txn = layer.db.begin_write().map_err(|e| Error::storage("checking the store format", e))?;
            let init = initialize(&txn, lease_ms, &root, None)?;
            let settled = lazy::settle_after_open(&txn, repaired)?;
            let (views, configured) = configure_views(&mut RedbMeta::new(&txn), options, &root.root)?;
            // Only a store that needed a change pays a commit: reopening one costs no sync.
            if init.wrote || configured || settled {
                txn.commit().map_err(|e| Error::storage("checking the store format", e))?;
                layer.commit_done();
            } else {
                txn.abort().map_err(|e| Error::storage("checking the store format", e))?;
            }
            Ok((init, views))
        })();
        let (init, views) = match checked {
            Ok(checked) => checked,
            Err(err) => {
                // Before the handle closes: a damaged store gets back what the open wrote.
                if err.is_corruption() {
                    poison.saw_damage();
                }
                return Err(err);
            }
        };
        Store::assemble(Layer::Redb(layer), db_path, root, init, lease_ms, views, options, poison, check_only)
    }

    /// Opens (creating its schema and its format record if needed) the store in the PostgreSQL
    /// database at `url`, with `root` as its staging root: the format and staging-identity
    /// checks and the views' configuration in one transaction (committed only if it wrote).
    #[cfg(feature = "postgres")]
    fn open_postgres(url: &str, root: RootSeen, lease_ms: Option<u64>, options: &StoreOptions) -> Result<Store> {
        let pg = crate::pg::PgLayer::open(url, true)?;
        let (init, views) = pg.write("checking the store format", |meta, _| {
            let init = initialize_records(meta, lease_ms, &root, None)?;
            let (views, configured) = configure_views(meta, options, &root.root)?;
            Ok(if init.wrote || configured { TxnEnd::Commit((init, views)) } else { TxnEnd::Abort((init, views)) })
        })?;
        Store::assemble(Layer::Postgres(pg), None, root, init, lease_ms, views, options, Poison::default(), false)
    }

    /// The rest of an open, whatever the layer: the staging root's marker (after the commit
    /// that recorded its identity), the handle, and the views brought up to date. A
    /// `check_only` open ([`Store::open_check_only`]) writes neither the marker nor the views:
    /// a check reports what it finds.
    #[expect(clippy::too_many_arguments, reason = "the parts of an open, each its own kind")]
    fn assemble(
        layer: Layer,
        db_path: Option<PathBuf>,
        root: RootSeen,
        init: Initialized,
        lease_ms: Option<u64>,
        views: Option<Views>,
        options: &StoreOptions,
        poison: Poison,
        check_only: bool,
    ) -> Result<Store> {
        if init.write_marker && !check_only {
            // After the commit: a marker never names an identity no store recorded, except one
            // left by a creation interrupted here, which the next creation claims.
            root.root.write_marker(&init.staging_identity)?;
        }
        let requested = lease_ms.unwrap_or(0);
        let store = Store {
            layer,
            db_path,
            staging: root.root,
            poison,
            attempt_lifetime_max_ms: init.recorded_lease_ms.max(requested),
            lease_to_record: AtomicU64::new(if requested > init.recorded_lease_ms { requested } else { 0 }),
            store_id: crate::rules::effects::store_id(&init.staging_identity, init.created_at_ms),
            staging_identity: init.staging_identity,
            csv_record_bytes_max: options.csv_record_bytes_max,
            grain_key_bytes_in_memory_max: options.grain_key_bytes_in_memory_max,
            views,
            durable_dirs: files::DurableDirs::default(),
        };

        // A crash between a commit and its view swap left `current` on the previous view:
        // bring every view up to date. A view that cannot be built does not stop the store
        // from opening; it lags, `verify` reports it, and the next publish or sync retries.
        if store.views.is_some() && !check_only {
            match store.sync_views_with(Check::CurrentManifest) {
                Ok(_) => {}
                Err(err) => tracing::error!(error = %err, "views not brought up to date at open; they lag the store"),
            }
        }
        Ok(store)
    }

    /// The view root (canonical), if the store publishes views.
    pub fn view_root(&self) -> Option<&Path> {
        self.views.as_ref().map(Views::root)
    }

    /// The view mode, if the store publishes views.
    pub fn view_mode(&self) -> Option<ViewMode> {
        self.views.as_ref().map(Views::mode)
    }

    /// Where generation `generation`'s view is (`None`: the current generation's):
    /// [`Snapshot::view_path`] on a fresh snapshot.
    ///
    /// # Errors
    /// As [`Snapshot::view_path`]; [`Error::Poisoned`] after a failed write.
    pub fn view_path(&self, dataset: &str, generation: Option<u64>) -> Result<crate::ViewPath> {
        self.snapshot()?.view_path(dataset, generation)
    }

    /// The exact files of generation `generation` (`None`: the current one):
    /// [`Snapshot::view_files`] on a fresh snapshot.
    ///
    /// # Errors
    /// As [`Snapshot::view_files`]; [`Error::Poisoned`] after a failed write.
    pub fn view_files(&self, dataset: &str, generation: Option<u64>) -> Result<crate::FileList> {
        self.snapshot()?.view_files(dataset, generation)
    }

    /// The dataset's Delta table: [`Snapshot::delta_table`] on a fresh snapshot.
    ///
    /// # Errors
    /// As [`Snapshot::delta_table`]; [`Error::Poisoned`] after a failed write.
    pub fn delta_table(&self, dataset: &str) -> Result<std::path::PathBuf> {
        self.snapshot()?.delta_table(dataset)
    }

    /// Brings `dataset`'s view up to date with the store: checks every view present of a
    /// stored generation (its `_manifest.json` present, parseable and right, every file present
    /// with its size, nothing extra) and rebuilds a damaged one, builds the current
    /// generation's view if it is missing, moves `current` to it, and removes leftovers of
    /// interrupted builds and the views of generations the store no longer holds. Idempotent.
    /// `Ok(None)` if the store publishes no views or the dataset has no generation. Every
    /// writable open runs a lighter form for every dataset (the current view's
    /// `_manifest.json` only), so the empty manifest a power loss leaves on a file system that
    /// lost unsynced data is repaired by the next writer.
    ///
    /// # Errors
    /// [`Error::ViewRefused`] (something under the view root is not manifestdb's, or a path
    /// cannot be placed), [`Error::ViewRoot`], I/O and storage errors. `current` is never left
    /// naming an incomplete view.
    pub fn sync_view(&self, dataset: &str) -> Result<Option<ViewStatus>> {
        crate::rules::ids::check_name("dataset", dataset)?;
        let Some(views) = &self.views else {
            return Ok(None);
        };
        views.sync(&self.snapshot()?, self.staging.path(), dataset, Check::Full)
    }

    /// [`Store::sync_view`] with the check `check` of the views already there.
    pub(crate) fn sync_view_checking(&self, dataset: &str, check: Check) -> Result<Option<ViewStatus>> {
        crate::rules::ids::check_name("dataset", dataset)?;
        let Some(views) = &self.views else {
            return Ok(None);
        };
        views.sync(&self.snapshot()?, self.staging.path(), dataset, check)
    }

    /// The view of the generation just committed: built and swapped in, without checking the
    /// views already there (an explicit sync and every open do).
    pub(crate) fn sync_view_after_commit(&self, dataset: &str) -> Result<Option<ViewStatus>> {
        let Some(views) = &self.views else {
            return Ok(None);
        };
        views.sync(&self.snapshot()?, self.staging.path(), dataset, Check::None)
    }

    /// [`Store::sync_view`] for every dataset with a generation, in name order. Stops at the
    /// first error.
    ///
    /// # Errors
    /// As [`Store::sync_view`].
    pub fn sync_views(&self) -> Result<Vec<ViewStatus>> {
        self.sync_views_with(Check::Full)
    }

    pub(crate) fn sync_views_with(&self, check: Check) -> Result<Vec<ViewStatus>> {
        let Some(views) = &self.views else {
            return Ok(Vec::new());
        };
        let snapshot = self.snapshot()?;
        let mut out = Vec::new();
        for dataset in snapshot.datasets()? {
            out.extend(views.sync(&snapshot, self.staging.path(), &dataset, check)?);
        }
        Ok(out)
    }

    /// After a commit that made `generation` current: the view follows, or the error says it
    /// lags (the commit stands).
    fn view_follows(&self, dataset: &str, generation: u64) -> Result<()> {
        if self.views.is_none() {
            return Ok(());
        }
        self.sync_view_after_commit(dataset).map(|_| ()).map_err(|err| {
            tracing::error!(dataset, generation, error = %err, "generation committed, view not updated");
            let current =
                self.views.as_ref().and_then(|v| std::fs::read_link(v.root().join(dataset).join(crate::rules::views::CURRENT)).ok());
            let on_objects = self.views.as_ref().is_some_and(Views::on_objects);
            let lagging = if on_objects {
                "its Delta table on object storage still holds an older generation (or the commit's outcome is unknown: the next \
             open or `view sync` settles it from the log on the server)"
                    .to_owned()
            } else if current.as_deref() == Some(std::path::Path::new(&crate::rules::views::view_name(generation))) {
                "its view is current (`current` names it) while its Delta table still holds an older generation".to_owned()
            } else {
                "its view was not updated: `current` still names the previous complete view".to_owned()
            };
            Error::ViewLagging { dataset: dataset.to_owned(), generation, lagging, source: Box::new(err) }
        })
    }

    pub(crate) fn views(&self) -> Option<&Views> {
        self.views.as_ref()
    }

    /// Test seam of the view build: file operation number `after_ops` (from 0, counted from
    /// this call) fails once, as a crash there would stop the build; `None` disarms it.
    #[cfg(feature = "testing")]
    pub fn inject_view_failure(&self, after_ops: Option<u64>) {
        if let Some(views) = &self.views {
            views.arm(after_ops);
        }
    }

    /// Waits until the trees of expired views, which an expiry hands to a thread of their own
    /// once it renamed them away, are removed (closing the store waits for them too).
    #[cfg(feature = "testing")]
    pub fn wait_for_view_removals(&self) {
        if let Some(views) = &self.views {
            views.wait_for_removals();
        }
    }

    /// File operations the view code made since [`Store::inject_view_failure`] was last called.
    #[cfg(feature = "testing")]
    pub fn view_operations(&self) -> u64 {
        self.views.as_ref().map_or(0, Views::operations)
    }

    /// Records this handle's longer lease through `meta`, a transaction about to commit a
    /// write, if it is not recorded yet; says whether it wrote it. Called by the write helpers
    /// only for a body that wrote, so a dry run or a refused operation never raises the
    /// recorded lease.
    fn record_lease(&self, meta: &mut dyn Meta) -> Result<bool> {
        let lease_ms = self.lease_to_record.load(Ordering::Acquire);
        if lease_ms == 0 {
            return Ok(false);
        }
        let record = meta.store_format()?.ok_or_else(|| crate::ops::corrupted(META, META_FORMAT_KEY, "the store has no format record"))?;
        if record.attempt_lifetime_max_ms >= lease_ms {
            return Ok(false);
        }
        meta.put_store_format(&MetaRecord { attempt_lifetime_max_ms: lease_ms, ..record })?;
        Ok(true)
    }

    /// After a commit that carried [`Store::record_lease`]'s write: nothing left to record.
    fn lease_recorded(&self) {
        self.lease_to_record.store(0, Ordering::Release);
    }

    /// Opens the staging root and checks its marker names this store's staging identity:
    /// every operation that creates or deletes under the root calls it first, and cleanup
    /// works through the handle it returns.
    ///
    /// # Errors
    /// [`Error::StagingRootMismatch`] if the root's marker is missing, damaged or another
    /// store's; I/O errors.
    pub(crate) fn checked_staging_root(&self) -> Result<OwnedFd> {
        let Some(path) = self.staging.local() else {
            return Err(Error::invalid(
                "staging root",
                &self.staging.path().display().to_string(),
                "is on object storage; this operation needs a local staging root",
            ));
        };
        let fd = handles::open_root(path).map_err(|e| Error::io(format!("opening staging root {}", path.display()), e))?;
        let marker =
            handles::read_marker(fd.as_fd()).map_err(|e| Error::io(format!("reading the staging-root marker in {}", path.display()), e))?;
        self.check_marker(marker).map(|()| fd)
    }

    /// Checks the staging root's marker, local or on object storage: it must name this store's
    /// staging identity. Every operation that deletes under the root calls it first.
    ///
    /// # Errors
    /// As [`Store::checked_staging_root`].
    #[cfg(feature = "s3")]
    pub(crate) fn check_staging_marker(&self) -> Result<()> {
        match &self.staging {
            StagingRoot::Local(_) => self.checked_staging_root().map(drop),
            #[cfg(feature = "s3")]
            StagingRoot::Object { root, .. } => {
                let read = root
                    .read_small(handles::MARKER_NAME, handles::MARKER_BYTES_MAX)
                    .map_err(|e| Error::io(format!("reading the staging-root marker in {}", root.url()), e))?;
                let marker = match read {
                    None => handles::Marker::Absent,
                    Some(bytes) => handles::parse_marker(&String::from_utf8_lossy(&bytes)),
                };
                self.check_marker(marker)
            }
        }
    }

    fn check_marker(&self, marker: handles::Marker) -> Result<()> {
        let path = self.staging.path().to_path_buf();
        match marker {
            handles::Marker::Present(found) if found == self.staging_identity => Ok(()),
            handles::Marker::Present(found) => Err(Error::StagingRootMismatch {
                path: path.clone(),
                detail: format!("its marker names staging identity {found}, but this store's is {}", self.staging_identity),
            }),
            handles::Marker::Absent => {
                Err(Error::StagingRootMismatch { path: path.clone(), detail: "its staging-root marker has disappeared".to_owned() })
            }
            handles::Marker::Damaged(why) => {
                Err(Error::StagingRootMismatch { path: path.clone(), detail: format!("its staging-root marker is damaged ({why})") })
            }
        }
    }

    /// Closes the store: redb flushes and syncs its clean-shutdown state and the file's locks
    /// are released. Dropping a `Store` does the same but cannot report a failure; a process
    /// that reports success after writing (the CLI) closes first and reports a failed close.
    ///
    /// # Errors
    /// A storage error if the close's writes or syncs failed (the store then needs the recovery
    /// the next open performs; every acknowledged commit is intact).
    pub fn close(self) -> Result<()> {
        let (layer, poison) = (self.layer, self.poison);
        contain_open("closing the store", || layer.close()).map_err(|err| {
            // A store found damaged fails its close too (redb's "previous I/O error", its
            // discarded allocator state): that is the damage, not a fault of the close.
            if poison.is_damaged() && !err.is_corruption() {
                Error::Corrupted {
                    table: ENGINE,
                    key: String::new(),
                    detail: crate::error::Corruption::Inconsistent { message: format!("closing the store found damaged: {err}") },
                }
            } else {
                err
            }
        })
    }

    /// Recovers a store whose writer crashed, without a staging root: opens it for writing
    /// (redb repairs it in the open) and closes it. Returns whether it needed recovery. A store
    /// closed cleanly, or held by a live writer, is left alone.
    ///
    /// # Errors
    /// [`Error::NeedsRecovery`] if it needs recovery and this process may not write the file;
    /// [`Error::AlreadyOpen`] only if a writer held it and did not finish its own recovery
    /// within seconds; storage errors.
    pub fn recover(db_path: impl AsRef<Path>) -> Result<bool> {
        let db_path = db_path.as_ref();
        let options = StoreOptions::default();
        match builder(&options).open_read_only(db_path) {
            Ok(db) => db.close().map(|()| false).map_err(|e| Error::storage("closing a probe of the store", e)),
            Err(DatabaseError::RepairAborted) => recover_unheld(db_path, &options).map(|()| true),
            Err(e) => Err(open_error(db_path, e)),
        }
    }

    /// The redb database, mutably, for `verify`'s integrity check (which needs no other
    /// transaction alive on the handle); `None` for a store on another layer.
    pub(crate) fn redb_database_mut(&mut self) -> Option<&mut Database> {
        match &mut self.layer {
            Layer::Redb(redb) => Some(&mut redb.db),
            #[cfg(feature = "postgres")]
            Layer::Postgres(_) => None,
        }
    }

    /// The staging root: a local root's canonical path, or an object root's URL
    /// (`s3://bucket/prefix`, feature `s3`) as a path, so that joining an attempt's
    /// `staging_rel` to it gives the attempt's URL.
    pub fn staging_root(&self) -> &Path {
        self.staging.path()
    }

    /// The staging root on object storage, if it is one (`s3://bucket/prefix`).
    pub fn staging_url(&self) -> Option<&str> {
        match &self.staging {
            StagingRoot::Local(_) => None,
            #[cfg(feature = "s3")]
            StagingRoot::Object { root, .. } => Some(root.url()),
        }
    }

    /// The store's identity: 32 hex digits made from what the store recorded once, when it was
    /// created (its staging identity and creation time), on whichever storage layer holds it.
    /// Reopening the store, restarting the process or opening it from another host gives the
    /// same id; another store (one created anew over the same staging root included) has
    /// another. Every [`Effect::idempotency_key`](crate::Effect::idempotency_key) begins with it.
    pub fn store_id(&self) -> &str {
        &self.store_id
    }

    /// The store file, if the store is file-backed.
    pub fn path(&self) -> Option<&Path> {
        self.db_path.as_deref()
    }

    /// A consistent read view of the whole store as of now. It keeps seeing this state, even
    /// after later publishes, until dropped.
    ///
    /// # Errors
    /// [`Error::Poisoned`] once a write failed on this handle (open a [`ReadOnlyStore`] or
    /// reopen the store to read on); storage errors.
    pub fn snapshot(&self) -> Result<Snapshot> {
        self.poison.check()?;
        self.poison.contain("beginning a read", || {
            Ok(Snapshot::new(self.layer.begin_read()?, Some(self.staging.path().to_path_buf()), self.poison.clone()))
        })
    }

    /// The handle's poison flag, for entry points outside this module (`verify`).
    pub(crate) fn poison(&self) -> &Poison {
        &self.poison
    }

    /// Runs one write call that reads snapshots before it writes: on PostgreSQL, again from its
    /// start if such a read lost its connection before anything of the call committed, within
    /// the same 60 s as its transactions' reconnecting (see `Layer::whole_call`); on redb, once.
    pub(super) fn whole_call<T>(&self, call: impl FnMut() -> Result<T>) -> Result<T> {
        self.layer.whole_call(call)
    }

    /// Runs `body` in one write transaction of its own and commits it if `body` says so. A
    /// storage failure anywhere in it poisons the handle. A layer may run `body` more than once
    /// (see `layer.rs`).
    fn write<T>(&self, context: &'static str, mut body: impl FnMut(&mut dyn Meta) -> Result<TxnEnd<T>>) -> Result<T> {
        self.poison.check()?;
        let lease = std::cell::Cell::new(false);
        let result = self.poison.contain(context, || self.layer.write(context, |meta| self.with_lease(meta, &lease, &mut body)));
        match &result {
            Ok(_) if lease.get() => self.lease_recorded(),
            // A storage error that only a damaged file gives makes later writes refuse as
            // corruption too, so a damaged store reads as damaged whatever verb comes next.
            Err(err @ Error::Storage { .. }) if err.is_corruption() => self.poison.set_damaged(err),
            Err(err @ Error::Storage { .. }) if self.layer.poisons_on_failure() => self.poison.set(err),
            _ => {}
        }
        result
    }

    /// The redb layer's group-commit queue (`None` on PostgreSQL), for the tests that form
    /// batches on purpose.
    #[cfg(test)]
    fn group_commit(&self) -> Option<&group::GroupCommit> {
        match &self.layer {
            Layer::Redb(redb) => Some(&redb.group),
            #[cfg(feature = "postgres")]
            Layer::Postgres(_) => None,
        }
    }

    /// Runs `body` in a write transaction it may share with concurrent grouped calls (redb:
    /// group commit, `group.rs`), returning once the commit holding its write is durable.
    fn write_grouped<T>(&self, context: &'static str, mut body: impl FnMut(&mut dyn Meta) -> Result<TxnEnd<T>>) -> Result<T> {
        let lease = std::cell::Cell::new(false);
        let value =
            self.layer.write_grouped(&self.poison, context, |meta| self.with_lease(meta, &lease, &mut body)).inspect_err(|err| {
                if err.is_corruption() {
                    self.poison.saw_damage();
                }
            })?;
        if lease.get() {
            self.lease_recorded();
        }
        Ok(value)
    }

    /// A begin of `task` through [`Store::write_grouped`], committed without a flush where
    /// `lazy.rs` allows it (a redb writer opened without cross-process readers and without
    /// durable begins): the task's run is first recorded by a durable commit of its own, once
    /// per handle.
    fn write_begin<T>(&self, context: &'static str, task: &TaskKey, mut body: impl FnMut(&mut dyn Meta) -> Result<TxnEnd<T>>) -> Result<T> {
        let lazy_layer = match &self.layer {
            Layer::Redb(redb) => redb.lazy.as_ref().map(|lazy| (redb, lazy)),
            #[cfg(feature = "postgres")]
            Layer::Postgres(_) => None,
        };
        let Some((redb, lazy)) = lazy_layer else { return self.write_grouped(context, body) };
        if !lazy.run_recorded(task) {
            self.poison.check()?;
            match self.poison.contain(context, || lazy.record_run(&redb.db, task)) {
                Ok(()) => redb.commit_done(),
                Err(err @ Error::Storage { .. }) => {
                    if err.is_corruption() {
                        self.poison.set_damaged(&err);
                    } else {
                        self.poison.set(&err);
                    }
                    return Err(err);
                }
                Err(err) => return Err(err),
            }
        }
        let lease = std::cell::Cell::new(false);
        let without_flush = std::cell::Cell::new(false);
        let value = redb
            .write_grouped_as(
                &self.poison,
                context,
                || !without_flush.get(),
                |meta| {
                    let end = self.with_lease(meta, &lease, &mut body)?;
                    if matches!(end, TxnEnd::Commit(_)) {
                        without_flush.set(lazy.claim(task));
                    }
                    Ok(end)
                },
            )
            .inspect_err(|err| {
                if err.is_corruption() {
                    self.poison.saw_damage();
                }
            })?;
        if lease.get() {
            self.lease_recorded();
        }
        Ok(value)
    }

    /// Runs `body`, and after a body that commits, records this handle's longer lease in the
    /// same transaction (setting `recorded` if it wrote it).
    fn with_lease<T>(
        &self,
        meta: &mut dyn Meta,
        recorded: &std::cell::Cell<bool>,
        body: &mut impl FnMut(&mut dyn Meta) -> Result<TxnEnd<T>>,
    ) -> Result<TxnEnd<T>> {
        let end = body(meta)?;
        if matches!(end, TxnEnd::Commit(_)) && self.record_lease(meta)? {
            recorded.set(true);
        }
        Ok(end)
    }
}

/// Opens the store's view root: the one asked for (recorded if new or changed), else the
/// recorded one, else none. Refused (nothing recorded) if the root cannot serve. Also says
/// whether the record had to be written.
fn configure_views(meta: &mut dyn Meta, options: &StoreOptions, staging: &StagingRoot) -> Result<(Option<Views>, bool)> {
    let recorded = meta.views_config()?;
    let recorded_trees = meta.view_trees()?;
    let mut wanted = match (&options.views, &recorded) {
        (Some(asked), _) => asked.clone(),
        (None, Some(record)) => ViewOptions {
            root: PathBuf::from(&record.root),
            mode: if record.copy { ViewMode::Copy } else { ViewMode::HardLink },
            trees: None,
        },
        (None, None) => return Ok((None, false)),
    };
    #[cfg(all(feature = "s3", feature = "delta"))]
    if let Some(object_root) = staging.object()
        && crate::objects::is_object_url(&wanted.root)
    {
        // A view root on object storage: Delta tables and manifests, never directory trees.
        let views = Views::open_objects(&wanted, object_root)?;
        let record = ViewsRecord { root: views.root().to_string_lossy().into_owned(), copy: true };
        let trees_record = ViewTreesRecord::of(&crate::ViewTrees::Off);
        let mut wrote = false;
        if recorded.as_ref() != Some(&record) {
            meta.put_views_config(&record)?;
            wrote = true;
        }
        if recorded_trees.as_ref() != Some(&trees_record) {
            meta.put_view_trees(&trees_record)?;
            wrote = true;
        }
        return Ok((Some(views), wrote));
    }
    let Some(staging_root) = staging.local() else {
        // A directory view is a tree of hard links (or copies) of staging files: object storage
        // has no directories to link into. The Delta table can live on object storage beside
        // the staging root (`s3://bucket/prefix`).
        return Err(Error::ViewRoot {
            root: wanted.root.clone(),
            reason: format!(
                "is a local directory, and the staging root {} is on object storage: a local view would copy every object down; \
                 give a view root on object storage in the staging root's bucket (`--views s3://BUCKET/PREFIX`){}",
                staging.path().display(),
                if cfg!(all(feature = "s3", feature = "delta")) { "" } else { " with a build that has the `delta` feature" }
            ),
        });
    };
    // Asked for, else recorded, else every dataset for a root recorded before the choice
    // existed (its readers of `current` keep working), else none.
    let trees = match (wanted.trees.take(), &recorded_trees, &recorded) {
        (Some(asked), _, _) => asked,
        (None, Some(record), _) => record.trees(),
        (None, None, Some(_)) => crate::ViewTrees::All,
        (None, None, None) => crate::ViewTrees::Off,
    };
    wanted.trees = Some(trees.clone());
    let dir_mode = created_dir_mode(options.group_access);
    let views = Views::open(&wanted, staging_root, &|dir: &Path| files::create_dir_all_durable(dir, dir_mode))?;
    let record = ViewsRecord {
        // `Views::open` refuses a root that is not UTF-8.
        root: views.root().to_string_lossy().into_owned(),
        copy: views.mode() == ViewMode::Copy,
    };
    let trees_record = ViewTreesRecord::of(&trees);
    let mut wrote = false;
    if recorded.as_ref() != Some(&record) {
        if let Some(old) = &recorded {
            tracing::warn!(old = %old.root, new = %record.root, "view root changed; views under the old root are left untouched");
        }
        meta.put_views_config(&record)?;
        wrote = true;
    }
    if recorded_trees.as_ref() != Some(&trees_record) {
        meta.put_view_trees(&trees_record)?;
        wrote = true;
    }
    Ok((Some(views), wrote))
}

/// Builds a new, empty store under a temporary name and links it into place, so that a crash
/// at any point leaves either no file at `db_path` or a complete store.
fn create_file(db_path: &Path, options: &StoreOptions, lease_ms: Option<u64>, root: &RootSeen) -> Result<()> {
    let identity = identity_for_new_store(root)?;
    let dir = match db_path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // A directory made here must itself survive a power loss, or the store's entry in it
    // could vanish with it: each one made is synced into its parent.
    files::create_dir_all_durable(&dir, created_dir_mode(options.group_access))?;
    let file_name = db_path.file_name().ok_or_else(|| Error::invalid("store path", &db_path.display().to_string(), "has no file name"))?;
    let tmp = dir.join(format!(".{}.creating-{}-{}", file_name.to_string_lossy(), std::process::id(), now_ms()));
    let built = (|| {
        let db = builder(options).create(&tmp).map_err(|e| open_error(&tmp, e))?;
        // Private before it holds anything and before it has its name (see
        // `StoreOptions::group_access`); the link keeps the mode.
        set_mode(&tmp, created_file_mode(options.group_access))?;
        let txn = db.begin_write().map_err(|e| Error::storage("initializing a new store", e))?;
        initialize(&txn, lease_ms, root, Some(&identity))?;
        txn.commit().map_err(|e| Error::storage("initializing a new store", e))?;
        // redb's close syncs the file again (its clean-shutdown header): a failure there must
        // fail the creation, not be dropped with the handle.
        db.close().map_err(|e| Error::storage("closing the new store", e))?;
        files::sync_file(&tmp)?;
        // A hard link never replaces an existing file: if another process created the store in
        // the meantime, its store wins and ours is discarded.
        match fs::hard_link(&tmp, db_path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(Error::io(format!("linking new store into place at {}", db_path.display()), e)),
        }
    })();
    let removed = fs::remove_file(&tmp);
    built?;
    removed.map_err(|e| Error::io(format!("removing {}", tmp.display()), e))?;
    files::sync_dir(&dir)
}

/// The store file at `db_path` opened for writing, behind its undo log (`undo.rs`), whose
/// damage `poison` records. An empty file is not a store (redb would make one in it).
fn open_store_file(db_path: &Path, poison: &Poison) -> Result<(UndoFile, std::sync::Arc<UndoLog>)> {
    let file =
        fs::OpenOptions::new().read(true).write(true).open(db_path).map_err(|e| Error::storage("opening the store", redb::Error::Io(e)))?;
    let len = file.metadata().map_err(|e| Error::io(format!("inspecting {}", db_path.display()), e))?.len();
    if len == 0 {
        return Err(Error::Storage {
            context: "opening the store",
            source: crate::error::StorageError::new(crate::StorageErrorKind::NotAStore, "the store file is empty", None),
        });
    }
    UndoFile::new(file, poison.clone()).map_err(|e| open_error(db_path, e))
}

/// Gives `path` exactly `mode` (the umask only ever removes bits at creation).
fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|e| Error::io(format!("setting the mode of {}", path.display()), e))
}

/// A recovering open's part of `lazy::settle_after_open`, in a transaction of its own.
fn settle_lost_begins(db: &Database, repaired: bool) -> Result<()> {
    let context = "settling the begins a crashed writer may have forgotten";
    let txn = db.begin_write().map_err(|e| Error::storage(context, e))?;
    if lazy::settle_after_open(&txn, repaired)? {
        txn.commit().map_err(|e| Error::storage(context, e))
    } else {
        txn.abort().map_err(|e| Error::storage(context, e))
    }
}

/// How long a reader waits, in total, for a writer that holds a crashed store to finish the
/// recovery its own open performs.
const RECOVERY_WAIT_MS_MAX: u64 = 5_000;

/// Recovers a store whose writer crashed, for a reader: takes the writer lock by opening the
/// store for writing (redb repairs it in that open), and closes it at once, releasing the lock.
/// If a writer holds the store meanwhile, its open recovers it: wait until a read-only open
/// succeeds.
fn recover_unheld(db_path: &Path, options: &StoreOptions) -> Result<()> {
    let started = std::time::Instant::now();
    loop {
        let (writable, repaired) = writable_builder(options);
        match writable.open(db_path) {
            Ok(db) => {
                tracing::info!(path = %db_path.display(), "recovered a store whose writer crashed");
                // What the crashed writer may have forgotten is settled here too: the next
                // writer's open finds the store repaired already.
                settle_lost_begins(&db, repaired.load(Ordering::Acquire))?;
                return db.close().map_err(|e| Error::storage("closing the store after recovering it", e));
            }
            Err(DatabaseError::DatabaseAlreadyOpen) => {
                // A writer (or another recovering reader) holds it. Once its open completes the
                // file reads as held by a live writer, and a read-only open works.
                match builder(options).open_read_only(db_path) {
                    Ok(db) => return db.close().map_err(|e| Error::storage("closing a probe of the store", e)),
                    Err(DatabaseError::RepairAborted | DatabaseError::DatabaseAlreadyOpen) => {}
                    Err(e) => return Err(open_error(db_path, e)),
                }
                if started.elapsed() > std::time::Duration::from_millis(RECOVERY_WAIT_MS_MAX) {
                    return Err(open_error(db_path, DatabaseError::RepairAborted));
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(DatabaseError::Storage(redb::StorageError::Io(e)))
                if matches!(e.kind(), std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem) =>
            {
                return Err(Error::NeedsRecovery { path: db_path.to_path_buf(), source: e });
            }
            Err(e) => return Err(open_error(db_path, e)),
        }
    }
}

/// A store opened read-only, typically by another process than the scheduler's (an operator's
/// CLI, a reader job). It sees each generation the writer publishes once committed.
///
/// ```
/// use manifestdb::{ReadOnlyStore, Store};
///
/// # fn main() -> Result<(), manifestdb::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let writer = Store::open(dir.path().join("store.redb"), dir.path().join("staging"))?;
/// // Beside the writer (in this process or another): one snapshot per consistent read.
/// let reader = ReadOnlyStore::open(dir.path().join("store.redb"))?;
/// assert_eq!(reader.snapshot()?.current("daily")?, None); // nothing published yet
/// # drop(writer);
/// # Ok(())
/// # }
/// ```
pub struct ReadOnlyStore {
    /// The storage layer (see `layer.rs`).
    layer: ReadLayer,
    /// Set by a panic inside redb (see `contain.rs`); a read-only handle never writes.
    poison: Poison,
    staging: Option<StagingRoot>,
    /// The directories this handle's prepared validations made durable.
    durable_dirs: files::DurableDirs,
}

impl std::fmt::Debug for ReadOnlyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyStore").finish_non_exhaustive()
    }
}

impl ReadOnlyStore {
    /// Opens an existing store for reading, while a writer may hold it.
    ///
    /// Readers outlive writers (DOMAIN 12): if the store's writer crashed (SIGKILL, power loss,
    /// a failed close) and no writer holds it now, the open first recovers it, as
    /// [`Store::recover`] does (the writer lock taken for the recovery only, then released),
    /// and then reads the last committed generation. If a writer holds the store, its own open
    /// recovered it and the reader simply reads beside it.
    ///
    /// # Errors
    /// [`Error::NeedsRecovery`] if the store needs recovery and this process may not write the
    /// file (the message names the command that fixes it); storage errors;
    /// [`Error::UnsupportedFormat`].
    pub fn open(db_path: impl AsRef<Path>) -> Result<ReadOnlyStore> {
        ReadOnlyStore::open_with_options(db_path, &StoreOptions::default())
    }

    /// As [`ReadOnlyStore::open`], with options.
    ///
    /// # Errors
    /// As [`ReadOnlyStore::open`].
    pub fn open_with_options(db_path: impl AsRef<Path>, options: &StoreOptions) -> Result<ReadOnlyStore> {
        let db_path = db_path.as_ref();
        #[cfg(not(feature = "postgres"))]
        refuse_postgres_url(db_path)?;
        #[cfg(feature = "postgres")]
        if let Some(url) = crate::pg::postgres_url(db_path) {
            return contain_open("opening the store read-only", || {
                let layer = ReadLayer::Postgres(crate::pg::PgLayer::open(url, false)?);
                let store = ReadOnlyStore { layer, poison: Poison::default(), staging: None, durable_dirs: Default::default() };
                // A snapshot whose connection is lost cannot be read again: a new one is taken.
                crate::pg::retry_lost_connection("reading the store format", || store.snapshot()?.check_format())?;
                Ok(store)
            });
        }
        if !db_path.exists() {
            return Err(Error::io(
                format!("opening store {}", db_path.display()),
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            ));
        }
        contain_open("opening the store read-only", || {
            let db = match builder(options).open_read_only(db_path) {
                Ok(db) => db,
                Err(DatabaseError::RepairAborted) => {
                    recover_unheld(db_path, options)?;
                    builder(options).open_read_only(db_path).map_err(|e| open_error(db_path, e))?
                }
                Err(e) => return Err(open_error(db_path, e)),
            };
            let store = ReadOnlyStore {
                layer: ReadLayer::Redb(DropContained::new(db)),
                poison: Poison::default(),
                staging: None,
                durable_dirs: Default::default(),
            };
            store.snapshot()?.check_format()?;
            Ok(store)
        })
    }

    /// Opens a store on a custom redb storage backend for reading, as [`ReadOnlyStore::open`]
    /// opens a file (same concurrency mode), for example beside a writer on the testing
    /// backend's `FaultyBackend::another_process` handle (feature `testing`).
    ///
    /// # Errors
    /// As [`ReadOnlyStore::open`].
    pub fn open_with_backend(backend: impl StorageBackend, options: &StoreOptions) -> Result<ReadOnlyStore> {
        contain_open("opening the store read-only", || {
            let db = builder(options).open_read_only_with_backend(backend).map_err(|e| open_error(Path::new("<backend>"), e))?;
            let store = ReadOnlyStore {
                layer: ReadLayer::Redb(DropContained::new(db)),
                poison: Poison::default(),
                staging: None,
                durable_dirs: Default::default(),
            };
            store.snapshot()?.check_format()?;
            Ok(store)
        })
    }

    /// A consistent read view as of now.
    ///
    /// # Errors
    /// Storage errors.
    pub fn snapshot(&self) -> Result<Snapshot> {
        self.poison.contain("beginning a read", || {
            Ok(Snapshot::new(self.layer.begin_read()?, self.staging.as_ref().map(|s| s.path().to_path_buf()), self.poison.clone()))
        })
    }

    /// Tells the handle where the staging root is, so that its snapshots give absolute file
    /// paths ([`crate::PartitionEntry::staging_dir`]) and verify can check files. The path is
    /// made absolute (canonical if it exists) here, whatever the current directory later is.
    ///
    /// # Errors
    /// [`Error::Io`] if the current directory cannot be read to make a relative path absolute.
    pub fn with_staging_root(mut self, staging_root: impl AsRef<Path>) -> Result<ReadOnlyStore> {
        self.staging = Some(StagingRoot::resolve(staging_root.as_ref())?);
        Ok(self)
    }

    /// Prepares a validation from this read-only handle ([`Store::prepare_validation`]): reads
    /// the attempt's files and decides the verdict, so that a writer stores it
    /// ([`Store::store_validation`]) without reading files while it holds the store. Needs the
    /// staging root ([`ReadOnlyStore::with_staging_root`]), which the writer must share. Data
    /// read at a grain is read with the limits of [`StoreOptions::default`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] without a staging root; otherwise as
    /// [`Store::validate_attempt`].
    pub fn prepare_validation(&self, attempt: &crate::AttemptKey, check: crate::FileCheck) -> Result<PreparedValidation> {
        self.prepare_validation_with_progress(attempt, check, crate::progress::NO_PROGRESS)
    }

    /// [`ReadOnlyStore::prepare_validation`], reporting how far its file work has come to
    /// `progress`, as [`Store::validate_attempt_with_progress`] does.
    ///
    /// # Errors
    /// As [`ReadOnlyStore::prepare_validation`].
    pub fn prepare_validation_with_progress(
        &self,
        attempt: &crate::AttemptKey,
        check: crate::FileCheck,
        progress: &dyn Fn(crate::Progress),
    ) -> Result<PreparedValidation> {
        let Some(root) = &self.staging else {
            return Err(Error::invalid("staging root", "", "is needed to check an attempt's files (with_staging_root)"));
        };
        self.poison.contain("preparing a validation", || {
            let snapshot = self.snapshot()?;
            let defaults = StoreOptions::default();
            let limits = write::ReadLimits {
                record_bytes_max: defaults.csv_record_bytes_max,
                key_bytes_in_memory_max: defaults.grain_key_bytes_in_memory_max,
            };
            let work = write::FileWork { root, limits, durable: &self.durable_dirs };
            write::prepare_validation(&snapshot, &work, attempt, check, progress)
        })
    }

    /// Closes the store and releases its locks at once, even if snapshots are still alive
    /// (their later reads fail).
    ///
    /// # Errors
    /// A storage error if releasing the file failed.
    pub fn close(self) -> Result<()> {
        let layer = self.layer;
        contain_open("closing the store", || layer.close())
    }
}

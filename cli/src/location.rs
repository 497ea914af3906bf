//! Where the store lives: `--store`/`--staging`, or one `--dir` holding both, with
//! environment-variable fallbacks. Turned into paths once, then opened read-only or for
//! writing.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use manifestdb::documents::reads::DocumentError;
use manifestdb::server::{Listen, socket_path};
use manifestdb::{ReadOnlyStore, Store, StoreOptions, ViewMode, ViewOptions};

use crate::exit::{CliError, Exit, not_found, usage};

/// The store file's name inside `--dir`.
pub const STORE_FILE: &str = "store.redb";
/// The staging root's name inside `--dir`.
pub const STAGING_DIR: &str = "staging";

/// The heading of the options every verb takes (the store's location, the output, the log), so
/// that a verb's `--help` lists its own flags apart from them.
pub const GLOBAL: &str = "Global options";

/// The store-location flags, shared by every verb (listed under the global options' heading).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = GLOBAL)]
pub struct LocationArgs {
    /// Directory holding the store file (store.redb) and the staging root (staging/).
    #[arg(long, global = true, value_name = "DIR", env = "MANIFESTDB_DIR")]
    pub dir: Option<PathBuf>,

    /// The store file (overrides the one in --dir), or a PostgreSQL database's URL
    /// (`postgres://user@host:port/dbname`; then pass --staging too).
    #[arg(long, global = true, value_name = "PATH", env = "MANIFESTDB_STORE")]
    pub store: Option<PathBuf>,

    /// The staging root, under which every attempt gets its private directory (overrides the
    /// one in --dir); or s3://BUCKET/PREFIX on S3-compatible object storage, with credentials,
    /// region and endpoint from the AWS_* environment (AWS_ENDPOINT_URL, AWS_ALLOW_HTTP).
    #[arg(long, global = true, value_name = "DIR", env = "MANIFESTDB_STAGING")]
    pub staging: Option<PathBuf>,

    /// Raise the store's attempt lease (how long an attempt may go without finishing or a
    /// heartbeat before `gc abandon` may abandon it). The lease is recorded in the store (1h
    /// for a new one) and never shrinks; without this flag the recorded lease is used.
    #[arg(long, global = true, value_name = "DURATION", value_parser = crate::values::parse_attempt_lifetime, env = "MANIFESTDB_ATTEMPT_LIFETIME")]
    pub attempt_lifetime: Option<std::time::Duration>,

    /// Publish views under DIR: after every publish and rollback, a Parquet dataset's Delta
    /// table `DIR/<dataset>/table` gets a version holding the new generation, and for datasets
    /// with directory trees (--view-trees) `DIR/<dataset>/current` names the generation's
    /// directory `v<N>` (hard links to the accepted files, named after the partition version
    /// holding them, and `_manifest.json`). Readers resolve `current` once (`realpath`, or the
    /// path `manifestdb view DATASET` prints) and read that directory: a glob over `current/**`
    /// lists through a link the next publish moves. Recorded in the store: later invocations
    /// keep the views without repeating the flag. Must be on the staging root's file system
    /// unless --view-mode copy. With --staging s3://BUCKET/..., an s3://BUCKET/PREFIX in the same
    /// bucket: the Delta tables there (server-side copies of the accepted objects, put-if-absent
    /// commits) and each generation's `manifests/v<N>/_manifest.json`, no directory trees.
    #[arg(long, global = true, value_name = "DIR", env = "MANIFESTDB_VIEWS")]
    pub views: Option<PathBuf>,

    /// Which datasets get a directory tree per generation (`v<N>/`, `current`): `none` (the
    /// default for a new view root: a publish costs what it changes; read the Delta table or
    /// `view DATASET --files`), `all`, or dataset names separated by commas. A tree costs one
    /// directory per partition and one link per file of the whole dataset at every publish.
    /// Recorded in the store with --views; without this flag the recorded choice is kept (a
    /// view root recorded before the choice existed keeps trees for every dataset).
    #[arg(long, global = true, value_name = "all|none|DATASET,...", requires = "views", value_parser = crate::values::parse_view_trees, env = "MANIFESTDB_VIEW_TREES")]
    pub view_trees: Option<manifestdb::ViewTrees>,

    /// How views hold files: hard links (default; no copy) or copies (any file system).
    #[arg(long, global = true, value_enum, default_value = "hard-link", env = "MANIFESTDB_VIEW_MODE")]
    pub view_mode: ViewModeArg,

    /// Create the store file, its directory, the staging root and the view root for the
    /// owner's group too (files 0660, directories 0770) rather than the owner only (0600,
    /// 0700, the default whatever the umask); as `serve --socket-group` does for the socket.
    /// What already exists keeps its mode.
    #[arg(long, global = true)]
    pub group_access: bool,

    /// How long a writing verb waits for another process to release the store before it fails
    /// busy (exit 6): it retries with backoff (5ms doubling to 250ms, jittered). 0s fails at
    /// once.
    #[arg(long, global = true, value_name = "DURATION", value_parser = crate::values::parse_duration, default_value = "10s", env = "MANIFESTDB_WAIT")]
    pub wait: std::time::Duration,

    /// Send every verb (reading, writing and operator verbs alike) to the server at URL
    /// (unix:PATH, or http://IP:PORT) instead of opening the store file, which then need not be
    /// reachable from this host. Without it, a verb uses the server listening on the socket in
    /// the store's directory (manifestdb.sock) if one runs, and opens the file otherwise.
    #[arg(long, global = true, value_name = "URL", env = "MANIFESTDB_SERVER")]
    pub server: Option<String>,

    /// A file holding the bearer token to send to the server (for a server over TCP started
    /// with --token-file).
    #[arg(long, global = true, value_name = "PATH", env = "MANIFESTDB_SERVER_TOKEN_FILE")]
    pub server_token_file: Option<std::path::PathBuf>,
}

/// The pause before retry number `retry` (0-based) of a busy open: 5ms doubling up to 250ms,
/// scaled by `jitter` in [0.5, 1.0] so that writers released together do not retry together.
pub fn busy_backoff(retry: u32, jitter: f64) -> std::time::Duration {
    let base_ms = 5u64.saturating_mul(1u64 << retry.min(6)).min(250);
    std::time::Duration::from_secs_f64(base_ms as f64 / 1000.0 * jitter.clamp(0.5, 1.0))
}

/// A random factor in [0.5, 1.0) from the standard library's randomly keyed hasher.
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    0.5 + (random % 1000) as f64 / 2000.0
}

/// The file beside the store in which writers waiting for it say so: `<store file>.waiting`.
pub fn waiting_path(store: &Path) -> PathBuf {
    let mut name = store.file_name().map(std::ffi::OsString::from).unwrap_or_default();
    name.push(".waiting");
    store.with_file_name(name)
}

/// A writer's mark that it waits for the store: a shared `flock` on [`waiting_path`], held
/// from its first busy open until it opened the store or gave up. A process that holds the
/// store and closes it to let others in (`gc apply` between batches) takes the exclusive lock
/// before it opens the store again ([`LocationArgs::let_waiting_writers_in`]), which it gets
/// only once every waiter has had its turn. Best effort: a store directory where the file
/// cannot be made gets no mark, and its writers wait as before.
struct WaitingMark {
    _file: std::fs::File,
}

impl WaitingMark {
    fn take(store: &Path) -> Option<WaitingMark> {
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(waiting_path(store)).ok()?;
        // Not granted while the process letting writers in holds the exclusive lock, for the
        // moment between its batches: the next busy retry tries again.
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared).ok()?;
        Some(WaitingMark { _file: file })
    }
}

/// `--view-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ViewModeArg {
    /// Hard links to the staging files (same file system).
    HardLink,
    /// Copies, checked against the recorded CRC32.
    Copy,
}

impl LocationArgs {
    /// The store file.
    pub fn store_path(&self) -> anyhow::Result<PathBuf> {
        match (&self.store, &self.dir) {
            (Some(store), _) => Ok(store.clone()),
            (None, Some(dir)) => Ok(dir.join(STORE_FILE)),
            (None, None) => Err(usage("no store given: pass --dir DIR or --store PATH (or set MANIFESTDB_DIR or MANIFESTDB_STORE)")),
        }
    }

    /// The staging root, if one is given.
    pub fn staging_root(&self) -> Option<PathBuf> {
        match (&self.staging, &self.dir) {
            (Some(staging), _) => Some(staging.clone()),
            (None, Some(dir)) => Some(dir.join(STAGING_DIR)),
            (None, None) => None,
        }
    }

    fn required_staging_root(&self) -> anyhow::Result<PathBuf> {
        self.staging_root()
            .ok_or_else(|| usage("no staging root given: pass --dir DIR or --staging DIR (or set MANIFESTDB_DIR or MANIFESTDB_STAGING)"))
    }

    /// Creates the store (or opens an existing one) for `init`. Returns the store and whether
    /// it was created.
    pub fn create(&self) -> anyhow::Result<(Store, PathBuf, bool)> {
        let path = self.store_path()?;
        let staging = self.required_staging_root()?;
        self.refuse_if_served()?;
        let existed = store_exists(&path)?;
        let store =
            Store::open_with_options(&path, &staging, &self.options()).with_context(|| format!("opening store {}", path.display()))?;
        Ok((store, path, !existed))
    }

    /// The store directory's socket, if a server accepts connections on it (a socket left by a
    /// server that was killed accepts nobody and counts as none).
    pub fn live_socket(&self) -> anyhow::Result<Option<Listen>> {
        let Ok(store) = self.store_path() else { return Ok(None) };
        let path = socket_path(&store);
        // A connection that succeeds is a live server (it sees a connection closed without a
        // request); refused or missing is no server.
        Ok(std::os::unix::net::UnixStream::connect(&path).is_ok().then_some(Listen::Unix(path)))
    }

    /// Fails busy, at once, when a server holds the store: for the verbs that need the file
    /// itself (`init` without a server to ask, `recover`, a second `serve`), which would only
    /// wait for the server's writer until `--wait` ran out.
    fn refuse_if_served(&self) -> anyhow::Result<()> {
        if let Some(Listen::Unix(path)) = self.live_socket()? {
            return Err(CliError {
                exit: Exit::Busy,
                message: format!(
                    "the store is held by a running server (unix:{}); this verb needs the store file itself: stop the server first",
                    path.display()
                ),
            }
            .into());
        }
        Ok(())
    }

    fn options(&self) -> StoreOptions {
        let mode = match self.view_mode {
            ViewModeArg::HardLink => ViewMode::HardLink,
            ViewModeArg::Copy => ViewMode::Copy,
        };
        StoreOptions {
            attempt_lifetime_max: self.attempt_lifetime,
            views: self.views.as_ref().map(|root| ViewOptions { root: root.clone(), mode, trees: self.view_trees.clone() }),
            group_access: self.group_access,
            ..StoreOptions::default()
        }
    }

    /// Opens an existing store for writing. A missing store is an error rather than created,
    /// so that a mistyped `--dir` does not silently start a new, empty store. While another
    /// process holds the store for writing, retries with backoff for up to `--wait`.
    pub fn open_writer(&self) -> anyhow::Result<Store> {
        self.open_writer_with(|_| {})
    }

    /// [`LocationArgs::open_writer`] with the store's options changed by `adjust` (`serve
    /// --exclusive`).
    pub fn open_writer_with(&self, adjust: impl Fn(&mut StoreOptions)) -> anyhow::Result<Store> {
        self.as_writer(adjust, "opening", |path, staging, options| Store::open_with_options(path, staging, options))
    }

    /// `open(store path, staging root, options)` as a writer of the store that waits for it as
    /// [`LocationArgs::open_writer`] does (retrying `open` while it fails with
    /// `AlreadyOpen`); `doing` names it in the error (`opening`, `verifying`).
    pub fn as_writer<T>(
        &self,
        adjust: impl Fn(&mut StoreOptions),
        doing: &str,
        open: impl Fn(&Path, &Path, &StoreOptions) -> manifestdb::Result<T>,
    ) -> anyhow::Result<T> {
        let path = self.store_path()?;
        let staging = self.required_staging_root()?;
        require_existing(&path)?;
        self.refuse_if_served()?;
        let deadline = std::time::Instant::now() + self.wait;
        let mut retry = 0;
        // Held while this process waits (see `WaitingMark`); released once it opened or gave up.
        let mut waiting: Option<WaitingMark> = None;
        loop {
            let mut options = self.options();
            adjust(&mut options);
            match open(&path, &staging, &options) {
                Err(manifestdb::Error::AlreadyOpen { .. }) if std::time::Instant::now() < deadline => {
                    if waiting.is_none() {
                        waiting = WaitingMark::take(&path);
                    }
                    let pause = busy_backoff(retry, jitter()).min(deadline.saturating_duration_since(std::time::Instant::now()));
                    tracing::debug!(retry, pause_ms = pause.as_millis() as u64, "store busy; waiting for its writer");
                    std::thread::sleep(pause);
                    retry += 1;
                }
                Err(err @ manifestdb::Error::AlreadyOpen { .. }) => {
                    return Err(anyhow::Error::new(err).context(format!(
                        "{doing} store {} for writing (still busy after waiting {}; raise --wait)",
                        path.display(),
                        crate::output::duration(self.wait.as_millis() as u64)
                    )));
                }
                result => return result.with_context(|| format!("{doing} store {} for writing", path.display())),
            }
        }
    }

    /// Lets the writers that wait for the store (`WaitingMark`) have it before this process
    /// opens it again: waits, for up to `--wait`, until none of them is waiting any more (each
    /// stops waiting once it opened the store). For `gc apply`, between its batches, with the
    /// store closed.
    pub fn let_waiting_writers_in(&self) -> anyhow::Result<()> {
        let path = self.store_path()?;
        let Ok(file) = std::fs::File::open(waiting_path(&path)) else {
            // No writer has ever waited for this store.
            return Ok(());
        };
        let deadline = std::time::Instant::now() + self.wait;
        let mut retry = 0;
        // An exclusive lock is granted only while no waiter holds its shared one.
        while rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            if std::time::Instant::now() >= deadline {
                tracing::debug!("writers still waiting for the store after --wait; going on");
                return Ok(());
            }
            std::thread::sleep(busy_backoff(retry, jitter()));
            retry += 1;
        }
        Ok(())
    }

    /// A reading verb's document, made by `make` from one snapshot of the store opened
    /// read-only; the store is closed before the document is returned.
    pub fn read_document(
        &self,
        make: impl FnOnce(&manifestdb::Snapshot) -> Result<serde_json::Value, DocumentError>,
    ) -> anyhow::Result<serde_json::Value> {
        let store = self.open_reader()?;
        let snapshot = store.snapshot()?;
        let doc = make(&snapshot).map_err(document_error);
        drop(snapshot);
        close_reader(store)?;
        doc
    }

    /// Opens an existing store read-only; works while another process holds it for writing.
    pub fn open_reader(&self) -> anyhow::Result<ReadOnlyStore> {
        let path = self.store_path()?;
        require_existing(&path)?;
        let store = ReadOnlyStore::open(&path).with_context(|| format!("opening store {} read-only", path.display()))?;
        // Absolute file paths in every export, whatever the form of --dir.
        match self.staging_root() {
            Some(root) => Ok(store.with_staging_root(&root).with_context(|| format!("resolving staging root {}", root.display()))?),
            None => Ok(store),
        }
    }
}

/// Closes a writing handle before the verb reports anything: redb's close syncs the store, and
/// a failure there is the verb's failure (what the verb committed before is durable), never a
/// success followed by a dropped error. Closing also releases the writer lock before the output
/// is written, so a slow reader of stdout never blocks writers.
pub fn close_writer(store: Store) -> anyhow::Result<()> {
    store.close().context("closing the store (what this command committed is durable; the next open recovers the store)")
}

/// Closes a read-only handle before the verb writes its output (releasing the store's file).
pub fn close_reader(store: ReadOnlyStore) -> anyhow::Result<()> {
    store.close().context("closing the store")
}

/// A read document's error as the tool's: a store error as itself (its exit code and message),
/// something not found as exit 4.
pub fn document_error(err: DocumentError) -> anyhow::Error {
    match err {
        DocumentError::Store(err) => anyhow::Error::new(err),
        DocumentError::NotFound(message) => not_found(message),
        other => anyhow::anyhow!("{other}"),
    }
}

/// Whether `--store` names a PostgreSQL database (a `postgres://` or `postgresql://` URL)
/// rather than a store file.
fn is_database_url(path: &Path) -> bool {
    path.to_str().is_some_and(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}

/// Whether a store exists at `path`: a file, or a database holding a store's schema. A file
/// whose existence cannot be told (an I/O error of the file system, a symlink loop, a dying
/// mount) is that error, never "no store".
pub fn store_exists(path: &Path) -> anyhow::Result<bool> {
    if is_database_url(path) {
        return Ok(ReadOnlyStore::open(path).is_ok_and(|store| store.close().is_ok()));
    }
    // Following symlinks: a dangling one is no store, a loop is an error.
    match std::fs::metadata(path) {
        Ok(_) => Ok(true),
        // A path through a regular file cannot hold a store either.
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context(format!("checking whether a store exists at {}", path.display()))),
    }
}

fn require_existing(path: &Path) -> anyhow::Result<()> {
    if is_database_url(path) {
        // A database that cannot be reached is that error, not a missing store.
        return match ReadOnlyStore::open(path) {
            Ok(store) => store.close().context("closing the store"),
            Err(err) if err.kind() == manifestdb::ErrorKind::NotFound => {
                Err(not_found(format!("no store in {} (create one with `manifestdb init`)", path.display())))
            }
            Err(err) => Err(anyhow::Error::new(err).context(format!("opening store {}", path.display()))),
        };
    }
    if store_exists(path)? { Ok(()) } else { Err(not_found(format!("no store at {} (create one with `manifestdb init`)", path.display()))) }
}

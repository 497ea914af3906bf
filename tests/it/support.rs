//! Shared helpers for the integration tests, and the storage layer they run against.
//!
//! The suite runs unchanged against either storage layer: `MANIFESTDB_TEST_LAYER=postgres` (with
//! `MANIFESTDB_TEST_POSTGRES` naming an admin URL of a PostgreSQL server, e.g.
//! `postgres://postgres@127.0.0.1:54329/postgres`) makes every store a test opens a fresh
//! database on that server (a unique name, dropped when the test ends) with a temporary staging
//! root; without it (or with `redb`) every store is a redb file in a temporary directory. Tests
//! about the redb file itself call [`redb_only`] and are skipped, with the reason printed, under
//! the PostgreSQL layer. Tests that need PostgreSQL whatever the layer (multi-process and fault
//! tests) call [`postgres_admin`]: without a server they say loudly that they were skipped, and
//! with `CI=true` they fail instead.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use manifestdb::{
    AttemptKey, AttemptTicket, Candidate, FileEntry, ReadOnlyStore, RunSpec, Store, StoreOptions, TaskKey, TaskSpec, describe_file,
};

/// The repository's root (this suite's package is `tests/`, one level down): the fixtures, the
/// book, the fuzz corpora and the scripts are found from here.
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the tests package sits inside the repository")
}

/// The admin URL of the test PostgreSQL server.
pub const POSTGRES_ENV: &str = "MANIFESTDB_TEST_POSTGRES";
/// Which storage layer the suite runs against: `redb` (default) or `postgres`.
pub const LAYER_ENV: &str = "MANIFESTDB_TEST_LAYER";

/// The storage layer of this test run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layer {
    /// A redb file per store.
    Redb,
    /// A fresh database per store on the server at this admin URL.
    Postgres(String),
}

/// The layer chosen by `MANIFESTDB_TEST_LAYER` (read once).
pub fn layer() -> &'static Layer {
    static LAYER: OnceLock<Layer> = OnceLock::new();
    LAYER.get_or_init(|| match std::env::var(LAYER_ENV).unwrap_or_default().as_str() {
        "" | "redb" => Layer::Redb,
        "postgres" => match std::env::var(POSTGRES_ENV) {
            Ok(url) if !url.is_empty() => Layer::Postgres(url),
            _ => panic!("{LAYER_ENV}=postgres needs {POSTGRES_ENV} (an admin URL, e.g. the one `scripts/pg-server start` prints)"),
        },
        other => panic!("{LAYER_ENV}={other:?}: expected `redb` or `postgres`"),
    })
}

/// Whether the suite runs against the PostgreSQL layer.
pub fn on_postgres() -> bool {
    matches!(layer(), Layer::Postgres(_))
}

/// For a test about the redb file itself: true (and the reason printed) under the PostgreSQL
/// layer, where the caller returns at once.
#[track_caller]
pub fn redb_only(reason: &str) -> bool {
    if on_postgres() {
        let test = std::thread::current().name().unwrap_or("?").to_owned();
        eprintln!("SKIPPED under the postgres layer: {test}: {reason}");
        true
    } else {
        false
    }
}

/// The admin URL of the PostgreSQL server, for a test that needs one whatever the layer. Without
/// `MANIFESTDB_TEST_POSTGRES` it prints loudly that the test is skipped and returns None; with
/// `CI=true` it fails the test instead (CI must run every PostgreSQL test).
#[track_caller]
#[allow(dead_code, reason = "used by the PostgreSQL tests (tests/it/pg) only")]
pub fn postgres_admin() -> Option<String> {
    match std::env::var(POSTGRES_ENV) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let test = std::thread::current().name().unwrap_or("?").to_owned();
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{test}: CI=true but {POSTGRES_ENV} is not set: PostgreSQL tests must run in CI (.ci/run starts a server)");
            }
            eprintln!(
                "\n*** SKIPPED {test}: no PostgreSQL server ({POSTGRES_ENV} is not set). Start one with \
                 `scripts/pg-server start` and export {POSTGRES_ENV}=\"$(scripts/pg-server url)\" ***\n"
            );
            None
        }
    }
}

/// A fresh database on a PostgreSQL server, dropped (with its connections) when this is dropped.
pub struct PgDatabase {
    admin: String,
    name: String,
    url: String,
}

impl PgDatabase {
    /// Creates a database with a unique name on the server at `admin`.
    pub fn create(admin: &str) -> PgDatabase {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() % 1_000_000_000_000;
        let name = format!("mdbt_{}_{}_{nanos}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
        let mut client = admin_client(admin);
        client.batch_execute(&format!("CREATE DATABASE {name}")).unwrap_or_else(|e| panic!("CREATE DATABASE {name} on {admin}: {e}"));
        let url = database_url(admin, &name);
        PgDatabase { admin: admin.to_owned(), name, url }
    }

    /// The database's URL (`postgres://.../<name>`), what `Store::open` takes.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    #[allow(dead_code, reason = "used by some test modules only")]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same database reached through another host and port (a proxy in front of the server).
    #[allow(dead_code, reason = "used by some test modules only")]
    pub fn url_via(&self, host_port: &str) -> String {
        let (scheme_user, rest) = self.url.split_once('@').expect("an admin URL with a user (postgres://user@host:port/db)");
        let (_, path) = rest.split_once('/').expect("a database in the URL");
        format!("{scheme_user}@{host_port}/{path}")
    }

    /// A plain client of the database, to look at what the store wrote.
    #[allow(dead_code, reason = "used by some test modules only")]
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls).unwrap_or_else(|e| panic!("connect to {}: {e}", self.url))
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        if std::env::var_os("MANIFESTDB_TEST_KEEP_DATABASES").is_some() {
            eprintln!("kept database {}", self.url);
            return;
        }
        if let Ok(mut client) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

/// A client of the admin database.
pub fn admin_client(admin: &str) -> postgres::Client {
    postgres::Client::connect(admin, postgres::NoTls).unwrap_or_else(|e| panic!("connect to the PostgreSQL server at {admin}: {e}"))
}

/// `admin` with its database replaced by `name`.
pub fn database_url(admin: &str, name: &str) -> String {
    let (head, _) = admin.rsplit_once('/').expect("an admin URL ending in /<database>");
    assert!(head.contains("://") && head.len() > head.find("://").unwrap() + 3, "admin URL {admin:?}");
    format!("{head}/{name}")
}

/// A temporary directory and the location of one store for it: `DIR/store.redb` on the redb
/// layer, a fresh database on the PostgreSQL layer. The staging root is `DIR/staging` on both.
pub struct TestDir {
    pub dir: tempfile::TempDir,
    location: PathBuf,
    /// Dropped last: the database outlives every handle a test keeps in the same struct.
    _db: Option<PgDatabase>,
}

impl TestDir {
    /// A fresh directory and store location (nothing opened yet).
    pub fn new() -> TestDir {
        TestDir::in_dir(tempfile::tempdir().expect("tempdir"))
    }

    /// A store location for `dir`.
    pub fn in_dir(dir: tempfile::TempDir) -> TestDir {
        let (location, db) = new_location(dir.path());
        TestDir { dir, location, _db: db }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// What `Store::open` and `ReadOnlyStore::open` take: the redb file or the database URL.
    pub fn location(&self) -> PathBuf {
        self.location.clone()
    }

    pub fn staging(&self) -> PathBuf {
        self.dir.path().join("staging")
    }

    /// Opens (creating if needed) the store for writing.
    pub fn open(&self) -> manifestdb::Result<Store> {
        Store::open(&self.location, self.staging())
    }

    /// As [`TestDir::open`], with options.
    pub fn open_with(&self, options: &StoreOptions) -> manifestdb::Result<Store> {
        Store::open_with_options(&self.location, self.staging(), options)
    }

    /// Opens the store for reading.
    #[allow(dead_code, reason = "used by some test modules only")]
    pub fn read_only(&self) -> manifestdb::Result<ReadOnlyStore> {
        ReadOnlyStore::open(&self.location)
    }
}

/// A new store location under `dir`: `dir/store.redb`, or a fresh database (returned to be kept
/// alive as long as the store is used).
pub fn new_location(dir: &Path) -> (PathBuf, Option<PgDatabase>) {
    match layer() {
        Layer::Redb => (dir.join("store.redb"), None),
        Layer::Postgres(admin) => {
            let db = PgDatabase::create(admin);
            (PathBuf::from(db.url()), Some(db))
        }
    }
}

/// A store in a fresh temporary directory (and, on the PostgreSQL layer, a fresh database).
pub struct TestStore {
    pub store: Store,
    pub dir: TestDir,
}

impl TestStore {
    pub fn new() -> TestStore {
        let dir = TestDir::new();
        let store = dir.open().expect("open store");
        TestStore { store, dir }
    }

    /// With options.
    #[allow(dead_code, reason = "used by some test modules only")]
    pub fn with_options(options: &StoreOptions) -> TestStore {
        let dir = TestDir::new();
        let store = dir.open_with(options).expect("open store");
        TestStore { store, dir }
    }

    /// The store's location: the redb file, or the database URL on the PostgreSQL layer.
    pub fn db_path(&self) -> PathBuf {
        self.dir.location()
    }

    pub fn staging(&self) -> PathBuf {
        self.dir.staging()
    }

    pub fn reopen(self) -> TestStore {
        let TestStore { store, dir } = self;
        drop(store);
        let store = dir.open().expect("reopen store");
        TestStore { store, dir }
    }
}

/// A run spec with the given (partition, rows, total) tasks.
pub fn run_spec(dataset: &str, run: &str, snapshot: &str, tasks: &[(&str, u64, i64)]) -> RunSpec {
    RunSpec {
        dataset: dataset.into(),
        run: run.into(),
        snapshot: snapshot.into(),
        tasks: tasks
            .iter()
            .map(|(partition, rows, total)| TaskSpec { partition: (*partition).into(), expected_rows: *rows, expected_total: Some(*total) })
            .collect(),
        grain: None,
        trust_reported_figures: true,
    }
}

/// Writes `rows` CSV lines whose unit column sums to `total` into `dir/part.csv`; returns its
/// file entry.
pub fn write_rows(dir: &Path, rows: u64, total: i64) -> FileEntry {
    let mut text = String::from("item,units\n");
    let mut remaining = total;
    for i in 0..rows {
        let units = if i + 1 == rows { remaining } else { total / rows.max(1) as i64 };
        remaining -= units;
        text.push_str(&format!("{i},{units}\n"));
    }
    std::fs::write(dir.join("part.csv"), text).expect("write part file");
    describe_file(dir, "part.csv").expect("describe part file")
}

/// Reads back `(rows, total)` of a partition file.
pub fn read_rows(path: &Path) -> (u64, i64) {
    let text = std::fs::read_to_string(path).expect("read part file");
    let mut rows = 0;
    let mut total = 0;
    for line in text.lines().skip(1) {
        let units: i64 = line.split(',').nth(1).expect("units column").parse().expect("units");
        rows += 1;
        total += units;
    }
    (rows, total)
}

/// The candidate of an attempt that wrote `rows` rows summing to `total`.
pub fn candidate(snapshot: &str, rows: u64, total: i64, file: FileEntry) -> Candidate {
    Candidate {
        snapshot: snapshot.into(),
        rows: Some(rows),
        total: Some(total),
        digest: Some(format!("rows={rows};total={total}")),
        files: vec![file],
    }
}

/// Begins an attempt, writes its output and finishes it.
pub fn run_attempt(store: &Store, task: &TaskKey, snapshot: &str, rows: u64, total: i64) -> AttemptTicket {
    let ticket = store.begin_attempt(task).expect("begin attempt");
    let file = write_rows(&ticket.staging_dir, rows, total);
    store.finish_attempt(&ticket.key, &candidate(snapshot, rows, total, file)).expect("finish attempt");
    ticket
}

#[allow(dead_code, reason = "used by some test modules only")]
pub fn key(task: &TaskKey, attempt: u32) -> AttemptKey {
    task.attempt(attempt)
}

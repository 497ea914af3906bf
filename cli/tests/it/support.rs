//! Running the built binary against a store in a temporary directory, with or without a
//! server of the store running (`manifestdb serve`).
//!
//! A suite's tests run both ways: each test is an ordinary `#[test]` (the store file opened by
//! every command), and [`through_a_server!`] runs the same functions again with a `manifestdb
//! serve` process started for every store [`Env::new`] makes, so every writing command goes
//! through the server (found through the store directory's socket). The assertions are the
//! same: the outputs and exit codes must be too.
//!
//! The storage layer: with `MANIFESTDB_TEST_LAYER=postgres` (and `MANIFESTDB_TEST_POSTGRES`, an
//! admin URL of a PostgreSQL server) every store [`Env`] makes is a fresh database on that server
//! (a unique name, dropped with the `Env`), named to every command with `--store
//! postgres://.../<db> --staging <dir>/staging`; otherwise a redb file under `--dir`. Tests about
//! the redb file itself call [`redb_only`] and are skipped, with the reason printed, under the
//! PostgreSQL layer.

use std::cell::Cell;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use manifestdb::server::{Client, Listen};
use serde_json::Value;

/// The built binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_manifestdb");

/// The admin URL of the test PostgreSQL server, when the suite runs on the PostgreSQL layer
/// (`MANIFESTDB_TEST_LAYER=postgres`).
pub fn postgres_layer() -> Option<&'static str> {
    static LAYER: OnceLock<Option<String>> = OnceLock::new();
    LAYER
        .get_or_init(|| match std::env::var("MANIFESTDB_TEST_LAYER").unwrap_or_default().as_str() {
            "" | "redb" => None,
            "postgres" => match std::env::var("MANIFESTDB_TEST_POSTGRES") {
                Ok(url) if !url.is_empty() => Some(url),
                _ => panic!("MANIFESTDB_TEST_LAYER=postgres needs MANIFESTDB_TEST_POSTGRES (the URL `scripts/pg-server start` prints)"),
            },
            other => panic!("MANIFESTDB_TEST_LAYER={other:?}: expected `redb` or `postgres`"),
        })
        .as_deref()
}

/// Whether the suite runs against the PostgreSQL layer.
pub fn on_postgres() -> bool {
    postgres_layer().is_some()
}

/// For a test about the redb file itself: true (and the reason printed) under the PostgreSQL
/// layer, where the caller returns at once.
pub fn redb_only(reason: &str) -> bool {
    if on_postgres() {
        let test = std::thread::current().name().unwrap_or("?").to_owned();
        eprintln!("SKIPPED under the postgres layer: {test}: {reason}");
        true
    } else {
        false
    }
}

/// A fresh database on the test PostgreSQL server, dropped (with its connections) on drop.
pub struct PgDatabase {
    admin: String,
    name: String,
    pub url: String,
}

impl PgDatabase {
    pub fn create(admin: &str) -> PgDatabase {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() % 1_000_000_000_000;
        let name = format!("mdbc_{}_{}_{nanos}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
        let mut client = postgres::Client::connect(admin, postgres::NoTls).unwrap_or_else(|e| panic!("connect to {admin}: {e}"));
        client.batch_execute(&format!("CREATE DATABASE {name}")).unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        let (head, _) = admin.rsplit_once('/').expect("an admin URL ending in /<database>");
        PgDatabase { admin: admin.to_owned(), url: format!("{head}/{name}"), name }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

/// A temporary directory holding one store (`store/store.redb`, `store/staging/`, or on the
/// PostgreSQL layer a fresh database and `store/staging/`), and the server of that store when the
/// test runs through a server.
pub struct Env {
    /// Dropped after the server (fields drop in order).
    server: Option<Serve>,
    pub tmp: tempfile::TempDir,
    /// The store's database on the PostgreSQL layer; dropped last.
    pub db: Option<PgDatabase>,
}

thread_local! {
    /// Whether the test on this thread runs through a server ([`served`]).
    static SERVED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `test` with a server started for every store [`Env::new`] makes.
pub fn served(test: fn()) {
    SERVED.set(true);
    test();
    SERVED.set(false);
}

/// Whether the test on this thread runs through a server.
pub fn is_served() -> bool {
    SERVED.get()
}

/// Runs the named test functions of the suite again, each through a server: `mod
/// through_a_server` with one `#[test]` per function.
macro_rules! through_a_server {
    ($($test:ident),* $(,)?) => {
        mod through_a_server {
            $(
                #[test]
                fn $test() {
                    crate::support::served(super::$test)
                }
            )*
        }
    };
}
pub(crate) use through_a_server;

/// A `manifestdb serve` process; SIGTERM and wait when dropped.
pub struct Serve {
    child: Child,
    pub address: Listen,
}

impl Serve {
    /// Starts `manifestdb --dir <env> --json serve ARGS` and waits for its "listening" line.
    pub fn start(env: &Env, args: &[&str]) -> Serve {
        let mut cmd = command();
        cmd.args(env.store_args()).arg("--json").arg("serve");
        if env.db.is_some() && !args.contains(&"--listen") {
            // A PostgreSQL store has no directory of its own for the socket: name it.
            cmd.arg("--socket").arg(env.dir().join("manifestdb.sock"));
        }
        let mut child = cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("start manifestdb serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read the listening line");
        let doc: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("serve printed {line:?}: {e}"));
        let address = manifestdb::server::parse_target(doc["listening"].as_str().expect("listening")).expect("address");
        Serve { child, address }
    }

    pub fn client(&self) -> Client {
        Client::new(self.address.clone()).expect("client")
    }

    pub fn socket(&self) -> PathBuf {
        match &self.address {
            Listen::Unix(path) => path.clone(),
            other => panic!("not a Unix socket: {other:?}"),
        }
    }

    /// SIGKILL: the server dies without a word, mid-request.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL the server");
        self.child.wait().expect("reap the server");
        std::mem::forget(self);
    }

    /// SIGTERM and the exit code.
    pub fn stop(mut self) -> i32 {
        let code = self.terminate();
        std::mem::forget(self);
        code
    }

    fn terminate(&mut self) -> i32 {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        self.child.wait().expect("wait for the server").code().unwrap_or(-1)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// What one run of the binary did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts the exit code, showing the output if it differs.
    #[track_caller]
    pub fn code(&self, expected: i32) -> &Run {
        assert_eq!(self.code, expected, "exit code; stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }

    /// The stdout JSON document.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }

    /// The stderr JSON error document (with `--json`).
    #[track_caller]
    pub fn error_json(&self) -> Value {
        serde_json::from_str(self.stderr.trim()).unwrap_or_else(|e| panic!("stderr is not JSON ({e}):\n{}", self.stderr))
    }
}

/// The binary with no `MANIFESTDB_*` variable inherited from the environment.
pub fn command() -> Command {
    let mut cmd = Command::new(BIN);
    // COLUMNS would change how --help wraps; the tests compare help text with the book.
    for var in ["MANIFESTDB_DIR", "MANIFESTDB_STORE", "MANIFESTDB_STAGING", "MANIFESTDB_VIEWS", "MANIFESTDB_VIEW_MODE", "COLUMNS"] {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// Runs `cmd` to its end as [`finish`] does, and also returns the child's peak resident memory
/// in KiB (`ru_maxrss` from `wait4`).
#[allow(clippy::zombie_processes, reason = "the child is reaped by wait4 below, which clippy does not see")]
pub fn finish_measured(cmd: &mut Command) -> (Run, u64) {
    use std::io::Read;
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run the manifestdb binary");
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes).expect("read a pipe");
            String::from_utf8(bytes).expect("UTF-8 output")
        })
    };
    let stdout = read(Box::new(child.stdout.take().expect("stdout")));
    let stderr = read(Box::new(child.stderr.take().expect("stderr")));
    let pid = libc::pid_t::try_from(child.id()).expect("a pid");
    let mut status = 0;
    // SAFETY: `rusage` is plain data that wait4 fills in; `pid` is this child's, not yet reaped
    // (std's `Child` is never waited on afterwards).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) };
    let run = Run { code, stdout: stdout.join().expect("stdout"), stderr: stderr.join().expect("stderr") };
    (run, u64::try_from(usage.ru_maxrss).unwrap_or(0))
}

pub fn finish(cmd: &mut Command) -> Run {
    let output = cmd.output().expect("run the manifestdb binary");
    Run {
        code: output.status.code().expect("exited, not killed by a signal"),
        stdout: String::from_utf8(output.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 stderr"),
    }
}

impl Env {
    /// A fresh temporary directory; no store yet.
    pub fn empty() -> Env {
        let db = postgres_layer().map(PgDatabase::create);
        Env { server: None, tmp: tempfile::tempdir().expect("tempdir"), db }
    }

    /// A fresh, initialised store; served by a `manifestdb serve` process when the test runs
    /// through a server ([`served`]).
    pub fn new() -> Env {
        let mut env = Env::empty();
        env.run(&["init"]).code(0);
        if is_served() {
            env.server = Some(Serve::start(&env, &[]));
        }
        env
    }

    /// The `--dir` of the store.
    pub fn dir(&self) -> PathBuf {
        self.tmp.path().join("store")
    }

    /// The store's location: the redb file, or the database URL on the PostgreSQL layer.
    pub fn db_path(&self) -> PathBuf {
        match &self.db {
            Some(db) => PathBuf::from(&db.url),
            None => self.dir().join("store.redb"),
        }
    }

    /// The arguments naming the store to a command: `--dir DIR`, or on the PostgreSQL layer
    /// `--store URL --staging DIR/staging` (and `--server` while a server runs, whose socket
    /// cannot be found beside a store file).
    pub fn store_args(&self) -> Vec<OsString> {
        match &self.db {
            None => vec!["--dir".into(), self.dir().into()],
            Some(db) => {
                let mut args: Vec<OsString> = vec!["--store".into(), db.url.clone().into(), "--staging".into(), self.staging().into()];
                if self.server.is_some() {
                    let mut target = OsString::from("unix:");
                    target.push(self.dir().join("manifestdb.sock"));
                    args.extend(["--server".into(), target]);
                }
                args
            }
        }
    }

    /// The environment naming the store to a command (`MANIFESTDB_DIR`, or `MANIFESTDB_STORE`
    /// and `MANIFESTDB_STAGING`).
    pub fn store_env(&self) -> Vec<(&'static str, OsString)> {
        match &self.db {
            None => vec![("MANIFESTDB_DIR", self.dir().into())],
            Some(db) => vec![("MANIFESTDB_STORE", db.url.clone().into()), ("MANIFESTDB_STAGING", self.staging().into())],
        }
    }

    pub fn staging(&self) -> PathBuf {
        self.dir().join("staging")
    }

    /// Runs `manifestdb --dir <store> ARGS` (the store as [`Env::store_args`] names it).
    pub fn run(&self, args: &[&str]) -> Run {
        finish(command().args(self.store_args()).args(args))
    }

    /// Runs `manifestdb --dir <store> --json ARGS`.
    pub fn json(&self, args: &[&str]) -> Run {
        finish(command().args(self.store_args()).arg("--json").args(args))
    }

    /// Declares run `run` of `daily` with the given `(partition, rows, total)` tasks.
    pub fn declare(&self, run: &str, snapshot: &str, tasks: &[(&str, u64, i64)]) {
        let mut args: Vec<String> =
            ["run", "declare", "--trust-reported-figures", "-d", "daily", "-r", run, "--snapshot", snapshot].map(String::from).to_vec();
        for (partition, rows, total) in tasks {
            args.push("--task".into());
            args.push(format!("{partition}:{rows}:{total}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.run(&args).code(0);
    }

    /// Begins an attempt of `daily/run/partition`; returns its number and staging directory.
    pub fn begin(&self, run: &str, partition: &str) -> (u32, PathBuf) {
        let doc = self.json(&["attempt", "begin", "-d", "daily", "-r", run, "-p", partition]).code(0).json();
        let attempt = doc["attempt"].as_u64().expect("attempt number") as u32;
        (attempt, PathBuf::from(doc["staging_dir"].as_str().expect("staging dir")))
    }

    /// One attempt that writes `rows` rows summing to `total`, finishes and is validated; returns
    /// the validate run.
    pub fn attempt(&self, run: &str, snapshot: &str, partition: &str, rows: u64, total: i64) -> Run {
        let (attempt, dir) = self.begin(run, partition);
        write_rows(&dir, rows, total);
        let n = attempt.to_string();
        let (rows_s, total_s, digest) = (rows.to_string(), total.to_string(), format!("rows={rows};total={total}"));
        self.run(&[
            "attempt",
            "finish",
            "-d",
            "daily",
            "-r",
            run,
            "-p",
            partition,
            "-a",
            &n,
            "--snapshot",
            snapshot,
            "--rows",
            &rows_s,
            "--total",
            &total_s,
            "--digest",
            &digest,
            "--scan",
        ])
        .code(0);
        self.run(&["attempt", "validate", "-d", "daily", "-r", run, "-p", partition, "-a", &n, "--checksums"])
    }

    /// Declares and publishes run `run` with one valid attempt per task.
    pub fn publish_run(&self, run: &str, snapshot: &str, tasks: &[(&str, u64, i64)]) {
        self.declare(run, snapshot, tasks);
        for (partition, rows, total) in tasks {
            self.attempt(run, snapshot, partition, *rows, *total).code(0);
        }
        self.run(&["publish", "-d", "daily", "-r", run]).code(0);
    }
}

/// Writes `rows` CSV lines whose units sum to `total` into `dir/part.csv`.
pub fn write_rows(dir: &Path, rows: u64, total: i64) {
    let mut text = String::from("item,units\n");
    let mut remaining = total;
    for i in 0..rows {
        let units = if i + 1 == rows { remaining } else { total / rows.max(1) as i64 };
        remaining -= units;
        text.push_str(&format!("{i},{units}\n"));
    }
    std::fs::write(dir.join("part.csv"), text).expect("write part file");
}

/// Sums `(rows, units)` of a CSV part file.
pub fn read_rows(path: &Path) -> (u64, i64) {
    let text = std::fs::read_to_string(path).expect("read part file");
    let mut rows = 0;
    let mut total = 0;
    for line in text.lines().skip(1) {
        total += line.rsplit(',').next().and_then(|u| u.parse::<i64>().ok()).expect("units column");
        rows += 1;
    }
    (rows, total)
}

/// The keys of a JSON object, in document order.
#[track_caller]
pub fn keys(value: &Value) -> Vec<&str> {
    value.as_object().unwrap_or_else(|| panic!("not an object: {value}")).keys().map(String::as_str).collect()
}

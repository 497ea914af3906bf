//! Running the built binary against a store in a temporary directory, with or without a
//! server of the store running (`manifestdb serve`).
//!
//! A suite's tests run both ways: each test is an ordinary `#[test]` (the store file opened by
//! every command), and [`through_a_server!`] runs the same functions again with a `manifestdb
//! serve` process started for every store [`Env::new`] makes, so every writing command goes
//! through the server (found through the store directory's socket). The assertions are the
//! same: the outputs and exit codes must be too.

use std::cell::Cell;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use manifestdb::server::{Client, Listen};
use serde_json::Value;

/// The built binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_manifestdb");

/// A temporary directory holding one store (`store/store.redb`, `store/staging/`), and the
/// server of that store when the test runs through a server.
pub struct Env {
    /// Dropped after the server (fields drop in order).
    server: Option<Serve>,
    pub tmp: tempfile::TempDir,
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
        let mut child = command()
            .arg("--dir")
            .arg(env.dir())
            .arg("--json")
            .arg("serve")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start manifestdb serve");
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
    // COLUMNS would change how --help wraps; the tests compare help text with the README.
    for var in ["MANIFESTDB_DIR", "MANIFESTDB_STORE", "MANIFESTDB_STAGING", "MANIFESTDB_VIEWS", "MANIFESTDB_VIEW_MODE", "COLUMNS"] {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// Runs a prepared command to completion.
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
        Env { server: None, tmp: tempfile::tempdir().expect("tempdir") }
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

    pub fn db_path(&self) -> PathBuf {
        self.dir().join("store.redb")
    }

    pub fn staging(&self) -> PathBuf {
        self.dir().join("staging")
    }

    /// Runs `manifestdb --dir <store> ARGS`.
    pub fn run(&self, args: &[&str]) -> Run {
        finish(command().arg("--dir").arg(self.dir()).args(args))
    }

    /// Runs `manifestdb --dir <store> --json ARGS`.
    pub fn json(&self, args: &[&str]) -> Run {
        finish(command().arg("--dir").arg(self.dir()).arg("--json").args(args))
    }

    /// Declares run `run` of `daily` with the given `(partition, rows, total)` tasks.
    pub fn declare(&self, run: &str, snapshot: &str, tasks: &[(&str, u64, i64)]) {
        let mut args: Vec<String> = ["run", "declare", "-d", "daily", "-r", run, "--snapshot", snapshot].map(String::from).to_vec();
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

//! `manifestdb._native`: the library behind the Python package.
//!
//! The package's Python layer (`manifestdb/_api.py`) speaks to a store through one call,
//! `call(method, route, body) -> document`, whose routes, bodies and documents are exactly the
//! server's (`docs/openapi.json`): over HTTP for `manifestdb.Client`, and here, in-process, for
//! `manifestdb.Store` and `manifestdb.ReadOnlyStore`. So both front ends decode one set of
//! documents, built by the library's own `manifestdb::documents` functions, and a worker moves
//! between an embedded store and a served one by changing the line that opens it.
//!
//! Every store call runs with the GIL released (`Python::detach`), so Python threads meet in
//! the store's group commit. A handle refuses use after `close` and in a process forked from
//! the one that opened it (the child shares the parent's file lock and page cache state).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use manifestdb::documents::requests::{
    ApplyBody, AttemptRef, AttemptsQuery, BatchBody, DatasetOpt, DatasetQuery, DiffQuery, EffectsQuery, ExecuteBody, ExpireBody,
    FinishAndValidateBody, InvalidateBody, ManifestQuery, PendingBody, PlanBody, PlanQuery, PublishBody, RollbackBody, RunQuery,
    VerifyBody, ViewQuery, run_mode,
};
use manifestdb::documents::{self, operator, reads};
use manifestdb::{
    BatchOp, BatchOutcome, Error, ErrorKind, FileCheck, ReadOnlyStore, Snapshot, Store, StoreOptions, TaskKey, VerifyOptions, ViewMode,
    ViewOptions, ViewTrees,
};
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde::Deserialize;
use serde_json::{Value, json};

/// A failure of a call: the kind the Python layer raises (`manifestdb.errors`) and the message.
struct Failure {
    kind: ErrorKind,
    message: String,
}

impl From<Error> for Failure {
    fn from(err: Error) -> Failure {
        Failure { kind: err.kind(), message: err.to_string() }
    }
}

impl From<reads::DocumentError> for Failure {
    fn from(err: reads::DocumentError) -> Failure {
        Failure { kind: err.kind(), message: err.to_string() }
    }
}

impl Failure {
    fn usage(message: impl Into<String>) -> Failure {
        Failure { kind: ErrorKind::Usage, message: message.into() }
    }

    fn not_found(message: impl Into<String>) -> Failure {
        Failure { kind: ErrorKind::NotFound, message: message.into() }
    }

    fn fault(message: impl Into<String>) -> Failure {
        Failure { kind: ErrorKind::Fault, message: message.into() }
    }

    /// The Python exception: `manifestdb.errors._raise_kind(kind, message)` builds the class of
    /// the kind's name, so the package and its server client raise the same classes.
    fn into_py(self, py: Python<'_>) -> PyErr {
        static FACTORY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let factory = FACTORY
            .get_or_try_init(py, || -> PyResult<Py<PyAny>> { Ok(py.import("manifestdb.errors")?.getattr("_error_of_kind")?.unbind()) });
        match factory.and_then(|f| f.bind(py).call1((self.kind.name(), self.message.as_str()))) {
            Ok(error) => PyErr::from_value(error),
            Err(e) => e,
        }
    }
}

type Doc = Result<Value, Failure>;

/// What a native handle holds: a writable store or a read-only one.
enum Handle {
    Write(Arc<Store>),
    Read(Arc<ReadOnlyStore>),
}

impl Clone for Handle {
    fn clone(&self) -> Handle {
        match self {
            Handle::Write(s) => Handle::Write(Arc::clone(s)),
            Handle::Read(s) => Handle::Read(Arc::clone(s)),
        }
    }
}

impl Handle {
    fn snapshot(&self) -> Result<Snapshot, Error> {
        match self {
            Handle::Write(s) => s.snapshot(),
            Handle::Read(s) => s.snapshot(),
        }
    }

    fn staging_root(&self, snapshot: &Snapshot) -> Option<PathBuf> {
        match self {
            Handle::Write(s) => Some(s.staging_root().to_path_buf()),
            Handle::Read(_) => snapshot.staging_root().map(Path::to_path_buf),
        }
    }

    /// The writable store, for the call `call` (a Python method's name, for the message).
    fn writer(&self, call: &str) -> Result<&Store, Failure> {
        match self {
            Handle::Write(s) => Ok(s),
            Handle::Read(_) => Err(Failure::usage(format!("{call} writes, and this handle is read-only (open the store with Store.open)"))),
        }
    }
}

/// An open store (`manifestdb.Store` or `manifestdb.ReadOnlyStore` holds one).
#[pyclass(frozen, module = "manifestdb._native")]
struct NativeStore {
    handle: Mutex<Option<Handle>>,
    /// The process that opened the handle.
    pid: u32,
    /// The store path as given, for messages and `path`.
    path: String,
}

fn duration_ms(ms: Option<f64>, what: &str) -> Result<Option<Duration>, Failure> {
    match ms {
        None => Ok(None),
        Some(ms) if ms.is_finite() && ms >= 0.0 => Ok(Some(Duration::from_secs_f64(ms / 1000.0))),
        Some(ms) => Err(Failure::usage(format!("invalid {what} {ms}: must be a finite number of milliseconds >= 0"))),
    }
}

/// The options `Store.open` takes, as `manifestdb.store` passes them.
struct OpenOptions<'a> {
    cache_size_bytes: Option<usize>,
    attempt_lifetime_max_ms: Option<f64>,
    views: Option<PathBuf>,
    view_mode: Option<&'a str>,
    view_trees: Option<Vec<String>>,
    cross_process_readers: Option<bool>,
    durable_begins: Option<bool>,
}

/// The options `Store.open` takes, as `manifestdb._api` passes them.
fn store_options(given: OpenOptions<'_>) -> Result<StoreOptions, Failure> {
    let OpenOptions { cache_size_bytes, attempt_lifetime_max_ms, views, view_mode, view_trees, cross_process_readers, durable_begins } =
        given;
    let mut options = StoreOptions::default();
    if let Some(bytes) = cache_size_bytes {
        options.cache_size_bytes = bytes;
    }
    if let Some(readers) = cross_process_readers {
        options.cross_process_readers = readers;
    }
    if let Some(durable) = durable_begins {
        options.durable_begins = durable;
    }
    options.attempt_lifetime_max = duration_ms(attempt_lifetime_max_ms, "attempt_lifetime_max")?;
    if let Some(root) = views {
        let mode = match view_mode.unwrap_or("hardlink") {
            "hardlink" | "hard_link" => ViewMode::HardLink,
            "copy" => ViewMode::Copy,
            other => return Err(Failure::usage(format!("invalid view_mode {other:?}: \"hardlink\" or \"copy\""))),
        };
        // `["*"]` is every dataset, `[]` none, else the named ones.
        let trees = view_trees.map(|names| match names.as_slice() {
            [all] if all == "*" => ViewTrees::All,
            [] => ViewTrees::Off,
            _ => ViewTrees::only(names),
        });
        options.views = Some(ViewOptions { root, mode, trees });
    } else if view_mode.is_some() || view_trees.is_some() {
        return Err(Failure::usage("view_mode and view_trees need views (the view root)"));
    }
    Ok(options)
}

#[pymethods]
impl NativeStore {
    /// Opens (creating if needed) a writable store.
    #[staticmethod]
    #[pyo3(signature = (
        path, staging, cache_size_bytes=None, attempt_lifetime_max_ms=None, views=None, view_mode=None, cross_process_readers=None,
        durable_begins=None, view_trees=None
    ))]
    #[allow(clippy::too_many_arguments, reason = "the keyword arguments of Store.open, one per option")]
    fn open(
        py: Python<'_>,
        path: PathBuf,
        staging: PathBuf,
        cache_size_bytes: Option<usize>,
        attempt_lifetime_max_ms: Option<f64>,
        views: Option<PathBuf>,
        view_mode: Option<String>,
        cross_process_readers: Option<bool>,
        durable_begins: Option<bool>,
        view_trees: Option<Vec<String>>,
    ) -> PyResult<NativeStore> {
        let given = OpenOptions {
            cache_size_bytes,
            attempt_lifetime_max_ms,
            views,
            view_mode: view_mode.as_deref(),
            view_trees,
            cross_process_readers,
            durable_begins,
        };
        let options = store_options(given).map_err(|f| f.into_py(py))?;
        let shown = path.display().to_string();
        let store = py.detach(|| Store::open_with_options(&path, &staging, &options)).map_err(|e| Failure::from(e).into_py(py))?;
        Ok(NativeStore { handle: Mutex::new(Some(Handle::Write(Arc::new(store)))), pid: std::process::id(), path: shown })
    }

    /// Opens a store for reading (a writer may hold it meanwhile).
    #[staticmethod]
    #[pyo3(signature = (path, staging=None, cache_size_bytes=None))]
    fn open_read_only(py: Python<'_>, path: PathBuf, staging: Option<PathBuf>, cache_size_bytes: Option<usize>) -> PyResult<NativeStore> {
        let given = OpenOptions {
            cache_size_bytes,
            attempt_lifetime_max_ms: None,
            views: None,
            view_mode: None,
            view_trees: None,
            cross_process_readers: None,
            durable_begins: None,
        };
        let options = store_options(given).map_err(|f| f.into_py(py))?;
        let shown = path.display().to_string();
        let store = py
            .detach(|| -> Result<ReadOnlyStore, Error> {
                let store = ReadOnlyStore::open_with_options(&path, &options)?;
                match staging {
                    Some(root) => store.with_staging_root(root),
                    None => Ok(store),
                }
            })
            .map_err(|e| Failure::from(e).into_py(py))?;
        Ok(NativeStore { handle: Mutex::new(Some(Handle::Read(Arc::new(store)))), pid: std::process::id(), path: shown })
    }

    /// Recovers a store whose writer crashed (`Store::recover`): true if it needed it.
    #[staticmethod]
    fn recover(py: Python<'_>, path: PathBuf) -> PyResult<bool> {
        py.detach(|| Store::recover(&path)).map_err(|e| Failure::from(e).into_py(py))
    }

    /// The store path as given.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// The staging root (None for a read-only handle opened without one).
    #[getter]
    fn staging_root(&self, py: Python<'_>) -> PyResult<Option<PathBuf>> {
        let handle = self.handle(py)?;
        Ok(match &handle {
            Handle::Write(s) => Some(s.staging_root().to_path_buf()),
            Handle::Read(s) => s.snapshot().ok().and_then(|snap| snap.staging_root().map(Path::to_path_buf)),
        })
    }

    /// The staging root's URL when it is on object storage (`s3://bucket/prefix`, a build with
    /// the `s3` feature), else None: the URL kept as text, since a Python `Path` folds its `//`.
    #[getter]
    fn staging_url(&self, py: Python<'_>) -> PyResult<Option<String>> {
        let root = self.staging_root(py)?;
        Ok(root.and_then(|r| r.to_str().filter(|s| s.starts_with("s3://")).map(str::to_owned)))
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.handle.lock().is_none()
    }

    /// Closes the store: waits for the calls in flight on other threads, then closes it and
    /// reports a failure to close (a writable store's last sync). A second close does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.check_process(py)?;
        let Some(mut handle) = self.handle.lock().take() else { return Ok(()) };
        let result = py.detach(move || -> Result<(), Error> {
            // The calls in flight hold clones of the handle; they finish without the GIL.
            loop {
                handle = match handle {
                    Handle::Write(s) => match Arc::try_unwrap(s) {
                        Ok(store) => return store.close(),
                        Err(s) => Handle::Write(s),
                    },
                    Handle::Read(s) => match Arc::try_unwrap(s) {
                        Ok(store) => return store.close(),
                        Err(s) => Handle::Read(s),
                    },
                };
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        result.map_err(|e| Failure::from(e).into_py(py))
    }

    /// One call of the served API in-process: `method` and `route` as the server names them
    /// (`"POST"`, `"attempts/begin"`), `body` the request's JSON body or query as a dict;
    /// returns the answer's document.
    #[pyo3(signature = (method, route, body=None))]
    fn call(&self, py: Python<'_>, method: &str, route: &str, body: Option<&Bound<'_, PyDict>>) -> PyResult<Py<PyAny>> {
        let handle = self.handle(py)?;
        let body = match body {
            Some(dict) => to_json(dict.as_any()).map_err(|f| f.into_py(py))?,
            None => Value::Object(serde_json::Map::new()),
        };
        let method = method.to_owned();
        let route = route.to_owned();
        let answer = py.detach(move || dispatch(&handle, &method, &route, body));
        match answer {
            Ok(doc) => to_py(py, &doc).map(Bound::unbind),
            Err(failure) => Err(failure.into_py(py)),
        }
    }
}

impl NativeStore {
    fn check_process(&self, py: Python<'_>) -> PyResult<()> {
        let now = std::process::id();
        if now != self.pid {
            return Err(Failure::usage(format!(
                "this store handle was opened in process {} and cannot be used in process {now} (forked from it): open the store in \
                 the child process instead (after the parent closed it, for a writable store)",
                self.pid
            ))
            .into_py(py));
        }
        Ok(())
    }

    fn handle(&self, py: Python<'_>) -> PyResult<Handle> {
        self.check_process(py)?;
        match &*self.handle.lock() {
            Some(handle) => Ok(handle.clone()),
            None => Err(Failure::usage(format!("store {} is closed", self.path)).into_py(py)),
        }
    }
}

/// The body's fields as a typed request (unknown fields refused, as the server refuses them);
/// a refusal names `call`, the Python method that made the body, not the route.
fn parse<T: for<'de> Deserialize<'de>>(call: &str, body: Value) -> Result<T, Failure> {
    serde_json::from_value(body).map_err(|e| Failure::usage(format!("{call}: an argument is not valid: {e}")))
}

/// The body of a write route as the batch operation it names (the route is the `op` tag).
fn batch_op(call: &str, op: &str, mut body: Value) -> Result<BatchOp, Failure> {
    if let Value::Object(fields) = &mut body {
        fields.insert("op".into(), Value::from(op));
    }
    parse(call, body)
}

/// The Python method (of `Store`, `ReadOnlyStore` and `Client`) that calls a route: what an
/// embedded store's messages name, since its caller made no request.
fn call_name(method: &str, route: &str) -> &'static str {
    match (method, route) {
        ("POST", "runs/declare") => "declare_run",
        ("POST", "attempts/begin") => "begin_attempt",
        ("POST", "attempts/finish") => "finish_attempt",
        ("POST", "attempts/validate") => "validate_attempt",
        ("POST", "attempts/finish-and-validate") => "finish_and_validate",
        ("POST", "attempts/validate-pending") => "validate_pending",
        ("POST", "attempts/heartbeat") => "heartbeat",
        ("POST", "attempts/abandon") => "abandon_attempt",
        ("POST", "attempts/invalidate") => "invalidate_attempt",
        ("POST", "effects/record") => "record_effect",
        ("POST", "effects/claim") => "claim_effect",
        ("POST", "effects/mark-emitted") => "mark_effect_emitted",
        ("POST", "publish") => "publish",
        ("POST", "batch") => "run_batch",
        ("POST", "rollback") => "rollback",
        ("POST", "gc/abandon") => "abandon_expired_attempts",
        ("POST", "gc/expire") => "expire_generations",
        ("POST", "gc/plan") => "plan_cleanup",
        ("GET", "gc/plan") => "cleanup_plan",
        ("POST", "gc/apply") => "apply_cleanup",
        ("POST", "views/sync") => "sync_view",
        ("POST", "verify") => "verify",
        ("GET", "datasets") => "datasets",
        ("GET", "current") => "current",
        ("GET", "manifest") => "manifest",
        ("GET", "history") => "history",
        ("GET", "diff") => "diff",
        ("GET", "stats") => "stats",
        ("GET", "runs") => "runs",
        ("GET", "runs/show") => "run",
        ("GET", "attempts") => "attempts",
        ("GET", "attempts/show") => "attempt",
        ("GET", "effects") => "effects",
        ("GET", "views") => "view",
        _ => "the call",
    }
}

/// Runs one operation as a batch of one: the path the single calls and the server take.
fn run_one(store: &Store, op: &BatchOp) -> Result<BatchOutcome, Failure> {
    let mut outcomes = store.run_batch(std::slice::from_ref(op))?;
    match outcomes.pop() {
        Some(outcome) if outcomes.is_empty() => Ok(outcome?),
        _ => Err(Failure::fault("the store returned another number of outcomes than operations")),
    }
}

fn mismatched() -> Failure {
    Failure::fault("the store answered an operation with another operation's outcome")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The served API in-process: each route as `src/server/routes.rs` answers it (the same body
/// types, `manifestdb::documents::requests`; the same documents; the same errors), over this
/// handle.
fn dispatch(handle: &Handle, method: &str, route: &str, body: Value) -> Doc {
    let call = call_name(method, route);
    match (method, route) {
        ("POST", "runs/declare") => {
            let store = handle.writer(call)?;
            let spec = parse::<documents::RunInput>(call, body)?.into_spec()?;
            let outcome = store.declare_run(&spec)?;
            Ok(documents::declared(&spec, outcome))
        }
        // Through `Store::begin_attempt` (not a batch of one): a writer opened without
        // cross-process readers and without durable begins commits it without a flush.
        ("POST", "attempts/begin") => {
            let store = handle.writer(call)?;
            let op = batch_op(call, "begin", body)?;
            let BatchOp::Begin { dataset, run, partition } = &op else { return Err(mismatched()) };
            let ticket = store.begin_attempt(&TaskKey::new(dataset.as_str(), run.as_str(), partition.as_str()))?;
            Ok(documents::begun(&ticket))
        }
        ("POST", "effects/record") => write_op(handle, call, "record_effect", body),
        ("POST", "effects/claim") => write_op(handle, call, "claim_effect", body),
        ("POST", "effects/mark-emitted") => write_op(handle, call, "mark_emitted", body),
        ("POST", "attempts/heartbeat") => {
            let store = handle.writer(call)?;
            let key = parse::<AttemptRef>(call, body)?.key();
            let lease = store.heartbeat(&key)?;
            Ok(documents::heartbeat(&key, &lease))
        }
        ("POST", "attempts/finish") => {
            let store = handle.writer(call)?;
            let op = batch_op(call, "finish", body)?;
            let BatchOp::Finish { dataset, run, partition, attempt, candidate } = &op else { return Err(mismatched()) };
            let key = TaskKey::new(dataset.as_str(), run.as_str(), partition.as_str()).attempt(*attempt);
            let candidate = candidate.clone();
            match run_one(store, &op)? {
                BatchOutcome::Finish(outcome) => Ok(documents::finished(&key, outcome, &candidate)),
                _ => Err(mismatched()),
            }
        }
        ("POST", "attempts/validate") => {
            let store = handle.writer(call)?;
            let op = batch_op(call, "validate", body)?;
            let BatchOp::Validate { dataset, run, partition, attempt, .. } = &op else { return Err(mismatched()) };
            let key = TaskKey::new(dataset, run, partition).attempt(*attempt);
            let BatchOutcome::Validate(verdict) = run_one(store, &op)? else { return Err(mismatched()) };
            Ok(documents::validated_from(&store.snapshot()?, &key, &verdict)?)
        }
        // One commit for both, as the server's route.
        ("POST", "attempts/finish-and-validate") => {
            let store = handle.writer(call)?;
            let body = parse::<FinishAndValidateBody>(call, body)?;
            let key = body.key();
            let verdict = store.finish_and_validate(&key, &body.candidate, body.check())?;
            Ok(documents::validated_from(&store.snapshot()?, &key, &verdict)?)
        }
        ("POST", "attempts/validate-pending") => {
            let store = handle.writer(call)?;
            let b = parse::<PendingBody>(call, body)?;
            let results = store.validate_pending(&b.dataset, &b.run, b.check())?;
            Ok(documents::pending_validated(&store.snapshot()?, &b.dataset, &b.run, &results)?)
        }
        ("POST", "publish") => {
            let store = handle.writer(call)?;
            let body = parse::<PublishBody>(call, body)?;
            let outcome = store.publish(&body.dataset, &body.run, &body.options())?;
            Ok(documents::published(&body.dataset, &body.run, &outcome))
        }
        ("POST", "batch") => batch(handle.writer(call)?, parse::<BatchBody>(call, body)?),
        ("POST", "attempts/abandon") => {
            let store = handle.writer(call)?;
            let key = parse::<AttemptRef>(call, body)?.key();
            let outcome = store.abandon_attempt(&key)?;
            Ok(operator::abandoned(&key, &outcome))
        }
        ("POST", "attempts/invalidate") => {
            let store = handle.writer(call)?;
            let b = parse::<InvalidateBody>(call, body)?;
            let key = b.key();
            let outcome = store.invalidate_attempt(&key, &b.actor, &b.reason)?;
            Ok(operator::invalidated(&key, &outcome))
        }
        ("POST", "rollback") => {
            let store = handle.writer(call)?;
            let b = parse::<RollbackBody>(call, body)?;
            reads::require_dataset(&store.snapshot()?, &b.dataset)?;
            let outcome = store.rollback(&b.dataset, b.to, &b.actor, &b.reason)?;
            Ok(operator::rollback(&b.dataset, b.to, &outcome))
        }
        ("POST", "gc/abandon") => {
            let store = handle.writer(call)?;
            let mode = run_mode(parse::<ExecuteBody>(call, body)?.execute);
            let abandoned = store.abandon_expired_attempts(mode)?;
            Ok(operator::gc_abandoned(mode, store.attempt_lifetime_max_ms(), &abandoned))
        }
        ("POST", "gc/expire") => {
            let store = handle.writer(call)?;
            let b = parse::<ExpireBody>(call, body)?;
            reads::require_dataset(&store.snapshot()?, &b.dataset)?;
            Ok(operator::expired(&store.expire_generations(&b.dataset, &b.policy(), run_mode(b.execute))?))
        }
        ("POST", "gc/plan") => {
            let store = handle.writer(call)?;
            Ok(operator::cleanup_plan(&store.plan_cleanup(&parse::<PlanBody>(call, body)?.options())?))
        }
        ("GET", "gc/plan") => {
            let store = handle.writer(call)?;
            let q = parse::<PlanQuery>(call, body)?;
            match store.cleanup_plan(q.plan)? {
                Some(plan) => Ok(operator::cleanup_plan(&plan)),
                None => Err(Failure::not_found(format!("no cleanup plan {} is stored", q.plan))),
            }
        }
        ("POST", "gc/apply") => {
            let store = handle.writer(call)?;
            let b = parse::<ApplyBody>(call, body)?;
            Ok(operator::cleanup_applied(&store.apply_cleanup(b.plan, &b.options())?))
        }
        ("POST", "views/sync") => {
            let store = handle.writer(call)?;
            let b = parse::<DatasetOpt>(call, body)?;
            if let Some(dataset) = &b.dataset {
                reads::require_dataset(&store.snapshot()?, dataset)?;
            }
            if store.view_root().is_none() {
                return Err(Failure::not_found("the store publishes no views (open it once with views=DIR to set its view root)"));
            }
            let synced = match &b.dataset {
                Some(dataset) => store.sync_view(dataset)?.into_iter().collect(),
                None => store.sync_views()?,
            };
            Ok(operator::views_synced(&synced))
        }
        ("POST", "verify") => {
            let b = parse::<VerifyBody>(call, body)?;
            let files = b.file_check().map_err(Failure::usage)?;
            let snapshot = handle.snapshot()?;
            let options = VerifyOptions { integrity_check: false, files, staging_root: handle.staging_root(&snapshot), views: true };
            if b.integrity {
                return Err(Failure::usage(
                    "the integrity check needs the store handle alone: close the store and run `manifestdb verify --integrity`",
                ));
            }
            Ok(operator::verified(&snapshot.verify(&options)))
        }
        ("GET", _) => read(handle, route, body),
        _ => Err(Failure::not_found(format!("no route {method} /v1/{route}"))),
    }
}

fn write_op(handle: &Handle, call: &str, op: &str, body: Value) -> Doc {
    let store = handle.writer(call)?;
    let op = batch_op(call, op, body)?;
    Ok(documents::batch_result(&run_one(store, &op)?))
}

/// `POST /v1/batch`: every operation in one commit, one result each, in order.
fn batch(store: &Store, body: BatchBody) -> Doc {
    let parsed = body.parse_ops().map_err(Failure::usage)?;
    let ops: Vec<BatchOp> = parsed.iter().filter_map(|op| op.as_ref().ok().cloned()).collect();
    let outcomes = if ops.is_empty() { Vec::new() } else { store.run_batch(&ops)? };
    documents::batch_answer(&parsed, outcomes).ok_or_else(|| Failure::fault("the store returned fewer outcomes than operations"))
}

/// The read routes: each one document from one snapshot.
fn read(handle: &Handle, route: &str, body: Value) -> Doc {
    let call = call_name("GET", route);
    let snapshot = handle.snapshot()?;
    let root = handle.staging_root(&snapshot);
    let root = root.as_deref();
    let doc = match route {
        "datasets" => reads::datasets(&snapshot),
        "current" => reads::current(&snapshot, &parse::<DatasetQuery>(call, body)?.dataset),
        "manifest" => {
            let q = parse::<ManifestQuery>(call, body)?;
            reads::show(&snapshot, &q.dataset, q.generation, root)
        }
        "history" => reads::history(&snapshot, parse::<DatasetOpt>(call, body)?.dataset.as_deref()),
        "diff" => {
            let q = parse::<DiffQuery>(call, body)?;
            reads::diff(&snapshot, &q.dataset, q.from, q.to, root)
        }
        "stats" => {
            let path = match handle {
                Handle::Write(s) => s.path().map(Path::to_path_buf),
                Handle::Read(_) => None,
            };
            reads::stats(&snapshot, path.as_deref())
        }
        "runs" => reads::run_list(&snapshot, &parse::<DatasetQuery>(call, body)?.dataset),
        "runs/show" => {
            let q = parse::<RunQuery>(call, body)?;
            reads::run_show(&snapshot, &q.dataset, &q.run)
        }
        "attempts" => {
            let q = parse::<AttemptsQuery>(call, body)?;
            reads::attempt_list(&snapshot, &q.dataset, &q.run, q.partition.as_deref(), now_ms())
        }
        "attempts/show" => reads::attempt_show(&snapshot, &parse::<AttemptRef>(call, body)?.key(), root),
        "effects" => {
            let q = parse::<EffectsQuery>(call, body)?;
            reads::effects(&snapshot, &q.dataset, q.run.as_deref(), q.ready)
        }
        "views" => {
            let q = parse::<ViewQuery>(call, body)?;
            operator::view(&snapshot, &q.dataset, None, q.generation)
        }
        "health" => Ok(json!({ "status": "embedded", "version": env!("CARGO_PKG_VERSION") })),
        other => return Err(Failure::not_found(format!("no route GET /v1/{other}"))),
    };
    Ok(doc?)
}

/// A Python value of JSON's kinds (dict with str keys, list, tuple, str, int, float, bool,
/// None) as JSON. Anything else is refused with a message naming its type.
fn to_json(value: &Bound<'_, PyAny>) -> Result<Value, Failure> {
    if value.is_none() {
        Ok(Value::Null)
    } else if let Ok(b) = value.cast::<PyBool>() {
        Ok(Value::Bool(b.is_true()))
    } else if let Ok(i) = value.cast::<PyInt>() {
        if let Ok(n) = i.extract::<i64>() {
            Ok(Value::from(n))
        } else if let Ok(n) = i.extract::<u64>() {
            Ok(Value::from(n))
        } else {
            Err(Failure::usage(format!("integer {i} does not fit 64 bits")))
        }
    } else if let Ok(f) = value.cast::<PyFloat>() {
        serde_json::Number::from_f64(f.value()).map(Value::Number).ok_or_else(|| Failure::usage("a float that is not finite"))
    } else if let Ok(s) = value.cast::<PyString>() {
        Ok(Value::String(s.to_str().map_err(|e| Failure::usage(format!("text that is not UTF-8: {e}")))?.to_owned()))
    } else if let Ok(d) = value.cast::<PyDict>() {
        let mut map = serde_json::Map::with_capacity(d.len());
        for (k, v) in d.iter() {
            let key = k.cast::<PyString>().map_err(|_| Failure::usage("a dict key that is not a str"))?;
            let key = key.to_str().map_err(|e| Failure::usage(format!("text that is not UTF-8: {e}")))?.to_owned();
            map.insert(key, to_json(&v)?);
        }
        Ok(Value::Object(map))
    } else if let Ok(l) = value.cast::<PyList>() {
        l.iter().map(|v| to_json(&v)).collect::<Result<Vec<_>, _>>().map(Value::Array)
    } else if let Ok(t) = value.cast::<PyTuple>() {
        t.iter().map(|v| to_json(&v)).collect::<Result<Vec<_>, _>>().map(Value::Array)
    } else {
        let type_name = value.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
        Err(Failure::usage(format!("a value of type {type_name} where JSON was expected")))
    }
}

/// A JSON document as Python values (dict, list, str, int, float, bool, None).
fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_u64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(fields) => {
            let dict = PyDict::new(py);
            for (k, v) in fields {
                dict.set_item(PyString::intern(py, k), to_py(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

/// The size and CRC32 of a file a worker wrote (`manifestdb::describe_file`), read with the GIL
/// released: the `{"path", "size_bytes", "crc32"}` document.
#[pyfunction]
fn describe(py: Python<'_>, staging_dir: PathBuf, path: String) -> PyResult<Py<PyAny>> {
    match py.detach(|| manifestdb::describe_file(&staging_dir, &path)) {
        Ok(f) => to_py(py, &documents::file(&f)).map(Bound::unbind),
        Err(e) => Err(Failure::from(e).into_py(py)),
    }
}

/// The benchmark's Rust side (python/bench/cycle.py): attempt cycles of `partition` (begin,
/// finish with an empty candidate, validate; the throughput harness's `md_cycle`) run from Rust
/// on this handle for `duration_s`, with the GIL released; returns how many completed. The same
/// cycle through the Python API runs beside it in the same process and store.
#[pyfunction]
fn bench_rust_cycles(
    py: Python<'_>,
    store: &NativeStore,
    dataset: String,
    run: String,
    partition: String,
    snapshot: String,
    duration_s: f64,
) -> PyResult<u64> {
    let handle = store.handle(py)?;
    let Handle::Write(store) = handle else { return Err(Failure::usage("the benchmark needs a writable store").into_py(py)) };
    let result = py.detach(move || -> Result<u64, Error> {
        let task = TaskKey::new(dataset, run, partition);
        let candidate = manifestdb::Candidate { snapshot, rows: Some(0), total: None, digest: Some("sha256:0".into()), files: Vec::new() };
        let start = std::time::Instant::now();
        let mut count = 0;
        while start.elapsed().as_secs_f64() < duration_s {
            let ticket = store.begin_attempt(&task)?;
            store.finish_attempt(&ticket.key, &candidate)?;
            if !store.validate_attempt(&ticket.key, FileCheck::Size)?.is_valid() {
                return Err(Error::InvalidInput { what: "benchmark attempt", value: ticket.key.to_string(), reason: "invalid".into() });
            }
            count += 1;
        }
        Ok(count)
    });
    result.map_err(|e| Failure::from(e).into_py(py))
}

/// What this build includes, by the names of the Cargo features: `parquet` (validation of
/// Parquet partitions) and `postgres` (a `postgres://` store) always; `delta` (the Delta Lake
/// table in a Parquet dataset's views) and `s3` (`s3://bucket/prefix` staging roots) when the
/// package was built with them, as the published wheel is. Without `delta` a view sync builds
/// no table (its `table_version` stays `None`); without `s3` an `s3://` root is refused.
#[pyfunction]
fn features(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let built = json!({
        "parquet": true,
        "postgres": true,
        "delta": cfg!(feature = "delta"),
        "s3": cfg!(feature = "s3"),
    });
    to_py(py, &built).map(Bound::unbind)
}

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeStore>()?;
    m.add_function(wrap_pyfunction!(describe, m)?)?;
    m.add_function(wrap_pyfunction!(bench_rust_cycles, m)?)?;
    m.add_function(wrap_pyfunction!(features, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

//! The routes: each parses its JSON body (or query), runs one store call on the blocking pool
//! and answers with the document the command-line tool prints for the same verb.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::ErrorKind;
use super::docs;
use crate::{
    Candidate, DataFormat, DeclareOutcome, EffectKey, Error, FileCheck, FileEntry, FinishOutcome, Grain, Manifest, PartitionEntry,
    PublishOptions, PublishOutcome, RunSpec, Snapshot, Store, TaskKey, TaskSpec, describe_file,
};

/// What every handler shares: the store.
#[derive(Clone)]
pub(super) struct AppState {
    store: Arc<Store>,
}

impl AppState {
    pub(super) fn new(store: Arc<Store>) -> AppState {
        AppState { store }
    }
}

/// Every route the server serves, as `(method, path)`; `docs/openapi.json` must list exactly
/// these (a test checks it).
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/health"),
    ("POST", "/v1/runs/declare"),
    ("GET", "/v1/runs/show"),
    ("POST", "/v1/attempts/begin"),
    ("POST", "/v1/attempts/heartbeat"),
    ("POST", "/v1/attempts/finish"),
    ("POST", "/v1/attempts/validate"),
    ("POST", "/v1/publish"),
    ("POST", "/v1/effects/record"),
    ("POST", "/v1/effects/mark-emitted"),
    ("GET", "/v1/effects"),
    ("GET", "/v1/datasets"),
    ("GET", "/v1/current"),
    ("GET", "/v1/manifest"),
    ("GET", "/v1/history"),
    ("GET", "/v1/diff"),
    ("GET", "/v1/stats"),
];

pub(super) fn router(state: AppState, token: Option<Vec<u8>>, body_limit_bytes: usize, request_timeout: Duration) -> Router {
    let token = token.map(Arc::new);
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/runs/declare", post(declare))
        .route("/v1/runs/show", get(run_show))
        .route("/v1/attempts/begin", post(begin))
        .route("/v1/attempts/heartbeat", post(heartbeat))
        .route("/v1/attempts/finish", post(finish))
        .route("/v1/attempts/validate", post(validate))
        .route("/v1/publish", post(publish))
        .route("/v1/effects/record", post(effect_record))
        .route("/v1/effects/mark-emitted", post(effect_mark_emitted))
        .route("/v1/effects", get(effects_list))
        .route("/v1/datasets", get(datasets))
        .route("/v1/current", get(current))
        .route("/v1/manifest", get(manifest))
        .route("/v1/history", get(history))
        .route("/v1/diff", get(diff))
        .route("/v1/stats", get(stats))
        .fallback(unknown_route)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        .layer(DefaultBodyLimit::max(body_limit_bytes))
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            let token = token.clone();
            async move {
                if let Some(expected) = token.as_deref()
                    && !authorized(request.headers(), expected)
                {
                    return ApiError::new(ErrorKind::Unauthorized, "a valid bearer token is required (Authorization: Bearer TOKEN)")
                        .into_response();
                }
                match tokio::time::timeout(request_timeout, next.run(request)).await {
                    Ok(response) => response,
                    Err(_) => ApiError::with_status(
                        StatusCode::REQUEST_TIMEOUT,
                        ErrorKind::Usage,
                        format!("the request was not received and answered within {} s", request_timeout.as_secs_f64()),
                    )
                    .into_response(),
                }
            }
        }))
}

/// Whether the request carries the expected bearer token. The comparison takes the same time
/// whatever prefix of the token matches (subtle's constant-time equality).
fn authorized(headers: &HeaderMap, expected: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    let Some(value) = headers.get(header::AUTHORIZATION) else { return false };
    let Some(given) = value.as_bytes().strip_prefix(b"Bearer ") else { return false };
    bool::from(given.ct_eq(expected))
}

/// An error answer: `{"error": {"exit_code", "kind", "message"}}` with the kind's status.
pub(super) struct ApiError {
    status: StatusCode,
    kind: ErrorKind,
    message: String,
}

impl ApiError {
    fn new(kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError { status: kind.status(None), kind, message: message.into() }
    }

    fn with_status(status: StatusCode, kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError { status, kind, message: message.into() }
    }

    fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::NotFound, message)
    }
}

impl From<Error> for ApiError {
    fn from(err: Error) -> ApiError {
        let kind = ErrorKind::of(&err);
        ApiError { status: kind.status(Some(&err)), kind, message: err.to_string() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "exit_code": self.kind.exit_code(), "kind": self.kind.name(), "message": self.message } });
        (self.status, axum::Json(body)).into_response()
    }
}

type Answer = Result<axum::Json<Value>, ApiError>;

/// A JSON body whose rejections are JSON error documents: 415 without `Content-Type:
/// application/json`, 413 over the size limit, 400 for malformed JSON or unknown fields.
struct Body<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(Body(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    // A body that is JSON but not of the route's shape (axum's 422) is a malformed request too.
    let status = match rejection.status() {
        StatusCode::UNPROCESSABLE_ENTITY => StatusCode::BAD_REQUEST,
        other => other,
    };
    let message = match &rejection {
        JsonRejection::MissingJsonContentType(_) => "the request body must be JSON, sent with Content-Type: application/json".to_owned(),
        _ if status == StatusCode::PAYLOAD_TOO_LARGE => "the request body is larger than the server's limit".to_owned(),
        _ => format!("the request body is not valid: {}", rejection.body_text()),
    };
    ApiError::with_status(status, ErrorKind::Usage, message)
}

/// A query string whose rejections are JSON error documents (400).
struct Query<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(rejection) => Err(query_rejection(rejection)),
        }
    }
}

fn query_rejection(rejection: QueryRejection) -> ApiError {
    ApiError::with_status(StatusCode::BAD_REQUEST, ErrorKind::Usage, format!("the query string is not valid: {}", rejection.body_text()))
}

/// Runs a store call on the blocking pool, so the runtime's threads keep serving and
/// concurrent calls meet in the store's group commit. A panic in the call is a fault answer.
async fn blocking<T: Send + 'static>(
    state: &AppState,
    call: impl FnOnce(&Store) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = Arc::clone(&state.store);
    match tokio::task::spawn_blocking(move || call(&store)).await {
        Ok(result) => result,
        Err(e) => Err(ApiError::new(ErrorKind::Fault, format!("the store call failed: {e}"))),
    }
}

async fn unknown_route(request: Request) -> ApiError {
    ApiError::not_found(format!("no route {} {} (see docs/openapi.json)", request.method(), request.uri().path()))
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::with_status(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorKind::Usage,
        format!("route {} does not take {} (see docs/openapi.json)", request.uri().path(), request.method()),
    )
}

async fn health() -> axum::Json<Value> {
    axum::Json(json!({ "status": "serving", "version": env!("CARGO_PKG_VERSION") }))
}

// ---- writes ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeclareBody {
    dataset: String,
    run: String,
    snapshot: String,
    tasks: Vec<TaskBody>,
    #[serde(default)]
    grain: Option<GrainBody>,
}

/// The `grain` object of a declaration, as `run declare --from` takes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrainBody {
    #[serde(default = "csv")]
    format: String,
    keys: Vec<String>,
    measure: String,
    #[serde(default)]
    scale: u32,
}

fn csv() -> String {
    "csv".to_owned()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskBody {
    partition: String,
    expected_rows: u64,
    #[serde(default)]
    expected_total: Option<i64>,
}

fn task_json(t: &TaskSpec) -> Value {
    json!({ "partition": t.partition, "expected_rows": t.expected_rows, "expected_total": t.expected_total })
}

async fn declare(State(state): State<AppState>, Body(body): Body<DeclareBody>) -> Answer {
    let grain = match body.grain {
        Some(g) => {
            let Some(format) = DataFormat::from_name(&g.format) else {
                return Err(ApiError::new(ErrorKind::Usage, format!("unknown grain format {:?} (csv or parquet)", g.format)));
            };
            Some(Grain { format, keys: g.keys, measure: g.measure, measure_scale: g.scale })
        }
        None => None,
    };
    let spec = RunSpec {
        grain,
        dataset: body.dataset,
        run: body.run,
        snapshot: body.snapshot,
        tasks: body
            .tasks
            .into_iter()
            .map(|t| TaskSpec { partition: t.partition, expected_rows: t.expected_rows, expected_total: t.expected_total })
            .collect(),
    };
    blocking(&state, move |store| {
        let outcome = store.declare_run(&spec)?;
        Ok(axum::Json(json!({
            "dataset": spec.dataset,
            "run": spec.run,
            "snapshot": spec.snapshot,
            "outcome": if outcome == DeclareOutcome::Declared { "declared" } else { "already_declared" },
            "grain": spec.grain.as_ref().map(docs::grain),
            "tasks": spec.tasks.iter().map(task_json).collect::<Vec<_>>(),
        })))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskRef {
    dataset: String,
    run: String,
    partition: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AttemptRef {
    dataset: String,
    run: String,
    partition: String,
    attempt: u32,
}

impl AttemptRef {
    fn key(&self) -> crate::AttemptKey {
        TaskKey::new(&self.dataset, &self.run, &self.partition).attempt(self.attempt)
    }
}

async fn begin(State(state): State<AppState>, Body(body): Body<TaskRef>) -> Answer {
    blocking(&state, move |store| {
        let ticket = store.begin_attempt(&TaskKey::new(&body.dataset, &body.run, &body.partition))?;
        let task = &ticket.key.task;
        Ok(axum::Json(json!({
            "dataset": task.dataset,
            "run": task.run,
            "partition": task.partition,
            "attempt": ticket.key.attempt,
            "staging_dir": ticket.staging_dir,
            "started_at_ms": ticket.started_at_ms,
        })))
    })
    .await
}

async fn heartbeat(State(state): State<AppState>, Body(body): Body<AttemptRef>) -> Answer {
    blocking(&state, move |store| {
        let key = body.key();
        let lease = store.heartbeat(&key)?;
        Ok(axum::Json(json!({
            "dataset": key.task.dataset,
            "run": key.task.run,
            "partition": key.task.partition,
            "attempt": key.attempt,
            "heartbeat_at_ms": lease.heartbeat_at_ms,
            "expires_at_ms": lease.expires_at_ms,
        })))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FinishBody {
    dataset: String,
    run: String,
    partition: String,
    attempt: u32,
    snapshot: String,
    #[serde(default)]
    rows: Option<u64>,
    #[serde(default)]
    total: Option<i64>,
    #[serde(default)]
    digest: Option<String>,
    /// Files as the worker describes them (size and CRC32 computed by the worker).
    #[serde(default)]
    files: Vec<FileBody>,
    /// Files the server describes (size and CRC32 read from the attempt's staging directory,
    /// before the store's write).
    #[serde(default)]
    describe: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileBody {
    path: String,
    size_bytes: u64,
    crc32: u32,
}

async fn finish(State(state): State<AppState>, Body(body): Body<FinishBody>) -> Answer {
    blocking(&state, move |store| {
        let key = TaskKey::new(&body.dataset, &body.run, &body.partition).attempt(body.attempt);
        let mut files: Vec<FileEntry> =
            body.files.into_iter().map(|f| FileEntry { path: f.path, size_bytes: f.size_bytes, crc32: f.crc32 }).collect();
        if !body.describe.is_empty() {
            // Checksums are read outside any write transaction: a big file delays only its own
            // request, never another worker's commit.
            let info = store.snapshot()?.attempt(&key)?.ok_or_else(|| Error::UnknownAttempt {
                dataset: key.task.dataset.clone(),
                run: key.task.run.clone(),
                partition: key.task.partition.clone(),
                attempt: key.attempt,
            })?;
            let dir = store.staging_root().join(info.staging_rel);
            for path in &body.describe {
                files.push(describe_file(&dir, path)?);
            }
        }
        let candidate = Candidate { snapshot: body.snapshot, rows: body.rows, total: body.total, digest: body.digest, files };
        let outcome = store.finish_attempt(&key, &candidate)?;
        Ok(axum::Json(json!({
            "dataset": key.task.dataset,
            "run": key.task.run,
            "partition": key.task.partition,
            "attempt": key.attempt,
            "outcome": if outcome == FinishOutcome::Recorded { "recorded" } else { "already_recorded" },
            "candidate": docs::candidate(&candidate),
        })))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ValidateBody {
    dataset: String,
    run: String,
    partition: String,
    attempt: u32,
    /// Compare every file's CRC32 too, not only its size.
    #[serde(default)]
    checksums: bool,
}

async fn validate(State(state): State<AppState>, Body(body): Body<ValidateBody>) -> Answer {
    blocking(&state, move |store| {
        let task = TaskKey::new(&body.dataset, &body.run, &body.partition);
        let key = task.attempt(body.attempt);
        let check = if body.checksums { FileCheck::SizeAndChecksum } else { FileCheck::Size };
        let verdict = store.validate_attempt(&key, check)?;
        let snapshot = store.snapshot()?;
        let accepted = snapshot.accepted(&task)?;
        let reconciliation = snapshot.attempt(&key)?.and_then(|a| a.reconciliation);
        drop(snapshot);
        let (verdict_name, failures) = docs::verdict(&verdict);
        Ok(axum::Json(json!({
            "dataset": task.dataset,
            "run": task.run,
            "partition": task.partition,
            "attempt": key.attempt,
            "verdict": verdict_name,
            "failures": failures,
            "accepted_attempt": accepted,
            "reconciliation": reconciliation.as_ref().map(docs::reconciliation),
        })))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PublishBody {
    dataset: String,
    run: String,
    #[serde(default)]
    accept_nondeterminism: Option<String>,
}

async fn publish(State(state): State<AppState>, Body(body): Body<PublishBody>) -> Answer {
    blocking(&state, move |store| {
        let options = PublishOptions { accept_nondeterminism: body.accept_nondeterminism };
        let outcome = store.publish(&body.dataset, &body.run, &options)?;
        let (name, generation, refused) = match &outcome {
            PublishOutcome::Published(g) => ("published", docs::generation(g), Vec::new()),
            PublishOutcome::AlreadyPublished(g) => ("already_published", docs::generation(g), Vec::new()),
            PublishOutcome::Refused(r) => ("refused", Value::Null, docs::refused_tasks(r)),
        };
        Ok(axum::Json(json!({
            "dataset": body.dataset,
            "run": body.run,
            "outcome": name,
            "generation": generation,
            "refused_tasks": refused,
        })))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EffectRef {
    dataset: String,
    run: String,
    effect: String,
    #[serde(default)]
    partition: Option<String>,
}

impl EffectRef {
    fn key(self) -> EffectKey {
        EffectKey { dataset: self.dataset, run: self.run, effect: self.effect, partition: self.partition }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EffectRecordBody {
    dataset: String,
    run: String,
    effect: String,
    #[serde(default)]
    partition: Option<String>,
    /// The payload as text.
    #[serde(default)]
    payload: String,
}

async fn effect_record(State(state): State<AppState>, Body(body): Body<EffectRecordBody>) -> Answer {
    blocking(&state, move |store| {
        let key = EffectKey { dataset: body.dataset, run: body.run, effect: body.effect, partition: body.partition };
        let recorded = store.record_effect(&key, body.payload.as_bytes())?;
        Ok(axum::Json(json!({ "newly_recorded": recorded.newly_recorded, "effect": docs::effect(&recorded.effect) })))
    })
    .await
}

async fn effect_mark_emitted(State(state): State<AppState>, Body(body): Body<EffectRef>) -> Answer {
    blocking(&state, move |store| {
        let outcome = store.mark_effect_emitted(&body.key(), None)?;
        Ok(axum::Json(docs::mark_outcome(&outcome)))
    })
    .await
}

// ---- reads ----

fn require_dataset(snapshot: &Snapshot, dataset: &str) -> Result<(), ApiError> {
    if snapshot.has_dataset(dataset)? {
        Ok(())
    } else {
        Err(ApiError::not_found(format!("unknown dataset {dataset:?} (no run declared, nothing published)")))
    }
}

fn manifest_or_not_found(snapshot: &Snapshot, dataset: &str, generation: Option<u64>) -> Result<Manifest, ApiError> {
    snapshot.manifest(dataset, generation)?.ok_or_else(|| match generation {
        Some(number) => ApiError::not_found(format!("dataset {dataset:?} has no generation {number} (never published, or expired)")),
        None => ApiError::not_found(format!("dataset {dataset:?} has no published generation")),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunQuery {
    dataset: String,
    run: String,
}

async fn run_show(State(state): State<AppState>, Query(query): Query<RunQuery>) -> Answer {
    blocking(&state, move |store| {
        let snapshot = store.snapshot()?;
        require_dataset(&snapshot, &query.dataset)?;
        let Some(info) = snapshot.run(&query.dataset, &query.run)? else {
            return Err(ApiError::not_found(format!("unknown run {:?} of dataset {:?}", query.run, query.dataset)));
        };
        let mut tasks = Vec::with_capacity(info.tasks.len());
        for spec in &info.tasks {
            let key = TaskKey::new(&info.dataset, &info.run, &spec.partition);
            let mut task = task_json(spec);
            task["accepted_attempt"] = json!(snapshot.accepted(&key)?);
            task["attempts"] = snapshot.attempts(&key)?.iter().map(docs::attempt).collect();
            tasks.push(task);
        }
        Ok(axum::Json(json!({
            "dataset": info.dataset,
            "run": info.run,
            "snapshot": info.snapshot,
            "declared_at_ms": info.declared_at_ms,
            "published_generation": info.published_generation,
            "grain": info.grain.as_ref().map(docs::grain),
            "tasks": tasks,
        })))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EffectsQuery {
    dataset: String,
    #[serde(default)]
    run: Option<String>,
    #[serde(default)]
    ready: bool,
}

async fn effects_list(State(state): State<AppState>, Query(query): Query<EffectsQuery>) -> Answer {
    blocking(&state, move |store| {
        let snapshot = store.snapshot()?;
        require_dataset(&snapshot, &query.dataset)?;
        let effects = match &query.run {
            Some(run) => {
                if snapshot.run(&query.dataset, run)?.is_none() {
                    return Err(ApiError::not_found(format!("unknown run {run:?} of dataset {:?}", query.dataset)));
                }
                let mut effects = snapshot.effects(&query.dataset, run)?;
                if query.ready {
                    effects.retain(|e| matches!(e.status, crate::EffectStatus::Ready { .. }));
                }
                effects
            }
            None if query.ready => snapshot.ready_effects(&query.dataset)?,
            None => snapshot.dataset_effects(&query.dataset)?,
        };
        Ok(axum::Json(json!({ "effects": effects.iter().map(docs::effect).collect::<Vec<_>>() })))
    })
    .await
}

async fn datasets(State(state): State<AppState>) -> Answer {
    blocking(&state, move |store| {
        let snapshot = store.snapshot()?;
        let mut rows = Vec::new();
        for dataset in snapshot.datasets()? {
            if let Some(g) = snapshot.current(&dataset)? {
                rows.push(
                    json!({ "dataset": g.dataset, "current_generation": g.number, "run": g.run, "published_at_ms": g.published_at_ms }),
                );
            }
        }
        Ok(axum::Json(json!({ "datasets": rows })))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DatasetQuery {
    dataset: String,
}

async fn current(State(state): State<AppState>, Query(query): Query<DatasetQuery>) -> Answer {
    blocking(&state, move |store| {
        let snapshot = store.snapshot()?;
        require_dataset(&snapshot, &query.dataset)?;
        let current = snapshot.current(&query.dataset)?;
        Ok(axum::Json(json!({ "dataset": query.dataset, "generation": current.as_ref().map(docs::generation) })))
    })
    .await
}

struct Totals {
    partitions: u64,
    rows: u64,
    total: Option<i64>,
    files: u64,
    bytes: u64,
}

fn totals(partitions: &[PartitionEntry]) -> Result<Totals, ApiError> {
    let mut t = Totals { partitions: partitions.len() as u64, rows: 0, total: None, files: 0, bytes: 0 };
    for p in partitions {
        t.rows = t.rows.saturating_add(p.rows);
        if let Some(total) = p.total {
            t.total = Some(t.total.unwrap_or(0).checked_add(total).ok_or_else(|| {
                ApiError::new(ErrorKind::Fault, format!("the partitions' totals overflow a 64-bit integer at {}", p.partition))
            })?);
        }
        t.files += p.files.len() as u64;
        t.bytes = t.bytes.saturating_add(p.files.iter().map(|f| f.size_bytes).sum());
    }
    Ok(t)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestQuery {
    dataset: String,
    #[serde(default)]
    generation: Option<u64>,
}

async fn manifest(State(state): State<AppState>, Query(query): Query<ManifestQuery>) -> Answer {
    blocking(&state, move |store| {
        let snapshot = store.snapshot()?;
        require_dataset(&snapshot, &query.dataset)?;
        let manifest = manifest_or_not_found(&snapshot, &query.dataset, query.generation)?;
        let current = snapshot.current(&query.dataset)?.map(|g| g.number);
        let t = totals(&manifest.partitions)?;
        let root = store.staging_root();
        Ok(axum::Json(json!({
            "generation": docs::generation(&manifest.generation),
            "current": current == Some(manifest.generation.number),
            "partitions": manifest.partitions.iter().map(|p| docs::partition(p, Some(root))).collect::<Vec<_>>(),
            "totals": { "partitions": t.partitions, "rows": t.rows, "total": t.total, "files": t.files, "bytes": t.bytes },
        })))
    })
    .await
}

async fn history(State(state): State<AppState>, Query(query): Query<DatasetQuery>) -> Answer {
    blocking(&state, move |store| {
        let snapshot = store.snapshot()?;
        require_dataset(&snapshot, &query.dataset)?;
        let current = snapshot.current(&query.dataset)?.map(|g| g.number);
        let mut history = snapshot.history(&query.dataset)?;
        if current.is_none() && history.is_empty() {
            return Err(ApiError::not_found(format!("dataset {:?} has no published generation", query.dataset)));
        }
        history.reverse();
        Ok(axum::Json(json!({ "datasets": [{
            "dataset": query.dataset,
            "current_generation": current,
            "generations": history.iter().map(docs::generation).collect::<Vec<_>>(),
        }] })))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiffQuery {
    dataset: String,
    from: u64,
    to: u64,
}

async fn diff(State(state): State<AppState>, Query(query): Query<DiffQuery>) -> Answer {
    blocking(&state, move |store| {
        let snapshot = store.snapshot()?;
        require_dataset(&snapshot, &query.dataset)?;
        let from = manifest_or_not_found(&snapshot, &query.dataset, Some(query.from))?;
        let to = manifest_or_not_found(&snapshot, &query.dataset, Some(query.to))?;
        let before: BTreeMap<&str, &PartitionEntry> = from.partitions.iter().map(|p| (p.partition.as_str(), p)).collect();
        let after: BTreeMap<&str, &PartitionEntry> = to.partitions.iter().map(|p| (p.partition.as_str(), p)).collect();
        let root = store.staging_root();
        let part = |p: &PartitionEntry| docs::partition(p, Some(root));
        let added: Vec<Value> = after.iter().filter(|(k, _)| !before.contains_key(*k)).map(|(_, p)| part(p)).collect();
        let removed: Vec<Value> = before.iter().filter(|(k, _)| !after.contains_key(*k)).map(|(_, p)| part(p)).collect();
        let mut replaced = Vec::new();
        let mut unchanged = 0u64;
        for (key, old) in &before {
            if let Some(new) = after.get(key) {
                if old == new {
                    unchanged += 1;
                } else {
                    replaced.push(json!({ "partition": old.partition, "from": part(old), "to": part(new) }));
                }
            }
        }
        Ok(axum::Json(json!({
            "dataset": query.dataset,
            "from": query.from,
            "to": query.to,
            "added": added,
            "removed": removed,
            "replaced": replaced,
            "unchanged": unchanged,
        })))
    })
    .await
}

/// A table name without its version suffix (`runs_v1` -> `runs`), as `stats` prints it.
fn unversioned(name: &str) -> &str {
    match name.rsplit_once("_v") {
        Some((base, version)) if !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => name,
    }
}

async fn stats(State(state): State<AppState>) -> Answer {
    blocking(&state, move |store| {
        let file_bytes = match store.path() {
            Some(path) => Some(
                std::fs::metadata(path)
                    .map_err(|source| Error::Io { context: format!("reading metadata of {}", path.display()), source })?
                    .len(),
            ),
            None => None,
        };
        let snapshot = store.snapshot()?;
        let tables = snapshot.table_entries()?;
        let mut per_dataset = Vec::new();
        for dataset in snapshot.datasets()? {
            if let Some(manifest) = snapshot.manifest(&dataset, None)? {
                let t = totals(&manifest.partitions)?;
                per_dataset.push(json!({
                    "dataset": dataset, "current_generation": manifest.generation.number, "partitions": t.partitions,
                    "rows": t.rows, "files": t.files, "bytes": t.bytes,
                }));
            }
        }
        Ok(axum::Json(json!({
            "store": store.path(),
            "file_bytes": file_bytes,
            "tables": tables.iter().map(|(name, n)| (unversioned(name).to_owned(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "datasets": per_dataset,
        })))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_must_match_exactly() {
        let mut headers = HeaderMap::new();
        assert!(!authorized(&headers, b"secret"));
        headers.insert(header::AUTHORIZATION, "Bearer secret".parse().unwrap());
        assert!(authorized(&headers, b"secret"));
        headers.insert(header::AUTHORIZATION, "Bearer secre".parse().unwrap());
        assert!(!authorized(&headers, b"secret"));
        headers.insert(header::AUTHORIZATION, "Bearer secrets".parse().unwrap());
        assert!(!authorized(&headers, b"secret"));
        headers.insert(header::AUTHORIZATION, "Basic secret".parse().unwrap());
        assert!(!authorized(&headers, b"secret"));
    }
}

//! The routes: each parses its JSON body (or query), runs one store call on the blocking pool
//! and answers with the document the command-line tool prints for the same verb.

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

use super::kind;
use crate::ErrorKind;
use crate::documents;
use crate::{
    BATCH_OPS_MAX, BatchOp, BatchOutcome, Error, Manifest, PartitionEntry, PublishOptions, Snapshot, Store, TaskKey, describe_file,
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
    ("POST", "/v1/effects/claim"),
    ("POST", "/v1/effects/mark-emitted"),
    ("POST", "/v1/batch"),
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
        .route("/v1/effects/claim", post(effect_claim))
        .route("/v1/effects/mark-emitted", post(effect_mark_emitted))
        .route("/v1/batch", post(batch))
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
        ApiError { status: kind::status(kind, None), kind, message: message.into() }
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
        let kind = err.kind();
        ApiError { status: kind::status(kind, Some(&err)), kind, message: err.to_string() }
    }
}

impl ApiError {
    /// `{"exit_code", "kind", "message"}`: the error object of an error document.
    fn document(&self) -> Value {
        json!({ "exit_code": self.kind.exit_code(), "kind": self.kind.name(), "message": self.message })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": self.document() });
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

/// A run declaration: [`documents::RunInput`], the document `run declare --from` reads.
async fn declare(State(state): State<AppState>, Body(body): Body<documents::RunInput>) -> Answer {
    let spec = body.into_spec()?;
    blocking(&state, move |store| {
        let outcome = store.declare_run(&spec)?;
        Ok(axum::Json(documents::declared(&spec, outcome)))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AttemptRef {
    dataset: String,
    run: String,
    partition: String,
    attempt: u32,
}

/// A write route's body: the fields of the [`BatchOp`] the route names, without its `op` tag
/// (the route is the tag), so a route and a batch line read one shape.
fn batch_op(op: &'static str, mut body: serde_json::Map<String, Value>) -> Result<BatchOp, ApiError> {
    if body.contains_key("op") {
        return Err(ApiError::new(ErrorKind::Usage, "the request body is not valid: unknown field `op` (the route names the operation)"));
    }
    body.insert("op".to_owned(), Value::from(op));
    serde_json::from_value(Value::Object(body)).map_err(|e| ApiError::new(ErrorKind::Usage, format!("the request body is not valid: {e}")))
}

/// Runs one operation as a batch of one: the same store path as `POST /v1/batch` and as the
/// single calls (each operation is written once in the store).
fn run_one(store: &Store, op: &BatchOp) -> Result<BatchOutcome, ApiError> {
    let mut outcomes = store.run_batch(std::slice::from_ref(op))?;
    match outcomes.pop() {
        Some(outcome) if outcomes.is_empty() => Ok(outcome?),
        _ => Err(ApiError::new(ErrorKind::Fault, "the store returned another number of outcomes than operations")),
    }
}

/// The outcome of another operation than the one sent: a fault of the store.
fn mismatched() -> ApiError {
    ApiError::new(ErrorKind::Fault, "the store answered an operation with another operation's outcome")
}

/// A write route whose answer is its operation's batch result document (the document of the
/// verb: `attempt begin`, `effects record`, `effects claim`, `effects mark-emitted`).
async fn op_route(state: &AppState, op: &'static str, body: serde_json::Map<String, Value>) -> Answer {
    let op = batch_op(op, body)?;
    blocking(state, move |store| Ok(axum::Json(documents::batch_result(&run_one(store, &op)?)))).await
}

async fn begin(State(state): State<AppState>, Body(body): Body<serde_json::Map<String, Value>>) -> Answer {
    op_route(&state, "begin", body).await
}

async fn heartbeat(State(state): State<AppState>, Body(body): Body<AttemptRef>) -> Answer {
    blocking(&state, move |store| {
        let key = TaskKey::new(&body.dataset, &body.run, &body.partition).attempt(body.attempt);
        let lease = store.heartbeat(&key)?;
        Ok(axum::Json(documents::heartbeat(&key, &lease)))
    })
    .await
}

/// A finish: a batch `finish` operation (`candidate` with the files the worker describes),
/// plus `describe`, paths under the attempt's staging directory whose size and CRC32 the
/// server reads, before the store's write, and adds to the candidate's files.
async fn finish(State(state): State<AppState>, Body(mut body): Body<serde_json::Map<String, Value>>) -> Answer {
    let describe: Vec<String> = match body.remove("describe") {
        Some(paths) => serde_json::from_value(paths)
            .map_err(|e| ApiError::new(ErrorKind::Usage, format!("the request body is not valid: describe: {e}")))?,
        None => Vec::new(),
    };
    let mut op = batch_op("finish", body)?;
    blocking(&state, move |store| {
        let BatchOp::Finish { dataset, run, partition, attempt, candidate } = &mut op else { return Err(mismatched()) };
        let key = TaskKey::new(dataset.as_str(), run.as_str(), partition.as_str()).attempt(*attempt);
        if !describe.is_empty() {
            // Checksums are read outside any write transaction: a big file delays only its own
            // request, never another worker's commit.
            let info = store.snapshot()?.attempt(&key)?.ok_or_else(|| Error::UnknownAttempt {
                dataset: key.task.dataset.clone(),
                run: key.task.run.clone(),
                partition: key.task.partition.clone(),
                attempt: key.attempt,
            })?;
            let dir = store.staging_root().join(info.staging_rel);
            for path in &describe {
                candidate.files.push(describe_file(&dir, path)?);
            }
        }
        let candidate = candidate.clone();
        match run_one(store, &op)? {
            BatchOutcome::Finish(outcome) => Ok(axum::Json(documents::finished(&key, outcome, &candidate))),
            _ => Err(mismatched()),
        }
    })
    .await
}

async fn validate(State(state): State<AppState>, Body(body): Body<serde_json::Map<String, Value>>) -> Answer {
    let op = batch_op("validate", body)?;
    blocking(&state, move |store| {
        let BatchOp::Validate { dataset, run, partition, attempt, .. } = &op else { return Err(mismatched()) };
        let task = TaskKey::new(dataset, run, partition);
        let key = task.attempt(*attempt);
        let BatchOutcome::Validate(verdict) = run_one(store, &op)? else { return Err(mismatched()) };
        let snapshot = store.snapshot()?;
        let accepted = snapshot.accepted(&task)?;
        let reconciliation = snapshot.attempt(&key)?.and_then(|a| a.reconciliation);
        Ok(axum::Json(documents::validated(&key, &verdict, accepted, reconciliation.as_ref())))
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
        Ok(axum::Json(documents::published(&body.dataset, &body.run, &outcome)))
    })
    .await
}

async fn effect_record(State(state): State<AppState>, Body(body): Body<serde_json::Map<String, Value>>) -> Answer {
    op_route(&state, "record_effect", body).await
}

/// A claim: 200 whether claimed or refused (a refusal is a value: `held_by_other`,
/// `already_emitted`); an effect not ready yet is a 409 error.
async fn effect_claim(State(state): State<AppState>, Body(body): Body<serde_json::Map<String, Value>>) -> Answer {
    op_route(&state, "claim_effect", body).await
}

async fn effect_mark_emitted(State(state): State<AppState>, Body(body): Body<serde_json::Map<String, Value>>) -> Answer {
    op_route(&state, "mark_emitted", body).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    /// The operations, each a batch line's JSON object (`{"op": "begin", ...}`).
    ops: Vec<Value>,
}

/// `POST /v1/batch`: every operation in one commit, one result each, in order:
/// `{"ok", "results": [{"line", "op", "ok", "result"|"error"}]}` (`line` counts from 1). An
/// operation that is not one, or that is refused, fails alone; a storage fault fails the
/// request.
async fn batch(State(state): State<AppState>, Body(body): Body<BatchBody>) -> Answer {
    if body.ops.len() > BATCH_OPS_MAX {
        return Err(ApiError::new(ErrorKind::Usage, format!("a batch holds at most {BATCH_OPS_MAX} operations, not {}", body.ops.len())));
    }
    let parsed: Vec<Result<BatchOp, String>> = body
        .ops
        .into_iter()
        .enumerate()
        .map(|(i, op)| serde_json::from_value::<BatchOp>(op).map_err(|e| format!("operation {} is not an operation: {e}", i + 1)))
        .collect();
    blocking(&state, move |store| {
        let ops: Vec<BatchOp> = parsed.iter().filter_map(|op| op.as_ref().ok().cloned()).collect();
        let mut outcomes = if ops.is_empty() { Vec::new() } else { store.run_batch(&ops)? }.into_iter();
        let mut results = Vec::with_capacity(parsed.len());
        let mut all_ok = true;
        for (i, op) in parsed.iter().enumerate() {
            let line = match op {
                Err(message) => documents::batch_line(i + 1, None, Err(ApiError::new(ErrorKind::Usage, message.clone()).document())),
                Ok(op) => match outcomes.next() {
                    Some(Ok(outcome)) => documents::batch_line(i + 1, Some(op.name()), Ok(documents::batch_result(&outcome))),
                    Some(Err(err)) => documents::batch_line(i + 1, Some(op.name()), Err(ApiError::from(err).document())),
                    None => return Err(ApiError::new(ErrorKind::Fault, "the store returned fewer outcomes than operations")),
                },
            };
            all_ok &= line["ok"] == Value::Bool(true);
            results.push(line);
        }
        Ok(axum::Json(json!({ "ok": all_ok, "results": results })))
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
            tasks.push((spec, snapshot.accepted(&key)?, snapshot.attempts(&key)?));
        }
        Ok(axum::Json(documents::run_show(&info, &tasks)))
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
        Ok(axum::Json(json!({ "effects": effects.iter().map(documents::effect).collect::<Vec<_>>() })))
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
        Ok(axum::Json(json!({ "dataset": query.dataset, "generation": current.as_ref().map(documents::generation) })))
    })
    .await
}

/// The partitions' totals; an overflow is a fault.
fn totals(partitions: &[PartitionEntry]) -> Result<documents::Totals, ApiError> {
    documents::totals(partitions).map_err(|message| ApiError::new(ErrorKind::Fault, message))
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
        let doc = documents::manifest(&manifest, current, Some(store.staging_root()))
            .map_err(|message| ApiError::new(ErrorKind::Fault, message))?;
        Ok(axum::Json(doc))
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
            "generations": history.iter().map(documents::generation).collect::<Vec<_>>(),
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
        Ok(axum::Json(documents::diff(&query.dataset, query.from, query.to, &from.diff(&to), Some(store.staging_root()))))
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

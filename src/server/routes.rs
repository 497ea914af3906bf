//! The routes: each parses its JSON body (or query), runs one store call on the blocking pool
//! and answers with the document the command-line tool prints for the same verb.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::kind;
use crate::ErrorKind;
use crate::documents::requests::{
    ApplyBody, AttemptRef, AttemptsQuery, BatchBody, DatasetOpt, DatasetQuery, DiffQuery, EffectsQuery, ExecuteBody, ExpireBody,
    FinishAndValidateBody, InvalidateBody, ManifestQuery, PendingBody, PlanBody, PlanQuery, PublishBody, RollbackBody, RunQuery,
    VerifyBody, ViewQuery, run_mode,
};
use crate::documents::{self, operator, reads};
use crate::{BatchOp, BatchOutcome, Error, IntegrityCheck, Store, TaskKey, VerifyOptions, describe_file};

/// The store a server serves, behind a gate: every request holds it shared for its store
/// call; `verify --integrity` (redb's check, which needs the handle exclusively) holds it
/// alone, so the requests in flight finish first and the next ones wait.
pub(super) type Served = Arc<RwLock<Arc<Store>>>;

/// What every handler shares: the store.
#[derive(Clone)]
pub(super) struct AppState {
    store: Served,
}

impl AppState {
    pub(super) fn new(store: Served) -> AppState {
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
    ("POST", "/v1/attempts/finish-and-validate"),
    ("POST", "/v1/attempts/validate-pending"),
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
    ("GET", "/v1/runs"),
    ("GET", "/v1/attempts"),
    ("GET", "/v1/attempts/show"),
    ("GET", "/v1/views"),
    ("POST", "/v1/attempts/abandon"),
    ("POST", "/v1/attempts/invalidate"),
    ("POST", "/v1/rollback"),
    ("POST", "/v1/gc/abandon"),
    ("POST", "/v1/gc/expire"),
    ("POST", "/v1/gc/plan"),
    ("GET", "/v1/gc/plan"),
    ("POST", "/v1/gc/apply"),
    ("POST", "/v1/views/sync"),
    ("POST", "/v1/verify"),
];

/// What the router checks before any route runs.
pub(super) struct Gate {
    /// The bearer token every request must carry, if any.
    pub(super) token: Option<Vec<u8>>,
    /// Which `Host` a request may name (TCP only; `None` on a Unix socket).
    pub(super) hosts: Option<Hosts>,
    /// The largest request body, in bytes.
    pub(super) body_limit_bytes: usize,
    /// How long a request may take to arrive and be answered.
    pub(super) request_timeout: Duration,
}

pub(super) fn router(state: AppState, gate: Gate) -> Router {
    let Gate { token, hosts, body_limit_bytes, request_timeout } = gate;
    let token = token.map(Arc::new);
    let hosts = hosts.map(Arc::new);
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/runs/declare", post(declare))
        .route("/v1/runs/show", get(run_show))
        .route("/v1/attempts/begin", post(begin))
        .route("/v1/attempts/heartbeat", post(heartbeat))
        .route("/v1/attempts/finish", post(finish))
        .route("/v1/attempts/validate", post(validate))
        .route("/v1/attempts/finish-and-validate", post(finish_and_validate))
        .route("/v1/attempts/validate-pending", post(validate_pending))
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
        .route("/v1/runs", get(run_list))
        .route("/v1/attempts", get(attempt_list))
        .route("/v1/attempts/show", get(attempt_show))
        .route("/v1/views", get(view_show))
        .route("/v1/attempts/abandon", post(abandon))
        .route("/v1/attempts/invalidate", post(invalidate))
        .route("/v1/rollback", post(rollback))
        .route("/v1/gc/abandon", post(gc_abandon))
        .route("/v1/gc/expire", post(gc_expire))
        .route("/v1/gc/plan", post(gc_plan).get(gc_plan_show))
        .route("/v1/gc/apply", post(gc_apply))
        .route("/v1/views/sync", post(views_sync))
        .route("/v1/verify", post(verify))
        .fallback(unknown_route)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        .layer(DefaultBodyLimit::max(body_limit_bytes))
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            let (token, hosts) = (token.clone(), hosts.clone());
            async move {
                // Whether the request comes with a body that a refusal may leave unread: then the
                // connection cannot carry another request, and the answer says it closes.
                let has_body = request.headers().contains_key(header::TRANSFER_ENCODING)
                    || request.headers().get(header::CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0");
                let mut response = match admit(&request, token.as_deref().map(Vec::as_slice), hosts.as_deref(), body_limit_bytes) {
                    Err(refusal) => refusal.into_response(),
                    Ok(()) => match tokio::time::timeout(request_timeout, next.run(request)).await {
                        Ok(response) => response,
                        Err(_) => ApiError::with_status(
                            StatusCode::REQUEST_TIMEOUT,
                            ErrorKind::Usage,
                            format!("the request was not received and answered within {} s", request_timeout.as_secs_f64()),
                        )
                        .into_response(),
                    },
                };
                if has_body && (response.status().is_client_error() || response.status().is_server_error()) {
                    response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
                }
                response
            }
        }))
}

/// Which `Host` a TCP server answers: a loopback address, `localhost`, the address it listens
/// on, or a name it was given. A web page whose name an attacker points at 127.0.0.1 (DNS
/// rebinding) makes the browser send that name, so its requests are refused before any route
/// runs.
#[derive(Debug, Clone)]
pub(super) struct Hosts {
    /// The address the server listens on (an unspecified one, `0.0.0.0` or `::`, admits any
    /// address literal: the browser's origin is then the server itself).
    pub(super) listen: std::net::IpAddr,
    /// The names given (`--host-name`), lowercase, without a trailing dot.
    pub(super) names: Vec<String>,
}

impl Hosts {
    /// Whether a request naming `host` (the `Host` header: a name or an address, with an
    /// optional port) is for this server.
    pub(super) fn admits(&self, host: &str) -> bool {
        let host = host.trim();
        // `[::1]:7070`, `[::1]`, `127.0.0.1:7070`, `name:7070`, `name`.
        let name = if let Some(rest) = host.strip_prefix('[') {
            match rest.split_once(']') {
                Some((inside, after)) if after.is_empty() || after.starts_with(':') => inside,
                _ => return false,
            }
        } else {
            match host.rsplit_once(':') {
                Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => name,
                Some(_) => return false,
                None => host,
            }
        };
        if let Ok(ip) = name.parse::<std::net::IpAddr>() {
            return ip.is_loopback() || ip == self.listen || self.listen.is_unspecified();
        }
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        name == "localhost" || self.names.contains(&name)
    }
}

/// The checks of every request before its route: an HTTP/1.1 request names its `Host` (and on
/// TCP one this server answers to), carries the bearer token when one is required, and
/// declares no body over the limit (refused at once, not after the body trickled in).
fn admit(request: &Request, token: Option<&[u8]>, hosts: Option<&Hosts>, body_limit_bytes: usize) -> Result<(), ApiError> {
    let host = request.headers().get(header::HOST);
    if host.is_none() && request.version() == axum::http::Version::HTTP_11 {
        return Err(ApiError::new(ErrorKind::Usage, "an HTTP/1.1 request must name its Host"));
    }
    // RFC 9112, section 3.2: a request with more than one Host field is answered 400.
    if request.headers().get_all(header::HOST).iter().nth(1).is_some() {
        return Err(ApiError::new(ErrorKind::Usage, "a request must name one Host, not several"));
    }
    // A request target in absolute form (`http://AUTHORITY/path`) names the host it is for, and
    // a server takes it instead of the Host field (RFC 9112, section 3.2.2): the guard checks it.
    let target = request.uri().authority().map(|authority| match authority.port() {
        Some(port) => format!("{}:{port}", authority.host()),
        None => authority.host().to_owned(),
    });
    let named = match (&target, host) {
        (Some(target), _) => Some(target.as_str()),
        (None, Some(host)) => Some(host.to_str().unwrap_or_default()),
        (None, None) => None,
    };
    if let (Some(hosts), Some(text)) = (hosts, named)
        && !hosts.admits(text)
    {
        return Err(ApiError::with_status(
            StatusCode::MISDIRECTED_REQUEST,
            ErrorKind::Usage,
            format!(
                "Host {:?} is not this server's: a request must name a loopback address, localhost, the address the server listens on or a name given with --host-name (a guard against DNS rebinding)",
                crate::error::shorten(text)
            ),
        ));
    }
    if let Some(expected) = token
        && !authorized(request.headers(), expected)
    {
        return Err(ApiError::new(ErrorKind::Unauthorized, "a valid bearer token is required (Authorization: Bearer TOKEN)"));
    }
    let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if let Some(declared) = declared
        && declared > body_limit_bytes as u64
    {
        return Err(too_large(body_limit_bytes));
    }
    Ok(())
}

/// The 413 answer.
fn too_large(body_limit_bytes: usize) -> ApiError {
    ApiError::with_status(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::Usage,
        format!("the request body is larger than the server's limit of {body_limit_bytes} bytes"),
    )
}

/// Whether the request carries the expected bearer token. The comparison takes the same time
/// whatever prefix of the token matches (subtle's constant-time equality).
fn authorized(headers: &HeaderMap, expected: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    let Some(value) = headers.get(header::AUTHORIZATION) else { return false };
    // `credentials = auth-scheme 1*SP token68`; the scheme is case-insensitive (RFC 7235).
    let value = value.as_bytes();
    let Some(space) = value.iter().position(|&b| b == b' ') else { return false };
    let (scheme, given) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return false;
    }
    let given = given.trim_ascii_start();
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

impl From<reads::DocumentError> for ApiError {
    fn from(err: reads::DocumentError) -> ApiError {
        match err {
            reads::DocumentError::Store(err) => ApiError::from(err),
            other => ApiError::new(other.kind(), other.to_string()),
        }
    }
}

impl ApiError {
    /// `{"exit_code", "kind", "message"}`: the error object of an error document.
    fn document(&self) -> Value {
        documents::error_object(self.kind, &self.message)
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
/// application/json`, 413 over the size limit, 400 for malformed JSON, a key repeated in one
/// object ([`documents::strict`]) or unknown fields.
struct Body<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        if !json_content_type(request.headers()) {
            return Err(ApiError::with_status(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorKind::Usage,
                "the request body must be JSON, sent with Content-Type: application/json",
            ));
        }
        let bytes = match axum::body::Bytes::from_request(request, state).await {
            Ok(bytes) => bytes,
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(ApiError::with_status(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    ErrorKind::Usage,
                    "the request body is larger than the server's limit",
                ));
            }
            Err(rejection) => {
                return Err(ApiError::with_status(
                    rejection.status(),
                    ErrorKind::Usage,
                    format!("the request body could not be read: {}", rejection.body_text()),
                ));
            }
        };
        documents::strict::parse(&bytes)
            .map(Body)
            .map_err(|e| ApiError::new(ErrorKind::Usage, format!("the request body is not valid: {e}")))
    }
}

/// Whether the request says its body is JSON (`application/json`, or a `+json` type), as
/// axum's `Json` decides it.
fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
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
    match tokio::task::spawn_blocking(move || call(&store.read())).await {
        Ok(result) => result,
        Err(e) => Err(ApiError::new(ErrorKind::Fault, format!("the store call failed: {e}"))),
    }
}

/// The method and path of an unrouted request, shortened: both are the caller's bytes (a method
/// may be any token, of any length).
async fn unknown_route(request: Request) -> ApiError {
    ApiError::not_found(format!(
        "no route {} {} (see docs/openapi.json)",
        crate::error::shorten(request.method().as_str()),
        crate::error::shorten(request.uri().path())
    ))
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::with_status(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorKind::Usage,
        format!(
            "route {} does not take {} (see docs/openapi.json)",
            crate::error::shorten(request.uri().path()),
            crate::error::shorten(request.method().as_str())
        ),
    )
}

/// `{"status": "serving", "version", "staging_root"}`: the server runs, its build, and the
/// staging root of the store it serves (what `init` of a served store compares).
async fn health(State(state): State<AppState>) -> axum::Json<Value> {
    let staging_root = state.store.read().staging_root().to_path_buf();
    axum::Json(json!({ "status": "serving", "version": env!("CARGO_PKG_VERSION"), "staging_root": staging_root }))
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

/// `POST /v1/attempts/begin`: the body of a batch's `begin` line, run by [`Store::begin_attempt`]
/// (not as a batch of one): a store opened without cross-process readers and without durable
/// begins (`serve --exclusive`) then answers the begin before its own flush, made durable by
/// its next durable commit, with the library's guarantee for a begin a power loss forgets (its
/// number and directory are never issued again). Any other store's begin is durable when
/// answered, as a batch's always is.
async fn begin(State(state): State<AppState>, Body(body): Body<serde_json::Map<String, Value>>) -> Answer {
    let BatchOp::Begin { dataset, run, partition } = batch_op("begin", body)? else {
        return Err(ApiError::new(ErrorKind::Fault, "a begin's body was read as another operation"));
    };
    let task = TaskKey::new(dataset, run, partition);
    blocking(&state, move |store| Ok(axum::Json(documents::batch_result(&BatchOutcome::Begin(store.begin_attempt(&task)?))))).await
}

async fn heartbeat(State(state): State<AppState>, Body(body): Body<AttemptRef>) -> Answer {
    blocking(&state, move |store| {
        let key = body.key();
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
        let key = TaskKey::new(dataset, run, partition).attempt(*attempt);
        let BatchOutcome::Validate(verdict) = run_one(store, &op)? else { return Err(mismatched()) };
        Ok(axum::Json(documents::validated_from(&store.snapshot()?, &key, &verdict)?))
    })
    .await
}

/// `finish` and `validate` at once ([`Store::finish_and_validate`]): one durable commit stores
/// the candidate and its verdict; the answer is `validate`'s.
async fn finish_and_validate(State(state): State<AppState>, Body(body): Body<FinishAndValidateBody>) -> Answer {
    blocking(&state, move |store| {
        let key = body.key();
        let verdict = store.finish_and_validate(&key, &body.candidate, body.check())?;
        Ok(axum::Json(documents::validated_from(&store.snapshot()?, &key, &verdict)?))
    })
    .await
}

/// `attempt validate --pending`: validates every finished, unvalidated attempt of the run
/// ([`Store::validate_pending`]): `{"dataset", "run", "results": [validated | failed]}`, one
/// per attempt in (partition, attempt) order; an attempt that fails is its line's error, the
/// answer is 200 (an unknown run is 404).
async fn validate_pending(State(state): State<AppState>, Body(body): Body<PendingBody>) -> Answer {
    blocking(&state, move |store| {
        let results = store.validate_pending(&body.dataset, &body.run, body.check())?;
        Ok(axum::Json(documents::pending_validated(&store.snapshot()?, &body.dataset, &body.run, &results)?))
    })
    .await
}

async fn publish(State(state): State<AppState>, Body(body): Body<PublishBody>) -> Answer {
    blocking(&state, move |store| {
        let outcome = store.publish(&body.dataset, &body.run, &body.options())?;
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

/// `POST /v1/batch`: every operation in one commit, one result each, in order:
/// `{"ok", "results": [{"line", "op", "ok", "result"|"error"}]}` (`line` counts from 1). An
/// operation that is not one, or that is refused, fails alone; a storage fault fails the
/// request.
async fn batch(State(state): State<AppState>, Body(body): Body<BatchBody>) -> Answer {
    let parsed = body.parse_ops().map_err(|message| ApiError::new(ErrorKind::Usage, message))?;
    blocking(&state, move |store| {
        let ops: Vec<BatchOp> = parsed.iter().filter_map(|op| op.as_ref().ok().cloned()).collect();
        let outcomes = if ops.is_empty() { Vec::new() } else { store.run_batch(&ops)? };
        documents::batch_answer(&parsed, outcomes)
            .map(axum::Json)
            .ok_or_else(|| ApiError::new(ErrorKind::Fault, "the store returned fewer outcomes than operations"))
    })
    .await
}

// ---- reads ----

/// A read route: the document [`reads`] makes from one snapshot of the store.
async fn read_route(
    state: &AppState,
    read: impl FnOnce(&Store, &crate::Snapshot) -> Result<Value, reads::DocumentError> + Send + 'static,
) -> Answer {
    blocking(state, move |store| {
        let snapshot = store.snapshot()?;
        Ok(axum::Json(read(store, &snapshot)?))
    })
    .await
}

async fn run_show(State(state): State<AppState>, Query(query): Query<RunQuery>) -> Answer {
    read_route(&state, move |_, snapshot| reads::run_show(snapshot, &query.dataset, &query.run)).await
}

async fn effects_list(State(state): State<AppState>, Query(query): Query<EffectsQuery>) -> Answer {
    read_route(&state, move |_, snapshot| reads::effects(snapshot, &query.dataset, query.run.as_deref(), query.ready)).await
}

async fn datasets(State(state): State<AppState>) -> Answer {
    read_route(&state, |_, snapshot| reads::datasets(snapshot)).await
}

async fn current(State(state): State<AppState>, Query(query): Query<DatasetQuery>) -> Answer {
    read_route(&state, move |_, snapshot| reads::current(snapshot, &query.dataset)).await
}

async fn manifest(State(state): State<AppState>, Query(query): Query<ManifestQuery>) -> Answer {
    read_route(&state, move |store, snapshot| reads::show(snapshot, &query.dataset, query.generation, Some(store.staging_root()))).await
}

async fn history(State(state): State<AppState>, Query(query): Query<DatasetOpt>) -> Answer {
    read_route(&state, move |_, snapshot| reads::history(snapshot, query.dataset.as_deref())).await
}

async fn diff(State(state): State<AppState>, Query(query): Query<DiffQuery>) -> Answer {
    read_route(&state, move |store, snapshot| reads::diff(snapshot, &query.dataset, query.from, query.to, Some(store.staging_root()))).await
}

async fn stats(State(state): State<AppState>) -> Answer {
    read_route(&state, |store, snapshot| reads::stats(snapshot, store.path())).await
}

async fn run_list(State(state): State<AppState>, Query(query): Query<DatasetQuery>) -> Answer {
    read_route(&state, move |_, snapshot| reads::run_list(snapshot, &query.dataset)).await
}

async fn attempt_list(State(state): State<AppState>, Query(query): Query<AttemptsQuery>) -> Answer {
    read_route(&state, move |_, snapshot| reads::attempt_list(snapshot, &query.dataset, &query.run, query.partition.as_deref(), now_ms()))
        .await
}

/// Now, in milliseconds since the Unix epoch (the clock the store's times use).
fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

async fn attempt_show(State(state): State<AppState>, Query(query): Query<AttemptRef>) -> Answer {
    read_route(&state, move |store, snapshot| reads::attempt_show(snapshot, &query.key(), Some(store.staging_root()))).await
}

async fn view_show(State(state): State<AppState>, Query(query): Query<ViewQuery>) -> Answer {
    read_route(&state, move |_, snapshot| operator::view(snapshot, &query.dataset, None, query.generation)).await
}

// ---- operator routes ----

async fn abandon(State(state): State<AppState>, Body(body): Body<AttemptRef>) -> Answer {
    blocking(&state, move |store| {
        let key = body.key();
        let outcome = store.abandon_attempt(&key)?;
        Ok(axum::Json(operator::abandoned(&key, &outcome)))
    })
    .await
}

async fn invalidate(State(state): State<AppState>, Body(body): Body<InvalidateBody>) -> Answer {
    blocking(&state, move |store| {
        let key = body.key();
        let outcome = store.invalidate_attempt(&key, &body.actor, &body.reason)?;
        Ok(axum::Json(operator::invalidated(&key, &outcome)))
    })
    .await
}

/// A rollback: 200 whether rolled back or refused (a refusal is a value, `"outcome":
/// "refused"` with its `refusal`); an unknown dataset is 404.
async fn rollback(State(state): State<AppState>, Body(body): Body<RollbackBody>) -> Answer {
    blocking(&state, move |store| {
        reads::require_dataset(&store.snapshot()?, &body.dataset)?;
        let outcome = store.rollback(&body.dataset, body.to, &body.actor, &body.reason)?;
        Ok(axum::Json(operator::rollback(&body.dataset, body.to, &outcome)))
    })
    .await
}

async fn gc_abandon(State(state): State<AppState>, Body(body): Body<ExecuteBody>) -> Answer {
    blocking(&state, move |store| {
        let mode = run_mode(body.execute);
        let abandoned = store.abandon_expired_attempts(mode)?;
        Ok(axum::Json(operator::gc_abandoned(mode, store.attempt_lifetime_max_ms(), &abandoned)))
    })
    .await
}

async fn gc_expire(State(state): State<AppState>, Body(body): Body<ExpireBody>) -> Answer {
    blocking(&state, move |store| {
        reads::require_dataset(&store.snapshot()?, &body.dataset)?;
        let report = store.expire_generations(&body.dataset, &body.policy(), run_mode(body.execute))?;
        Ok(axum::Json(operator::expired(&report)))
    })
    .await
}

async fn gc_plan(State(state): State<AppState>, Body(body): Body<PlanBody>) -> Answer {
    blocking(&state, move |store| Ok(axum::Json(operator::cleanup_plan(&store.plan_cleanup(&body.options())?)))).await
}

async fn gc_plan_show(State(state): State<AppState>, Query(query): Query<PlanQuery>) -> Answer {
    blocking(&state, move |store| match store.cleanup_plan(query.plan)? {
        Some(plan) => Ok(axum::Json(operator::cleanup_plan(&plan))),
        None => Err(ApiError::not_found(format!("no cleanup plan {} is stored", query.plan))),
    })
    .await
}

async fn gc_apply(State(state): State<AppState>, Body(body): Body<ApplyBody>) -> Answer {
    blocking(&state, move |store| Ok(axum::Json(operator::cleanup_applied(&store.apply_cleanup(body.plan, &body.options())?)))).await
}

async fn views_sync(State(state): State<AppState>, Body(body): Body<DatasetOpt>) -> Answer {
    blocking(&state, move |store| {
        if let Some(dataset) = &body.dataset {
            reads::require_dataset(&store.snapshot()?, dataset)?;
        }
        if store.view_root().is_none() {
            return Err(ApiError::not_found("the store publishes no views (pass --views DIR once to set its view root)"));
        }
        let synced = match &body.dataset {
            Some(dataset) => store.sync_view(dataset)?.into_iter().collect(),
            None => store.sync_views()?,
        };
        Ok(axum::Json(operator::views_synced(&synced)))
    })
    .await
}

async fn verify(State(state): State<AppState>, Body(body): Body<VerifyBody>) -> Answer {
    let files =
        body.file_check().map_err(|message| ApiError::new(ErrorKind::Usage, format!("the request body is not valid: {message}")))?;
    let served = Arc::clone(&state.store);
    let run = move || -> Result<Value, ApiError> {
        if body.integrity {
            // Alone with the handle: every other request waits for the gate.
            let mut store = served.write();
            let options =
                VerifyOptions { integrity_check: true, files, staging_root: Some(store.staging_root().to_path_buf()), views: true };
            let report = match Arc::get_mut(&mut store) {
                Some(store) => store.verify(&options)?,
                None => {
                    // The program that embeds the server holds the handle too: the check cannot
                    // have it alone. Everything else is verified.
                    let mut report = store.snapshot()?.verify(&options);
                    report.integrity = IntegrityCheck::Skipped {
                        reason: "the server's store handle is shared with the program that embeds the server".into(),
                    };
                    report
                }
            };
            Ok(operator::verified(&report))
        } else {
            let store = served.read();
            let options =
                VerifyOptions { integrity_check: false, files, staging_root: Some(store.staging_root().to_path_buf()), views: true };
            Ok(operator::verified(&store.snapshot()?.verify(&options)))
        }
    };
    match tokio::task::spawn_blocking(run).await {
        Ok(result) => result.map(axum::Json),
        Err(e) => Err(ApiError::new(ErrorKind::Fault, format!("the store call failed: {e}"))),
    }
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
        // The scheme is case-insensitive (RFC 7235), the token is not.
        for given in ["bearer secret", "BEARER secret", "BeArEr  secret"] {
            headers.insert(header::AUTHORIZATION, given.parse().unwrap());
            assert!(authorized(&headers, b"secret"), "{given}");
        }
        for given in ["bearer Secret", "Bearersecret", "Bearer", "bearer ", "Bear secret"] {
            headers.insert(header::AUTHORIZATION, given.parse().unwrap());
            assert!(!authorized(&headers, b"secret"), "{given}");
        }
    }

    #[test]
    fn a_tcp_request_must_name_this_server_as_its_host() {
        let loopback = Hosts { listen: "127.0.0.1".parse().unwrap(), names: vec!["jobs.internal".into()] };
        for host in [
            "127.0.0.1:7070",
            "127.0.0.1",
            "127.8.9.1:1",
            "localhost",
            "LOCALHOST:7070",
            "localhost.",
            "[::1]:7070",
            "[::1]",
            "jobs.internal",
            "Jobs.Internal:80",
        ] {
            assert!(loopback.admits(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:7070",
            "localhost.evil.example",
            "10.0.0.5:7070",
            "",
            ":7070",
            "[::1",
            "[::1]x",
            "a:b:c",
            "127.0.0.1:x",
        ] {
            assert!(!loopback.admits(host), "{host}");
        }
        let lan = Hosts { listen: "10.0.0.5".parse().unwrap(), names: Vec::new() };
        assert!(lan.admits("10.0.0.5:7070") && lan.admits("127.0.0.1") && !lan.admits("10.0.0.6:7070") && !lan.admits("evil.example"));
        let any = Hosts { listen: "0.0.0.0".parse().unwrap(), names: Vec::new() };
        assert!(any.admits("10.0.0.6:7070") && any.admits("[fe80::1]:7070") && !any.admits("evil.example"));
    }
}

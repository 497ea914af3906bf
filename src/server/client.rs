//! A blocking client of the server, for Rust workers, the command-line tool and the tests:
//! hyper's HTTP/1.1 client connection over a Unix socket or TCP, kept alive between calls.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::Value;

use super::Listen;
use crate::ErrorKind;
use crate::{Error, Result};

/// The time a client waits for an answer by default: longer than the server's own request
/// time-out, so the server's 408 arrives first.
pub const CLIENT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(90);

/// One answer: the HTTP status and the JSON document.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The HTTP status code.
    pub status: u16,
    /// The body, parsed as JSON (`Null` for an empty body).
    pub body: Value,
}

impl Answer {
    /// The error of an error answer (`{"error": {"kind", "message"}}`): its kind and message.
    pub fn error(&self) -> Option<(ErrorKind, String)> {
        let error = self.body.get("error")?;
        let kind = ErrorKind::from_name(error.get("kind")?.as_str()?)?;
        Some((kind, error.get("message").and_then(Value::as_str).unwrap_or_default().to_owned()))
    }
}

/// A connection to a server (reopened when the server closed it).
///
/// A worker that talks to `manifestdb serve` (or to a [`Server`](super::Server) in the same
/// program, as here) sends the routes of the book's serving chapter (`docs/openapi.json`), one
/// call each; every answer is the JSON document the CLI's `--json` prints for the same verb,
/// and an error answer carries its kind ([`Answer::error`]):
///
/// ```
/// # fn main() -> manifestdb::Result<()> {
/// use std::sync::Arc;
///
/// use manifestdb::server::{Client, Listen, Server, ServerOptions};
/// use manifestdb::{ErrorKind, Store};
/// use serde_json::json;
///
/// let dir = tempfile::tempdir().expect("a temporary directory");
/// let store = Store::open(dir.path().join("store.redb"), dir.path().join("staging"))?;
/// let socket = dir.path().join("manifestdb.sock");
/// let server = Server::start(Arc::new(store), &ServerOptions::unix(&socket))?;
///
/// let mut client = Client::new(Listen::Unix(socket))?;
/// let task = json!({"partition": "region=eu", "expected_rows": 2, "expected_total": null});
/// let declared = client.request(
///     "POST",
///     "/v1/runs/declare",
///     Some(&json!({"dataset": "daily", "run": "r1", "snapshot": "s1", "tasks": [task], "trust_reported_figures": true})),
/// )?;
/// assert_eq!(declared.status, 200, "{}", declared.body);
/// let begun = client.request("POST", "/v1/attempts/begin", Some(&json!({"dataset": "daily", "run": "r1", "partition": "region=eu"})))?;
/// assert_eq!(begun.body["attempt"], 1);
/// assert!(begun.body["staging_dir"].is_string(), "the worker writes its files there");
///
/// // A refusal is an answer with an error kind, not an `Err`.
/// let unknown = client.get("/v1/runs/show", &json!({"dataset": "daily", "run": "r9"}))?;
/// assert_eq!(unknown.status, 404);
/// assert_eq!(unknown.error().map(|(kind, _)| kind), Some(ErrorKind::NotFound));
///
/// Arc::into_inner(server.shutdown()?).expect("the only handle").close()?;
/// # Ok(())
/// # }
/// ```
pub struct Client {
    runtime: tokio::runtime::Runtime,
    target: Listen,
    token: Option<String>,
    timeout: Duration,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("target", &self.target).finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the server at `target` (nothing is connected yet).
    pub fn new(target: Listen) -> Result<Client> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| Error::Io { context: "starting the client's runtime".into(), source })?;
        Ok(Client { runtime, target, token: None, timeout: CLIENT_TIMEOUT_DEFAULT, sender: None })
    }

    /// Sends `Authorization: Bearer TOKEN` with every request.
    pub fn with_token(mut self, token: impl Into<String>) -> Client {
        self.token = Some(token.into());
        self
    }

    /// Waits at most `timeout` for each answer.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// Where the client connects.
    pub fn target(&self) -> &Listen {
        &self.target
    }

    /// Sends one request with a JSON body (or none) and returns the answer, whatever its status.
    /// `path` includes the query string, already encoded.
    ///
    /// Errors: `Error::Io` when the server cannot be reached, closes the connection before
    /// answering, does not answer within the time-out, or answers with something not JSON.
    pub fn request(&mut self, method: &str, path: &str, body: Option<&Value>) -> Result<Answer> {
        let bytes = match body {
            Some(value) => serde_json::to_vec(value).map_err(|e| io_error("encoding the request body", std::io::Error::other(e)))?,
            None => Vec::new(),
        };
        self.request_bytes(method, path, body.map(|_| "application/json"), bytes)
    }

    /// `GET path?query`: the fields of the JSON object `query` as the query string (null fields
    /// left out), the answer whatever its status.
    ///
    /// Errors: `Error::InvalidInput` when `query` is not an object of strings, numbers and
    /// booleans; as [`Client::request`].
    pub fn get(&mut self, path: &str, query: &Value) -> Result<Answer> {
        let fields: Vec<(&str, &Value)> =
            query.as_object().into_iter().flatten().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.as_str(), v)).collect();
        let query = serde_urlencoded::to_string(&fields).map_err(|e| Error::InvalidInput {
            what: "query",
            value: path.into(),
            reason: e.to_string(),
        })?;
        let uri = if query.is_empty() { path.to_owned() } else { format!("{path}?{query}") };
        self.request("GET", &uri, None)
    }

    /// [`Client::request`] with a body of any bytes and content type (for tests of what the
    /// server refuses).
    pub fn request_bytes(&mut self, method: &str, path: &str, content_type: Option<&str>, body: Vec<u8>) -> Result<Answer> {
        let method = hyper::Method::from_bytes(method.as_bytes()).map_err(|e| Error::InvalidInput {
            what: "HTTP method",
            value: method.into(),
            reason: e.to_string(),
        })?;
        let body = Bytes::from(body);
        let token = self.token.clone();
        let content_type = content_type.map(str::to_owned);
        let idempotent = method == hyper::Method::GET;
        // The server checks that a TCP request names it (against DNS rebinding): its address.
        let host = match &self.target {
            Listen::Tcp(addr) => addr.to_string(),
            _ => "localhost".to_owned(),
        };
        let build = move || {
            let mut builder = hyper::Request::builder().method(method.clone()).uri(path).header(hyper::header::HOST, host.as_str());
            if let Some(content_type) = &content_type {
                builder = builder.header(hyper::header::CONTENT_TYPE, content_type);
            }
            if let Some(token) = &token {
                builder = builder.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
            }
            builder.body(Full::new(body.clone())).map_err(|e| Error::InvalidInput {
                what: "request",
                value: path.into(),
                reason: e.to_string(),
            })
        };
        build()?;
        let timeout = self.timeout;
        let target = self.target.clone();
        let mut sender = self.sender.take();
        let (answer, sender) = self.runtime.block_on(async move {
            let exchange = async {
                let mut reused = sender.take().filter(|s| !s.is_closed());
                let (response, fresh) = loop {
                    let was_reused = reused.is_some();
                    let mut fresh = match reused.take() {
                        Some(s) => s,
                        None => connect(&target).await?,
                    };
                    if let Err(e) = fresh.ready().await {
                        if was_reused {
                            continue;
                        }
                        return Err(io_error("waiting for the connection", std::io::Error::other(e)));
                    }
                    match fresh.try_send_request(build()?).await {
                        Ok(response) => break (response, fresh),
                        // A kept-alive connection the server had closed (its idle time-out):
                        // a request that did not go out, or a read, goes again on a fresh
                        // connection; a write that may have arrived is the caller's to retry.
                        Err(e) if was_reused && (e.message().is_some() || idempotent) => {}
                        Err(e) => return Err(io_error("sending the request", std::io::Error::other(e.into_error()))),
                    }
                };
                let status = response.status().as_u16();
                let bytes =
                    response.into_body().collect().await.map_err(|e| io_error("reading the answer", std::io::Error::other(e)))?.to_bytes();
                let body = if bytes.is_empty() {
                    Value::Null
                } else {
                    serde_json::from_slice(&bytes).map_err(|e| {
                        io_error("reading the answer", std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not JSON: {e}")))
                    })?
                };
                Ok::<_, Error>((Answer { status, body }, fresh))
            };
            match tokio::time::timeout(timeout, exchange).await {
                Ok(Ok((answer, sender))) => (Ok(answer), Some(sender)),
                Ok(Err(e)) => (Err(e), None),
                Err(_) => (Err(io_error("waiting for the answer", std::io::Error::from(std::io::ErrorKind::TimedOut))), None),
            }
        });
        self.sender = sender;
        answer
    }
}

fn io_error(context: &str, source: std::io::Error) -> Error {
    Error::Io { context: format!("server request: {context}"), source }
}

async fn connect(target: &Listen) -> Result<SendRequest<Full<Bytes>>> {
    let context = format!("connecting to the server at {target}");
    let sender = match target {
        Listen::Unix(path) => {
            let stream = tokio::net::UnixStream::connect(path).await.map_err(|source| Error::Io { context: context.clone(), source })?;
            handshake(stream, &context).await?
        }
        Listen::Tcp(addr) => {
            let stream = tokio::net::TcpStream::connect(addr).await.map_err(|source| Error::Io { context: context.clone(), source })?;
            let _ = stream.set_nodelay(true);
            handshake(stream, &context).await?
        }
    };
    Ok(sender)
}

async fn handshake<S>(stream: S, context: &str) -> Result<SendRequest<Full<Bytes>>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Error::Io { context: context.to_owned(), source: std::io::Error::other(e) })?;
    // The connection drives itself on the client's runtime while requests are in flight.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// Parses a server address as the tool's `--server` takes it: `unix:PATH`, a path starting with
/// `/` or `.`, or `http://HOST:PORT` (HOST an IP address).
pub fn parse_target(text: &str) -> Result<Listen> {
    let invalid = |reason: &str| Error::InvalidInput { what: "server address", value: text.to_owned(), reason: reason.to_owned() };
    if let Some(path) = text.strip_prefix("unix:") {
        return Ok(Listen::Unix(PathBuf::from(path)));
    }
    if text.starts_with('/') || text.starts_with('.') {
        return Ok(Listen::Unix(PathBuf::from(text)));
    }
    let Some(rest) = text.strip_prefix("http://") else {
        return Err(invalid("expected unix:PATH or http://HOST:PORT"));
    };
    let authority = rest.trim_end_matches('/');
    let addr: SocketAddr = authority.parse().map_err(|_| invalid("expected http://IP:PORT (an IP address and a port)"))?;
    Ok(Listen::Tcp(addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_parse() {
        assert_eq!(parse_target("unix:/a/b.sock").unwrap(), Listen::Unix("/a/b.sock".into()));
        assert_eq!(parse_target("./b.sock").unwrap(), Listen::Unix("./b.sock".into()));
        assert_eq!(parse_target("http://127.0.0.1:7070").unwrap(), Listen::Tcp("127.0.0.1:7070".parse().unwrap()));
        assert_eq!(parse_target("http://[::1]:7070/").unwrap(), Listen::Tcp("[::1]:7070".parse().unwrap()));
        assert!(parse_target("https://x:1").is_err());
        assert!(parse_target("http://localhost").is_err());
    }
}

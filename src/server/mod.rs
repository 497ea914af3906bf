//! The HTTP server over a [`Store`] (cargo feature `server`): many worker processes, in any
//! language, drive one store at once.
//!
//! A scheduler that embeds [`Store`] holds its only write handle; [`Server::start`] serves that
//! same handle to the scheduler's workers over HTTP/1.1 with JSON bodies (the routes are listed
//! in `docs/openapi.json`, and every response document has the shape the command-line tool
//! prints with `--json`). Each request runs its store call on tokio's blocking pool, so
//! concurrent requests join the store's group commit and share fsyncs.
//!
//! Who may connect:
//! - by default the server listens on a Unix socket inside the store's directory
//!   ([`socket_path`]), created with mode `0600` (or `0660` with
//!   [`ServerOptions::socket_group_access`]) before it is given its name, so no other user can
//!   connect at any moment;
//! - TCP is opt-in ([`Listen::Tcp`]); an address that is not a loopback address requires a
//!   bearer token ([`ServerOptions::token_file`]), compared in constant time; a request without
//!   the right token gets 401. A TCP request must name this server as its `Host` (a loopback
//!   address, `localhost`, the listening address or one of [`ServerOptions::host_names`]), or
//!   it gets 421: a web page cannot drive a loopback server through DNS rebinding.
//!
//! Every error is a JSON document `{"error": {"exit_code", "kind", "message"}}` with the exit
//! code and kind the command-line tool uses for the same error ([`crate::ErrorKind`]): 4xx for the
//! caller's mistakes, 404 for something named that does not exist, 409 for conflicts with the
//! store's state, 503 while the store handle is poisoned. That holds for the answers hyper
//! writes before any route runs too (a request that is not HTTP/1.1, a bad `Content-Length`,
//! 414 for a URL and 431 for headers over its limits). Bodies are limited in size
//! ([`ServerOptions::body_limit_bytes`]; a larger declared `Content-Length` is refused at once);
//! JSON bodies naming a key twice are refused; a request must arrive within
//! [`ServerOptions::request_timeout`] and a connection's next request head within
//! [`ServerOptions::idle_timeout`], or the connection is closed. An error answer to a request
//! with a body says `Connection: close` (its body may be unread) and the connection closes.
//!
//! ```no_run
//! use std::sync::Arc;
//! use manifestdb::Store;
//! use manifestdb::server::{Server, ServerOptions, socket_path};
//!
//! # fn main() -> Result<(), manifestdb::Error> {
//! let store = Arc::new(Store::open("/srv/jobs/store.redb", "/srv/jobs/staging")?);
//! let server = Server::start(Arc::clone(&store), &ServerOptions::unix(socket_path("/srv/jobs/store.redb".as_ref())))?;
//! // ... the scheduler runs its workers, which connect to /srv/jobs/manifestdb.sock ...
//! server.shutdown()?;
//! # Ok(())
//! # }
//! ```

mod bare;
mod client;
mod kind;
mod listen;
mod routes;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use client::{Answer, CLIENT_TIMEOUT_DEFAULT, Client, parse_target};
pub use listen::read_token_file;
pub use routes::ROUTES;

use crate::{Error, Result, Store};

/// The name of the server's Unix socket in the store's directory.
pub const SOCKET_FILE: &str = "manifestdb.sock";

/// The default limit on a request body: 4 MiB (a run declaration of tens of thousands of tasks
/// fits; anything larger is refused with 413 before it is parsed).
pub const BODY_LIMIT_BYTES_DEFAULT: usize = 4 << 20;

/// The default time a whole request (head and body) may take to arrive and be answered: 60 s.
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);

/// The default time a connection may wait for (the rest of) its next request head: 30 s.
pub const IDLE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// The default limit on open connections; further clients wait in the listen backlog.
pub const CONNECTIONS_MAX_DEFAULT: usize = 1024;

/// The server's socket for the store file at `store_path`: [`SOCKET_FILE`] in the same
/// directory. The command-line tool looks for a running server there.
pub fn socket_path(store_path: &Path) -> PathBuf {
    store_path.parent().unwrap_or_else(|| Path::new(".")).join(SOCKET_FILE)
}

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Listen {
    /// A Unix socket at this path (created by the server; a stale socket left by a crashed
    /// server is replaced, anything else at the path is refused).
    Unix(PathBuf),
    /// A TCP address. Port 0 picks a free port ([`Server::address`] tells which). A
    /// non-loopback address requires [`ServerOptions::token_file`].
    Tcp(SocketAddr),
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
            Listen::Tcp(addr) => write!(f, "http://{addr}"),
        }
    }
}

/// How the server listens and what it accepts.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerOptions {
    /// Where to listen.
    pub listen: Listen,
    /// Create the Unix socket with mode `0660` (the store owner's group may connect) instead of
    /// `0600` (only the owner). Ignored for TCP.
    pub socket_group_access: bool,
    /// A file holding the bearer token every request must carry (`Authorization: Bearer
    /// TOKEN`); surrounding whitespace is ignored, an empty token is refused. Required for a
    /// non-loopback TCP address; optional otherwise.
    pub token_file: Option<PathBuf>,
    /// The largest request body accepted, in bytes; a larger one gets 413.
    pub body_limit_bytes: usize,
    /// How long a request may take from its head's arrival to its answer; a slower one gets
    /// 408 (a store call already running completes, and its outcome is in the store).
    pub request_timeout: Duration,
    /// How long a connection may take to send its next request head; then it is closed.
    pub idle_timeout: Duration,
    /// The most connections served at once.
    pub connections_max: usize,
    /// Names a request to a TCP server may give as its `Host`, besides a loopback address,
    /// `localhost` and the address it listens on (e.g. the host's DNS name, for clients that
    /// connect by name). Any other `Host` is refused with 421, so that a web page whose name
    /// was pointed at this address (DNS rebinding) cannot drive the server. Ignored for a Unix
    /// socket, which no browser reaches.
    pub host_names: Vec<String>,
}

impl ServerOptions {
    /// A Unix socket at `path`, mode `0600`, no token, default limits.
    pub fn unix(path: impl Into<PathBuf>) -> ServerOptions {
        ServerOptions::with_listen(Listen::Unix(path.into()))
    }

    /// TCP at `addr`, no token (allowed only for a loopback address), default limits.
    pub fn tcp(addr: SocketAddr) -> ServerOptions {
        ServerOptions::with_listen(Listen::Tcp(addr))
    }

    fn with_listen(listen: Listen) -> ServerOptions {
        ServerOptions {
            listen,
            socket_group_access: false,
            token_file: None,
            body_limit_bytes: BODY_LIMIT_BYTES_DEFAULT,
            request_timeout: REQUEST_TIMEOUT_DEFAULT,
            idle_timeout: IDLE_TIMEOUT_DEFAULT,
            connections_max: CONNECTIONS_MAX_DEFAULT,
            host_names: Vec::new(),
        }
    }
}

/// A running server: its runtime, its listener, and the store it serves. Dropping it shuts it
/// down as [`Server::shutdown`] does, ignoring errors.
pub struct Server {
    store: routes::Served,
    runtime: Option<tokio::runtime::Runtime>,
    address: Listen,
    shutdown: tokio::sync::watch::Sender<bool>,
    accept_loop: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("address", &self.address).finish_non_exhaustive()
    }
}

impl Server {
    /// Starts serving `store` as `options` say, on a runtime of its own (two worker threads for
    /// connections, store calls on its blocking pool), and returns once the listener is bound.
    ///
    /// Errors: `Error::InvalidInput` for a non-loopback TCP address without a token, an empty
    /// token, or a path that holds something other than a stale socket; `Error::Io` when the
    /// token cannot be read or the listener cannot be bound.
    pub fn start(store: Arc<Store>, options: &ServerOptions) -> Result<Server> {
        let token = match &options.token_file {
            Some(path) => Some(listen::read_token_file(path)?),
            None => None,
        };
        if let Listen::Tcp(addr) = &options.listen
            && !addr.ip().is_loopback()
            && token.is_none()
        {
            return Err(Error::InvalidInput {
                what: "listen address",
                value: addr.to_string(),
                reason: "a non-loopback TCP address requires a bearer token (a token file)".into(),
            });
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(512)
            .thread_name("manifestdb-server")
            .enable_all()
            .build()
            .map_err(|source| Error::Io { context: "starting the server's runtime".into(), source })?;
        let listener = runtime.block_on(listen::bind(&options.listen, options.socket_group_access))?;
        let address = listener.address();
        let store: routes::Served = Arc::new(parking_lot::RwLock::new(store));
        let hosts = match &address {
            Listen::Tcp(addr) => Some(routes::Hosts {
                listen: addr.ip(),
                names: options.host_names.iter().map(|name| name.trim_end_matches('.').to_ascii_lowercase()).collect(),
            }),
            Listen::Unix(_) => None,
        };
        let gate = routes::Gate { token, hosts, body_limit_bytes: options.body_limit_bytes, request_timeout: options.request_timeout };
        let app = routes::router(routes::AppState::new(Arc::clone(&store)), gate);
        let (shutdown, watch) = tokio::sync::watch::channel(false);
        let accept_loop = runtime.spawn(listen::accept_loop(listener, app, watch, options.idle_timeout, options.connections_max.max(1)));
        tracing::info!(address = %address, "serving the store");
        Ok(Server { store, runtime: Some(runtime), address, shutdown, accept_loop: Some(accept_loop) })
    }

    /// Where the server listens (a TCP port 0 resolved to the bound port).
    pub fn address(&self) -> &Listen {
        &self.address
    }

    /// Blocks until SIGINT or SIGTERM arrives, then shuts down as [`Server::shutdown`] does and
    /// gives back the store handle it served.
    pub fn run_until_signalled(self) -> Result<Arc<Store>> {
        if let Some(runtime) = &self.runtime {
            runtime.block_on(async {
                use tokio::signal::unix::{SignalKind, signal};
                let mut term = signal(SignalKind::terminate())
                    .map_err(|source| Error::Io { context: "waiting for SIGTERM".into(), source })?;
                tokio::select! {
                    _ = term.recv() => {}
                    result = tokio::signal::ctrl_c() => result.map_err(|source| Error::Io { context: "waiting for SIGINT".into(), source })?,
                }
                Ok::<(), Error>(())
            })?;
        }
        self.shutdown()
    }

    /// Stops accepting, lets the requests in flight finish (their store calls complete), closes
    /// every connection and removes the Unix socket. The store stays open: it belongs to the
    /// caller, and this gives back the handle the server held (the only one left if the caller
    /// passed its only one to [`Server::start`], so it can be closed).
    ///
    /// `verify` with redb's integrity check (`POST /v1/verify`) needs the handle alone: it runs
    /// only when the caller passed its only handle; otherwise its report says it was skipped.
    pub fn shutdown(mut self) -> Result<Arc<Store>> {
        self.stop()?;
        Ok(Arc::clone(&self.store.read()))
    }

    fn stop(&mut self) -> Result<()> {
        let _ = self.shutdown.send(true);
        if let (Some(runtime), Some(accept_loop)) = (self.runtime.take(), self.accept_loop.take()) {
            // The accept loop returns once every connection it served has closed.
            let _ = runtime.block_on(accept_loop);
            runtime.shutdown_timeout(Duration::from_secs(5));
        }
        if let Listen::Unix(path) = &self.address {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(Error::Io { context: format!("removing the server's socket {}", path.display()), source }),
            }
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.runtime.is_some() {
            let _ = self.stop();
        }
    }
}

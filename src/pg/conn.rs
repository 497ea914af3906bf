//! One connection to the server, with a deadline on every round trip.
//!
//! The client is `tokio_postgres` on one small runtime shared by every connection of the
//! process; each call blocks its thread on the runtime until the server answered or the
//! deadline passed. The deadline is what a stuck network needs: a middlebox (a proxy, a NAT, a
//! load balancer) that stops forwarding but keeps both TCP connections open ACKs every byte and
//! every keepalive probe, so neither TCP keepalives nor the TCP user time-out ever fire, and a
//! call without a deadline would wait forever. Past [`ROUND_TRIP_MAX`] without an answer (for a
//! scan: without its next row), the connection is closed (its task aborted, so its socket is
//! closed) and the call fails as a lost connection ([`PgError::Stalled`]): the runner then
//! reconnects, or settles a COMMIT whose answer never came.

use std::sync::OnceLock;
use std::time::Duration;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{NoTls, Row, SimpleQueryMessage};

/// How long one round trip (a statement, the next row of a scan, a connection's startup) may
/// go unanswered before the connection is treated as lost: 30 seconds. A statement of this
/// layer that waits longer is one waiting for a row lock that a transaction stuck on a lost
/// network holds; ending it is what lets the store go on.
pub(crate) const ROUND_TRIP_MAX: Duration = Duration::from_secs(30);

/// The runtime every connection's socket is driven on: two worker threads (the calls
/// themselves block their own threads, not the workers).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("manifestdb-pg")
            .enable_all()
            .build()
            // Building a runtime fails only if the OS refuses threads or an epoll instance, at
            // the very first PostgreSQL connection of the process: nothing can go on then.
            .unwrap_or_else(|e| panic!("cannot start the PostgreSQL client's runtime: {e}"))
    })
}

/// An error of one call: the server's or the client's, or no answer in time.
#[derive(Debug)]
pub(crate) enum PgError {
    /// The server's error (with its SQLSTATE) or the client's (a closed connection, I/O).
    Client(tokio_postgres::Error),
    /// No answer within [`ROUND_TRIP_MAX`]: the connection was closed.
    Stalled {
        /// What was waited for.
        waiting_for: &'static str,
    },
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> PgError {
        PgError::Client(e)
    }
}

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PgError::Client(e) => std::fmt::Display::fmt(e, f),
            PgError::Stalled { waiting_for } => {
                write!(f, "no answer from the server to {waiting_for} in time: the connection was closed as lost")
            }
        }
    }
}

/// Blocks on `fut` for at most `deadline`; past it, closes the connection (aborts the
/// task driving its socket) and fails as [`PgError::Stalled`].
fn wait<T>(
    deadline: Duration,
    stalled: &mut bool,
    task: &tokio::task::JoinHandle<()>,
    waiting_for: &'static str,
    fut: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, PgError> {
    if *stalled {
        return Err(PgError::Stalled { waiting_for });
    }
    match runtime().block_on(async { tokio::time::timeout(deadline, fut).await }) {
        Ok(result) => Ok(result?),
        Err(_) => {
            *stalled = true;
            task.abort();
            Err(PgError::Stalled { waiting_for })
        }
    }
}

/// One connection.
pub(crate) struct Conn {
    client: tokio_postgres::Client,
    /// [`ROUND_TRIP_MAX`], shorter in tests.
    deadline: Duration,
    /// The task driving the socket; aborted (closing the socket) when a call stalls or the
    /// connection is dropped.
    task: tokio::task::JoinHandle<()>,
    stalled: bool,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Conn {
    /// Connects, startup and authentication included, within [`ROUND_TRIP_MAX`].
    pub(crate) fn connect(config: &tokio_postgres::Config) -> Result<Conn, PgError> {
        Conn::connect_within(config, ROUND_TRIP_MAX)
    }

    /// Connects with `deadline` for every round trip instead of [`ROUND_TRIP_MAX`].
    pub(crate) fn connect_within(config: &tokio_postgres::Config, deadline: Duration) -> Result<Conn, PgError> {
        let rt = runtime();
        let connected = rt.block_on(async { tokio::time::timeout(deadline, config.connect(NoTls)).await });
        let (client, connection) = match connected {
            Ok(result) => result?,
            Err(_) => return Err(PgError::Stalled { waiting_for: "a new connection" }),
        };
        let task = rt.spawn(async move {
            // The connection's own error also fails the next call on its client, which is
            // where it is reported.
            let _ = connection.await;
        });
        Ok(Conn { client, deadline, task, stalled: false })
    }

    /// Whether the connection is gone (closed by the server, the network, or a stalled call).
    pub(crate) fn is_closed(&self) -> bool {
        self.stalled || self.client.is_closed()
    }

    /// Runs a statement with typed parameters (one round trip) and returns its rows.
    pub(crate) fn query(&mut self, sql: &str, params: &[(&(dyn ToSql + Sync), Type)]) -> Result<Vec<Row>, PgError> {
        let Conn { client, deadline, task, stalled } = self;
        wait(*deadline, stalled, task, "a statement", client.query_typed(sql, params))
    }

    /// Runs a statement with typed parameters and returns how many rows it changed.
    pub(crate) fn execute(&mut self, sql: &str, params: &[(&(dyn ToSql + Sync), Type)]) -> Result<u64, PgError> {
        let Conn { client, deadline, task, stalled } = self;
        wait(*deadline, stalled, task, "a statement", client.execute_typed(sql, params))
    }

    /// Runs statements without parameters (the simple query protocol) and returns their rows.
    pub(crate) fn simple(&mut self, sql: &str) -> Result<Vec<SimpleQueryMessage>, PgError> {
        let Conn { client, deadline, task, stalled } = self;
        wait(*deadline, stalled, task, "a statement", client.simple_query(sql))
    }

    /// Runs statements without parameters and without rows (`BEGIN`, `COMMIT`, DDL).
    pub(crate) fn batch(&mut self, sql: &str, waiting_for: &'static str) -> Result<(), PgError> {
        let Conn { client, deadline, task, stalled } = self;
        wait(*deadline, stalled, task, waiting_for, client.batch_execute(sql))
    }

    /// Runs a statement and hands its rows to `visit` as they arrive, until it returns
    /// `false`; the deadline applies to each row.
    pub(crate) fn scan(
        &mut self,
        sql: &str,
        params: Vec<(&(dyn ToSql + Sync), Type)>,
        mut visit: impl FnMut(&Row) -> bool,
    ) -> Result<(), PgError> {
        use futures_util::StreamExt;
        if self.stalled {
            return Err(PgError::Stalled { waiting_for: "a scan" });
        }
        let (client, deadline) = (&self.client, self.deadline);
        let outcome = runtime().block_on(async {
            let stream = match tokio::time::timeout(deadline, client.query_typed_raw(sql, params)).await {
                Ok(stream) => stream?,
                Err(_) => return Ok(false),
            };
            let mut stream = std::pin::pin!(stream);
            loop {
                match tokio::time::timeout(deadline, stream.next()).await {
                    Err(_) => return Ok(false),
                    Ok(None) => return Ok(true),
                    Ok(Some(row)) => {
                        if !visit(&row?) {
                            return Ok(true);
                        }
                    }
                }
            }
        });
        match outcome {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.stalled = true;
                self.task.abort();
                Err(PgError::Stalled { waiting_for: "a scan" })
            }
            Err(e) => Err(PgError::Client(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_accepts_and_never_answers_fails_the_call_in_time_instead_of_hanging() {
        // A peer that takes the connection and then says nothing (a stuck middlebox).
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        let holder = std::thread::spawn(move || {
            let (socket, _) = listener.accept().expect("accept");
            std::thread::sleep(Duration::from_secs(3));
            drop(socket);
        });
        let mut config = tokio_postgres::Config::new();
        config.host("127.0.0.1").port(port).user("nobody");
        let started = std::time::Instant::now();
        let err = Conn::connect_within(&config, Duration::from_millis(500)).err().expect("no answer, no connection");
        assert!(matches!(err, PgError::Stalled { .. }), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(2), "the deadline ended the wait: {:?}", started.elapsed());
        holder.join().expect("holder");
    }
}

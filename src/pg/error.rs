//! PostgreSQL's errors as the opaque [`StorageError`]: the one place that knows which
//! PostgreSQL error is which kind of failure, and which ones the layer retries.

use tokio_postgres::error::SqlState;

use super::conn::PgError;
use crate::error::{Error, StorageError, StorageErrorKind};

/// What the transaction runner does after an error of the server or the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// A serialization failure or a deadlock (SQLSTATE 40001, 40P01), or a pointer that moved
    /// under the transaction: nothing of the transaction was committed; run the whole
    /// operation again on a fresh snapshot.
    Rerun,
    /// The connection is gone (closed, reset, the server restarting or shutting down): nothing
    /// of a transaction that had not sent its COMMIT was committed; run it again on a new
    /// connection. After a COMMIT was sent, the outcome must be settled first (`settle.rs`).
    Reconnect,
    /// Anything else: the error is the operation's answer.
    No,
}

/// Classifies an error of the PostgreSQL client.
pub(crate) fn retry_of(err: &PgError) -> Retry {
    let err = match err {
        PgError::Stalled { .. } => return Retry::Reconnect,
        PgError::Client(err) => err,
    };
    if err.is_closed() {
        return Retry::Reconnect;
    }
    match err.code() {
        Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED => Retry::Rerun,
        Some(code) if connection_lost(code) => Retry::Reconnect,
        Some(_) => Retry::No,
        // No SQLSTATE: the error is the client's own: an I/O error on the socket, a protocol
        // error, a connection that could not be made. Each of these ends the connection.
        None => Retry::Reconnect,
    }
}

/// Connection exceptions (class 08) and the server going away (57P01 admin shutdown,
/// 57P02 crash shutdown, 57P03 cannot connect now: starting up or in recovery).
fn connection_lost(code: &SqlState) -> bool {
    code.code().starts_with("08")
        || *code == SqlState::ADMIN_SHUTDOWN
        || *code == SqlState::CRASH_SHUTDOWN
        || *code == SqlState::CANNOT_CONNECT_NOW
}

/// Classifies an error of the PostgreSQL client into a storage error kind.
///
/// - a call that got no answer in time ([`PgError::Stalled`]) is [`StorageErrorKind::Io`];
/// - serialization failures and deadlocks are [`StorageErrorKind::Conflict`] (only seen by a
///   caller once the bounded retries ran out);
/// - connection loss, the server shutting down or starting, a full disk, memory exhaustion
///   and the client's own I/O errors are [`StorageErrorKind::Io`];
/// - too many connections and a lock that could not be had are [`StorageErrorKind::Busy`];
/// - `XX001`/`XX002` (the server's data or index corruption) and a table or column of the
///   schema that is missing (after the migrations made it) are [`StorageErrorKind::Corrupt`];
/// - a database that does not exist, a bad password and everything else are
///   [`StorageErrorKind::Other`], with the server's message.
fn kind_of(err: &PgError) -> StorageErrorKind {
    use StorageErrorKind as K;
    let err = match err {
        PgError::Stalled { .. } => return K::Io,
        PgError::Client(err) => err,
    };
    if err.is_closed() {
        return K::Io;
    }
    let Some(code) = err.code() else { return K::Io };
    if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED {
        K::Conflict
    } else if connection_lost(code)
        || *code == SqlState::DISK_FULL
        || *code == SqlState::OUT_OF_MEMORY
        || code.code().starts_with("58")
        || *code == SqlState::INSUFFICIENT_RESOURCES
    {
        K::Io
    } else if *code == SqlState::TOO_MANY_CONNECTIONS || *code == SqlState::LOCK_NOT_AVAILABLE {
        K::Busy
    } else if *code == SqlState::DATA_CORRUPTED
        || *code == SqlState::INDEX_CORRUPTED
        || *code == SqlState::UNDEFINED_TABLE
        || *code == SqlState::UNDEFINED_COLUMN
    {
        K::Corrupt
    } else {
        K::Other
    }
}

/// The error's text: the server's message with its SQLSTATE, or the client's.
fn message_of(err: &PgError) -> String {
    let err = match err {
        PgError::Stalled { .. } => return format!("PostgreSQL connection: {err}"),
        PgError::Client(err) => err,
    };
    match err.as_db_error() {
        Some(db) => {
            let mut message = format!("PostgreSQL error {}: {}", db.code().code(), db.message());
            if let Some(detail) = db.detail() {
                message.push_str(&format!(" ({detail})"));
            }
            message
        }
        None => {
            // The client's text names the step ("error connecting to server"); its causes say
            // why ("Connection refused (os error 111)"), and are kept.
            let mut message = format!("PostgreSQL connection: {err}");
            let mut source = std::error::Error::source(err);
            while let Some(cause) = source {
                let text = cause.to_string();
                if !message.contains(&text) {
                    message.push_str(": ");
                    message.push_str(&text);
                }
                source = cause.source();
            }
            message
        }
    }
}

/// The operating system's error behind a client error, if any.
fn io_of(err: &PgError) -> Option<std::io::Error> {
    let PgError::Client(err) = err else { return None };
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            return Some(std::io::Error::new(io.kind(), io.to_string()));
        }
        source = inner.source();
    }
    None
}

/// A client error as a storage error.
pub(crate) fn storage_error(err: &PgError) -> StorageError {
    StorageError::new(kind_of(err), message_of(err), io_of(err))
}

impl Error {
    /// A PostgreSQL error while doing `context`.
    pub(crate) fn postgres(context: &'static str, err: &PgError) -> Self {
        Error::Storage { context, source: storage_error(err) }
    }

    /// A storage error of `kind` this layer raises itself while doing `context`.
    pub(crate) fn postgres_layer(context: &'static str, kind: StorageErrorKind, message: impl Into<String>) -> Self {
        Error::Storage { context, source: StorageError::new(kind, message.into(), None) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_that_cannot_be_made_is_an_io_error_to_reconnect() {
        // Nothing listens on port 1 of the loopback address.
        let mut config = tokio_postgres::Config::new();
        config.host("127.0.0.1").port(1).user("nobody").connect_timeout(std::time::Duration::from_secs(2));
        let err = super::super::conn::Conn::connect(&config).err().expect("nothing listens on port 1");
        assert_eq!(retry_of(&err), Retry::Reconnect);
        let storage = storage_error(&err);
        assert_eq!(storage.kind(), StorageErrorKind::Io);
        let io = std::error::Error::source(&storage).and_then(|e| e.downcast_ref::<std::io::Error>()).map(std::io::Error::kind);
        assert_eq!(io, Some(std::io::ErrorKind::ConnectionRefused), "the OS error stays reachable as the source");
        let message = message_of(&err);
        assert!(message.contains("error connecting to server: Connection refused"), "the message keeps the cause: {message}");
        assert_eq!(Error::postgres("opening", &err).kind(), crate::ErrorKind::Fault);
        let stalled = PgError::Stalled { waiting_for: "a statement" };
        assert_eq!(retry_of(&stalled), Retry::Reconnect, "a call without an answer in time is a lost connection");
        assert_eq!(storage_error(&stalled).kind(), StorageErrorKind::Io);
    }
}

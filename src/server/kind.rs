//! What kind of failure an [`Error`] is, for a caller that is not Rust: the command-line tool's
//! exit code and kind name, and the server's HTTP status. One table, used by both.

use crate::Error;

/// The kind of a failure, as the command-line tool's exit codes and the server's error
/// documents name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A fault: I/O or storage failure, anything unexpected (exit 1, HTTP 500; 503 while the
    /// store handle is poisoned).
    Fault,
    /// The call is wrong: a bad name or path, a malformed body (exit 2, HTTP 400, or 413/415/408
    /// for a body too large, of the wrong type, or too slow).
    Usage,
    /// Something named does not exist (exit 4, HTTP 404).
    NotFound,
    /// The store's state forbids the operation (exit 5, HTTP 409).
    Conflict,
    /// Another process holds the store open for writing (exit 6, HTTP 503).
    Busy,
    /// The store is damaged or of an unsupported format (exit 7, HTTP 500).
    Corrupt,
    /// The request lacks the right bearer token (HTTP 401; the tool has no exit code of its
    /// own for it and exits 1).
    Unauthorized,
}

impl ErrorKind {
    /// The kind of a library error.
    pub fn of(err: &Error) -> ErrorKind {
        match err.kind() {
            crate::ErrorKind::Usage => ErrorKind::Usage,
            crate::ErrorKind::NotFound => ErrorKind::NotFound,
            crate::ErrorKind::Conflict => ErrorKind::Conflict,
            crate::ErrorKind::Busy => ErrorKind::Busy,
            crate::ErrorKind::Corrupt => ErrorKind::Corrupt,
            crate::ErrorKind::Fault => ErrorKind::Fault,
        }
    }

    /// The command-line tool's exit code for this kind.
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorKind::Fault | ErrorKind::Unauthorized => 1,
            ErrorKind::Usage => 2,
            ErrorKind::NotFound => 4,
            ErrorKind::Conflict => 5,
            ErrorKind::Busy => 6,
            ErrorKind::Corrupt => 7,
        }
    }

    /// The stable name used in JSON error documents (`"kind"`).
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Fault => "fault",
            ErrorKind::Usage => "usage",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Busy => "busy",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Unauthorized => "unauthorized",
        }
    }

    /// The kind named `name` in a JSON error document, if it is one of these.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        [
            ErrorKind::Fault,
            ErrorKind::Usage,
            ErrorKind::NotFound,
            ErrorKind::Conflict,
            ErrorKind::Busy,
            ErrorKind::Corrupt,
            ErrorKind::Unauthorized,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }

    /// The HTTP status the server answers with for a library error of this kind.
    pub(crate) fn status(self, err: Option<&Error>) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        if matches!(err, Some(Error::Poisoned { .. })) {
            return StatusCode::SERVICE_UNAVAILABLE;
        }
        match self {
            ErrorKind::Fault | ErrorKind::Corrupt => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorKind::Usage => StatusCode::BAD_REQUEST,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::Busy => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
        }
    }
}

//! The HTTP status of an error kind. The kind itself ([`ErrorKind`], with the command-line
//! tool's exit code and the JSON name) is the library's, one table for both.

use crate::{Error, ErrorKind};

/// The HTTP status the server answers with for an error of `kind` (the library's `err`, if any).
pub(crate) fn status(kind: ErrorKind, err: Option<&Error>) -> axum::http::StatusCode {
    use axum::http::StatusCode;
    if matches!(err, Some(Error::Poisoned { .. })) {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    match kind {
        ErrorKind::Fault | ErrorKind::Corrupt => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::Usage => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Busy => StatusCode::SERVICE_UNAVAILABLE,
        // The store's database did not answer in time: the gateway's time-out status.
        ErrorKind::OutcomeUnknown => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
    }
}

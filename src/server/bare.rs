//! The answers hyper writes by itself, given the documented JSON error body.
//!
//! hyper answers a request it cannot parse (a garbage request line, HTTP/0.9, a bad or
//! doubled `Content-Length`, a URL or headers over its limits) before any route runs, with a
//! bare head: `HTTP/1.1 400 Bad Request`, `414 URI Too Long` or `431 Request Header Fields Too
//! Large`, `content-length: 0` and no body; then it closes the connection. It offers no hook for
//! that answer, so [`JsonErrors`] wraps the connection's stream and replaces such a head on its
//! way out with the same status carrying `{"error": {"exit_code", "kind", "message"}}` and
//! `Connection: close`. Every answer the routes write carries `Content-Type: application/json`,
//! so a response head without a `Content-Type` can only be one of hyper's own.
//!
//! The stream reports itself as not vectored, so hyper hands it each response flattened into
//! one buffer, head first: a head is recognised where a write starts.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::ErrorKind;

/// The longest head of one of hyper's bare answers (status line, `content-length: 0`, `date`).
const BARE_HEAD_BYTES_MAX: usize = 256;

/// A connection's stream whose bare error answers from hyper become JSON error documents.
pub(super) struct JsonErrors<S> {
    inner: S,
    /// Bytes of a replaced answer not yet written.
    pending: Vec<u8>,
    written: usize,
}

impl<S> JsonErrors<S> {
    pub(super) fn new(inner: S) -> JsonErrors<S> {
        JsonErrors { inner, pending: Vec::new(), written: 0 }
    }
}

/// The JSON answer replacing `head` if it is one of hyper's bare error heads.
pub(super) fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    if head.len() > BARE_HEAD_BYTES_MAX || !head.starts_with(b"HTTP/1.1 ") || !head.ends_with(b"\r\n\r\n") {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let status: u16 = lines.next()?.get(9..12)?.parse().ok()?;
    let mut bare_body = false;
    for line in lines.filter(|line| !line.is_empty()) {
        let (name, value) = line.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-type" => return None,
            "content-length" if value.trim() == "0" => bare_body = true,
            "content-length" => return None,
            _ => {}
        }
    }
    if !bare_body {
        return None;
    }
    let (reason, message) = match status {
        400 => (
            "Bad Request",
            "the request is not valid HTTP/1.1: its request line, a header or its Content-Length is malformed (or repeated)",
        ),
        414 => ("URI Too Long", "the request's URL is longer than the server reads"),
        431 => ("Request Header Fields Too Large", "the request's headers are larger than the server reads"),
        _ => return None,
    };
    let kind = ErrorKind::Usage;
    let body = serde_json::json!({ "error": { "exit_code": kind.exit_code(), "kind": kind.name(), "message": message } }).to_string();
    Some(
        format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<S: AsyncWrite + Unpin> JsonErrors<S> {
    /// Writes what is left of a replaced answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonErrors<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonErrors<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if let Some(answer) = replacement(buf) {
            // The whole bare head is taken; the JSON answer goes out in its place, on the
            // flush that follows (hyper flushes every answer).
            self.pending = answer;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::replacement;

    #[test]
    fn only_bare_error_heads_are_replaced() {
        let bare = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: Wed, 02 Dec 2026 10:00:00 GMT\r\n\r\n";
        let answer = String::from_utf8(replacement(bare).expect("replaced")).unwrap();
        assert!(answer.starts_with("HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"), "{answer}");
        assert!(answer.contains("connection: close\r\n"), "{answer}");
        let body: serde_json::Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["error"]["kind"], "usage");
        assert_eq!(body["error"]["exit_code"], 2);
        for status in ["414 URI Too Long", "431 Request Header Fields Too Large"] {
            let head = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
            assert!(replacement(head.as_bytes()).is_some(), "{status}");
        }
        // Answers of the routes (JSON), other statuses, heads with a body, partial heads.
        for kept in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}",
            b"HTTP/1.1 400 Bad Request\r\ncontent-len",
            b"{\"error\": 1}",
        ] {
            assert!(replacement(kept).is_none(), "{}", String::from_utf8_lossy(kept));
        }
    }
}

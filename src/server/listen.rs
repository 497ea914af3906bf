//! The listener: a Unix socket created private before it gets its name, or TCP; the accept
//! loop with hyper's HTTP/1.1 connections, their head time-out and a connection limit.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Semaphore, watch};

use super::Listen;
use super::bare::JsonErrors;
use crate::{Error, Result};

/// The longest token file read (a token is a short secret; anything larger is a wrong file).
const TOKEN_FILE_BYTES_MAX: u64 = 4096;

/// Reads a bearer token file (the server's, or a client's): the file's content without
/// surrounding whitespace, not empty. A file that other users may read or write gets a warning
/// in the log (the token is a secret: `chmod 600` it), not a refusal.
///
/// # Errors
/// `Error::Io` when the file cannot be read; `Error::InvalidInput` for an empty token or a file
/// over 4 KiB.
pub fn read_token_file(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let io = |source| Error::Io { context: format!("reading the token file {}", path.display()), source };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mode = file.metadata().map_err(io)?.permissions().mode();
    if let Some(warning) = token_mode_warning(path, mode) {
        tracing::warn!("{warning}");
    }
    let mut bytes = Vec::new();
    (&mut file).take(TOKEN_FILE_BYTES_MAX + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > TOKEN_FILE_BYTES_MAX {
        return Err(Error::InvalidInput {
            what: "token file",
            value: path.display().to_string(),
            reason: format!("longer than {TOKEN_FILE_BYTES_MAX} bytes"),
        });
    }
    let token = bytes.trim_ascii();
    if token.is_empty() {
        return Err(Error::InvalidInput { what: "token file", value: path.display().to_string(), reason: "the token is empty".into() });
    }
    Ok(token.to_vec())
}

/// The warning for a token file of `mode` that other users may read or write.
fn token_mode_warning(path: &Path, mode: u32) -> Option<String> {
    (mode & 0o077 != 0).then(|| {
        format!(
            "the token file {} may be read or written by other users (mode {:04o}); the token is a secret: chmod 600 it",
            path.display(),
            mode & 0o7777
        )
    })
}

pub(super) enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

impl Listener {
    pub(super) fn address(&self) -> Listen {
        match self {
            Listener::Unix(_, path) => Listen::Unix(path.clone()),
            // A bound TCP listener knows its address; if the kernel cannot say, nothing listens.
            Listener::Tcp(l) => Listen::Tcp(l.local_addr().unwrap_or_else(|_| std::net::SocketAddr::from(([127, 0, 0, 1], 0)))),
        }
    }
}

/// Binds the listener. A Unix socket is bound inside a fresh private directory (mode 0700) next
/// to its final path, given its mode there, and only then renamed into place, so there is no
/// moment at which it exists with the process's umask. A socket already at the path is a stale
/// one (the caller holds the store's only write handle, so no other server of this store runs)
/// and is replaced; anything else there is refused.
pub(super) async fn bind(listen: &Listen, group_access: bool) -> Result<Listener> {
    match listen {
        Listen::Tcp(addr) => {
            let listener = TcpListener::bind(addr).await.map_err(|source| Error::Io { context: format!("listening on {addr}"), source })?;
            Ok(Listener::Tcp(listener))
        }
        Listen::Unix(path) => {
            let io = |context: String| move |source| Error::Io { context, source };
            match std::fs::symlink_metadata(path) {
                Ok(meta) if meta.file_type().is_socket() => {
                    std::fs::remove_file(path).map_err(io(format!("removing the stale socket {}", path.display())))?
                }
                Ok(_) => {
                    return Err(Error::InvalidInput {
                        what: "socket path",
                        value: path.display().to_string(),
                        reason: "something other than a socket is there; remove it or choose another path".into(),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(Error::Io { context: format!("inspecting {}", path.display()), source }),
            }
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or_else(|| Path::new("."));
            let private = parent.join(format!(".manifestdb-sock-{}-{}", std::process::id(), unique()));
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&private)
                .map_err(io(format!("creating the socket's private directory {}", private.display())))?;
            let result = (|| {
                let temporary = private.join("s");
                let listener = UnixListener::bind(&temporary).map_err(io(format!("binding the socket {}", temporary.display())))?;
                let mode = if group_access { 0o660 } else { 0o600 };
                std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(mode))
                    .map_err(io(format!("setting the mode of {}", temporary.display())))?;
                std::fs::rename(&temporary, path).map_err(io(format!("moving the socket to {}", path.display())))?;
                Ok(listener)
            })();
            let _ = std::fs::remove_dir(&private);
            Ok(Listener::Unix(result?, path.clone()))
        }
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

use std::os::unix::fs::DirBuilderExt;

/// Accepts connections until `shutdown` turns true, then waits for every open connection to
/// finish its request in flight and close.
pub(super) async fn accept_loop(
    listener: Listener,
    app: axum::Router,
    mut shutdown: watch::Receiver<bool>,
    idle_timeout: Duration,
    connections_max: usize,
) {
    let permits = Arc::new(Semaphore::new(connections_max));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else { break };
        let accepted = tokio::select! {
            _ = shutdown.changed() => break,
            accepted = accept(&listener) => accepted,
        };
        match accepted {
            Ok(stream) => {
                let app = app.clone();
                let shutdown = shutdown.clone();
                connections.spawn(async move {
                    serve_connection(stream, app, shutdown, idle_timeout).await;
                    drop(permit);
                });
            }
            Err(e) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        // Reap finished connections so the set does not grow with the server's lifetime.
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

enum Stream {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

async fn accept(listener: &Listener) -> std::io::Result<Stream> {
    match listener {
        Listener::Unix(l, _) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
        Listener::Tcp(l) => l.accept().await.map(|(s, _)| {
            let _ = s.set_nodelay(true);
            Stream::Tcp(s)
        }),
    }
}

async fn serve_connection(stream: Stream, app: axum::Router, shutdown: watch::Receiver<bool>, idle_timeout: Duration) {
    // hyper's own answers (to a request it cannot parse) get the JSON error body on their way
    // out (`bare.rs`).
    match stream {
        Stream::Unix(s) => serve_io(TokioIo::new(JsonErrors::new(s)), app, shutdown, idle_timeout).await,
        Stream::Tcp(s) => serve_io(TokioIo::new(JsonErrors::new(s)), app, shutdown, idle_timeout).await,
    }
}

async fn serve_io<I>(io: I, app: axum::Router, mut shutdown: watch::Receiver<bool>, idle_timeout: Duration)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The head time-out covers a connection that sends no (complete) request head, whether it
    // is idle between requests or a slow client: the connection is closed.
    builder.timer(TokioTimer::new()).header_read_timeout(idle_timeout).keep_alive(true);
    let connection = builder.serve_connection(io, TowerToHyperService::new(app));
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        _ = shutdown.changed() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::token_mode_warning;

    #[test]
    fn a_token_file_others_may_read_or_write_is_warned_about() {
        let path = std::path::Path::new("/run/token");
        assert_eq!(token_mode_warning(path, 0o100600), None);
        assert_eq!(token_mode_warning(path, 0o100400), None);
        for mode in [0o100644, 0o100640, 0o100604, 0o100620, 0o100602] {
            let warning = token_mode_warning(path, mode).unwrap_or_else(|| panic!("{mode:o}"));
            assert!(warning.contains("/run/token") && warning.contains("chmod 600"), "{warning}");
        }
    }
}

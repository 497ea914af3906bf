//! A TCP proxy between a coordinator and the PostgreSQL server that can misbehave on cue.
//!
//! It forwards bytes both ways and reads the client's side as PostgreSQL wire protocol messages
//! (the untyped startup packet, SSL/GSS requests, then `type, length, body` frames), so it sees
//! each COMMIT the client sends: a simple query (`'Q'`, what the `postgres` crate's
//! `Transaction::commit` sends) or a parse (`'P'`) whose text is `COMMIT`. Faults, armed with
//! [`Proxy::arm`]:
//!
//! - [`Fault::DropCommitReply`]: the `n`-th COMMIT from now is forwarded, the server's reply to it
//!   is swallowed, and once the reply has come (the server committed) both connections are cut:
//!   the client sees its connection drop during COMMIT.
//! - [`Fault::StallAfterCommit`]: as above, but the connection is left open and silent: nothing is
//!   forwarded either way any more (a network that stopped delivering).
//! - [`Fault::StallNow`]: every connection open now stops forwarding at once, silently (new
//!   connections forward: the path of the connections in use died).
//! - [`Fault::CutSnapshotRead`]: a connection that began a read-only transaction is cut at its
//!   next message (a snapshot's first read).
//!
//! A fault fires once; [`Proxy::disarm`] lets every *new* connection forward normally again
//! (stalled connections stay stalled until the proxy is dropped, which closes them all).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the proxy does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything.
    None,
    /// Swallow the reply to the `n`-th COMMIT from now (1 = the next) and cut the connection.
    DropCommitReply(u64),
    /// Forward the `n`-th COMMIT from now, then stop forwarding on that connection, silently.
    StallAfterCommit(u64),
    /// Stop forwarding on every connection open now, silently.
    StallNow,
    /// Hold every COMMIT (not forwarded, the transaction stays open) until [`Proxy::release`].
    HoldCommits,
    /// Cut the next `n` connections (both sides) when their client sends its first message
    /// after the startup: the connection was made, its first query (an open's read of the
    /// schema version) is lost.
    CutAtFirstQuery(u64),
    /// Cut the next `n` connections (both sides) that opened a read-only transaction (a
    /// snapshot: `BEGIN ... READ ONLY`) when their client sends its next message: the snapshot
    /// was taken, its first read is lost.
    CutSnapshotRead(u64),
}

struct Shared {
    fault: Mutex<Fault>,
    /// Every connection's state, for StallNow.
    conns: Mutex<Vec<Arc<Conn>>>,
    commits_seen: AtomicU64,
    fired: AtomicU64,
    connections: AtomicU64,
    stop: AtomicBool,
    open: Mutex<Vec<TcpStream>>,
    /// COMMITs being held (HoldCommits).
    held: AtomicU64,
}

/// The proxy; listening until dropped.
pub struct Proxy {
    shared: Arc<Shared>,
    port: u16,
}

/// One proxied connection's state shared by its two directions.
struct Conn {
    /// The server's bytes are swallowed from now on.
    swallow_replies: AtomicBool,
    /// Cut both sides once a reply has been swallowed (else stay silent).
    cut_after_reply: AtomicBool,
    /// Nothing is forwarded in either direction any more.
    silent: AtomicBool,
    /// SSL/GSS requests forwarded whose one-byte answer the server has not sent yet.
    untyped_replies: AtomicU64,
}

impl Proxy {
    /// A proxy on a free loopback port forwarding to `upstream` (`host:port`).
    pub fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("address").port();
        let shared = Arc::new(Shared {
            fault: Mutex::new(Fault::None),
            conns: Mutex::new(Vec::new()),
            commits_seen: AtomicU64::new(0),
            fired: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
            held: AtomicU64::new(0),
        });
        let upstream = upstream.to_owned();
        let accept_shared = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accept_shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                accept_shared.connections.fetch_add(1, Ordering::SeqCst);
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut open = accept_shared.open.lock().unwrap();
                    open.push(client.try_clone().expect("clone"));
                    open.push(server.try_clone().expect("clone"));
                }
                let conn = Arc::new(Conn {
                    swallow_replies: AtomicBool::new(false),
                    cut_after_reply: AtomicBool::new(false),
                    silent: AtomicBool::new(false),
                    untyped_replies: AtomicU64::new(0),
                });
                accept_shared.conns.lock().unwrap().push(Arc::clone(&conn));
                let (c2, s2) = (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
                let sh1 = Arc::clone(&accept_shared);
                let (k1, k2) = (Arc::clone(&conn), conn);
                std::thread::spawn(move || client_to_server(client, server, &sh1, &k1));
                std::thread::spawn(move || server_to_client(s2, c2, &k2));
            }
        });
        Proxy { shared, port }
    }

    /// `127.0.0.1:PORT`, for a URL through the proxy.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Arms a fault (replacing one not fired yet).
    pub fn arm(&self, fault: Fault) {
        if fault == Fault::StallNow {
            for conn in self.shared.conns.lock().unwrap().iter() {
                conn.silent.store(true, Ordering::SeqCst);
            }
            self.shared.fired.fetch_add(1, Ordering::SeqCst);
            return;
        }
        *self.shared.fault.lock().unwrap() = fault;
    }

    /// No fault any more; new connections forward normally.
    pub fn disarm(&self) {
        *self.shared.fault.lock().unwrap() = Fault::None;
    }

    /// Lets the held COMMITs through (and holds no more).
    pub fn release(&self) {
        self.disarm();
    }

    /// COMMITs being held now.
    pub fn held(&self) -> u64 {
        self.shared.held.load(Ordering::SeqCst)
    }

    /// How many armed faults fired.
    pub fn fired(&self) -> u64 {
        self.shared.fired.load(Ordering::SeqCst)
    }

    /// COMMITs seen from clients so far.
    pub fn commits_seen(&self) -> u64 {
        self.shared.commits_seen.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    #[allow(dead_code, reason = "diagnostics")]
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Cuts every open connection (both sides).
    pub fn cut_all(&self) {
        for stream in self.shared.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.cut_all();
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect_timeout(&format!("127.0.0.1:{}", self.port).parse().unwrap(), Duration::from_secs(1));
    }
}

fn read_exact(stream: &mut TcpStream, buf: &mut [u8]) -> bool {
    stream.read_exact(buf).is_ok()
}

/// Reads the client's messages one by one and forwards them, watching for COMMIT.
fn client_to_server(mut client: TcpStream, mut server: TcpStream, shared: &Shared, conn: &Conn) {
    // The startup phase: untyped packets (length, then code or protocol version).
    loop {
        let mut len = [0u8; 4];
        if !read_exact(&mut client, &mut len) {
            return;
        }
        let n = u32::from_be_bytes(len) as usize;
        if !(8..=10_000).contains(&n) {
            return;
        }
        let mut body = vec![0u8; n - 4];
        if !read_exact(&mut client, &mut body) {
            return;
        }
        let code = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
        // SSLRequest / GSSENCRequest: the server answers one byte, then the real startup comes.
        let untyped = code == 80_877_103 || code == 80_877_104;
        if untyped {
            conn.untyped_replies.fetch_add(1, Ordering::SeqCst);
        }
        if server.write_all(&len).and_then(|()| server.write_all(&body)).is_err() {
            return;
        }
        if !untyped {
            break;
        }
    }
    let mut first_query = true;
    let mut snapshot_begun = false;
    loop {
        let mut head = [0u8; 5];
        if !read_exact(&mut client, &mut head) {
            let _ = server.shutdown(Shutdown::Write);
            return;
        }
        if std::mem::take(&mut snapshot_begun) {
            let mut fault = shared.fault.lock().unwrap();
            if let Fault::CutSnapshotRead(k) = *fault {
                *fault = if k > 1 { Fault::CutSnapshotRead(k - 1) } else { Fault::None };
                shared.fired.fetch_add(1, Ordering::SeqCst);
                let _ = client.shutdown(Shutdown::Both);
                let _ = server.shutdown(Shutdown::Both);
                return;
            }
        }
        if std::mem::take(&mut first_query) {
            let mut fault = shared.fault.lock().unwrap();
            if let Fault::CutAtFirstQuery(k) = *fault {
                *fault = if k > 1 { Fault::CutAtFirstQuery(k - 1) } else { Fault::None };
                shared.fired.fetch_add(1, Ordering::SeqCst);
                let _ = client.shutdown(Shutdown::Both);
                let _ = server.shutdown(Shutdown::Both);
                return;
            }
        }
        let n = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; n.saturating_sub(4)];
        if !read_exact(&mut client, &mut body) {
            return;
        }
        if conn.silent.load(Ordering::SeqCst) {
            continue;
        }
        snapshot_begun = head[0] == b'Q' && String::from_utf8_lossy(&body).to_ascii_uppercase().contains("READ ONLY");
        if is_commit(head[0], &body) {
            shared.commits_seen.fetch_add(1, Ordering::SeqCst);
            let mut fault = shared.fault.lock().unwrap();
            match *fault {
                Fault::DropCommitReply(1) => {
                    conn.swallow_replies.store(true, Ordering::SeqCst);
                    conn.cut_after_reply.store(true, Ordering::SeqCst);
                    *fault = Fault::None;
                    shared.fired.fetch_add(1, Ordering::SeqCst);
                }
                Fault::StallAfterCommit(1) => {
                    conn.swallow_replies.store(true, Ordering::SeqCst);
                    *fault = Fault::None;
                    shared.fired.fetch_add(1, Ordering::SeqCst);
                }
                Fault::HoldCommits => {
                    drop(fault);
                    shared.held.fetch_add(1, Ordering::SeqCst);
                    while *shared.fault.lock().unwrap() == Fault::HoldCommits && !shared.stop.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    shared.held.fetch_sub(1, Ordering::SeqCst);
                    fault = shared.fault.lock().unwrap();
                }
                Fault::DropCommitReply(k) if k > 1 => *fault = Fault::DropCommitReply(k - 1),
                Fault::StallAfterCommit(k) if k > 1 => *fault = Fault::StallAfterCommit(k - 1),
                _ => {}
            }
        }
        if server.write_all(&head).and_then(|()| server.write_all(&body)).is_err() {
            return;
        }
        if conn.swallow_replies.load(Ordering::SeqCst) {
            // The COMMIT went through; from now on the client's bytes go nowhere.
            conn.silent.store(true, Ordering::SeqCst);
        }
    }
}

/// Forwards the server's messages. Once a COMMIT is flagged, the messages answering earlier
/// requests still go through; its own answer (`CommandComplete` with tag `COMMIT`, or `ROLLBACK`
/// for a failed transaction) and everything after it are swallowed, and then the connection is
/// cut (or left silent).
fn server_to_client(mut server: TcpStream, mut client: TcpStream, conn: &Conn) {
    let mut answered = false;
    loop {
        // One byte answers an SSL or GSS request; every other server message is typed.
        let ssl = conn.untyped_replies.load(Ordering::SeqCst) > 0;
        let mut frame = vec![0u8; if ssl { 1 } else { 5 }];
        if !read_exact(&mut server, &mut frame) {
            if !conn.silent.load(Ordering::SeqCst) && !answered {
                let _ = client.shutdown(Shutdown::Write);
            }
            return;
        }
        if ssl {
            conn.untyped_replies.fetch_sub(1, Ordering::SeqCst);
        } else {
            let n = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize;
            let mut body = vec![0u8; n.saturating_sub(4)];
            if !read_exact(&mut server, &mut body) {
                return;
            }
            if conn.swallow_replies.load(Ordering::SeqCst)
                && frame[0] == b'C'
                && (body.starts_with(b"COMMIT") || body.starts_with(b"ROLLBACK"))
            {
                answered = true;
            }
            frame.extend_from_slice(&body);
        }
        if answered {
            if conn.cut_after_reply.load(Ordering::SeqCst) {
                // The server answered the COMMIT: it committed. The client never hears of it.
                let _ = client.shutdown(Shutdown::Both);
                let _ = server.shutdown(Shutdown::Both);
                return;
            }
            conn.silent.store(true, Ordering::SeqCst);
            continue;
        }
        if conn.silent.load(Ordering::SeqCst) {
            continue;
        }
        if client.write_all(&frame).is_err() {
            return;
        }
    }
}

/// Whether a client message is a COMMIT: a simple query or a parse of `COMMIT` (or `END`).
fn is_commit(kind: u8, body: &[u8]) -> bool {
    let text = match kind {
        b'Q' => body,
        // Parse: statement name, NUL, query text, NUL, parameter types.
        b'P' => match body.iter().position(|b| *b == 0) {
            Some(end) => &body[end + 1..],
            None => return false,
        },
        _ => return false,
    };
    let text = text.split(|b| *b == 0).next().unwrap_or_default();
    let text = String::from_utf8_lossy(text);
    let word = text.trim().trim_end_matches(';').trim().to_ascii_uppercase();
    word == "COMMIT" || word == "END" || word == "COMMIT TRANSACTION" || word == "COMMIT WORK"
}

#[test]
fn the_proxy_sees_commits_of_simple_and_extended_queries() {
    assert!(is_commit(b'Q', b"COMMIT\0"));
    assert!(is_commit(b'Q', b"commit;\0"));
    assert!(is_commit(b'P', b"s1\0COMMIT\0\0\0"));
    assert!(!is_commit(b'Q', b"SELECT 'COMMIT'\0"));
    assert!(!is_commit(b'B', b"COMMIT\0"));
}

/// The proxy itself, against the real server with a plain client: a dropped COMMIT reply is a
/// client error while the server committed; a held COMMIT keeps the transaction open until
/// released; after a fault, new connections forward normally.
#[test]
fn the_proxy_drops_a_commit_reply_after_the_server_committed_and_holds_commits_on_cue() {
    let Some(env) = super::PgEnv::new() else { return };
    let mut direct = env.db.client();
    direct.batch_execute("CREATE TABLE proxied (n int)").unwrap();
    let proxy = Proxy::start(&super::multi::host_port(env.url()));
    let via = env.db.url_via(&proxy.address());
    let connect = || postgres::Client::connect(&via, postgres::NoTls).expect("connect through the proxy");

    let mut client = connect();
    proxy.arm(Fault::DropCommitReply(1));
    let mut txn = client.transaction().unwrap();
    txn.execute("INSERT INTO proxied VALUES (1)", &[]).unwrap();
    let err = txn.commit().expect_err("the reply to COMMIT never arrives");
    assert_eq!(proxy.fired(), 1, "{err}");
    let count: i64 = direct.query_one("SELECT count(*) FROM proxied", &[]).unwrap().get(0);
    assert_eq!(count, 1, "the server committed what the client was not told of");

    let mut client = connect();
    client.batch_execute("INSERT INTO proxied VALUES (2)").unwrap();
    proxy.arm(Fault::HoldCommits);
    let held = std::thread::spawn(move || {
        let mut txn = client.transaction().unwrap();
        txn.execute("INSERT INTO proxied VALUES (3)", &[]).unwrap();
        txn.commit()
    });
    while proxy.held() == 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let count: i64 = direct.query_one("SELECT count(*) FROM proxied", &[]).unwrap().get(0);
    assert_eq!(count, 2, "a held COMMIT has not committed");
    proxy.release();
    held.join().unwrap().expect("released, the COMMIT goes through");
    let count: i64 = direct.query_one("SELECT count(*) FROM proxied", &[]).unwrap().get(0);
    assert_eq!(count, 3);
    assert!(proxy.commits_seen() >= 2);
}

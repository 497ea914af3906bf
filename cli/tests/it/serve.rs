//! `manifestdb serve` as its own process: many worker processes (the Python example in
//! `examples/python/`) at once, a SIGKILL under load, bad requests, slow clients, the token and
//! the socket's mode.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use manifestdb::ErrorKind;
use manifestdb::server::{Client, Listen};
use serde_json::{Value, json};

use crate::support::{Env, Serve};

/// The Python example (worker, scheduler, client), in the repository.
fn python_example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python").join(name)
}

/// Runs the example scheduler against the server and returns its summary document.
fn scheduler(address: &Listen, args: &[&str]) -> (i32, Value, String) {
    let mut cmd = Command::new("python3");
    cmd.arg(python_example("scheduler.py"));
    match address {
        Listen::Unix(path) => cmd.arg("--socket").arg(path),
        Listen::Tcp(addr) => cmd.arg("--url").arg(format!("http://{addr}")),
        other => panic!("{other:?}"),
    };
    let output = cmd.args(args).stdin(Stdio::null()).output().expect("python3 runs (it is a test requirement, as in CI)");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let summary = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("scheduler printed no summary ({e}):\n{stdout}\n{stderr}"));
    (output.status.code().unwrap_or(-1), summary, stderr)
}

#[track_caller]
fn assert_scheduler_ok(code: i32, summary: &Value, stderr: &str, partitions: u64) {
    assert_eq!(code, 0, "the scheduler's checks failed:\n{summary:#}\n{stderr}");
    assert_eq!(summary["ok"], true, "{summary:#}");
    for (check, holds) in summary["checks"].as_object().expect("checks") {
        assert_eq!(holds, &json!(true), "check {check} failed: {summary:#}");
    }
    assert_eq!(summary["partitions"], partitions);
    assert_eq!(summary["published_totals"], summary["input_totals"], "{summary:#}");
}

#[test]
fn sixty_four_worker_processes_at_once_all_succeed_through_the_server_and_publish_once() {
    let env = Env::new();
    let serve = Serve::start(&env, &[]);
    // 64 workers at once, 4 of their tasks run twice at the same time, one worker killed
    // mid-write before them and its task retried.
    let (code, summary, stderr) = scheduler(&serve.address, &["--partitions", "64", "--parallel", "68", "--duplicates", "4"]);
    assert_scheduler_ok(code, &summary, &stderr, 64);
    // Every worker's calls succeeded the first time: no busy, no failure, no retry.
    assert_eq!(summary["worker_failures"], json!([]), "{summary:#}");
    assert_eq!(summary["client_retries"], 0, "{summary:#}");
    assert_eq!(summary["acknowledged"].as_array().unwrap().len(), 68);
    // The killed attempt 1 of the first task is not the published one; its retry is.
    let killed = &summary["killed"];
    assert_eq!(killed["attempt"], 1);
    assert!(killed["written_bytes"].as_u64().unwrap() > 0, "the killed worker had written part of its file");
    assert_eq!(serve.stop(), 0, "serve exits 0 on SIGTERM");
    assert!(!env.dir().join("manifestdb.sock").exists(), "the socket is removed at shutdown");

    // Without the server, the CLI reads the same published generation; the store verifies clean.
    let show = env.json(&["show", "-d", "daily_units"]).code(0).json();
    assert_eq!(show["totals"]["rows"], summary["input_totals"]["rows"]);
    assert_eq!(show["totals"]["total"], summary["input_totals"]["total"]);
    let killed_partition = killed["partition"].as_str().unwrap();
    let entry = show["partitions"].as_array().unwrap().iter().find(|p| p["partition"] == killed_partition).expect("killed partition");
    assert_ne!(entry["attempt"], 1);
    env.run(&["verify", "--files"]).code(0);
}

#[test]
fn a_server_killed_under_load_restarts_and_every_acknowledged_operation_is_in_the_store() {
    let env = Env::new();
    let serve = Serve::start(&env, &[]);
    let socket = serve.socket();
    let address = serve.address.clone();
    let scheduler = std::thread::spawn(move || {
        scheduler(&address, &["--partitions", "48", "--parallel", "16", "--duplicates", "2", "--retry-for", "120"])
    });
    // Let the workers get going, then kill the server in the middle of their calls.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let run = env.json(&["run", "show", "-d", "daily_units", "-r", "2026-11-29"]);
        let finished = if run.code == 0 {
            run.json()["tasks"].as_array().unwrap().iter().filter(|t| t["accepted_attempt"].is_u64()).count()
        } else {
            0
        };
        if finished >= 8 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    serve.kill();
    assert!(socket.exists(), "a SIGKILLed server leaves its socket behind");
    std::thread::sleep(Duration::from_millis(300));
    // The restarted server replaces the stale socket and recovers the store.
    let serve = Serve::start(&env, &[]);
    let (code, summary, stderr) = scheduler.join().expect("scheduler thread");
    assert_scheduler_ok(code, &summary, &stderr, 48);
    assert_eq!(serve.stop(), 0);

    // Every attempt a worker saw validated is in the store, validated.
    let run = env.json(&["run", "show", "-d", "daily_units", "-r", "2026-11-29"]).code(0).json();
    for ack in summary["acknowledged"].as_array().unwrap() {
        let task = run["tasks"].as_array().unwrap().iter().find(|t| t["partition"] == ack["partition"]).expect("task");
        let attempt = task["attempts"].as_array().unwrap().iter().find(|a| a["attempt"] == ack["attempt"]);
        assert_eq!(attempt.map(|a| &a["status"]), Some(&json!("valid")), "acknowledged {ack} is not in the store: {task:#}");
    }
    env.run(&["verify", "--files"]).code(0);
}

/// The tables' entry counts, to show that a refused request wrote nothing.
fn table_counts(client: &mut Client) -> Value {
    client.request("GET", "/v1/stats", None).expect("stats").body["tables"].clone()
}

#[track_caller]
fn assert_error(answer: &manifestdb::server::Answer, status: u16, kind: ErrorKind, needle: &str) {
    assert_eq!(answer.status, status, "{}", answer.body);
    let (got, message) = answer.error().unwrap_or_else(|| panic!("not an error document: {}", answer.body));
    assert_eq!(got, kind, "{}", answer.body);
    assert!(message.contains(needle), "{message:?} does not mention {needle:?}");
    assert_eq!(answer.body["error"]["exit_code"], kind.exit_code(), "{}", answer.body);
}

#[test]
fn bad_requests_get_json_errors_and_write_nothing() {
    let env = Env::new();
    env.declare("r1", "s@1", &[("p=1", 1, 5)]);
    let serve = Serve::start(&env, &["--body-limit", "2048"]);
    let mut client = serve.client();
    let before = table_counts(&mut client);

    let begin = "/v1/attempts/begin";
    assert_error(
        &client.request_bytes("POST", begin, Some("application/json"), b"{\"dataset\": ".to_vec()).unwrap(),
        400,
        ErrorKind::Usage,
        "not valid",
    );
    assert_error(
        &client.request_bytes("POST", begin, Some("text/plain"), br#"{"dataset":"d","run":"r1","partition":"p=1"}"#.to_vec()).unwrap(),
        415,
        ErrorKind::Usage,
        "application/json",
    );
    assert_error(
        &client.request_bytes("POST", begin, None, br#"{"dataset":"d"}"#.to_vec()).unwrap(),
        415,
        ErrorKind::Usage,
        "application/json",
    );
    let big = json!({"dataset": "d", "run": "r1", "partition": "x".repeat(4096)});
    assert_error(&client.request("POST", begin, Some(&big)).unwrap(), 413, ErrorKind::Usage, "limit");
    assert_error(
        &client.request("POST", begin, Some(&json!({"dataset": "d", "run": "r1", "partition": "p=1", "extra": 1}))).unwrap(),
        400,
        ErrorKind::Usage,
        "unknown field",
    );
    for (dataset, run, partition) in [("..", "r1", "p=1"), ("d", "..", "p=1"), ("d", "r1", "../../etc"), ("d", "r1", "a/../b")] {
        let answer = client.request("POST", begin, Some(&json!({"dataset": dataset, "run": run, "partition": partition}))).unwrap();
        assert_error(&answer, 400, ErrorKind::Usage, "..");
    }
    assert_error(&client.request("GET", "/v1/attempts/begin", None).unwrap(), 405, ErrorKind::Usage, "does not take GET");
    // A method is any token, of any length: the 405 and 404 messages show its first 120
    // characters and its length, not 20 KB of it.
    let method = "X".repeat(20_000);
    for (path, status, kind) in [("/v1/attempts/begin", 405, "usage"), ("/v1/nope", 404, "not_found")] {
        let request = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let answer = RawAnswer::parse(&raw_unix(&serve.socket(), request.as_bytes()));
        answer.assert_error(status, kind, "(20000 bytes)");
        assert!(answer.body.to_string().len() < 600, "{path}: the method echoed whole: {} bytes", answer.body.to_string().len());
    }
    assert_error(&client.request("GET", "/v1/unknown", None).unwrap(), 404, ErrorKind::NotFound, "no route");
    assert_error(&client.request("GET", "/../v1/stats", None).unwrap(), 404, ErrorKind::NotFound, "no route");
    assert_error(&client.request("GET", "/v1/manifest?generation=x", None).unwrap(), 400, ErrorKind::Usage, "query");
    assert_error(
        &client.request("POST", begin, Some(&json!({"dataset": "d", "run": "nope", "partition": "p=1"}))).unwrap(),
        404,
        ErrorKind::NotFound,
        "nope",
    );

    // A request head that is not HTTP: the connection is answered 400 or closed, and the server
    // goes on serving.
    let mut raw = UnixStream::connect(serve.socket()).unwrap();
    raw.write_all(b"\x00\x01 not http at all\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = raw.read_to_end(&mut answer);
    assert!(answer.is_empty() || answer.starts_with(b"HTTP/1.1 400"), "{}", String::from_utf8_lossy(&answer));

    assert_eq!(table_counts(&mut client), before, "a refused request wrote nothing");
    assert_eq!(client.request("GET", "/v1/health", None).unwrap().status, 200);
}

#[test]
fn a_slow_client_is_timed_out_while_the_server_keeps_serving_others() {
    let env = Env::new();
    env.declare("r1", "s@1", &[("p=1", 1, 5)]);
    let serve = Serve::start(&env, &["--idle-timeout", "1s", "--request-timeout", "1s"]);
    let mut client = serve.client();
    let before = table_counts(&mut client);

    // One client never finishes its request head, another never finishes its body.
    let mut head = UnixStream::connect(serve.socket()).unwrap();
    head.write_all(b"POST /v1/attempts/begin HTTP/1.1\r\nHost: x\r\nContent-Type: appl").unwrap();
    let mut body = UnixStream::connect(serve.socket()).unwrap();
    body.write_all(
        b"POST /v1/attempts/begin HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60\r\n\r\n{\"dataset\": \"d\",",
    )
    .unwrap();
    let started = Instant::now();

    // Meanwhile others are served.
    for _ in 0..5 {
        assert_eq!(client.request("GET", "/v1/health", None).unwrap().status, 200);
    }
    assert!(started.elapsed() < Duration::from_secs(1), "the healthy client waited for the slow ones");

    // The slow head's connection is closed; the slow body is answered 408 (and closed).
    for stream in [&mut head, &mut body] {
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    }
    let mut answer = Vec::new();
    head.read_to_end(&mut answer).expect("the server closes the slow head's connection");
    assert!(answer.is_empty() || answer.starts_with(b"HTTP/1.1 408"), "{}", String::from_utf8_lossy(&answer));
    let mut answer = Vec::new();
    body.read_to_end(&mut answer).expect("the server ends the slow body's connection");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408") && text.contains("\"kind\":\"usage\""), "{text}");
    assert!(started.elapsed() < Duration::from_secs(15));

    assert_eq!(table_counts(&mut client), before, "nothing was written for the slow requests");
    let ok = client.request("POST", "/v1/attempts/begin", Some(&json!({"dataset": "daily", "run": "r1", "partition": "p=1"}))).unwrap();
    assert_eq!(ok.status, 200, "{}", ok.body);
}

#[test]
fn tcp_needs_the_token_and_a_non_loopback_address_is_refused_without_one() {
    let env = Env::new();
    let token_file = env.tmp.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let token_arg = token_file.to_str().unwrap();

    let refused = env.json(&["serve", "--listen", "0.0.0.0:0"]);
    refused.code(2);
    assert!(refused.error_json()["error"]["message"].as_str().unwrap().contains("token"), "{}", refused.stderr);

    let serve = Serve::start(&env, &["--listen", "127.0.0.1:0", "--token-file", token_arg]);
    assert!(matches!(serve.address, Listen::Tcp(addr) if addr.ip().is_loopback() && addr.port() != 0));
    assert!(!env.dir().join("manifestdb.sock").exists(), "a TCP server makes no socket");
    assert_error(&serve.client().request("GET", "/v1/health", None).unwrap(), 401, ErrorKind::Unauthorized, "token");
    assert_error(
        &serve.client().with_token("s3cret-tokeN").request("GET", "/v1/health", None).unwrap(),
        401,
        ErrorKind::Unauthorized,
        "token",
    );
    assert_error(&serve.client().with_token("s3cret").request("GET", "/v1/health", None).unwrap(), 401, ErrorKind::Unauthorized, "token");
    let declare = json!({"dataset": "d", "run": "r1", "snapshot": "s", "trust_reported_figures": true, "tasks": [{"partition": "p=1", "expected_rows": 1}]});
    assert_eq!(serve.client().request("POST", "/v1/runs/declare", Some(&declare)).unwrap().status, 401);
    assert_eq!(env.json(&["run", "show", "-d", "d", "-r", "r1"]).code, 4, "an unauthorised request wrote nothing");
    let mut client = serve.client().with_token("s3cret-token");
    assert_eq!(client.request("POST", "/v1/runs/declare", Some(&declare)).unwrap().status, 200);
    assert_eq!(client.request("GET", "/v1/health", None).unwrap().status, 200);
}

#[test]
fn the_socket_is_for_the_owner_only_unless_the_group_is_allowed() {
    if crate::support::redb_only("the socket's place beside the redb store file") {
        return;
    }
    let env = Env::new();
    let serve = Serve::start(&env, &[]);
    let socket = serve.socket();
    assert_eq!(socket, env.dir().join("manifestdb.sock"));
    assert_eq!(std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777, 0o600);
    let running_as_root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(env.db_path()).unwrap()) == 0;
    if running_as_root {
        // Another user who can reach the directory cannot connect to the socket.
        for dir in [env.tmp.path().to_path_buf(), env.dir()] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let probe = "import os, socket, sys\nos.setgid(65534); os.setuid(65534)\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\nexcept PermissionError:\n    sys.exit(13)\nsys.exit(0)\n";
        let status = Command::new("python3").args(["-c", probe]).arg(&socket).status().expect("python3");
        assert_eq!(status.code(), Some(13), "another user connected to the owner's socket");
    }
    serve.stop();
    let serve = Serve::start(&env, &["--socket-group"]);
    assert_eq!(std::fs::metadata(serve.socket()).unwrap().permissions().mode() & 0o777, 0o660);
    assert_eq!(serve.client().request("GET", "/v1/health", None).unwrap().status, 200);
}

#[test]
fn a_second_server_of_the_same_store_is_refused_busy() {
    if crate::support::redb_only("redb's single-writer lock (a PostgreSQL store takes many writers, servers included)") {
        return;
    }
    let env = Env::new();
    let serve = Serve::start(&env, &[]);
    let second = env.json(&["serve"]);
    second.code(6);
    assert_eq!(second.error_json()["error"]["kind"], "busy");
    assert_eq!(serve.client().request("GET", "/v1/health", None).unwrap().status, 200, "the first server still serves");
}

#[test]
fn the_cli_sends_writing_verbs_to_the_running_server_and_file_verbs_fail_busy_at_once() {
    if crate::support::redb_only("finds the server through the socket beside the redb store file, and redb's single-writer lock") {
        return;
    }
    const EU: &str = "date=2026-11-29/region=eu";
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    let serve = Serve::start(&env, &[]);
    // The server holds the store's writer, so a writing verb that opened the file would fail
    // busy (--wait 0s); found through the store directory's socket, it succeeds.
    let begun = env.json(&["--wait", "0s", "attempt", "begin", "-d", "daily", "-r", "r1", "-p", EU]).code(0).json();
    assert_eq!(begun["attempt"], 1);
    // A reading verb asks the server too, and sees its commit; so does an operator verb.
    assert_eq!(env.json(&["run", "show", "-d", "daily", "-r", "r1"]).code(0).json()["tasks"][0]["attempts"][0]["attempt"], 1);
    assert_eq!(env.json(&["--wait", "0s", "gc", "abandon"]).code(0).json()["mode"], "dry_run");
    // `init` of the store the server holds succeeds: it exists, and the server says so (a
    // scheduler's declare task runs `init` on every try).
    let init = env.json(&["--wait", "0s", "init"]).code(0).json();
    assert_eq!((init["created"].as_bool(), init["staging"].as_str()), (Some(false), env.staging().canonicalize().unwrap().to_str()));
    let text = env.run(&["--wait", "0s", "init"]);
    assert!(text.code(0).stdout.contains("already initialised"), "{}", text.stdout);
    // ... unless it names another staging root than the one the server serves.
    let other = env.tmp.path().join("other-staging");
    let wrong = env.json(&["--staging", other.to_str().unwrap(), "init"]);
    wrong.code(5);
    assert!(wrong.error_json()["error"]["message"].as_str().unwrap().contains("staging root"), "{}", wrong.stderr);
    // A verb that needs the file itself fails busy at once, saying why.
    let second = env.json(&["serve"]);
    second.code(6);
    assert!(second.error_json()["error"]["message"].as_str().unwrap().contains("running server"), "{}", second.stderr);
    // An error answer is the same exit code and message as without a server.
    let unknown = env.json(&["attempt", "begin", "-d", "daily", "-r", "r1", "-p", "p=none"]);
    unknown.code(4);
    assert!(unknown.error_json()["error"]["message"].as_str().unwrap().contains("p=none"), "{}", unknown.stderr);
    drop(serve);

    // Over TCP with a token: --server names it, --server-token-file carries the token.
    let token_file = env.tmp.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let serve = Serve::start(&env, &["--listen", "127.0.0.1:0", "--token-file", token_file.to_str().unwrap()]);
    let url = serve.address.to_string();
    let begin = ["attempt", "begin", "-d", "daily", "-r", "r1", "-p", EU];
    // No socket in the store's directory: the file is opened, and the server holds it.
    env.json(&[&["--wait", "0s"][..], &begin].concat()).code(6);
    let unauthorized = env.json(&[&["--server", url.as_str()][..], &begin].concat());
    unauthorized.code(10);
    assert_eq!(unauthorized.error_json()["error"]["kind"], "unauthorized", "401 has its own exit code: {}", unauthorized.stderr);
    let served = env.json(&[&["--server", url.as_str(), "--server-token-file", token_file.to_str().unwrap()][..], &begin].concat());
    assert_eq!(served.code(0).json()["attempt"], 2);
    assert_eq!(serve.stop(), 0);
}

/// An answer read off a raw connection: its status, its head's lines (lowercase names) and its
/// body, and whether the server then closed the connection.
struct RawAnswer {
    status: u16,
    head: String,
    body: Value,
}

impl RawAnswer {
    /// Parses the first answer of `bytes`.
    #[track_caller]
    fn parse(bytes: &[u8]) -> RawAnswer {
        let text = String::from_utf8_lossy(bytes).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no answer head: {text:?}"));
        let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status: {head}"));
        let length: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
            .unwrap_or_else(|| panic!("no content-length: {head}"));
        let body = serde_json::from_str(&body[..length]).unwrap_or_else(|e| panic!("the body is not JSON ({e}): {text:?}"));
        RawAnswer { status, head: head.to_ascii_lowercase(), body }
    }

    /// The documented JSON error of `kind`, with `Connection: close`.
    #[track_caller]
    fn assert_error(&self, status: u16, kind: &str, needle: &str) {
        assert_eq!(self.status, status, "{}\n{}", self.head, self.body);
        assert_eq!(self.body["error"]["kind"], kind, "{}", self.body);
        assert!(self.body["error"]["exit_code"].is_u64(), "{}", self.body);
        let message = self.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{message:?} does not mention {needle:?}");
        assert!(self.head.contains("content-type: application/json"), "{}", self.head);
    }

    fn closes(&self) -> bool {
        self.head.contains("connection: close")
    }
}

/// Sends `request` on a new connection to the Unix socket and reads until the server closes it
/// (or 10 s pass).
fn raw_unix(socket: &Path, request: &[u8]) -> Vec<u8> {
    let mut stream = UnixStream::connect(socket).expect("connect");
    raw_exchange(&mut stream, request)
}

fn raw_exchange<S: Read + Write>(stream: &mut S, request: &[u8]) -> Vec<u8> {
    // The server may answer (and close) before it read everything: a failed send is fine.
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer
}

#[test]
fn requests_hyper_cannot_parse_get_the_documented_json_error_and_the_connection_closes() {
    let env = Env::new();
    let serve = Serve::start(&env, &[]);
    let socket = serve.socket();
    let long_url = format!("GET /v1/health?{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(100_000));
    let huge_headers = format!("GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(1 << 20));
    let cases: [(&[u8], u16); 7] = [
        (b"\x00\x01 not http at all\r\n\r\n", 400),
        (b"GET /v1/health\r\n\r\n", 400), // HTTP/0.9
        (b"GET /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef", 400),
        (b"GET /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: five\r\n\r\n", 400),
        (b"POST /v1/attempts/begin HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
        (long_url.as_bytes(), 414),
        (huge_headers.as_bytes(), 431),
    ];
    for (request, status) in cases {
        let answer = RawAnswer::parse(&raw_unix(&socket, request));
        answer.assert_error(status, "usage", "");
        assert!(answer.closes(), "{}", answer.head);
    }
    assert_eq!(serve.client().request("GET", "/v1/health", None).unwrap().status, 200, "the server goes on serving");
}

#[test]
fn an_http_1_1_request_must_name_its_host_and_json_keys_may_not_repeat() {
    let env = Env::new();
    env.declare("r1", "s@1", &[("p=1", 1, 5)]);
    let serve = Serve::start(&env, &[]);
    let socket = serve.socket();
    RawAnswer::parse(&raw_unix(&socket, b"GET /v1/health HTTP/1.1\r\nConnection: close\r\n\r\n")).assert_error(400, "usage", "Host");
    // HTTP/1.0 has no Host requirement.
    let old = RawAnswer::parse(&raw_unix(&socket, b"GET /v1/health HTTP/1.0\r\n\r\n"));
    assert_eq!((old.status, &old.body["status"]), (200, &json!("serving")));

    let mut client = serve.client();
    let before = table_counts(&mut client);
    // The same key twice, at the top or deeper: refused, not "last wins".
    for body in [
        r#"{"dataset": "daily", "run": "r1", "partition": "p=1", "partition": "p=2"}"#,
        r#"{"dataset": "daily", "run": "r1", "partition": "p=1", "attempt": 1, "candidate": {"snapshot": "s@1", "rows": 1, "rows": 5, "digest": "d"}}"#,
    ] {
        let route = if body.contains("candidate") { "/v1/attempts/finish" } else { "/v1/attempts/begin" };
        let answer = client.request_bytes("POST", route, Some("application/json"), body.as_bytes().to_vec()).unwrap();
        assert_error(&answer, 400, ErrorKind::Usage, "appears twice");
    }
    assert_eq!(table_counts(&mut client), before, "a refused request wrote nothing");
}

#[test]
fn a_body_declared_over_the_limit_is_refused_at_once_and_an_error_after_a_body_closes_the_connection() {
    let env = Env::new();
    env.declare("r1", "s@1", &[("p=1", 1, 5)]);
    let serve = Serve::start(&env, &["--body-limit", "2048", "--request-timeout", "60s"]);
    // A declared Content-Length over the limit, with a trickle of body: 413 at once, not 408
    // after the request time-out.
    let mut stream = UnixStream::connect(serve.socket()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let started = Instant::now();
    stream
        .write_all(b"POST /v1/attempts/begin HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"da")
        .unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = RawAnswer::parse(&answer);
    answer.assert_error(413, "usage", "limit of 2048 bytes");
    assert!(answer.closes(), "{}", answer.head);
    assert!(started.elapsed() < Duration::from_secs(5), "held for {:?}", started.elapsed());

    // On a kept-alive connection: a first request answered (and kept alive), then a body over
    // the limit sent whole: 413 says `Connection: close`, and the connection is closed.
    let mut stream = UnixStream::connect(serve.socket()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    stream.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut first = vec![0u8; 4096];
    let n = stream.read(&mut first).unwrap();
    let first = RawAnswer::parse(&first[..n]);
    assert_eq!(first.status, 200);
    assert!(!first.closes(), "{}", first.head);
    let body = format!(r#"{{"dataset": "daily", "run": "r1", "partition": "{}"}}"#, "x".repeat(4096));
    let request = format!(
        "POST /v1/attempts/begin HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    let second = RawAnswer::parse(&raw_exchange(&mut stream, request.as_bytes()));
    second.assert_error(413, "usage", "limit");
    assert!(second.closes(), "{}", second.head);

    // A refused request whose body was read keeps the rule simple: it closes too.
    let unknown = br#"{"dataset": "daily", "run": "nope", "partition": "p=1"}"#;
    let request = [
        format!(
            "POST /v1/attempts/begin HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            unknown.len()
        )
        .as_bytes(),
        unknown,
    ]
    .concat();
    let refused = RawAnswer::parse(&raw_unix(&serve.socket(), &request));
    refused.assert_error(404, "not_found", "nope");
    assert!(refused.closes(), "{}", refused.head);
}

#[test]
fn a_tcp_request_must_name_this_server_as_its_host_against_dns_rebinding() {
    let env = Env::new();
    let serve = Serve::start(&env, &["--listen", "127.0.0.1:0", "--host-name", "Jobs.Internal"]);
    let Listen::Tcp(addr) = serve.address.clone() else { panic!("not TCP") };
    let declare = br#"{"dataset": "daily", "run": "r1", "snapshot": "s", "trust_reported_figures": true, "tasks": [{"partition": "p=1", "expected_rows": 1}]}"#;
    let post = |host: &str| {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let head = format!(
            "POST /v1/runs/declare HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            declare.len()
        );
        RawAnswer::parse(&raw_exchange(&mut stream, &[head.as_bytes(), declare].concat()))
    };
    // A page of evil.example whose name resolves to 127.0.0.1: refused before any route runs.
    for host in ["evil.example", &format!("evil.example:{}", addr.port()), "localhost.evil.example"] {
        post(host).assert_error(421, "usage", "DNS rebinding");
    }
    assert_eq!(env.json(&["run", "show", "-d", "daily", "-r", "r1"]).code, 4, "a refused request wrote nothing");
    for host in [addr.to_string(), format!("localhost:{}", addr.port()), "jobs.internal".to_owned(), "[::1]".to_owned()] {
        let answer = post(&host);
        assert_eq!(answer.status, 200, "{host}: {}", answer.body);
    }
    // The CLI's client names the server's address.
    assert_eq!(env.json(&["--server", &serve.address.to_string(), "run", "show", "-d", "daily", "-r", "r1"]).code(0).json()["run"], "r1");

    // Two Host fields: 400 (RFC 9112, section 3.2), whatever they name.
    let raw = |request: String| {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        RawAnswer::parse(&raw_exchange(&mut stream, request.as_bytes()))
    };
    raw(format!("GET /v1/health HTTP/1.1\r\nHost: {addr}\r\nHost: evil.example\r\nConnection: close\r\n\r\n"))
        .assert_error(400, "usage", "one Host");
    raw(format!("GET /v1/health HTTP/1.1\r\nHost: {addr}\r\nHost: {addr}\r\nConnection: close\r\n\r\n"))
        .assert_error(400, "usage", "one Host");
    // A target in absolute form names its host, which a server takes over the Host field: the
    // guard checks that authority.
    raw(format!("GET http://evil.example/v1/health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")).assert_error(
        421,
        "usage",
        "evil.example",
    );
    let own = raw(format!("GET http://{addr}/v1/health HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"));
    assert_eq!(own.status, 200, "an absolute-form target naming this server: {}", own.body);
}

#[test]
fn the_bearer_scheme_is_case_insensitive_and_a_token_file_others_may_read_is_warned_about() {
    let env = Env::new();
    let token_file = env.tmp.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut child = crate::support::command()
        .args(env.store_args())
        .args(["--json", "serve", "--listen", "127.0.0.1:0", "--token-file", token_file.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let listening: Value = serde_json::from_str(&line).unwrap();
    let Listen::Tcp(addr) = manifestdb::server::parse_target(listening["listening"].as_str().unwrap()).unwrap() else { panic!("{line}") };
    for (scheme, status) in [("Bearer", 200), ("bearer", 200), ("BEARER", 200), ("Basic", 401), ("Bearer-ish", 401)] {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let request = format!("GET /v1/health HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {scheme} s3cret\r\nConnection: close\r\n\r\n");
        assert_eq!(RawAnswer::parse(&raw_exchange(&mut stream, request.as_bytes())).status, status, "{scheme}");
    }
    // The client side reads its token file the same way, with the same warning.
    let client = env.run(&["--server", &format!("http://{addr}"), "--server-token-file", token_file.to_str().unwrap(), "stats"]);
    client.code(0);
    assert!(client.stderr.contains("other users") && client.stderr.contains("chmod 600"), "{}", client.stderr);
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(stderr.contains("token file") && stderr.contains("other users") && stderr.contains("chmod 600"), "{stderr}");
    // Under --json, stderr holds JSON lines only: the log's events too.
    for line in stderr.lines().filter(|line| !line.trim().is_empty()) {
        assert!(serde_json::from_str::<Value>(line).is_ok(), "a line on stderr under --json is not JSON: {line}");
    }
}

#[test]
fn an_exclusive_server_serves_every_verb_and_no_other_process_opens_the_file() {
    if crate::support::redb_only("serve --exclusive locks the redb file") {
        return;
    }
    let env = Env::new();
    let serve = Serve::start(&env, &["--exclusive"]);
    // Workers through the server: begins, finishes, validations and the publish, with
    // duplicates and a killed worker, as without --exclusive.
    let (code, summary, stderr) = scheduler(&serve.address, &["--partitions", "8", "--parallel", "10", "--duplicates", "2"]);
    assert_scheduler_ok(code, &summary, &stderr, 8);
    // The tool's reading verbs find the server on the store's socket and read through it.
    let show = env.json(&["show", "-d", "daily_units"]).code(0).json();
    assert_eq!(show["totals"]["total"], summary["input_totals"]["total"]);
    env.run(&["verify"]).code(0);
    // Another process opening the file itself, even read-only, is refused busy while the
    // server holds it.
    match manifestdb::ReadOnlyStore::open(env.db_path()) {
        Err(err) => assert_eq!(err.kind(), ErrorKind::Busy, "{err}"),
        Ok(_) => panic!("a read-only open succeeded while an exclusive server held the store"),
    }
    // --durable-begins needs --exclusive.
    env.run(&["serve", "--durable-begins"]).code(2);
    assert_eq!(serve.stop(), 0);
    // Stopped, the server gave the file back: every acknowledged write is there.
    let show = env.json(&["show", "-d", "daily_units"]).code(0).json();
    assert_eq!(show["totals"]["total"], summary["input_totals"]["total"]);
    env.run(&["verify", "--files"]).code(0);
}

//! The command-line tool with its staging root on S3-compatible object storage (`--staging
//! s3://bucket/prefix`), against the real `s3s-fs` server `scripts/s3-server start` runs on
//! loopback: `MANIFESTDB_TEST_S3` and the `AWS_*` environment it prints are needed, else each
//! test says loudly that it was skipped (and fails under `CI=true`). The worker here is `curl`
//! with its own request signing (`--aws-sigv4`), as a worker in any language would write.

use std::path::Path;
use std::process::Command;

use crate::support::{Run, command, finish};

const S3_ENV: &str = "MANIFESTDB_TEST_S3";

/// A fresh `s3://bucket/prefix` of the test server, or `None` (said loudly) without one.
#[track_caller]
fn s3_root() -> Option<String> {
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    match std::env::var(S3_ENV) {
        Ok(url) if !url.is_empty() => {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() % 1_000_000_000_000;
            Some(format!("{}/cli{}-{nanos}", url.trim_end_matches('/'), std::process::id()))
        }
        _ => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{test}: CI=true but {S3_ENV} is not set: object-storage tests must run in CI (.ci/run starts a server)");
            }
            eprintln!(
                "\n*** SKIPPED {test}: no S3-compatible server ({S3_ENV} is not set). Start one with \
                 `scripts/s3-server install && eval \"$(scripts/s3-server start)\"` ***\n"
            );
            None
        }
    }
}

/// PUTs `body` at the object URL `url` (`s3://bucket/key`) with curl, signed as the AWS tools
/// sign, with the server and keys of the environment.
fn put(url: &str, body: &str) {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set beside {S3_ENV}"));
    let path = url.strip_prefix("s3://").expect("an s3:// URL");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), body).unwrap();
    let status = Command::new("curl")
        .args(["-sS", "-f", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "--aws-sigv4"])
        .arg(format!("aws:amz:{}:s3", var("AWS_REGION")))
        .arg("--user")
        .arg(format!("{}:{}", var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")))
        .arg("-T")
        .arg(file.path())
        .arg(format!("{}/{path}", var("AWS_ENDPOINT_URL")))
        .status()
        .expect("run curl");
    assert!(status.success(), "curl PUT {url}");
}

fn manifestdb(store: &Path, staging: &str, args: &[&str]) -> Run {
    finish(command().arg("--store").arg(store).arg("--staging").arg(staging).args(args))
}

#[test]
fn the_protocol_from_a_shell_with_staging_on_s3_publishes_one_attempt_and_verify_rereads_it() {
    the_protocol_with_staging_on_s3(false);
}

#[test]
fn the_protocol_through_a_server_whose_staging_root_is_on_s3() {
    the_protocol_with_staging_on_s3(true);
}

/// `manifestdb serve` over the store, started and stopped by this test.
struct Served(std::process::Child);

impl Served {
    fn start(store: &Path, staging: &str) -> Served {
        use std::io::BufRead;
        let mut child = command()
            .arg("--store")
            .arg(store)
            .arg("--staging")
            .arg(staging)
            .args(["--json", "serve"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("start manifestdb serve");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("the listening line");
        assert!(line.contains("listening"), "serve printed {line:?}");
        Served(child)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

fn the_protocol_with_staging_on_s3(served: bool) {
    let Some(root) = s3_root() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store.redb");
    let run = |args: &[&str]| manifestdb(&store, &root, args);
    run(&["init"]).code(0);
    // Every verb below finds the server by the socket beside the store file.
    let server = served.then(|| Served::start(&store, &root));
    run(&[
        "run",
        "declare",
        "--dataset",
        "daily",
        "--run",
        "r1",
        "--snapshot",
        "s@1",
        "--task",
        "region=eu:2:700",
        "--grain",
        "store,item",
        "--measure",
        "units",
    ])
    .code(0);
    let task = ["--dataset", "daily", "--run", "r1", "--partition", "region=eu"];
    let mut urls = Vec::new();
    for _ in 0..2 {
        // The first attempt's acknowledgement is "lost": the task is begun again.
        let begun = run(&[&["attempt", "begin", "--env"][..], &task[..]].concat());
        begun.code(0);
        let env: Vec<(&str, &str)> = begun.stdout.lines().filter_map(|l| l.split_once('=')).collect();
        let get = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.trim_matches('\'').to_owned());
        let url = get("MANIFESTDB_STAGING_URL").unwrap_or_else(|| panic!("no MANIFESTDB_STAGING_URL in {:?}", begun.stdout));
        assert_eq!(get("MANIFESTDB_STAGING_DIR").as_deref(), Some(url.as_str()));
        assert!(url.starts_with(&format!("{root}/")), "{url} is below {root}");
        put(&format!("{url}/part.csv"), "store,item,units\n1,7,300\n2,7,400\n");
        let attempt = get("MANIFESTDB_ATTEMPT").expect("an attempt number");
        let key = [&task[..], &["--attempt", &attempt][..]].concat();
        run(&[&["attempt", "finish", "--snapshot", "s@1", "--scan"][..], &key[..]].concat()).code(0);
        run(&[&["attempt", "validate"][..], &key[..]].concat()).code(0);
        urls.push(url);
    }
    assert_ne!(urls[0], urls[1], "two attempts never share a prefix");
    run(&["publish", "--dataset", "daily", "--run", "r1"]).code(0);
    let shown = finish(command().arg("--store").arg(&store).arg("--staging").arg(&root).args(["--json", "show", "--dataset", "daily"]));
    let doc = shown.code(0).json();
    let partitions = doc["partitions"].as_array().expect("partitions");
    assert_eq!(partitions.len(), 1);
    assert_eq!(partitions[0]["attempt"], 1);
    assert_eq!(partitions[0]["rows"], 2);
    assert_eq!(partitions[0]["total"], 700);
    assert_eq!(partitions[0]["staging_dir"].as_str(), Some(urls[0].as_str()));
    drop(server);
    run(&["verify", "--checksums"]).code(0);
    // The published object replaced behind the store's back: verify re-reads it and says so.
    put(&format!("{}/part.csv", urls[0]), "store,item,units\n1,7,300\n2,7,900\n");
    let damaged = run(&["verify", "--checksums"]);
    assert_ne!(damaged.code, 0, "verify passed over a replaced object:\n{}", damaged.stdout);
    assert!(damaged.stdout.contains("crc32") || damaged.stderr.contains("crc32"), "{}\n{}", damaged.stdout, damaged.stderr);
    // Credentials never appear in what the tool prints.
    let secret = std::env::var("AWS_SECRET_ACCESS_KEY").unwrap();
    for out in [&damaged.stdout, &damaged.stderr, &shown.stdout, &shown.stderr] {
        assert!(!out.contains(&secret), "the secret key was printed");
    }
}

/// A loopback proxy in front of the S3 server that forwards every request but resets the
/// connection on any `PUT` (the request may or may not have reached the server: the client
/// cannot tell). Returns its endpoint URL; it runs until the test process ends.
fn proxy_resetting_puts(upstream: &str) -> String {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    let upstream = upstream.strip_prefix("http://").expect("an http:// endpoint").to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(&upstream) else { continue };
            let (mut from_client, mut to_server) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (mut from_server, mut to_client) = (server, client);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match from_client.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) if buf[..n].starts_with(b"PUT ") => {
                            let _ = from_client.shutdown(Shutdown::Both);
                            let _ = to_server.shutdown(Shutdown::Both);
                            break;
                        }
                        Ok(n) => {
                            if to_server.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = to_server.shutdown(Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut from_server, &mut to_client);
                let _ = to_client.shutdown(Shutdown::Write);
            });
        }
    });
    format!("http://{addr}")
}

#[test]
fn a_write_to_object_storage_whose_answer_never_comes_is_outcome_unknown_and_the_same_call_settles_it() {
    let Some(root) = s3_root() else { return };
    let endpoint = std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL beside MANIFESTDB_TEST_S3");
    let proxy = proxy_resetting_puts(&endpoint);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store.redb");
    // A new store writes its root's marker: every PUT is cut off, the retries run out, and
    // whether the marker landed is unknown.
    let cut =
        finish(command().env("AWS_ENDPOINT_URL", &proxy).arg("--store").arg(&store).arg("--staging").arg(&root).args(["--json", "init"]));
    cut.code(8);
    let error = cut.error_json();
    assert_eq!(error["error"]["kind"], "outcome_unknown", "{error}");
    let secret = std::env::var("AWS_SECRET_ACCESS_KEY").unwrap();
    assert!(!cut.stderr.contains(&secret) && !cut.stdout.contains(&secret), "the secret key was printed");
    // The same call again, with the server reachable, settles it.
    manifestdb(&store, &root, &["init"]).code(0);
    manifestdb(
        &store,
        &root,
        &["run", "declare", "--dataset", "d", "--run", "r1", "--snapshot", "s", "--task", "p=1:1:5", "--grain", "k", "--measure", "v"],
    )
    .code(0);
}

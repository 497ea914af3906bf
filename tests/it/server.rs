//! The library's server (`manifestdb::server`) embedded in a process that holds the `Store`:
//! the routes it serves are exactly those of `docs/openapi.json`, and every answer has the
//! document's shape. (The server as its own process, under 64 worker processes, bad requests
//! and auth: the CLI's `serve` tests.)

use std::collections::BTreeSet;
use std::sync::Arc;

use manifestdb::ErrorKind;
use manifestdb::server::{Answer, Client, Listen, ROUTES, Server, ServerOptions};
use manifestdb::{Store, TaskKey};
use serde_json::{Value, json};

fn openapi() -> Value {
    let text = std::fs::read_to_string(crate::support::repo_root().join("docs/openapi.json")).expect("read docs/openapi.json");
    serde_json::from_str(&text).expect("docs/openapi.json is JSON")
}

fn documented_routes(doc: &Value) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            routes.insert((method.to_uppercase(), path.clone()));
        }
    }
    routes
}

/// Checks `value` against the document's `schema`: every property of an object is declared,
/// every required one present, each of the declared type; `$ref`, arrays, `oneOf` and `enum`
/// are followed. Returns the first mismatch with its JSON path.
fn conforms(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference.trim_start_matches("#/components/schemas/");
        return conforms(doc, &doc["components"]["schemas"][name], value, at);
    }
    if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
        let errors: Vec<String> = options.iter().filter_map(|o| conforms(doc, o, value, at).err()).collect();
        return if errors.len() < options.len() { Ok(()) } else { Err(errors.join(" / ")) };
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        return Err(format!("{at}: {value} is not one of {allowed:?}"));
    }
    let ok = match schema.get("type").and_then(Value::as_str) {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("boolean") => value.is_boolean(),
        Some("null") => value.is_null(),
        _ => true,
    };
    if !ok {
        return Err(format!("{at}: {value} is not of type {}", schema["type"]));
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        for required in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            let name = required.as_str().unwrap_or_default();
            if !object.contains_key(name) {
                return Err(format!("{at}: required property {name:?} is missing"));
            }
        }
        for (name, child) in object {
            match properties.and_then(|p| p.get(name)) {
                Some(child_schema) => conforms(doc, child_schema, child, &format!("{at}.{name}"))?,
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => return Err(format!("{at}: property {name:?} is not in the document")),
                    Some(extra @ Value::Object(_)) => conforms(doc, extra, child, &format!("{at}.{name}"))?,
                    _ => {}
                },
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, item) in array.iter().enumerate() {
            conforms(doc, items, item, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

/// The answer's body conforms to the document's response schema of that route and status.
#[track_caller]
fn assert_documented(doc: &Value, method: &str, path: &str, answer: &Answer) {
    let route = path.split('?').next().unwrap_or(path);
    let responses = &doc["paths"][route][method.to_lowercase()]["responses"];
    // Each status the server answers is listed by itself (not left to `default`), its
    // description shared through `components/responses`.
    let mut response = &responses[answer.status.to_string()];
    if let Some(reference) = response.get("$ref").and_then(Value::as_str) {
        response = &doc["components"]["responses"][reference.trim_start_matches("#/components/responses/")];
    }
    let schema = &response["content"]["application/json"]["schema"];
    assert!(!schema.is_null(), "{method} {route} {} is not documented", answer.status);
    if let Err(mismatch) = conforms(doc, schema, &answer.body, "$") {
        panic!("{method} {path} answered {} with a body the document does not describe: {mismatch}\n{}", answer.status, answer.body);
    }
}

struct Served {
    store: Arc<Store>,
    server: Option<Server>,
    client: Client,
    doc: Value,
    _dir: crate::support::TestDir,
}

impl Served {
    fn new() -> Served {
        let dir = crate::support::TestDir::new();
        let store = Arc::new(dir.open().expect("open store"));
        let socket = manifestdb::server::socket_path(&dir.path().join("store.redb"));
        let server = Server::start(Arc::clone(&store), &ServerOptions::unix(&socket)).expect("start the server");
        assert_eq!(server.address(), &Listen::Unix(socket.clone()));
        let client = Client::new(Listen::Unix(socket)).expect("client");
        Served { _dir: dir, store, server: Some(server), client, doc: openapi() }
    }

    /// One request whose answer must have `status` and the documented shape.
    #[track_caller]
    fn call(&mut self, method: &str, path: &str, body: Option<Value>, status: u16) -> Value {
        let answer = self.client.request(method, path, body.as_ref()).expect("request");
        assert_eq!(answer.status, status, "{method} {path}: {}", answer.body);
        assert_documented(&self.doc, method, path, &answer);
        answer.body
    }
}

#[test]
fn the_routes_served_are_exactly_those_of_the_openapi_document() {
    let doc = openapi();
    let served: BTreeSet<(String, String)> = ROUTES.iter().map(|(m, p)| ((*m).to_owned(), (*p).to_owned())).collect();
    assert_eq!(documented_routes(&doc), served, "docs/openapi.json and manifestdb::server::ROUTES differ");

    // Each documented route is routed (not the unknown-route fallback, not a wrong method),
    // even with an empty body or query; and an undocumented one is the JSON 404.
    let mut s = Served::new();
    for (method, path) in documented_routes(&doc) {
        let body = (method == "POST").then(|| json!({}));
        let answer = s.client.request(&method, &path, body.as_ref()).expect("request");
        let unrouted = answer.status == 405
            || answer.error().is_some_and(|(kind, message)| kind == ErrorKind::NotFound && message.starts_with("no route"));
        assert!(!unrouted, "{method} {path} is documented but not served: {}", answer.body);
        assert_documented(&doc, &method, &path, &answer);
    }
    let answer = s.client.request("GET", "/v1/nothing-here", None).expect("request");
    assert_eq!(answer.status, 404);
    assert_documented(&doc, "GET", "/v1/health", &Answer { status: 404, ..answer });
}

#[test]
fn the_openapi_document_lists_every_error_status_and_the_bearer_scheme() {
    let doc = openapi();
    let scheme = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!((scheme["type"].as_str(), scheme["scheme"].as_str()), (Some("http"), Some("bearer")), "{scheme}");
    assert!(doc["security"].as_array().is_some_and(|s| s.contains(&json!({"bearer": []}))), "{}", doc["security"]);
    // What the gate and hyper answer on every route, and what a body may add.
    let every = ["400", "401", "404", "405", "408", "413", "414", "421", "431", "500", "503"];
    for (method, path) in documented_routes(&doc) {
        let responses = &doc["paths"][&path][method.to_lowercase()]["responses"];
        let post = if method == "POST" { &["409", "415", "504"][..] } else { &[] };
        for status in every.iter().chain(post) {
            let reference = responses[*status]["$ref"].as_str().unwrap_or_else(|| panic!("{method} {path} does not list {status}"));
            let name = reference.trim_start_matches("#/components/responses/");
            assert_eq!(
                doc["components"]["responses"][name]["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/Error",
                "{method} {path} {status}"
            );
        }
    }
}

#[test]
fn a_whole_run_through_the_embedded_server_answers_in_the_documented_shapes() {
    let mut s = Served::new();
    let declare = json!({
        "dataset": "daily_units", "run": "r1", "snapshot": "sales@v1", "trust_reported_figures": true,
        "tasks": [{"partition": "region=eu", "expected_rows": 2, "expected_total": 700}, {"partition": "region=us", "expected_rows": 2, "expected_total": 700}],
    });
    assert_eq!(s.call("POST", "/v1/runs/declare", Some(declare.clone()), 200)["outcome"], "declared");
    assert_eq!(s.call("POST", "/v1/runs/declare", Some(declare), 200)["outcome"], "already_declared");
    for partition in ["region=eu", "region=us"] {
        let task = json!({"dataset": "daily_units", "run": "r1", "partition": partition});
        let ticket = s.call("POST", "/v1/attempts/begin", Some(task.clone()), 200);
        let attempt = ticket["attempt"].as_u64().unwrap();
        let dir = std::path::PathBuf::from(ticket["staging_dir"].as_str().unwrap());
        assert!(dir.starts_with(s.store.staging_root()), "{}", dir.display());
        crate::support::write_rows(&dir, 2, 700);
        let mut key = task.clone();
        key["attempt"] = json!(attempt);
        s.call("POST", "/v1/attempts/heartbeat", Some(key.clone()), 200);
        let mut finish = key.clone();
        finish["candidate"] = json!({"snapshot": "sales@v1", "rows": 2, "total": 700, "digest": "sha256:x"});
        finish["describe"] = json!(["part.csv"]);
        let finished = s.call("POST", "/v1/attempts/finish", Some(finish.clone()), 200);
        assert_eq!(finished["outcome"], "recorded");
        // The server described the file: its size and CRC32 are the file's.
        let described = manifestdb::describe_file(&dir, "part.csv").unwrap();
        assert_eq!(finished["candidate"]["files"][0]["crc32"], json!(described.crc32));
        assert_eq!(s.call("POST", "/v1/attempts/finish", Some(finish), 200)["outcome"], "already_recorded");
        let mut validate = key.clone();
        validate["checksums"] = json!(true);
        let verdict = s.call("POST", "/v1/attempts/validate", Some(validate), 200);
        assert_eq!((verdict["verdict"].as_str(), verdict["accepted_attempt"].as_u64()), (Some("valid"), Some(attempt)));
    }
    let effect = json!({"dataset": "daily_units", "run": "r1", "effect": "notify", "payload": "done"});
    assert_eq!(s.call("POST", "/v1/effects/record", Some(effect), 200)["newly_recorded"], true);
    let published = s.call("POST", "/v1/publish", Some(json!({"dataset": "daily_units", "run": "r1"})), 200);
    assert_eq!((published["outcome"].as_str(), published["generation"]["number"].as_u64()), (Some("published"), Some(1)));
    assert_eq!(s.call("POST", "/v1/publish", Some(json!({"dataset": "daily_units", "run": "r1"})), 200)["outcome"], "already_published");
    let emitted = s.call("POST", "/v1/effects/mark-emitted", Some(json!({"dataset": "daily_units", "run": "r1", "effect": "notify"})), 200);
    assert_eq!(emitted["effect"]["status"], "emitted");
    assert_eq!(s.call("GET", "/v1/effects?dataset=daily_units&run=r1", None, 200)["effects"].as_array().unwrap().len(), 1);
    assert_eq!(s.call("GET", "/v1/current?dataset=daily_units", None, 200)["generation"]["number"], 1);
    let manifest = s.call("GET", "/v1/manifest?dataset=daily_units", None, 200);
    assert_eq!(
        manifest["totals"],
        json!({"partitions": 2, "rows": 4, "total": 1400, "files": 2, "bytes": manifest["totals"]["bytes"], "reported_partitions": 2})
    );
    // The run declares no grain: its figures are the workers', said so per partition.
    assert!(manifest["partitions"].as_array().unwrap().iter().all(|p| p["figures"] == "reported"), "{manifest}");
    assert_eq!(s.call("GET", "/v1/history?dataset=daily_units", None, 200)["datasets"][0]["generations"].as_array().unwrap().len(), 1);
    assert_eq!(s.call("GET", "/v1/diff?dataset=daily_units&from=1&to=1", None, 200)["unchanged"], 2);
    let run = s.call("GET", "/v1/runs/show?dataset=daily_units&run=r1", None, 200);
    assert_eq!(run["published_generation"], 1);
    assert_eq!(s.call("GET", "/v1/datasets", None, 200)["datasets"][0]["dataset"], "daily_units");
    assert!(s.call("GET", "/v1/stats", None, 200)["tables"]["attempts"].as_u64().unwrap() >= 2);
    assert_eq!(s.call("GET", "/v1/health", None, 200)["status"], "serving");

    // Errors carry the tool's kinds and statuses.
    let not_found = s.call("GET", "/v1/manifest?dataset=nope", None, 404);
    assert_eq!(not_found["error"]["kind"], "not_found");
    let conflict = s.call(
        "POST",
        "/v1/runs/declare",
        Some(
            json!({"dataset": "daily_units", "run": "r1", "snapshot": "other", "trust_reported_figures": true, "tasks": [{"partition": "region=eu", "expected_rows": 2}]}),
        ),
        409,
    );
    assert_eq!((conflict["error"]["kind"].as_str(), conflict["error"]["exit_code"].as_u64()), (Some("conflict"), Some(5)));

    // Shutting down removes the socket and leaves the store with its owner, still usable.
    let socket = match s.client.target() {
        Listen::Unix(path) => path.clone(),
        other => panic!("{other:?}"),
    };
    s.server.take().expect("server").shutdown().expect("shut down");
    assert!(!socket.exists(), "the socket is removed at shutdown");
    assert_eq!(s.store.snapshot().unwrap().current("daily_units").unwrap().unwrap().number, 1);
}

/// Declares `daily/r1` with partitions `p=0..n` (one expected row each, no grain) through the
/// server.
fn declare_run(s: &mut Served, n: usize) {
    let tasks: Vec<Value> = (0..n).map(|i| json!({"partition": format!("p={i}"), "expected_rows": 1})).collect();
    s.call(
        "POST",
        "/v1/runs/declare",
        Some(json!({"dataset": "daily", "run": "r1", "snapshot": "s1", "tasks": tasks, "trust_reported_figures": true})),
        200,
    );
}

#[test]
fn a_batch_runs_every_operation_with_its_own_result_and_a_refused_one_fails_alone() {
    let mut s = Served::new();
    declare_run(&mut s, 3);
    let ops = json!({"ops": [
        {"op": "begin", "dataset": "daily", "run": "r1", "partition": "p=0"},
        {"op": "begin", "dataset": "daily", "run": "r1", "partition": "p=9"},
        {"op": "begin", "dataset": "daily", "run": "r1", "partition": "p=1"},
        {"op": "no_such_op"},
        {"op": "finish", "dataset": "daily", "run": "r1", "partition": "p=0", "attempt": 1,
         "candidate": {"snapshot": "s1", "rows": 1, "digest": "d0"}},
    ]});
    let answer = s.call("POST", "/v1/batch", Some(ops), 200);
    assert_eq!(answer["ok"], false, "{answer}");
    let results = answer["results"].as_array().expect("results");
    assert_eq!(results.len(), 5);
    let summary: Vec<(u64, &str, bool)> =
        results.iter().map(|r| (r["line"].as_u64().unwrap(), r["op"].as_str().unwrap_or("-"), r["ok"].as_bool().unwrap())).collect();
    assert_eq!(summary, [(1, "begin", true), (2, "begin", false), (3, "begin", true), (4, "-", false), (5, "finish", true)], "{answer}");
    assert_eq!(results[0]["result"]["attempt"], 1);
    assert_eq!(results[1]["error"]["kind"], "not_found", "an unknown task is refused alone: {answer}");
    assert_eq!(results[3]["error"]["kind"], "usage");
    assert_eq!(results[4]["result"]["outcome"], "recorded");
    // The accepted operations are in the store; the refused one wrote nothing.
    let snapshot = s.store.snapshot().unwrap();
    assert_eq!(snapshot.attempts(&TaskKey::new("daily", "r1", "p=0")).unwrap()[0].status, manifestdb::AttemptStatus::Finished);
    assert_eq!(snapshot.attempts(&TaskKey::new("daily", "r1", "p=1")).unwrap().len(), 1);
    assert!(snapshot.attempts(&TaskKey::new("daily", "r1", "p=2")).unwrap().is_empty());
    drop(snapshot);
    // The single routes read a batch operation's fields without its tag.
    let op_tag =
        s.call("POST", "/v1/attempts/begin", Some(json!({"op": "begin", "dataset": "daily", "run": "r1", "partition": "p=2"})), 400);
    assert_eq!(op_tag["error"]["kind"], "usage");
    let too_many: Vec<Value> = (0..=manifestdb::BATCH_OPS_MAX).map(|_| json!({"op": "begin"})).collect();
    assert_eq!(s.call("POST", "/v1/batch", Some(json!({"ops": too_many})), 400)["error"]["kind"], "usage");
}

/// Publishes `daily/r1` (one partition) with an effect `notify` recorded, through the server.
fn publish_with_effect(s: &mut Served) {
    declare_run(s, 1);
    let task = json!({"dataset": "daily", "run": "r1", "partition": "p=0"});
    let attempt = s.call("POST", "/v1/attempts/begin", Some(task.clone()), 200)["attempt"].clone();
    let mut finish = task.clone();
    finish["attempt"] = attempt.clone();
    finish["candidate"] = json!({"snapshot": "s1", "rows": 1, "digest": "d0"});
    s.call("POST", "/v1/attempts/finish", Some(finish), 200);
    let mut validate = task;
    validate["attempt"] = attempt;
    assert_eq!(s.call("POST", "/v1/attempts/validate", Some(validate), 200)["verdict"], "valid");
    s.call("POST", "/v1/effects/record", Some(json!({"dataset": "daily", "run": "r1", "effect": "notify", "payload": "hi"})), 200);
}

#[test]
fn effect_claims_through_the_server_let_one_emitter_emit_once() {
    let mut s = Served::new();
    publish_with_effect(&mut s);
    let key = json!({"dataset": "daily", "run": "r1", "effect": "notify"});
    let with = |extra: Value| {
        let mut body = key.clone();
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    // Not ready before the publish: an error (409), not a refusal.
    let early = s.call("POST", "/v1/effects/claim", Some(with(json!({"claimant": "a", "lease_ms": 60_000}))), 409);
    assert_eq!(early["error"]["kind"], "conflict");
    s.call("POST", "/v1/publish", Some(json!({"dataset": "daily", "run": "r1"})), 200);

    let first = s.call("POST", "/v1/effects/claim", Some(with(json!({"claimant": "a", "lease_ms": 60_000}))), 200);
    assert_eq!((first["outcome"].as_str(), &first["took_over_from"]), (Some("claimed"), &Value::Null));
    assert_eq!(first["effect"]["claim"]["claimant"], "a");
    // A second claim within the lease is refused as a value.
    let second = s.call("POST", "/v1/effects/claim", Some(with(json!({"claimant": "b", "lease_ms": 60_000}))), 200);
    assert_eq!(second["outcome"], "held_by_other");
    assert_eq!(second["effect"]["claim"]["claimant"], "a");
    // Only the claimant marks it emitted.
    let by_other = s.call("POST", "/v1/effects/mark-emitted", Some(with(json!({"claimant": "b"}))), 200);
    assert_eq!((by_other["outcome"].as_str(), by_other["effect"]["status"].as_str()), (Some("claimed_by_other"), Some("ready")));
    let marked = s.call("POST", "/v1/effects/mark-emitted", Some(with(json!({"claimant": "a"}))), 200);
    assert_eq!((marked["outcome"].as_str(), marked["effect"]["status"].as_str()), (Some("marked"), Some("emitted")));
    // Marking again, or claiming an emitted effect, says it was already emitted.
    assert_eq!(s.call("POST", "/v1/effects/mark-emitted", Some(with(json!({"claimant": "a"}))), 200)["outcome"], "already_emitted");
    assert_eq!(
        s.call("POST", "/v1/effects/claim", Some(with(json!({"claimant": "b", "lease_ms": 60_000}))), 200)["outcome"],
        "already_emitted"
    );
}

#[test]
fn an_expired_claim_is_taken_over_through_the_server() {
    let mut s = Served::new();
    publish_with_effect(&mut s);
    s.call("POST", "/v1/publish", Some(json!({"dataset": "daily", "run": "r1"})), 200);
    let claim = |claimant: &str, lease_ms: u64| json!({"dataset": "daily", "run": "r1", "effect": "notify", "claimant": claimant, "lease_ms": lease_ms});
    assert_eq!(s.call("POST", "/v1/effects/claim", Some(claim("crashed", 1)), 200)["outcome"], "claimed");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let taken = s.call("POST", "/v1/effects/claim", Some(claim("b", 60_000)), 200);
    assert_eq!((taken["outcome"].as_str(), taken["took_over_from"].as_str()), (Some("claimed"), Some("crashed")));
    // The expired claimant may no longer mark it; the new one does.
    let mark = |claimant: &str| json!({"dataset": "daily", "run": "r1", "effect": "notify", "claimant": claimant});
    assert_eq!(s.call("POST", "/v1/effects/mark-emitted", Some(mark("crashed")), 200)["outcome"], "claimed_by_other");
    assert_eq!(s.call("POST", "/v1/effects/mark-emitted", Some(mark("b")), 200)["outcome"], "marked");
    // The same operations in a batch answer the same documents.
    let batch = s.call(
        "POST",
        "/v1/batch",
        Some(json!({"ops": [{"op": "mark_emitted", "dataset": "daily", "run": "r1", "effect": "notify"}]})),
        200,
    );
    assert_eq!(batch["results"][0]["result"]["outcome"], "already_emitted");
}

#[test]
fn the_operator_and_read_routes_answer_in_the_documented_shapes() {
    let mut s = Served::new();
    declare_run(&mut s, 2);
    let ticket = s.call("POST", "/v1/attempts/begin", Some(json!({"dataset": "daily", "run": "r1", "partition": "p=0"})), 200);
    let key = json!({"dataset": "daily", "run": "r1", "partition": "p=0", "attempt": ticket["attempt"]});
    let shown = s.call("GET", "/v1/attempts/show?dataset=daily&run=r1&partition=p%3D0&attempt=1", None, 200);
    assert_eq!((shown["status"].as_str(), shown["staging_dir"].as_str()), (Some("running"), ticket["staging_dir"].as_str()));
    assert_eq!(s.call("GET", "/v1/attempts?dataset=daily&run=r1", None, 200)["attempts"].as_array().map(Vec::len), Some(1));
    assert_eq!(s.call("GET", "/v1/runs?dataset=daily", None, 200)["runs"][0]["state"], "open");
    assert_eq!(s.call("POST", "/v1/attempts/abandon", Some(key.clone()), 200)["outcome"], "abandoned");
    assert_eq!(s.call("POST", "/v1/attempts/abandon", Some(key), 200)["outcome"], "already_abandoned");
    let plan = s.call("POST", "/v1/gc/plan", Some(json!({})), 200);
    assert_eq!(s.call("GET", &format!("/v1/gc/plan?plan={}", plan["plan"]), None, 200)["plan"], plan["plan"]);
    s.call("GET", "/v1/gc/plan?plan=99", None, 404);
    assert_eq!(s.call("POST", "/v1/gc/apply", Some(json!({"plan": plan["plan"]})), 200)["mode"], "dry_run");
    assert_eq!(s.call("POST", "/v1/gc/abandon", Some(json!({"execute": false})), 200)["mode"], "dry_run");
    s.call("POST", "/v1/rollback", Some(json!({"dataset": "nope", "to": 1, "actor": "a", "reason": "r"})), 404);
    let refused = s.call("POST", "/v1/rollback", Some(json!({"dataset": "daily", "to": 1, "actor": "a", "reason": "r"})), 200);
    assert_eq!((refused["outcome"].as_str(), refused["refusal"]["kind"].as_str()), (Some("refused"), Some("unknown")));
    s.call("POST", "/v1/views/sync", Some(json!({})), 404);
    s.call("POST", "/v1/verify", Some(json!({"files": "everything"})), 400);
    // The embedding program holds the store too, so redb's check cannot have it alone: the
    // report says so, and everything else is verified.
    let report = s.call("POST", "/v1/verify", Some(json!({"files": "checksums", "integrity": true})), 200);
    assert_eq!((report["clean"].as_bool(), report["integrity"]["status"].as_str()), (Some(true), Some("skipped")));
    assert!(report["integrity"]["detail"].as_str().is_some_and(|d| d.contains("embeds")), "{report}");
    // A payload of any bytes, as hexadecimal digits, comes back byte for byte.
    let recorded = s.call(
        "POST",
        "/v1/effects/record",
        Some(json!({"dataset": "daily", "run": "r1", "effect": "blob", "payload_hex": "ff00fe"})),
        200,
    );
    assert_eq!((recorded["effect"]["payload"].clone(), recorded["effect"]["payload_hex"].as_str()), (Value::Null, Some("ff00fe")));
    s.call("POST", "/v1/effects/record", Some(json!({"dataset": "daily", "run": "r1", "effect": "bad", "payload_hex": "f"})), 400);
}

#[test]
fn finish_and_validate_stores_the_candidate_and_its_verdict_in_one_request() {
    let mut s = Served::new();
    declare_run(&mut s, 2);
    let mut attempts = Vec::new();
    for partition in ["p=0", "p=1"] {
        let task = json!({"dataset": "daily", "run": "r1", "partition": partition});
        let ticket = s.call("POST", "/v1/attempts/begin", Some(task.clone()), 200);
        let dir = std::path::PathBuf::from(ticket["staging_dir"].as_str().unwrap());
        let file = crate::support::write_rows(&dir, 1, 5);
        let mut body = task;
        body["attempt"] = ticket["attempt"].clone();
        body["candidate"] = json!({"snapshot": "s1", "rows": 1, "digest": "d", "files": [serde_json::to_value(&file).unwrap()]});
        attempts.push(body);
    }
    // A valid candidate: recorded and accepted by one request.
    let mut valid = attempts[0].clone();
    valid["checksums"] = json!(true);
    let verdict = s.call("POST", "/v1/attempts/finish-and-validate", Some(valid.clone()), 200);
    assert_eq!((verdict["verdict"].as_str(), verdict["accepted_attempt"].as_u64()), (Some("valid"), Some(1)), "{verdict}");
    let key = TaskKey::new("daily", "r1", "p=0").attempt(1);
    let info = s.store.snapshot().unwrap().attempt(&key).unwrap().expect("the attempt");
    assert!(matches!(info.status, manifestdb::AttemptStatus::Validated(manifestdb::Verdict::Valid)), "{:?}", info.status);
    // Again with the same candidate: the stored verdict. Another candidate: a conflict.
    assert_eq!(s.call("POST", "/v1/attempts/finish-and-validate", Some(valid.clone()), 200)["verdict"], "valid");
    let mut other = valid;
    other["candidate"]["digest"] = json!("another");
    assert_eq!(s.call("POST", "/v1/attempts/finish-and-validate", Some(other), 409)["error"]["kind"], "conflict");
    // A candidate that does not meet the task's expectations: an invalid verdict, an outcome.
    let mut invalid = attempts[1].clone();
    invalid["candidate"]["rows"] = json!(2);
    let verdict = s.call("POST", "/v1/attempts/finish-and-validate", Some(invalid), 200);
    assert_eq!(verdict["verdict"], "invalid", "{verdict}");
    // An unknown field is refused, as on every route.
    let mut extra = attempts[1].clone();
    extra["describe"] = json!(["part.csv"]);
    assert_eq!(s.call("POST", "/v1/attempts/finish-and-validate", Some(extra), 400)["error"]["kind"], "usage");
}

//! `manifestdb batch`: newline-delimited JSON operations on stdin, one result line each.

use std::io::Write;
use std::process::Stdio;

use serde_json::{Value, json};

use crate::support::{Env, Run, command, write_rows};

const EU: &str = "date=2026-11-29/region=eu";
const US: &str = "date=2026-11-29/region=us";

/// Runs `manifestdb --dir <store> batch` with `input` on stdin.
pub fn batch(env: &Env, input: &str) -> Run {
    let mut child = command()
        .args(env.store_args())
        .arg("batch")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start manifestdb batch");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write stdin");
    let output = child.wait_with_output().expect("wait for manifestdb batch");
    Run {
        code: output.status.code().expect("exited"),
        stdout: String::from_utf8(output.stdout).expect("UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8"),
    }
}

fn lines(run: &Run) -> Vec<Value> {
    run.stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"))).collect()
}

#[test]
fn a_batch_prints_one_result_line_per_operation_in_order_and_a_bad_line_fails_alone() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700), (US, 1, 5)]);
    let begin = |p: &str| json!({"op": "begin", "dataset": "daily", "run": "r1", "partition": p}).to_string();
    let input = [
        begin(EU),
        "{not json".to_owned(),
        String::new(),
        begin("date=nope"),
        begin(EU),
        json!({"op": "publish", "dataset": "daily", "run": "r1"}).to_string(),
        begin(US),
    ]
    .join("\n");
    let run = batch(&env, &input);
    run.code(3);
    let results = lines(&run);
    let numbers: Vec<u64> = results.iter().map(|r| r["line"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [1, 2, 4, 5, 6, 7], "one line per non-blank input line, in order");
    let ok: Vec<bool> = results.iter().map(|r| r["ok"].as_bool().unwrap()).collect();
    assert_eq!(ok, [true, false, false, true, false, true]);
    assert_eq!(results[0]["result"]["attempt"], 1);
    assert_eq!(results[3]["result"]["attempt"], 2);
    assert_eq!(results[5]["result"]["attempt"], 1);
    assert_eq!((results[1]["op"].clone(), results[1]["error"]["kind"].as_str()), (Value::Null, Some("usage")));
    assert_eq!((results[2]["op"].as_str(), results[2]["error"]["kind"].as_str()), (Some("begin"), Some("not_found")));
    assert!(results[2]["error"]["message"].as_str().unwrap().contains("date=nope"));
    assert_eq!(results[4]["error"]["kind"], "usage");
    // What the batch acknowledged is in the store.
    let attempts = env.json(&["attempt", "list", "-d", "daily", "-r", "r1"]).code(0).json();
    assert_eq!(attempts["attempts"].as_array().map(Vec::len), Some(3));
}

#[test]
fn a_whole_run_can_be_driven_through_batches() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700), (US, 1, 5)]);
    let begun =
        batch(&env, &[EU, US].map(|p| json!({"op": "begin", "dataset": "daily", "run": "r1", "partition": p}).to_string()).join("\n"));
    begun.code(0);
    let begun = lines(&begun);
    let mut finishes = Vec::new();
    let mut validations = Vec::new();
    for (line, (p, rows, total)) in begun.iter().zip([(EU, 2u64, 700i64), (US, 1, 5)]) {
        let dir = std::path::PathBuf::from(line["result"]["staging_dir"].as_str().unwrap());
        write_rows(&dir, rows, total);
        let file = manifestdb::describe_file(&dir, "part.csv").unwrap();
        let candidate = json!({
            "snapshot": "s1", "rows": rows, "total": total, "digest": format!("rows={rows};total={total}"),
            "files": [{"path": file.path, "size_bytes": file.size_bytes, "crc32": file.crc32}],
        });
        finishes.push(
            json!({"op": "finish", "dataset": "daily", "run": "r1", "partition": p, "attempt": 1, "candidate": candidate}).to_string(),
        );
        validations
            .push(json!({"op": "validate", "dataset": "daily", "run": "r1", "partition": p, "attempt": 1, "checksums": true}).to_string());
    }
    let finished = batch(&env, &finishes.join("\n"));
    finished.code(0);
    assert!(lines(&finished).iter().all(|l| l["result"]["outcome"] == "recorded"), "{}", finished.stdout);
    let validated = batch(&env, &validations.join("\n"));
    validated.code(0);
    assert!(lines(&validated).iter().all(|l| l["result"]["verdict"] == "valid"), "{}", validated.stdout);
    env.run(&["publish", "-d", "daily", "-r", "r1"]).code(0);
    let shown = env.json(&["show", "-d", "daily"]).code(0).json();
    assert_eq!((shown["totals"]["rows"].as_u64(), shown["totals"]["total"].as_i64()), (Some(3), Some(705)));
}

/// Issue 32, item 12: a validate after the finish of the same attempt in one batch would fail
/// as not found although its finish succeeds; the batch is refused up front (exit 2, naming
/// both lines) and nothing of it runs. The same validate in a later batch works.
#[test]
fn a_validate_after_its_finish_in_one_batch_is_refused_up_front_and_works_in_the_next() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    let begun = batch(&env, &json!({"op": "begin", "dataset": "daily", "run": "r1", "partition": EU}).to_string());
    begun.code(0);
    let dir = std::path::PathBuf::from(lines(&begun)[0]["result"]["staging_dir"].as_str().unwrap());
    write_rows(&dir, 2, 700);
    let file = manifestdb::describe_file(&dir, "part.csv").unwrap();
    let candidate = json!({
        "snapshot": "s1", "rows": 2, "total": 700, "digest": "rows=2;total=700",
        "files": [{"path": file.path, "size_bytes": file.size_bytes, "crc32": file.crc32}],
    });
    let finish = json!({"op": "finish", "dataset": "daily", "run": "r1", "partition": EU, "attempt": 1, "candidate": candidate});
    let validate = json!({"op": "validate", "dataset": "daily", "run": "r1", "partition": EU, "attempt": 1});
    let begin_us = json!({"op": "begin", "dataset": "daily", "run": "r1", "partition": EU});
    let refused = batch(&env, &[begin_us.to_string(), finish.to_string(), String::new(), validate.to_string()].join("\n"));
    refused.code(2);
    assert!(refused.stderr.contains("line 4 validates the attempt that line 2 finishes"), "{}", refused.stderr);
    assert!(refused.stdout.is_empty(), "nothing ran: {}", refused.stdout);
    assert!(!dir.with_file_name("@attempt-2").exists(), "the refused batch's begin did not run");
    let finished = batch(&env, &finish.to_string());
    finished.code(0);
    assert_eq!(lines(&finished)[0]["result"]["outcome"], "recorded", "the refused batch's finish did not run: {}", finished.stdout);
    let validated = batch(&env, &validate.to_string());
    validated.code(0);
    assert_eq!(lines(&validated)[0]["result"]["verdict"], "valid", "{}", validated.stdout);
}

crate::support::through_a_server!(
    a_validate_after_its_finish_in_one_batch_is_refused_up_front_and_works_in_the_next,
    a_batch_prints_one_result_line_per_operation_in_order_and_a_bad_line_fails_alone,
    a_whole_run_can_be_driven_through_batches,
);

/// The batch of the CLI chapter (`docs/src/cli.md`, "Many operations at once"), run as printed
/// on the state its text describes: every line succeeds (the rule that refuses a validate of an
/// attempt the same batch finishes accepts it), and its finish's figures are the file's real
/// ones (attempt 2 validates valid with checksums afterwards).
#[test]
fn the_cli_chapters_batch_example_runs_as_printed() {
    let chapter = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/cli.md")).expect("cli.md");
    let start = chapter.find("manifestdb batch <<'EOF'\n").expect("the batch example") + "manifestdb batch <<'EOF'\n".len();
    let input = &chapter[start..start + chapter[start..].find("\nEOF\n").expect("its end") + 1];
    let env = Env::new();
    let declare = |run: &str, snapshot: &str, tasks: &[&str]| {
        let mut args =
            vec!["run", "declare", "-d", "daily", "-r", run, "--snapshot", snapshot, "--grain", "store,item", "--measure", "units"];
        for task in tasks {
            args.extend(["--task", task]);
        }
        env.run(&args).code(0);
    };
    let part = "store,item,units\n1,7,300\n2,7,400\n";
    let attempt = |run: &str, snapshot: &str, partition: &str, finish: bool| {
        let doc = env.json(&["attempt", "begin", "-d", "daily", "-r", run, "-p", partition]).code(0).json();
        let dir = std::path::PathBuf::from(doc["staging_dir"].as_str().expect("staging_dir"));
        std::fs::write(dir.join("part.csv"), part).expect("write part.csv");
        let n = doc["attempt"].to_string();
        if finish {
            env.run(&["attempt", "finish", "-d", "daily", "-r", run, "-p", partition, "-a", &n, "--snapshot", snapshot, "--scan"]).code(0);
        }
        n
    };
    // Run r0 published, its `notify` effect recorded (ready to claim).
    declare("r0", "sales@v41", &["date=2026-11-28/region=eu:2:700"]);
    env.run(&["effects", "record", "-d", "daily", "-r", "r0", "-e", "notify", "--payload", "done"]).code(0);
    let n = attempt("r0", "sales@v41", "date=2026-11-28/region=eu", true);
    env.run(&["attempt", "validate", "-d", "daily", "-r", "r0", "-p", "date=2026-11-28/region=eu", "-a", &n]).code(0);
    env.run(&["publish", "-d", "daily", "-r", "r0"]).code(0);
    // Run r1: eu's attempt 1 finished, attempt 2 written, not finished.
    declare("r1", "sales@v42", &[EU, US].map(|p| format!("{p}:2:700")).iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(attempt("r1", "sales@v42", EU, true), "1");
    assert_eq!(attempt("r1", "sales@v42", EU, false), "2");

    let run = batch(&env, input);
    run.code(0);
    let lines: Vec<Value> = run.stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines.len(), 6, "{}", run.stdout);
    assert!(lines.iter().all(|l| l["ok"] == true), "{}", run.stdout);
    assert_eq!(lines[2]["result"]["verdict"], "valid", "{}", run.stdout);
    let validated = env.json(&["attempt", "validate", "-d", "daily", "-r", "r1", "-p", EU, "-a", "2", "--checksums"]).code(0).json();
    assert_eq!(validated["verdict"], "valid", "the finish's size, CRC32 and digest are the file's: {validated}");
    assert_eq!(validated["reconciliation"]["reported"]["digest"], validated["reconciliation"]["computed"]["digest"]);
}

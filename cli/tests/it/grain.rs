//! A run with a declared grain through the tool: `run declare --grain`, `attempt finish`
//! without figures, `attempt validate` printing computed figures beside the expected ones.

use crate::support::Env;

const EU: &str = "date=2026-11-29/region=eu";

fn finish_args<'a>(attempt: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["attempt", "finish", "-d", "daily", "-r", "r1", "-p", EU, "-a", attempt, "--snapshot", "s1", "--scan"];
    args.extend_from_slice(extra);
    args
}

#[test]
fn a_grain_run_needs_no_reported_figures_and_validation_shows_what_it_computed() {
    let env = Env::new();
    let declared = env
        .json(&[
            "run",
            "declare",
            "-d",
            "daily",
            "-r",
            "r1",
            "--snapshot",
            "s1",
            "--task",
            &format!("{EU}:2:700"),
            "--grain",
            "store,item",
            "--measure",
            "units",
            "--format",
            "csv",
        ])
        .code(0)
        .json();
    assert_eq!(declared["grain"], serde_json::json!({ "format": "csv", "keys": ["store", "item"], "measure": "units", "scale": 0 }));

    // Attempt 1 repeats a key under the expected counts, reported as such: refused (exit 3).
    let (attempt, dir) = env.begin("r1", EU);
    std::fs::write(dir.join("part.csv"), "store,item,units\n1,7,300\n1,7,400\n").unwrap();
    env.run(&finish_args(&attempt.to_string(), &["--rows", "2", "--total", "700"])).code(0);
    let verdict = env.json(&["attempt", "validate", "-d", "daily", "-r", "r1", "-p", EU, "-a", &attempt.to_string()]).code(3).json();
    assert_eq!(verdict["failures"][0]["kind"], "duplicate_grain_key", "{verdict}");
    assert_eq!(verdict["failures"][0]["key"], serde_json::json!(["1", "7"]));
    assert_eq!(verdict["reconciliation"]["basis"], "read_csv");
    assert_eq!(verdict["reconciliation"]["computed"]["rows"], 2);
    assert_eq!(verdict["reconciliation"]["reported"]["rows"], 2);

    // Attempt 2 reports nothing but its files; the store computes and publishes its figures.
    let (attempt, dir) = env.begin("r1", EU);
    std::fs::write(dir.join("part.csv"), "store,item,units\n1,7,300\n2,7,400\n").unwrap();
    env.run(&finish_args(&attempt.to_string(), &[])).code(0);
    let text = env.run(&["attempt", "validate", "-d", "daily", "-r", "r1", "-p", EU, "-a", &attempt.to_string()]).code(0).stdout.clone();
    assert!(text.contains("figures: checked: read from 1 csv file, "), "{text}");
    assert!(text.contains("ms256:2:"), "the computed digest is shown: {text}");
    env.run(&["publish", "-d", "daily", "-r", "r1"]).code(0);
    let shown = env.json(&["show", "-d", "daily"]).code(0).json();
    let digest = shown["partitions"][0]["digest"].as_str().unwrap_or_default().to_owned();
    assert!(digest.starts_with("ms256:2:"), "{shown}");
}

#[test]
fn finishing_without_figures_is_refused_for_a_run_without_a_grain() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    let (attempt, dir) = env.begin("r1", EU);
    std::fs::write(dir.join("part.csv"), "store,units\n1,300\n2,400\n").unwrap();
    let stderr = env.run(&finish_args(&attempt.to_string(), &[])).code(2).stderr.clone();
    assert!(stderr.contains("declares no grain"), "{stderr}");
}

crate::support::through_a_server!(
    a_grain_run_needs_no_reported_figures_and_validation_shows_what_it_computed,
    finishing_without_figures_is_refused_for_a_run_without_a_grain,
);

#[test]
fn the_unchecked_path_is_chosen_in_words_and_every_output_of_its_figures_says_so() {
    let env = Env::new();
    // Neither a grain nor the opt-out: refused, saying what to choose. Nothing is declared.
    let refused = env.json(&["run", "declare", "-d", "daily", "-r", "r1", "--snapshot", "s1", "--task", &format!("{EU}:5")]);
    refused.code(2);
    let message = refused.error_json()["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("--grain") && message.contains("--trust-reported-figures"), "{message}");
    env.run(&["run", "show", "-d", "daily", "-r", "r1"]).code(4);
    // The same through --from: the document must say it too; a grain and the opt-out together
    // contradict each other.
    let from = env.tmp.path().join("run.json");
    let run = serde_json::json!({"dataset": "daily", "run": "r1", "snapshot": "s1", "tasks": [{"partition": EU, "expected_rows": 5}]});
    std::fs::write(&from, run.to_string()).unwrap();
    let refused = env.json(&["run", "declare", "--from", from.to_str().unwrap()]);
    refused.code(2);
    assert!(refused.error_json()["error"]["message"].as_str().unwrap().contains("trust_reported_figures"), "{}", refused.stderr);
    let mut both = run.clone();
    both["trust_reported_figures"] = true.into();
    both["grain"] = serde_json::json!({"keys": ["store"], "measure": "units"});
    std::fs::write(&from, both.to_string()).unwrap();
    env.run(&["run", "declare", "--from", from.to_str().unwrap()]).code(2);

    // Declared in words: a 0-byte file reported as 5 rows validates and publishes, and every
    // output showing those figures says they were reported, not checked.
    let declared = env.run(&[
        "run",
        "declare",
        "--trust-reported-figures",
        "-d",
        "daily",
        "-r",
        "r1",
        "--snapshot",
        "s1",
        "--task",
        &format!("{EU}:5"),
    ]);
    assert!(declared.code(0).stdout.contains("reported, not checked"), "{}", declared.stdout);
    let (attempt, dir) = env.begin("r1", EU);
    std::fs::write(dir.join("part.csv"), "").unwrap();
    let n = attempt.to_string();
    env.run(&[
        "attempt",
        "finish",
        "-d",
        "daily",
        "-r",
        "r1",
        "-p",
        EU,
        "-a",
        &n,
        "--snapshot",
        "s1",
        "--rows",
        "5",
        "--digest",
        "d",
        "--scan",
    ])
    .code(0);
    let validated = env.run(&["attempt", "validate", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n]);
    assert!(validated.code(0).stdout.contains("figures: reported, not checked"), "{}", validated.stdout);
    env.run(&["publish", "-d", "daily", "-r", "r1"]).code(0);
    let shown = env.json(&["show", "-d", "daily"]).code(0).json();
    assert_eq!(shown["partitions"][0]["figures"], "reported");
    assert_eq!(shown["totals"]["reported_partitions"], 1);
    for args in [&["show", "-d", "daily"][..], &["run", "show", "-d", "daily", "-r", "r1"], &["stats"], &["diff", "-d", "daily", "1", "1"]]
    {
        let out = env.run(args);
        out.code(0);
        if args[0] != "diff" {
            assert!(out.stdout.contains("reported, not checked"), "{args:?}:\n{}", out.stdout);
        }
    }
    assert_eq!(env.json(&["stats"]).code(0).json()["datasets"][0]["reported_partitions"], 1);

    // A run with a grain: its figures are computed, and said to be checked.
    let declared = env.run(&[
        "run",
        "declare",
        "-d",
        "daily",
        "-r",
        "r2",
        "--snapshot",
        "s2",
        "--task",
        &format!("{EU}:1:300"),
        "--grain",
        "store,item",
        "--measure",
        "units",
    ]);
    declared.code(0);
    let (attempt, dir) = env.begin("r2", EU);
    std::fs::write(dir.join("part.csv"), "store,item,units\n1,7,300\n").unwrap();
    env.run(&finish_args_for("r2", &attempt.to_string())).code(0);
    env.run(&["attempt", "validate", "-d", "daily", "-r", "r2", "-p", EU, "-a", &attempt.to_string()]).code(0);
    env.run(&["publish", "-d", "daily", "-r", "r2"]).code(0);
    let shown = env.json(&["show", "-d", "daily"]).code(0).json();
    assert_eq!((shown["partitions"][0]["figures"].as_str(), shown["totals"]["reported_partitions"].as_u64()), (Some("computed"), Some(0)));
    let diff = env.json(&["diff", "-d", "daily", "1", "2"]).code(0).json();
    assert_eq!(
        (diff["replaced"][0]["from"]["figures"].as_str(), diff["replaced"][0]["to"]["figures"].as_str()),
        (Some("reported"), Some("computed"))
    );
    assert!(!env.run(&["show", "-d", "daily"]).stdout.contains("reported, not checked"));
}

fn finish_args_for<'a>(run: &'a str, attempt: &'a str) -> Vec<&'a str> {
    vec!["attempt", "finish", "-d", "daily", "-r", run, "-p", EU, "-a", attempt, "--snapshot", "s2", "--scan"]
}

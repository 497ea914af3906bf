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

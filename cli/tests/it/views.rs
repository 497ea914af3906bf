//! `--views`, `view` and `view sync`, and absolute paths in `show --json`.

use std::path::Path;

use crate::support::{Env, command, finish, read_rows};

const EU: &str = "date=2026-11-29/region=eu";
const US: &str = "date=2026-11-29/region=us";

#[test]
fn views_flag_publishes_a_view_that_view_prints() {
    let env = Env::new();
    let views = env.tmp.path().join("views");
    // The first --views records the view root in the store; later calls need not repeat it.
    env.run(&["--views", views.to_str().unwrap(), "init"]).code(0);
    env.declare("r1", "s1", &[(EU, 2, 700), (US, 1, 5)]);
    // The lost acknowledgement: two valid attempts of EU.
    env.attempt("r1", "s1", EU, 2, 700).code(0);
    env.attempt("r1", "s1", EU, 2, 700).code(0);
    env.attempt("r1", "s1", US, 1, 5).code(0);
    env.run(&["publish", "-d", "daily", "-r", "r1"]).code(0);
    let current = views.join("daily/current");
    assert_eq!(read_rows(&current.join(EU).join("part.csv")), (2, 700));
    assert_eq!(std::fs::read_dir(current.join("date=2026-11-29")).unwrap().count(), 2);

    let doc = env.json(&["view", "daily"]).code(0).json();
    assert_eq!(doc["view_generation"], 1);
    assert_eq!(doc["store_generation"], 1);
    assert_eq!(doc["lagging"], false);
    assert_eq!(Path::new(doc["current"].as_str().unwrap()), std::fs::canonicalize(&views).unwrap().join("daily/current"));
    assert!(doc["path"].as_str().unwrap().ends_with("daily/v1"));
    let manifest = &doc["manifest"];
    assert_eq!(manifest["schema"], "manifestdb.view.manifest");
    assert_eq!(manifest["schema_version"], 1);
    assert_eq!(manifest["totals"]["total"], 705);
    assert_eq!(manifest["partitions"][0]["attempt"], 1);
    assert_eq!(manifest["partitions"][0]["files"][0]["path"], format!("{EU}/part.csv"));
    let text = env.run(&["view", "daily"]).code(0).stdout.clone();
    assert!(text.contains("daily/current") && text.contains("generation 1"), "{text}");

    let synced = env.json(&["view", "sync"]).code(0).json();
    assert_eq!(synced["synced"][0]["generation"], 1);
    assert_eq!(synced["synced"][0]["built"], false);
    // verify checks the views too: a removed link is a finding (exit 7).
    env.run(&["verify"]).code(0);
    std::fs::remove_file(views.join("daily/v1").join(US).join("part.csv")).unwrap();
    let report = env.json(&["verify"]).code(7).json();
    assert!(report.to_string().contains("missing"), "{report}");
    env.run(&["view", "nope"]).code(4);
}

#[test]
fn view_without_a_view_root_is_not_found() {
    let env = Env::new();
    env.publish_run("r1", "s1", &[(EU, 2, 700)]);
    let err = env.json(&["view", "daily"]).code(4).error_json();
    assert!(err["error"]["message"].as_str().unwrap().contains("--views"), "{err}");
    env.run(&["view", "sync"]).code(4);
}

#[test]
fn a_view_root_inside_the_staging_root_is_a_usage_error() {
    let env = Env::new();
    let inside = env.staging().join("views");
    let err = env.json(&["--views", inside.to_str().unwrap(), "init"]).code(2).error_json();
    assert!(err["error"]["message"].as_str().unwrap().contains("inside the staging root"), "{err}");
}

#[test]
fn show_json_gives_absolute_paths_with_a_relative_dir() {
    let env = Env::new();
    env.publish_run("r1", "s1", &[(EU, 2, 700)]);
    let mut cmd = command();
    cmd.current_dir(env.tmp.path());
    match &env.db {
        None => cmd.args(["--dir", "store"]),
        Some(db) => cmd.args(["--store", db.url.as_str(), "--staging", "store/staging"]),
    };
    let run = finish(cmd.args(["--json", "show", "-d", "daily"])).code(0).json();
    let partition = &run["partitions"][0];
    let dir = Path::new(partition["staging_dir"].as_str().unwrap());
    assert!(dir.is_absolute(), "{dir:?}");
    let file = Path::new(partition["files"][0]["absolute_path"].as_str().unwrap());
    assert!(file.is_absolute() && file.is_file(), "{file:?}");
    assert_eq!(read_rows(file), (2, 700));
}

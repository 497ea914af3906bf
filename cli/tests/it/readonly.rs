//! Read-only verbs work while another process holds the store open for writing.

use manifestdb::{Candidate, FileCheck, PublishOptions, PublishOutcome, RunSpec, Store, TaskKey, TaskSpec, describe_file};

use crate::support::{Env, write_rows};

const EU: &str = "date=2026-11-29/region=eu";

/// Publishes run `run` through the library on the held store: one task, one valid attempt.
fn publish(store: &Store, run: &str, total: i64) -> u64 {
    let spec = RunSpec {
        dataset: "daily".into(),
        run: run.into(),
        snapshot: format!("s-{run}"),
        tasks: vec![TaskSpec { partition: EU.into(), expected_rows: 2, expected_total: Some(total) }],
        grain: None,
        trust_reported_figures: true,
    };
    store.declare_run(&spec).expect("declare");
    let ticket = store.begin_attempt(&TaskKey::new("daily", run, EU)).expect("begin");
    write_rows(&ticket.staging_dir, 2, total);
    let candidate = Candidate {
        snapshot: spec.snapshot.clone(),
        rows: Some(2),
        total: Some(total),
        digest: Some(format!("total={total}")),
        files: vec![describe_file(&ticket.staging_dir, "part.csv").expect("describe")],
    };
    store.finish_attempt(&ticket.key, &candidate).expect("finish");
    assert!(store.validate_attempt(&ticket.key, FileCheck::SizeAndChecksum).expect("validate").is_valid());
    match store.publish("daily", run, &PublishOptions::default()).expect("publish") {
        PublishOutcome::Published(generation) => generation.number,
        other => panic!("not published: {other:?}"),
    }
}

#[test]
fn read_only_verbs_work_while_another_process_holds_the_store_for_writing() {
    let env = Env::new();
    // This test process is the scheduler: it holds the store open for writing throughout.
    let store = Store::open(env.db_path(), env.staging()).expect("open for writing");
    assert_eq!(publish(&store, "r1", 700), 1);
    store
        .record_effect(
            &manifestdb::EffectKey { dataset: "daily".into(), run: "r1".into(), effect: "notify".into(), partition: None },
            b"hi",
        )
        .expect("record effect");

    // The binary is a second process; each read-only verb opens the store read-only.
    let show = env.json(&["show", "-d", "daily"]).code(0).json();
    assert_eq!((show["generation"]["number"].as_u64(), show["totals"]["total"].as_i64()), (Some(1), Some(700)));
    env.run(&["show"]).code(0);
    env.run(&["log", "-d", "daily"]).code(0);
    env.run(&["run", "show", "-d", "daily", "-r", "r1"]).code(0);
    env.run(&["run", "list", "-d", "daily"]).code(0);
    env.run(&["attempt", "list", "-d", "daily", "-r", "r1"]).code(0);
    env.run(&["stats"]).code(0);
    assert_eq!(env.json(&["effects", "list", "-d", "daily", "--ready"]).code(0).json()["effects"][0]["effect"], "notify");

    // The writer publishes again, still holding the store; a new reader sees the new generation.
    assert_eq!(publish(&store, "r2", 800), 2);
    let show = env.json(&["show", "-d", "daily"]).code(0).json();
    assert_eq!((show["generation"]["number"].as_u64(), show["totals"]["total"].as_i64()), (Some(2), Some(800)));
    let diff = env.json(&["diff", "-d", "daily", "1", "2"]).code(0).json();
    assert_eq!(diff["replaced"][0]["to"]["run"], "r2");

    if crate::support::on_postgres() {
        // Many writers share a PostgreSQL store: a writing verb meanwhile runs, and finds the
        // run published.
        assert_eq!(env.json(&["publish", "-d", "daily", "-r", "r2"]).code(0).json()["outcome"], "already_published");
    } else {
        // A writing verb meanwhile is told the store is busy (exit 6), and changes nothing.
        env.run(&["publish", "-d", "daily", "-r", "r2"]).code(6);
    }
    drop(store);
}

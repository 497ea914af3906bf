//! What the tool says: an abandoned attempt in the library's words for every verb, an I/O
//! error while looking for the store as that error (never "no store"), no Rust `Debug` forms,
//! plurals that agree, and `attempt validate --pending`.

use crate::support::{Env, write_rows};

const EU: &str = "date=2026-11-29/region=eu";
const US: &str = "date=2026-11-29/region=us";

#[test]
fn an_attempt_an_operator_abandoned_is_reported_in_the_same_words_by_every_verb() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    let (attempt, dir) = env.begin("r1", EU);
    let n = attempt.to_string();
    env.run(&["attempt", "abandon", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n]).code(0);
    write_rows(&dir, 2, 700);
    let verbs: [&[&str]; 3] = [
        &["attempt", "heartbeat", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n],
        &["attempt", "finish", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n, "--snapshot", "s1", "--rows", "2", "--digest", "d"],
        &["attempt", "invalidate", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n, "--actor", "ops", "--reason", "lost"],
    ];
    for args in verbs {
        let run = env.json(args);
        run.code(5);
        let message = run.error_json()["error"]["message"].as_str().unwrap_or_default().to_owned();
        // An operator abandoned it: the message must not claim the lease ran out and nothing
        // else, and it says what can no longer happen.
        assert!(message.contains("was abandoned at "), "{args:?}: {message}");
        assert!(message.contains("or it was abandoned explicitly"), "{args:?}: {message}");
        assert!(message.contains("cannot finish, renew its lease or be validated"), "{args:?}: {message}");
        assert!(!message.contains("(its lease ran out);"), "{args:?}: {message}");
    }
}

#[test]
fn an_io_error_while_looking_for_the_store_is_that_error_not_no_store() {
    if crate::support::redb_only("the store file's path") {
        return;
    }
    let env = Env::empty();
    std::fs::create_dir_all(env.dir()).unwrap();
    // A store path that cannot be resolved (a symlink loop): not "no store at" (exit 4).
    let store = env.dir().join("store.redb");
    std::os::unix::fs::symlink(&store, &store).unwrap();
    for args in [&["show"][..], &["stats"], &["publish", "-d", "x", "-r", "y"], &["recover"]] {
        let run = env.json(args);
        run.code(1);
        let message = run.error_json()["error"]["message"].as_str().unwrap_or_default().to_owned();
        assert!(message.contains("checking whether a store exists"), "{args:?}: {message}");
        assert!(!message.contains("no store at"), "{args:?}: {message}");
    }
    // A missing store is still "no store" (exit 4).
    std::fs::remove_file(&store).unwrap();
    env.run(&["show"]).code(4);
}

#[test]
fn messages_hold_no_debug_forms_and_their_plurals_agree() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 1, 5)]);
    let (attempt, _) = env.begin("r1", EU);
    let n = attempt.to_string();
    let finish = |rows: &str| {
        env.json(&["attempt", "finish", "-d", "daily", "-r", "r1", "-p", EU, "-a", &n, "--snapshot", "s1", "--rows", rows, "--digest", "d"])
    };
    finish("1").code(0);
    let conflict = finish("2");
    conflict.code(5);
    let message = conflict.error_json()["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("rows 1 recorded, 2 now"), "{message}");
    assert!(!message.contains("Some("), "{message}");
    // One task is "1 task"; a different declaration names the difference without Debug forms.
    let declared = env.run(&["run", "declare", "--trust-reported-figures", "-d", "daily", "-r", "r2", "--snapshot", "s1", "--task", "p:1"]);
    assert!(declared.code(0).stdout.contains(", 1 task\n"), "{}", declared.stdout);
    let redeclared =
        env.json(&["run", "declare", "-d", "daily", "-r", "r2", "--snapshot", "s1", "--task", "p:1", "--grain", "k", "--measure", "m"]);
    redeclared.code(5);
    let message = redeclared.error_json()["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("grain none was declared, not (csv: one row per k; measure m at scale 0)"), "{message}");
    assert!(!message.contains("Some(") && !message.contains("Grain {"), "{message}");
    let listed = env.run(&["run", "list", "-d", "daily"]);
    assert!(listed.code(0).stdout.contains("(2 runs)"), "{}", listed.stdout);
    let attempts = env.run(&["attempt", "list", "-d", "daily", "-r", "r1"]);
    assert!(attempts.code(0).stdout.contains("(1 attempt;"), "{}", attempts.stdout);
}

#[test]
fn validate_pending_validates_every_finished_attempt_of_the_run_one_line_each() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700), (US, 3, 30)]);
    let finish = |partition: &str, rows: u64, total: i64| {
        let (attempt, dir) = env.begin("r1", partition);
        write_rows(&dir, rows, total);
        let (n, rows, total) = (attempt.to_string(), rows.to_string(), total.to_string());
        env.run(&[
            "attempt",
            "finish",
            "-d",
            "daily",
            "-r",
            "r1",
            "-p",
            partition,
            "-a",
            &n,
            "--snapshot",
            "s1",
            "--rows",
            &rows,
            "--total",
            &total,
            "--digest",
            "d",
            "--scan",
        ])
        .code(0);
        attempt
    };
    finish(EU, 2, 700);
    finish(US, 3, 31); // the wrong total: invalid
    finish(US, 3, 30);
    let _running = env.begin("r1", EU); // no candidate: not pending

    let run = env.json(&["attempt", "validate", "-d", "daily", "-r", "r1", "--pending", "--checksums"]);
    run.code(3); // one of them is invalid
    let lines: Vec<serde_json::Value> = run.stdout.lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect();
    let got: Vec<(String, u64, String)> = lines
        .iter()
        .map(|l| (l["partition"].as_str().unwrap().to_owned(), l["attempt"].as_u64().unwrap(), l["verdict"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        got,
        [(EU.to_owned(), 1, "valid".to_owned()), (US.to_owned(), 1, "invalid".to_owned()), (US.to_owned(), 2, "valid".to_owned())]
    );
    assert_eq!(lines[2]["accepted_attempt"], 2);
    // Nothing left: exit 0, no line; the run publishes.
    let again = env.run(&["attempt", "validate", "-d", "daily", "-r", "r1", "--pending"]);
    assert_eq!(again.code(0).stdout, "");
    env.run(&["publish", "-d", "daily", "-r", "r1"]).code(0);

    // Text: one line per attempt; an attempt whose file vanished is invalid, named.
    env.declare("r2", "s1", &[(EU, 2, 700)]);
    let (attempt, dir) = env.begin("r2", EU);
    write_rows(&dir, 2, 700);
    let n = attempt.to_string();
    env.run(&[
        "attempt",
        "finish",
        "-d",
        "daily",
        "-r",
        "r2",
        "-p",
        EU,
        "-a",
        &n,
        "--snapshot",
        "s1",
        "--rows",
        "2",
        "--total",
        "700",
        "--digest",
        "d",
        "--scan",
    ])
    .code(0);
    std::fs::remove_file(dir.join("part.csv")).unwrap();
    let text = env.run(&["attempt", "validate", "-d", "daily", "-r", "r2", "--pending"]);
    text.code(3);
    assert_eq!(text.stdout.lines().count(), 1, "{}", text.stdout);
    assert!(text.stdout.starts_with(&format!("attempt daily/r2/{EU}#1 invalid: ")) && text.stdout.contains("missing"), "{}", text.stdout);
    // An unknown run is not found; --pending takes no partition or attempt.
    env.run(&["attempt", "validate", "-d", "daily", "-r", "nope", "--pending"]).code(4);
    env.run(&["attempt", "validate", "-d", "daily", "-r", "r2", "-p", EU, "--pending"]).code(2);
    env.run(&["attempt", "validate", "-d", "daily", "-r", "r2"]).code(2);
}

crate::support::through_a_server!(
    an_attempt_an_operator_abandoned_is_reported_in_the_same_words_by_every_verb,
    validate_pending_validates_every_finished_attempt_of_the_run_one_line_each
);

#[test]
fn durations_generations_and_counts_out_of_range_are_refused_as_typed() {
    let env = Env::new();
    env.declare("r1", "s1", &[(EU, 2, 700)]);
    // A duration past its bound is named as typed, not in milliseconds.
    let lifetime = env.json(&["--attempt-lifetime", "1000d", "attempt", "begin", "-d", "daily", "-r", "r1", "-p", EU]);
    lifetime.code(2);
    let message = lifetime.error_json()["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("\"1000d\"") && message.contains("30d"), "{message}");
    assert!(!message.contains("ms"), "{message}");
    let lease = env.json(&["effects", "claim", "-d", "daily", "-r", "r1", "-e", "x", "--claimant", "c", "--lease", "400d"]);
    lease.code(2);
    let message = lease.error_json()["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("\"400d\"") && message.contains("1d") && !message.contains("ms\""), "{message}");
    // A negative generation is a value refused as one, not an unknown flag.
    for args in [&["show", "-d", "daily", "-g", "-1"][..], &["view", "daily", "-g", "-1"], &["diff", "-d", "daily", "-1", "2"]] {
        let run = env.json(args);
        run.code(2);
        let message = run.error_json()["error"]["message"].as_str().unwrap_or_default().to_owned();
        assert!(message.contains("\"-1\" is negative") && !message.contains("unexpected argument"), "{args:?}: {message}");
    }
    // Keeping no generation is not a policy: the current one is always kept.
    let expire = env.json(&["gc", "expire", "-d", "daily", "--keep-last", "0"]);
    expire.code(2);
    let message = expire.error_json()["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("always kept") && message.contains("1 or more"), "{message}");
}

#[test]
fn a_publish_and_an_expiry_that_expires_nothing_say_so_in_agreeing_plurals() {
    let env = Env::new();
    env.publish_run("r1", "s1", &[(EU, 2, 700)]);
    let expire = env.run(&["gc", "expire", "-d", "daily", "--keep-last", "1"]);
    let out = &expire.code(0).stdout;
    assert!(out.contains("0 generations []") && out.contains("0 partition versions"), "{out}");
    // Why nothing goes: within the rollback window.
    assert!(out.contains("nothing to expire") && out.contains("7d"), "{out}");
    env.declare("r2", "s2", &[(US, 2, 700)]);
    env.attempt("r2", "s2", US, 2, 700).code(0);
    let published = env.run(&["publish", "-d", "daily", "-r", "r2"]);
    assert!(published.code(0).stdout.contains("(parent 1, 1 partition replaced)"), "{}", published.stdout);
}

#[test]
fn usage_errors_start_like_every_other_error_and_verbs_list_global_options_apart() {
    let env = Env::new();
    let bad = env.run(&["show", "--bogus"]);
    bad.code(2);
    assert!(bad.stderr.starts_with("manifestdb: error: unexpected argument '--bogus'"), "{}", bad.stderr);
    let help = env.run(&["attempt", "begin", "--help"]);
    let text = &help.code(0).stdout;
    let global = text.find("Global options:").unwrap_or_else(|| panic!("no global heading:\n{text}"));
    let own = text.find("--partition").expect("the verb's own flag");
    let dir = text.find("--dir").expect("a global flag");
    assert!(own < global && global < dir, "the verb's flags first, then the global ones under their heading:\n{text}");
}

#[test]
fn init_prints_a_long_store_path_whole_with_its_state() {
    if crate::support::redb_only("init of a store file") {
        return;
    }
    let env = Env::empty();
    let deep = env.dir().join("a-directory-name-long-enough-that-the-path-runs-past-sixty-four-characters");
    let run = crate::support::finish(crate::support::command().arg("--dir").arg(&deep).arg("init"));
    let out = &run.code(0).stdout;
    assert!(out.contains(&format!("{} (created)", deep.join("store.redb").display())), "{out}");
    let again = crate::support::finish(crate::support::command().arg("--dir").arg(&deep).arg("init"));
    assert!(again.code(0).stdout.contains(&format!("{} (exists)", deep.join("store.redb").display())), "{}", again.stdout);
}

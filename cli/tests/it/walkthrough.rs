//! The shell walkthrough of the book's CLI chapter (`docs/src/cli.md`), run as it is printed there.

use std::path::{Path, PathBuf};

use manifestdb::ReadOnlyStore;

use crate::support::{BIN, Env, command, finish, read_rows};

fn cli_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn script() -> String {
    std::fs::read_to_string(cli_dir().join("tests/walkthrough.sh")).expect("read walkthrough.sh")
}

/// The book's chapter on the command-line tool.
fn cli_chapter() -> String {
    std::fs::read_to_string(cli_dir().join("../docs/src/cli.md")).expect("read docs/src/cli.md")
}

#[test]
fn shell_walkthrough_publishes_one_attempt_per_partition_with_the_inputs_totals() {
    let env = Env::empty();
    let bin_dir = Path::new(BIN).parent().expect("binary's directory");
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_path_buf()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH");
    let output = std::process::Command::new("bash")
        .arg(cli_dir().join("tests/walkthrough.sh"))
        .env("PATH", path)
        .env_remove("MANIFESTDB_STORE")
        .env_remove("MANIFESTDB_STAGING")
        .envs(env.store_env())
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "walkthrough failed\nstdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("published run 2026-11-29 of daily_units as generation 1"), "{stdout}");

    // Check what a reader in another process now sees, through the library.
    let store = ReadOnlyStore::open(env.db_path()).expect("open read-only");
    let snapshot = store.snapshot().expect("snapshot");
    let manifest = snapshot.manifest("daily_units", None).expect("manifest").expect("published");
    assert_eq!(manifest.generation.number, 1);
    assert_eq!(snapshot.history("daily_units").expect("history").len(), 1, "the retried publish added no generation");
    let staging = std::fs::canonicalize(env.staging()).expect("staging");
    let seen: Vec<(String, u32, (u64, i64))> = manifest
        .partitions
        .iter()
        .map(|p| {
            assert_eq!(p.files.len(), 1);
            (p.partition.clone(), p.attempt, read_rows(&staging.join(&p.staging_rel).join(&p.files[0].path)))
        })
        .collect();
    // eu: two valid attempts (the lost acknowledgement and its retry); the lowest is accepted,
    // once. us: attempt 1 was invalid, the retry is accepted. Totals equal the input's.
    assert_eq!(seen, [("date=2026-11-29/region=eu".to_owned(), 1, (2, 700)), ("date=2026-11-29/region=us".to_owned(), 2, (3, 450))]);
    // Two eu candidates exist on disk; a reader going through the generation counts one.
    let eu_attempts = std::fs::read_dir(staging.join("daily_units/2026-11-29/date=2026-11-29/region=eu")).expect("eu dir").count();
    assert_eq!(eu_attempts, 2);
}

#[test]
fn the_cli_chapter_includes_the_walkthrough_verbatim() {
    let script = script();
    let body = script.split_once('\n').map(|(_, rest)| rest).expect("shebang line");
    assert!(cli_chapter().contains(body), "docs/src/cli.md must include cli/tests/walkthrough.sh (after its #! line) verbatim");
}

#[test]
fn the_cli_chapter_documents_the_exit_codes_shown_by_help() {
    let help = finish(command().arg("--help")).code(0).stdout.clone();
    let codes = &help[help.find("Exit codes:").expect("exit codes in --help")..];
    assert!(cli_chapter().contains(codes.trim_end()), "docs/src/cli.md must show the --help exit-code table verbatim:\n{codes}");
}

/// Runs `script` in bash (`set -euo pipefail` first) with the built binary on PATH and the
/// store of `env`.
fn bash(env: &Env, script: &str) -> std::process::Output {
    let bin_dir = Path::new(BIN).parent().expect("binary's directory");
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_path_buf()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH");
    std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{script}"))
        .env("PATH", path)
        .env_remove("MANIFESTDB_STORE")
        .env_remove("MANIFESTDB_STAGING")
        .envs(env.store_env())
        .output()
        .expect("run bash")
}

#[test]
fn the_documented_shell_pattern_stops_at_a_failing_begin_under_set_e() {
    let env = Env::new();
    env.declare("r1", "s1", &[("p=1", 1, 1)]);
    // A shell that already ran one begin: the previous attempt's variables are set. The
    // failing begin (an unknown partition: exit 4) must stop the script before it uses them.
    let previous = "MANIFESTDB_ATTEMPT=1 MANIFESTDB_STAGING_DIR=/previous/attempt\n";
    let pattern = r#"env=$(manifestdb attempt begin --env --dataset daily --run r1 --partition p=9) || exit $?; eval "$env"
echo "carried on with attempt $MANIFESTDB_ATTEMPT in $MANIFESTDB_STAGING_DIR""#;
    let out = bash(&env, &format!("{previous}{pattern}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "the script exits with begin's code\nstdout:\n{stdout}");
    assert!(!stdout.contains("carried on"), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("p=9"), "begin's error names the task: {}", String::from_utf8_lossy(&out.stderr));

    // The former documented pattern, `eval "$(...)"`, fails loudly too: what a failed `--env`
    // prints into the pipe unsets the variables and makes `eval` fail.
    let old = r#"eval "$(manifestdb attempt begin --env --dataset daily --run r1 --partition p=9)"
echo "carried on with attempt $MANIFESTDB_ATTEMPT in $MANIFESTDB_STAGING_DIR""#;
    let out = bash(&env, &format!("{previous}{old}"));
    assert_eq!(out.status.code(), Some(1), "eval fails: {}", String::from_utf8_lossy(&out.stdout));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("carried on"));
    // Without set -e, the variables are gone, so set -u stops the next use of them.
    let out = bash(&env, &format!("set +e\n{previous}{old}\nset -e\necho \"$MANIFESTDB_ATTEMPT\""));
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("MANIFESTDB_ATTEMPT: unbound variable"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A retry wrapper that keeps every try's stdout and evals it all: the failed tries' lines
    // do not end the script, the successful try's assignments stand.
    let wrapper = r#"out=""
for partition in p=9 p=9 p=1; do
    if try=$(manifestdb attempt begin --env --dataset daily --run r1 --partition "$partition"); then out="$out$try"$'\n'; break; fi
    out="$out$try"$'\n'
done
eval "$out"
echo "attempt $MANIFESTDB_ATTEMPT""#;
    let out = bash(&env, wrapper);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "attempt 1");
    // Into a file (a wrapper that logs stdout) or a terminal, a failed begin prints nothing.
    let log = env.tmp.path().join("begin.out");
    let to_file =
        format!("manifestdb attempt begin --env --dataset daily --run r1 --partition p=9 > {} || echo \"exit $?\"", log.display());
    let out = bash(&env, &to_file);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "exit 4");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "", "nothing on stdout when it is a file");

    // A begin that succeeds still sets both variables.
    let good = r#"env=$(manifestdb attempt begin --env --dataset daily --run r1 --partition p=1) || exit $?; eval "$env"
test -d "$MANIFESTDB_STAGING_DIR"; echo "attempt $MANIFESTDB_ATTEMPT""#;
    let out = bash(&env, good);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "attempt 2", "the wrapper's begin was attempt 1");
}

/// The serving chapter's first example (`docs/src/serving.md`), run as printed with its
/// directory `/srv/jobs` moved to a temporary one: `init` in the foreground, only `serve` in the
/// background, the run declared through the server, then the raw begin answers attempt 1.
#[test]
fn the_serving_chapters_first_example_runs_as_printed() {
    if crate::support::redb_only("init and serve of a store directory") {
        return;
    }
    // The example's client is curl (`.ci/run` installs it).
    if !std::process::Command::new("curl").arg("--version").output().is_ok_and(|o| o.status.success()) {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but curl is missing");
        eprintln!("SKIPPED the_serving_chapters_first_example_runs_as_printed: no curl on PATH");
        return;
    }
    let chapter = std::fs::read_to_string(cli_dir().join("../docs/src/serving.md")).expect("read docs/src/serving.md");
    let start = chapter.find("```sh\n").expect("a shell block") + "```sh\n".len();
    let block = &chapter[start..start + chapter[start..].find("```").expect("its end")];
    let env = Env::empty();
    let dir = env.dir().join("jobs");
    let script = format!("{}\necho\nkill $!\nwait $! || true\n", block.replace("/srv/jobs", dir.to_str().expect("UTF-8 path")).trim_end());
    let out = bash(&env, &script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("(created)") && stdout.contains("declared"), "{stdout}");
    let begun: serde_json::Value =
        serde_json::from_str(stdout.lines().rev().find(|l| l.starts_with('{')).expect("the begin's answer")).expect("JSON");
    assert_eq!(begun["attempt"], 1, "{begun}");
    assert_eq!(begun["partition"], "date=2026-11-29/region=eu");
}

/// The shell blocks of the book's "Getting started" page (`docs/src/getting-started.md`) from
/// its first store on, run as printed, with `HOME` a temporary directory and the built binary
/// on PATH: the store is made, the run published as generation 1, and the reads show its one
/// partition with the input's rows and total. (The install block: the ignored test below.)
#[test]
fn the_getting_started_page_runs_as_printed() {
    if crate::support::redb_only("the page makes a store directory") {
        return;
    }
    let page = std::fs::read_to_string(cli_dir().join("../docs/src/getting-started.md")).expect("read getting-started.md");
    let blocks = shell_blocks(&page[page.find("## A first store").expect("its first store section")..]);
    assert_eq!(blocks.len(), 5, "the page's blocks after the install: store, declare, attempt, publish, read");
    let env = Env::empty();
    let home = env.dir().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let bin_dir = Path::new(BIN).parent().expect("binary's directory");
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_path_buf()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH");
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{}", blocks.concat()))
        .env("PATH", path)
        .env("HOME", &home)
        .env_remove("MANIFESTDB_DIR")
        .env_remove("MANIFESTDB_STORE")
        .env_remove("MANIFESTDB_STAGING")
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("published run r1 of daily as generation 1"), "{stdout}");
    let json = &stdout[stdout.find("\n{").expect("show --json's document")..];
    let doc: serde_json::Value = serde_json::from_str(json).expect("one JSON document");
    let partitions = doc["partitions"].as_array().expect("partitions");
    assert_eq!(partitions.len(), 1, "{doc}");
    assert_eq!(
        (partitions[0]["partition"].as_str(), partitions[0]["rows"].as_u64(), partitions[0]["total"].as_i64()),
        (Some("region=eu"), Some(2), Some(700))
    );
    assert!(home.join("manifestdb-first/store.redb").is_file(), "the store is where the page says");
}

/// The install block of the "Getting started" page, run as printed, installing into a
/// temporary `CARGO_INSTALL_ROOT` (not `~/.cargo`): the installed `manifestdb --version` answers.
/// Ignored by default: it builds the tool in release mode (minutes on a clean target); run it
/// with `cargo test -p manifestdb-cli --test it -- --ignored getting_started`.
#[test]
#[ignore = "builds the CLI in release mode; run with --ignored"]
fn the_getting_started_install_block_installs_the_tool() {
    let page = std::fs::read_to_string(cli_dir().join("../docs/src/getting-started.md")).expect("read getting-started.md");
    let install = &page[page.find("## Install").expect("its install section")..page.find("## A first store").expect("the next section")];
    let blocks = shell_blocks(install);
    assert_eq!(blocks.len(), 1, "one install block");
    let root = tempfile::tempdir().expect("install root");
    let path = std::env::join_paths(
        std::iter::once(root.path().join("bin")).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH");
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{}", blocks[0]))
        .current_dir(cli_dir().join(".."))
        .env("CARGO_INSTALL_ROOT", root.path())
        .env("PATH", path)
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("manifestdb "), "{stdout}");
    assert!(root.path().join("bin/manifestdb").is_file());
}

/// The bodies of the ```` ```sh ```` blocks of `text`, in order.
fn shell_blocks(text: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```sh\n") {
        let body = &rest[start + "```sh\n".len()..];
        let end = body.find("```").expect("a closed block");
        blocks.push(&body[..end]);
        rest = &body[end + 3..];
    }
    blocks
}

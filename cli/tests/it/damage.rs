//! DOMAIN invariant 10 through the binary: damaged copies of the committed fixture
//! `tests/fixtures/good.redb` (the type byte of every 4 KiB page, and a spread of other bytes),
//! each used with the reading verbs, `verify`, two writing verbs and `verify --integrity`.
//! Every run exits 7 (corrupt) with one error line, or exits as on the undamaged store with the
//! same output; none panics (exit 101), none says "not found" (4) or "fault" (1) instead.
//!
//! `cargo test -p manifestdb-cli --test it damage:: -- --nocapture` prints the figures.

use std::path::Path;

use crate::support::{command, finish};

const PAGE_BYTES: usize = 4096;

/// The verbs run on each copy, in order (the writes after the reads).
const VERBS: [&[&str]; 8] = [
    &["show", "-d", "daily_units"],
    &["log", "-d", "daily_units"],
    &["run", "show", "-d", "daily_units", "-r", "run-1"],
    &["effects", "list", "-d", "daily_units"],
    &["verify"],
    &["publish", "-d", "daily_units", "-r", "run-2"],
    &[
        "run",
        "declare",
        "--trust-reported-figures",
        "-d",
        "daily_units",
        "-r",
        "run-9",
        "--snapshot",
        "sales@9",
        "--task",
        "date=2026-12-01/region=eu:1:1",
    ],
    &["verify", "--integrity"],
];

/// Each verb's exit code and stdout on a copy of `image`.
fn run_verbs(image: &[u8]) -> Vec<(i32, String, String)> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("store.redb"), image).unwrap();
    VERBS
        .iter()
        .map(|args| {
            let run = finish(command().arg("--dir").arg(&dir).arg("--json").args(*args));
            // Outputs name the store's directory, which differs between copies.
            let dir_text = dir.display().to_string();
            (run.code, run.stdout.replace(&dir_text, "<dir>"), run.stderr.replace(&dir_text, "<dir>"))
        })
        .collect()
}

#[test]
fn damaged_stores_exit_7_or_answer_as_the_undamaged_store() {
    if crate::support::redb_only("damages bytes of a redb file") {
        return;
    }
    let good = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/good.redb")).unwrap();
    let reference = run_verbs(&good);
    for ((code, _, stderr), args) in reference.iter().zip(VERBS) {
        assert_eq!(*code, 0, "{args:?} on the undamaged fixture: {stderr}");
    }
    let mut offsets: Vec<(usize, u8)> = (0..good.len() / PAGE_BYTES).map(|page| (page * PAGE_BYTES, 0xff)).collect();
    offsets.extend((7..good.len()).step_by(4093).map(|at| (at, 0x04)));
    let (mut runs, mut corrupt, mut same) = (0, 0, 0);
    let mut wrong = Vec::new();
    for (at, xor) in &offsets {
        let mut image = good.clone();
        image[*at] ^= xor;
        for (((code, stdout, stderr), (ref_code, ref_stdout, _)), args) in run_verbs(&image).iter().zip(&reference).zip(VERBS) {
            runs += 1;
            if stderr.contains("panicked at") {
                wrong.push(format!("byte {at} ^{xor:#04x}, {args:?}: printed a panic: {stderr}"));
            } else if *code == 7 {
                corrupt += 1;
            } else if code == ref_code && stdout == ref_stdout {
                same += 1;
            } else {
                wrong.push(format!("byte {at} ^{xor:#04x}, {args:?}: exit {code}: {}{}", stdout.trim(), stderr.trim()));
            }
        }
    }
    println!(
        "CLI on damaged stores: {} copies, {runs} verb runs: {corrupt} exit 7, {same} as on the undamaged store, {} otherwise",
        offsets.len(),
        wrong.len()
    );
    assert!(wrong.is_empty(), "{} runs neither exited 7 nor answered as the undamaged store:\n{}", wrong.len(), wrong.join("\n"));
    assert!(corrupt > offsets.len(), "the damage went unnoticed");
}

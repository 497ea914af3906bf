//! Replays the fuzz targets' committed inputs as ordinary tests: the seed corpus
//! (`fuzz/corpus-seeds/<target>/`) and every input that once failed
//! (`fuzz/regressions/<target>/`), so `cargo test` guards them without cargo-fuzz.
//!
//! `MANIFESTDB_WRITE_SEEDS=1 cargo test --workspace --test it write_fuzz_seeds -- --ignored` regenerates
//! the seed corpus from the scripted workload and the sample records.

use std::path::PathBuf;

use manifestdb::testing::{self, Op};

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = crate::support::repo_root().join("fuzz");
    let mut out = Vec::new();
    for dir in [root.join("corpus-seeds").join(target), root.join("regressions").join(target)] {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_file() {
                let bytes = std::fs::read(&path).unwrap();
                out.push((path, bytes));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn committed_crash_recovery_inputs_pass() {
    if crate::support::redb_only("crash recovery on redb's fault-injecting backend") {
        return;
    }
    let inputs = inputs("crash_recovery");
    assert!(inputs.len() >= 5, "the seed corpus is committed under fuzz/corpus-seeds/crash_recovery");
    for (path, bytes) in &inputs {
        if let Err(violation) = testing::crash_recovery_check(bytes) {
            panic!("{}: {violation}", path.display());
        }
    }
}

#[test]
fn committed_decode_record_inputs_keep_the_codec_contract() {
    let inputs = inputs("decode_record");
    assert!(inputs.len() >= 5, "the seed corpus is committed under fuzz/corpus-seeds/decode_record");
    let mut decoded = 0;
    for (path, bytes) in &inputs {
        if let Err(broken) = testing::decode_contract_check(bytes) {
            panic!("{}: {broken}", path.display());
        }
        decoded += testing::decode_any_record(bytes).iter().filter(|(_, r)| r.is_ok()).count();
    }
    assert!(decoded >= 5, "each valid sample decodes as its own record type at least");
}

#[test]
fn the_decode_contract_catches_a_frame_moved_to_another_key() {
    // A sample frame decodes under the key it was framed for, never under another one.
    let frame = &testing::encode_sample_records()[0];
    let under = |key: &[u8]| testing::decode_any_record_under(key, frame).iter().filter(|(_, r)| r.is_ok()).count();
    assert_eq!(under(testing::SAMPLE_KEY), 1);
    assert_eq!(under(b"fuzy"), 0);
}

#[test]
fn committed_damaged_store_inputs_never_panic() {
    if crate::support::redb_only("damaged redb files") {
        return;
    }
    let inputs = inputs("damaged_store");
    assert!(inputs.len() >= 5, "the seed corpus is committed under fuzz/corpus-seeds/damaged_store");
    let good = std::fs::read(crate::support::repo_root().join("tests/fixtures/good.redb")).unwrap();
    let staging = tempfile::tempdir().unwrap();
    let mut succeeded = 0;
    for (_, bytes) in &inputs {
        succeeded += testing::damaged_store_run(testing::damage_image(&good, bytes), staging.path());
    }
    assert!(succeeded > 0, "some steps succeed on lightly damaged stores");
}

#[test]
fn fuzz_input_encoding_round_trips_the_scripted_workload() {
    let ops = testing::scripted_workload();
    let (decoded, crash_at, _) = testing::decode_fuzz_input(&testing::encode_fuzz_input(&ops, 77, 1));
    assert_eq!((decoded, crash_at), (ops, 77));
}

#[test]
#[ignore = "writes the seed corpus; run with MANIFESTDB_WRITE_SEEDS=1"]
fn write_fuzz_seeds() {
    if std::env::var_os("MANIFESTDB_WRITE_SEEDS").is_none() {
        return;
    }
    let root = crate::support::repo_root().join("fuzz/corpus-seeds");
    let crash = root.join("crash_recovery");
    std::fs::create_dir_all(&crash).unwrap();
    let workload = testing::scripted_workload();
    let short: Vec<Op> = workload.iter().copied().take(12).collect();
    for (i, (ops, crash_at, tear)) in [
        (&workload, 40u16, 0u8),
        (&workload, 150, 1),
        (&workload, 200, 2),
        (&workload, 230, 3),
        (&workload, 300, 2),
        (&workload, 390, 3),
        (&short, 20, 1),
        (&short, 9999, 0),
    ]
    .into_iter()
    .enumerate()
    {
        std::fs::write(crash.join(format!("seed-{i}")), testing::encode_fuzz_input(ops, crash_at, tear)).unwrap();
    }
    let decode = root.join("decode_record");
    std::fs::create_dir_all(&decode).unwrap();
    for (i, bytes) in testing::encode_sample_records().into_iter().enumerate() {
        std::fs::write(decode.join(format!("sample-{i}")), bytes).unwrap();
    }
    std::fs::write(decode.join("short"), [1u8, 2]).unwrap();
    // Damage to the committed good fixture (see `testing::damage_image`): the type byte of a
    // few pages, flipped bits, a cut, a stale 64-byte copy from another page.
    let damaged = root.join("damaged_store");
    std::fs::create_dir_all(&damaged).unwrap();
    let op = |kind: u8, at: u32, value: u8| [kind, at as u8, (at >> 8) as u8, (at >> 16) as u8, value];
    let seeds: [Vec<[u8; 5]>; 7] = [
        vec![op(1, 2 * 4096, 0xff)],
        vec![op(0, 5 * 4096, 0x01)],
        vec![op(0, 20 * 4096 + 100, 0x04), op(0, 10 * 4096 + 300, 0x80)],
        vec![op(2, 70_000, 0)],
        vec![op(3, 15 * 4096 + 32, 21)],
        vec![op(1, 4096, 0), op(1, 4097, 0)],
        vec![],
    ];
    for (i, seed) in seeds.iter().enumerate() {
        std::fs::write(damaged.join(format!("seed-{i}")), seed.concat()).unwrap();
    }
}

/// Prints a crash_recovery input's ops, their reference outcomes and where the crash lands:
/// `MANIFESTDB_FUZZ_INPUT=fuzz/artifacts/crash_recovery/crash-... cargo test --workspace --test it
/// explain_fuzz_input -- --ignored --nocapture`.
#[test]
#[ignore = "explains one fuzz input; run with MANIFESTDB_FUZZ_INPUT=<file>"]
fn explain_fuzz_input() {
    let Some(path) = std::env::var_os("MANIFESTDB_FUZZ_INPUT") else { return };
    let bytes = std::fs::read(path).unwrap();
    let (ops, crash_at, tear) = testing::decode_fuzz_input(&bytes);
    for (i, op) in ops.iter().enumerate() {
        println!("{i}: {op:?}");
    }
    let reference = testing::Reference::new(&ops).unwrap();
    for (i, o) in reference.outcomes.iter().enumerate() {
        println!("{i}: {o:?}");
    }
    let k = 1 + u64::from(crash_at) % (reference.storage_ops + 1);
    let crashed = reference.crash_run(k).unwrap();
    println!("crash point {k}, {tear:?}: {} ops acknowledged, interrupted: {}", crashed.acked, crashed.interrupted);
    println!("{:?}", reference.recover(&crashed, crashed.backend.crash_image(tear)).map(|_| "recovered"));
}

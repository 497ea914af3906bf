//! Committed store files guard the on-disk format and the handling of damaged files:
//!
//! - `tests/fixtures/good.redb`: the scripted crash workload (`testing::scripted_workload`)
//!   run to the end; it must open, equal the reference state and verify clean;
//! - `flipped-bit.redb`: one bit flipped inside a record's value;
//! - `truncated.redb`: the good file cut to half its length;
//! - `wrong-magic.redb`: the good file with its first byte changed;
//! - `format-v2.redb`: a store written by the released format version 2 (main's `good.redb`
//!   before the bump to 3). It is frozen, never regenerated: this build must refuse it with
//!   the format-version error, for writing and for reading.
//!
//! Each damaged file must give a clear error (corruption, or a storage error naming what is
//! wrong) when opened, read or verified, and never a panic.
//!
//! Regenerate after an intended format change (and review the diff):
//! `MANIFESTDB_WRITE_FIXTURES=1 cargo test --workspace --test it write_fixtures -- --ignored`

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use manifestdb::testing::{self, Reference};
use manifestdb::{ReadOnlyStore, Store, VerifyOptions};

fn fixtures() -> PathBuf {
    crate::support::repo_root().join("tests/fixtures")
}

/// A private copy of a fixture (opening for writing may write to it).
fn copy_of(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    std::fs::copy(fixtures().join(name), &path).unwrap_or_else(|e| panic!("fixture {name}: {e}"));
    (dir, path)
}

#[test]
#[ignore = "writes tests/fixtures; run with MANIFESTDB_WRITE_FIXTURES=1"]
fn write_fixtures() {
    if std::env::var_os("MANIFESTDB_WRITE_FIXTURES").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    {
        let store = testing::open_file_store(&path, &dir.path().join("staging")).unwrap();
        for op in testing::scripted_workload() {
            testing::apply(&store, op).unwrap();
        }
    }
    let good = std::fs::read(&path).unwrap();
    std::fs::create_dir_all(fixtures()).unwrap();
    std::fs::write(fixtures().join("good.redb"), &good).unwrap();

    // Flip one bit in the payload of the first record holding the run's snapshot id.
    let needle = b"sales@1";
    let at = good.windows(needle.len()).position(|w| w == needle).expect("the snapshot id is stored");
    let mut flipped = good.clone();
    flipped[at + 2] ^= 0x01;
    std::fs::write(fixtures().join("flipped-bit.redb"), flipped).unwrap();

    std::fs::write(fixtures().join("truncated.redb"), &good[..good.len() / 2]).unwrap();

    let mut magic = good.clone();
    magic[0] ^= 0xff;
    std::fs::write(fixtures().join("wrong-magic.redb"), magic).unwrap();
}

#[test]
fn the_good_fixture_opens_equals_the_reference_state_and_verifies_clean() {
    if crate::support::redb_only("committed redb file fixtures") {
        return;
    }
    let reference = Reference::new(&testing::scripted_workload()).unwrap();
    let (dir, path) = copy_of("good.redb");
    let reader = ReadOnlyStore::open(&path).unwrap();
    let state = testing::dump(&reader.snapshot().unwrap()).unwrap();
    assert_eq!(&state, reference.states.last().unwrap(), "the committed fixture no longer reads as the workload's final state");
    drop(reader);
    let mut store = Store::open(&path, dir.path().join("staging")).unwrap();
    let report = store.verify(&VerifyOptions::default()).unwrap();
    assert!(report.is_clean(), "{report}");
}

/// Everything a user might do with a damaged file, each step's error collected; panics are
/// caught and reported as failures.
fn use_damaged(name: &str) -> Vec<String> {
    let (dir, path) = copy_of(name);
    let mut errors = Vec::new();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        match ReadOnlyStore::open(&path) {
            Err(e) => errors.push(format!("read-only open: {e}")),
            Ok(reader) => match reader.snapshot().and_then(|s| testing::dump(&s)) {
                Err(e) => errors.push(format!("read-only read: {e}")),
                Ok(_) => {
                    let report = reader.verify(&VerifyOptions::default()).unwrap();
                    errors.extend(report.findings.iter().map(|f| format!("read-only verify: {f}")));
                }
            },
        }
        match Store::open(&path, dir.path().join("staging")) {
            Err(e) => errors.push(format!("open: {e}")),
            Ok(mut store) => {
                if let Err(e) = store.snapshot().and_then(|s| testing::dump(&s)) {
                    errors.push(format!("read: {e}"));
                }
                match store.verify(&VerifyOptions::default()) {
                    Err(e) => errors.push(format!("verify: {e}")),
                    Ok(report) if !report.is_clean() => errors.push(format!("verify: {report}")),
                    Ok(_) => {}
                }
            }
        }
    }));
    assert!(outcome.is_ok(), "{name}: a damaged store file made manifestdb panic");
    println!("{name}:\n  {}", errors.join("\n  "));
    errors
}

#[test]
fn a_flipped_bit_in_a_value_is_reported_as_corruption() {
    if crate::support::redb_only("committed redb file fixtures") {
        return;
    }
    let errors = use_damaged("flipped-bit.redb");
    assert!(!errors.is_empty(), "the flipped bit went unnoticed");
    let text = errors.join("\n");
    assert!(text.contains("checksum") || text.contains("orrupt"), "{text}");
}

#[test]
fn a_truncated_file_gives_a_clear_error() {
    if crate::support::redb_only("committed redb file fixtures") {
        return;
    }
    let errors = use_damaged("truncated.redb");
    assert!(!errors.is_empty(), "the truncation went unnoticed");
    let text = errors.join("\n");
    assert!(text.to_lowercase().contains("truncat") || text.contains("orrupt"), "{text}");
}

#[test]
fn a_wrong_magic_number_gives_a_clear_error() {
    if crate::support::redb_only("committed redb file fixtures") {
        return;
    }
    let errors = use_damaged("wrong-magic.redb");
    let text = errors.join("\n");
    assert!(text.contains("magic number"), "{text}");
}

#[test]
fn a_version_2_store_is_refused_with_the_format_version_error() {
    if crate::support::redb_only("committed redb file fixtures") {
        return;
    }
    let (dir, path) = copy_of("format-v2.redb");
    match Store::open(&path, dir.path().join("staging")) {
        Err(e @ manifestdb::Error::UnsupportedFormat { found: 2, supported: 3 }) => {
            assert_eq!(e.to_string(), "store format version 2 is not supported (this build reads version 3)");
        }
        Err(e) => panic!("open: expected the format-version error, got {e:?}"),
        Ok(_) => panic!("a version-2 store opened for writing"),
    }
    // The refused writer committed nothing (redb may rewrite its own header on open): the
    // file still reads as version 2, and the read-only open refuses it the same way.
    match ReadOnlyStore::open(&path) {
        Err(manifestdb::Error::UnsupportedFormat { found: 2, supported: 3 }) => {}
        Err(e) => panic!("read-only open: expected the format-version error, got {e:?}"),
        Ok(_) => panic!("a version-2 store opened for reading"),
    }
}

//! `verify`: a healthy store gives a clean report; damaged records, broken references and
//! missing or altered files each give a finding naming the table and key, never a panic.

use manifestdb::{FileCheck, IntegrityCheck, ReadOnlyStore, VerifyOptions, VerifyReport};
use redb::{ReadableTable, TableDefinition};

use crate::support::{TestStore, run_attempt, run_spec};

const RAW: fn(&'static str) -> TableDefinition<'static, &'static [u8], &'static [u8]> = TableDefinition::new;

/// A published store: run-1 with a retried partition and a second partition.
fn published() -> TestStore {
    let t = TestStore::new();
    let store = &t.store;
    store.declare_run(&run_spec("daily_units", "run-1", "sales@1", &[("p=eu", 4, 100), ("p=us", 3, 50)])).unwrap();
    for (partition, rows, total) in [("p=eu", 4, 100), ("p=eu", 4, 100), ("p=us", 3, 50)] {
        let task = manifestdb::TaskKey::new("daily_units", "run-1", partition);
        let ticket = run_attempt(store, &task, "sales@1", rows, total);
        store.validate_attempt(&ticket.key, FileCheck::SizeAndChecksum).unwrap();
    }
    let outcome = store.publish("daily_units", "run-1", &manifestdb::PublishOptions::default()).unwrap();
    assert!(matches!(outcome, manifestdb::PublishOutcome::Published(_)), "{outcome:?}");
    t
}

fn full() -> VerifyOptions {
    VerifyOptions { integrity_check: true, files: Some(FileCheck::SizeAndChecksum), staging_root: None, views: true }
}

fn tables_of(report: &VerifyReport) -> Vec<&str> {
    report.findings.iter().map(|f| f.table).collect()
}

/// Closes the store, lets `damage` edit the raw redb file, and reopens it.
fn damaged(t: TestStore, damage: impl FnOnce(&redb::WriteTransaction)) -> TestStore {
    let TestStore { dir, store } = t;
    drop(store);
    let db = redb::Database::open(dir.location()).unwrap();
    let txn = db.begin_write().unwrap();
    damage(&txn);
    txn.commit().unwrap();
    drop(db);
    let store = dir.open().unwrap();
    TestStore { store, dir }.reopen()
}

#[test]
fn a_healthy_store_verifies_clean_with_every_table_walked_and_files_checked() {
    let mut t = published();
    let report = t.store.verify(&full()).unwrap();
    assert!(report.is_clean(), "{report}");
    if crate::support::on_postgres() {
        // redb's page check has no counterpart on PostgreSQL (the server owns its pages): said so.
        assert!(matches!(report.integrity, IntegrityCheck::Skipped { .. }), "{report}");
    } else {
        assert_eq!(report.integrity, IntegrityCheck::Passed);
    }
    assert_eq!(report.records.len(), 12, "every table is walked");
    assert!(report.records_total() >= 12, "{report}");
    assert_eq!(report.files_checked, 2, "one file per published partition");

    // Read-only and snapshot verifies cannot run redb's check and say so.
    let path = t.db_path();
    drop(t.store);
    let reader = ReadOnlyStore::open(&path).unwrap();
    let report = reader.verify(&VerifyOptions { files: Some(FileCheck::Size), ..VerifyOptions::default() }).unwrap();
    assert!(matches!(report.integrity, IntegrityCheck::Skipped { .. }));
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.files_checked, 0, "a read-only store does not know its staging root");
    assert!(report.notes.iter().any(|n| n.contains("staging root")), "{report}");
}

#[test]
fn missing_and_altered_staging_files_are_findings() {
    let mut t = published();
    let manifest = t.store.snapshot().unwrap().manifest("daily_units", None).unwrap().unwrap();
    let eu = &manifest.partitions[0];
    let us = &manifest.partitions[1];
    std::fs::remove_file(t.staging().join(&eu.staging_rel).join(&eu.files[0].path)).unwrap();
    let us_file = t.staging().join(&us.staging_rel).join(&us.files[0].path);
    let mut content = std::fs::read(&us_file).unwrap();
    content[0] ^= 0x01;
    std::fs::write(&us_file, content).unwrap();

    let report = t.store.verify(&full()).unwrap();
    assert_eq!(tables_of(&report), ["files", "files"], "{report}");
    assert!(report.findings[0].message.contains("missing"), "{report}");
    assert!(report.findings[1].message.contains("crc32"), "{report}");
    // Sizes alone do not see the altered byte.
    let report = t.store.verify(&VerifyOptions { files: Some(FileCheck::Size), ..full() }).unwrap();
    assert_eq!(tables_of(&report), ["files"], "{report}");
}

#[test]
fn a_flipped_bit_in_a_record_is_a_checksum_finding_naming_table_and_key() {
    if crate::support::redb_only("edits records of the raw redb file") {
        return;
    }
    let t = damaged(published(), |txn| {
        let mut runs = txn.open_table(RAW("runs_v1")).unwrap();
        let key = b"daily_units\0run-1".as_slice();
        let mut value = runs.get(key).unwrap().unwrap().value().to_vec();
        let last = value.len() - 1;
        value[last] ^= 0x04;
        runs.insert(key, value.as_slice()).unwrap();
    });
    let mut t = t;
    let report = t.store.verify(&full()).unwrap();
    let finding = report.findings.iter().find(|f| f.table == "runs_v1").unwrap_or_else(|| panic!("{report}"));
    assert_eq!(finding.key, "daily_units/run-1");
    assert!(finding.message.contains("checksum mismatch"), "{report}");
}

#[test]
fn broken_references_are_findings() {
    if crate::support::redb_only("edits records of the raw redb file") {
        return;
    }
    let mut t = damaged(published(), |txn| {
        // The generation the pointer names, and the accepted index entry of one task.
        txn.open_table(RAW("generations_v1")).unwrap().remove(b"daily_units\0\0\0\0\0\0\0\0\x01".as_slice()).unwrap();
        txn.open_table(RAW("accepted_v1")).unwrap().remove(b"daily_units\0run-1\0p=us".as_slice()).unwrap();
    });
    let report = t.store.verify(&full()).unwrap();
    let text = report.to_string();
    assert!(!report.is_clean());
    for (table, words) in [
        ("pointers_v1", "pointer names generation 1, which does not exist"),
        ("runs_v1", "generation 1, which does not exist"),
        ("accepted_v1", "has no accepted attempt"),
        ("partition_versions_v1", "accepted attempt is None"),
        ("partition_versions_v1", "written by a generation that does not exist"),
    ] {
        assert!(report.findings.iter().any(|f| f.table == table && f.message.contains(words)), "no {table} finding {words:?} in\n{text}");
    }
}

#[test]
fn verify_through_a_snapshot_of_a_shared_handle_skips_only_redbs_check() {
    let t = published();
    let snapshot = t.store.snapshot().unwrap();
    let report = snapshot.verify(&full());
    assert!(matches!(report.integrity, IntegrityCheck::Skipped { .. }));
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.files_checked, 2);
}

#[test]
fn rollback_expiry_and_cleanup_leave_a_store_that_verifies_clean() {
    use manifestdb::{ApplyOptions, CleanupOptions, RetentionPolicy, RollbackOutcome, RunMode};
    use std::time::Duration;

    let mut t = published();
    let store = &t.store;
    store.declare_run(&run_spec("daily_units", "run-2", "sales@2", &[("p=eu", 5, 200)])).unwrap();
    let task = manifestdb::TaskKey::new("daily_units", "run-2", "p=eu");
    let ticket = run_attempt(store, &task, "sales@2", 5, 200);
    store.validate_attempt(&ticket.key, FileCheck::Size).unwrap();
    assert!(matches!(
        store.publish("daily_units", "run-2", &manifestdb::PublishOptions::default()).unwrap(),
        manifestdb::PublishOutcome::Published(g) if g.number == 2
    ));
    assert!(matches!(store.rollback("daily_units", 1, "alice", "bad input").unwrap(), RollbackOutcome::RolledBack(g) if g.number == 3));
    let policy = RetentionPolicy { keep_last: 1, rollback_window: Duration::ZERO };
    store.expire_generations("daily_units", &policy, RunMode::Execute).unwrap();
    let plan = store.plan_cleanup(&CleanupOptions { age_threshold: Duration::ZERO, force_short_threshold: true }).unwrap();
    let applied = store.apply_cleanup(plan.id, &ApplyOptions { mode: RunMode::Execute, ..ApplyOptions::default() }).unwrap();
    assert_eq!(store.snapshot().unwrap().history("daily_units").unwrap().len(), 1, "only the rollback generation is retained");
    // The retry of run-1's p=eu (valid, never accepted, run published) and run-2's attempt
    // (published only in an expired generation) are dead: files and records go.
    assert!(!applied.deleted.is_empty() && !applied.attempt_records_removed.is_empty(), "{applied:?}");

    let report = t.store.verify(&full()).unwrap();
    assert!(report.is_clean(), "after rollback, expiry and cleanup {applied:?}:\n{report}");
    assert_eq!(report.files_checked, 2, "the retained generation's two partitions");
}

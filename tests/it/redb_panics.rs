//! A redb panic on a damaged page, from both sides: redb called directly panics (the
//! reproduction for upstream, `#[ignore]`d because it asserts redb's bug, which a fixed redb
//! would fail; also a standalone program: `cargo run --release -p manifestdb-bench --example
//! redb_leaf_type_panic`), and the same damage through manifestdb's API is an
//! `Error::Corrupted` naming redb's panic, never a panic, and the handle then refuses writes.
//!
//! The damage: byte 0 of a leaf page (its type: 1 leaf, 2 branch) set to 0xff. redb's lookup
//! reaches `unreachable!()` in `tree_store/btree.rs:1110` (`get_helper`), its cursor in
//! `tree_store/btree_cursor.rs:167`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use manifestdb::{Corruption, Error, ReadOnlyStore, Store};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

const PAGE: usize = 4096;

/// Sets the type byte of every 4 KiB page of the file that holds `needle` to 0xff; returns how
/// many pages it damaged.
fn damage_pages_holding(path: &Path, needle: &[u8]) -> usize {
    let mut bytes = std::fs::read(path).unwrap();
    let pages: Vec<usize> =
        (0..bytes.len() / PAGE).filter(|p| bytes[p * PAGE..(p + 1) * PAGE].windows(needle.len()).any(|w| w == needle)).collect();
    for page in &pages {
        bytes[page * PAGE] = 0xff;
    }
    std::fs::write(path, &bytes).unwrap();
    pages.len()
}

#[test]
#[ignore = "asserts redb 4.6's bug (a panic on a damaged page); run with --ignored to reproduce it"]
fn redb_called_directly_panics_on_a_damaged_leaf_type() {
    if crate::support::redb_only("redb's own panics on a damaged redb file") {
        return;
    }
    const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("t");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.redb");
    {
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(TABLE).unwrap();
            for i in 0..100 {
                table.insert(format!("key-{i:03}").as_bytes(), b"value".as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    assert_eq!(damage_pages_holding(&path, b"key-050"), 1);
    let db = Database::open(&path).unwrap();
    let txn = db.begin_read().unwrap();
    let table = txn.open_table(TABLE).unwrap();
    let get = catch_unwind(AssertUnwindSafe(|| table.get(b"key-050".as_slice()).map(|v| v.is_some())));
    assert!(get.is_err(), "redb returned {get:?} instead of panicking (fixed upstream?)");
    let iter = catch_unwind(AssertUnwindSafe(|| table.iter().map(|i| i.count())));
    assert!(iter.is_err(), "redb returned {iter:?} instead of panicking (fixed upstream?)");
}

#[test]
fn manifestdb_contains_the_same_damage_as_corrupted() {
    if crate::support::redb_only("redb's own panics on a damaged redb file") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (path, staging) = (dir.path().join("store.redb"), dir.path().join("staging"));
    {
        let store = Store::open(&path, &staging).unwrap();
        for i in 0..100 {
            store.declare_run(&crate::support::run_spec("ds", &format!("run-{i:03}"), "snap", &[("p=0", 1, 1)])).unwrap();
        }
        store.close().unwrap();
    }
    // Every leaf holding run-050's records (its run, task and accepted-index pages).
    assert!(damage_pages_holding(&path, b"ds\0run-050") >= 1);

    let engine_panic = |err: &Error| matches!(err, Error::Corrupted { detail: Corruption::EnginePanic { .. }, .. });
    let reader = ReadOnlyStore::open(&path).unwrap();
    let read = catch_unwind(AssertUnwindSafe(|| reader.snapshot().and_then(|s| s.run("ds", "run-050"))));
    let err = read.expect("the panic is contained").expect_err("a damaged page is an error");
    assert!(engine_panic(&err), "{err:?}");
    assert!(err.is_corruption());
    drop(reader);

    let store = Store::open(&path, &staging).unwrap();
    let read = catch_unwind(AssertUnwindSafe(|| store.snapshot().and_then(|s| s.run("ds", "run-050"))));
    let err = read.expect("the panic is contained").expect_err("a damaged page is an error");
    assert!(engine_panic(&err), "{err:?}");
    assert!(err.to_string().contains("btree.rs") || err.to_string().contains("unreachable"), "{err}");
    // The handle is poisoned: nothing is written over the damage.
    let write = store.declare_run(&crate::support::run_spec("ds", "run-new", "snap", &[("p=0", 1, 1)]));
    assert!(write.as_ref().is_err_and(Error::is_corruption), "{write:?}");
}

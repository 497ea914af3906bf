//! A minimal reproduction, for redb's issue tracker, of redb 4.6 panicking on a damaged file
//! instead of returning `StorageError::Corrupted`: only redb and the standard library are used.
//!
//! 1. Create a database and insert 100 `&[u8]` keys into one table in one transaction (they fit
//!    in one leaf page, the table's root).
//! 2. Overwrite byte 0 of that page (the page type: 1 leaf, 2 branch) with 0xff.
//! 3. Reopen the file and `get` a key: redb reaches `unreachable!()` in
//!    `tree_store/btree.rs:1110` (`get_helper`) and panics. A range or iteration over the table
//!    panics the same way in `tree_store/btree_cursor.rs:167`.
//!
//! ```text
//! cargo run --release -p manifestdb-bench --example redb_leaf_type_panic
//! ```
//!
//! It prints the outcome of each call and exits 0 when redb panicked (the behaviour reported),
//! 1 when every call returned (redb fixed). manifestdb contains these panics at its boundary
//! (`src/store/contain.rs`); `tests/it/redb_panics.rs` shows both sides.

use std::panic::{AssertUnwindSafe, catch_unwind};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("t");
const PAGE: usize = 4096;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("damaged.redb");
    {
        let db = Database::create(&path)?;
        let txn = db.begin_write()?;
        {
            let mut table = txn.open_table(TABLE)?;
            for i in 0..100 {
                table.insert(format!("key-{i:03}").as_bytes(), b"value".as_slice())?;
            }
        }
        txn.commit()?;
    }
    let mut bytes = std::fs::read(&path)?;
    let page = (0..bytes.len() / PAGE)
        .find(|p| bytes[p * PAGE..(p + 1) * PAGE].windows(7).any(|w| w == b"key-050"))
        .ok_or("no page holds the keys")?;
    println!("the table's leaf is page {page} (offset {}); its type byte is {}", page * PAGE, bytes[page * PAGE]);
    bytes[page * PAGE] = 0xff;
    std::fs::write(&path, &bytes)?;

    // Quiet the default hook: the outcome is printed below.
    std::panic::set_hook(Box::new(|info| {
        let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
        eprintln!("panic at {at}");
    }));
    let db = Database::open(&path)?;
    let txn = db.begin_read()?;
    let table = txn.open_table(TABLE)?;
    let get = catch_unwind(AssertUnwindSafe(|| table.get(b"key-050".as_slice()).map(|v| v.map(|v| v.value().to_vec()))));
    let iter = catch_unwind(AssertUnwindSafe(|| table.iter().map(|i| i.count())));
    let mut panicked = false;
    for (call, outcome) in [("get", get.map(|r| format!("{r:?}"))), ("iter", iter.map(|r| format!("{r:?}")))] {
        match outcome {
            Ok(returned) => println!("{call}: returned {returned}"),
            Err(_) => {
                panicked = true;
                println!("{call}: PANICKED (expected Err(StorageError::Corrupted))");
            }
        }
    }
    std::process::exit(if panicked { 0 } else { 1 });
}

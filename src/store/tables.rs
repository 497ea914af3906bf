//! Typed access to the framed tables: every read decodes through the codec and checks the
//! record; every write encodes and asserts the record is consistent before it is stored.
//!
//! Every read also checks the entries just outside what it read: the one before its range
//! and, unless it stopped early, the one after (for a lookup that misses, the entries on either
//! side of the key). A key damaged on disk stays where its original key sorted, so a lookup
//! that no longer finds it, or a scan that no longer reaches it, finds it there; its frame's
//! checksum covers the key it was written under (`codec.rs`) and fails. Without this a damaged
//! key would read as a missing record ("not found") instead of as damage.
//!
//! Invariant: a read returns only records whose frames check under the key they are stored at,
//! and it never reports "absent" for a key whose slot holds a frame written under that key.

use std::ops::Bound;

use redb::{ReadableTable, Table, TableDefinition};

use crate::codec;
use crate::error::{Corruption, Error, Result};
use crate::records::Checked;
use crate::schema::Def;

/// The redb definition of a table: framed values under composite byte keys.
pub(crate) const fn definition(def: Def) -> TableDefinition<'static, &'static [u8], &'static [u8]> {
    TableDefinition::new(def.name)
}

/// A table opened for reading, in a read or a write transaction.
pub(crate) trait Readable: ReadableTable<&'static [u8], &'static [u8]> {}
impl<T: ReadableTable<&'static [u8], &'static [u8]>> Readable for T {}

/// Decodes and checks a record read from `def` under `key`.
pub(crate) fn decode<R: Checked>(def: Def, key: &[u8], bytes: &[u8]) -> Result<R> {
    debug_assert_eq!(def, R::TABLE, "reading a record from another table than its own");
    crate::records::decode(def.name, key, bytes)
}

/// A corruption error for a key whose shape or meaning is wrong.
pub(crate) fn corrupted(def: Def, key: &[u8], message: impl Into<String>) -> Error {
    Error::Corrupted { table: def.name, key: codec::printable_key(key), detail: Corruption::Inconsistent { message: message.into() } }
}

/// Checks the last entry whose key sorts below `key`: it must be stored under its own key.
fn check_below(table: &impl Readable, def: Def, key: &[u8]) -> Result<()> {
    let read = |e: redb::StorageError| Error::storage("reading a neighbouring record", e);
    match table.range::<&[u8]>(..key).map_err(read)?.next_back() {
        None => Ok(()),
        Some(item) => {
            let (found, value) = item.map_err(read)?;
            if found.value() >= key {
                return Err(corrupted(def, found.value(), "key is out of order"));
            }
            codec::check_frame(def.name, found.value(), value.value()).map(|_| ())
        }
    }
}

/// Checks the first entry whose key sorts above `key` (or at it, if `inclusive`): it must be
/// stored under its own key.
fn check_above(table: &impl Readable, def: Def, key: &[u8], inclusive: bool) -> Result<()> {
    let read = |e: redb::StorageError| Error::storage("reading a neighbouring record", e);
    let lower = if inclusive { Bound::Included(key) } else { Bound::Excluded(key) };
    match table.range::<&[u8]>((lower, Bound::Unbounded)).map_err(read)?.next() {
        None => Ok(()),
        Some(item) => {
            let (found, value) = item.map_err(read)?;
            if found.value() < key || (!inclusive && found.value() == key) {
                return Err(corrupted(def, found.value(), "key is out of order"));
            }
            codec::check_frame(def.name, found.value(), value.value()).map(|_| ())
        }
    }
}

/// Reads one record.
pub(crate) fn get<R: Checked>(table: &impl Readable, def: Def, key: &[u8]) -> Result<Option<R>> {
    let guard = table.get(key).map_err(|e| Error::storage("reading a record", e))?;
    match guard {
        None => {
            check_below(table, def, key)?;
            check_above(table, def, key, false)?;
            Ok(None)
        }
        Some(value) => decode(def, key, value.value()).map(Some),
    }
}

/// Writes one record.
pub(crate) fn put<R: Checked>(table: &mut Table<&'static [u8], &'static [u8]>, key: &[u8], record: &R) -> Result<()> {
    crate::meta::note_write();
    // A record that fails its own check must never reach the disk: that is a bug here, not
    // corruption, and the check on the way out would report it as corruption later.
    debug_assert!(record.check().is_ok(), "writing an inconsistent record");
    table.insert(key, codec::encode(R::TABLE.name, key, record).as_slice()).map_err(|e| Error::storage("writing a record", e))?;
    Ok(())
}

/// Visits every `(key, record)` whose key lies in `[start, end)`, in key order, until `visit`
/// returns `false`.
pub(crate) fn scan<R: Checked>(
    table: &impl Readable,
    def: Def,
    start: &[u8],
    end: &[u8],
    mut visit: impl FnMut(&[u8], R) -> Result<bool>,
) -> Result<()> {
    let range = table.range::<&[u8]>(start..end).map_err(|e| Error::storage("scanning a table", e))?;
    let mut completed = true;
    for item in range {
        let (key, value) = item.map_err(|e| Error::storage("scanning a table", e))?;
        let record = decode(def, key.value(), value.value())?;
        if !visit(key.value(), record)? {
            completed = false;
            break;
        }
    }
    check_below(table, def, start)?;
    // Stopped early, the scan claims nothing about the rest of the range.
    if completed { check_above(table, def, end, true) } else { Ok(()) }
}

/// The last `(key, record)` whose key lies in `[start, end]`.
pub(crate) fn last_at_or_before<R: Checked>(table: &impl Readable, def: Def, start: &[u8], end: &[u8]) -> Result<Option<(Vec<u8>, R)>> {
    let mut range = table.range::<&[u8]>(start..=end).map_err(|e| Error::storage("reading a version", e))?;
    let found = match range.next_back() {
        None => {
            check_below(table, def, start)?;
            None
        }
        Some(item) => {
            let (key, value) = item.map_err(|e| Error::storage("reading a version", e))?;
            let record = decode(def, key.value(), value.value())?;
            Some((key.value().to_vec(), record))
        }
    };
    // A newer entry damaged out of the range would leave an older one answering for it.
    check_above(table, def, end, false)?;
    Ok(found)
}

/// The first key in `[start, end)`, its frame checked.
pub(crate) fn first_key(table: &impl Readable, def: Def, start: &[u8], end: &[u8]) -> Result<Option<Vec<u8>>> {
    let mut range = table.range::<&[u8]>(start..end).map_err(|e| Error::storage("scanning a table", e))?;
    match range.next() {
        None => {
            check_above(table, def, end, true)?;
            Ok(None)
        }
        Some(item) => {
            let (key, value) = item.map_err(|e| Error::storage("scanning a table", e))?;
            codec::check_frame(def.name, key.value(), value.value())?;
            // A skip scan jumps from key to key: what lies just before the jump's target is
            // the damaged key it may have jumped over.
            check_below(table, def, start)?;
            Ok(Some(key.value().to_vec()))
        }
    }
}

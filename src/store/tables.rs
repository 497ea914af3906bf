//! Typed access to the framed tables: every read decodes through the codec and checks the
//! record; every write encodes and asserts the record is consistent before it is stored.

use redb::{ReadableTable, Table};

use crate::codec;
use crate::error::{Corruption, Error, Result};
use crate::records::Checked;
use crate::schema::Def;

/// A table opened for reading, in a read or a write transaction.
pub(crate) trait Readable: ReadableTable<&'static [u8], &'static [u8]> {}
impl<T: ReadableTable<&'static [u8], &'static [u8]>> Readable for T {}

/// Decodes and checks a record read from `def` under `key`.
pub(crate) fn decode<R: Checked>(def: Def, key: &[u8], bytes: &[u8]) -> Result<R> {
    let record: R = codec::decode(def.name, key, bytes)?;
    record.check().map_err(|message| corrupted(def, key, message))?;
    Ok(record)
}

/// A corruption error for a key whose shape or meaning is wrong.
pub(crate) fn corrupted(def: Def, key: &[u8], message: impl Into<String>) -> Error {
    Error::Corrupted { table: def.name, key: codec::printable_key(key), detail: Corruption::Inconsistent { message: message.into() } }
}

/// Reads one record.
pub(crate) fn get<R: Checked>(table: &impl Readable, def: Def, key: &[u8]) -> Result<Option<R>> {
    let guard = table.get(key).map_err(|e| Error::storage("reading a record", e))?;
    match guard {
        None => Ok(None),
        Some(value) => decode(def, key, value.value()).map(Some),
    }
}

thread_local! {
    /// Records written by this thread, for the group-commit check that a body refusing after a
    /// write is caught (see `group.rs`).
    static WRITES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many records this thread has written so far (through [`put`]).
pub(crate) fn writes_on_this_thread() -> u64 {
    WRITES.with(std::cell::Cell::get)
}

/// Writes one record.
pub(crate) fn put<R: Checked>(table: &mut Table<&'static [u8], &'static [u8]>, key: &[u8], record: &R) -> Result<()> {
    WRITES.with(|w| w.set(w.get().wrapping_add(1)));
    // A record that fails its own check must never reach the disk: that is a bug here, not
    // corruption, and the check on the way out would report it as corruption later.
    debug_assert!(record.check().is_ok(), "writing an inconsistent record");
    table.insert(key, codec::encode(record).as_slice()).map_err(|e| Error::storage("writing a record", e))?;
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
    for item in range {
        let (key, value) = item.map_err(|e| Error::storage("scanning a table", e))?;
        let record = decode(def, key.value(), value.value())?;
        if !visit(key.value(), record)? {
            break;
        }
    }
    Ok(())
}

/// The last `(key, record)` whose key lies in `[start, end]`.
pub(crate) fn last_at_or_before<R: Checked>(table: &impl Readable, def: Def, start: &[u8], end: &[u8]) -> Result<Option<(Vec<u8>, R)>> {
    let mut range = table.range::<&[u8]>(start..=end).map_err(|e| Error::storage("reading a version", e))?;
    match range.next_back() {
        None => Ok(None),
        Some(item) => {
            let (key, value) = item.map_err(|e| Error::storage("reading a version", e))?;
            let record = decode(def, key.value(), value.value())?;
            Ok(Some((key.value().to_vec(), record)))
        }
    }
}

/// The first key in `[start, end)`.
pub(crate) fn first_key(table: &impl Readable, start: &[u8], end: &[u8]) -> Result<Option<Vec<u8>>> {
    let mut range = table.range::<&[u8]>(start..end).map_err(|e| Error::storage("scanning a table", e))?;
    match range.next() {
        None => Ok(None),
        Some(item) => Ok(Some(item.map_err(|e| Error::storage("scanning a table", e))?.0.value().to_vec())),
    }
}

//! CSV partitions (the `csv` crate): RFC 4180, comma separated, `"` quoting, a header line
//! naming exactly the grain's columns in any order. A UTF-8 byte-order mark is skipped.
//!
//! Memory: the parser keeps one record; the input is wrapped so that a record longer than
//! `record_bytes_max` (a 2 GiB line, a quote that never closes) stops the read with an
//! `UnparsableRow` instead of growing the record buffer without bound.

use std::cell::Cell;
use std::io::{self, Read};
use std::rc::Rc;

use super::{Sink, column_positions, encode_key, grain_columns_sorted};
use crate::error::{Error, Result};
use crate::grain::Grain;
use crate::model::GateFailure;
use crate::rules::digest::parse_measure;

/// The csv parser's read buffer.
const BUFFER_BYTES: usize = 64 * 1024;

/// The error the limited reader raises when a record exceeds the limit.
#[derive(Debug)]
struct RecordTooLong(usize);

impl std::fmt::Display for RecordTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a record is longer than the limit of {} bytes", self.0)
    }
}

impl std::error::Error for RecordTooLong {}

/// Counts the bytes handed to the parser and refuses to hand more once the current record
/// (everything since the end of the last complete one) exceeds the limit.
struct Limited {
    inner: super::Source,
    consumed: u64,
    record_start: Rc<Cell<u64>>,
    limit: usize,
}

impl Read for Limited {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.consumed.saturating_sub(self.record_start.get()) > self.limit as u64 {
            return Err(io::Error::other(RecordTooLong(self.limit)));
        }
        let n = self.inner.read(buf)?;
        self.consumed += n as u64;
        Ok(n)
    }
}

/// What one call to the parser gave.
enum Next {
    Record,
    End,
    /// The read cannot go on; the failure's message.
    Stop(String),
}

fn next(reader: &mut csv::Reader<Limited>, record: &mut csv::ByteRecord) -> Result<Next> {
    match reader.read_byte_record(record) {
        Ok(true) => Ok(Next::Record),
        Ok(false) => Ok(Next::End),
        Err(e) => {
            // The parser's own words (its Display), never its Debug form.
            let message = e.to_string();
            match e.into_kind() {
                csv::ErrorKind::Io(io_error) => {
                    if let Some(too_long) = io_error.get_ref().and_then(|inner| inner.downcast_ref::<RecordTooLong>()) {
                        Ok(Next::Stop(too_long.to_string()))
                    } else {
                        Err(Error::io("reading a CSV file", io_error))
                    }
                }
                _ => Ok(Next::Stop(message)),
            }
        }
    }
}

/// Reads one CSV file into `sink`.
///
/// # Errors
/// [`Error::Io`] on a read failure of the file or of the key spill.
pub(super) fn read(file: super::Source, rel: &str, grain: &Grain, record_bytes_max: usize, sink: &mut Sink) -> Result<()> {
    let record_start = Rc::new(Cell::new(0u64));
    let limited = Limited { inner: file, consumed: 0, record_start: Rc::clone(&record_start), limit: record_bytes_max };
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).buffer_capacity(BUFFER_BYTES).from_reader(limited);
    let mut record = csv::ByteRecord::new();
    let line_of = |record: &csv::ByteRecord| record.position().map_or(0, csv::Position::line);
    match next(&mut reader, &mut record)? {
        // A grain's CSV file names its columns in a header line; an empty file has none, so it
        // cannot be read at the grain (a file of no rows is the header alone).
        Next::End => {
            sink.file_failure(GateFailure::MalformedFile {
                path: rel.to_owned(),
                message: format!(
                    "it is empty: the header line naming the grain's columns ({}) is missing",
                    grain_columns_sorted(grain).join(", ")
                ),
            });
            return Ok(());
        }
        Next::Stop(message) => {
            sink.rejected_row(GateFailure::UnparsableRow { path: rel.to_owned(), location: "line 1 (header)".into(), message });
            return Ok(());
        }
        Next::Record => {}
    }
    let header: Vec<String> = record.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect();
    let Some((key_positions, measure_position)) = column_positions(grain, &header) else {
        sink.file_failure(GateFailure::ColumnsMismatch { path: rel.to_owned(), expected: grain_columns_sorted(grain), got: header });
        return Ok(());
    };
    let width = header.len();
    // The keys' fields in the order a row encodes them (the canonical name order).
    let encode_order: Vec<usize> = sink.key_order().iter().map(|&i| key_positions[i]).collect();
    loop {
        record_start.set(reader.position().byte());
        match next(&mut reader, &mut record)? {
            Next::End => return Ok(()),
            Next::Stop(message) => {
                let line = reader.position().line();
                sink.rejected_row(GateFailure::UnparsableRow { path: rel.to_owned(), location: format!("line {line}"), message });
                return Ok(());
            }
            Next::Record => {}
        }
        let location = || format!("line {}", line_of(&record));
        if record.len() != width {
            let message = format!("{} fields, the header has {width}", record.len());
            sink.rejected_row(GateFailure::UnparsableRow { path: rel.to_owned(), location: location(), message });
            continue;
        }
        match row_of(&record, grain, &key_positions, &encode_order, measure_position, sink.start_row()) {
            Ok(measure) => sink.end_row(measure)?,
            Err(RowProblem::MissingKey(column)) => {
                sink.rejected_row(GateFailure::MissingKey { path: rel.to_owned(), location: location(), column });
            }
            Err(RowProblem::Unparsable(message)) => {
                sink.rejected_row(GateFailure::UnparsableRow { path: rel.to_owned(), location: location(), message });
            }
        }
    }
}

enum RowProblem {
    MissingKey(String),
    Unparsable(String),
}

/// Encodes the record's keys into `out` (the fields at `encode_order`) and returns its
/// measure.
fn row_of(
    record: &csv::ByteRecord,
    grain: &Grain,
    key_positions: &[usize],
    encode_order: &[usize],
    measure_position: usize,
    out: &mut Vec<u8>,
) -> std::result::Result<i64, RowProblem> {
    for &position in encode_order {
        let bytes = record.get(position).unwrap_or_default();
        if bytes.is_empty() || std::str::from_utf8(bytes).is_err() {
            return Err(key_problem(record, grain, key_positions));
        }
        encode_key(out, bytes);
    }
    let bytes = record.get(measure_position).unwrap_or_default();
    let text =
        std::str::from_utf8(bytes).map_err(|e| RowProblem::Unparsable(format!("measure column {:?} is not UTF-8 ({e})", grain.measure)))?;
    parse_measure(text, grain.measure_scale).map_err(|e| RowProblem::Unparsable(format!("measure column {:?}: {e}", grain.measure)))
}

/// The first key problem of a record in the grain's key order (the row is rejected).
fn key_problem(record: &csv::ByteRecord, grain: &Grain, key_positions: &[usize]) -> RowProblem {
    for (&position, column) in key_positions.iter().zip(&grain.keys) {
        let bytes = record.get(position).unwrap_or_default();
        if bytes.is_empty() {
            return RowProblem::MissingKey(column.clone());
        }
        if let Err(e) = std::str::from_utf8(bytes) {
            return RowProblem::Unparsable(format!("key column {column:?} is not UTF-8 ({e})"));
        }
    }
    // Not reached: the caller found a problem with one of these fields.
    RowProblem::Unparsable("a key field is empty or not UTF-8".to_owned())
}

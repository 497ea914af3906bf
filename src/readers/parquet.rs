//! Parquet partitions (the `parquet` crate's Arrow reader), feature `parquet`.
//!
//! The file's schema must hold exactly the grain's columns, flat. Keys: signed or unsigned
//! integers (read as their decimal text) or strings; the measure: an integer or a
//! `DECIMAL(p, s)`. Any other type (float, boolean, binary, date, nested) is an
//! `UnsupportedColumnType`. A file the reader cannot open is `MalformedFile`; a row group it
//! cannot decode is `UnparsableRow` at that row group; a footer that claims more rows than
//! the data holds is `MalformedFile`.

use std::fmt::Write as _;
use std::fs::File;

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{PARQUET_BATCH_ROWS, Sink, column_positions, grain_columns_sorted};
use crate::error::Result;
use crate::grain::Grain;
use crate::model::GateFailure;
use crate::rules::digest::{rescale_decimal, scale_integer};

fn is_integer(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
    )
}

fn key_type_supported(t: &DataType) -> bool {
    is_integer(t) || matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn measure_type_supported(t: &DataType) -> bool {
    is_integer(t) || matches!(t, DataType::Decimal128(_, _))
}

/// The integer at `row` of an integer array (`None` for null).
fn integer_at(array: &ArrayRef, row: usize) -> Option<i128> {
    if array.is_null(row) {
        return None;
    }
    Some(match array.data_type() {
        DataType::Int8 => i128::from(array.as_primitive::<Int8Type>().value(row)),
        DataType::Int16 => i128::from(array.as_primitive::<Int16Type>().value(row)),
        DataType::Int32 => i128::from(array.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => i128::from(array.as_primitive::<Int64Type>().value(row)),
        DataType::UInt8 => i128::from(array.as_primitive::<UInt8Type>().value(row)),
        DataType::UInt16 => i128::from(array.as_primitive::<UInt16Type>().value(row)),
        DataType::UInt32 => i128::from(array.as_primitive::<UInt32Type>().value(row)),
        DataType::UInt64 => i128::from(array.as_primitive::<UInt64Type>().value(row)),
        _ => return None,
    })
}

/// Writes the key at `row` as canonical text into `out`; false for null.
fn key_text(array: &ArrayRef, row: usize, out: &mut String) -> bool {
    out.clear();
    if array.is_null(row) {
        return false;
    }
    match array.data_type() {
        DataType::Utf8 => out.push_str(array.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => out.push_str(array.as_string::<i64>().value(row)),
        DataType::Utf8View => out.push_str(array.as_string_view().value(row)),
        _ => match integer_at(array, row) {
            Some(value) => {
                let _ = write!(out, "{value}");
            }
            None => return false,
        },
    }
    true
}

/// The measure at `row` in `10^-scale` units: `Ok(None)` for null, `Err` if not representable.
fn measure_at(array: &ArrayRef, row: usize, scale: u32) -> std::result::Result<Option<i64>, String> {
    if array.is_null(row) {
        return Ok(None);
    }
    match array.data_type() {
        DataType::Decimal128(_, from) => {
            let unscaled = array.as_primitive::<Decimal128Type>().value(row);
            rescale_decimal(unscaled, *from, scale)
                .map(Some)
                .ok_or_else(|| format!("decimal {unscaled}e-{from} is not exact at scale {scale} or does not fit a 64-bit integer"))
        }
        _ => match integer_at(array, row) {
            Some(value) => {
                scale_integer(value, scale).map(Some).ok_or_else(|| format!("{value} does not fit a 64-bit integer at scale {scale}"))
            }
            None => Ok(None),
        },
    }
}

/// Reads one Parquet file into `sink`.
///
/// # Errors
/// [`crate::Error::Io`] if the key set cannot spill. Problems of the file itself are gate
/// failures in `sink`.
pub(super) fn read(file: File, rel: &str, grain: &Grain, sink: &mut Sink) -> Result<()> {
    let malformed = |message: String| GateFailure::MalformedFile { path: rel.to_owned(), message };
    let builder = match ParquetRecordBatchReaderBuilder::try_new(file) {
        Ok(builder) => builder,
        Err(e) => {
            sink.file_failure(malformed(format!("not a readable Parquet file: {e}")));
            return Ok(());
        }
    };
    let schema = builder.schema().clone();
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let Some((key_positions, measure_position)) = column_positions(grain, &names) else {
        sink.file_failure(GateFailure::ColumnsMismatch { path: rel.to_owned(), expected: grain_columns_sorted(grain), got: names });
        return Ok(());
    };
    let mut unsupported = false;
    for (i, field) in schema.fields().iter().enumerate() {
        let supported =
            if i == measure_position { measure_type_supported(field.data_type()) } else { key_type_supported(field.data_type()) };
        if !supported {
            unsupported = true;
            sink.file_failure(GateFailure::UnsupportedColumnType {
                path: rel.to_owned(),
                column: field.name().clone(),
                data_type: field.data_type().to_string(),
            });
        }
    }
    if unsupported {
        return Ok(());
    }
    let metadata = builder.metadata().clone();
    let claimed = metadata.file_metadata().num_rows();
    let group_rows: Vec<i64> = metadata.row_groups().iter().map(|g| g.num_rows()).collect();
    if group_rows.iter().sum::<i64>() != claimed {
        sink.file_failure(malformed(format!(
            "its footer claims {claimed} rows but its row groups hold {}",
            group_rows.iter().sum::<i64>()
        )));
        return Ok(());
    }
    let reader = match builder.with_batch_size(PARQUET_BATCH_ROWS).build() {
        Ok(reader) => reader,
        Err(e) => {
            sink.file_failure(malformed(format!("cannot be read: {e}")));
            return Ok(());
        }
    };
    // Which row group the next row comes from, for the failures' locations.
    let mut group = 0usize;
    let mut group_end = group_rows.first().copied().unwrap_or(0);
    let mut rows_read: i64 = 0;
    let mut key_buffers: Vec<String> = vec![String::new(); key_positions.len()];
    for batch in reader {
        let batch = match batch {
            Ok(batch) => batch,
            Err(e) => {
                sink.rejected_row(GateFailure::UnparsableRow {
                    path: rel.to_owned(),
                    location: format!("row group {group}"),
                    message: format!("cannot decode: {e}"),
                });
                return Ok(());
            }
        };
        let key_columns: Vec<&ArrayRef> = key_positions.iter().map(|&p| batch.column(p)).collect();
        let measure_column = batch.column(measure_position);
        for row in 0..batch.num_rows() {
            while rows_read >= group_end && group + 1 < group_rows.len() {
                group += 1;
                group_end += group_rows[group];
            }
            let row_in_group = rows_read - (group_end - group_rows.get(group).copied().unwrap_or(0));
            rows_read += 1;
            let location = || format!("row group {group}, row {row_in_group}");
            let mut missing = None;
            for ((column, buffer), name) in key_columns.iter().zip(key_buffers.iter_mut()).zip(&grain.keys) {
                if !key_text(column, row, buffer) && missing.is_none() {
                    missing = Some(name.clone());
                }
            }
            if let Some(column) = missing {
                sink.rejected_row(GateFailure::MissingKey { path: rel.to_owned(), location: location(), column });
                continue;
            }
            match measure_at(measure_column, row, grain.measure_scale) {
                Ok(Some(measure)) => {
                    let keys: Vec<&str> = key_buffers.iter().map(String::as_str).collect();
                    sink.row(&keys, measure)?;
                }
                Ok(None) => sink.rejected_row(GateFailure::UnparsableRow {
                    path: rel.to_owned(),
                    location: location(),
                    message: format!("measure column {:?} is null", grain.measure),
                }),
                Err(message) => sink.rejected_row(GateFailure::UnparsableRow { path: rel.to_owned(), location: location(), message }),
            }
        }
    }
    if rows_read != claimed {
        sink.file_failure(malformed(format!("its footer claims {claimed} rows but the data holds {rows_read}")));
    }
    Ok(())
}

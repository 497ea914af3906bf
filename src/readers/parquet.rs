//! Parquet partitions (the `parquet` crate's Arrow reader), feature `parquet`.
//!
//! The file's schema must hold exactly the grain's columns, flat. Keys: signed or unsigned
//! integers (read as their decimal text) or strings; the measure: an integer or a
//! `DECIMAL(p, s)`. Any other type (float, boolean, binary, date, nested) is an
//! `UnsupportedColumnType`. A file the reader cannot open is `MalformedFile`; a row group it
//! cannot decode is `UnparsableRow` at that row group; a footer that claims more rows than
//! the data holds is `MalformedFile`.

use parquet::file::reader::ChunkReader;

use super::Source;
use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{PARQUET_BATCH_ROWS, Sink, column_positions, encode_key, grain_columns_sorted};
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

/// The values of an integer array widened to `i64` (signed types) or `u64` (unsigned types),
/// once per batch; `None` for a non-integer type.
enum Integers {
    Signed(Vec<i64>),
    Unsigned(Vec<u64>),
}

fn integers(array: &ArrayRef) -> Option<Integers> {
    fn signed<T: arrow_array::ArrowPrimitiveType>(array: &ArrayRef) -> Integers
    where
        T::Native: Into<i64>,
    {
        Integers::Signed(array.as_primitive::<T>().values().iter().map(|&v| v.into()).collect())
    }
    fn unsigned<T: arrow_array::ArrowPrimitiveType>(array: &ArrayRef) -> Integers
    where
        T::Native: Into<u64>,
    {
        Integers::Unsigned(array.as_primitive::<T>().values().iter().map(|&v| v.into()).collect())
    }
    Some(match array.data_type() {
        DataType::Int8 => signed::<Int8Type>(array),
        DataType::Int16 => signed::<Int16Type>(array),
        DataType::Int32 => signed::<Int32Type>(array),
        DataType::Int64 => signed::<Int64Type>(array),
        DataType::UInt8 => unsigned::<UInt8Type>(array),
        DataType::UInt16 => unsigned::<UInt16Type>(array),
        DataType::UInt32 => unsigned::<UInt32Type>(array),
        DataType::UInt64 => unsigned::<UInt64Type>(array),
        _ => return None,
    })
}

/// One key column of a batch, its type resolved once per batch.
enum KeyValues<'a> {
    Utf8(&'a arrow_array::StringArray),
    LargeUtf8(&'a arrow_array::LargeStringArray),
    View(&'a arrow_array::StringViewArray),
    Integers(Integers),
}

struct KeyColumn<'a> {
    values: KeyValues<'a>,
    nulls: Option<&'a arrow_buffer::NullBuffer>,
}

impl<'a> KeyColumn<'a> {
    /// `None` for a type the schema check refused (not reached).
    fn of(array: &'a ArrayRef) -> Option<KeyColumn<'a>> {
        let values = match array.data_type() {
            DataType::Utf8 => KeyValues::Utf8(array.as_string::<i32>()),
            DataType::LargeUtf8 => KeyValues::LargeUtf8(array.as_string::<i64>()),
            DataType::Utf8View => KeyValues::View(array.as_string_view()),
            _ => KeyValues::Integers(integers(array)?),
        };
        Some(KeyColumn { values, nulls: array.nulls() })
    }

    fn is_null(&self, row: usize) -> bool {
        self.nulls.is_some_and(|n| n.is_null(row))
    }

    /// Encodes the key at `row` as canonical text into `out`; false for null.
    fn encode(&self, row: usize, out: &mut Vec<u8>, digits: &mut itoa::Buffer) -> bool {
        if self.is_null(row) {
            return false;
        }
        match &self.values {
            KeyValues::Utf8(a) => encode_key(out, a.value(row).as_bytes()),
            KeyValues::LargeUtf8(a) => encode_key(out, a.value(row).as_bytes()),
            KeyValues::View(a) => encode_key(out, a.value(row).as_bytes()),
            KeyValues::Integers(Integers::Signed(v)) => encode_key(out, digits.format(v[row]).as_bytes()),
            KeyValues::Integers(Integers::Unsigned(v)) => encode_key(out, digits.format(v[row]).as_bytes()),
        }
        true
    }
}

/// The measure column of a batch, its type resolved once per batch.
enum MeasureValues<'a> {
    Decimal(&'a [i128], i8),
    Integers(Integers),
}

struct MeasureColumn<'a> {
    values: MeasureValues<'a>,
    nulls: Option<&'a arrow_buffer::NullBuffer>,
    scale: u32,
}

impl<'a> MeasureColumn<'a> {
    fn of(array: &'a ArrayRef, scale: u32) -> Option<MeasureColumn<'a>> {
        let values = match array.data_type() {
            DataType::Decimal128(_, from) => MeasureValues::Decimal(array.as_primitive::<Decimal128Type>().values(), *from),
            _ => MeasureValues::Integers(integers(array)?),
        };
        Some(MeasureColumn { values, nulls: array.nulls(), scale })
    }

    /// The measure at `row` in `10^-scale` units: `Ok(None)` for null, `Err` if not
    /// representable.
    fn at(&self, row: usize) -> std::result::Result<Option<i64>, String> {
        if self.nulls.is_some_and(|n| n.is_null(row)) {
            return Ok(None);
        }
        let scale = self.scale;
        let integer = |value: i128| {
            scale_integer(value, scale).map(Some).ok_or_else(|| format!("{value} does not fit a 64-bit integer at scale {scale}"))
        };
        match &self.values {
            MeasureValues::Decimal(values, from) => {
                let unscaled = values[row];
                rescale_decimal(unscaled, *from, scale)
                    .map(Some)
                    .ok_or_else(|| format!("decimal {unscaled}e-{from} is not exact at scale {scale} or does not fit a 64-bit integer"))
            }
            MeasureValues::Integers(Integers::Signed(v)) if scale == 0 => Ok(Some(v[row])),
            MeasureValues::Integers(Integers::Signed(v)) => integer(i128::from(v[row])),
            MeasureValues::Integers(Integers::Unsigned(v)) => integer(i128::from(v[row])),
        }
    }
}

/// Reads one Parquet file into `sink`.
///
/// # Errors
/// [`crate::Error::Io`] if the key set cannot spill. Problems of the file itself are gate
/// failures in `sink`.
/// The columns of a Parquet file as `name type`, in file order, from its footer (`None` if it
/// cannot be read as Parquet).
pub(crate) fn typed_columns(source: Source) -> Option<Vec<String>> {
    match source {
        Source::File(file) => typed_columns_of(file),
        #[cfg(feature = "s3")]
        Source::Object(object) => typed_columns_of(object),
    }
}

fn typed_columns_of(file: impl ChunkReader + 'static) -> Option<Vec<String>> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).ok()?;
    Some(builder.schema().fields().iter().map(|f| format!("{} {}", f.name(), f.data_type())).collect())
}

pub(super) fn read(source: Source, rel: &str, grain: &Grain, dataset_columns: Option<&[String]>, sink: &mut Sink) -> Result<()> {
    match source {
        Source::File(file) => read_chunks(file, rel, grain, dataset_columns, sink),
        #[cfg(feature = "s3")]
        Source::Object(object) => read_chunks(object, rel, grain, dataset_columns, sink),
    }
}

fn read_chunks(
    file: impl ChunkReader + 'static,
    rel: &str,
    grain: &Grain,
    dataset_columns: Option<&[String]>,
    sink: &mut Sink,
) -> Result<()> {
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
    // The dataset's published files fix its schema (a Delta table over it has one): another
    // order or another type of the same columns is refused here, before it is published.
    if let Some(expected) = dataset_columns {
        let got: Vec<String> = schema.fields().iter().map(|f| format!("{} {}", f.name(), f.data_type())).collect();
        if got != expected {
            sink.file_failure(GateFailure::ColumnsMismatch { path: rel.to_owned(), expected: expected.to_vec(), got });
            return Ok(());
        }
    }
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
            "its footer claims {} but its row groups hold {}",
            crate::error::count(u64::try_from(claimed).unwrap_or(0), "row"),
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
    let mut digits = itoa::Buffer::new();
    // The key columns in the order a row encodes them (the canonical name order).
    let encode_order = sink.key_order().to_vec();
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
        let key_columns: Option<Vec<KeyColumn<'_>>> = key_positions.iter().map(|&p| KeyColumn::of(batch.column(p))).collect();
        let measure_column = MeasureColumn::of(batch.column(measure_position), grain.measure_scale);
        let (Some(key_columns), Some(measure_column)) = (key_columns, measure_column) else {
            // The schema check admitted only these types; a batch of another type is a file
            // whose data contradicts its schema.
            sink.file_failure(malformed("a batch's column types differ from the file's schema".to_owned()));
            return Ok(());
        };
        for row in 0..batch.num_rows() {
            while rows_read >= group_end && group + 1 < group_rows.len() {
                group += 1;
                group_end += group_rows[group];
            }
            let row_in_group = rows_read - (group_end - group_rows.get(group).copied().unwrap_or(0));
            rows_read += 1;
            let location = || format!("row group {group}, row {row_in_group}");
            let keys = sink.start_row();
            if !encode_order.iter().all(|&i| key_columns[i].encode(row, keys, &mut digits)) {
                // The first null key in the grain's key order is the one named.
                let name = key_columns.iter().zip(&grain.keys).find(|(column, _)| column.is_null(row)).map(|(_, name)| name.clone());
                sink.rejected_row(GateFailure::MissingKey { path: rel.to_owned(), location: location(), column: name.unwrap_or_default() });
                continue;
            }
            match measure_column.at(row) {
                Ok(Some(measure)) => sink.end_row(measure)?,
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
        sink.file_failure(malformed(format!(
            "its footer claims {} but the data holds {rows_read}",
            crate::error::count(u64::try_from(claimed).unwrap_or(0), "row")
        )));
    }
    Ok(())
}

//! Adapters that read a partition's files into rows for the pure digest and gates.
//!
//! A reader turns the content of one file of a declared format into rows: one key text per
//! grain key and the measure as an integer in `10^-scale` units. It hands each row to a
//! [`Sink`], which feeds the canonical digest (`rules::digest`), the checked total and the
//! duplicate-key set (`keys.rs`). Data problems (a bad row, a wrong header, a truncated file)
//! are gate failures kept for the verdict; only I/O faults are errors.
//!
//! Memory is bounded: CSV records are limited to `record_bytes_max` bytes, Parquet is read in
//! batches of [`PARQUET_BATCH_ROWS`] rows, the digest is constant-size and the key set spills
//! to disk past its limit.
//!
//! Invariant: a reader never panics the caller; a panic inside a reader (a dependency's
//! included) becomes a [`GateFailure::MalformedFile`] for that file.

mod csv;
mod keys;
#[cfg(feature = "parquet")]
mod parquet;
#[cfg(feature = "parquet")]
pub(crate) use parquet::typed_columns as parquet_typed_columns;

use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::grain::{DataFormat, Grain};
use crate::model::{FileEntry, GateFailure};
use crate::rules::digest::RowDigest;
pub(crate) use crate::rules::digest::encode_key;

/// Rows per Parquet batch.
#[cfg_attr(not(feature = "parquet"), allow(dead_code, reason = "used by the parquet reader only"))]
pub(crate) const PARQUET_BATCH_ROWS: usize = 8192;
/// Rejected rows listed one by one in a verdict; further ones are counted.
const ROW_FAILURES_LISTED_MAX: usize = 16;

/// One file's content as a reader takes it: a local file opened through directory handles, or
/// an object of a staging root on object storage, streamed in ranged reads (feature `s3`).
pub(crate) enum Source {
    /// A local file.
    File(File),
    /// An object, its ETag pinned.
    #[cfg(feature = "s3")]
    Object(crate::objects::ObjectFile),
}

impl Read for Source {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Source::File(file) => file.read(buf),
            #[cfg(feature = "s3")]
            Source::Object(object) => object.read(buf),
        }
    }
}

/// What tells, after a reader is done with a [`Source`], whether one of its reads failed: the
/// parquet crate turns an I/O failure into its own error, which must be a fault to retry, not a
/// malformed file.
struct FaultWatch(#[cfg(feature = "s3")] Option<crate::objects::FaultCell>);

impl FaultWatch {
    fn of(source: &Source) -> FaultWatch {
        match source {
            #[cfg(feature = "s3")]
            Source::Object(object) => FaultWatch(Some(object.fault_cell())),
            #[cfg(feature = "s3")]
            Source::File(_) => FaultWatch(None),
            #[cfg(not(feature = "s3"))]
            Source::File(_) => FaultWatch(),
        }
    }

    /// The first read failure, if any.
    fn fault(&self) -> Option<String> {
        #[cfg(feature = "s3")]
        return self.0.as_ref().and_then(crate::objects::FaultCell::get);
        #[cfg(not(feature = "s3"))]
        None
    }
}

/// The limits of one validation read.
#[derive(Debug, Clone)]
pub(crate) struct ReadOptions {
    /// Longest CSV record (a row, its quoted newlines included), in bytes.
    pub(crate) record_bytes_max: usize,
    /// Estimated memory of the in-memory key set before it spills to disk, in bytes.
    pub(crate) key_bytes_in_memory_max: usize,
    /// Where the key set spills (a private directory is made inside and removed after).
    pub(crate) spill_parent: PathBuf,
    /// A Parquet file's columns with their types (`name type`, in file order) as the dataset's
    /// published files have them; a file whose columns differ is refused (`ColumnsMismatch`),
    /// so a Delta table over the dataset keeps one schema. `None`: nothing published yet.
    #[cfg_attr(not(feature = "parquet"), allow(dead_code))] // reason: only the Parquet reader checks it
    pub(crate) dataset_columns: Option<Vec<String>>,
}

pub(crate) use crate::rules::validate::Computed as PartitionFigures;

/// Receives the rows of a partition, file after file.
pub(crate) struct Sink {
    digest: RowDigest,
    keys: keys::KeySet,
    key_buffer: Vec<u8>,
    rows: u64,
    total: i128,
    rejected: u64,
    failures: Vec<GateFailure>,
    rows_listed: usize,
    rows_unlisted: u64,
}

impl Sink {
    fn new(grain: &Grain, options: &ReadOptions) -> Sink {
        Sink {
            digest: RowDigest::new(grain),
            keys: keys::KeySet::new(options.key_bytes_in_memory_max, &options.spill_parent),
            key_buffer: Vec::with_capacity(64),
            rows: 0,
            total: 0,
            rejected: 0,
            failures: Vec::new(),
            rows_listed: 0,
            rows_unlisted: 0,
        }
    }

    /// The grain's keys in the order a row's keys are encoded in (the canonical, name order),
    /// as indices into `Grain::keys`.
    pub(crate) fn key_order(&self) -> &[usize] {
        self.digest.key_order()
    }

    /// Starts a row: the cleared buffer the reader encodes the row's keys into, in
    /// [`Sink::key_order`], each with [`encode_key`] (UTF-8 text only): the row's canonical
    /// values without the measure, hashed as they are by the key set and copied into the
    /// digest's block. Then [`Sink::end_row`] adds the row, or [`Sink::rejected_row`]
    /// rejects it.
    pub(crate) fn start_row(&mut self) -> &mut Vec<u8> {
        self.key_buffer.clear();
        &mut self.key_buffer
    }

    /// Adds the row whose keys [`Sink::start_row`]'s buffer holds, with its measure.
    ///
    /// # Errors
    /// [`Error::Io`] if the key set cannot spill; [`Error::InvalidInput`] if the buffer does
    /// not hold one key per grain key (a reader's bug).
    pub(crate) fn end_row(&mut self, measure: i64) -> Result<()> {
        self.rows += 1;
        self.keys.insert(&self.key_buffer)?;
        self.digest.add_keyed(&self.key_buffer, measure)?;
        // An i128 cannot overflow from adding fewer than 2^64 values of an i64.
        self.total += i128::from(measure);
        Ok(())
    }

    /// One row that cannot be read at the grain.
    pub(crate) fn rejected_row(&mut self, failure: GateFailure) {
        self.rows += 1;
        self.rejected += 1;
        if self.rows_listed < ROW_FAILURES_LISTED_MAX {
            self.rows_listed += 1;
            self.failures.push(failure);
        } else {
            self.rows_unlisted += 1;
        }
    }

    /// A problem with a whole file (its columns, its structure).
    pub(crate) fn file_failure(&mut self, failure: GateFailure) {
        self.failures.push(failure);
    }

    fn finish(mut self, files: u64, bytes: u64) -> Result<PartitionFigures> {
        let duplicates = self.keys.finish()?;
        if self.rows_unlisted > 0 {
            self.failures.push(GateFailure::MoreRejectedRows { count: self.rows_unlisted });
        }
        Ok(PartitionFigures {
            rows: self.rows,
            total: i64::try_from(self.total).ok(),
            rejected: self.rejected,
            duplicates: duplicates.count,
            first_duplicate: duplicates.first.map(|k| decode_key(&k, self.digest.key_order())),
            digest: self.digest.finish(),
            files,
            bytes,
            runs_spilled: duplicates.runs_spilled,
            failures: self.failures,
        })
    }
}

/// Splits an encoded key ([`encode_key`] per column, in `key_order`) back into texts in the
/// grain's key order.
fn decode_key(mut encoded: &[u8], key_order: &[usize]) -> Vec<String> {
    let mut out = vec![String::new(); key_order.len()];
    for &i in key_order {
        let Some((len, rest)) = encoded.split_first_chunk::<4>() else { break };
        let len = (u32::from_be_bytes(*len) as usize).min(rest.len());
        out[i] = String::from_utf8_lossy(&rest[..len]).into_owned();
        encoded = &rest[len..];
    }
    out
}

/// Reads every file of a candidate at the grain and computes its figures.
///
/// # Errors
/// [`Error::Io`] when a file or the key spill cannot be read or written (a fault, not a
/// verdict: the caller may retry); [`Error::InvalidInput`] for a Parquet grain in a build
/// without the `parquet` feature.
/// `open` opens one reported file (the store does it through directory handles, without
/// following symlinks); `Ok(None)` means no regular file is there any more. `file_read` is
/// told of each file once it is read (or found missing or malformed).
pub(crate) fn read_partition(
    grain: &Grain,
    staging_rel: &str,
    files: &[FileEntry],
    mut open: impl FnMut(&FileEntry) -> io::Result<Option<(Source, u64)>>,
    mut file_read: impl FnMut(&FileEntry),
    options: &ReadOptions,
) -> Result<PartitionFigures> {
    if grain.format == DataFormat::Parquet && !cfg!(feature = "parquet") {
        return Err(Error::invalid("data format", "parquet", "this build of manifestdb has no Parquet support (cargo feature `parquet`)"));
    }
    let mut sink = Sink::new(grain, options);
    let (mut files_read, mut bytes) = (0u64, 0u64);
    for entry in files {
        let path = format!("{staging_rel}/{}", entry.path);
        let Some((file, size)) = open(entry).map_err(|e| Error::io(format!("opening {path} in the staging root"), e))? else {
            sink.file_failure(GateFailure::FileMissing { path: entry.path.clone() });
            file_read(entry);
            continue;
        };
        files_read += 1;
        bytes += size;
        let watch = FaultWatch::of(&file);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match grain.format {
            DataFormat::Csv => csv::read(file, &entry.path, grain, options.record_bytes_max, &mut sink),
            #[cfg(feature = "parquet")]
            DataFormat::Parquet => parquet::read(file, &entry.path, grain, options.dataset_columns.as_deref(), &mut sink),
            #[cfg(not(feature = "parquet"))]
            DataFormat::Parquet => {
                // Refused above, before any file is read; nothing to read here.
                drop(file);
                Ok(())
            }
        }));
        match outcome {
            Ok(result) => {
                result.map_err(|e| match e {
                    Error::Io { context, source } => Error::Io { context: format!("{context} ({path})"), source },
                    other => other,
                })?;
                if let Some(fault) = watch.fault() {
                    // A read of the object failed under the reader: whatever it concluded is not
                    // a verdict on the file.
                    return Err(Error::io(format!("reading {path} from object storage"), io::Error::other(fault)));
                }
            }
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_owned());
                sink.file_failure(GateFailure::MalformedFile {
                    path: entry.path.clone(),
                    message: format!("the {} reader failed on it: {message}", grain.format),
                });
            }
        }
        file_read(entry);
    }
    sink.finish(files_read, bytes)
}

/// The grain's columns in ascending name order (the order `ColumnsMismatch` lists them in).
pub(crate) fn grain_columns_sorted(grain: &Grain) -> Vec<String> {
    let mut columns: Vec<String> = grain.keys.iter().chain(std::iter::once(&grain.measure)).cloned().collect();
    columns.sort();
    columns
}

/// Where each grain column sits among a file's columns: `(key positions, measure position)`,
/// or `None` unless the file's columns are exactly the grain's, each once.
pub(crate) fn column_positions(grain: &Grain, file_columns: &[String]) -> Option<(Vec<usize>, usize)> {
    let mut sorted: Vec<&String> = file_columns.iter().collect();
    sorted.sort();
    let expected = grain_columns_sorted(grain);
    if sorted.len() != expected.len() || sorted.iter().zip(&expected).any(|(a, b)| *a != b) {
        return None;
    }
    let position = |name: &String| file_columns.iter().position(|c| c == name);
    let keys = grain.keys.iter().map(position).collect::<Option<Vec<usize>>>()?;
    Some((keys, position(&grain.measure)?))
}

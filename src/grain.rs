//! The declared grain of a run's output and what validation computed from the data.
//!
//! A run may declare a [`Grain`]: the format of its partitions' files, the key columns that
//! identify one row (one invoice line, one store-item-day) and the measure column whose sum is
//! the task's total. Validation then reads every file of a candidate (outside the write
//! transaction, streaming, with bounded memory) and computes the row count, the measure's
//! total, the duplicate grain keys and the canonical digest ([`crate::RowDigest`]); the
//! figures it computed are kept beside the verdict as a [`Reconciliation`]. A run without a
//! grain keeps the reported-number checks, and its reconciliation says so
//! ([`ReconcileBasis::Reported`]).
//!
//! These types are embedded in stored records (the run record and the attempt record), so
//! changing their fields needs a format version bump (see `schema.rs`).

use serde::{Deserialize, Serialize};

/// The file format of a dataset's partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum DataFormat {
    /// RFC 4180 CSV with a header line: comma separated, `"` quoting, UTF-8.
    Csv,
    /// Apache Parquet (flat schema). Validating it needs the crate's `parquet` feature.
    Parquet,
}

impl DataFormat {
    /// The lowercase name (`csv`, `parquet`), as the CLI spells it.
    pub fn name(self) -> &'static str {
        match self {
            DataFormat::Csv => "csv",
            DataFormat::Parquet => "parquet",
        }
    }

    /// Parses [`DataFormat::name`].
    pub fn from_name(name: &str) -> Option<DataFormat> {
        match name {
            "csv" => Some(DataFormat::Csv),
            "parquet" => Some(DataFormat::Parquet),
            _ => None,
        }
    }
}

impl std::fmt::Display for DataFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What one row of a run's output means, and what validation needs to check it at that grain.
///
/// Every file of a partition holds exactly the columns `keys` and `measure` (in any order, no
/// other column), so the canonical digest covers the whole content of a row.
///
/// ```
/// use manifestdb::{DataFormat, Grain};
///
/// // One row per invoice line; the measure in cents, written with two decimals (`12.50`).
/// let grain = Grain { measure_scale: 2, ..Grain::new(DataFormat::Parquet, &["invoice_id", "line"], "amount") };
/// assert_eq!(grain.keys, ["invoice_id", "line"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Grain {
    /// The format of the partition's files.
    pub format: DataFormat,
    /// The grain key columns: at most one row may hold each combination (for example
    /// `["store", "item"]` for daily units, `["invoice_id", "line"]` for invoice lines). Keys
    /// are compared as text (see [`crate::RowDigest`] for how typed Parquet keys become text).
    pub keys: Vec<String>,
    /// The measure column whose sum is the task's expected total (for example `units`,
    /// `amount_cents`): an integer, or a decimal with at most `measure_scale` fractional digits.
    pub measure: String,
    /// The measure's declared decimal scale: the measure is summed as an integer number of
    /// `10^-measure_scale` units (0 for plain integers; `2` to read `12.50` as 1250 cents).
    pub measure_scale: u32,
}

impl Grain {
    /// A grain with integer measure (scale 0).
    pub fn new(format: DataFormat, keys: &[&str], measure: &str) -> Grain {
        Grain { format, keys: keys.iter().map(|k| (*k).to_owned()).collect(), measure: measure.to_owned(), measure_scale: 0 }
    }
}

/// On what a verdict's figures are based.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ReconcileBasis {
    /// The run declares no grain: only the figures the worker reported were compared with the
    /// expectations; no file content was read.
    Reported,
    /// The store read every file of the candidate and computed the figures itself.
    Read {
        /// The format the files were read as.
        format: DataFormat,
    },
}

/// The figures of a verdict, expected, reported and (with a grain) computed, side by side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciliation {
    /// Whether the store read the data or only compared reported figures.
    pub basis: ReconcileBasis,
    /// Rows the task expects.
    pub expected_rows: u64,
    /// Total the task expects, if it declares one.
    pub expected_total: Option<i64>,
    /// Rows the worker reported, if it reported them.
    pub reported_rows: Option<u64>,
    /// Total the worker reported, if it reported one.
    pub reported_total: Option<i64>,
    /// Digest the worker reported, if it reported one.
    pub reported_digest: Option<String>,
    /// Data rows the store read (every row, including rejected ones). `None` without a grain.
    pub computed_rows: Option<u64>,
    /// Sum of the measure over the accepted rows, in `10^-scale` units. `None` without a
    /// grain, or when the sum does not fit an `i64`.
    pub computed_total: Option<i64>,
    /// Rows whose grain key another row already holds (`rows - distinct keys`, over rows with
    /// a complete key).
    pub duplicate_keys: u64,
    /// Rows rejected for a missing key or an unparsable measure.
    pub rejected_rows: u64,
    /// The canonical digest of the rows the store read ([`crate::RowDigest`]); the digest a
    /// publish records and compares. `None` without a grain.
    pub computed_digest: Option<String>,
    /// Files read.
    pub files_read: u64,
    /// Bytes read from them.
    pub bytes_read: u64,
}

impl Reconciliation {
    /// The figures a publish uses: computed ones where the store read the data, reported ones
    /// otherwise. `(rows, total, digest)`.
    pub fn effective(&self) -> (Option<u64>, Option<i64>, Option<&str>) {
        match self.basis {
            ReconcileBasis::Reported => (self.reported_rows, self.reported_total, self.reported_digest.as_deref()),
            ReconcileBasis::Read { .. } => (self.computed_rows, self.computed_total, self.computed_digest.as_deref()),
        }
    }
}

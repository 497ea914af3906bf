//! The Delta Lake log of a Parquet dataset's views, written with the official Delta kernel
//! (`delta_kernel`, its default engine on the local file system): one commit per generation,
//! Delta version = generation - 1.
//!
//! This module only talks to the kernel: it reads the table's latest version, commits one
//! version (create, or `add`/`remove` actions so the table holds exactly the files asked for),
//! writes a checkpoint, and lists a version's files. What a version holds, where its data files
//! live, durability and the removal of expired log entries are decided and done by
//! `crate::views` (plan, then apply); a commit here is followed there by an fsync of every log
//! file it wrote and of the log directory.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Int64Array, StringArray, StructArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use delta_kernel::committer::FileSystemCommitter;
use delta_kernel::engine::arrow_conversion::TryFromArrow;
use delta_kernel::engine::arrow_data::ArrowEngineData;
use delta_kernel::expressions::Scalar;
use delta_kernel::object_store::local::LocalFileSystem;
use delta_kernel::schema::{DataType as KernelType, StructField, StructType};
use delta_kernel::transaction::create_table::create_table;
use delta_kernel::transaction::data_layout::DataLayout;
use delta_kernel::transaction::{CommitResult, UpdateTableOperation};
use delta_kernel::{Engine, FileMeta, FilteredEngineData, Snapshot};
use delta_kernel_default_engine::executor::tokio::TokioMultiThreadExecutor;
use delta_kernel_default_engine::parquet::DataFileMetadata;
use delta_kernel_default_engine::{DefaultEngine, DefaultEngineBuilder, build_add_file_metadata};
use url::Url;

/// Who writes the table, as its commits record it.
const ENGINE_INFO: &str = concat!("manifestdb/", env!("CARGO_PKG_VERSION"));

/// One data file of a version: its path relative to the table root (`/`-separated, not
/// URL-encoded), its hive partition values, size, row count and modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeltaFile {
    pub(crate) rel: String,
    pub(crate) partition_values: Vec<(String, String)>,
    pub(crate) size: u64,
    pub(crate) num_records: i64,
    pub(crate) modified_ms: i64,
}

/// A fault of the kernel, as text (no kernel type leaves this module).
#[derive(Debug)]
pub(crate) struct DeltaError(pub(crate) String);

impl std::fmt::Display for DeltaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DeltaError {}

impl From<delta_kernel::KernelError> for DeltaError {
    fn from(e: delta_kernel::KernelError) -> Self {
        DeltaError(e.to_string())
    }
}

impl From<arrow_schema::ArrowError> for DeltaError {
    fn from(e: arrow_schema::ArrowError) -> Self {
        DeltaError(e.to_string())
    }
}

type DResult<T> = std::result::Result<T, DeltaError>;

/// The kernel's engine over the local file system (its I/O runs on a small multi-threaded
/// runtime of its own, which the kernel's checkpoint writer needs). One per `Views`.
pub(crate) struct DeltaEngine {
    engine: DefaultEngine<TokioMultiThreadExecutor>,
}

impl std::fmt::Debug for DeltaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeltaEngine")
    }
}

/// A table's latest version as one read found it (the kernel's snapshot, kept opaque).
pub(crate) struct Head {
    snapshot: Option<delta_kernel::snapshot::SnapshotRef>,
}

impl Head {
    /// The latest version, `None` for a table without a log.
    pub(crate) fn version(&self) -> Option<u64> {
        self.snapshot.as_ref().map(|s| s.version())
    }
}

fn table_url(table: &Path) -> DResult<Url> {
    Url::from_directory_path(table).map_err(|()| DeltaError(format!("{} is not an absolute directory path", table.display())))
}

impl DeltaEngine {
    pub(crate) fn new() -> DResult<DeltaEngine> {
        let executor = TokioMultiThreadExecutor::new_owned_runtime(Some(2), Some(4))?;
        Ok(DeltaEngine {
            engine: DefaultEngineBuilder::new(Arc::new(LocalFileSystem::new())).with_task_executor(Arc::new(executor)).build(),
        })
    }

    fn engine(&self) -> &dyn Engine {
        &self.engine
    }

    /// The table's latest version as read now ([`Head::version`] is `None` if `table` has no
    /// Delta log yet). The snapshot read is kept for the next [`DeltaEngine::commit`], which
    /// then need not read the log again.
    pub(crate) fn head(&self, table: &Path) -> DResult<Head> {
        if !has_commits(table) {
            return Ok(Head { snapshot: None });
        }
        Ok(Head { snapshot: Some(Snapshot::builder_for(table_url(table)?).build(self.engine())?) })
    }

    /// Commits version `version` so the table holds exactly `files` (a new table at version 0
    /// with `schema` and `partition_columns`; later versions `remove` what is not in `files`
    /// and `add` what is new). `generation` is recorded as the commit's transaction identifier
    /// (`txn` action, app id `manifestdb`), so a reader can map versions to generations.
    /// Refused (an error) if the table's latest version is not `version - 1`. `head`: the
    /// table as last read; its snapshot is used if it is of `version - 1` (else the log is
    /// read again).
    #[allow(clippy::too_many_arguments)] // reason: one commit's table, versions, schema and files
    pub(crate) fn commit(
        &self,
        head: &Head,
        table: &Path,
        version: u64,
        generation: u64,
        schema: &ArrowSchema,
        partition_columns: &[String],
        files: &[DeltaFile],
    ) -> DResult<()> {
        let url = table_url(table)?;
        let engine = self.engine();
        let committed = if version == 0 {
            let mut fields: Vec<StructField> = StructType::try_from_arrow(schema)?.fields().cloned().collect();
            for column in partition_columns {
                if fields.iter().any(|f| f.name() == column) {
                    return Err(DeltaError(format!("the partition column {column} is also a column of the Parquet files")));
                }
                fields.push(StructField::nullable(column.clone(), KernelType::STRING));
            }
            let kernel_schema = Arc::new(StructType::try_new(fields)?);
            let layout = if partition_columns.is_empty() { DataLayout::None } else { DataLayout::partitioned(partition_columns) };
            let mut txn = create_table(url.as_str(), kernel_schema, ENGINE_INFO, true)
                .with_data_layout(layout)
                .build(engine, Box::new(FileSystemCommitter::new()))?
                .with_transaction_id("manifestdb".to_owned(), generation as i64);
            for file in files {
                let add = add_metadata(&url, &txn.write_state()?, file)?;
                txn.add_files(add);
            }
            match txn.commit(engine)? {
                CommitResult::Committed(c) => c.commit_version(),
                CommitResult::Conflicted(c) => return Err(DeltaError(format!("version {} exists already", c.conflict_version()))),
                other => return Err(DeltaError(format!("the commit failed: {other:?}"))),
            }
        } else {
            let snapshot = match &head.snapshot {
                Some(snapshot) if snapshot.version() + 1 == version => Arc::clone(snapshot),
                _ => Snapshot::builder_for(url.as_str()).build(engine)?,
            };
            if snapshot.version() + 1 != version {
                return Err(DeltaError(format!("the table is at version {}, not {}", snapshot.version(), version - 1)));
            }
            let wanted: BTreeMap<&str, &DeltaFile> = files.iter().map(|f| (f.rel.as_str(), f)).collect();
            let mut present = BTreeSet::new();
            let mut txn = snapshot
                .clone()
                .update_table(UpdateTableOperation::Write, ENGINE_INFO, true)
                .build(engine, Box::new(FileSystemCommitter::new()))?
                .with_transaction_id("manifestdb".to_owned(), generation as i64);
            for meta in snapshot.scan_builder().build()?.scan_metadata(engine)? {
                let (data, selection) = meta?.scan_files.into_parts();
                let paths = paths_of_ref(data.as_ref())?;
                let mut remove = vec![false; paths.len()];
                for (i, path) in paths.iter().enumerate() {
                    if !selection.get(i).copied().unwrap_or(true) {
                        continue;
                    }
                    let rel = decode(path);
                    if wanted.contains_key(rel.as_str()) {
                        present.insert(rel);
                    } else {
                        remove[i] = true;
                    }
                }
                if remove.iter().any(|r| *r) {
                    txn.remove_files(FilteredEngineData::try_new(data, remove)?);
                }
            }
            for file in files.iter().filter(|f| !present.contains(&f.rel)) {
                let add = add_metadata(&url, &txn.write_state()?, file)?;
                txn.add_files(add);
            }
            match txn.commit(engine)? {
                CommitResult::Committed(c) => c.commit_version(),
                CommitResult::Conflicted(c) => return Err(DeltaError(format!("version {} exists already", c.conflict_version()))),
                other => return Err(DeltaError(format!("the commit failed: {other:?}"))),
            }
        };
        if committed != version {
            return Err(DeltaError(format!("committed version {committed}, expected {version}")));
        }
        Ok(())
    }

    /// Writes a (classic, single-file) checkpoint of `version` unless one exists.
    pub(crate) fn checkpoint(&self, table: &Path, version: u64) -> DResult<()> {
        let snapshot = Snapshot::builder_for(table_url(table)?).at_version(version).build(self.engine())?;
        snapshot.checkpoint(self.engine(), None)?;
        Ok(())
    }
}

/// Whether `table/_delta_log` holds a commit or checkpoint.
fn has_commits(table: &Path) -> bool {
    std::fs::read_dir(table.join(crate::rules::delta::LOG_DIR))
        .map(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().as_bytes().first().is_some_and(u8::is_ascii_digit)))
        .unwrap_or(false)
}

/// A URL path component as a file path component (`%3D` to `=`, ...).
fn decode(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex_digit(bytes[i + 1]), hex_digit(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_digit(b: u8) -> Option<u8> {
    (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

fn paths_of_ref(data: &dyn delta_kernel::EngineData) -> DResult<Vec<String>> {
    let arrow =
        data.any_ref().downcast_ref::<ArrowEngineData>().ok_or_else(|| DeltaError("the kernel's scan rows are not Arrow data".into()))?;
    let batch = arrow.record_batch();
    let column = batch
        .column_by_name("path")
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| DeltaError("the kernel's scan rows have no path column".into()))?;
    Ok((0..column.len()).map(|i| column.value(i).to_owned()).collect())
}

/// The `add` action metadata of one file, through the kernel's own builder.
fn add_metadata(
    table: &Url,
    write_state: &Arc<delta_kernel::transaction::WriteState>,
    file: &DeltaFile,
) -> DResult<Box<dyn delta_kernel::EngineData>> {
    let values: HashMap<String, Scalar> = file.partition_values.iter().map(|(k, v)| (k.clone(), Scalar::String(v.clone()))).collect();
    let context = write_state.write_context_builder().with_partition_values(values).build()?;
    let mut location = table.clone();
    {
        let mut segments = location.path_segments_mut().map_err(|()| DeltaError("the table URL cannot be a base".into()))?;
        segments.pop_if_empty();
        for part in file.rel.split('/') {
            segments.push(part);
        }
    }
    let stats = StructArray::from(vec![(
        Arc::new(Field::new("numRecords", DataType::Int64, true)),
        Arc::new(Int64Array::from(vec![file.num_records])) as ArrayRef,
    )]);
    let meta = FileMeta { location, last_modified: file.modified_ms, size: file.size };
    Ok(build_add_file_metadata(DataFileMetadata::new(meta, stats), &context)?)
}

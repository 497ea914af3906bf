//! The Delta Lake log of a Parquet dataset's views, written with the official Delta kernel
//! (`delta_kernel`, its default engine on the local file system, in the object store's fsync
//! mode): one commit per generation, marked by a `txn` action (app id `manifestdb`, version =
//! the generation), on top of whatever version the log holds.
//!
//! This module only talks to the kernel: it reads the table's latest version, commits one
//! version (create, or `add`/`remove` actions so the table holds exactly the files asked for),
//! writes a checkpoint, and lists a version's files. What a version holds, where its data files
//! live, durability and the removal of expired log entries are decided and done by
//! `crate::views` (plan, then apply); a commit here is followed there by an fsync of every log
//! file it wrote and of the log directory.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
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
    /// Per table, the snapshot of the version this engine committed last (the kernel's
    /// post-commit snapshot), and the log's listing the caller vouched for after that commit
    /// (see [`DeltaEngine::keep_listing`]). [`DeltaEngine::head_kept`] hands it out again only
    /// while the log lists exactly those names, so the next change commit reads no log.
    kept: parking_lot::Mutex<HashMap<PathBuf, Kept>>,
}

/// A snapshot kept between commits.
struct Kept {
    snapshot: delta_kernel::snapshot::SnapshotRef,
    /// The log's names (sorted) right after the commit and its retention; `None` until the
    /// caller vouches for them, which only the change commit does.
    listing: Option<Vec<String>>,
}

impl std::fmt::Debug for DeltaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeltaEngine")
    }
}

/// The table properties the store sets at creation: files a retained generation names are the
/// store's to remove (its retention), so Delta's default `vacuum` keeps them for a century; the
/// log's retained versions likewise, so a Delta writer's log cleanup never drops a version the
/// store still maps to a generation.
const TABLE_PROPERTIES: &[(&str, &str)] = &[
    ("delta.deletedFileRetentionDuration", "interval 36500 days"),
    ("delta.logRetentionDuration", "interval 36500 days"),
    ("delta.enableExpiredLogCleanup", "false"),
];

/// A commit begun by [`DeltaEngine::prepare`].
pub(crate) struct Prepared {
    txn: Option<delta_kernel::transaction::Transaction>,
    /// The wanted files the latest version lacks: to be placed and described by the caller.
    pub(crate) missing: Vec<String>,
    generation: u64,
    base: Option<u64>,
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
        Self::on_store(Arc::new(LocalFileSystem::new().with_fsync(true)))
    }

    /// The engine over `store` (an S3 bucket's client, for a table on object storage: every log
    /// entry is written with a PUT `If-None-Match: *`, the object store's `PutMode::Create`, so
    /// a commit that lost the race for its version is refused by the server, never overwrites).
    /// Tables are then named by URL (`s3://bucket/prefix/`), the `*_url` methods.
    #[cfg(feature = "s3")]
    pub(crate) fn on_object_store(store: Arc<dyn delta_kernel::object_store::ObjectStore>) -> DResult<DeltaEngine> {
        Self::on_store(store)
    }

    fn on_store(store: Arc<dyn delta_kernel::object_store::ObjectStore>) -> DResult<DeltaEngine> {
        let executor = TokioMultiThreadExecutor::new_owned_runtime(Some(2), Some(4))?;
        Ok(DeltaEngine {
            engine: DefaultEngineBuilder::new(store).with_task_executor(Arc::new(executor)).build(),
            kept: parking_lot::Mutex::new(HashMap::new()),
        })
    }

    fn engine(&self) -> &dyn Engine {
        &self.engine
    }

    /// The table's latest version as read now ([`Head::version`] is `None` if `table` has no
    /// Delta log yet). The snapshot read is kept for the next [`DeltaEngine::commit`], which
    /// then need not read the log again.
    pub(crate) fn head(&self, table: &Path) -> DResult<Head> {
        self.head_url(&table_url(table)?, has_commits(table))
    }

    /// [`DeltaEngine::head`] of the table at `table` (a directory URL), whose log the caller
    /// found to hold a commit or checkpoint (`has_log`) or not.
    pub(crate) fn head_url(&self, table: &Url, has_log: bool) -> DResult<Head> {
        if !has_log {
            return Ok(Head { snapshot: None });
        }
        Ok(Head { snapshot: Some(Snapshot::builder_for(table.clone()).build(self.engine())?) })
    }

    /// [`DeltaEngine::head`] without reading the log when this engine committed `latest` itself
    /// and the log lists exactly `listing` (sorted), as it did when the caller last called
    /// [`DeltaEngine::keep_listing`] after that commit: the kept post-commit snapshot is then
    /// the table's latest version (a log entry written, removed or replaced by a name since,
    /// by anyone, changes the listing). Otherwise the log is read.
    pub(crate) fn head_kept(&self, table: &Path, latest: u64, listing: &[String]) -> DResult<Head> {
        let kept = self
            .kept
            .lock()
            .get(table)
            .and_then(|k| (k.snapshot.version() == latest && k.listing.as_deref() == Some(listing)).then(|| Arc::clone(&k.snapshot)));
        match kept {
            Some(snapshot) => Ok(Head { snapshot: Some(snapshot) }),
            None => self.head(table),
        }
    }

    #[cfg(feature = "s3")]
    /// [`DeltaEngine::head_kept`] of the table at `table` (a directory URL, whose log holds a
    /// version): the snapshot [`DeltaEngine::finish_url`] kept, while the log lists exactly what
    /// [`DeltaEngine::keep_listing_url`] vouched for.
    pub(crate) fn head_kept_url(&self, table: &Url, latest: u64, listing: &[String]) -> DResult<Head> {
        let kept = self
            .kept
            .lock()
            .get(Path::new(table.as_str()))
            .and_then(|k| (k.snapshot.version() == latest && k.listing.as_deref() == Some(listing)).then(|| Arc::clone(&k.snapshot)));
        match kept {
            Some(snapshot) => Ok(Head { snapshot: Some(snapshot) }),
            None => self.head_url(table, true),
        }
    }

    #[cfg(feature = "s3")]
    /// [`DeltaEngine::keep_listing`] of the table at `table` (a directory URL).
    pub(crate) fn keep_listing_url(&self, table: &Url, version: u64, listing: Vec<String>) {
        self.keep_listing(Path::new(table.as_str()), version, listing);
    }

    /// Vouches that `table`'s log lists exactly `listing` (sorted) right after this engine's
    /// last commit to it and whatever the caller then did to the log (its retention): the next
    /// [`DeltaEngine::head_kept`] that finds the same listing reuses the commit's snapshot.
    /// Does nothing unless this engine's last commit to `table` was version `version`.
    pub(crate) fn keep_listing(&self, table: &Path, version: u64, listing: Vec<String>) {
        if let Some(kept) = self.kept.lock().get_mut(table).filter(|k| k.snapshot.version() == version) {
            kept.listing = Some(listing);
        }
    }

    /// The first half of a commit of generation `generation` over the table as `head` read it
    /// (its latest version, whoever wrote it): the files of `wanted` (paths relative to the
    /// table root) that the latest version does not hold, which the caller places and
    /// describes before [`DeltaEngine::finish`]; and, for a table that exists, a `remove` of
    /// every file it holds that is not wanted (another writer's appends included), so the
    /// committed version holds exactly `wanted`. One scan of the latest version.
    pub(crate) fn prepare(&self, head: &Head, generation: u64, wanted: &BTreeSet<String>) -> DResult<Prepared> {
        let Some(snapshot) = &head.snapshot else {
            return Ok(Prepared { txn: None, missing: wanted.iter().cloned().collect(), generation, base: None });
        };
        let engine = self.engine();
        let mut present = BTreeSet::new();
        let mut txn = Arc::clone(snapshot)
            .update_table(UpdateTableOperation::Write, ENGINE_INFO, true)
            .build(engine, Box::new(FileSystemCommitter::new()))?
            .with_transaction_id(crate::rules::delta::APP_ID.to_owned(), generation as i64);
        for meta in Arc::clone(snapshot).scan_builder().build()?.scan_metadata(engine)? {
            let (data, selection) = meta?.scan_files.into_parts();
            let paths = paths_of_ref(data.as_ref())?;
            let mut remove = vec![false; paths.len()];
            for (i, path) in paths.iter().enumerate() {
                if !selection.get(i).copied().unwrap_or(true) {
                    continue;
                }
                let rel = crate::rules::delta::decode_path(path);
                if wanted.contains(&rel) {
                    present.insert(rel);
                } else {
                    remove[i] = true;
                }
            }
            if remove.iter().any(|r| *r) {
                txn.remove_files(FilteredEngineData::try_new(data, remove)?);
            }
        }
        let missing = wanted.iter().filter(|rel| !present.contains(*rel)).cloned().collect();
        Ok(Prepared { txn: Some(txn), missing, generation, base: Some(snapshot.version()) })
    }

    /// The first half of a commit of generation `generation` that changes the table as `head`
    /// read it by exactly `removed` (files an earlier version of the store added, as the store
    /// recorded them) plus the files the caller then adds in [`DeltaEngine::finish`]: no scan
    /// of the table, so its cost follows the change, not the table. The caller vouches that the
    /// latest version holds exactly the generation the change starts from (its own commit, on
    /// top). `None` if the table's partition columns are not `partition_columns` (the caller
    /// then takes the scanning path, which says why).
    pub(crate) fn prepare_change(
        &self,
        head: &Head,
        table: &Path,
        generation: u64,
        partition_columns: &[String],
        removed: &[DeltaFile],
    ) -> DResult<Option<Prepared>> {
        self.prepare_change_url(head, &table_url(table)?, generation, partition_columns, removed)
    }

    /// [`DeltaEngine::prepare_change`] of the table at `table` (a directory URL).
    pub(crate) fn prepare_change_url(
        &self,
        head: &Head,
        table: &Url,
        generation: u64,
        partition_columns: &[String],
        removed: &[DeltaFile],
    ) -> DResult<Option<Prepared>> {
        let Some(snapshot) = &head.snapshot else {
            return Ok(None);
        };
        let engine = self.engine();
        let mut txn = Arc::clone(snapshot)
            .update_table(UpdateTableOperation::Write, ENGINE_INFO, true)
            .build(engine, Box::new(FileSystemCommitter::new()))?
            .with_transaction_id(crate::rules::delta::APP_ID.to_owned(), generation as i64);
        if txn.logical_partition_columns() != partition_columns {
            return Ok(None);
        }
        if !removed.is_empty() {
            let url = table.clone();
            let mut rows = Vec::with_capacity(removed.len());
            for file in removed {
                let location = location(&url, &file.rel)?;
                let path =
                    url.make_relative(&location).ok_or_else(|| DeltaError(format!("{} is not under the table root {url}", file.rel)))?;
                let values: serde_json::Map<String, serde_json::Value> =
                    file.partition_values.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
                rows.push(
                    serde_json::json!({
                        "path": path,
                        "size": file.size,
                        "modificationTime": file.modified_ms,
                        "fileConstantValues": { "partitionValues": values },
                    })
                    .to_string(),
                );
            }
            // The rows in the kernel's own scan-row shape, parsed by its own JSON reader: what a
            // scan of the table would have handed over for these files.
            let lines: ArrayRef = Arc::new(StringArray::from(rows));
            let batch = arrow_array::RecordBatch::try_from_iter([("json", lines)])?;
            let data = engine.json_handler().parse_json(Box::new(ArrowEngineData::new(batch)), delta_kernel::scan::scan_row_schema())?;
            txn.remove_files(FilteredEngineData::with_all_rows_selected(data));
        }
        Ok(Some(Prepared { txn: Some(txn), missing: Vec::new(), generation, base: Some(snapshot.version()) }))
    }

    /// Commits what [`DeltaEngine::prepare`] began, adding `files` (the missing ones, placed
    /// and durable): for a new table, version 0 with `schema`, `partition_columns` and the
    /// table properties that keep Delta's own maintenance off the store's files. The store's
    /// `txn` action (app id `manifestdb`, version = the generation) marks the commit as the
    /// store's. Every log object is written under a temporary name, fsynced, linked into place
    /// without replacing anything and its directory fsynced (the object store's fsync mode).
    /// Returns the version committed; refused if another writer took the version meanwhile.
    pub(crate) fn finish(
        &self,
        prepared: Prepared,
        table: &Path,
        schema: &ArrowSchema,
        partition_columns: &[String],
        files: &[DeltaFile],
    ) -> DResult<u64> {
        let base = prepared.base;
        let (finished, snapshot) = self.finish_kept(prepared, &table_url(table)?, schema, partition_columns, files)?;
        self.keep(table.to_path_buf(), snapshot);
        match finished {
            Finished::Committed(committed) => {
                if base.is_some_and(|base| committed != base + 1) {
                    return Err(DeltaError(format!("committed version {committed} over a table read at {base:?}")));
                }
                Ok(committed)
            }
            Finished::Conflicted(version) => {
                Err(DeltaError(format!("version {version} was written by another writer meanwhile; the next sync commits on top of it")))
            }
            Finished::Unknown { reason, .. } => Err(DeltaError(reason)),
        }
    }

    #[cfg(feature = "s3")]
    /// [`DeltaEngine::finish`] of the table at `table` (a directory URL), saying what became of
    /// the commit: committed, refused because the version exists (put-if-absent), or unknown
    /// (the write failed after its retries: it may have landed; only the log on the server can
    /// tell, see [`Finished::Unknown`]). An error is a failure before the commit was sent.
    pub(crate) fn finish_url(
        &self,
        prepared: Prepared,
        table: &Url,
        schema: &ArrowSchema,
        partition_columns: &[String],
        files: &[DeltaFile],
    ) -> DResult<Finished> {
        let (finished, snapshot) = self.finish_kept(prepared, table, schema, partition_columns, files)?;
        // Kept under the URL (never a local path: it starts with a scheme).
        self.keep(PathBuf::from(table.as_str()), snapshot);
        Ok(finished)
    }

    /// Keeps the snapshot of the version this engine just committed to the table at `key`
    /// (not yet vouched for: see [`DeltaEngine::keep_listing`]), or forgets the table's if the
    /// commit gave none.
    fn keep(&self, key: PathBuf, snapshot: Option<delta_kernel::snapshot::SnapshotRef>) {
        let mut kept = self.kept.lock();
        match snapshot {
            Some(snapshot) => kept.insert(key, Kept { snapshot, listing: None }),
            None => kept.remove(&key),
        };
    }

    /// [`DeltaEngine::finish_url`], with the kernel's snapshot of the version it committed.
    fn finish_kept(
        &self,
        prepared: Prepared,
        table: &Url,
        schema: &ArrowSchema,
        partition_columns: &[String],
        files: &[DeltaFile],
    ) -> DResult<(Finished, Option<delta_kernel::snapshot::SnapshotRef>)> {
        let url = table.clone();
        let engine = self.engine();
        let version = prepared.base.map_or(0, |b| b + 1);
        let result = match prepared.txn {
            None => {
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
                    .with_table_properties(TABLE_PROPERTIES.iter().copied())
                    .build(engine, Box::new(FileSystemCommitter::new()))?
                    .with_transaction_id(crate::rules::delta::APP_ID.to_owned(), prepared.generation as i64);
                for file in files {
                    let add = add_metadata(&url, &txn.write_state()?, file)?;
                    txn.add_files(add);
                }
                finished(txn.commit(engine), version)
            }
            Some(mut txn) => {
                for file in files {
                    let add = add_metadata(&url, &txn.write_state()?, file)?;
                    txn.add_files(add);
                }
                finished(txn.commit(engine), version)
            }
        };
        Ok(result)
    }

    /// The files version `version` of the table holds (paths relative to the table root).
    pub(crate) fn files_at(&self, table: &Path, version: u64) -> DResult<BTreeSet<String>> {
        self.files_at_url(&table_url(table)?, version)
    }

    /// [`DeltaEngine::files_at`] of the table at `table` (a directory URL).
    pub(crate) fn files_at_url(&self, table: &Url, version: u64) -> DResult<BTreeSet<String>> {
        let engine = self.engine();
        let snapshot = Snapshot::builder_for(table.clone()).at_version(version).build(engine)?;
        let mut out = BTreeSet::new();
        for meta in snapshot.scan_builder().build()?.scan_metadata(engine)? {
            let (data, selection) = meta?.scan_files.into_parts();
            for (i, path) in paths_of_ref(data.as_ref())?.iter().enumerate() {
                if selection.get(i).copied().unwrap_or(true) {
                    out.insert(crate::rules::delta::decode_path(path));
                }
            }
        }
        Ok(out)
    }

    /// Writes a (classic, single-file) checkpoint of `version` unless one exists.
    pub(crate) fn checkpoint(&self, table: &Path, version: u64) -> DResult<()> {
        self.checkpoint_url(&table_url(table)?, version)
    }

    /// [`DeltaEngine::checkpoint`] of the table at `table` (a directory URL).
    pub(crate) fn checkpoint_url(&self, table: &Url, version: u64) -> DResult<()> {
        let snapshot = Snapshot::builder_for(table.clone()).at_version(version).build(self.engine())?;
        snapshot.checkpoint(self.engine(), None)?;
        Ok(())
    }
}

/// What became of a commit ([`DeltaEngine::finish_url`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finished {
    /// Committed as this version.
    Committed(u64),
    /// Refused: this version exists (another writer's, or this commit's own whose first
    /// answer was lost and whose retry the server refused: read it to tell).
    Conflicted(u64),
    /// The write of `version`'s log entry failed after the client's retries: it may or may not
    /// be on the server.
    Unknown {
        /// The version the commit was for.
        version: u64,
        /// The kernel's (and the client's) words.
        reason: String,
    },
}

/// What a commit's result says, `version` being the version it was for, and the kernel's
/// snapshot of a version it committed.
fn finished<S: std::fmt::Debug>(
    result: std::result::Result<CommitResult<S>, delta_kernel::KernelError>,
    version: u64,
) -> (Finished, Option<delta_kernel::snapshot::SnapshotRef>) {
    match result {
        Ok(CommitResult::Committed(c)) => (Finished::Committed(c.commit_version()), c.post_commit_snapshot().cloned()),
        Ok(CommitResult::Conflicted(c)) => (Finished::Conflicted(c.conflict_version()), None),
        Ok(other) => (Finished::Unknown { version, reason: format!("the commit failed: {other:?}") }, None),
        Err(e) => (Finished::Unknown { version, reason: e.to_string() }, None),
    }
}

/// Whether `table/_delta_log` holds a commit or checkpoint (a writer's staged upload, such as
/// `00000000000000000000.json#1` left by a crash, is not one).
fn has_commits(table: &Path) -> bool {
    use crate::rules::delta::{LogName, log_name};
    std::fs::read_dir(table.join(crate::rules::delta::LOG_DIR))
        .map(|entries| {
            entries.flatten().any(|e| matches!(log_name(&e.file_name().to_string_lossy()), LogName::Commit(_) | LogName::Checkpoint(_)))
        })
        .unwrap_or(false)
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

/// The URL of the file at `rel` (`/`-separated, not URL-encoded) under the table root.
fn location(table: &Url, rel: &str) -> DResult<Url> {
    let mut location = table.clone();
    {
        let mut segments = location.path_segments_mut().map_err(|()| DeltaError("the table URL cannot be a base".into()))?;
        segments.pop_if_empty();
        for part in rel.split('/') {
            segments.push(part);
        }
    }
    Ok(location)
}

/// The `add` action metadata of one file, through the kernel's own builder.
fn add_metadata(
    table: &Url,
    write_state: &Arc<delta_kernel::transaction::WriteState>,
    file: &DeltaFile,
) -> DResult<Box<dyn delta_kernel::EngineData>> {
    let values: HashMap<String, Scalar> = file.partition_values.iter().map(|(k, v)| (k.clone(), Scalar::String(v.clone()))).collect();
    let context = write_state.write_context_builder().with_partition_values(values).build()?;
    let location = location(table, &file.rel)?;
    let stats = StructArray::from(vec![(
        Arc::new(Field::new("numRecords", DataType::Int64, true)),
        Arc::new(Int64Array::from(vec![file.num_records])) as ArrayRef,
    )]);
    let meta = FileMeta { location, last_modified: file.modified_ms, size: file.size };
    Ok(build_add_file_metadata(DataFileMetadata::new(meta, stats), &context)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory of the test's own, removed when dropped.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn names(table: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(table.join(crate::rules::delta::LOG_DIR))
            .expect("listing the log")
            .map(|e| e.expect("a log entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_kept_snapshot_is_handed_out_only_while_the_log_lists_what_was_vouched_for() {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let scratch = Scratch(std::env::temp_dir().join(format!("manifestdb-kept-{}-{nanos}", std::process::id())));
        let table = scratch.0.join("table");
        std::fs::create_dir_all(&table).expect("making the table directory");
        let engine = DeltaEngine::new().expect("starting the kernel");
        let schema = ArrowSchema::new(vec![Field::new("units", DataType::Int64, true)]);
        let commit = |generation: u64| {
            let head = engine.head(&table).expect("reading the log");
            let prepared = engine.prepare(&head, generation, &BTreeSet::new()).expect("preparing");
            engine.finish(prepared, &table, &schema, &[], &[]).expect("committing")
        };
        let v0 = commit(1);
        let listing = names(&table);
        // Not vouched for yet: the log is read (and holds the version).
        assert_eq!(engine.head_kept(&table, v0, &listing).expect("head").version(), Some(v0));
        engine.keep_listing(&table, v0, listing.clone());
        // With the log moved away, a head that reads finds no table: only the kept one has v0.
        std::fs::rename(table.join(crate::rules::delta::LOG_DIR), scratch.0.join("moved")).expect("moving the log");
        assert_eq!(engine.head_kept(&table, v0, &listing).expect("kept head").version(), Some(v0), "the kept snapshot");
        let other: Vec<String> = listing.iter().cloned().chain(["00000000000000000001.json".to_owned()]).collect();
        assert_eq!(engine.head_kept(&table, v0, &other).expect("head").version(), None, "another listing reads the log");
        assert_eq!(engine.head_kept(&table, v0 + 1, &listing).expect("head").version(), None, "another version reads the log");
        // Vouching for a version this engine did not commit last keeps nothing.
        std::fs::rename(scratch.0.join("moved"), table.join(crate::rules::delta::LOG_DIR)).expect("moving the log back");
        let v1 = commit(2);
        let listing = names(&table);
        engine.keep_listing(&table, v0, listing.clone());
        std::fs::rename(table.join(crate::rules::delta::LOG_DIR), scratch.0.join("moved")).expect("moving the log");
        assert_eq!(engine.head_kept(&table, v1, &listing).expect("head").version(), None, "v1 was not vouched for");
    }
}

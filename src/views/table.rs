//! The Delta table of a Parquet dataset's views (`<views>/<dataset>/_delta_log`, data files
//! under `<views>/<dataset>/data`), derived from the store after the view like the view
//! itself: `crate::rules::delta` decides (versions to commit, partition values, what the
//! retention lets go), this module links the data files and makes every object durable on its
//! own, and `crate::delta` has the kernel write the log.
//!
//! Invariant: the table never names a generation the store lacks. A version is committed only
//! for a generation the store holds, after the store's commit (an expired generation the table
//! never saw becomes an empty version); once the store expired generations, the table gets a
//! checkpoint at the oldest retained generation's version and loses the older log entries and
//! every data file no retained version names, right after the expiry commits (or at the next
//! sync after a crash).

use std::collections::BTreeSet;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use parking_lot::Mutex;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::build::Syncer;
use super::dirs::{dir_flags, errno, is_errno, list_entries, open_dir_at, open_dirs, split_parent, stat_kind, walk_view};
use super::{Generations, Views};
use crate::delta::{DeltaEngine, DeltaFile};
use crate::error::{Error, Result};
use crate::grain::DataFormat;
use crate::model::Manifest;
use crate::rules::delta as table_rule;
use crate::rules::views::{self as rule, ViewFile};
use crate::views::ViewMode;

/// What a sync did to the table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TableSync {
    /// The table's version after the sync.
    pub(crate) version: u64,
    /// Versions committed by this sync.
    pub(crate) committed: Vec<u64>,
    /// Log entries and data files removed (the store's retention).
    pub(crate) removed: usize,
}

impl Views {
    fn delta_engine(&self, dataset: &str) -> Result<&DeltaEngine> {
        if let Some(engine) = self.delta.get() {
            return Ok(engine);
        }
        let engine = DeltaEngine::new().map_err(self.delta_err(dataset, "starting the Delta kernel for"))?;
        Ok(self.delta.get_or_init(|| engine))
    }

    fn delta_err(&self, dataset: &str, what: &str) -> impl FnOnce(crate::delta::DeltaError) -> Error {
        let path = self.dataset_path(dataset);
        let what = what.to_owned();
        move |e| Error::io(format!("{what} the Delta table {}", path.display()), io::Error::other(e))
    }

    /// Why the dataset (as `manifest`, its current generation) gets no Delta table, if it does
    /// not: a partition published by a run whose grain is not Parquet (Delta data files are
    /// Parquet), or a partition key that is not hive `column=value` components.
    pub(crate) fn not_a_table(source: &dyn Generations, dataset: &str, manifest: &Manifest) -> Result<Option<String>> {
        let mut runs: BTreeSet<&str> = BTreeSet::new();
        for p in &manifest.partitions {
            runs.insert(&p.run);
        }
        for run in runs {
            match source.run_format(dataset, run)? {
                Some(DataFormat::Parquet) => {}
                other => {
                    let format = other.map_or("no declared grain".to_owned(), |f| format!("a {} grain", f.name().to_uppercase()));
                    return Ok(Some(format!(
                        "run {run:?} of generation {} has {format}; a Delta table's data files are Parquet, so the dataset keeps the \
                         directory view only",
                        manifest.generation.number
                    )));
                }
            }
        }
        if let Err(reason) = table_rule::partition_columns(manifest.partitions.iter().map(|p| p.partition.as_str())) {
            return Ok(Some(reason));
        }
        Ok(None)
    }

    /// Brings the dataset's Delta table up to date with the store: commits a version for every
    /// generation after the table's latest (each naming exactly that generation's files), then
    /// applies the store's retention to the log and the data files. `None` if the dataset gets
    /// no table (see [`Views::not_a_table`]).
    pub(crate) fn sync_table(
        &self,
        ds: BorrowedFd<'_>,
        dataset: &str,
        source: &dyn Generations,
        staging_root: &Path,
        current: &Manifest,
        stored: &BTreeSet<u64>,
    ) -> Result<Option<TableSync>> {
        if let Some(reason) = Self::not_a_table(source, dataset, current)? {
            if matches!(stat_kind(ds, table_rule::LOG_DIR), Ok((FileType::Directory, _))) {
                return Err(self.refused(dataset, self.dataset_path(dataset).join(table_rule::LOG_DIR).display().to_string(), reason));
            }
            return Ok(None);
        }
        let table = self.dataset_path(dataset);
        // The kernel reaches the log by path, following symlinks: a symlink (or a file) planted
        // in place of the log or the data directory is refused, not followed.
        for name in [table_rule::LOG_DIR, table_rule::DATA_DIR] {
            match stat_kind(ds, name) {
                Ok((FileType::Directory, _)) => {}
                Ok(_) => {
                    return Err(self.refused(
                        dataset,
                        table.join(name).display().to_string(),
                        "is a symlink or not a directory; refusing to follow it",
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(format!("inspecting {}", table.join(name).display()), e)),
            }
        }
        let engine = self.delta_engine(dataset)?;
        // The log is read once here; the first commit below reuses that read.
        let head = engine.head(&table).map_err(self.delta_err(dataset, "reading"))?;
        let latest = head.version();
        let mut out = TableSync { version: latest.unwrap_or(0), ..TableSync::default() };
        let columns = table_rule::partition_columns(current.partitions.iter().map(|p| p.partition.as_str()))
            .map_err(|reason| self.refused(dataset, table.display().to_string(), reason))?;
        let mut schema: Option<arrow_schema::Schema> = None;
        for generation in table_rule::generations_to_commit(latest, current.generation.number) {
            let manifest = if generation == current.generation.number {
                Some(current.clone())
            } else {
                source.generation_manifest(dataset, Some(generation))?
            };
            let files = match &manifest {
                Some(m) => self.table_files(ds, dataset, staging_root, m, &mut schema)?,
                None => Vec::new(),
            };
            if schema.is_none() {
                // An empty first version (its generation expired before the table existed):
                // the schema is the current generation's.
                self.table_files(ds, dataset, staging_root, current, &mut schema)?;
            }
            let Some(file_schema) = &schema else {
                return Err(self.refused(dataset, table.display().to_string(), "no Parquet file to read the table's schema from"));
            };
            let version = table_rule::version_of(generation);
            engine
                .commit(&head, &table, version, generation, file_schema, &columns, &files)
                .map_err(self.delta_err(dataset, &format!("committing version {version} of")))?;
            self.sync_log(ds, dataset, version, version == 0)?;
            out.committed.push(version);
            out.version = version;
        }
        out.removed = self.retain_table(ds, dataset, source, stored, out.version)?;
        Ok(Some(out))
    }

    /// Every data file of generation `manifest` in the table's data directory (linked or
    /// copied there if missing, each new file and every directory that got an entry synced),
    /// with its row count and the schema read from its Parquet footer (all equal to `schema`,
    /// set from the first file if `None`).
    fn table_files(
        &self,
        ds: BorrowedFd<'_>,
        dataset: &str,
        staging_root: &Path,
        manifest: &Manifest,
        schema: &mut Option<arrow_schema::Schema>,
    ) -> Result<Vec<DeltaFile>> {
        let plan = rule::plan(manifest).map_err(|r| self.refused(dataset, r.path, r.reason))?;
        let base = self.dataset_path(dataset);
        let data_path = base.join(table_rule::DATA_DIR);
        let data = self.open_or_make_dir(ds, table_rule::DATA_DIR, &base)?;
        let staging = rustix::fs::openat(rustix::fs::CWD, staging_root, dir_flags(), Mode::empty())
            .map_err(errno)
            .map_err(self.io_err(format!("opening staging root {}", staging_root.display())))?;
        let failure = Mutex::new(None);
        std::thread::scope(|scope| {
            let syncer = Syncer::new(scope, plan.files.len() * 2 + 1, &failure, data.as_fd());
            let mut dirty_dirs: BTreeSet<String> = BTreeSet::new();
            let mut made = || -> Result<()> {
                for file in &plan.files {
                    let (dir_rel, name) = split_parent(&file.rel);
                    let dir = self.make_dirs(data.as_fd(), dir_rel, &data_path, &mut dirty_dirs)?;
                    match stat_kind(dir.as_fd(), name) {
                        Ok((FileType::RegularFile, st)) if u64::try_from(st.st_size).ok() == Some(file.size_bytes) => continue,
                        Ok(_) => {
                            // Cut short or of another kind (a power loss, a hand): replace it.
                            rustix::fs::unlinkat(dir.as_fd(), name, AtFlags::empty())
                                .map_err(errno)
                                .map_err(self.io_err(format!("removing {}", data_path.join(&file.rel).display())))?;
                        }
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(Error::io(format!("inspecting {}", data_path.join(&file.rel).display()), e)),
                    }
                    // A copy is synced; a hard link's content was synced at validation (DOMAIN
                    // 11), its new entry is synced with its directory below.
                    if let Some(fd) = self.place(staging.as_fd(), staging_root, dir.as_fd(), name, file, dataset, &data_path)? {
                        syncer.sync(fd, data_path.join(&file.rel))?;
                    }
                    dirty_dirs.insert(dir_rel.to_owned());
                }
                for rel in &dirty_dirs {
                    let fd = if rel.is_empty() {
                        rustix::fs::openat(data.as_fd(), ".", dir_flags(), Mode::empty()).map_err(errno)
                    } else {
                        open_dirs(data.as_fd(), rel)
                    }
                    .map_err(self.io_err(format!("opening {}", data_path.join(rel).display())))?;
                    syncer.sync(fd, data_path.join(rel))?;
                }
                Ok(())
            };
            let result = made();
            result.and(syncer.finish())
        })?;
        let mut out = Vec::with_capacity(plan.files.len());
        for file in &plan.files {
            let path = data_path.join(&file.rel);
            let (file_schema, rows) = parquet_footer(&path).map_err(|reason| {
                self.refused(dataset, path.display().to_string(), format!("cannot be read as Parquet for the Delta table: {reason}"))
            })?;
            match schema {
                None => *schema = Some(file_schema),
                Some(s) if same_columns(s, &file_schema) => {}
                Some(s) => {
                    return Err(self.refused(
                        dataset,
                        path.display().to_string(),
                        format!("its schema {} differs from the table's {}", columns_text(&file_schema), columns_text(s)),
                    ));
                }
            }
            let values =
                table_rule::partition_values(&file.partition).map_err(|reason| self.refused(dataset, file.partition.clone(), reason))?;
            out.push(DeltaFile {
                rel: table_rule::data_rel(&file.rel),
                partition_values: values,
                size: file.size_bytes,
                num_records: rows,
                modified_ms: i64::try_from(manifest.generation.published_at_ms).unwrap_or(i64::MAX),
            });
        }
        Ok(out)
    }

    /// Links (or copies) one accepted file into the data directory; returns a copy's handle, to
    /// be synced (a link needs no sync of its own: see the caller).
    #[allow(clippy::too_many_arguments)] // reason: one placement's handles and records, all needed for its messages
    fn place(
        &self,
        staging: BorrowedFd<'_>,
        staging_root: &Path,
        dir: BorrowedFd<'_>,
        name: &str,
        file: &ViewFile,
        dataset: &str,
        data_path: &Path,
    ) -> Result<Option<OwnedFd>> {
        let (src_dir_rel, src_name) = split_parent(&file.file);
        let src_key = if src_dir_rel.is_empty() { file.staging_rel.clone() } else { format!("{}/{src_dir_rel}", file.staging_rel) };
        let source_path = staging_root.join(&file.staging_rel).join(&file.file);
        let dest_path = data_path.join(&file.rel);
        let src = open_dirs(staging, &src_key).map_err(|e| {
            self.refused(
                dataset,
                source_path.display().to_string(),
                format!("the accepted attempt's directory cannot be opened without following a symlink: {e}"),
            )
        })?;
        match self.mode {
            ViewMode::HardLink => {
                self.op(&|| format!("linking {}", dest_path.display()))?;
                match rustix::fs::linkat(src.as_fd(), src_name, dir, name, AtFlags::empty()) {
                    Ok(()) => {}
                    Err(rustix::io::Errno::NOENT) => {
                        return Err(self.refused(dataset, source_path.display().to_string(), "the accepted file is missing"));
                    }
                    Err(e) => return Err(Error::io(format!("linking {} to {}", dest_path.display(), source_path.display()), errno(e))),
                }
                let (kind, st) = stat_kind(dir, name).map_err(self.io_err(format!("inspecting {}", dest_path.display())))?;
                if kind != FileType::RegularFile || u64::try_from(st.st_size).ok() != Some(file.size_bytes) {
                    return Err(self.refused(
                        dataset,
                        source_path.display().to_string(),
                        format!("is not the regular file of {} bytes the generation records", file.size_bytes),
                    ));
                }
                Ok(None)
            }
            ViewMode::Copy => {
                self.op(&|| format!("copying {}", dest_path.display()))?;
                self.copy(src.as_fd(), src_name, dir, name, file, dataset, &source_path, &dest_path).map(Some)
            }
        }
    }

    /// Opens directory `name` under `parent`, creating it (and syncing `parent`) if missing.
    fn open_or_make_dir(&self, parent: BorrowedFd<'_>, name: &str, parent_path: &Path) -> Result<OwnedFd> {
        match open_dir_at(parent, name) {
            Ok(fd) => return Ok(fd),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("opening {}", parent_path.join(name).display()), e)),
        }
        self.op(&|| format!("creating {}", parent_path.join(name).display()))?;
        match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(Error::io(format!("creating {}", parent_path.join(name).display()), errno(e))),
        }
        rustix::fs::fsync(parent).map_err(errno).map_err(self.io_err(format!("syncing {}", parent_path.display())))?;
        open_dir_at(parent, name).map_err(self.io_err(format!("opening {}", parent_path.join(name).display())))
    }

    /// Opens `rel` under `base`, creating what is missing; every directory that got a new
    /// entry is added to `dirty` (relative to `base`, `""` for `base`).
    fn make_dirs(&self, base: BorrowedFd<'_>, rel: &str, base_path: &Path, dirty: &mut BTreeSet<String>) -> Result<OwnedFd> {
        let mut fd = rustix::fs::openat(base, ".", dir_flags(), Mode::empty())
            .map_err(errno)
            .map_err(self.io_err(format!("opening {}", base_path.display())))?;
        let mut so_far = String::new();
        for component in rel.split('/').filter(|c| !c.is_empty()) {
            let next = match open_dir_at(fd.as_fd(), component) {
                Ok(next) => next,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let path = base_path.join(&so_far).join(component);
                    match rustix::fs::mkdirat(fd.as_fd(), component, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(Error::io(format!("creating {}", path.display()), errno(e))),
                    }
                    dirty.insert(so_far.clone());
                    open_dir_at(fd.as_fd(), component).map_err(self.io_err(format!("opening {}", path.display())))?
                }
                Err(e) if is_errno(&e, rustix::io::Errno::LOOP) || is_errno(&e, rustix::io::Errno::NOTDIR) => {
                    return Err(Error::io(
                        format!("opening {}", base_path.join(&so_far).join(component).display()),
                        io::Error::other("a symlink or not a directory; refusing to follow it"),
                    ));
                }
                Err(e) => return Err(Error::io(format!("opening {}", base_path.join(&so_far).join(component).display()), e)),
            };
            if !so_far.is_empty() {
                so_far.push('/');
            }
            so_far.push_str(component);
            fd = next;
        }
        Ok(fd)
    }

    /// Syncs every log entry of `version` the kernel wrote (the commit, its checksum), and the
    /// log directory; with `created`, the dataset directory too (the log directory is new).
    fn sync_log(&self, ds: BorrowedFd<'_>, dataset: &str, version: u64, created: bool) -> Result<()> {
        let log_path = self.dataset_path(dataset).join(table_rule::LOG_DIR);
        let log = open_dir_at(ds, table_rule::LOG_DIR).map_err(self.io_err(format!("opening {}", log_path.display())))?;
        for (name, kind) in list_entries(log.as_fd()).map_err(self.io_err(format!("listing {}", log_path.display())))? {
            if kind == FileType::RegularFile && (table_rule::log_entry_version(&name) == Some(version) || name == "_last_checkpoint") {
                self.op(&|| format!("syncing {}", log_path.join(&name).display()))?;
                let fd = rustix::fs::openat(log.as_fd(), name.as_str(), OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
                    .map_err(errno)
                    .map_err(self.io_err(format!("opening {}", log_path.join(&name).display())))?;
                rustix::fs::fsync(&fd).map_err(errno).map_err(self.io_err(format!("syncing {}", log_path.join(&name).display())))?;
            }
        }
        self.op(&|| format!("syncing {}", log_path.display()))?;
        rustix::fs::fsync(&log).map_err(errno).map_err(self.io_err(format!("syncing {}", log_path.display())))?;
        if created {
            let base = self.dataset_path(dataset);
            rustix::fs::fsync(ds).map_err(errno).map_err(self.io_err(format!("syncing {}", base.display())))?;
        }
        Ok(())
    }

    /// The store's retention applied to the table: once the oldest retained generation's
    /// version is past 0, a checkpoint of that version (so the table reads without the older
    /// log), then the older log entries and every data file no retained generation names go.
    /// A checkpoint is also written every 10th version, as Delta writers do. Returns how many
    /// entries and files were removed.
    fn retain_table(
        &self,
        ds: BorrowedFd<'_>,
        dataset: &str,
        source: &dyn Generations,
        stored: &BTreeSet<u64>,
        latest: u64,
    ) -> Result<usize> {
        let table = self.dataset_path(dataset);
        let log_path = table.join(table_rule::LOG_DIR);
        let engine = self.delta_engine(dataset)?;
        if table_rule::checkpoint_due(latest) && !self.has_checkpoint(ds, dataset, latest)? {
            engine.checkpoint(&table, latest).map_err(self.delta_err(dataset, "checkpointing"))?;
            self.sync_log(ds, dataset, latest, false)?;
        }
        let Some(&oldest) = stored.first() else { return Ok(0) };
        let boundary = table_rule::version_of(oldest);
        let log = open_dir_at(ds, table_rule::LOG_DIR).map_err(self.io_err(format!("opening {}", log_path.display())))?;
        let names: Vec<String> = list_entries(log.as_fd())
            .map_err(self.io_err(format!("listing {}", log_path.display())))?
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        let doomed = table_rule::log_entries_to_remove(&names, boundary);
        if doomed.is_empty() {
            return Ok(0);
        }
        if !self.has_checkpoint(ds, dataset, boundary)? {
            engine.checkpoint(&table, boundary).map_err(self.delta_err(dataset, "checkpointing"))?;
            self.sync_log(ds, dataset, boundary, false)?;
        }
        for name in &doomed {
            self.op(&|| format!("removing {}", log_path.join(name).display()))?;
            rustix::fs::unlinkat(log.as_fd(), name.as_str(), AtFlags::empty())
                .map_err(errno)
                .map_err(self.io_err(format!("removing {}", log_path.join(name).display())))?;
        }
        rustix::fs::fsync(&log).map_err(errno).map_err(self.io_err(format!("syncing {}", log_path.display())))?;
        // Data files: only those a retained generation names stay.
        let mut named = BTreeSet::new();
        for &n in stored {
            if let Some(m) = source.generation_manifest(dataset, Some(n))? {
                let plan = rule::plan(&m).map_err(|r| self.refused(dataset, r.path, r.reason))?;
                named.extend(plan.files.into_iter().map(|f| f.rel));
            }
        }
        let data_path = table.join(table_rule::DATA_DIR);
        let data = match open_dir_at(ds, table_rule::DATA_DIR) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(doomed.len()),
            Err(e) => return Err(Error::io(format!("opening {}", data_path.display()), e)),
        };
        let found: BTreeSet<String> = walk_view(data.as_fd())
            .map_err(self.io_err(format!("walking {}", data_path.display())))?
            .into_iter()
            .filter(|(_, found)| !matches!(found, rule::Found::Dir))
            .map(|(rel, _)| rel)
            .collect();
        let gone = table_rule::data_files_to_remove(&found, &named);
        let mut dirs = BTreeSet::new();
        for rel in &gone {
            let (dir_rel, name) = split_parent(rel);
            let dir = open_dirs(data.as_fd(), dir_rel).map_err(self.io_err(format!("opening {}", data_path.join(dir_rel).display())))?;
            self.op(&|| format!("removing {}", data_path.join(rel).display()))?;
            rustix::fs::unlinkat(dir.as_fd(), name, AtFlags::empty())
                .map_err(errno)
                .map_err(self.io_err(format!("removing {}", data_path.join(rel).display())))?;
            dirs.insert(dir_rel.to_owned());
        }
        for rel in &dirs {
            let dir = open_dirs(data.as_fd(), rel).map_err(self.io_err(format!("opening {}", data_path.join(rel).display())))?;
            rustix::fs::fsync(&dir).map_err(errno).map_err(self.io_err(format!("syncing {}", data_path.join(rel).display())))?;
        }
        Ok(doomed.len() + gone.len())
    }

    fn has_checkpoint(&self, ds: BorrowedFd<'_>, dataset: &str, version: u64) -> Result<bool> {
        let log_path = self.dataset_path(dataset).join(table_rule::LOG_DIR);
        let log = open_dir_at(ds, table_rule::LOG_DIR).map_err(self.io_err(format!("opening {}", log_path.display())))?;
        Ok(list_entries(log.as_fd())
            .map_err(self.io_err(format!("listing {}", log_path.display())))?
            .iter()
            .any(|(name, _)| table_rule::log_entry_version(name) == Some(version) && name.contains(".checkpoint.")))
    }
}

/// A Parquet file's Arrow schema and row count, from its footer.
fn parquet_footer(path: &Path) -> std::result::Result<(arrow_schema::Schema, i64), String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let meta = parquet::arrow::arrow_reader::ArrowReaderMetadata::load(&file, Default::default()).map_err(|e| e.to_string())?;
    Ok((meta.schema().as_ref().clone(), meta.metadata().file_metadata().num_rows()))
}

/// Whether two schemas have the same columns (names and types, in order).
pub(crate) fn same_columns(a: &arrow_schema::Schema, b: &arrow_schema::Schema) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields().iter().zip(b.fields().iter()).all(|(x, y)| x.name() == y.name() && x.data_type() == y.data_type())
}

/// `(name type, ...)` for messages.
pub(crate) fn columns_text(schema: &arrow_schema::Schema) -> String {
    let columns: Vec<String> = schema.fields().iter().map(|f| format!("{} {}", f.name(), f.data_type())).collect();
    format!("({})", columns.join(", "))
}

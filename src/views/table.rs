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
use rustix::fs::{AtFlags, FileType, Mode};

use super::build::Syncer;
use super::dirs::{dir_flags, errno, is_errno, list_entries, list_names, open_dir_at, open_dirs, split_parent, stat_kind, walk_view};
use super::log::{LogRead, Scope, first_holding, log_names, read_log, read_text};
use super::{Check, Generations, TableSync, ViewStatus, Views};
use crate::delta::{DeltaEngine, DeltaFile};
use crate::error::{Error, Result};
use crate::model::Manifest;
use crate::rules::delta as table_rule;
use crate::rules::views::{self as rule, ViewFile};
use crate::views::ViewMode;

impl Views {
    fn delta_engine(&self, dataset: &str) -> Result<&DeltaEngine> {
        if let Some(engine) = self.delta.get() {
            return Ok(engine);
        }
        let engine = DeltaEngine::new().map_err(self.delta_err(dataset, "starting the Delta kernel for"))?;
        Ok(self.delta.get_or_init(|| engine))
    }

    fn delta_err(&self, dataset: &str, what: &str) -> impl FnOnce(crate::delta::DeltaError) -> Error {
        let path = self.table_path(dataset);
        let what = what.to_owned();
        move |e| Error::io(format!("{what} the Delta table {}", path.display()), io::Error::other(e))
    }

    /// Brings the dataset's Delta table up to date with the store: removes writers' temporary
    /// files; with `check`, cuts the log back before its first damaged version (empty, cut
    /// short, unparseable; for a full check also a version of the store's whose files are not
    /// exactly its generation's) and, for a full check, places again every data file a
    /// retained generation names that is missing; then commits, on top of whatever version
    /// the log holds, every held generation after the newest one the log holds (by its `txn`),
    /// or the current generation again if another writer's commit is on top, each naming
    /// exactly that generation's files; then applies the store's retention to the log and the
    /// data files. `None` if the dataset gets no table (see [`Views::not_a_table`]).
    #[allow(clippy::too_many_arguments)] // reason: one sync's handles, source and generation
    pub(crate) fn sync_table(
        &self,
        ds: BorrowedFd<'_>,
        dataset: &str,
        source: &dyn Generations,
        staging_root: &Path,
        current: &Manifest,
        stored: &BTreeSet<u64>,
        check: Check,
    ) -> Result<Option<TableSync>> {
        if let Some(reason) = Self::not_a_table(source, dataset, current)? {
            for rel in [table_rule::LOG_DIR.to_owned(), format!("{}/{}", table_rule::TABLE_DIR, table_rule::LOG_DIR)] {
                if matches!(stat_kind(ds, &rel), Ok((FileType::Directory, _))) {
                    return Err(self.refused(dataset, self.dataset_path(dataset).join(rel).display().to_string(), reason));
                }
            }
            return Ok(None);
        }
        let table_dir = self.open_table_dir(ds, dataset)?;
        let ds = table_dir.as_fd();
        let table = self.table_path(dataset);
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
        let columns = table_rule::partition_columns(current.partitions.iter().map(|p| p.partition.as_str()))
            .map_err(|reason| self.refused(dataset, table.display().to_string(), reason))?;
        let mut out = TableSync::default();
        let scope = if check == Check::Full { Scope::All } else { Scope::Newest };
        let first = self.read_log(ds, dataset, scope)?;
        if let Some(read) = &first {
            self.remove_temporaries(ds, dataset, read)?;
            let mut cut = if check == Check::None { None } else { table_rule::first_damaged(&read.log) };
            if check != Check::None {
                // A checkpoint a reader cannot read (empty, cut short): cut from its version.
                let bad = self.first_unreadable_checkpoint(dataset, read, check == Check::Full);
                cut = match (cut, bad) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            if check == Check::Full && cut.is_none() {
                cut = self.first_unfaithful(engine, dataset, source, current, &read.log)?;
            }
            if let Some(from) = cut {
                tracing::warn!(dataset, version = from, "Delta log damaged from this version on; cutting it back and committing again");
                out.repaired = self.cut_log(ds, dataset, read, from)?;
            }
        }
        if check == Check::Full {
            for &n in stored {
                let manifest =
                    if n == current.generation.number { Some(current.clone()) } else { source.generation_manifest(dataset, Some(n))? };
                if let Some(m) = manifest {
                    let plan = rule::plan(&m).map_err(|r| self.refused(dataset, r.path, r.reason))?;
                    out.restored += self.place_files(ds, dataset, staging_root, &plan.files.iter().collect::<Vec<_>>())?;
                }
            }
        }
        // The log as read above serves unless this sync cut it (temporaries never count).
        let read = match first {
            Some(read) if out.repaired.is_empty() => read,
            _ => self.read_log(ds, dataset, Scope::Newest)?.unwrap_or_default(),
        };
        let mut head = engine.head(&table).map_err(self.delta_err(dataset, "reading"))?;
        let last = table_rule::last_ours(&read.log).map(|(_, g)| g);
        let generations = table_rule::generations_to_commit(last, read.latest_is_ours(), stored, current.generation.number);
        out.version = read.latest.unwrap_or(0);
        for (i, &generation) in generations.iter().enumerate() {
            let manifest = if generation == current.generation.number {
                current.clone()
            } else {
                match source.generation_manifest(dataset, Some(generation))? {
                    Some(m) => m,
                    None => continue,
                }
            };
            let plan = rule::plan(&manifest).map_err(|r| self.refused(dataset, r.path, r.reason))?;
            let wanted: BTreeSet<String> = plan.files.iter().map(|f| table_rule::data_rel(&f.rel)).collect();
            let prepared = engine.prepare(&head, generation, &wanted).map_err(self.delta_err(dataset, "reading"))?;
            let missing: BTreeSet<&str> = prepared.missing.iter().map(String::as_str).collect();
            let new_files: Vec<&ViewFile> = plan.files.iter().filter(|f| missing.contains(table_rule::data_rel(&f.rel).as_str())).collect();
            // Every new data file durable on its own before the commit names it.
            self.place_files(ds, dataset, staging_root, &new_files)?;
            let (files, mut schema) = self.describe_files(dataset, &new_files, &manifest)?;
            if schema.is_none() && head.version().is_none() {
                // A new table whose first generation has no file: the schema is the current
                // generation's.
                let plan = rule::plan(current).map_err(|r| self.refused(dataset, r.path, r.reason))?;
                let all: Vec<&ViewFile> = plan.files.iter().collect();
                self.place_files(ds, dataset, staging_root, &all)?;
                schema = self.describe_files(dataset, &all[..all.len().min(1)], current)?.1;
            }
            let file_schema = match schema {
                Some(s) => s,
                None if head.version().is_some() => arrow_schema::Schema::empty(),
                None => {
                    return Err(self.refused(dataset, table.display().to_string(), "no Parquet file to read the table's schema from"));
                }
            };
            let version = engine
                .finish(prepared, &table, &file_schema, &columns, &files)
                .map_err(self.delta_err(dataset, &format!("committing generation {generation} to")))?;
            out.committed.push(version);
            out.version = version;
            if i + 1 < generations.len() {
                head = engine.head(&table).map_err(self.delta_err(dataset, "reading"))?;
            }
        }
        out.removed = self.retain_table(ds, dataset, source, stored, out.version, true)?;
        // Right after a commit nothing is reported (the sync's caller drops the status), so the
        // log is not read again on the publish path; a checking sync lists every foreign version.
        if check != Check::None
            && let Some(read) = self.read_log(ds, dataset, scope)?
        {
            out.foreign = table_rule::foreign_versions(&read.log);
        }
        Ok(Some(out))
    }

    /// [`Views::sync`] for a dataset without directory trees whose Delta table's latest
    /// version is the store's own commit of the current generation or of its parent, with a
    /// cost that follows the change, not the dataset: reads the log's newest commits (with
    /// `check`, also whether they or the newest checkpoint are damaged), and, when the latest
    /// version holds the parent, commits the current generation as the change its run made,
    /// reading only the run's partitions (as the current generation and as its parent hold
    /// them): the files they held in the parent removed, their new files added. The latest
    /// version then holds exactly the current generation, by induction from the first commit
    /// (which the full sync made). The store's retention is applied to the table as in the
    /// full sync. `None` when the full sync must decide: a full check, another writer's commit
    /// or a leftover on top, damage to repair, a rollback, an expired parent, several
    /// generations to commit, anything else in the dataset's directory, or a table whose
    /// partition columns differ.
    pub(crate) fn sync_table_change(
        &self,
        source: &dyn Generations,
        staging_root: &Path,
        dataset: &str,
        check: Check,
    ) -> Result<Option<ViewStatus>> {
        if check == Check::Full {
            return Ok(None);
        }
        let Some(generation) = source.current_generation(dataset)? else {
            return Ok(None);
        };
        let number = generation.number;
        let root = self.open_root()?;
        let Some(ds) = self.open_dataset(root.as_fd(), dataset, false)? else {
            return Ok(None);
        };
        let names = list_names(ds.as_fd()).map_err(self.io_err(format!("listing {}", self.dataset_path(dataset).display())))?;
        if !names.iter().any(|n| n == table_rule::TABLE_DIR) || names.iter().any(|n| n != rule::MARKER && n != table_rule::TABLE_DIR) {
            return Ok(None);
        }
        let Ok(table_dir) = open_dir_at(ds.as_fd(), table_rule::TABLE_DIR) else {
            return Ok(None);
        };
        let tfd = table_dir.as_fd();
        for name in [table_rule::LOG_DIR, table_rule::DATA_DIR] {
            if !matches!(stat_kind(tfd, name), Ok((FileType::Directory, _))) {
                return Ok(None);
            }
        }
        let Some(read) = self.read_log(tfd, dataset, Scope::Newest)? else {
            return Ok(None);
        };
        if read.temporaries().next().is_some() || !read.latest_is_ours() {
            return Ok(None);
        }
        if check != Check::None
            && (table_rule::first_damaged(&read.log).is_some() || self.first_unreadable_checkpoint(dataset, &read, false).is_some())
        {
            return Ok(None);
        }
        let last = table_rule::last_ours(&read.log).map(|(_, g)| g);
        let stored = source.stored_numbers(dataset)?;
        let status = |version: u64| ViewStatus::unchanged_without_trees(dataset, number, Some(version));
        if last == Some(number) {
            let Some(version) = read.latest else {
                return Ok(None);
            };
            self.retain_table(tfd, dataset, source, &stored, version, false)?;
            return Ok(Some(status(version)));
        }
        let Some(partitions) = change_partitions(source, dataset, &generation, last, &stored)? else {
            return Ok(None);
        };
        let Ok(columns) = table_rule::partition_columns(partitions.iter().map(String::as_str)) else {
            return Ok(None);
        };
        let mut added = Manifest { generation: generation.clone(), partitions: Vec::with_capacity(partitions.len()) };
        let mut gone = Manifest { generation: generation.clone(), partitions: Vec::new() };
        for partition in &partitions {
            match source.partition_at(dataset, partition, number)? {
                Some(entry) if entry.since_generation == number => added.partitions.push(entry),
                _ => return Ok(None),
            }
            gone.partitions.extend(source.partition_at(dataset, partition, generation.parent)?);
        }
        let add_plan = rule::plan(&added).map_err(|r| self.refused(dataset, r.path, r.reason))?;
        let Some(removed) = removed_files(&gone) else {
            return Ok(None);
        };
        let engine = self.delta_engine(dataset)?;
        let table = self.table_path(dataset);
        let Some(latest) = read.latest else {
            return Ok(None);
        };
        // The snapshot this engine kept from its own commit of `latest`, if the log still lists
        // what it did then; else the log is read.
        let head = engine.head_kept(&table, latest, &read.names).map_err(self.delta_err(dataset, "reading"))?;
        if head.version() != Some(latest) {
            return Ok(None);
        }
        let Some(prepared) =
            engine.prepare_change(&head, &table, number, &columns, &removed).map_err(self.delta_err(dataset, "reading"))?
        else {
            return Ok(None);
        };
        let new_files: Vec<&ViewFile> = add_plan.files.iter().collect();
        // Every new data file durable on its own before the commit names it.
        self.place_files(tfd, dataset, staging_root, &new_files)?;
        let (files, schema) = self.describe_files(dataset, &new_files, &added)?;
        let version = engine
            .finish(prepared, &table, &schema.unwrap_or_else(arrow_schema::Schema::empty), &columns, &files)
            .map_err(self.delta_err(dataset, &format!("committing generation {number} to")))?;
        tracing::debug!(dataset, generation = number, version, "committed the publish's change to the Delta table");
        self.retain_table(tfd, dataset, source, &stored, version, false)?;
        // The log as this commit and its retention left it: while it lists just that, the next
        // change commit starts from this commit's snapshot.
        if let Some(names) = log_names(tfd).map_err(self.io_err(format!("listing {}", table.join(table_rule::LOG_DIR).display())))? {
            engine.keep_listing(&table, version, names);
        }
        Ok(Some(status(version)))
    }

    /// The Delta table's directory (`<views>/<dataset>/table`), where the log and the data files
    /// are.
    pub(super) fn table_path(&self, dataset: &str) -> std::path::PathBuf {
        self.dataset_path(dataset).join(table_rule::TABLE_DIR)
    }

    /// Opens the table's directory under the dataset's directory `ds`, creating it if missing,
    /// after moving a table of the earlier layout (`_delta_log/` and `data/` right in the
    /// dataset's directory, beside the views, where Delta's `vacuum` deleted the views) into
    /// it: both are renamed into `.table-moving`, which is then renamed to `table`, each step
    /// synced, so a crash part way leaves a state the next sync finishes (the log's paths are
    /// relative to the table's root, so the moved table reads as before).
    fn open_table_dir(&self, ds: BorrowedFd<'_>, dataset: &str) -> Result<OwnedFd> {
        let base = self.dataset_path(dataset);
        let exists = |name: &str| -> Result<bool> {
            match stat_kind(ds, name) {
                Ok((FileType::Directory, _)) => Ok(true),
                Ok(_) => Err(self.refused(
                    dataset,
                    base.join(name).display().to_string(),
                    "is a symlink or not a directory; refusing to follow it",
                )),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(Error::io(format!("inspecting {}", base.join(name).display()), e)),
            }
        };
        let old: Vec<&str> = [table_rule::LOG_DIR, table_rule::DATA_DIR].into_iter().filter(|n| matches!(exists(n), Ok(true))).collect();
        let moving = exists(table_rule::TABLE_MOVING)?;
        if !old.is_empty() || moving {
            if exists(table_rule::TABLE_DIR)? {
                return Err(self.refused(
                    dataset,
                    base.display().to_string(),
                    format!(
                        "holds both {} and a Delta table of the earlier layout ({}); move one away",
                        table_rule::TABLE_DIR,
                        old.join(", ")
                    ),
                ));
            }
            tracing::info!(dataset, "moving the Delta table into {}", self.table_path(dataset).display());
            let dest = self.open_or_make_dir(ds, table_rule::TABLE_MOVING, &base)?;
            for name in &old {
                self.op(&|| format!("moving {}", base.join(name).display()))?;
                rustix::fs::renameat(ds, *name, &dest, *name).map_err(errno).map_err(self.io_err(format!(
                    "moving {} into {}",
                    base.join(name).display(),
                    base.join(table_rule::TABLE_MOVING).display()
                )))?;
                rustix::fs::fsync(&dest)
                    .map_err(errno)
                    .map_err(self.io_err(format!("syncing {}", base.join(table_rule::TABLE_MOVING).display())))?;
                rustix::fs::fsync(ds).map_err(errno).map_err(self.io_err(format!("syncing {}", base.display())))?;
            }
            self.op(&|| format!("renaming {}", base.join(table_rule::TABLE_MOVING).display()))?;
            rustix::fs::renameat(ds, table_rule::TABLE_MOVING, ds, table_rule::TABLE_DIR).map_err(errno).map_err(self.io_err(format!(
                "renaming {} to {}",
                base.join(table_rule::TABLE_MOVING).display(),
                self.table_path(dataset).display()
            )))?;
            rustix::fs::fsync(ds).map_err(errno).map_err(self.io_err(format!("syncing {}", base.display())))?;
        }
        if !exists(table_rule::TABLE_DIR)? {
            return self.open_or_make_dir(ds, table_rule::TABLE_DIR, &base);
        }
        open_dir_at(ds, table_rule::TABLE_DIR).map_err(self.io_err(format!("opening {}", self.table_path(dataset).display())))
    }

    /// The log as on disk (`None`: no log yet).
    fn read_log(&self, ds: BorrowedFd<'_>, dataset: &str, scope: Scope) -> Result<Option<LogRead>> {
        read_log(ds, scope).map_err(self.io_err(format!("reading {}", self.table_path(dataset).join(table_rule::LOG_DIR).display())))
    }

    /// Removes writers' temporary files from the log (a staged upload a crash left).
    fn remove_temporaries(&self, ds: BorrowedFd<'_>, dataset: &str, read: &LogRead) -> Result<()> {
        let doomed: Vec<&String> = read.temporaries().collect();
        if doomed.is_empty() {
            return Ok(());
        }
        self.remove_log_entries(ds, dataset, doomed.into_iter().map(String::as_str))
    }

    fn remove_log_entries<'a>(&self, ds: BorrowedFd<'_>, dataset: &str, names: impl IntoIterator<Item = &'a str>) -> Result<()> {
        let log_path = self.table_path(dataset).join(table_rule::LOG_DIR);
        let log = open_dir_at(ds, table_rule::LOG_DIR).map_err(self.io_err(format!("opening {}", log_path.display())))?;
        for name in names {
            self.op(&|| format!("removing {}", log_path.join(name).display()))?;
            match rustix::fs::unlinkat(log.as_fd(), name, AtFlags::empty()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(Error::io(format!("removing {}", log_path.join(name).display()), errno(e))),
            }
            // Each removal durable before the next, so a crash leaves a shorter log, never a gap.
            rustix::fs::fsync(&log).map_err(errno).map_err(self.io_err(format!("syncing {}", log_path.display())))?;
        }
        Ok(())
    }

    /// Cuts the log back to before version `from`, newest entry first; if what stays cannot
    /// be read on its own (no version 0 and no checkpoint), the whole log goes and the table
    /// is written again from the store. Returns the versions cut.
    fn cut_log(&self, ds: BorrowedFd<'_>, dataset: &str, read: &LogRead, from: u64) -> Result<Vec<u64>> {
        use table_rule::LogName;
        let readable_start = read.names.iter().any(|n| match table_rule::log_name(n) {
            LogName::Commit(0) => from > 0,
            LogName::Checkpoint(v) => v < from,
            _ => false,
        });
        let from = if readable_start { from } else { 0 };
        let doomed = table_rule::entries_from(&read.names, from, read.last_checkpoint);
        let cut: BTreeSet<u64> = doomed.iter().filter_map(|n| table_rule::log_entry_version(n)).collect();
        self.remove_log_entries(ds, dataset, doomed.iter().map(String::as_str))?;
        Ok(cut.into_iter().collect())
    }

    /// The oldest checkpoint whose Parquet footer cannot be read (empty, cut short), or the
    /// version `_last_checkpoint` names when no checkpoint of that version is present. With
    /// `all` every checkpoint is read, else only the newest (a writable open: one small read).
    fn first_unreadable_checkpoint(&self, dataset: &str, read: &LogRead, all: bool) -> Option<u64> {
        let log_path = self.table_path(dataset).join(table_rule::LOG_DIR);
        let mut present = BTreeSet::new();
        let mut bad = None;
        let newest = read.names.iter().filter_map(|n| match table_rule::log_name(n) {
            table_rule::LogName::Checkpoint(v) => Some(v),
            _ => None,
        });
        let newest = newest.max();
        for name in &read.names {
            if let table_rule::LogName::Checkpoint(v) = table_rule::log_name(name) {
                present.insert(v);
                if (all || Some(v) == newest)
                    && name.ends_with(".parquet")
                    && let Err(reason) = parquet_footer(&log_path.join(name))
                {
                    tracing::warn!(dataset, checkpoint = %name, %reason, "a Delta checkpoint cannot be read");
                    bad = Some(bad.map_or(v, |b: u64| b.min(v)));
                }
            }
        }
        if let Some(Some(named)) = read.last_checkpoint
            && !present.contains(&named)
        {
            bad = Some(bad.map_or(named, |b: u64| b.min(named)));
        }
        bad
    }

    /// The first of the store's versions (of a generation it holds) whose files are not
    /// exactly its generation's: a commit cut short at a line boundary, or edited.
    fn first_unfaithful(
        &self,
        engine: &DeltaEngine,
        dataset: &str,
        source: &dyn Generations,
        current: &Manifest,
        log: &table_rule::Log,
    ) -> Result<Option<u64>> {
        let table = self.table_path(dataset);
        for (&version, commit) in log {
            let table_rule::Commit::Ours { generation } = commit else { continue };
            let manifest = if *generation == current.generation.number {
                Some(current.clone())
            } else {
                source.generation_manifest(dataset, Some(*generation))?
            };
            let Some(manifest) = manifest else { continue };
            let plan = rule::plan(&manifest).map_err(|r| self.refused(dataset, r.path, r.reason))?;
            let wanted: BTreeSet<String> = plan.files.iter().map(|f| table_rule::data_rel(&f.rel)).collect();
            match engine.files_at(&table, version) {
                Ok(found) if found == wanted => {}
                Ok(_) => return Ok(Some(version)),
                Err(e) => {
                    tracing::warn!(dataset, version, error = %e, "a Delta version cannot be read");
                    return Ok(Some(version));
                }
            }
        }
        Ok(None)
    }

    /// Places `files` (of one generation) in the table's data directory where missing, each
    /// new file (a copy) and every directory that got an entry synced. Returns how many were
    /// placed.
    fn place_files(&self, ds: BorrowedFd<'_>, dataset: &str, staging_root: &Path, files: &[&ViewFile]) -> Result<usize> {
        if files.is_empty() {
            return Ok(0);
        }
        let base = self.table_path(dataset);
        let data_path = base.join(table_rule::DATA_DIR);
        let data = self.open_or_make_dir(ds, table_rule::DATA_DIR, &base)?;
        let staging = rustix::fs::openat(rustix::fs::CWD, staging_root, dir_flags(), Mode::empty())
            .map_err(errno)
            .map_err(self.io_err(format!("opening staging root {}", staging_root.display())))?;
        let failure = Mutex::new(None);
        let mut placed = 0;
        std::thread::scope(|scope| {
            let syncer = Syncer::new(scope, files.len() * 2 + 1, &failure, data.as_fd());
            let mut dirty_dirs: BTreeSet<String> = BTreeSet::new();
            let mut made = || -> Result<()> {
                for file in files {
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
                    placed += 1;
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
        Ok(placed)
    }

    /// The `add` descriptions of `files` (placed in the data directory) of generation
    /// `manifest`: row counts and the schema from each Parquet footer (all the same columns).
    fn describe_files(
        &self,
        dataset: &str,
        files: &[&ViewFile],
        manifest: &Manifest,
    ) -> Result<(Vec<DeltaFile>, Option<arrow_schema::Schema>)> {
        let data_path = self.table_path(dataset).join(table_rule::DATA_DIR);
        let mut schema: Option<arrow_schema::Schema> = None;
        let mut out = Vec::with_capacity(files.len());
        for file in files {
            let path = data_path.join(&file.rel);
            let (file_schema, rows) = parquet_footer(&path).map_err(|reason| {
                self.refused(dataset, path.display().to_string(), format!("cannot be read as Parquet for the Delta table: {reason}"))
            })?;
            match &schema {
                None => schema = Some(file_schema),
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
        Ok((out, schema))
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

    /// The store's retention applied to the table: once the oldest version holding a retained
    /// generation is past 0, a checkpoint of that version (so the table reads without the older
    /// log), then the older log entries and the data files no retained version names go.
    /// A checkpoint of the latest version is also written when due (see
    /// `table_rule::checkpoint_due`: every 10th version, as Delta writers do, until the table
    /// is large; then as often as keeps its cost per commit flat). Which data files go: with
    /// `walk`, every file of the data directory that no retained generation's manifest names
    /// (a full sync: this also finds what a crash left before its commit named it; it costs the
    /// dataset times the retained generations); without, the files the log itself says no
    /// version from the boundary on names (`table_rule::unnamed_data_files`, read from the
    /// commits before they go: it costs what the log holds). Returns how many entries and files
    /// were removed.
    fn retain_table(
        &self,
        ds: BorrowedFd<'_>,
        dataset: &str,
        source: &dyn Generations,
        stored: &BTreeSet<u64>,
        latest: u64,
        walk: bool,
    ) -> Result<usize> {
        let table = self.table_path(dataset);
        let log_path = table.join(table_rule::LOG_DIR);
        let engine = self.delta_engine(dataset)?;
        if self.checkpoint_wanted(ds, dataset, latest)? {
            self.op(&|| format!("checkpointing {}", log_path.display()))?;
            engine.checkpoint(&table, latest).map_err(self.delta_err(dataset, "checkpointing"))?;
        }
        let Some(boundary) = first_holding(ds, stored).map_err(self.io_err(format!("reading {}", log_path.display())))? else {
            return Ok(0);
        };
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
        // Read while every commit is still there: the files they remove for good.
        let unnamed = if walk {
            None
        } else {
            let mut commits = std::collections::BTreeMap::new();
            for name in &names {
                if let table_rule::LogName::Commit(v) = table_rule::log_name(name) {
                    let text = read_text(log.as_fd(), name).map_err(self.io_err(format!("reading {}", log_path.join(name).display())))?;
                    commits.insert(v, text);
                }
            }
            Some(table_rule::unnamed_data_files(&commits, boundary))
        };
        if !self.has_checkpoint(ds, dataset, boundary)? {
            self.op(&|| format!("checkpointing {}", log_path.display()))?;
            engine.checkpoint(&table, boundary).map_err(self.delta_err(dataset, "checkpointing"))?;
        }
        for name in &doomed {
            self.op(&|| format!("removing {}", log_path.join(name).display()))?;
            rustix::fs::unlinkat(log.as_fd(), name.as_str(), AtFlags::empty())
                .map_err(errno)
                .map_err(self.io_err(format!("removing {}", log_path.join(name).display())))?;
        }
        rustix::fs::fsync(&log).map_err(errno).map_err(self.io_err(format!("syncing {}", log_path.display())))?;
        let data_path = table.join(table_rule::DATA_DIR);
        let data = match open_dir_at(ds, table_rule::DATA_DIR) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(doomed.len()),
            Err(e) => return Err(Error::io(format!("opening {}", data_path.display()), e)),
        };
        let gone = match unnamed {
            Some(unnamed) => unnamed,
            None => {
                // Only the files a retained generation names stay.
                let mut named = BTreeSet::new();
                for &n in stored {
                    if let Some(m) = source.generation_manifest(dataset, Some(n))? {
                        let plan = rule::plan(&m).map_err(|r| self.refused(dataset, r.path, r.reason))?;
                        named.extend(plan.files.into_iter().map(|f| f.rel));
                    }
                }
                let found: BTreeSet<String> = walk_view(data.as_fd())
                    .map_err(self.io_err(format!("walking {}", data_path.display())))?
                    .into_iter()
                    .filter(|(_, found)| !matches!(found, rule::Found::Dir))
                    .map(|(rel, _)| rel)
                    .collect();
                table_rule::data_files_to_remove(&found, &named)
            }
        };
        let mut dirs = BTreeSet::new();
        for rel in &gone {
            let (dir_rel, name) = split_parent(rel);
            let dir = match open_dirs(data.as_fd(), dir_rel) {
                Ok(dir) => dir,
                // Read from the log: a file (or its directory) may be gone already.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(format!("opening {}", data_path.join(dir_rel).display()), e)),
            };
            self.op(&|| format!("removing {}", data_path.join(rel).display()))?;
            match rustix::fs::unlinkat(dir.as_fd(), name, AtFlags::empty()) {
                Ok(()) => {}
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(Error::io(format!("removing {}", data_path.join(rel).display()), errno(e))),
            }
            dirs.insert(dir_rel.to_owned());
        }
        for rel in &dirs {
            let dir = open_dirs(data.as_fd(), rel).map_err(self.io_err(format!("opening {}", data_path.join(rel).display())))?;
            rustix::fs::fsync(&dir).map_err(errno).map_err(self.io_err(format!("syncing {}", data_path.join(rel).display())))?;
        }
        Ok(doomed.len() + gone.len())
    }

    /// Whether a checkpoint of `latest` is due, from the log's listing and the sizes of its
    /// newest checkpoint and of `latest`'s commit (a size that cannot be read counts as 0).
    fn checkpoint_wanted(&self, ds: BorrowedFd<'_>, dataset: &str, latest: u64) -> Result<bool> {
        let log_path = self.table_path(dataset).join(table_rule::LOG_DIR);
        let log = open_dir_at(ds, table_rule::LOG_DIR).map_err(self.io_err(format!("opening {}", log_path.display())))?;
        let names = list_entries(log.as_fd()).map_err(self.io_err(format!("listing {}", log_path.display())))?;
        let newest = names
            .iter()
            .filter_map(|(name, _)| match table_rule::log_name(name) {
                table_rule::LogName::Checkpoint(v) if v <= latest => Some(v),
                _ => None,
            })
            .max();
        if newest == Some(latest) {
            return Ok(false);
        }
        let size = |name: &str| stat_kind(log.as_fd(), name).ok().and_then(|(_, st)| u64::try_from(st.st_size).ok()).unwrap_or(0);
        let checkpoint_bytes = newest.map(|v| {
            names
                .iter()
                .filter(|(name, _)| table_rule::log_name(name) == table_rule::LogName::Checkpoint(v))
                .map(|(name, _)| size(name))
                .sum()
        });
        let since = latest - newest.unwrap_or(0);
        let first_bytes = if newest.is_none() { size(&format!("{:020}.json", 0)) } else { 0 };
        Ok(table_rule::checkpoint_due(since, size(&format!("{latest:020}.json")), checkpoint_bytes, first_bytes))
    }

    fn has_checkpoint(&self, ds: BorrowedFd<'_>, dataset: &str, version: u64) -> Result<bool> {
        let log_path = self.table_path(dataset).join(table_rule::LOG_DIR);
        let log = open_dir_at(ds, table_rule::LOG_DIR).map_err(self.io_err(format!("opening {}", log_path.display())))?;
        Ok(list_entries(log.as_fd())
            .map_err(self.io_err(format!("listing {}", log_path.display())))?
            .iter()
            .any(|(name, _)| table_rule::log_entry_version(name) == Some(version) && name.contains(".checkpoint.")))
    }
}

/// The partitions `generation`'s run replaced, when its Delta commit can be its change alone: a
/// publish of a Parquet run that replaced partitions, whose parent is the table's newest commit
/// of the store's (`last`) and still stored, with nothing else to commit before it. `None` when
/// the full, scanning commit must decide.
pub(crate) fn change_partitions(
    source: &dyn Generations,
    dataset: &str,
    generation: &crate::model::Generation,
    last: Option<u64>,
    stored: &BTreeSet<u64>,
) -> Result<Option<Vec<String>>> {
    if !matches!(generation.kind, crate::model::GenerationKind::Publish)
        || generation.parent == 0
        || generation.partitions_replaced == 0
        || last != Some(generation.parent)
        || !stored.contains(&generation.parent)
        || table_rule::generations_to_commit(last, true, stored, generation.number) != [generation.number]
        || source.run_format(dataset, &generation.run)? != Some(crate::grain::DataFormat::Parquet)
    {
        return Ok(None);
    }
    let Some(partitions) = source.run_partitions(dataset, &generation.run)? else {
        return Ok(None);
    };
    Ok((u64::try_from(partitions.len()).ok() == Some(generation.partitions_replaced)).then_some(partitions))
}

/// The `remove`s of a change commit: the table's data file of each file `gone` (the replaced
/// partitions as the parent generation held them) names, with its partition values and size as
/// the store recorded them. `None` if the partitions cannot be planned or are not hive
/// `column=value` paths (the full sync then decides, and says why).
pub(crate) fn removed_files(gone: &Manifest) -> Option<Vec<DeltaFile>> {
    let plan = rule::plan(gone).ok()?;
    plan.files
        .iter()
        .map(|file| {
            Some(DeltaFile {
                rel: table_rule::data_rel(&file.rel),
                partition_values: table_rule::partition_values(&file.partition).ok()?,
                size: file.size_bytes,
                num_records: 0,
                modified_ms: 0,
            })
        })
        .collect()
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

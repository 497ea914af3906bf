//! A Parquet dataset's Delta table on object storage (features `s3` and `delta`): the view root
//! is `s3://bucket/prefix`, in the staging root's bucket, and holds for each dataset
//!
//! ```text
//! <root>/<dataset>/.manifestdb-view                    marker: this prefix is manifestdb's
//! <root>/<dataset>/table/_delta_log/                   the Delta log (one version per generation)
//! <root>/<dataset>/table/data/<partition>/g<S>-a<A>-<file>
//!                                                      server-side copies of the accepted objects
//! <root>/<dataset>/manifests/v<N>/_manifest.json       generation N's exact file list, with URLs
//! ```
//!
//! The same decisions as the local table (`crate::rules::delta`: which generations to commit,
//! the `txn` action marking the store's commits, hive partition values, what retention lets go,
//! when a checkpoint is due) over object-storage reads and writes: listing the log, GETs of its
//! commits, server-side copies, DELETEs. The kernel (`crate::delta`, its default engine on the
//! bucket's client) writes each log entry with a PUT `If-None-Match: *`, so a commit that lost
//! the race for its version is refused by the server, never written over another writer's.
//!
//! Directory views cannot exist on object storage (there are no directories to link into, no
//! symlink for `current`): a store with its view root here has no directory trees, and a
//! dataset that gets no table (not Parquet) gets its manifests only.
//!
//! Invariant: the table never names a generation the store lacks (a version is committed only
//! after the store's commit, from its snapshot); every data file a version names is a copy the
//! store checked against the generation's record (size and CRC32, read back from the copy)
//! before the commit naming it was sent; a commit whose answer never came is settled from the
//! log on the server, never assumed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use url::Url;

use super::log::LogRead;
use super::manifest::ViewManifest;
use super::{Check, Generations, TableState, ViewMode, ViewStatus, Views};
use crate::delta::{DeltaEngine, DeltaFile, Finished};
use crate::error::{Error, Result, StorageError, StorageErrorKind};
use crate::model::Manifest;
use crate::objects::ObjectRoot;
use crate::rules::delta::{self as table_rule, Commit, LogName};
use crate::rules::views::{self as rule, ViewFile};

/// The most of one log entry (a commit, `_last_checkpoint`) read into memory.
const LOG_ENTRY_BYTES_MAX: u64 = 1 << 30;

/// A copied data file's Parquet footer: its schema and row count.
struct Footer {
    schema: arrow_schema::Schema,
    rows: i64,
}

/// Where each dataset's generation manifests are, below its prefix.
const MANIFESTS_DIR: &str = "manifests";

/// A view root on object storage, opened.
pub(crate) struct ObjectViews {
    /// The view root (`s3://bucket/prefix`).
    root: Arc<ObjectRoot>,
    /// The store's staging root, in the same bucket: the copies' sources.
    staging: Arc<ObjectRoot>,
    /// The Delta kernel's engine on the bucket's client, made on first use.
    engine: OnceLock<DeltaEngine>,
    /// What the last retention of each dataset left: its log's oldest commit and the oldest
    /// generation the store held. While both are the same nothing expired, so a publish reads
    /// no old commit to find the retention's boundary and lists no manifests.
    retained: Mutex<HashMap<String, (u64, u64)>>,
}

impl std::fmt::Debug for ObjectViews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectViews").field("root", &self.root.url()).finish()
    }
}

/// Whether `a` is `b` or lies below it (prefixes of one bucket, `/`-separated).
fn nested(a: &str, b: &str) -> bool {
    b.is_empty() || a == b || a.starts_with(&format!("{b}/"))
}

impl ObjectViews {
    /// Opens the view root at `url` (`s3://bucket/prefix`) for a store staging on `staging`:
    /// in the same bucket (the table's data files are server-side copies, which stay inside a
    /// bucket) and neither prefix inside the other. Contacts nothing.
    ///
    /// # Errors
    /// [`Error::ViewRoot`] for a root that cannot serve.
    pub(crate) fn open(url: &str, staging: &Arc<ObjectRoot>) -> Result<ObjectViews> {
        let refuse = |reason: String| Error::ViewRoot { root: url.into(), reason };
        let (bucket, prefix) = crate::objects::parse_url(url).map_err(|e| refuse(e.to_string()))?;
        if bucket != staging.bucket() {
            return Err(refuse(format!(
                "is in bucket {bucket:?}, the staging root {} in {:?}: the Delta table's data files are server-side copies of the \
                 accepted objects, which stay inside one bucket; put the view root in the staging root's bucket",
                staging.url(),
                staging.bucket()
            )));
        }
        if nested(&prefix, staging.prefix()) || nested(staging.prefix(), &prefix) {
            return Err(refuse(format!(
                "and the staging root {} are nested (or one is the bucket's root): cleanup lists the staging root, and the views \
                 and the staging objects must be separate prefixes",
                staging.url()
            )));
        }
        let root = ObjectRoot::connect(url).map_err(|e| refuse(e.to_string()))?;
        Ok(ObjectViews { root: Arc::new(root), staging: Arc::clone(staging), engine: OnceLock::new(), retained: Mutex::default() })
    }

    /// `s3://bucket/prefix`.
    pub(crate) fn url(&self) -> &str {
        self.root.url()
    }

    fn engine(&self) -> Result<&DeltaEngine> {
        if let Some(engine) = self.engine.get() {
            return Ok(engine);
        }
        let engine = DeltaEngine::on_object_store(self.root.client())
            .map_err(|e| Error::io(format!("starting the Delta kernel for {}", self.root.url()), std::io::Error::other(e)))?;
        Ok(self.engine.get_or_init(|| engine))
    }

    fn table_rel(dataset: &str) -> String {
        format!("{dataset}/{}", table_rule::TABLE_DIR)
    }

    fn log_rel(dataset: &str) -> String {
        format!("{}/{}", Self::table_rel(dataset), table_rule::LOG_DIR)
    }

    fn data_rel(dataset: &str, view_rel: &str) -> String {
        format!("{}/{}", Self::table_rel(dataset), table_rule::data_rel(view_rel))
    }

    fn manifest_rel(dataset: &str, generation: u64) -> String {
        format!("{dataset}/{MANIFESTS_DIR}/{}/{}", rule::view_name(generation), rule::MANIFEST_FILE)
    }

    /// The table's URL, as a directory (`s3://bucket/prefix/<dataset>/table/`).
    pub(crate) fn table_url(&self, dataset: &str) -> Result<Url> {
        let text = format!("{}/", self.root.url_of(&Self::table_rel(dataset)));
        Url::parse(&text).map_err(|e| Error::invalid("view root", self.root.url(), format!("{text} is not a URL: {e}")))
    }

    fn refused(&self, dataset: &str, path: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::ViewRefused { dataset: dataset.to_owned(), path: path.into(), reason: reason.into() }
    }

    fn read_err(&self, what: String) -> impl FnOnce(std::io::Error) -> Error {
        move |e| Error::io(what, e)
    }

    fn delta_err(&self, dataset: &str, what: &str) -> impl FnOnce(crate::delta::DeltaError) -> Error {
        let what = format!("{what} the Delta table {}", self.root.url_of(&Self::table_rel(dataset)));
        move |e| Error::io(what, std::io::Error::other(e))
    }

    /// Brings the dataset's table (and its generation manifests) up to date with the store as
    /// `source` reads it: commits every held generation after the newest one the log holds (by
    /// its `txn`), or the current one again if another writer's commit is on top, each naming
    /// exactly that generation's files (a publish whose parent is the latest version commits
    /// only its change: the run's partitions' files removed and added, no scan); applies the
    /// store's retention (a checkpoint at the oldest retained generation's version, the older
    /// log entries, copies and manifests no retained generation names); with `check`, lists
    /// other writers' versions, and with a full check also places again every copy a retained
    /// generation names that is missing. `None` if nothing is published.
    pub(crate) fn sync(&self, source: &dyn Generations, dataset: &str, check: Check) -> Result<Option<ViewStatus>> {
        if dataset.starts_with('.') {
            return Err(self.refused(dataset, self.root.url_of(dataset), "a hidden dataset name cannot be a view"));
        }
        let Some(current) = source.generation_manifest(dataset, None)? else {
            return Ok(None);
        };
        let number = current.generation.number;
        let stored = source.stored_numbers(dataset)?;
        let mut status = ViewStatus::unchanged_without_trees(dataset, number, None);
        let scope_all = check == Check::Full;
        let mut read = read_log(&self.root, &Self::log_rel(dataset), scope_all)?;
        if read.is_none() || check == Check::Full {
            self.claim(dataset)?;
        }
        // The generation's file list first: it describes a committed generation of the store.
        self.put_manifests(dataset, source, &current, &stored, check)?;
        if let Some(reason) = Views::not_a_table(source, dataset, &current)? {
            if read.is_some() {
                return Err(self.refused(dataset, self.root.url_of(&Self::log_rel(dataset)), reason));
            }
            self.remove_stale_manifests(dataset, &stored)?;
            return Ok(Some(status));
        }
        let table = self.table_url(dataset)?;
        let columns = table_rule::partition_columns(current.partitions.iter().map(|p| p.partition.as_str()))
            .map_err(|reason| self.refused(dataset, table.to_string(), reason))?;
        if check == Check::Full {
            for &n in &stored {
                let manifest = if n == number { Some(current.clone()) } else { source.generation_manifest(dataset, Some(n))? };
                if let Some(m) = manifest {
                    let plan = rule::plan(&m).map_err(|r| self.refused(dataset, r.path, r.reason))?;
                    status.table_restored += self.place(dataset, &plan.files.iter().collect::<Vec<_>>(), true)?.len();
                }
            }
        }
        let engine = self.engine()?;
        let (mut log, mut sizes) = read.take().unwrap_or_default();
        let last = table_rule::last_ours(&log.log).map(|(_, g)| g);
        let generations = table_rule::generations_to_commit(last, log.latest_is_ours(), &stored, number);
        let mut latest = log.latest;
        for (i, &generation) in generations.iter().enumerate() {
            let manifest = if generation == number {
                current.clone()
            } else {
                match source.generation_manifest(dataset, Some(generation))? {
                    Some(m) => m,
                    None => continue,
                }
            };
            if i > 0 {
                (log, sizes) = read_log(&self.root, &Self::log_rel(dataset), false)?.unwrap_or_default();
            }
            // The snapshot the engine kept from its own last commit, while the log lists what it
            // did after that commit and its retention; else the log is read.
            let head = match log.latest {
                Some(latest) => engine.head_kept_url(&table, latest, &log.names),
                None => engine.head_url(&table, false),
            }
            .map_err(self.delta_err(dataset, "reading"))?;
            let plan = rule::plan(&manifest).map_err(|r| self.refused(dataset, r.path, r.reason))?;
            let change = if log.latest_is_ours() && head.version() == log.latest {
                let last = table_rule::last_ours(&log.log).map(|(_, g)| g);
                self.change_of(source, dataset, &manifest, last, &stored)?
            } else {
                None
            };
            let mut prepared = None;
            let mut new_files: Vec<&ViewFile> = Vec::new();
            if let Some((added, removed)) = change
                && let Some(p) =
                    engine.prepare_change_url(&head, &table, generation, &columns, &removed).map_err(self.delta_err(dataset, "reading"))?
            {
                new_files = plan.files.iter().filter(|f| added.contains(&f.partition)).collect();
                prepared = Some(p);
            }
            let prepared = match prepared {
                Some(p) => p,
                None => {
                    let wanted: BTreeSet<String> = plan.files.iter().map(|f| table_rule::data_rel(&f.rel)).collect();
                    let p = engine.prepare(&head, generation, &wanted).map_err(self.delta_err(dataset, "reading"))?;
                    let missing: BTreeSet<&str> = p.missing.iter().map(String::as_str).collect();
                    new_files = plan.files.iter().filter(|f| missing.contains(table_rule::data_rel(&f.rel).as_str())).collect();
                    p
                }
            };
            // Every new data file copied and checked against its record before the commit names it.
            let footers = self.place(dataset, &new_files, false)?;
            let (files, mut schema) = self.describe(dataset, &new_files, footers, &manifest)?;
            if schema.is_none() && head.version().is_none() {
                // A new table whose first generation has no file: the schema is the current one's.
                let plan = rule::plan(&current).map_err(|r| self.refused(dataset, r.path, r.reason))?;
                let first: Vec<&ViewFile> = plan.files.iter().take(1).collect();
                let footers = self.place(dataset, &first, false)?;
                schema = self.describe(dataset, &first, footers, &current)?.1;
            }
            let file_schema = match schema {
                Some(s) => s,
                None if head.version().is_some() => arrow_schema::Schema::empty(),
                None => return Err(self.refused(dataset, table.to_string(), "no Parquet file to read the table's schema from")),
            };
            let finished = engine
                .finish_url(prepared, &table, &file_schema, &columns, &files)
                .map_err(self.delta_err(dataset, &format!("committing generation {generation} to")))?;
            let version = self.settle(dataset, generation, finished)?;
            tracing::debug!(dataset, generation, version, "committed a generation to the Delta table on object storage");
            // The log as it now is, for the retention: the listing read before, and the new
            // commit with its size (a HEAD), which decides whether a checkpoint is due.
            let name = format!("{version:020}.json");
            let rel = format!("{}/{name}", Self::log_rel(dataset));
            let seen = self.root.head(&rel).map_err(self.read_err(format!("reading {}", self.root.url_of(&rel))))?;
            sizes.insert(name.clone(), seen.map_or(0, |s| s.size_bytes));
            if !log.names.contains(&name) {
                log.names.push(name);
                log.names.sort();
            }
            log.latest = log.latest.max(Some(version));
            latest = Some(version);
        }
        let Some(latest) = latest else {
            return Ok(Some(status));
        };
        status.table_version = Some(latest);
        if !self.retain(dataset, source, &stored, latest, &log.names, &sizes)? {
            // The log lists what it did before this sync, and this sync's commits: while it
            // lists just that, the next publish starts from the commit's snapshot.
            engine.keep_listing_url(&table, latest, log.names.clone());
        }
        if check != Check::None
            && let Some(read) = self.read_log(dataset, scope_all)?
        {
            status.foreign_versions = table_rule::foreign_versions(&read.log);
            status.table_version = read.latest;
        }
        Ok(Some(status))
    }

    /// What a commit's outcome leaves on the server: the version, if the log holds the store's
    /// commit of `generation` there (a commit refused because its version exists may be this
    /// one's own, its first answer lost and its retry refused).
    ///
    /// # Errors
    /// [`Error::Io`] (a fault) if another writer holds the version (the next sync commits on
    /// top of it); [`crate::ErrorKind::OutcomeUnknown`] if the commit's PUT failed after its
    /// retries and the log does not hold it (yet): the next open or `view sync` settles it
    /// from the log on the server.
    fn settle(&self, dataset: &str, generation: u64, finished: Finished) -> Result<u64> {
        let (version, unknown) = match finished {
            Finished::Committed(v) => return Ok(v),
            Finished::Conflicted(v) => (v, None),
            Finished::Unknown { version, reason } => (version, Some(reason)),
        };
        let rel = format!("{}/{version:020}.json", Self::log_rel(dataset));
        let url = self.root.url_of(&rel);
        let unknown_error = |why: String| Error::Storage {
            context: "committing to the Delta table",
            source: StorageError::new(
                StorageErrorKind::OutcomeUnknown,
                format!(
                    "the commit of generation {generation} as version {version} ({url}) was sent and its outcome is unknown: {why}; \
                     the next open or `manifestdb view sync` settles it from the log on the server"
                ),
                None,
            ),
        };
        match self.root.read_small(&rel, LOG_ENTRY_BYTES_MAX) {
            Ok(Some(bytes)) => match table_rule::read_commit(&String::from_utf8_lossy(&bytes)) {
                Commit::Ours { generation: g } if g == generation => {
                    tracing::info!(dataset, generation, version, "the commit's answer was lost; the log on the server holds it");
                    Ok(version)
                }
                _ => Err(Error::io(
                    format!("committing generation {generation} to the Delta table {}", self.root.url_of(&Self::table_rel(dataset))),
                    std::io::Error::other(format!(
                        "version {version} was written by another writer meanwhile; the next sync commits on top of it"
                    )),
                )),
            },
            Ok(None) => Err(unknown_error(unknown.unwrap_or_else(|| "the server refused the version as taken, yet holds none".into()))),
            Err(e) => Err(unknown_error(format!("{}; reading it back failed too: {e}", unknown.unwrap_or_default()))),
        }
    }

    /// For a publish whose parent is the table's latest version (the store's own commit): the
    /// partitions its run replaced and the files the parent held in them, or `None` when the
    /// full, scanning commit must decide (as `Views::sync_table_change` decides locally).
    fn change_of(
        &self,
        source: &dyn Generations,
        dataset: &str,
        manifest: &Manifest,
        last: Option<u64>,
        stored: &BTreeSet<u64>,
    ) -> Result<Option<(BTreeSet<String>, Vec<DeltaFile>)>> {
        let generation = &manifest.generation;
        let number = generation.number;
        let Some(partitions) = super::table::change_partitions(source, dataset, generation, last, stored)? else {
            return Ok(None);
        };
        let mut gone = Manifest { generation: generation.clone(), partitions: Vec::new() };
        let mut added = BTreeSet::new();
        for partition in &partitions {
            match source.partition_at(dataset, partition, number)? {
                Some(entry) if entry.since_generation == number => {
                    added.insert(entry.partition.clone());
                }
                _ => return Ok(None),
            }
            gone.partitions.extend(source.partition_at(dataset, partition, generation.parent)?);
        }
        let Some(removed) = super::table::removed_files(&gone) else {
            return Ok(None);
        };
        Ok(Some((added, removed)))
    }

    /// Makes the dataset's prefix the store's: its marker written if missing, and refused if
    /// the prefix holds anything else without it (another writer's table, another store's).
    fn claim(&self, dataset: &str) -> Result<()> {
        let marker = format!("{dataset}/{}", rule::MARKER);
        let head = self.root.head(&marker).map_err(self.read_err(format!("reading {}", self.root.url_of(&marker))))?;
        if head.is_some() {
            return Ok(());
        }
        let found = self.root.list(dataset).map_err(self.read_err(format!("listing {}", self.root.url_of(dataset))))?;
        if !found.is_empty() {
            return Err(self.refused(
                dataset,
                self.root.url_of(dataset),
                format!(
                    "holds objects and no {} marker: it is not a manifestdb view prefix; refusing to write into it or delete \
                     anything in it: move it away or choose another view root",
                    rule::MARKER
                ),
            ));
        }
        self.root.put(
            &marker,
            format!("manifestdb view prefix of dataset {dataset}: its Delta table (table/) and generation manifests (manifests/)\n")
                .into_bytes(),
        )
    }

    /// Writes the generation manifests (`manifests/v<N>/_manifest.json`, with each file's URL in
    /// the table): the current generation's after a commit; with a check, every retained
    /// generation's that is missing (a full check) or the current one's if missing.
    fn put_manifests(
        &self,
        dataset: &str,
        source: &dyn Generations,
        current: &Manifest,
        stored: &BTreeSet<u64>,
        check: Check,
    ) -> Result<()> {
        let table = self.root.url_of(&Self::table_rel(dataset));
        let numbers: Vec<u64> = match check {
            Check::Full => stored.iter().copied().collect(),
            _ => vec![current.generation.number],
        };
        for n in numbers {
            let rel = Self::manifest_rel(dataset, n);
            if check != Check::None && self.root.head(&rel).map_err(self.read_err(format!("reading {}", self.root.url_of(&rel))))?.is_some()
            {
                continue;
            }
            let manifest =
                if n == current.generation.number { Some(current.clone()) } else { source.generation_manifest(dataset, Some(n))? };
            let Some(manifest) = manifest else { continue };
            let doc = ViewManifest::of(&manifest, ViewMode::Copy).with_table_urls(&table);
            let bytes = serde_json::to_vec_pretty(&doc).map_err(|e| Error::io("rendering a view manifest", std::io::Error::other(e)))?;
            self.root.put(&rel, bytes)?;
        }
        Ok(())
    }

    /// Removes the manifests of generations the store no longer holds.
    fn remove_stale_manifests(&self, dataset: &str, stored: &BTreeSet<u64>) -> Result<()> {
        let dir = format!("{dataset}/{MANIFESTS_DIR}");
        let found = self.root.list(&dir).map_err(self.read_err(format!("listing {}", self.root.url_of(&dir))))?;
        for object in found {
            let name = object.rel.strip_prefix(&format!("{dir}/")).unwrap_or(&object.rel);
            let generation = name.split('/').next().and_then(rule::parse_view_name);
            if generation.is_some_and(|n| !stored.contains(&n)) {
                self.root.delete(&object.rel)?;
            }
        }
        Ok(())
    }

    /// Copies `files` from the accepted attempts' objects into the table's data prefix (a
    /// server-side copy each), then reads each copy back once (its ETag pinned): its size and
    /// CRC32 checked against the generation's record, so the table never names bytes the store
    /// did not validate (a worker may replace its staging object after validation: object
    /// storage cannot forbid it), and its Parquet footer read from the same bytes. With
    /// `only_missing`, a copy already there with the recorded size is kept (a HEAD each).
    /// Returns the footers (schema, rows) of the files copied, in order.
    fn place(&self, dataset: &str, files: &[&ViewFile], only_missing: bool) -> Result<Vec<Footer>> {
        let mut footers = Vec::with_capacity(files.len());
        for file in files {
            let dest = Self::data_rel(dataset, &file.rel);
            if only_missing {
                let seen = self.root.head(&dest).map_err(self.read_err(format!("reading {}", self.root.url_of(&dest))))?;
                if seen.is_some_and(|s| s.size_bytes == file.size_bytes) {
                    continue;
                }
            }
            let source = if file.staging_rel.is_empty() {
                file.file.clone()
            } else {
                format!("{}/{}", file.staging_rel.trim_end_matches('/'), file.file)
            };
            if !self.root.copy_from(&self.staging, &source, &dest)? {
                return Err(self.refused(dataset, self.staging.url_of(&source), "the accepted object is missing"));
            }
            let url = self.root.url_of(&dest);
            let reading = |e: std::io::Error| Error::io(format!("reading back {url}"), e);
            let opened = self.root.open(&dest).map_err(reading)?;
            let checked = match &opened {
                Some(object) => {
                    use parquet::file::reader::ChunkReader;
                    let mut reader =
                        object.get_read(0).map_err(|e| Error::io(format!("reading back {url}"), std::io::Error::other(e.to_string())))?;
                    let mut hasher = crc32fast::Hasher::new();
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = std::io::Read::read(&mut reader, &mut buf).map_err(reading)?;
                        if n == 0 {
                            break;
                        }
                        hasher.update(&buf[..n]);
                    }
                    Some((object.len(), hasher.finalize()))
                }
                None => None,
            };
            let object = match (opened, checked) {
                (Some(object), Some((size, crc))) if size == file.size_bytes && crc == file.crc32 => object,
                (_, checked) => {
                    self.root.delete(&dest)?;
                    let found = checked.map_or("nothing".to_owned(), |(size, crc)| format!("{size} bytes and crc32 {crc:#010x}"));
                    return Err(self.refused(
                        dataset,
                        self.staging.url_of(&source),
                        format!(
                            "its copy holds {found}, the generation records {} bytes and crc32 {:#010x}: the accepted object was \
                             replaced after validation (`manifestdb verify --files --checksums` reports it)",
                            file.size_bytes, file.crc32
                        ),
                    ));
                }
            };
            // The footer, from the windows the check just read (the same, pinned, bytes).
            let meta = parquet::arrow::arrow_reader::ArrowReaderMetadata::load(&object, Default::default());
            if let Some(fault) = object.fault_cell().get() {
                return Err(Error::io(format!("reading the Parquet footer of {url}"), std::io::Error::other(fault)));
            }
            let meta =
                meta.map_err(|e| self.refused(dataset, url.clone(), format!("cannot be read as Parquet for the Delta table: {e}")))?;
            footers.push(Footer { schema: meta.schema().as_ref().clone(), rows: meta.metadata().file_metadata().num_rows() });
        }
        Ok(footers)
    }

    /// The `add` descriptions of `files` (copied into the table, `footers` theirs, in order) of
    /// generation `manifest`, and the table's schema from them (all the same columns).
    fn describe(
        &self,
        dataset: &str,
        files: &[&ViewFile],
        footers: Vec<Footer>,
        manifest: &Manifest,
    ) -> Result<(Vec<DeltaFile>, Option<arrow_schema::Schema>)> {
        let mut schema: Option<arrow_schema::Schema> = None;
        let mut out = Vec::with_capacity(files.len());
        for (file, footer) in files.iter().zip(footers) {
            match &schema {
                None => schema = Some(footer.schema),
                Some(s) if super::table::same_columns(s, &footer.schema) => {}
                Some(s) => {
                    return Err(self.refused(
                        dataset,
                        self.root.url_of(&Self::data_rel(dataset, &file.rel)),
                        format!(
                            "its schema {} differs from the table's {}",
                            super::table::columns_text(&footer.schema),
                            super::table::columns_text(s)
                        ),
                    ));
                }
            }
            let values =
                table_rule::partition_values(&file.partition).map_err(|reason| self.refused(dataset, file.partition.clone(), reason))?;
            out.push(DeltaFile {
                rel: table_rule::data_rel(&file.rel),
                partition_values: values,
                size: file.size_bytes,
                num_records: footer.rows,
                modified_ms: i64::try_from(manifest.generation.published_at_ms).unwrap_or(i64::MAX),
            });
        }
        Ok((out, schema))
    }

    /// The log as on the server (`None`: no log yet): every name listed, the commits read from
    /// the newest back to the newest of the store's own (`all`: every commit).
    fn read_log(&self, dataset: &str, all: bool) -> Result<Option<LogRead>> {
        Ok(read_log(&self.root, &Self::log_rel(dataset), all)?.map(|(read, _)| read))
    }

    /// The store's retention applied to the table, as locally (`Views::retain_table`): a
    /// checkpoint of `latest` when due; once the oldest version holding a retained generation
    /// is past 0, a checkpoint of it, then the older log entries and every copy no retained
    /// generation names are deleted. Returns whether the log changed (a checkpoint written, an
    /// entry deleted).
    fn retain(
        &self,
        dataset: &str,
        source: &dyn Generations,
        stored: &BTreeSet<u64>,
        latest: u64,
        names: &[String],
        sizes: &BTreeMap<String, u64>,
    ) -> Result<bool> {
        let log_rel = Self::log_rel(dataset);
        let table = self.table_url(dataset)?;
        let engine = self.engine()?;
        let mut changed = false;
        if checkpoint_wanted(names, sizes, latest) {
            engine.checkpoint_url(&table, latest).map_err(self.delta_err(dataset, "checkpointing"))?;
            changed = true;
        }
        // The oldest version holding a retained generation, read from the oldest commit up.
        let mut commits: Vec<u64> = names
            .iter()
            .filter_map(|n| match table_rule::log_name(n) {
                LogName::Commit(v) => Some(v),
                _ => None,
            })
            .collect();
        commits.sort_unstable();
        let oldest_stored = stored.first().copied().unwrap_or(0);
        let unchanged = |oldest_commit: Option<&u64>| -> bool {
            let known = self.retained.lock().ok().and_then(|m| m.get(dataset).copied());
            oldest_commit.is_some_and(|&v| known == Some((v, oldest_stored)))
        };
        if unchanged(commits.first()) {
            return Ok(changed);
        }
        let remember = |oldest_commit: Option<u64>| {
            if let (Some(v), Ok(mut known)) = (oldest_commit, self.retained.lock()) {
                known.insert(dataset.to_owned(), (v, oldest_stored));
            }
        };
        self.remove_stale_manifests(dataset, stored)?;
        let mut boundary = None;
        for &v in &commits {
            let rel = format!("{log_rel}/{v:020}.json");
            let Some(bytes) =
                self.root.read_small(&rel, LOG_ENTRY_BYTES_MAX).map_err(self.read_err(format!("reading {}", self.root.url_of(&rel))))?
            else {
                continue;
            };
            if matches!(table_rule::read_commit(&String::from_utf8_lossy(&bytes)), Commit::Ours { generation } if stored.contains(&generation))
            {
                boundary = Some(v);
                break;
            }
        }
        let Some(boundary) = boundary else {
            return Ok(changed);
        };
        let doomed = table_rule::log_entries_to_remove(names, boundary);
        if doomed.is_empty() {
            remember(commits.first().copied());
            return Ok(changed);
        }
        let has_checkpoint = names.iter().any(|n| table_rule::log_entry_version(n) == Some(boundary) && n.contains(".checkpoint."));
        if !has_checkpoint {
            engine.checkpoint_url(&table, boundary).map_err(self.delta_err(dataset, "checkpointing"))?;
        }
        for name in &doomed {
            self.root.delete(&format!("{log_rel}/{name}"))?;
        }
        let mut named = BTreeSet::new();
        for &n in stored {
            if let Some(m) = source.generation_manifest(dataset, Some(n))? {
                let plan = rule::plan(&m).map_err(|r| self.refused(dataset, r.path, r.reason))?;
                named.extend(plan.files.into_iter().map(|f| f.rel));
            }
        }
        let data = format!("{}/{}", Self::table_rel(dataset), table_rule::DATA_DIR);
        let found: BTreeSet<String> = self
            .root
            .list(&data)
            .map_err(self.read_err(format!("listing {}", self.root.url_of(&data))))?
            .into_iter()
            .filter_map(|o| o.rel.strip_prefix(&format!("{data}/")).map(str::to_owned))
            .collect();
        let gone = table_rule::data_files_to_remove(&found, &named);
        for rel in &gone {
            self.root.delete(&format!("{data}/{rel}"))?;
        }
        remember(Some(boundary));
        Ok(true)
    }
}

/// Reads the log at `log_rel` below `root` (`None`: no commit or checkpoint there): every name
/// with its size, `_last_checkpoint`, and the commits from the newest back to the newest of the
/// store's own (`all`: every commit). S3 has no partial PUT, so a commit present is whole.
fn read_log(root: &Arc<ObjectRoot>, log_rel: &str, all: bool) -> Result<Option<(LogRead, BTreeMap<String, u64>)>> {
    let listed = root.list(log_rel).map_err(|e| Error::io(format!("listing {}", root.url_of(log_rel)), e))?;
    let mut out = LogRead::default();
    let mut sizes = BTreeMap::new();
    let mut commits = Vec::new();
    for object in listed {
        let Some(name) = object.rel.strip_prefix(&format!("{log_rel}/")) else { continue };
        if name.contains('/') {
            continue;
        }
        match table_rule::log_name(name) {
            LogName::Commit(v) => {
                commits.push(v);
                out.latest = out.latest.max(Some(v));
            }
            LogName::Checkpoint(v) => out.latest = out.latest.max(Some(v)),
            LogName::LastCheckpoint => {
                let text = root.read_small(&object.rel, LOG_ENTRY_BYTES_MAX).ok().flatten();
                out.last_checkpoint = Some(
                    text.and_then(|t| serde_json::from_slice::<serde_json::Value>(&t).ok())
                        .and_then(|doc| doc.get("version").and_then(serde_json::Value::as_u64)),
                );
            }
            _ => {}
        }
        sizes.insert(name.to_owned(), object.size_bytes);
        out.names.push(name.to_owned());
    }
    if out.latest.is_none() {
        return Ok(None);
    }
    out.names.sort();
    commits.sort_unstable();
    for &v in commits.iter().rev() {
        let rel = format!("{log_rel}/{v:020}.json");
        let commit = match root.read_small(&rel, LOG_ENTRY_BYTES_MAX) {
            Ok(Some(bytes)) => match String::from_utf8(bytes) {
                Ok(text) => table_rule::read_commit(&text),
                Err(_) => Commit::Damaged { reason: "is not UTF-8 text".into() },
            },
            // Deleted between the listing and the read (another writer's log cleanup).
            Ok(None) => continue,
            Err(e) => return Err(Error::io(format!("reading {}", root.url_of(&rel)), e)),
        };
        let ours = matches!(commit, Commit::Ours { .. });
        out.log.insert(v, commit);
        if ours && !all {
            break;
        }
    }
    Ok(Some((out, sizes)))
}

/// Whether a checkpoint of `latest` is due (`table_rule::checkpoint_due`), from the log's
/// listing and sizes.
fn checkpoint_wanted(names: &[String], sizes: &BTreeMap<String, u64>, latest: u64) -> bool {
    let newest = names
        .iter()
        .filter_map(|name| match table_rule::log_name(name) {
            LogName::Checkpoint(v) if v <= latest => Some(v),
            _ => None,
        })
        .max();
    if newest == Some(latest) {
        return false;
    }
    let size = |name: &str| sizes.get(name).copied().unwrap_or(0);
    let checkpoint_bytes =
        newest.map(|v| names.iter().filter(|name| table_rule::log_name(name) == LogName::Checkpoint(v)).map(|name| size(name)).sum());
    let since = latest - newest.unwrap_or(0);
    let first_bytes = if newest.is_none() { size(&format!("{:020}.json", 0)) } else { 0 };
    table_rule::checkpoint_due(since, size(&format!("{latest:020}.json")), checkpoint_bytes, first_bytes)
}

/// The Delta table of `dataset` below the view root `root_url` (`s3://...`) as its log on the
/// server holds it, and the version holding `generation` (`None`: no log).
pub(crate) fn table_state(root_url: &str, dataset: &str, generation: Option<u64>) -> Result<Option<TableState>> {
    let root = Arc::new(ObjectRoot::connect(root_url)?);
    let log_rel = format!("{dataset}/{}/{}", table_rule::TABLE_DIR, table_rule::LOG_DIR);
    Ok(read_log(&root, &log_rel, true)?.map(|(read, _)| super::state_of(&read, generation)))
}

/// `verify`'s check of a view root on object storage (`s3://...`): for each dataset with a
/// Delta table, its log read from the server (damaged and other writers' versions, a latest
/// version that is not the store's current generation) and every copy a retained generation
/// names present with its recorded size (one listing of the data prefix). Findings as
/// `(where, what)`; reads only.
pub(crate) fn check(source: &dyn Generations, root_url: &str) -> Vec<(String, String)> {
    let mut findings = Vec::new();
    let root = match ObjectRoot::connect(root_url) {
        Ok(root) => Arc::new(root),
        Err(e) => {
            findings.push((root_url.to_owned(), format!("the view root cannot be used: {e}")));
            return findings;
        }
    };
    let datasets = match source.dataset_names() {
        Ok(d) => d,
        Err(e) => {
            findings.push((root_url.to_owned(), format!("datasets cannot be listed: {e}")));
            return findings;
        }
    };
    for dataset in &datasets {
        let Ok(Some(current)) = source.generation_manifest(dataset, None) else { continue };
        if !matches!(Views::not_a_table(source, dataset, &current), Ok(None)) {
            continue;
        }
        let number = current.generation.number;
        let log_rel = ObjectViews::log_rel(dataset);
        let log_url = root.url_of(&log_rel);
        let read = match read_log(&root, &log_rel, true) {
            Ok(Some((read, _))) => read,
            Ok(None) => {
                findings.push((log_url, "missing: the Parquet dataset has no Delta table yet (run `manifestdb view sync`)".into()));
                continue;
            }
            Err(e) => {
                findings.push((log_url, format!("cannot be read: {e}")));
                continue;
            }
        };
        findings.extend(super::repair::log_findings(&read, &log_url, |v| format!("{log_url}/{v:020}.json"), number, ""));
        let data = format!("{}/{}", ObjectViews::table_rel(dataset), table_rule::DATA_DIR);
        let found: BTreeMap<String, u64> = match root.list(&data) {
            Ok(objects) => {
                objects.into_iter().filter_map(|o| o.rel.strip_prefix(&format!("{data}/")).map(|r| (r.to_owned(), o.size_bytes))).collect()
            }
            Err(e) => {
                findings.push((root.url_of(&data), format!("cannot be listed: {e}")));
                continue;
            }
        };
        let Ok(stored) = source.stored_numbers(dataset) else { continue };
        for n in stored {
            let Ok(Some(m)) = source.generation_manifest(dataset, Some(n)) else { continue };
            let Ok(plan) = rule::plan(&m) else { continue };
            for file in &plan.files {
                if found.get(&file.rel) != Some(&file.size_bytes) {
                    findings.push((
                        root.url_of(&ObjectViews::data_rel(dataset, &file.rel)),
                        format!(
                            "named by generation {n} but missing or not of its {} bytes (another writer's vacuum?); `manifestdb view \
                             sync` copies it again from staging",
                            file.size_bytes
                        ),
                    ));
                }
            }
        }
    }
    findings
}

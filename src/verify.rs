//! `verify`: an integrity walk over the whole store that returns a report instead of failing at
//! the first problem.
//!
//! Three layers, each reported separately:
//! 1. redb's own integrity check (page checksums, allocator state), when the caller holds the
//!    writable handle mutably ([`Store::verify`]) or lets verify open one that writes nothing
//!    ([`Store::verify_without_writing`]); a [`Snapshot`] cannot run it and says so;
//! 2. every record of every table decoded through the codec (frame, version, CRC32, payload)
//!    and its own consistency check;
//! 3. referential checks between tables: pointer -> existing generation, every version entry ->
//!    a valid attempt of its run that the accepted index names, accepted index -> the lowest
//!    valid attempt, runs <-> generations, side effects <-> runs; optionally every file that a
//!    retained generation references exists with its recorded size (and CRC32).
//!
//! Invariant: verify never writes (except, through a caller's writable handle, what redb's
//! `check_integrity` and the handle's own open and close write; [`Store::verify_without_writing`]
//! keeps even those in memory) and never panics on what it reads; every problem becomes a
//! [`Finding`].

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use foldhash::{HashMap, HashSet};
use redb::{DatabaseError, StorageError};

use crate::codec;
use crate::error::{Error, Result};
use crate::meta::MetaRead;
use crate::model::{EffectStatus, FileCheck, FileEntry, GenerationKind, Verdict};
use crate::progress::{NO_PROGRESS, Progress, ProgressStage, Tracker};
use crate::records::{
    self, AcceptedRecord, AttemptRecord, Checked, CleanupBatchRecord, CleanupPlanRecord, DigestRecord, EffectRecord, GenerationRecord,
    LazyBeginsRecord, MetaRecord, PartitionVersionRecord, PointerRecord, RunRecord, TaskRecord, ViewTreesRecord, ViewsRecord,
};
use crate::rules::{ids, validate::FileObservation};
use crate::schema::{
    ACCEPTED, ALL_TABLES, ATTEMPTS, CLEANUP_BATCHES, CLEANUP_PLANS, DIGESTS, Def, EFFECTS, FORMAT_VERSION, GENERATIONS, META,
    META_FORMAT_KEY, META_LAZY_BEGINS_KEY, META_VIEW_TREES_KEY, META_VIEWS_KEY, POINTERS, RUNS, TASKS, VERSIONS, fields_and_number,
    text_fields,
};
use crate::store::{ReadOnlyStore, Snapshot, Store, StoreOptions, observe};

/// What [`Store::verify`] and [`Snapshot::verify`] check beyond the records themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Run redb's integrity check first (only possible through [`Store::verify`]). Default true.
    pub integrity_check: bool,
    /// Check that every file referenced by a retained generation exists with its recorded size
    /// (and, with [`FileCheck::SizeAndChecksum`], its CRC32). Default `None`: files unchecked.
    pub files: Option<FileCheck>,
    /// The staging root for file checks when the snapshot does not know it (a
    /// [`ReadOnlyStore`] does not). Ignored when the snapshot knows its root.
    pub staging_root: Option<PathBuf>,
    /// Check the published views, if the store has a view root: each dataset's `current`
    /// names its current generation's view, every view is of a generation the store holds and
    /// has exactly that generation's files (sizes always, CRC32s with
    /// [`FileCheck::SizeAndChecksum`] in `files`) and a matching `_manifest.json`. Default true.
    pub views: bool,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions { integrity_check: true, files: None, staging_root: None, views: true }
    }
}

/// The outcome of redb's integrity check.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IntegrityCheck {
    /// Every page checksum and the allocator state were correct.
    Passed,
    /// The check failed and redb repaired its allocator state in this handle; the records were
    /// then walked. The repair is not kept: a handle that found the store damaged puts back what
    /// it wrote when it closes, so the file is left as it was (see the book, Crash safety).
    Repaired,
    /// The check found damage redb could not repair.
    Failed {
        /// redb's message.
        message: String,
    },
    /// The check did not run.
    Skipped {
        /// Why.
        reason: String,
    },
}

/// One problem found by verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The table holding the offending record (`"files"` for a staging file, `"redb"` for the
    /// database itself).
    pub table: &'static str,
    /// A printable form of the key (or the file path).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}]: {}", self.table, self.key, self.message)
    }
}

/// What verify found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// redb's integrity check.
    pub integrity: IntegrityCheck,
    /// Records decoded per table, in [`crate::Store`]'s table order.
    pub records: Vec<(&'static str, u64)>,
    /// Staging files checked.
    pub files_checked: u64,
    /// Problems, in the order found. Empty for a healthy store.
    pub findings: Vec<Finding>,
    /// Observations that are not problems (for example attempt records of a run that no longer
    /// exists, which retention may have removed).
    pub notes: Vec<String>,
}

impl VerifyReport {
    /// The report for a store whose records cannot be walked at all.
    fn unreadable(err: &Error) -> VerifyReport {
        VerifyReport {
            integrity: IntegrityCheck::Skipped { reason: "the records could not be read".into() },
            records: Vec::new(),
            files_checked: 0,
            findings: vec![Finding { table: crate::store::ENGINE, key: String::new(), message: err.to_string() }],
            notes: Vec::new(),
        }
    }

    /// True when there is no finding and redb's check did not fail or need a repair.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty() && matches!(self.integrity, IntegrityCheck::Passed | IntegrityCheck::Skipped { .. })
    }

    /// Total records decoded.
    pub fn records_total(&self) -> u64 {
        self.records.iter().map(|(_, n)| n).sum()
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.integrity {
            IntegrityCheck::Passed => writeln!(f, "redb integrity check: passed")?,
            IntegrityCheck::Repaired => writeln!(f, "redb integrity check: FAILED (redb's repair of its allocator state was not kept)")?,
            IntegrityCheck::Failed { message } => writeln!(f, "redb integrity check: FAILED: {message}")?,
            IntegrityCheck::Skipped { reason } => writeln!(f, "redb integrity check: skipped ({reason})")?,
        }
        writeln!(f, "records decoded: {} in {} tables; files checked: {}", self.records_total(), self.records.len(), self.files_checked)?;
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        if self.findings.is_empty() {
            write!(f, "no findings")
        } else {
            write!(f, "{}:", crate::error::count(self.findings.len() as u64, "finding"))?;
            for finding in &self.findings {
                write!(f, "\n  {finding}")?;
            }
            Ok(())
        }
    }
}

impl Store {
    /// Verifies the store at `db_path` (staging root `staging_root`) as
    /// [`Store::verify_with_progress`] does, redb's integrity check included (with
    /// `verify.integrity_check`), and writes nothing: not a byte of the store file, not its
    /// modification time, no view, no marker. A writable handle writes even when it changes
    /// nothing (its open marks the file's header, its close records the allocator state, redb's
    /// check reloads it), so this one keeps every write in memory; it holds the store
    /// exclusively as any writer does, and is closed before the report is returned. A store a
    /// crashed writer left is checked as its recovery would leave it, and stays unrecovered.
    ///
    /// # Errors
    /// As [`Store::open_with_options`] (an existing store only: [`Error::AlreadyOpen`] while
    /// another writer holds it) and [`Store::verify`].
    ///
    /// ```
    /// # fn main() -> manifestdb::Result<()> {
    /// use manifestdb::{IntegrityCheck, Store, StoreOptions, VerifyOptions};
    ///
    /// let dir = tempfile::tempdir().expect("a temporary directory");
    /// let (db, staging) = (dir.path().join("store.redb"), dir.path().join("staging"));
    /// Store::open(&db, &staging)?.close()?;
    /// let before = std::fs::read(&db).expect("the store file");
    ///
    /// let report = Store::verify_without_writing(&db, &staging, &StoreOptions::default(), &VerifyOptions::default(), &|_| {})?;
    /// assert!(report.is_clean());
    /// assert!(matches!(report.integrity, IntegrityCheck::Passed));
    /// assert_eq!(std::fs::read(&db).expect("the store file"), before, "not a byte written");
    /// # Ok(())
    /// # }
    /// ```
    pub fn verify_without_writing(
        db_path: impl AsRef<Path>,
        staging_root: impl AsRef<Path>,
        options: &StoreOptions,
        verify: &VerifyOptions,
        progress: &dyn Fn(Progress),
    ) -> Result<VerifyReport> {
        let mut store = Store::open_check_only(db_path.as_ref(), staging_root.as_ref(), options)?;
        let report = store.verify_with_progress(verify, progress);
        let closed = store.close();
        let report = report?;
        // A store found damaged may fail its close too; the report says what was found.
        match closed {
            Ok(()) => Ok(report),
            Err(_) if !report.is_clean() => Ok(report),
            Err(err) => Err(err),
        }
    }

    /// Verifies the whole store: redb's integrity check (if `options.integrity_check`), then
    /// every record and the references between tables (see [`Snapshot::verify`]).
    ///
    /// redb's check needs the handle exclusively: no [`Snapshot`] of this store may be alive.
    /// If one is, the check is skipped and the report says so. If the check finds damage, redb
    /// repairs what it can (its allocator state) and the report says `Repaired`.
    ///
    /// # Errors
    /// Storage errors that stop the walk itself. Damage is reported, not returned.
    pub fn verify(&mut self, options: &VerifyOptions) -> Result<VerifyReport> {
        self.verify_with_progress(options, NO_PROGRESS)
    }

    /// [`Store::verify`], reporting to `progress` each staging file it checks (with
    /// `options.files`), in the stage [`ProgressStage::CheckingFiles`]: the totals are the
    /// files retained generations reference and their recorded sizes; see [`Progress`]. The
    /// records are decoded and the views checked before and after, unreported.
    ///
    /// # Errors
    /// As [`Store::verify`].
    pub fn verify_with_progress(&mut self, options: &VerifyOptions, progress: &dyn Fn(Progress)) -> Result<VerifyReport> {
        let poison = self.poison().clone();
        let integrity = if options.integrity_check {
            let checked = poison.contain("checking the store's integrity", || Ok(self.redb_database_mut().map(|db| db.check_integrity())));
            match checked {
                Ok(None) => IntegrityCheck::Skipped { reason: "this store's storage layer has no file-integrity check".into() },
                Ok(Some(Ok(true))) => IntegrityCheck::Passed,
                Ok(Some(Ok(false))) => IntegrityCheck::Repaired,
                Ok(Some(Err(DatabaseError::TransactionInProgress))) => {
                    IntegrityCheck::Skipped { reason: "a snapshot or transaction of this handle is alive".into() }
                }
                Ok(Some(Err(DatabaseError::Storage(StorageError::Corrupted(message))))) => IntegrityCheck::Failed { message },
                Ok(Some(Err(err))) => return Err(Error::storage("checking the store's integrity", err)),
                // redb panicked on what it read: that is damage, reported like the rest.
                Err(panic) => IntegrityCheck::Failed { message: panic.to_string() },
            }
        } else {
            IntegrityCheck::Skipped { reason: "not requested".into() }
        };
        let failed = matches!(integrity, IntegrityCheck::Failed { .. });
        let mut report = match self.snapshot() {
            Ok(snapshot) => snapshot.walk_contained(options, progress),
            // After a failed integrity check the file may not even open a read; report that.
            Err(err) if failed || err.is_corruption() => VerifyReport::unreadable(&err),
            Err(err) => return Err(err),
        };
        report.integrity = integrity;
        // Damage of the store itself (not of staging files or views): this handle found the
        // store damaged, so its close puts back what it wrote (`store/undo.rs`).
        if !matches!(report.integrity, IntegrityCheck::Passed | IntegrityCheck::Skipped { .. })
            || report.findings.iter().any(|f| f.table != "files" && f.table != "views")
        {
            poison.saw_damage();
        }
        Ok(report)
    }
}

impl ReadOnlyStore {
    /// Verifies the records and the references between tables of a store opened read-only.
    /// redb's integrity check cannot run on a read-only handle; the report says it was skipped.
    ///
    /// # Errors
    /// Storage errors that stop the walk itself.
    pub fn verify(&self, options: &VerifyOptions) -> Result<VerifyReport> {
        self.verify_with_progress(options, NO_PROGRESS)
    }

    /// [`ReadOnlyStore::verify`], reporting to `progress` each staging file it checks, as
    /// [`Store::verify_with_progress`] does.
    ///
    /// # Errors
    /// As [`ReadOnlyStore::verify`].
    pub fn verify_with_progress(&self, options: &VerifyOptions, progress: &dyn Fn(Progress)) -> Result<VerifyReport> {
        match self.snapshot() {
            Ok(snapshot) => Ok(snapshot.verify_reporting(options, progress)),
            Err(err) if err.is_corruption() => Ok(VerifyReport::unreadable(&err)),
            Err(err) => Err(err),
        }
    }
}

impl Snapshot {
    /// Verifies every record of this snapshot and the references between tables. redb's
    /// integrity check needs the writable handle exclusively and is skipped here (use
    /// [`Store::verify`] for it); the report says so.
    pub fn verify(&self, options: &VerifyOptions) -> VerifyReport {
        self.verify_reporting(options, NO_PROGRESS)
    }

    fn verify_reporting(&self, options: &VerifyOptions, progress: &dyn Fn(Progress)) -> VerifyReport {
        let mut report = self.walk_contained(options, progress);
        if options.integrity_check {
            report.integrity = IntegrityCheck::Skipped { reason: "a read snapshot cannot run redb's check; use Store::verify".into() };
        }
        report
    }

    /// The walk, at the boundary with redb: a panic inside it is reported as a finding.
    fn walk_contained(&self, options: &VerifyOptions, progress: &dyn Fn(Progress)) -> VerifyReport {
        match self.contain("verifying the records", || Ok(self.walk(options, progress))) {
            Ok(report) => report,
            Err(err) => VerifyReport::unreadable(&err),
        }
    }

    fn walk(&self, options: &VerifyOptions, progress: &dyn Fn(Progress)) -> VerifyReport {
        let mut walk = Walk {
            report: VerifyReport {
                integrity: IntegrityCheck::Skipped { reason: "not requested".into() },
                records: Vec::new(),
                files_checked: 0,
                findings: Vec::new(),
                notes: Vec::new(),
            },
        };
        // Every stored frame, decoded here, whatever the layer; the checks after it run over
        // the decoded `Tables`, plain values.
        let tables = match self.read("verifying the records", |meta| Ok(walk.decode_all(meta))) {
            Ok(tables) => tables,
            Err(err) => {
                walk.find("", "", format!("the records cannot be read: {err}"));
                Tables::default()
            }
        };
        walk.check_references(&tables);
        if let Some(check) = options.files {
            let root = self.staging_root().map(Path::to_path_buf).or_else(|| options.staging_root.clone());
            match root {
                Some(root) => match crate::store::StagingRoot::resolve(&root) {
                    Ok(root) => walk.check_files(&tables, &root, check, progress),
                    Err(err) => walk.report.notes.push(format!("files not checked: the staging root cannot be used: {err}")),
                },
                None => walk.report.notes.push("files not checked: no staging root is known (set VerifyOptions::staging_root)".into()),
            }
        }
        if options.views {
            match self.views() {
                Ok(Some(views)) if views.root.to_str().is_some_and(|r| r.starts_with("s3://")) => {
                    for (path, message) in crate::views::check_objects(self, &views.root) {
                        walk.find("views", path, message);
                    }
                }
                Ok(Some(views)) => {
                    let trees = views.trees.clone().unwrap_or(crate::ViewTrees::All);
                    let (findings, notes) = crate::views::check(self, &views.root, &trees, options.files);
                    for (path, message) in findings {
                        walk.find("views", path, message);
                    }
                    walk.report.notes.extend(notes);
                }
                Ok(None) => {}
                Err(err) => walk.find("views", "", format!("the view root cannot be read: {err}")),
            }
        }
        walk.report
    }
}

/// A decode error as a finding's message: the corruption itself, without table and key (the
/// finding names them).
fn finding_message(err: Error) -> String {
    match err {
        Error::Corrupted { detail, .. } => detail.to_string(),
        other => other.to_string(),
    }
}

/// An attempt's key fields: dataset, run, partition, attempt number.
type AttemptKey = (String, String, String, u32);

/// A task's attempts, in attempt order: a slice of [`Tables::attempts`].
type Attempts = [(AttemptKey, AttemptRecord)];

/// Every table decoded, each as a list sorted by the parsed key fields (redb returns the keys in
/// that order already, so building one is a push per record; see [`Sorted`]).
///
/// Lists, not ordered maps: a search tree costs O(log n) comparisons of text tuples per insert
/// and per lookup, so a walk over it grows faster than the store (10.5 times the instructions
/// for 8 times the records). Point lookups go through the hash [`Index`] built once over these
/// lists, so the walk is linear in the number of records.
#[derive(Default)]
struct Tables {
    format_seen: bool,
    runs: Sorted<(String, String), RunRecord>,
    tasks: Sorted<(String, String, String), TaskRecord>,
    attempts: Sorted<AttemptKey, AttemptRecord>,
    accepted: Sorted<(String, String, String), u32>,
    versions: Sorted<(String, String, u64), PartitionVersionRecord>,
    generations: Sorted<(String, u64), GenerationRecord>,
    pointers: Sorted<String, u64>,
    digests: Sorted<(String, String, String), DigestRecord>,
    effects: Sorted<(String, String, String, String), EffectRecord>,
}

impl Tables {
    fn sort(&mut self) {
        self.runs.sort();
        self.tasks.sort();
        self.attempts.sort();
        self.accepted.sort();
        self.versions.sort();
        self.generations.sort();
        self.pointers.sort();
        self.digests.sort();
        self.effects.sort();
    }
}

/// A list of (key, record) sorted by key. redb returns a table's keys in order, and a key's
/// bytes sort as its parsed fields do, so each push compares the new key with the last one
/// only (both at hand) and the list is sorted at the end only if some key came out of order.
/// Keys are distinct, since each comes from a distinct stored key and parsing one is injective.
struct Sorted<K, V> {
    list: Vec<(K, V)>,
    in_order: bool,
}

impl<K: Ord, V> Sorted<K, V> {
    fn push(&mut self, key: K, value: V) {
        if self.list.last().is_some_and(|(last, _)| *last >= key) {
            self.in_order = false;
        }
        self.list.push((key, value));
    }

    fn sort(&mut self) {
        if !self.in_order {
            self.list.sort_by(|a, b| a.0.cmp(&b.0));
            self.in_order = true;
        }
    }
}

impl<K, V> Default for Sorted<K, V> {
    fn default() -> Self {
        Sorted { list: Vec::new(), in_order: true }
    }
}

impl<K, V> std::ops::Deref for Sorted<K, V> {
    type Target = [(K, V)];
    fn deref(&self) -> &[(K, V)] {
        &self.list
    }
}

impl<'a, K, V> IntoIterator for &'a Sorted<K, V> {
    type Item = &'a (K, V);
    type IntoIter = std::slice::Iter<'a, (K, V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

/// Hash lookups over [`Tables`], built in one pass over each list: every check below is then
/// one pass over a table with O(1) lookups into the others, O(records) in all, never
/// O(generations x versions) nor O(n log n).
struct Index<'a> {
    runs: HashMap<(&'a str, &'a str), &'a RunRecord>,
    /// Tasks stored per run.
    tasks_per_run: HashMap<(&'a str, &'a str), u64>,
    tasks: HashSet<(&'a str, &'a str, &'a str)>,
    attempts: HashMap<(&'a str, &'a str, &'a str, u32), &'a AttemptRecord>,
    /// Each task's attempts, in attempt order: a slice of `Tables::attempts`.
    attempts_of: HashMap<(&'a str, &'a str, &'a str), &'a Attempts>,
    accepted: HashMap<(&'a str, &'a str, &'a str), u32>,
    generations: HashMap<(&'a str, u64), &'a GenerationRecord>,
    /// The oldest generation of each dataset still recorded (older ones expired).
    oldest: HashMap<&'a str, u64>,
    pointers: HashMap<&'a str, u64>,
}

impl<'a> Index<'a> {
    fn new(t: &'a Tables) -> Index<'a> {
        let mut tasks_per_run: HashMap<(&str, &str), u64> = HashMap::default();
        for ((d, r, _), _) in &t.tasks {
            *tasks_per_run.entry((d.as_str(), r.as_str())).or_default() += 1;
        }
        let mut attempts_of: HashMap<(&str, &str, &str), &[_]> = HashMap::default();
        for group in t.attempts.chunk_by(|((d1, r1, p1, _), _), ((d2, r2, p2, _), _)| (d1, r1, p1) == (d2, r2, p2)) {
            let ((d, r, p, _), _) = &group[0];
            attempts_of.insert((d.as_str(), r.as_str(), p.as_str()), group);
        }
        let mut oldest: HashMap<&str, u64> = HashMap::default();
        for ((d, g), _) in &t.generations {
            // The list is in order, so the first generation seen of a dataset is its oldest.
            oldest.entry(d.as_str()).or_insert(*g);
        }
        Index {
            runs: t.runs.iter().map(|((d, r), run)| ((d.as_str(), r.as_str()), run)).collect(),
            tasks_per_run,
            tasks: t.tasks.iter().map(|((d, r, p), _)| (d.as_str(), r.as_str(), p.as_str())).collect(),
            attempts: t.attempts.iter().map(|((d, r, p, n), a)| ((d.as_str(), r.as_str(), p.as_str(), *n), a)).collect(),
            attempts_of,
            accepted: t.accepted.iter().map(|((d, r, p), n)| ((d.as_str(), r.as_str(), p.as_str()), *n)).collect(),
            generations: t.generations.iter().map(|((d, g), generation)| ((d.as_str(), *g), generation)).collect(),
            oldest,
            pointers: t.pointers.iter().map(|(d, g)| (d.as_str(), *g)).collect(),
        }
    }

    fn run(&self, d: &str, r: &str) -> Option<&'a RunRecord> {
        self.runs.get(&(d, r)).copied()
    }

    fn generation(&self, d: &str, g: u64) -> Option<&'a GenerationRecord> {
        self.generations.get(&(d, g)).copied()
    }

    /// The attempts of one task, in attempt order.
    fn attempts_of(&self, d: &str, r: &str, p: &str) -> &'a Attempts {
        self.attempts_of.get(&(d, r, p)).copied().unwrap_or(&[])
    }

    /// True if generation `number` of the dataset is older than every recorded one, so its
    /// absence is retention's doing, not damage. Retention always keeps the current
    /// generation, so a dataset without any generation has expired nothing.
    fn expired(&self, dataset: &str, number: u64) -> bool {
        self.oldest.get(dataset).is_some_and(|oldest| number < *oldest)
    }
}

struct Walk {
    report: VerifyReport,
}

fn take<const N: usize>(fields: Vec<String>) -> Option<[String; N]> {
    fields.try_into().ok()
}

impl Walk {
    fn find(&mut self, table: &'static str, key: impl Into<String>, message: impl Into<String>) {
        self.report.findings.push(Finding { table, key: key.into(), message: message.into() });
    }

    /// Decodes every record of `def`, reporting each one that fails, and hands each good one
    /// to `keep`, which parses its key and returns false if it cannot: those keys are reported
    /// as malformed after the table's other findings. Nothing is collected in between, so the
    /// walk holds each record once.
    fn decode_table<R: Checked>(&mut self, meta: &mut dyn MetaRead, def: Def, keep: impl FnMut(&[u8], R) -> bool) {
        self.decode_table_where(meta, def, |_| true, keep)
    }

    /// As `decode_table`, for the keys `select` accepts; the others are decoded as a
    /// [`ViewsRecord`] (the one other record type a table holds: `meta_v1`'s `views` key).
    fn decode_table_where<R: Checked>(
        &mut self,
        meta: &mut dyn MetaRead,
        def: Def,
        select: impl Fn(&[u8]) -> bool,
        mut keep: impl FnMut(&[u8], R) -> bool,
    ) {
        let mut count = 0u64;
        let mut malformed = Vec::new();
        let mut findings: Vec<(String, String)> = Vec::new();
        let walked = meta.each_frame(def, &mut |key, value| {
            count += 1;
            if !select(key) {
                let decoded = if key == META_LAZY_BEGINS_KEY {
                    records::decode::<LazyBeginsRecord>(def.name, key, value).map(drop)
                } else if key == META_VIEW_TREES_KEY {
                    records::decode::<ViewTreesRecord>(def.name, key, value).map(drop)
                } else {
                    records::decode::<ViewsRecord>(def.name, key, value).map(drop)
                };
                if let Err(err) = decoded {
                    findings.push((codec::printable_key(key), finding_message(err)));
                }
                return;
            }
            match records::decode::<R>(def.name, key, value) {
                Ok(record) => {
                    if !keep(key, record) {
                        malformed.push(key.to_vec());
                    }
                }
                Err(err) => findings.push((codec::printable_key(key), finding_message(err))),
            }
        });
        for (key, message) in findings {
            self.find(def.name, key, message);
        }
        if let Err(err) = walked {
            let message = if count == 0 { format!("table cannot be read: {err}") } else { format!("reading stopped: {err}") };
            self.find(def.name, "", message);
        }
        self.report.records.push((def.name, count));
        for key in malformed {
            self.malformed(def, &key);
        }
    }

    fn malformed(&mut self, def: Def, key: &[u8]) {
        self.find(def.name, codec::printable_key(key), "malformed key");
    }

    fn decode_all(&mut self, meta: &mut dyn MetaRead) -> Tables {
        let mut t = Tables::default();
        debug_assert_eq!(ALL_TABLES.len(), 12, "verify walks every table; a new table needs its checks here");
        let mut formats: Vec<(Vec<u8>, MetaRecord)> = Vec::new();
        self.decode_table_where(
            meta,
            META,
            |k| k != META_VIEWS_KEY && k != META_LAZY_BEGINS_KEY && k != META_VIEW_TREES_KEY,
            |key, record| {
                formats.push((key.to_vec(), record));
                true
            },
        );
        for (key, record) in formats {
            if key == META_FORMAT_KEY {
                t.format_seen = true;
                if record.format_version != FORMAT_VERSION {
                    self.find(META.name, "format", format!("format version {} is not {FORMAT_VERSION}", record.format_version));
                }
            }
        }
        if !t.format_seen {
            self.find(META.name, "format", "the store has no format record");
        }
        self.decode_table::<RunRecord>(meta, RUNS, |key, record| {
            text_fields(key, 2).and_then(take::<2>).map(|[d, r]| t.runs.push((d, r), record)).is_some()
        });
        self.decode_table::<TaskRecord>(meta, TASKS, |key, record| {
            text_fields(key, 3).and_then(take::<3>).map(|[d, r, p]| t.tasks.push((d, r, p), record)).is_some()
        });
        self.decode_table::<AttemptRecord>(meta, ATTEMPTS, |key, record| {
            fields_and_number(key, 3, 4)
                .and_then(|(f, n)| Some((take::<3>(f)?, n)))
                .map(|([d, r, p], n)| t.attempts.push((d, r, p, n as u32), record))
                .is_some()
        });
        self.decode_table::<AcceptedRecord>(meta, ACCEPTED, |key, record| {
            text_fields(key, 3).and_then(take::<3>).map(|[d, r, p]| t.accepted.push((d, r, p), record.attempt)).is_some()
        });
        self.decode_table::<PartitionVersionRecord>(meta, VERSIONS, |key, record| {
            fields_and_number(key, 2, 8)
                .and_then(|(f, n)| Some((take::<2>(f)?, n)))
                .map(|([d, p], n)| t.versions.push((d, p, n), record))
                .is_some()
        });
        self.decode_table::<GenerationRecord>(meta, GENERATIONS, |key, record| {
            fields_and_number(key, 1, 8)
                .and_then(|(f, n)| Some((take::<1>(f)?, n)))
                .map(|([d], n)| t.generations.push((d, n), record))
                .is_some()
        });
        self.decode_table::<PointerRecord>(meta, POINTERS, |key, record| {
            text_fields(key, 1).and_then(take::<1>).map(|[d]| t.pointers.push(d, record.generation)).is_some()
        });
        self.decode_table::<DigestRecord>(meta, DIGESTS, |key, record| {
            text_fields(key, 3).and_then(take::<3>).map(|[d, s, p]| t.digests.push((d, s, p), record)).is_some()
        });
        // Cleanup plans and their applied batches refer to paths and attempts that cleanup
        // may since have removed, so only their frames, records and key shapes are checked.
        self.decode_table::<CleanupPlanRecord>(meta, CLEANUP_PLANS, |key, _| key.len() == 8);
        self.decode_table::<CleanupBatchRecord>(meta, CLEANUP_BATCHES, |key, _| key.len() == 12);
        self.decode_table::<EffectRecord>(meta, EFFECTS, |key, record| {
            text_fields(key, 4).and_then(take::<4>).map(|[d, r, e, p]| t.effects.push((d, r, e, p), record)).is_some()
        });
        t.sort();
        t
    }

    fn check_references(&mut self, t: &Tables) {
        let undecodable = self.report.findings.len();
        if undecodable > 0 {
            self.report.notes.push(format!(
                "{} could not be decoded; the reference checks below treat them as missing, so some of their \
                 findings may follow from those",
                crate::error::count(undecodable as u64, "record")
            ));
        }
        let index = Index::new(t);
        self.check_runs_and_tasks(t, &index);
        self.check_attempts_and_accepted(t, &index);
        self.check_generations_and_pointers(t, &index);
        self.check_versions(t, &index);
        self.check_digests_and_effects(t, &index);
    }

    fn check_runs_and_tasks(&mut self, t: &Tables, index: &Index<'_>) {
        for ((d, r), run) in &t.runs {
            let key = || format!("{d}/{r}");
            let tasks = index.tasks_per_run.get(&(d.as_str(), r.as_str())).copied().unwrap_or(0);
            if tasks != run.task_count {
                self.find(RUNS.name, key(), format!("run declares {} but {tasks} are stored", crate::error::count(run.task_count, "task")));
            }
            if let Some(g) = run.published_generation {
                match index.generation(d, g) {
                    Some(generation) if generation.run == *r && generation.kind == GenerationKind::Publish => {}
                    Some(generation) => self.find(
                        RUNS.name,
                        key(),
                        format!("run is published as generation {g}, which belongs to run {:?}", generation.run),
                    ),
                    None if index.expired(d, g) => {}
                    None => self.find(RUNS.name, key(), format!("run is published as generation {g}, which does not exist")),
                }
            }
        }
        for ((d, r, p), task) in &t.tasks {
            let key = || format!("{d}/{r}/{p}");
            if index.run(d, r).is_none() {
                self.find(TASKS.name, key(), "task of a run that does not exist");
            }
            // Attempts 1..next_attempt were begun; cleanup removes the records of dead ones that
            // nothing references, so some may be missing, but none may lie beyond.
            let beyond: Vec<u32> =
                index.attempts_of(d, r, p).iter().map(|((_, _, _, n), _)| *n).filter(|n| *n >= task.next_attempt).collect();
            if !beyond.is_empty() {
                self.find(
                    TASKS.name,
                    key(),
                    format!("task has handed out attempts 1..{} but attempts {beyond:?} are stored", task.next_attempt),
                );
            }
        }
    }

    fn check_attempts_and_accepted(&mut self, t: &Tables, index: &Index<'_>) {
        for ((d, r, p, n), attempt) in &t.attempts {
            let key = || format!("{d}/{r}/{p}#{n}");
            match index.run(d, r) {
                None => {
                    self.report.notes.push(format!("attempt {} belongs to run {d}/{r}, which no longer exists", key()));
                    continue;
                }
                Some(run) => {
                    if let Some(candidate) = &attempt.candidate
                        && candidate.snapshot != run.snapshot
                    {
                        self.find(
                            ATTEMPTS.name,
                            key(),
                            format!("candidate read snapshot {:?}, the run is pinned to {:?}", candidate.snapshot, run.snapshot),
                        );
                    }
                }
            }
            match ids::staging_rel(d, r, p, *n) {
                Ok(rel) if rel == attempt.staging_rel => {}
                Ok(rel) => {
                    self.find(ATTEMPTS.name, key(), format!("staging directory {:?} is not the attempt's own {rel:?}", attempt.staging_rel))
                }
                Err(err) => self.find(ATTEMPTS.name, key(), format!("no valid staging directory: {err}")),
            }
        }
        for ((d, r, p), accepted) in &t.accepted {
            let key = || format!("{d}/{r}/{p}");
            let Some(run) = index.run(d, r) else {
                self.find(ACCEPTED.name, key(), "accepted attempt of a run that does not exist");
                continue;
            };
            match index.attempts.get(&(d.as_str(), r.as_str(), p.as_str(), *accepted)) {
                Some(AttemptRecord { verdict: Some(Verdict::Valid), .. }) => {}
                Some(_) => self.find(ACCEPTED.name, key(), format!("accepted attempt {accepted} is not validated valid")),
                None => self.find(ACCEPTED.name, key(), format!("accepted attempt {accepted} does not exist")),
            }
            // Once the run is published its accepted attempts are frozen, so a lower attempt
            // validated afterwards does not move it.
            if run.published_generation.is_none() {
                let lowest = lowest_valid(index, d, r, p);
                if lowest != Some(*accepted) {
                    self.find(ACCEPTED.name, key(), format!("accepted attempt {accepted}, but the lowest valid attempt is {lowest:?}"));
                }
            }
        }
        for ((d, r, p), _) in &t.tasks {
            if index.accepted.contains_key(&(d.as_str(), r.as_str(), p.as_str())) {
                continue;
            }
            let key = format!("{d}/{r}/{p}");
            let published = index.run(d, r).and_then(|run| run.published_generation);
            if let Some(g) = published {
                self.find(ACCEPTED.name, &key, format!("task of a run published as generation {g} has no accepted attempt"));
            } else if let Some(lowest) = lowest_valid(index, d, r, p) {
                self.find(ACCEPTED.name, &key, format!("attempt {lowest} is valid but the task has no accepted attempt"));
            }
        }
    }

    fn check_generations_and_pointers(&mut self, t: &Tables, index: &Index<'_>) {
        // Version entries written per (dataset, generation), counted in one pass: comparing
        // each generation with every version entry would be O(generations x versions).
        let mut written_by: HashMap<(&str, u64), u64> = HashMap::default();
        for ((d, _, g), _) in &t.versions {
            *written_by.entry((d.as_str(), *g)).or_default() += 1;
        }
        for ((d, g), generation) in &t.generations {
            let key = || format!("{d}/{g}");
            if generation.parent >= *g {
                self.find(GENERATIONS.name, key(), format!("parent generation {} is not older", generation.parent));
            }
            match index.pointers.get(d.as_str()) {
                Some(pointer) if g <= pointer => {}
                Some(pointer) => self.find(GENERATIONS.name, key(), format!("generation is newer than the pointer's {pointer}")),
                None => self.find(GENERATIONS.name, key(), "generation of a dataset without a pointer"),
            }
            let written = written_by.get(&(d.as_str(), *g)).copied().unwrap_or(0);
            // A publish writes one version entry per task, a rollback one per partition it
            // restores or removes. Expiry drops the removal markers of the oldest retained
            // generation (they hide nothing once every older version is gone), so there fewer
            // entries may remain.
            let oldest = index.oldest.get(d.as_str()) == Some(g);
            let expected = generation.partitions_replaced;
            if (!oldest && written != expected) || (oldest && written > expected) {
                self.find(
                    GENERATIONS.name,
                    key(),
                    format!(
                        "generation replaced {} but {} stored",
                        crate::error::count(generation.partitions_replaced, "partition"),
                        if written == 1 { "1 version entry is".to_owned() } else { format!("{written} version entries are") }
                    ),
                );
            }
            if generation.kind == GenerationKind::Publish {
                match index.run(d, &generation.run) {
                    Some(run) if run.published_generation == Some(*g) => {}
                    Some(run) => self.find(
                        GENERATIONS.name,
                        key(),
                        format!(
                            "run {:?} records {}, not this one",
                            generation.run,
                            run.published_generation.map_or_else(|| "no published generation".to_owned(), |g| format!("generation {g}"))
                        ),
                    ),
                    None => self.report.notes.push(format!(
                        "generation {} was published by run {:?}, which no longer exists",
                        key(),
                        generation.run
                    )),
                }
            }
        }
        for (d, g) in &t.pointers {
            if index.generation(d, *g).is_none() {
                self.find(POINTERS.name, d, format!("pointer names generation {g}, which does not exist"));
            }
        }
    }

    fn check_versions(&mut self, t: &Tables, index: &Index<'_>) {
        for ((d, p, g), version) in &t.versions {
            let key = || format!("{d}/{p}@{g}");
            let generation = index.generation(d, *g);
            match (generation, index.pointers.get(d.as_str())) {
                (_, None) => self.find(VERSIONS.name, key(), "version entry of a dataset without a pointer"),
                (_, Some(pointer)) if g > pointer => self.find(VERSIONS.name, key(), format!("newer than the pointer's {pointer}")),
                (None, _) if index.expired(d, *g) => {}
                (None, _) => self.find(VERSIONS.name, key(), "written by a generation that does not exist"),
                (Some(_), _) => {}
            }
            let Some(entry) = &version.entry else { continue };
            if let Some(generation) = generation
                && generation.kind == GenerationKind::Publish
                && (entry.run != generation.run || entry.snapshot != generation.snapshot)
            {
                self.find(VERSIONS.name, key(), format!("entry of run {:?} written by generation of run {:?}", entry.run, generation.run));
            }
            if index.run(d, &entry.run).is_none() {
                self.report.notes.push(format!("version {}: the records of run {:?} no longer exist", key(), entry.run));
                continue;
            }
            match index.attempts.get(&(d.as_str(), entry.run.as_str(), p.as_str(), entry.attempt)) {
                None => self.find(VERSIONS.name, key(), format!("attempt {} of run {:?} does not exist", entry.attempt, entry.run)),
                Some(attempt) => {
                    if attempt.verdict != Some(Verdict::Valid) {
                        self.find(VERSIONS.name, key(), format!("attempt {} is not validated valid", entry.attempt));
                    }
                    // The entry records the verdict's effective figures: computed ones for a run
                    // with a grain, reported ones otherwise.
                    let same = attempt.candidate.as_ref().is_some_and(|c| {
                        let (rows, total, digest) = match &attempt.reconciliation {
                            Some(r) => r.effective(),
                            None => (c.rows, c.total, c.digest.as_deref()),
                        };
                        digest == Some(entry.digest.as_str()) && rows == Some(entry.rows) && total == entry.total && c.files == entry.files
                    }) && attempt.staging_rel == entry.staging_rel;
                    if !same {
                        self.find(VERSIONS.name, key(), format!("entry differs from attempt {}'s candidate", entry.attempt));
                    }
                }
            }
            match index.accepted.get(&(d.as_str(), entry.run.as_str(), p.as_str())) {
                Some(accepted) if *accepted == entry.attempt => {}
                other => {
                    self.find(VERSIONS.name, key(), format!("holds attempt {}, the task's accepted attempt is {other:?}", entry.attempt))
                }
            }
        }
    }

    fn check_digests_and_effects(&mut self, t: &Tables, index: &Index<'_>) {
        for ((d, s, p), digest) in &t.digests {
            let key = || format!("{d}/{s}/{p}");
            match index.run(d, &digest.run) {
                Some(run) if run.published_generation == Some(digest.generation) && run.snapshot == *s => {}
                Some(_) => self.find(
                    DIGESTS.name,
                    key(),
                    format!("run {:?} did not publish snapshot {s:?} in generation {}", digest.run, digest.generation),
                ),
                None => self.report.notes.push(format!("digest {}: run {:?} no longer exists", key(), digest.run)),
            }
        }
        for ((d, r, e, p), effect) in &t.effects {
            let key = || format!("{d}/{r}/{e}/{p}");
            let Some(run) = index.run(d, r) else {
                self.find(EFFECTS.name, key(), "side effect of a run that does not exist");
                continue;
            };
            if !p.is_empty() && !index.tasks.contains(&(d.as_str(), r.as_str(), p.as_str())) {
                self.find(EFFECTS.name, key(), "side effect of a partition the run does not declare");
            }
            let consistent = match (&effect.status, run.published_generation) {
                (EffectStatus::Recorded, None) => true,
                (EffectStatus::Ready { generation } | EffectStatus::Emitted { generation, .. }, Some(g)) => *generation == g,
                _ => false,
            };
            if !consistent {
                self.find(
                    EFFECTS.name,
                    key(),
                    format!("status {:?} contradicts the run's published generation {:?}", effect.status, run.published_generation),
                );
            }
        }
    }

    /// Checks every file referenced by a retained generation once.
    ///
    /// A version entry (p, v) is visible in generation g when v <= g and the partition's next
    /// version is above g; so it is referenced by a retained generation when some stored
    /// generation lies in [v, next version). One pass over the versions, each with one binary
    /// search in the sorted generations: O(V log G), not O(G x V).
    fn check_files(&mut self, t: &Tables, root: &crate::store::StagingRoot, check: FileCheck, progress: &dyn Fn(Progress)) {
        let mut referenced: BTreeSet<(String, String, u64, u32)> = BTreeSet::new();
        let mut versions = t.versions.iter().peekable();
        while let Some(((d, p, v), version)) = versions.next() {
            let next = match versions.peek() {
                Some(((nd, np, nv), _)) if nd == d && np == p => *nv,
                _ => u64::MAX,
            };
            // The first stored generation of the dataset at or above v; visible if it is below
            // the next version (or the entry is the partition's last).
            let first = t.generations.partition_point(|((gd, gn), _)| (gd.as_str(), *gn) < (d.as_str(), *v));
            let visible = t.generations.get(first).is_some_and(|((gd, gn), _)| gd == d && (*gn < next || next == u64::MAX));
            if !visible {
                continue;
            }
            if let Some(entry) = &version.entry {
                for file in &entry.files {
                    referenced.insert((entry.staging_rel.clone(), file.path.clone(), file.size_bytes, file.crc32));
                }
            }
        }
        let mut checking = Tracker::start(progress, ProgressStage::CheckingFiles, referenced.iter().map(|(_, _, size, _)| *size));
        for (staging_rel, path, size_bytes, crc32) in referenced {
            let file = FileEntry { path, size_bytes, crc32 };
            self.report.files_checked += 1;
            let key = format!("{staging_rel}/{}", file.path);
            let message = match observe(root, &staging_rel, &file, check) {
                FileObservation::Missing => Some("file is missing or not a regular file".to_owned()),
                FileObservation::Unreadable(message) => Some(format!("file is unreadable: {message}")),
                FileObservation::Present { size_bytes, .. } if size_bytes != file.size_bytes => {
                    Some(format!("file has {}, recorded {}", crate::error::count(size_bytes, "byte"), file.size_bytes))
                }
                FileObservation::Present { crc32: Some(crc32), .. } if crc32 != file.crc32 => {
                    Some(format!("file has crc32 {crc32:#010x}, recorded {:#010x}", file.crc32))
                }
                FileObservation::Present { .. } => None,
            };
            if let Some(message) = message {
                self.find("files", key, message);
            }
            checking.file_done(file.size_bytes);
        }
    }
}

/// The lowest attempt of a task validated valid.
fn lowest_valid(index: &Index<'_>, d: &str, r: &str, p: &str) -> Option<u32> {
    crate::rules::accept::lowest_valid(
        index.attempts_of(d, r, p).iter().filter_map(|((_, _, _, n), a)| a.verdict.as_ref().map(|v| (*n, v.is_valid()))),
    )
}

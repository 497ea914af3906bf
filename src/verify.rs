//! `verify`: an integrity walk over the whole store that returns a report instead of failing at
//! the first problem.
//!
//! Three layers, each reported separately:
//! 1. redb's own integrity check (page checksums, allocator state), when the caller holds the
//!    writable handle mutably ([`Store::verify`]); a [`Snapshot`] cannot run it and says so;
//! 2. every record of every table decoded through the codec (frame, version, CRC32, payload)
//!    and its own consistency check;
//! 3. referential checks between tables: pointer -> existing generation, every version entry ->
//!    a valid attempt of its run that the accepted index names, accepted index -> the lowest
//!    valid attempt, runs <-> generations, side effects <-> runs; optionally every file that a
//!    retained generation references exists with its recorded size (and CRC32).
//!
//! Invariant: verify never writes (except redb's own repair inside `check_integrity`, which it
//! reports) and never panics on what it reads; every problem becomes a [`Finding`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use redb::{DatabaseError, ReadTransaction, ReadableTable, StorageError};

use crate::codec;
use crate::error::{Error, Result};
use crate::model::{EffectStatus, FileCheck, FileEntry, GenerationKind, Verdict};
use crate::records::{
    AcceptedRecord, AttemptRecord, Checked, CleanupBatchRecord, CleanupPlanRecord, DigestRecord, EffectRecord, GenerationRecord,
    MetaRecord, PartitionVersionRecord, PointerRecord, RunRecord, TaskRecord, ViewsRecord,
};
use crate::rules::{ids, validate::FileObservation};
use crate::schema::{
    ACCEPTED, ALL_TABLES, ATTEMPTS, CLEANUP_BATCHES, CLEANUP_PLANS, DIGESTS, Def, EFFECTS, FORMAT_VERSION, GENERATIONS, META,
    META_FORMAT_KEY, META_VIEWS_KEY, POINTERS, RUNS, TASKS, VERSIONS,
};
use crate::store::{ReadOnlyStore, Snapshot, Store, observe};

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
    /// The check failed and redb repaired the file (rebuilt its allocator state); the records
    /// were then walked on the repaired file.
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
            IntegrityCheck::Repaired => writeln!(f, "redb integrity check: FAILED, repaired by redb")?,
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
            write!(f, "{} finding(s):", self.findings.len())?;
            for finding in &self.findings {
                write!(f, "\n  {finding}")?;
            }
            Ok(())
        }
    }
}

impl Store {
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
        let poison = self.poison().clone();
        let integrity = if options.integrity_check {
            let checked = poison.contain("checking the store's integrity", || Ok(self.database_mut().check_integrity()));
            match checked {
                Ok(Ok(true)) => IntegrityCheck::Passed,
                Ok(Ok(false)) => IntegrityCheck::Repaired,
                Ok(Err(DatabaseError::TransactionInProgress)) => {
                    IntegrityCheck::Skipped { reason: "a snapshot or transaction of this handle is alive".into() }
                }
                Ok(Err(DatabaseError::Storage(StorageError::Corrupted(message)))) => IntegrityCheck::Failed { message },
                Ok(Err(err)) => return Err(Error::storage("checking the store's integrity", err)),
                // redb panicked on what it read: that is damage, reported like the rest.
                Err(panic) => IntegrityCheck::Failed { message: panic.to_string() },
            }
        } else {
            IntegrityCheck::Skipped { reason: "not requested".into() }
        };
        let failed = matches!(integrity, IntegrityCheck::Failed { .. });
        let mut report = match self.snapshot() {
            Ok(snapshot) => snapshot.walk_contained(options),
            // After a failed integrity check the file may not even open a read; report that.
            Err(err) if failed || err.is_corruption() => VerifyReport::unreadable(&err),
            Err(err) => return Err(err),
        };
        report.integrity = integrity;
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
        match self.snapshot() {
            Ok(snapshot) => Ok(snapshot.verify(options)),
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
        let mut report = self.walk_contained(options);
        if options.integrity_check {
            report.integrity = IntegrityCheck::Skipped { reason: "a read snapshot cannot run redb's check; use Store::verify".into() };
        }
        report
    }

    /// The walk, at the boundary with redb: a panic inside it is reported as a finding.
    fn walk_contained(&self, options: &VerifyOptions) -> VerifyReport {
        match self.contain("verifying the records", || Ok(self.walk(options))) {
            Ok(report) => report,
            Err(err) => VerifyReport::unreadable(&err),
        }
    }

    fn walk(&self, options: &VerifyOptions) -> VerifyReport {
        let mut walk = Walk {
            report: VerifyReport {
                integrity: IntegrityCheck::Skipped { reason: "not requested".into() },
                records: Vec::new(),
                files_checked: 0,
                findings: Vec::new(),
                notes: Vec::new(),
            },
        };
        let txn = self.txn();
        let tables = walk.decode_all(txn);
        walk.check_references(&tables);
        if let Some(check) = options.files {
            let root = self.staging_root().map(Path::to_path_buf).or_else(|| options.staging_root.clone());
            match root {
                Some(root) => walk.check_files(&tables, &root, check),
                None => walk.report.notes.push("files not checked: no staging root is known (set VerifyOptions::staging_root)".into()),
            }
        }
        if options.views {
            match self.views() {
                Ok(Some(views)) => {
                    let (findings, notes) = crate::views::check(self, &views.root, options.files);
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

/// Every table decoded, keyed by the parsed key fields.
#[derive(Default)]
struct Tables {
    format_seen: bool,
    runs: BTreeMap<(String, String), RunRecord>,
    tasks: BTreeMap<(String, String, String), TaskRecord>,
    attempts: BTreeMap<(String, String, String, u32), AttemptRecord>,
    accepted: BTreeMap<(String, String, String), u32>,
    versions: BTreeMap<(String, String, u64), PartitionVersionRecord>,
    generations: BTreeMap<(String, u64), GenerationRecord>,
    pointers: BTreeMap<String, u64>,
    digests: BTreeMap<(String, String, String), DigestRecord>,
    effects: BTreeMap<(String, String, String, String), EffectRecord>,
}

impl Tables {
    /// The oldest generation of the dataset still recorded (older ones expired).
    fn oldest_generation(&self, dataset: &str) -> Option<u64> {
        self.generations.range((dataset.to_owned(), 0)..=(dataset.to_owned(), u64::MAX)).next().map(|((_, n), _)| *n)
    }

    /// True if generation `number` of the dataset is older than every recorded one, so its
    /// absence is retention's doing, not damage. Retention always keeps the current
    /// generation, so a dataset without any generation has expired nothing.
    fn expired(&self, dataset: &str, number: u64) -> bool {
        self.oldest_generation(dataset).is_some_and(|oldest| number < oldest)
    }
}

struct Walk {
    report: VerifyReport,
}

/// The text fields of a key made only of NUL-joined text fields, if it has exactly `count`.
fn text_fields(key: &[u8], count: usize) -> Option<Vec<String>> {
    let fields: Vec<&[u8]> = key.split(|b| *b == 0).collect();
    if fields.len() != count {
        return None;
    }
    fields.into_iter().map(|f| std::str::from_utf8(f).ok().map(str::to_owned)).collect()
}

/// `count` NUL-joined text fields, a NUL, then a big-endian number of `width` bytes.
fn fields_and_number(key: &[u8], count: usize, width: usize) -> Option<(Vec<String>, u64)> {
    let (head, number) = key.split_at_checked(key.len().checked_sub(width)?)?;
    let (head, nul) = head.split_at_checked(head.len().checked_sub(1)?)?;
    if nul != [0] {
        return None;
    }
    let mut value = 0u64;
    for b in number {
        value = (value << 8) | u64::from(*b);
    }
    Some((text_fields(head, count)?, value))
}

fn take<const N: usize>(fields: Vec<String>) -> Option<[String; N]> {
    fields.try_into().ok()
}

impl Walk {
    fn find(&mut self, table: &'static str, key: impl Into<String>, message: impl Into<String>) {
        self.report.findings.push(Finding { table, key: key.into(), message: message.into() });
    }

    /// Decodes every record of `def`, reporting each one that fails; returns the good ones.
    fn decode_table<R: Checked>(&mut self, txn: &ReadTransaction, def: Def) -> Vec<(Vec<u8>, R)> {
        self.decode_table_where(txn, def, |_| true)
    }

    /// As `decode_table`, for the keys `select` accepts; the others are decoded as a
    /// [`ViewsRecord`] (the one other record type a table holds: `meta_v1`'s `views` key).
    fn decode_table_where<R: Checked>(&mut self, txn: &ReadTransaction, def: Def, select: impl Fn(&[u8]) -> bool) -> Vec<(Vec<u8>, R)> {
        let mut out = Vec::new();
        let mut count = 0u64;
        let table = match txn.open_table(def.def()) {
            Ok(table) => table,
            Err(err) => {
                self.find(def.name, "", format!("table cannot be opened: {err}"));
                self.report.records.push((def.name, 0));
                return out;
            }
        };
        let iter = match table.iter() {
            Ok(iter) => iter,
            Err(err) => {
                self.find(def.name, "", format!("table cannot be read: {err}"));
                self.report.records.push((def.name, 0));
                return out;
            }
        };
        for item in iter {
            let (key, value) = match item {
                Ok(pair) => pair,
                Err(err) => {
                    self.find(def.name, "", format!("reading stopped: {err}"));
                    break;
                }
            };
            count += 1;
            let key = key.value().to_vec();
            if !select(&key) {
                let other = codec::decode::<ViewsRecord>(def.name, &key, value.value());
                match other.map(|r| r.check()) {
                    Ok(Ok(())) => {}
                    Ok(Err(message)) => self.find(def.name, codec::printable_key(&key), format!("inconsistent record: {message}")),
                    Err(Error::Corrupted { detail, .. }) => self.find(def.name, codec::printable_key(&key), detail.to_string()),
                    Err(other) => self.find(def.name, codec::printable_key(&key), other.to_string()),
                }
                continue;
            }
            let decoded = codec::decode::<R>(def.name, &key, value.value()).and_then(|record| match record.check() {
                Ok(()) => Ok(record),
                Err(message) => Err(Error::Corrupted {
                    table: def.name,
                    key: codec::printable_key(&key),
                    detail: crate::Corruption::Inconsistent { message },
                }),
            });
            match decoded {
                Ok(record) => out.push((key, record)),
                Err(Error::Corrupted { detail, .. }) => self.find(def.name, codec::printable_key(&key), detail.to_string()),
                Err(other) => self.find(def.name, codec::printable_key(&key), other.to_string()),
            }
        }
        self.report.records.push((def.name, count));
        out
    }

    fn malformed(&mut self, def: Def, key: &[u8]) {
        self.find(def.name, codec::printable_key(key), "malformed key");
    }

    fn decode_all(&mut self, txn: &ReadTransaction) -> Tables {
        let mut t = Tables::default();
        debug_assert_eq!(ALL_TABLES.len(), 12, "verify walks every table; a new table needs its checks here");
        for (key, record) in self.decode_table_where::<MetaRecord>(txn, META, |k| k != META_VIEWS_KEY) {
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
        for (key, record) in self.decode_table::<RunRecord>(txn, RUNS) {
            match text_fields(&key, 2).and_then(take::<2>) {
                Some([d, r]) => {
                    t.runs.insert((d, r), record);
                }
                None => self.malformed(RUNS, &key),
            }
        }
        for (key, record) in self.decode_table::<TaskRecord>(txn, TASKS) {
            match text_fields(&key, 3).and_then(take::<3>) {
                Some([d, r, p]) => {
                    t.tasks.insert((d, r, p), record);
                }
                None => self.malformed(TASKS, &key),
            }
        }
        for (key, record) in self.decode_table::<AttemptRecord>(txn, ATTEMPTS) {
            match fields_and_number(&key, 3, 4).and_then(|(f, n)| Some((take::<3>(f)?, n))) {
                Some(([d, r, p], n)) => {
                    t.attempts.insert((d, r, p, n as u32), record);
                }
                None => self.malformed(ATTEMPTS, &key),
            }
        }
        for (key, record) in self.decode_table::<AcceptedRecord>(txn, ACCEPTED) {
            match text_fields(&key, 3).and_then(take::<3>) {
                Some([d, r, p]) => {
                    t.accepted.insert((d, r, p), record.attempt);
                }
                None => self.malformed(ACCEPTED, &key),
            }
        }
        for (key, record) in self.decode_table::<PartitionVersionRecord>(txn, VERSIONS) {
            match fields_and_number(&key, 2, 8).and_then(|(f, n)| Some((take::<2>(f)?, n))) {
                Some(([d, p], n)) => {
                    t.versions.insert((d, p, n), record);
                }
                None => self.malformed(VERSIONS, &key),
            }
        }
        for (key, record) in self.decode_table::<GenerationRecord>(txn, GENERATIONS) {
            match fields_and_number(&key, 1, 8).and_then(|(f, n)| Some((take::<1>(f)?, n))) {
                Some(([d], n)) => {
                    t.generations.insert((d, n), record);
                }
                None => self.malformed(GENERATIONS, &key),
            }
        }
        for (key, record) in self.decode_table::<PointerRecord>(txn, POINTERS) {
            match text_fields(&key, 1).and_then(take::<1>) {
                Some([d]) => {
                    t.pointers.insert(d, record.generation);
                }
                None => self.malformed(POINTERS, &key),
            }
        }
        for (key, record) in self.decode_table::<DigestRecord>(txn, DIGESTS) {
            match text_fields(&key, 3).and_then(take::<3>) {
                Some([d, s, p]) => {
                    t.digests.insert((d, s, p), record);
                }
                None => self.malformed(DIGESTS, &key),
            }
        }
        // Cleanup plans and their applied batches refer to paths and attempts that cleanup
        // may since have removed, so only their frames, records and key shapes are checked.
        for (key, _) in self.decode_table::<CleanupPlanRecord>(txn, CLEANUP_PLANS) {
            if key.len() != 8 {
                self.malformed(CLEANUP_PLANS, &key);
            }
        }
        for (key, _) in self.decode_table::<CleanupBatchRecord>(txn, CLEANUP_BATCHES) {
            if key.len() != 12 {
                self.malformed(CLEANUP_BATCHES, &key);
            }
        }
        for (key, record) in self.decode_table::<EffectRecord>(txn, EFFECTS) {
            match text_fields(&key, 4).and_then(take::<4>) {
                Some([d, r, e, p]) => {
                    t.effects.insert((d, r, e, p), record);
                }
                None => self.malformed(EFFECTS, &key),
            }
        }
        t
    }

    fn check_references(&mut self, t: &Tables) {
        let undecodable = self.report.findings.len();
        if undecodable > 0 {
            self.report.notes.push(format!(
                "{undecodable} record(s) could not be decoded; the reference checks below treat them as missing, so some of their \
                 findings may follow from those"
            ));
        }
        self.check_runs_and_tasks(t);
        self.check_attempts_and_accepted(t);
        self.check_generations_and_pointers(t);
        self.check_versions(t);
        self.check_digests_and_effects(t);
    }

    fn check_runs_and_tasks(&mut self, t: &Tables) {
        for ((d, r), run) in &t.runs {
            let key = format!("{d}/{r}");
            let tasks = t.tasks.range((d.clone(), r.clone(), String::new())..).take_while(|((td, tr, _), _)| td == d && tr == r).count();
            if tasks as u64 != run.task_count {
                self.find(RUNS.name, &key, format!("run declares {} tasks but {tasks} are stored", run.task_count));
            }
            if let Some(g) = run.published_generation {
                match t.generations.get(&(d.clone(), g)) {
                    Some(generation) if generation.run == *r && generation.kind == GenerationKind::Publish => {}
                    Some(generation) => {
                        self.find(RUNS.name, &key, format!("run is published as generation {g}, which belongs to run {:?}", generation.run))
                    }
                    None if t.expired(d, g) => {}
                    None => self.find(RUNS.name, &key, format!("run is published as generation {g}, which does not exist")),
                }
            }
        }
        for ((d, r, p), task) in &t.tasks {
            let key = format!("{d}/{r}/{p}");
            if !t.runs.contains_key(&(d.clone(), r.clone())) {
                self.find(TASKS.name, &key, "task of a run that does not exist");
            }
            // Attempts 1..next_attempt were begun; cleanup removes the records of dead ones that
            // nothing references, so some may be missing, but none may lie beyond.
            let beyond: Vec<u32> = t
                .attempts
                .range((d.clone(), r.clone(), p.clone(), task.next_attempt)..=(d.clone(), r.clone(), p.clone(), u32::MAX))
                .map(|((_, _, _, n), _)| *n)
                .collect();
            if !beyond.is_empty() {
                self.find(
                    TASKS.name,
                    &key,
                    format!("task has handed out attempts 1..{} but attempts {beyond:?} are stored", task.next_attempt),
                );
            }
        }
    }

    fn check_attempts_and_accepted(&mut self, t: &Tables) {
        for ((d, r, p, n), attempt) in &t.attempts {
            let key = format!("{d}/{r}/{p}#{n}");
            match t.runs.get(&(d.clone(), r.clone())) {
                None => {
                    self.report.notes.push(format!("attempt {key} belongs to run {d}/{r}, which no longer exists"));
                    continue;
                }
                Some(run) => {
                    if let Some(candidate) = &attempt.candidate
                        && candidate.snapshot != run.snapshot
                    {
                        self.find(
                            ATTEMPTS.name,
                            &key,
                            format!("candidate read snapshot {:?}, the run is pinned to {:?}", candidate.snapshot, run.snapshot),
                        );
                    }
                }
            }
            match ids::staging_rel(d, r, p, *n) {
                Ok(rel) if rel == attempt.staging_rel => {}
                Ok(rel) => {
                    self.find(ATTEMPTS.name, &key, format!("staging directory {:?} is not the attempt's own {rel:?}", attempt.staging_rel))
                }
                Err(err) => self.find(ATTEMPTS.name, &key, format!("no valid staging directory: {err}")),
            }
        }
        for ((d, r, p), accepted) in &t.accepted {
            let key = format!("{d}/{r}/{p}");
            let Some(run) = t.runs.get(&(d.clone(), r.clone())) else {
                self.find(ACCEPTED.name, &key, "accepted attempt of a run that does not exist");
                continue;
            };
            match t.attempts.get(&(d.clone(), r.clone(), p.clone(), *accepted)) {
                Some(AttemptRecord { verdict: Some(Verdict::Valid), .. }) => {}
                Some(_) => self.find(ACCEPTED.name, &key, format!("accepted attempt {accepted} is not validated valid")),
                None => self.find(ACCEPTED.name, &key, format!("accepted attempt {accepted} does not exist")),
            }
            // Once the run is published its accepted attempts are frozen, so a lower attempt
            // validated afterwards does not move it.
            if run.published_generation.is_none() {
                let lowest = self.lowest_valid(t, d, r, p);
                if lowest != Some(*accepted) {
                    self.find(ACCEPTED.name, &key, format!("accepted attempt {accepted}, but the lowest valid attempt is {lowest:?}"));
                }
            }
        }
        for (d, r, p) in t.tasks.keys() {
            if t.accepted.contains_key(&(d.clone(), r.clone(), p.clone())) {
                continue;
            }
            let key = format!("{d}/{r}/{p}");
            let published = t.runs.get(&(d.clone(), r.clone())).and_then(|run| run.published_generation);
            if let Some(g) = published {
                self.find(ACCEPTED.name, &key, format!("task of a run published as generation {g} has no accepted attempt"));
            } else if let Some(lowest) = self.lowest_valid(t, d, r, p) {
                self.find(ACCEPTED.name, &key, format!("attempt {lowest} is valid but the task has no accepted attempt"));
            }
        }
    }

    fn lowest_valid(&self, t: &Tables, d: &str, r: &str, p: &str) -> Option<u32> {
        let (d, r, p) = (d.to_owned(), r.to_owned(), p.to_owned());
        t.attempts
            .range((d.clone(), r.clone(), p.clone(), 0)..=(d, r, p, u32::MAX))
            .find(|(_, a)| matches!(a.verdict, Some(Verdict::Valid)))
            .map(|((_, _, _, n), _)| *n)
    }

    fn check_generations_and_pointers(&mut self, t: &Tables) {
        // Version entries written per (dataset, generation), counted in one pass: comparing
        // each generation with every version entry would be O(generations x versions).
        let mut written_by: HashMap<(&str, u64), u64> = HashMap::new();
        for (d, _, g) in t.versions.keys() {
            *written_by.entry((d.as_str(), *g)).or_default() += 1;
        }
        for ((d, g), generation) in &t.generations {
            let key = format!("{d}/{g}");
            if generation.parent >= *g {
                self.find(GENERATIONS.name, &key, format!("parent generation {} is not older", generation.parent));
            }
            match t.pointers.get(d) {
                Some(pointer) if g <= pointer => {}
                Some(pointer) => self.find(GENERATIONS.name, &key, format!("generation is newer than the pointer's {pointer}")),
                None => self.find(GENERATIONS.name, &key, "generation of a dataset without a pointer"),
            }
            let written = written_by.get(&(d.as_str(), *g)).copied().unwrap_or(0);
            // A publish writes one version entry per task, a rollback one per partition it
            // restores or removes. Expiry drops the removal markers of the oldest retained
            // generation (they hide nothing once every older version is gone), so there fewer
            // entries may remain.
            let oldest = t.oldest_generation(d) == Some(*g);
            let expected = generation.partitions_replaced;
            if (!oldest && written != expected) || (oldest && written > expected) {
                self.find(
                    GENERATIONS.name,
                    &key,
                    format!("generation replaced {} partitions but {written} version entries are stored", generation.partitions_replaced),
                );
            }
            if generation.kind == GenerationKind::Publish {
                match t.runs.get(&(d.clone(), generation.run.clone())) {
                    Some(run) if run.published_generation == Some(*g) => {}
                    Some(run) => self.find(
                        GENERATIONS.name,
                        &key,
                        format!("run {:?} records generation {:?}, not this one", generation.run, run.published_generation),
                    ),
                    None => self
                        .report
                        .notes
                        .push(format!("generation {key} was published by run {:?}, which no longer exists", generation.run)),
                }
            }
        }
        for (d, g) in &t.pointers {
            if !t.generations.contains_key(&(d.clone(), *g)) {
                self.find(POINTERS.name, d, format!("pointer names generation {g}, which does not exist"));
            }
        }
    }

    fn check_versions(&mut self, t: &Tables) {
        for ((d, p, g), version) in &t.versions {
            let key = format!("{d}/{p}@{g}");
            let generation = t.generations.get(&(d.clone(), *g));
            match (generation, t.pointers.get(d)) {
                (_, None) => self.find(VERSIONS.name, &key, "version entry of a dataset without a pointer"),
                (_, Some(pointer)) if g > pointer => self.find(VERSIONS.name, &key, format!("newer than the pointer's {pointer}")),
                (None, _) if t.expired(d, *g) => {}
                (None, _) => self.find(VERSIONS.name, &key, "written by a generation that does not exist"),
                (Some(_), _) => {}
            }
            let Some(entry) = &version.entry else { continue };
            if let Some(generation) = generation
                && generation.kind == GenerationKind::Publish
                && (entry.run != generation.run || entry.snapshot != generation.snapshot)
            {
                self.find(VERSIONS.name, &key, format!("entry of run {:?} written by generation of run {:?}", entry.run, generation.run));
            }
            let task = (d.clone(), entry.run.clone(), p.clone());
            if !t.runs.contains_key(&(d.clone(), entry.run.clone())) {
                self.report.notes.push(format!("version {key}: the records of run {:?} no longer exist", entry.run));
                continue;
            }
            match t.attempts.get(&(d.clone(), entry.run.clone(), p.clone(), entry.attempt)) {
                None => self.find(VERSIONS.name, &key, format!("attempt {} of run {:?} does not exist", entry.attempt, entry.run)),
                Some(attempt) => {
                    if attempt.verdict != Some(Verdict::Valid) {
                        self.find(VERSIONS.name, &key, format!("attempt {} is not validated valid", entry.attempt));
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
                        self.find(VERSIONS.name, &key, format!("entry differs from attempt {}'s candidate", entry.attempt));
                    }
                }
            }
            match t.accepted.get(&task) {
                Some(accepted) if *accepted == entry.attempt => {}
                other => {
                    self.find(VERSIONS.name, &key, format!("holds attempt {}, the task's accepted attempt is {other:?}", entry.attempt))
                }
            }
        }
    }

    fn check_digests_and_effects(&mut self, t: &Tables) {
        for ((d, s, p), digest) in &t.digests {
            let key = format!("{d}/{s}/{p}");
            match t.runs.get(&(d.clone(), digest.run.clone())) {
                Some(run) if run.published_generation == Some(digest.generation) && run.snapshot == *s => {}
                Some(_) => self.find(
                    DIGESTS.name,
                    &key,
                    format!("run {:?} did not publish snapshot {s:?} in generation {}", digest.run, digest.generation),
                ),
                None => self.report.notes.push(format!("digest {key}: run {:?} no longer exists", digest.run)),
            }
        }
        for ((d, r, e, p), effect) in &t.effects {
            let key = format!("{d}/{r}/{e}/{p}");
            let Some(run) = t.runs.get(&(d.clone(), r.clone())) else {
                self.find(EFFECTS.name, &key, "side effect of a run that does not exist");
                continue;
            };
            if !p.is_empty() && !t.tasks.contains_key(&(d.clone(), r.clone(), p.clone())) {
                self.find(EFFECTS.name, &key, "side effect of a partition the run does not declare");
            }
            let consistent = match (&effect.status, run.published_generation) {
                (EffectStatus::Recorded, None) => true,
                (EffectStatus::Ready { generation } | EffectStatus::Emitted { generation, .. }, Some(g)) => *generation == g,
                _ => false,
            };
            if !consistent {
                self.find(
                    EFFECTS.name,
                    &key,
                    format!("status {:?} contradicts the run's published generation {:?}", effect.status, run.published_generation),
                );
            }
        }
    }

    /// Checks every file referenced by a retained generation once.
    ///
    /// A version entry (p, v) is visible in generation g when v <= g and the partition's next
    /// version is above g; so it is referenced by a retained generation when some stored
    /// generation lies in [v, next version). One pass over the versions, each with one range
    /// lookup in the dataset's generations: O(V log G), not O(G x V).
    fn check_files(&mut self, t: &Tables, root: &Path, check: FileCheck) {
        let mut referenced: BTreeSet<(String, String, u64, u32)> = BTreeSet::new();
        let mut versions = t.versions.iter().peekable();
        while let Some(((d, p, v), version)) = versions.next() {
            let next = match versions.peek() {
                Some(((nd, np, nv), _)) if nd == d && np == p => *nv,
                _ => u64::MAX,
            };
            let visible = t.generations.range((d.clone(), *v)..(d.clone(), next)).next().is_some()
                || (next == u64::MAX && t.generations.contains_key(&(d.clone(), u64::MAX)));
            if !visible {
                continue;
            }
            if let Some(entry) = &version.entry {
                for file in &entry.files {
                    referenced.insert((entry.staging_rel.clone(), file.path.clone(), file.size_bytes, file.crc32));
                }
            }
        }
        for (staging_rel, path, size_bytes, crc32) in referenced {
            let file = FileEntry { path, size_bytes, crc32 };
            self.report.files_checked += 1;
            let key = format!("{staging_rel}/{}", file.path);
            let message = match observe(&root.join(&staging_rel), &file, check) {
                FileObservation::Missing => Some("file is missing or not a regular file".to_owned()),
                FileObservation::Unreadable(message) => Some(format!("file is unreadable: {message}")),
                FileObservation::Present { size_bytes, .. } if size_bytes != file.size_bytes => {
                    Some(format!("file has {size_bytes} bytes, recorded {}", file.size_bytes))
                }
                FileObservation::Present { crc32: Some(crc32), .. } if crc32 != file.crc32 => {
                    Some(format!("file has crc32 {crc32:#010x}, recorded {:#010x}", file.crc32))
                }
                FileObservation::Present { .. } => None,
            };
            if let Some(message) = message {
                self.find("files", key, message);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_into_fields_and_numbers() {
        let key = crate::schema::key_u32(&["ds", "run", "a/b"], 7);
        assert_eq!(fields_and_number(&key, 3, 4), Some((vec!["ds".into(), "run".into(), "a/b".into()], 7)));
        // A number whose bytes contain NUL does not confuse the split.
        let key = crate::schema::key_u64(&["ds", "p"], 256);
        assert_eq!(fields_and_number(&key, 2, 8), Some((vec!["ds".into(), "p".into()], 256)));
        assert_eq!(fields_and_number(b"short", 2, 8), None);
        assert_eq!(text_fields(b"a\0b", 3), None);
        assert_eq!(text_fields(b"a\0\0", 3), Some(vec!["a".into(), String::new(), String::new()]));
    }
}

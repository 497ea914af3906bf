//! Checking views against the store: the damage a sync rebuilds, and verify's view check.

use std::collections::BTreeSet;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use rustix::fs::{CWD, FileType, Mode, OFlags};

use super::dirs::{dir_flags, errno, list_names, open_dir_at, open_dirs, split_parent, stat_kind, walk_view};
use super::manifest::read_manifest_at;
use super::{Generations, ViewManifest, ViewMode, Views};
use crate::model::{FileCheck, Manifest};
use crate::rules::views::{self as rule, ViewPlan};

impl Views {
    /// What is wrong with view `v<n>` as found on disk, if anything: its manifest missing,
    /// empty, unparseable or not this generation's; with `walk`, a file missing, of the wrong
    /// size or kind, or anything extra.
    pub(super) fn damage(&self, ds: BorrowedFd<'_>, n: u64, plan: &ViewPlan, manifest: &Manifest, walk: bool) -> Option<String> {
        let name = rule::view_name(n);
        let view = match open_dir_at(ds, &name) {
            Ok(fd) => fd,
            Err(e) => return Some(format!("{name} cannot be opened: {e}")),
        };
        match read_manifest_at(view.as_fd()) {
            Ok(doc) => {
                let expected = ViewManifest::of(manifest, self.mode);
                if doc.dataset != expected.dataset || doc.generation != n || doc.partitions != expected.partitions {
                    return Some(format!("{name}/{} does not describe generation {n}", rule::MANIFEST_FILE));
                }
            }
            Err(reason) => return Some(format!("{name}/{}: {reason}", rule::MANIFEST_FILE)),
        }
        if !walk {
            return None;
        }
        match walk_view(view.as_fd()) {
            Ok(found) => rule::diff(plan, &found).into_iter().next().map(|(path, message)| format!("{name}/{path}: {message}")),
            Err(e) => Some(format!("{name} cannot be walked: {e}")),
        }
    }
}

fn crc_at(base: BorrowedFd<'_>, rel: &str) -> io::Result<u32> {
    let (dir_rel, name) = split_parent(rel);
    let dir = open_dirs(base, dir_rel)?;
    let fd = rustix::fs::openat(&dir, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).map_err(errno)?;
    let mut file = std::fs::File::from(fd);
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(hasher.finalize());
        }
        hasher.update(&buf[..n]);
    }
}

/// Verify's view check: every dataset's `current` names its current generation's view, every
/// view present is of a generation the store holds and matches it exactly (no missing link,
/// no extra file, sizes and, with checksums, CRC32s as recorded, a manifest that agrees).
/// Returns `(path, message)` findings and notes.
pub(crate) fn check(
    source: &dyn Generations,
    root: &Path,
    trees: &crate::ViewTrees,
    files: Option<FileCheck>,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut findings = Vec::new();
    let mut notes = Vec::new();
    let root_fd = match rustix::fs::openat(CWD, root, dir_flags(), Mode::empty()) {
        Ok(fd) => fd,
        Err(e) => {
            findings.push((root.display().to_string(), format!("the view root cannot be opened: {}", errno(e))));
            return (findings, notes);
        }
    };
    let datasets = match source.dataset_names() {
        Ok(d) => d,
        Err(e) => {
            findings.push((root.display().to_string(), format!("datasets cannot be listed: {e}")));
            return (findings, notes);
        }
    };
    for dataset in &datasets {
        let base = root.join(dataset);
        let here = |rel: &str| base.join(rel).display().to_string();
        let Ok(Some(current)) = source.current_number(dataset) else { continue };
        let ds = match open_dir_at(root_fd.as_fd(), dataset) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                findings.push((here(""), format!("no view directory; generation {current} has no view (run `manifestdb view sync`)")));
                continue;
            }
            Err(e) => {
                findings.push((here(""), format!("cannot be opened as a directory: {e}")));
                continue;
            }
        };
        if !matches!(stat_kind(ds.as_fd(), rule::MARKER), Ok((FileType::RegularFile, _))) {
            findings.push((here(rule::MARKER), "missing: the directory is not marked as a manifestdb view".into()));
        }
        let stored: BTreeSet<u64> = source.stored_numbers(dataset).unwrap_or_default();
        let with_trees = trees.includes(dataset);
        match rustix::fs::readlinkat(ds.as_fd(), rule::CURRENT, Vec::new()) {
            Ok(_) | Err(rustix::io::Errno::INVAL) if !with_trees => findings.push((
                here(rule::CURRENT),
                "exists, but the dataset has no directory trees (the store's choice): a reader of it reads a generation the store \
                 no longer publishes there (run `manifestdb view sync`, which removes it)"
                    .into(),
            )),
            Err(rustix::io::Errno::NOENT) if !with_trees => {}
            Ok(target) => {
                let target = target.to_string_lossy().into_owned();
                match rule::parse_view_name(&target) {
                    Some(n) if n == current => {}
                    Some(n) if stored.contains(&n) => findings.push((
                        here(rule::CURRENT),
                        format!("names v{n}, but the store's current generation is {current} (the view lags: run `manifestdb view sync`)"),
                    )),
                    Some(n) => findings.push((here(rule::CURRENT), format!("names v{n}, a generation the store does not hold"))),
                    None => findings.push((here(rule::CURRENT), format!("is a symlink to {target:?}, not to a view"))),
                }
                if rule::parse_view_name(&target).is_some() && stat_kind(ds.as_fd(), &target).is_err() {
                    findings.push((here(rule::CURRENT), format!("names {target}, which does not exist")));
                }
            }
            Err(rustix::io::Errno::NOENT) => findings.push((here(rule::CURRENT), "missing (run `manifestdb view sync`)".into())),
            Err(e) => findings.push((here(rule::CURRENT), format!("is not a readable symlink: {}", errno(e)))),
        }
        #[cfg(feature = "delta")]
        check_table(source, dataset, &base, ds.as_fd(), current, &stored, &mut findings, &mut notes);
        let names = match list_names(ds.as_fd()) {
            Ok(names) => names,
            Err(e) => {
                findings.push((here(""), format!("cannot be listed: {e}")));
                continue;
            }
        };
        for name in names {
            if rule::is_leftover(&name) {
                notes.push(format!("{}: left by an interrupted view build or removal; the next view sync removes it", here(&name)));
                continue;
            }
            let Some(n) = rule::parse_view_name(&name) else {
                if name != rule::MARKER && name != rule::CURRENT && name != crate::rules::delta::TABLE_DIR {
                    notes.push(format!("{}: not a view; left alone", here(&name)));
                }
                continue;
            };
            if !stored.contains(&n) {
                findings.push((
                    here(&name),
                    format!("view of generation {n}, which the store no longer holds (expired); view sync removes it"),
                ));
                continue;
            }
            if !with_trees {
                findings.push((here(&name), "a directory tree of a dataset without directory trees; view sync removes it".into()));
                continue;
            }
            let manifest = match source.generation_manifest(dataset, Some(n)) {
                Ok(Some(m)) => m,
                Ok(None) => continue,
                Err(e) => {
                    findings.push((here(&name), format!("generation {n} cannot be read: {e}")));
                    continue;
                }
            };
            let plan = match rule::plan(&manifest) {
                Ok(plan) => plan,
                Err(r) => {
                    findings.push((here(&name), format!("generation {n} cannot be placed in a view: {}: {}", r.path, r.reason)));
                    continue;
                }
            };
            let view = match open_dir_at(ds.as_fd(), &name) {
                Ok(fd) => fd,
                Err(e) => {
                    findings.push((here(&name), format!("cannot be opened: {e}")));
                    continue;
                }
            };
            match walk_view(view.as_fd()) {
                Ok(found) => {
                    for (path, message) in rule::diff(&plan, &found) {
                        findings.push((here(&format!("{name}/{path}")), message));
                    }
                }
                Err(e) => findings.push((here(&name), format!("cannot be walked: {e}"))),
            }
            if files == Some(FileCheck::SizeAndChecksum) {
                for file in &plan.files {
                    match crc_at(view.as_fd(), &file.rel) {
                        Ok(crc) if crc == file.crc32 => {}
                        Ok(crc) => findings.push((
                            here(&format!("{name}/{}", file.rel)),
                            format!("has crc32 {crc:#010x}, the generation records {:#010x}", file.crc32),
                        )),
                        // Missing files are already reported by the diff.
                        Err(_) => {}
                    }
                }
            }
            let manifest_path = base.join(&name).join(rule::MANIFEST_FILE);
            match ViewManifest::read(&manifest_path) {
                Ok(doc) if doc.generation == n && doc.dataset == *dataset => {
                    let expected = ViewManifest::of(&manifest, ViewMode::HardLink);
                    if doc.partitions != expected.partitions {
                        findings
                            .push((manifest_path.display().to_string(), format!("does not list generation {n}'s partitions and files")));
                    }
                }
                Ok(doc) => findings.push((
                    manifest_path.display().to_string(),
                    format!("describes generation {} of {:?}, not {n} of {dataset:?}", doc.generation, doc.dataset),
                )),
                Err(e) => findings.push((manifest_path.display().to_string(), e.to_string())),
            }
        }
    }
    (findings, notes)
}

/// Verify's table check of a Parquet dataset's Delta table, read from its log: every commit
/// readable, the latest version holding the store's current generation, each other writer's
/// version a finding (reported, never absorbed), every data file a retained generation names
/// present with its size (another writer's `vacuum` may have removed it).
#[cfg(feature = "delta")]
#[allow(clippy::too_many_arguments)] // reason: one dataset's handles and the report being made
fn check_table(
    source: &dyn Generations,
    dataset: &str,
    base: &Path,
    ds: BorrowedFd<'_>,
    current: u64,
    stored: &BTreeSet<u64>,
    findings: &mut Vec<(String, String)>,
    notes: &mut Vec<String>,
) {
    use crate::rules::delta as table_rule;
    let Ok(Some(manifest)) = source.generation_manifest(dataset, None) else { return };
    match Views::not_a_table(source, dataset, &manifest) {
        Ok(None) => {}
        _ => return,
    }
    let base = &base.join(table_rule::TABLE_DIR);
    let log_path = base.join(table_rule::LOG_DIR);
    let table_dir = match open_dir_at(ds, table_rule::TABLE_DIR) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            findings.push((
                base.display().to_string(),
                "missing: the Parquet dataset has no Delta table in this layout yet (run `manifestdb view sync`)".into(),
            ));
            return;
        }
        Err(e) => {
            findings.push((base.display().to_string(), format!("cannot be opened: {e}")));
            return;
        }
    };
    let ds = table_dir.as_fd();
    let read = match super::log::read_log(ds, super::log::Scope::All) {
        Ok(Some(read)) => read,
        Ok(None) => {
            findings.push((
                log_path.display().to_string(),
                "missing: the Parquet dataset has no Delta table yet (run `manifestdb view sync`)".into(),
            ));
            return;
        }
        Err(e) => {
            findings.push((log_path.display().to_string(), format!("cannot be read: {e}")));
            return;
        }
    };
    for name in read.temporaries() {
        notes
            .push(format!("{}: a writer's temporary file (left by a crash); the next view sync removes it", log_path.join(name).display()));
    }
    findings.extend(log_findings(
        &read,
        &log_path.display().to_string(),
        |v| log_path.join(format!("{v:020}.json")).display().to_string(),
        current,
        "; `manifestdb view sync` cuts the log back and commits again",
    ));
    let data = match open_dir_at(ds, table_rule::DATA_DIR) {
        Ok(fd) => fd,
        Err(e) => {
            findings.push((base.join(table_rule::DATA_DIR).display().to_string(), format!("cannot be opened: {e}")));
            return;
        }
    };
    for &n in stored {
        let Ok(Some(m)) = source.generation_manifest(dataset, Some(n)) else { continue };
        let Ok(plan) = rule::plan(&m) else { continue };
        for file in &plan.files {
            let (dir_rel, name) = split_parent(&file.rel);
            let ok = open_dirs(data.as_fd(), dir_rel)
                .ok()
                .and_then(|dir| stat_kind(dir.as_fd(), name).ok())
                .is_some_and(|(kind, st)| kind == FileType::RegularFile && u64::try_from(st.st_size).ok() == Some(file.size_bytes));
            if !ok {
                findings.push((
                    base.join(table_rule::data_rel(&file.rel)).display().to_string(),
                    format!(
                        "named by generation {n} but missing or not of its {} bytes (another writer's vacuum?); `manifestdb view sync` \
                         places it again from staging",
                        file.size_bytes
                    ),
                ));
            }
        }
    }
}

/// What a table's log gives `verify`, as (where, what) findings: each damaged commit (its
/// reason, then `damaged_then`: what repairs it), each other writer's commit, and a latest
/// version that does not hold the store's `current` generation. `log` names the log, `at(v)`
/// version `v`'s commit.
#[cfg(feature = "delta")]
pub(crate) fn log_findings(
    read: &super::log::LogRead,
    log: &str,
    at: impl Fn(u64) -> String,
    current: u64,
    damaged_then: &str,
) -> Vec<(String, String)> {
    let mut findings = Vec::new();
    for (&v, commit) in &read.log {
        match commit {
            crate::rules::delta::Commit::Damaged { reason } => findings.push((at(v), format!("version {v} {reason}{damaged_then}"))),
            crate::rules::delta::Commit::Foreign { operation, engine } => findings.push((
                at(v),
                format!(
                    "version {v} was committed by another writer ({}, {}); the store commits its generation's exact files on top",
                    operation.as_deref().unwrap_or("no operation recorded"),
                    engine.as_deref().unwrap_or("no engine recorded")
                ),
            )),
            crate::rules::delta::Commit::Ours { .. } => {}
        }
    }
    let latest_generation = read.latest.and_then(|v| match read.log.get(&v) {
        Some(crate::rules::delta::Commit::Ours { generation }) => Some(*generation),
        _ => None,
    });
    if latest_generation != Some(current) {
        findings.push((
            log.to_owned(),
            format!(
                "the latest version ({}) holds {}, not the store's current generation {current} (the table lags: run `manifestdb view sync`)",
                read.latest.map_or("none".to_owned(), |v| v.to_string()),
                latest_generation.map_or("no generation of the store".to_owned(), |g| format!("generation {g}"))
            ),
        ));
    }
    findings
}

//! The Delta log as it is on disk, read without the kernel: which versions exist, which
//! generation each of the store's commits holds (its `txn`), which are another writer's, which
//! are damaged. `crate::rules::delta` decides what each name and text means; this module only
//! lists `_delta_log` and reads commit files (through a directory handle, never following a
//! symlink). Read by the sync (what to commit, what to repair), by verify and by
//! `view --json` (the version of a generation is read from the log, never computed).

// Without the `delta` feature only `view --json` reads the log (the sync writes no table).
#![cfg_attr(not(feature = "delta"), allow(dead_code))]

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use rustix::fs::{CWD, FileType, Mode, OFlags};

use super::dirs::{dir_flags, errno, list_entries, open_dir_at};
use crate::rules::delta::{self as table_rule, Commit, Log, LogName};

/// How much of the log to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// From the newest commit back to the newest of the store's own (right after a publish:
    /// what to commit next, nothing more).
    Newest,
    /// Every commit present.
    All,
}

/// The log as read.
#[derive(Debug, Default)]
pub(crate) struct LogRead {
    /// The commits read, by version.
    pub(crate) log: Log,
    /// Every name in `_delta_log`.
    pub(crate) names: Vec<String>,
    /// The newest version with a commit or checkpoint present: the table's latest version as a
    /// reader lists it.
    pub(crate) latest: Option<u64>,
    /// The version `_last_checkpoint` names (`Some(None)`: present but unreadable).
    pub(crate) last_checkpoint: Option<Option<u64>>,
}

impl LogRead {
    /// Writers' temporary files (staged uploads left by a crash).
    pub(crate) fn temporaries(&self) -> impl Iterator<Item = &String> {
        self.names.iter().filter(|n| table_rule::log_name(n) == LogName::Temporary)
    }

    /// Whether the log's newest version is one of the store's commits.
    pub(crate) fn latest_is_ours(&self) -> bool {
        self.latest.is_some_and(|v| matches!(self.log.get(&v), Some(Commit::Ours { .. })))
    }
}

/// Reads `<table>/_delta_log` (`None` if there is none).
pub(crate) fn read_table_log(table: &Path, scope: Scope) -> io::Result<Option<LogRead>> {
    let table_fd = match rustix::fs::openat(CWD, table, dir_flags(), Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(errno(e)),
    };
    read_log(table_fd.as_fd(), scope)
}

/// Every name in `_delta_log` under the table directory `table`, sorted (`None` if there is no
/// log), as [`LogRead::names`] holds them.
pub(crate) fn log_names(table: BorrowedFd<'_>) -> io::Result<Option<Vec<String>>> {
    let log = match open_dir_at(table, table_rule::LOG_DIR) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut names: Vec<String> = list_entries(log.as_fd())?.into_iter().map(|(name, _)| name).collect();
    names.sort();
    Ok(Some(names))
}

/// Reads `_delta_log` under the table directory `table` (`None` if there is none).
pub(crate) fn read_log(table: BorrowedFd<'_>, scope: Scope) -> io::Result<Option<LogRead>> {
    let log = match open_dir_at(table, table_rule::LOG_DIR) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut out = LogRead::default();
    let mut commits = Vec::new();
    for (name, kind) in list_entries(log.as_fd())? {
        match table_rule::log_name(&name) {
            LogName::Commit(v) if kind == FileType::RegularFile => {
                commits.push(v);
                out.latest = out.latest.max(Some(v));
            }
            LogName::Checkpoint(v) => out.latest = out.latest.max(Some(v)),
            LogName::LastCheckpoint => {
                out.last_checkpoint = Some(
                    read_text(log.as_fd(), &name)
                        .ok()
                        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                        .and_then(|doc| doc.get("version").and_then(serde_json::Value::as_u64)),
                );
            }
            _ => {}
        }
        out.names.push(name);
    }
    out.names.sort();
    commits.sort_unstable();
    for &v in commits.iter().rev() {
        let commit = match read_text(log.as_fd(), &format!("{v:020}.json")) {
            Ok(text) => table_rule::read_commit(&text),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => Commit::Damaged { reason: "is not UTF-8 text".into() },
            Err(e) => return Err(e),
        };
        let ours = matches!(commit, Commit::Ours { .. });
        out.log.insert(v, commit);
        if ours && scope == Scope::Newest {
            break;
        }
    }
    Ok(Some(out))
}

pub(crate) fn read_text(dir: BorrowedFd<'_>, name: &str) -> io::Result<String> {
    let fd = rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).map_err(errno)?;
    let mut text = String::new();
    std::fs::File::from(fd).read_to_string(&mut text)?;
    Ok(text)
}

/// The oldest version holding a generation in `stored` (one of the store's commits), read
/// from the oldest commit up: the first version the store's retention keeps.
pub(crate) fn first_holding(table: BorrowedFd<'_>, stored: &std::collections::BTreeSet<u64>) -> io::Result<Option<u64>> {
    let log = match open_dir_at(table, table_rule::LOG_DIR) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut commits: Vec<u64> = list_entries(log.as_fd())?
        .into_iter()
        .filter_map(|(name, kind)| match table_rule::log_name(&name) {
            LogName::Commit(v) if kind == FileType::RegularFile => Some(v),
            _ => None,
        })
        .collect();
    commits.sort_unstable();
    for v in commits {
        let Ok(generation) = commit_generation(log.as_fd(), &format!("{v:020}.json")) else { continue };
        if generation.is_some_and(|g| stored.contains(&g)) {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// A commit larger than this is first read by its ends only (see [`commit_generation`]).
const ENDS_READ_OVER: u64 = 256 * 1024;

/// The generation a commit of the store's holds (`None`: not one of the store's, or damaged).
/// A large commit (the first of a big table holds one `add` per file) is read by its first
/// line (`commitInfo`) and its last [`ENDS_READ_OVER`] bytes, where the kernel writes the `txn`
/// action after the `add`s; only if those do not make it the store's is it read whole. So the
/// retention's look at the oldest commit costs what the commit's ends cost, not the table.
fn commit_generation(log: BorrowedFd<'_>, name: &str) -> io::Result<Option<u64>> {
    use std::io::{BufRead, Seek, SeekFrom};
    let fd = rustix::fs::openat(log, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).map_err(errno)?;
    let mut file = std::fs::File::from(fd);
    let size = file.metadata()?.len();
    let ours = |text: &str| match table_rule::read_commit(text) {
        Commit::Ours { generation } => Some(generation),
        _ => None,
    };
    if size > 2 * ENDS_READ_OVER {
        let mut first = String::new();
        io::BufReader::new((&mut file).take(ENDS_READ_OVER)).read_line(&mut first)?;
        file.seek(SeekFrom::Start(size - ENDS_READ_OVER))?;
        let mut tail = Vec::new();
        (&mut file).take(ENDS_READ_OVER).read_to_end(&mut tail)?;
        // The tail's first line is cut where the read began: only whole lines after it count.
        let whole = tail.iter().position(|&b| b == b'\n').map_or(&[][..], |i| &tail[i + 1..]);
        if first.ends_with('\n')
            && let Ok(tail) = std::str::from_utf8(whole)
            && let Some(generation) = ours(&format!("{first}{tail}"))
        {
            return Ok(Some(generation));
        }
        file.seek(SeekFrom::Start(0))?;
    }
    let mut text = String::new();
    match file.read_to_string(&mut text) {
        Ok(_) => Ok(ours(&text)),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(action: &str, i: usize) -> String {
        format!(
            "{{\"{action}\":{{\"path\":\"data/region={i:06}/g1-a1-part-0.parquet\",\"partitionValues\":{{\"region\":\"{i:06}\"}},\"size\":1908,\"dataChange\":true}}}}\n"
        )
    }

    #[test]
    fn a_large_commit_is_read_by_its_ends_and_whole_only_when_they_do_not_tell() {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("manifestdb-commit-ends-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("making the directory");
        let info = "{\"commitInfo\":{\"timestamp\":1,\"operation\":\"WRITE\",\"engineInfo\":\"manifestdb/0\"}}\n";
        let txn = |g: u64| format!("{{\"txn\":{{\"appId\":\"manifestdb\",\"version\":{g},\"lastUpdated\":1}}}}\n");
        let many = |action: &str| (0..8_000).map(|i| line(action, i)).collect::<String>();
        // The kernel's order: adds, then txn (a first commit of a big table).
        std::fs::write(dir.join("a.json"), format!("{info}{}{}", many("add"), txn(7))).expect("writing");
        // A txn before many removes (its ends do not tell): read whole.
        std::fs::write(dir.join("b.json"), format!("{info}{}{}", txn(8), many("remove"))).expect("writing");
        // Another writer's commit: no txn of the store's.
        std::fs::write(dir.join("c.json"), format!("{info}{}", many("add"))).expect("writing");
        assert!(std::fs::metadata(dir.join("a.json")).map(|m| m.len()).unwrap_or(0) > 2 * ENDS_READ_OVER);
        let fd = rustix::fs::openat(CWD, &dir, dir_flags(), Mode::empty()).expect("opening the directory");
        assert_eq!(commit_generation(fd.as_fd(), "a.json").expect("reading a"), Some(7));
        assert_eq!(commit_generation(fd.as_fd(), "b.json").expect("reading b"), Some(8));
        assert_eq!(commit_generation(fd.as_fd(), "c.json").expect("reading c"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

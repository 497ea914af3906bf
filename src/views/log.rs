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

fn read_text(dir: BorrowedFd<'_>, name: &str) -> io::Result<String> {
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
        let Ok(text) = read_text(log.as_fd(), &format!("{v:020}.json")) else { continue };
        if matches!(table_rule::read_commit(&text), Commit::Ours { generation } if stored.contains(&generation)) {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

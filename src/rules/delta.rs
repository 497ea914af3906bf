//! The Delta table of a Parquet dataset's views, as pure rules over plain values: what a log
//! entry's name and a commit's text say (which generation a version holds, by the `txn` action
//! with app id `manifestdb` each of the store's commits carries; a version without it is a
//! foreign writer's), which generations to commit, which version a damaged log is cut back to,
//! the hive partition values of a partition key, where a view file lives in the table's data
//! directory, which log entries and data files the store's retention lets go.
//!
//! The version of a generation is read from the log, never computed: other writers (delta-rs
//! appends, `vacuum`'s `VACUUM START`/`END` commits, `optimize`) take version numbers too.

// Without the `delta` feature only the directory names are used (the views leave them alone).
#![cfg_attr(not(feature = "delta"), allow(dead_code))]

use std::collections::{BTreeMap, BTreeSet};

/// The Delta table's own directory inside the dataset's view directory
/// (`<views>/<dataset>/table`): it holds only what a Delta table holds (`_delta_log/` and the
/// data files), so Delta's own maintenance (`vacuum`, lite or full, at any retention) never
/// meets a view file, and no glob over a view reaches a log or checkpoint file. The
/// directory views and `current` live beside it.
pub(crate) const TABLE_DIR: &str = "table";

/// The directory a migration from the layout before [`TABLE_DIR`] (the log and the data
/// directory right in the dataset's directory) gathers them in before it is renamed to
/// [`TABLE_DIR`]; a crash part way leaves it, and the next sync finishes the move.
pub(crate) const TABLE_MOVING: &str = ".table-moving";

/// The table's data directory, inside [`TABLE_DIR`]: one hard link (or copy)
/// per partition version any retained generation names, at the same relative path as in a view
/// (`data/<partition>/g<S>-a<A>-<file>`), so a path names one content for as long as it exists.
pub(crate) const DATA_DIR: &str = "data";

/// The Delta log directory.
pub(crate) const LOG_DIR: &str = "_delta_log";

/// The application id of the store's `txn` action: its version is the generation a commit holds.
pub(crate) const APP_ID: &str = "manifestdb";

/// What a name in `_delta_log` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogName {
    /// `<20 digits>.json`: the commit of a version.
    Commit(u64),
    /// `<20 digits>.checkpoint.parquet` (or a part or v2 checkpoint of that version).
    Checkpoint(u64),
    /// Another entry of a version (`<20 digits>.crc`, ...).
    OfVersion(u64),
    /// `_last_checkpoint`.
    LastCheckpoint,
    /// A temporary file of a writer: the object store's staged upload (`<name>#<n>`), a
    /// `.tmp` file. Never a version; removed by the next sync.
    Temporary,
    /// Anything else (left alone).
    Other,
}

/// What the log entry `name` is.
pub(crate) fn log_name(name: &str) -> LogName {
    if name.contains('#') || name.ends_with(".tmp") || name.starts_with('.') {
        return LogName::Temporary;
    }
    if name == "_last_checkpoint" {
        return LogName::LastCheckpoint;
    }
    let Some(version) = log_entry_version(name) else { return LogName::Other };
    let rest = &name[20..];
    if rest == ".json" {
        LogName::Commit(version)
    } else if rest.starts_with(".checkpoint.") {
        LogName::Checkpoint(version)
    } else {
        LogName::OfVersion(version)
    }
}

/// What one commit file says, as far as the store needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Commit {
    /// One of the store's commits: it holds generation `generation` exactly.
    Ours { generation: u64 },
    /// Another writer's commit (`operation` and `engine` from its `commitInfo`, if any).
    Foreign { operation: Option<String>, engine: Option<String> },
    /// Empty, cut short or not a Delta commit: `reason` says how.
    Damaged { reason: String },
}

/// Reads a commit file's text: every line one JSON object with one action; the store's own
/// commits carry `{"txn": {"appId": "manifestdb", "version": <generation>}}`.
pub(crate) fn read_commit(text: &str) -> Commit {
    if text.trim().is_empty() {
        return Commit::Damaged { reason: "is empty".into() };
    }
    let (mut generation, mut operation, mut engine) = (None, None, None);
    let count = text.lines().count();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        // Only the actions the store reads, and the last line (where a cut falls), are parsed
        // whole: a first commit holds one `add` per file of the dataset.
        let whole = i + 1 == count || line.starts_with("{\"txn\"") || line.starts_with("{\"commitInfo\"");
        if !whole {
            if !(line.starts_with("{\"") && line.ends_with('}')) {
                return Commit::Damaged { reason: format!("line {} is not one Delta action", i + 1) };
            }
            continue;
        }
        let action: serde_json::Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) if i + 1 == count => return Commit::Damaged { reason: format!("is cut short (its last line is not JSON: {e})") },
            Err(e) => return Commit::Damaged { reason: format!("line {} is not JSON: {e}", i + 1) },
        };
        let Some(object) = action.as_object().filter(|o| o.len() == 1) else {
            return Commit::Damaged { reason: format!("line {} is not one Delta action", i + 1) };
        };
        if let Some(txn) = object.get("txn")
            && txn.get("appId").and_then(|a| a.as_str()) == Some(APP_ID)
        {
            generation = txn.get("version").and_then(serde_json::Value::as_u64);
        }
        if let Some(info) = object.get("commitInfo") {
            operation = info.get("operation").and_then(|o| o.as_str()).map(str::to_owned);
            engine = info.get("engineInfo").and_then(|o| o.as_str()).map(str::to_owned);
        }
    }
    match generation {
        Some(generation) => Commit::Ours { generation },
        None => Commit::Foreign { operation, engine },
    }
}

/// The log as read: each commit present, by version.
pub(crate) type Log = BTreeMap<u64, Commit>;

/// The first version (lowest) whose commit is damaged: the log is cut back to before it.
pub(crate) fn first_damaged(log: &Log) -> Option<u64> {
    log.iter().find(|(_, c)| matches!(c, Commit::Damaged { .. })).map(|(v, _)| *v)
}

/// The newest of the store's commits: `(version, generation)`.
pub(crate) fn last_ours(log: &Log) -> Option<(u64, u64)> {
    log.iter().rev().find_map(|(v, c)| match c {
        Commit::Ours { generation } => Some((*v, *generation)),
        _ => None,
    })
}

/// The version that holds generation `generation` (the newest, if it was committed again to
/// restore it over a foreign commit).
pub(crate) fn version_of(log: &Log, generation: u64) -> Option<u64> {
    log.iter().rev().find_map(|(v, c)| matches!(c, Commit::Ours { generation: g } if *g == generation).then_some(*v))
}

/// The versions other writers committed, oldest first.
pub(crate) fn foreign_versions(log: &Log) -> Vec<u64> {
    log.iter().filter(|(_, c)| matches!(c, Commit::Foreign { .. })).map(|(v, _)| *v).collect()
}

/// The generations to commit, in order, to a table whose newest own commit holds
/// `last_generation` (`None`: none yet) and whose latest version is `latest_is_ours` (`false`:
/// another writer's commit is on top), for a store holding `stored` with current generation
/// `current`: every held generation after `last_generation`; if there is none but the table's
/// latest version is not the current generation's (a foreign commit on top, or a table ahead
/// of a store restored from an older copy), the current generation again, so the latest
/// version always holds exactly the store's current generation.
pub(crate) fn generations_to_commit(last_generation: Option<u64>, latest_is_ours: bool, stored: &BTreeSet<u64>, current: u64) -> Vec<u64> {
    let mut held: BTreeSet<u64> = stored.clone();
    held.insert(current);
    held.retain(|&g| g <= current);
    let after: Vec<u64> = held.into_iter().filter(|&g| last_generation.is_none_or(|last| g > last)).collect();
    if !after.is_empty() {
        return after;
    }
    if !latest_is_ours || last_generation != Some(current) {
        return vec![current];
    }
    Vec::new()
}

/// The hive partition values of a partition key (`date=2026-11-27/region=eu`): every
/// component must be `column=value` with a non-empty column; `Err` says why not.
pub(crate) fn partition_values(partition: &str) -> Result<Vec<(String, String)>, String> {
    partition
        .split('/')
        .map(|component| match component.split_once('=') {
            Some((column, value)) if !column.is_empty() => Ok((column.to_owned(), value.to_owned())),
            _ => Err(format!(
                "partition {partition:?}: component {component:?} is not column=value, so it cannot be a Delta partition column"
            )),
        })
        .collect()
}

/// The partition columns of a generation's partitions: the same columns in the same order in
/// every partition, else `Err` naming the first that differs.
pub(crate) fn partition_columns<'a>(partitions: impl IntoIterator<Item = &'a str>) -> Result<Vec<String>, String> {
    let mut columns: Option<(Vec<String>, &str)> = None;
    for partition in partitions {
        let these: Vec<String> = partition_values(partition)?.into_iter().map(|(c, _)| c).collect();
        match &columns {
            None => columns = Some((these, partition)),
            Some((first, first_key)) if *first != these => {
                return Err(format!("partitions {first_key:?} and {partition:?} have different columns; a Delta table has one set"));
            }
            Some(_) => {}
        }
    }
    Ok(columns.map(|(c, _)| c).unwrap_or_default())
}

/// A view file's path in the table (relative to the table root).
pub(crate) fn data_rel(view_rel: &str) -> String {
    format!("{DATA_DIR}/{view_rel}")
}

/// The version a log entry belongs to (`00000000000000000003.json`, `...3.crc`,
/// `...3.checkpoint.parquet`, `...3.checkpoint.<uuid>.json`), `None` for anything else
/// (`_last_checkpoint`, temporary files).
pub(crate) fn log_entry_version(name: &str) -> Option<u64> {
    let digits = name.get(..20)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) || !name[20..].starts_with('.') {
        return None;
    }
    digits.parse().ok()
}

/// The log entries that go when the log is cut back to before version `from` (a damaged
/// commit): every entry of version `from` or later, newest first, so a crash part way leaves a
/// shorter log, never a gap; `_last_checkpoint` too if it names such a version (`last_checkpoint`:
/// the version it names, `None` if it is unreadable, then it goes as well: it is only a hint).
pub(crate) fn entries_from(names: &[String], from: u64, last_checkpoint: Option<Option<u64>>) -> Vec<String> {
    let mut doomed: Vec<(u64, &String)> =
        names.iter().filter_map(|n| log_entry_version(n).filter(|&v| v >= from && !n.contains('#')).map(|v| (v, n))).collect();
    doomed.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let mut out: Vec<String> = Vec::new();
    if matches!(last_checkpoint, Some(None)) || matches!(last_checkpoint, Some(Some(v)) if v >= from) {
        out.push("_last_checkpoint".to_owned());
    }
    out.extend(doomed.into_iter().map(|(_, n)| n.clone()));
    out
}

/// The log entries the store's retention lets go, once a checkpoint of version `boundary` (the
/// oldest retained generation's version) exists: every commit, checksum and checkpoint of an
/// older version. The boundary's own entries stay, so the table reads from its checkpoint.
pub(crate) fn log_entries_to_remove(names: &[String], boundary: u64) -> Vec<String> {
    names.iter().filter(|n| log_entry_version(n).is_some_and(|v| v < boundary)).cloned().collect()
}

/// The data files no retained version names.
pub(crate) fn data_files_to_remove(found: &BTreeSet<String>, named: &BTreeSet<String>) -> Vec<String> {
    found.difference(named).cloned().collect()
}

/// The fewest commits between two checkpoints (Delta's default `delta.checkpointInterval`).
pub(crate) const CHECKPOINT_INTERVAL: u64 = 10;

/// How much of the last checkpoint's size the commits since it must add up to before the next
/// checkpoint is due: one hundredth.
pub(crate) const CHECKPOINT_GROWTH_DIVISOR: u64 = 100;

/// Whether a checkpoint of the latest version is due, `since` commits after the newest
/// checkpoint (or after version 0 when there is none), the newest commit being `commit_bytes`
/// long and the newest checkpoint `checkpoint_bytes` (`None`: none yet).
///
/// Delta writers checkpoint every 10th version; a checkpoint holds every file of the table, so
/// at N files that costs O(N)/10 per commit, a cost that grows with the table. The store waits
/// instead until the commits since the last checkpoint, at the newest commit's size, add up to
/// a hundredth of that checkpoint (and at least 10 commits): a checkpoint then costs about a
/// hundred commits' worth of bytes per commit, whatever the table's size, and a reader replays
/// at most a hundredth of a checkpoint's bytes in commits after it (the same 10 commits as
/// Delta's default below about 10,000 files; 100 at 100,000 files of 1 KB commits).
///
/// A table without a checkpoint whose first commit is large (a dataset's first publish of many
/// partitions: `first_bytes`, at least [`FIRST_COMMIT_CHECKPOINT_BYTES`]) gets one at once: every
/// reader, and the store's next commit, would otherwise parse that whole JSON commit to find the
/// table's schema, where a checkpoint lets them read two Parquet columns.
pub(crate) fn checkpoint_due(since: u64, commit_bytes: u64, checkpoint_bytes: Option<u64>, first_bytes: u64) -> bool {
    if checkpoint_bytes.is_none() && since >= 1 && first_bytes >= FIRST_COMMIT_CHECKPOINT_BYTES {
        return true;
    }
    since >= CHECKPOINT_INTERVAL
        && checkpoint_bytes.is_none_or(|c| since.saturating_mul(commit_bytes).saturating_mul(CHECKPOINT_GROWTH_DIVISOR) >= c)
}

/// The size of a first commit past which a table gets a checkpoint at its next version (about
/// 3,000 files' `add` actions).
pub(crate) const FIRST_COMMIT_CHECKPOINT_BYTES: u64 = 1 << 20;

/// A log path (a URI reference, percent-encoded) as a path relative to the table root: `%3D`
/// to `=` and so on.
pub(crate) fn decode_path(path: &str) -> String {
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

/// The data files no version from `boundary` on names, read from the commits present
/// (`commits`: each version's text): the files under [`DATA_DIR`] whose last action in the log
/// is a `remove` at a version at or before `boundary` (a file added again later, or added and
/// removed by the same commit, stays). Paths relative to the table's data directory, decoded.
/// What the retention removes after an expiry, in what the log holds, not the table's size: the
/// first commit's `add`s are not even parsed (no file is removed before it). Conservative: a
/// line that names a file but cannot be read makes the answer empty (nothing is removed), and
/// a path that leaves the data directory is never returned. A file the log never named (left by
/// a crash before its commit) is not found here: a full `view sync` walks the data directory.
pub(crate) fn unnamed_data_files(commits: &BTreeMap<u64, String>, boundary: u64) -> Vec<String> {
    fn path_of<'a>(action: &'a serde_json::Value, kind: &str) -> Option<&'a str> {
        action.get(kind)?.get("path")?.as_str()
    }
    // The newest removal of each path; then, from the oldest removal on, the newest add.
    let mut removed: BTreeMap<String, u64> = BTreeMap::new();
    for (&version, text) in commits {
        for line in text.lines().filter(|l| l.starts_with("{\"remove\"")) {
            let Some(path) =
                serde_json::from_str::<serde_json::Value>(line).ok().as_ref().and_then(|a| path_of(a, "remove")).map(decode_path)
            else {
                return Vec::new();
            };
            removed.insert(path, version);
        }
    }
    let Some(&first_removal) = removed.values().min() else { return Vec::new() };
    let mut added: BTreeMap<String, u64> = BTreeMap::new();
    for (&version, text) in commits.range(first_removal..) {
        for line in text.lines().filter(|l| l.starts_with("{\"add\"")) {
            let Some(path) = serde_json::from_str::<serde_json::Value>(line).ok().as_ref().and_then(|a| path_of(a, "add")).map(decode_path)
            else {
                return Vec::new();
            };
            added.insert(path, version);
        }
    }
    removed
        .into_iter()
        .filter(|(path, version)| *version <= boundary && added.get(path).is_none_or(|a| a < version))
        .filter_map(|(path, _)| {
            let rel = path.strip_prefix(DATA_DIR)?.strip_prefix('/')?;
            rel.split('/').all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\0')).then(|| rel.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_files_no_retained_version_names_are_read_from_the_log() {
        let add = |p: &str| format!("{{\"add\":{{\"path\":\"{p}\",\"size\":1}}}}");
        let remove = |p: &str| format!("{{\"remove\":{{\"path\":\"{p}\",\"size\":1}}}}");
        let commit = |lines: &[String]| lines.join("\n") + "\n";
        let commits: BTreeMap<u64, String> = [
            (0, commit(&[add("data/p=1/g1-a1-x"), add("data/p=2/g1-a1-x"), add("data/p=3/g1-a1-x")])),
            (1, commit(&[add("data/p=1/g2-a1-x"), remove("data/p=1/g1-a1-x")])),
            (2, commit(&[add("data/p%3D2/g3-a1-x"), remove("data/p%3D2/g1-a1-x")])),
            // A rollback to generation 1's p=1 adds its file again.
            (3, commit(&[add("data/p=1/g1-a1-x"), remove("data/p=1/g2-a1-x")])),
            (4, commit(&[add("data/p=3/g5-a1-x"), remove("data/p=3/g1-a1-x"), remove("../outside"), remove("data/../x")])),
        ]
        .into_iter()
        .collect();
        // Versions from 3 on are kept: g1's p=2 went at 2; g2's p=1 went at 3; p=1's g1 is back.
        assert_eq!(unnamed_data_files(&commits, 3), vec!["p=1/g2-a1-x".to_owned(), "p=2/g1-a1-x".to_owned()]);
        // From 2 on: only what went by version 2.
        assert_eq!(unnamed_data_files(&commits, 2), vec!["p=2/g1-a1-x".to_owned()]);
        // From 4 on: also g1's p=3, never a path outside the data directory.
        assert_eq!(unnamed_data_files(&commits, 4), vec!["p=1/g2-a1-x".to_owned(), "p=2/g1-a1-x".to_owned(), "p=3/g1-a1-x".to_owned()]);
        // A line naming a file that cannot be read: nothing is removed.
        let mut damaged = commits.clone();
        damaged.insert(5, "{\"add\":{\"path\":\n".to_owned());
        assert!(unnamed_data_files(&damaged, 4).is_empty());
    }

    use super::*;

    fn ours(generation: u64) -> Commit {
        Commit::Ours { generation }
    }

    fn foreign() -> Commit {
        Commit::Foreign { operation: Some("WRITE".into()), engine: None }
    }

    #[test]
    fn a_checkpoint_is_due_when_the_commits_since_add_up_to_a_hundredth_of_the_last_one() {
        // No checkpoint yet: every 10th commit, as Delta writers do.
        assert!(!checkpoint_due(9, 1_000, None, 50_000));
        assert!(checkpoint_due(10, 1_000, None, 50_000));
        // A small table: its checkpoint is small, so 10 commits suffice.
        assert!(checkpoint_due(10, 1_000, Some(50_000), 0));
        // A large one (a 10 MB checkpoint, 1 KB commits): 100 commits, not 10.
        assert!(!checkpoint_due(10, 1_000, Some(10_000_000), 0));
        assert!(!checkpoint_due(99, 1_000, Some(10_000_000), 0));
        assert!(checkpoint_due(100, 1_000, Some(10_000_000), 0));
        // Large commits bring it sooner; never before 10.
        assert!(checkpoint_due(10, 10_000, Some(10_000_000), 0));
        assert!(!checkpoint_due(9, u64::MAX, Some(1), u64::MAX));
        // A large first commit and no checkpoint: at once, from the next version on.
        assert!(!checkpoint_due(0, 30_000_000, None, 30_000_000));
        assert!(checkpoint_due(1, 1_000, None, 30_000_000));
        assert!(!checkpoint_due(1, 1_000, None, FIRST_COMMIT_CHECKPOINT_BYTES - 1));
    }

    #[test]
    fn generations_to_commit_follow_the_txn_not_the_version_count() {
        let stored: BTreeSet<u64> = [1, 2, 3].into();
        assert_eq!(generations_to_commit(None, false, &stored, 3), [1, 2, 3]);
        assert_eq!(generations_to_commit(Some(1), true, &stored, 3), [2, 3]);
        assert!(generations_to_commit(Some(3), true, &stored, 3).is_empty());
        // A foreign commit on top: the current generation again, to restore it.
        assert_eq!(generations_to_commit(Some(3), false, &stored, 3), [3]);
        // Expired generations the table never saw are skipped, not committed empty.
        assert_eq!(generations_to_commit(Some(1), true, &[4, 5].into(), 5), [4, 5]);
        // A table ahead of the store (restored from an older copy): the current one again.
        assert_eq!(generations_to_commit(Some(7), true, &stored, 3), [3]);
    }

    #[test]
    fn the_log_maps_versions_to_generations_by_the_txn() {
        let log: Log = [(0, ours(1)), (1, ours(2)), (2, foreign()), (3, ours(3)), (4, foreign()), (5, ours(3))].into();
        assert_eq!(last_ours(&log), Some((5, 3)));
        assert_eq!(version_of(&log, 3), Some(5));
        assert_eq!(version_of(&log, 2), Some(1));
        assert_eq!(version_of(&log, 9), None);
        assert_eq!(foreign_versions(&log), [2, 4]);
        assert_eq!(first_damaged(&log), None);
        let damaged: Log = [(0, ours(1)), (1, Commit::Damaged { reason: "is empty".into() }), (2, ours(3))].into();
        assert_eq!(first_damaged(&damaged), Some(1));
    }

    #[test]
    fn commit_texts_are_read_as_ours_foreign_or_damaged() {
        let ours_text = "{\"commitInfo\":{\"operation\":\"WRITE\",\"engineInfo\":\"manifestdb/0.1.0\"}}\n{\"txn\":{\"appId\":\"manifestdb\",\"version\":4}}\n{\"add\":{\"path\":\"a\"}}\n";
        assert_eq!(read_commit(ours_text), ours(4));
        let theirs = "{\"commitInfo\":{\"operation\":\"VACUUM START\",\"engineInfo\":\"delta-rs:1\"}}\n";
        assert_eq!(read_commit(theirs), Commit::Foreign { operation: Some("VACUUM START".into()), engine: Some("delta-rs:1".into()) });
        let other_app = "{\"txn\":{\"appId\":\"spark\",\"version\":4}}\n";
        assert!(matches!(read_commit(other_app), Commit::Foreign { .. }));
        assert!(matches!(read_commit(""), Commit::Damaged { .. }));
        assert!(matches!(read_commit(&ours_text[..ours_text.len() - 10]), Commit::Damaged { .. }));
        assert!(matches!(read_commit("{\"add\":{\"path\":\"a\"}}\n{\"add\":{\"pa\n"), Commit::Damaged { .. }));
        assert!(matches!(read_commit("[1, 2]\n"), Commit::Damaged { .. }));
    }

    #[test]
    fn log_names_are_classified_and_staged_uploads_are_never_versions() {
        assert_eq!(log_name("00000000000000000003.json"), LogName::Commit(3));
        assert_eq!(log_name("00000000000000000003.checkpoint.parquet"), LogName::Checkpoint(3));
        assert_eq!(log_name("00000000000000000003.crc"), LogName::OfVersion(3));
        assert_eq!(log_name("00000000000000000000.json#1"), LogName::Temporary);
        assert_eq!(log_name(".00000000000000000004.json.tmp"), LogName::Temporary);
        assert_eq!(log_name("_last_checkpoint"), LogName::LastCheckpoint);
        assert_eq!(log_name("notes.txt"), LogName::Other);
    }

    #[test]
    fn a_cut_back_log_loses_the_newest_entries_first() {
        let names: Vec<String> = [
            "00000000000000000000.json",
            "00000000000000000001.json",
            "00000000000000000002.json",
            "00000000000000000002.checkpoint.parquet",
            "00000000000000000001.json#1",
            "_last_checkpoint",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            entries_from(&names, 1, Some(Some(2))),
            ["_last_checkpoint", "00000000000000000002.checkpoint.parquet", "00000000000000000002.json", "00000000000000000001.json"]
        );
        assert_eq!(entries_from(&names, 2, Some(Some(0))), ["00000000000000000002.checkpoint.parquet", "00000000000000000002.json"]);
        assert_eq!(entries_from(&names, 5, Some(None)), ["_last_checkpoint"]);
        assert!(entries_from(&names, 5, None).is_empty());
    }

    #[test]
    fn hive_partitions_parse_and_others_are_refused() {
        assert_eq!(
            partition_values("date=2026-11-27/region=eu").unwrap(),
            [("date".to_owned(), "2026-11-27".to_owned()), ("region".to_owned(), "eu".to_owned())]
        );
        assert!(partition_values("eu").is_err());
        assert!(partition_values("=eu").is_err());
        assert_eq!(partition_columns(["a=1/b=2", "a=3/b=4"]).unwrap(), ["a", "b"]);
        assert!(partition_columns(["a=1/b=2", "a=3"]).is_err());
    }

    #[test]
    fn only_entries_older_than_the_boundary_go() {
        let names: Vec<String> = [
            "00000000000000000000.json",
            "00000000000000000001.json",
            "00000000000000000001.crc",
            "00000000000000000002.checkpoint.parquet",
            "00000000000000000002.json",
            "00000000000000000003.json",
            "_last_checkpoint",
            ".00000000000000000004.json.tmp",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            log_entries_to_remove(&names, 2),
            ["00000000000000000000.json", "00000000000000000001.json", "00000000000000000001.crc"]
        );
        assert_eq!(log_entry_version("_last_checkpoint"), None);
    }
}

//! The Delta table of a Parquet dataset's views, as pure rules over plain values: which
//! versions to commit (Delta version = generation - 1), the hive partition values of a
//! partition key, where a view file lives in the table's data directory, which log entries and
//! data files the store's retention lets go.

// Without the `delta` feature only the directory names are used (the views leave them alone).
#![cfg_attr(not(feature = "delta"), allow(dead_code))]

use std::collections::BTreeSet;

/// The table's data directory, inside the dataset's view directory: one hard link (or copy)
/// per partition version any retained generation names, at the same relative path as in a view
/// (`data/<partition>/g<S>-a<A>-<file>`), so a path names one content for as long as it exists.
pub(crate) const DATA_DIR: &str = "data";

/// The Delta log directory.
pub(crate) const LOG_DIR: &str = "_delta_log";

/// The Delta version of generation `generation` (generations count from 1, versions from 0).
pub(crate) fn version_of(generation: u64) -> u64 {
    generation.saturating_sub(1)
}

/// The generations to commit, in order, for a table at `latest` (`None`: no table yet) and a
/// store whose current generation is `current`: every generation after the one `latest` holds.
pub(crate) fn generations_to_commit(latest: Option<u64>, current: u64) -> std::ops::RangeInclusive<u64> {
    let next = latest.map_or(1, |v| v + 2);
    next..=current
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

/// Whether to write a checkpoint of `version` as Delta writers do by default (every 10th
/// version; `delta.checkpointInterval`).
pub(crate) fn checkpoint_due(version: u64) -> bool {
    version > 0 && version.is_multiple_of(10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_follow_generations() {
        assert_eq!(version_of(1), 0);
        assert_eq!(generations_to_commit(None, 3).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(generations_to_commit(Some(1), 3).collect::<Vec<_>>(), [3]);
        assert!(generations_to_commit(Some(2), 3).is_empty());
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

//! The published view's decisions, as pure functions over plain values: the names inside a
//! dataset's view directory, what the view of a generation must contain (and whether it can be
//! placed at all), which views may be removed, and how a view found on disk differs from the
//! one it should be. `views.rs` only carries these decisions out on the file system.
//!
//! Invariant: a planned view path is relative, made of plain components (no empty, `.` or `..`
//! component, none hidden), never equal to the manifest's name, and no planned file is also a
//! planned directory; the view never removes the view `current` names, nor the view of a
//! generation the store still holds.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::Manifest;

/// The manifest file at the top of every view.
pub(crate) const MANIFEST_FILE: &str = "_manifest.json";
/// The symlink naming the current view.
pub(crate) const CURRENT: &str = "current";
/// The temporary name of the next `current` symlink, renamed over `current`.
pub(crate) const CURRENT_NEW: &str = ".current-new";
/// The file that marks a dataset directory under the view root as manifestdb's.
pub(crate) const MARKER: &str = ".manifestdb-view";
/// The manifest's schema name and version (see the book, `docs/src/reading.md`).
pub(crate) const MANIFEST_SCHEMA: &str = "manifestdb.view.manifest";
/// Bumped on any incompatible change of `_manifest.json`.
pub(crate) const MANIFEST_SCHEMA_VERSION: u32 = 2;
/// Longest path inside a view, in bytes (the usual `PATH_MAX` leaves room for the root).
pub(crate) const VIEW_PATH_BYTES_MAX: usize = 3072;

/// The name a view gives an accepted file: the file's own name behind a tag of the partition
/// version that holds it, `g<since generation>-a<attempt>-<name>`, in the file's own
/// directory under the partition's (`date=…/region=…/g7-a2-part-0.csv`).
///
/// Why: a reader that listed `current` while it named generation N and opens the listed paths
/// after `current` moved to N+1 must never read N+1's bytes under N's name. A partition version
/// (`since_generation`: the generation that wrote this content, never reused in a dataset) names
/// exactly one accepted attempt's files, so a tagged path names one content in every generation
/// that holds it: a stale listing reads its own generation's bytes (the partition was carried
/// over unchanged, same name, same file) or fails with "not found" (it was replaced). The
/// attempt number is there for the humans reading the name; the tag keeps the extension last,
/// so `*.parquet` globs and engines' format detection still work.
pub(crate) fn tagged_name(since_generation: u64, attempt: u32, file: &str) -> String {
    let (dir, name) = file.rsplit_once('/').map_or(("", file), |(d, n)| (d, n));
    let tagged = format!("g{since_generation}-a{attempt}-{name}");
    if dir.is_empty() { tagged } else { format!("{dir}/{tagged}") }
}

/// `v<N>`: the directory of generation N's view.
pub(crate) fn view_name(generation: u64) -> String {
    format!("v{generation}")
}

/// The temporary directory a view is built in before it is renamed to `v<N>`.
pub(crate) fn building_name(generation: u64) -> String {
    format!(".building-v{generation}")
}

/// The name an expired view is renamed to before its tree is removed.
pub(crate) fn expired_name(generation: u64) -> String {
    format!(".expired-v{generation}")
}

/// The generation a `v<N>` name denotes: `v` then a decimal number without leading zero, above 0.
pub(crate) fn parse_view_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix('v')?;
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// True for the temporary names views.rs leaves behind when interrupted: safe to remove inside
/// a dataset directory that carries the marker, because nothing else uses them.
pub(crate) fn is_leftover(name: &str) -> bool {
    name == CURRENT_NEW
        || name.strip_prefix(".building-").and_then(parse_view_name).is_some()
        || name.strip_prefix(".expired-").and_then(parse_view_name).is_some()
}

/// Which generation's view a reader asking for `requested` (`None`: the current one) gets,
/// given the dataset's current generation and its stored ones: `Ok(n)`, or why not.
pub(crate) fn locate(requested: Option<u64>, current: Option<u64>, stored: &BTreeSet<u64>) -> Result<u64, Locate> {
    let Some(current) = current else {
        return Err(Locate::NothingPublished);
    };
    match requested {
        None => Ok(current),
        Some(n) if stored.contains(&n) => Ok(n),
        Some(n) if n == 0 || n > current => Err(Locate::Never { current }),
        Some(_) => Err(Locate::Expired { oldest_retained: stored.first().copied() }),
    }
}

/// Why [`locate`] found no generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Locate {
    /// The dataset has no generation.
    NothingPublished,
    /// The generation never existed; the current one is `current`.
    Never {
        /// The dataset's current generation.
        current: u64,
    },
    /// The generation existed and expired.
    Expired {
        /// The oldest generation still stored.
        oldest_retained: Option<u64>,
    },
}

/// One file of a planned view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ViewFile {
    /// Path inside the view directory: `<partition>/<file dir>/<tagged name>` ([`tagged_name`]).
    pub(crate) rel: String,
    /// The partition it belongs to.
    pub(crate) partition: String,
    /// The attempt's staging directory, relative to the staging root.
    pub(crate) staging_rel: String,
    /// The file's path inside that staging directory.
    pub(crate) file: String,
    /// Recorded size.
    pub(crate) size_bytes: u64,
    /// Recorded CRC32.
    pub(crate) crc32: u32,
}

/// What generation N's view must contain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ViewPlan {
    /// The generation.
    pub(crate) generation: u64,
    /// Every file, in path order.
    pub(crate) files: Vec<ViewFile>,
    /// Every directory inside the view, parents before children.
    pub(crate) dirs: Vec<String>,
}

/// Why a generation cannot be placed in a view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlacementRefusal {
    /// The offending path (partition or partition/file).
    pub(crate) path: String,
    /// Why.
    pub(crate) reason: String,
}

fn refuse(path: &str, reason: impl Into<String>) -> PlacementRefusal {
    PlacementRefusal { path: path.to_owned(), reason: reason.into() }
}

/// Checks one `/`-separated path that will be used literally inside the view directory.
fn check_view_path(what: &str, path: &str) -> Result<(), PlacementRefusal> {
    if path.is_empty() {
        return Err(refuse(path, format!("{what} is empty")));
    }
    if path.starts_with('/') {
        return Err(refuse(path, format!("{what} is absolute: it would escape the view directory")));
    }
    if path.contains('\0') || path.chars().any(char::is_control) {
        return Err(refuse(path, format!("{what} contains a NUL or control character")));
    }
    if path.contains('\\') {
        return Err(refuse(path, format!("{what} contains a backslash, which readers on some platforms take as a separator")));
    }
    for component in path.split('/') {
        match component {
            "" => return Err(refuse(path, format!("{what} has an empty component"))),
            "." | ".." => return Err(refuse(path, format!("{what} has a '{component}' component: it would escape the view directory"))),
            c if c.starts_with('.') => {
                return Err(refuse(path, format!("{what} has a hidden component {c:?} (readers skip names starting with '.')")));
            }
            c if c.len() > 255 => return Err(refuse(path, format!("{what} has a component longer than 255 bytes"))),
            _ => {}
        }
    }
    Ok(())
}

/// Plans generation `manifest.generation.number`'s view: each partition's files under the
/// partition's own path, so `date=…/region=…` directories give readers hive-style partition
/// discovery, each file named after the partition version holding it ([`tagged_name`]). Refused when a partition or file path cannot be placed there safely.
pub(crate) fn plan(manifest: &Manifest) -> Result<ViewPlan, PlacementRefusal> {
    let mut files = Vec::new();
    let mut dirs = BTreeSet::new();
    for entry in &manifest.partitions {
        check_view_path("partition", &entry.partition)?;
        for file in &entry.files {
            check_view_path("file path", &file.path)?;
            let rel = format!("{}/{}", entry.partition, tagged_name(entry.since_generation, entry.attempt, &file.path));
            if rel.rsplit('/').next().is_some_and(|n| n.len() > 255) {
                return Err(refuse(&rel, "its tagged file name is longer than 255 bytes"));
            }
            if rel.len() > VIEW_PATH_BYTES_MAX {
                return Err(refuse(&rel, format!("is longer than {VIEW_PATH_BYTES_MAX} bytes")));
            }
            if rel == MANIFEST_FILE {
                return Err(refuse(&rel, "would replace the view's manifest"));
            }
            let mut dir = String::new();
            let components: Vec<&str> = rel.split('/').collect();
            for component in &components[..components.len() - 1] {
                if !dir.is_empty() {
                    dir.push('/');
                }
                dir.push_str(component);
                dirs.insert(dir.clone());
            }
            files.push(ViewFile {
                rel,
                partition: entry.partition.clone(),
                staging_rel: entry.staging_rel.clone(),
                file: file.path.clone(),
                size_bytes: file.size_bytes,
                crc32: file.crc32,
            });
        }
    }
    if dirs.contains(MANIFEST_FILE) {
        return Err(refuse(MANIFEST_FILE, "a partition would replace the view's manifest"));
    }
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    for pair in files.windows(2) {
        if pair[0].rel == pair[1].rel {
            return Err(refuse(
                &pair[0].rel,
                format!("two files of partitions {:?} and {:?} map to it", pair[0].partition, pair[1].partition),
            ));
        }
    }
    if let Some(clash) = files.iter().find(|f| dirs.contains(&f.rel)) {
        return Err(refuse(&clash.rel, "is a file of one partition and a directory of another"));
    }
    // BTreeSet order puts "a" before "a/b": parents first.
    Ok(ViewPlan { generation: manifest.generation.number, files, dirs: dirs.into_iter().collect() })
}

/// The views to remove from a dataset directory: every present view of a generation the store
/// no longer holds, except the one `current` names (it is replaced first, never left dangling).
pub(crate) fn views_to_remove(present: &[u64], stored: &BTreeSet<u64>, current_target: Option<u64>) -> Vec<u64> {
    let mut out: Vec<u64> = present.iter().copied().filter(|n| !stored.contains(n) && Some(*n) != current_target).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The views an expiry removes: those of the generations it expires, never the one `current`
/// names. `None` when `current` would name an expired generation (the expiry must not run
/// before `current` has moved on).
pub(crate) fn views_expiring(present: &[u64], expired: &[u64], current_target: Option<u64>) -> Option<Vec<u64>> {
    if current_target.is_some_and(|t| expired.contains(&t)) {
        return None;
    }
    let expired: BTreeSet<u64> = expired.iter().copied().collect();
    Some(present.iter().copied().filter(|n| expired.contains(n)).collect())
}

/// What the file system holds at one path inside a view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// A regular file of this size.
    File {
        /// Its size.
        size_bytes: u64,
    },
    /// A directory.
    Dir,
    /// Anything else (a symlink, a device...).
    Other,
}

/// How a view on disk differs from its plan: one message per problem, in path order. The
/// manifest file is checked separately.
pub(crate) fn diff(plan: &ViewPlan, found: &BTreeMap<String, Found>) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    let expected_dirs: BTreeSet<&str> = plan.dirs.iter().map(String::as_str).collect();
    let mut expected_files: BTreeMap<&str, &ViewFile> = BTreeMap::new();
    for file in &plan.files {
        expected_files.insert(file.rel.as_str(), file);
    }
    for file in &plan.files {
        match found.get(&file.rel) {
            None => problems.push((file.rel.clone(), format!("missing (partition {:?}, attempt file {:?})", file.partition, file.file))),
            Some(Found::File { size_bytes }) if *size_bytes != file.size_bytes => {
                problems.push((
                    file.rel.clone(),
                    format!("has {}, the generation records {}", crate::error::count(*size_bytes, "byte"), file.size_bytes),
                ));
            }
            Some(Found::File { .. }) => {}
            Some(Found::Dir) => problems.push((file.rel.clone(), "is a directory, not the partition's file".into())),
            Some(Found::Other) => problems.push((file.rel.clone(), "is not a regular file".into())),
        }
    }
    for (path, kind) in found {
        if path == MANIFEST_FILE || expected_files.contains_key(path.as_str()) {
            continue;
        }
        match kind {
            Found::Dir if expected_dirs.contains(path.as_str()) => {}
            Found::Dir => problems.push((path.clone(), "extra directory: no partition of the generation lives here".into())),
            _ => problems.push((path.clone(), "extra file: the generation does not hold it".into())),
        }
    }
    problems.sort();
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FileEntry, Generation, GenerationKind, PartitionEntry};

    fn manifest(parts: &[(&str, &[&str])]) -> Manifest {
        Manifest {
            generation: Generation {
                dataset: "d".into(),
                number: 3,
                parent: 2,
                run: "r".into(),
                snapshot: "s".into(),
                published_at_ms: 0,
                partitions_replaced: 1,
                nondeterminism_accepted: None,
                kind: GenerationKind::Publish,
            },
            partitions: parts
                .iter()
                .map(|(p, files)| PartitionEntry {
                    partition: (*p).into(),
                    since_generation: 1,
                    run: "r".into(),
                    attempt: 2,
                    snapshot: "s".into(),
                    rows: 1,
                    total: None,
                    digest: "x".into(),
                    staging_rel: format!("d/r/{p}/@attempt-2"),
                    staging_dir: None,
                    files: files.iter().map(|f| FileEntry { path: (*f).into(), size_bytes: 5, crc32: 7 }).collect(),
                    figures_checked: false,
                })
                .collect(),
        }
    }

    #[test]
    fn names_round_trip_and_reject_lookalikes() {
        assert_eq!(parse_view_name(&view_name(42)), Some(42));
        for bad in ["v", "v0", "v01", "v-1", "x1", "v1a", "current", "V1"] {
            assert_eq!(parse_view_name(bad), None, "{bad}");
        }
        assert!(is_leftover(&building_name(3)) && is_leftover(&expired_name(3)) && is_leftover(CURRENT_NEW));
        assert!(!is_leftover("v3") && !is_leftover(MARKER) && !is_leftover(".building-x") && !is_leftover(CURRENT));
    }

    #[test]
    fn plan_places_each_partition_under_its_own_path() {
        let plan = plan(&manifest(&[("date=1/region=eu", &["part-0.csv"]), ("date=1/region=us", &["a/b.csv", "c.csv"])])).unwrap();
        let rels: Vec<&str> = plan.files.iter().map(|f| f.rel.as_str()).collect();
        assert_eq!(rels, ["date=1/region=eu/g1-a2-part-0.csv", "date=1/region=us/a/g1-a2-b.csv", "date=1/region=us/g1-a2-c.csv"]);
        assert_eq!(plan.dirs, ["date=1", "date=1/region=eu", "date=1/region=us", "date=1/region=us/a"]);
        assert_eq!(plan.files[0].staging_rel, "d/r/date=1/region=eu/@attempt-2");
    }

    #[test]
    fn plan_refuses_paths_that_escape_or_collide() {
        for (partition, file) in [
            ("../outside", "f"),
            ("a/../../b", "f"),
            ("/abs", "f"),
            ("a//b", "f"),
            ("ok", "../f"),
            ("ok", "/etc/passwd"),
            ("ok", ".hidden"),
            (".hidden", "f"),
            ("a\\b", "f"),
            ("a\nb", "f"),
        ] {
            let files = [file];
            assert!(plan(&manifest(&[(partition, &files)])).is_err(), "{partition:?} {file:?} must be refused");
        }
        assert!(plan(&manifest(&[("_manifest.json", &["f"])])).is_err());
        // A file of one partition where another partition needs a directory.
        assert!(plan(&manifest(&[("a", &["b"]), ("a/g1-a2-b", &["f"])])).is_err());
        // Two partitions mapping one file to the same path.
        assert!(plan(&manifest(&[("a", &["b/f"]), ("a/b", &["f"])])).is_err());
    }

    #[test]
    fn locate_names_a_stored_generation_or_says_why_not() {
        let stored: BTreeSet<u64> = [4, 5, 6].into();
        assert_eq!(locate(None, Some(6), &stored), Ok(6));
        assert_eq!(locate(Some(5), Some(6), &stored), Ok(5));
        assert_eq!(locate(Some(2), Some(6), &stored), Err(Locate::Expired { oldest_retained: Some(4) }));
        assert_eq!(locate(Some(7), Some(6), &stored), Err(Locate::Never { current: 6 }));
        assert_eq!(locate(Some(0), Some(6), &stored), Err(Locate::Never { current: 6 }));
        assert_eq!(locate(None, None, &BTreeSet::new()), Err(Locate::NothingPublished));
    }

    /// The naming rule's point: in two generations' plans, a path that both hold names the
    /// same attempt file (a carried-over partition), and a replaced partition's files get
    /// paths the older plan does not have.
    #[test]
    fn a_path_two_plans_share_names_the_same_file() {
        let older = manifest(&[("p=1", &["part.csv"]), ("p=2", &["part.csv"])]);
        let mut newer = older.clone();
        newer.generation.number = 4;
        newer.partitions[1].since_generation = 4;
        newer.partitions[1].attempt = 1;
        newer.partitions[1].staging_rel = "d/r2/p=2/@attempt-1".into();
        let (a, b) = (plan(&older).unwrap(), plan(&newer).unwrap());
        let old: BTreeMap<&str, &ViewFile> = a.files.iter().map(|f| (f.rel.as_str(), f)).collect();
        let mut shared = 0;
        for file in &b.files {
            if let Some(before) = old.get(file.rel.as_str()) {
                assert_eq!((&before.staging_rel, &before.file), (&file.staging_rel, &file.file), "{}", file.rel);
                shared += 1;
            }
        }
        assert_eq!(shared, 1, "p=1 carried over under its old name, p=2 renamed");
    }

    #[test]
    fn removal_spares_current_and_stored_generations() {
        let stored: BTreeSet<u64> = [4, 5, 6].into();
        assert_eq!(views_to_remove(&[1, 2, 4, 6], &stored, Some(6)), [1, 2]);
        assert_eq!(views_to_remove(&[1, 2, 4, 6], &stored, Some(2)), [1]);
        assert_eq!(views_expiring(&[1, 2, 3, 6], &[1, 2], Some(6)), Some(vec![1, 2]));
        assert_eq!(views_expiring(&[1, 2, 3, 6], &[1, 2], Some(2)), None);
    }

    #[test]
    fn diff_reports_missing_extra_and_wrong_files() {
        let plan = plan(&manifest(&[("p=1", &["a.csv", "b.csv"])])).unwrap();
        let mut found = BTreeMap::new();
        found.insert("p=1".to_owned(), Found::Dir);
        found.insert("p=1/g1-a2-a.csv".to_owned(), Found::File { size_bytes: 5 });
        found.insert(MANIFEST_FILE.to_owned(), Found::File { size_bytes: 100 });
        assert!(
            diff(&plan, &{
                let mut f = found.clone();
                f.insert("p=1/g1-a2-b.csv".into(), Found::File { size_bytes: 5 });
                f
            })
            .is_empty()
        );
        found.insert("p=1/extra.csv".to_owned(), Found::File { size_bytes: 1 });
        found.insert("p=2".to_owned(), Found::Dir);
        let problems = diff(&plan, &found);
        let paths: Vec<&str> = problems.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["p=1/extra.csv", "p=1/g1-a2-b.csv", "p=2"]);
        found.insert("p=1/g1-a2-b.csv".to_owned(), Found::File { size_bytes: 9 });
        assert!(diff(&plan, &found).iter().any(|(p, m)| p == "p=1/g1-a2-b.csv" && m.contains("9 bytes")));
    }
}

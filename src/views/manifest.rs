//! A view's `_manifest.json`: its schema, how it is made from a generation, and how it is read back.

use std::io::Read;
use std::os::fd::BorrowedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use super::ViewMode;
use super::dirs::errno;
use crate::error::{Error, Result};
use crate::model::{GenerationKind, Manifest};
use crate::rules::views as rule;

/// The `_manifest.json` of a view (schema `manifestdb.view.manifest`, version 2). Paths are
/// relative to the view directory (`v<N>/`), `/`-separated. Version 2 names every file after
/// the partition version holding it (`g<S>-a<A>-<file>`); version 1 used the attempt's own file
/// names, which two generations could share (a view of version 1 is rebuilt by `view sync`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewManifest {
    /// Always `manifestdb.view.manifest`.
    pub schema: String,
    /// Currently 2; bumped on any incompatible change.
    pub schema_version: u32,
    /// The dataset.
    pub dataset: String,
    /// The generation this view shows.
    pub generation: u64,
    /// The generation it was derived from (0 for none).
    pub parent: u64,
    /// `publish` or `rollback`.
    pub kind: String,
    /// For a rollback, the generation whose content it restores.
    pub restored: Option<u64>,
    /// The run whose content it is (for a rollback: the restored generation's run).
    pub run: String,
    /// That run's input snapshot.
    pub snapshot: String,
    /// When the generation was committed (ms since the Unix epoch).
    pub published_at_ms: u64,
    /// `hard_link` or `copy`.
    pub file_mode: String,
    /// Sums over the partitions.
    pub totals: ViewTotals,
    /// Every partition, in key order.
    pub partitions: Vec<ViewPartition>,
}

/// Sums over a view's partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewTotals {
    /// Partitions.
    pub partitions: u64,
    /// Files.
    pub files: u64,
    /// Rows.
    pub rows: u64,
    /// Sum of the partitions' totals; `null` if a partition reported none.
    pub total: Option<i64>,
    /// Bytes.
    pub bytes: u64,
}

/// One partition of a view's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewPartition {
    /// The partition key, also its directory inside the view.
    pub partition: String,
    /// The run of its accepted attempt.
    pub run: String,
    /// The accepted attempt's number.
    pub attempt: u32,
    /// The generation that wrote this partition's content.
    pub since_generation: u64,
    /// Input snapshot.
    pub snapshot: String,
    /// Rows.
    pub rows: u64,
    /// Total, if reported.
    pub total: Option<i64>,
    /// Canonical digest.
    pub digest: String,
    /// Its files.
    pub files: Vec<ViewFileEntry>,
}

/// One file of a view's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewFileEntry {
    /// Path relative to the view directory: `<partition>/<file dir>/g<S>-a<A>-<file name>`,
    /// where S is the partition's `since_generation` and A its attempt: the same path in two
    /// generations is always the same bytes.
    pub path: String,
    /// The path the attempt reported, relative to its staging directory.
    pub file: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// CRC32 (IEEE) of the content.
    pub crc32: u32,
    /// For a view root on object storage: the URL of the file's copy in the Delta table
    /// (`s3://bucket/prefix/<dataset>/table/data/<path>`), readable by anyone who can read the
    /// table. Absent for a local view (its `path` is below `v<N>/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl ViewManifest {
    /// The manifest of `manifest`'s generation as its view shows it.
    pub(crate) fn of(manifest: &Manifest, mode: ViewMode) -> ViewManifest {
        let g = &manifest.generation;
        let (kind, restored) = match &g.kind {
            GenerationKind::Rollback { restored, .. } => ("rollback", Some(*restored)),
            _ => ("publish", None),
        };
        let partitions: Vec<ViewPartition> = manifest
            .partitions
            .iter()
            .map(|p| ViewPartition {
                partition: p.partition.clone(),
                run: p.run.clone(),
                attempt: p.attempt,
                since_generation: p.since_generation,
                snapshot: p.snapshot.clone(),
                rows: p.rows,
                total: p.total,
                digest: p.digest.clone(),
                files: p
                    .files
                    .iter()
                    .map(|f| ViewFileEntry {
                        path: format!("{}/{}", p.partition, rule::tagged_name(p.since_generation, p.attempt, &f.path)),
                        file: f.path.clone(),
                        size_bytes: f.size_bytes,
                        crc32: f.crc32,
                        url: None,
                    })
                    .collect(),
            })
            .collect();
        let totals = ViewTotals {
            partitions: partitions.len() as u64,
            files: partitions.iter().map(|p| p.files.len() as u64).sum(),
            rows: partitions.iter().map(|p| p.rows).sum(),
            total: partitions.iter().try_fold(0i64, |sum, p| p.total.map(|t| sum.saturating_add(t))),
            bytes: partitions.iter().flat_map(|p| &p.files).map(|f| f.size_bytes).sum(),
        };
        ViewManifest {
            schema: rule::MANIFEST_SCHEMA.to_owned(),
            schema_version: rule::MANIFEST_SCHEMA_VERSION,
            dataset: g.dataset.clone(),
            generation: g.number,
            parent: g.parent,
            kind: kind.to_owned(),
            restored,
            run: g.run.clone(),
            snapshot: g.snapshot.clone(),
            published_at_ms: g.published_at_ms,
            file_mode: mode.name().to_owned(),
            totals,
            partitions,
        }
    }

    /// The same manifest with each file's URL in the Delta table at `table` (`s3://...`, no
    /// trailing `/`): its data files are `<table>/data/<path>`.
    #[must_use]
    #[cfg(all(feature = "s3", feature = "delta"))]
    pub(crate) fn with_table_urls(mut self, table: &str) -> ViewManifest {
        for partition in &mut self.partitions {
            for file in &mut partition.files {
                file.url = Some(format!("{table}/{}", crate::rules::delta::data_rel(&file.path)));
            }
        }
        self
    }

    /// Reads and checks a view's `_manifest.json`.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be read; [`Error::ViewDamaged`] (corrupt, exit 7) if it is
    /// empty, not a manifest or of a schema version this build does not read: `view sync`
    /// rebuilds such a view.
    pub fn read(path: impl AsRef<Path>) -> Result<ViewManifest> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::io(format!("reading view manifest {}", path.display()), e))?;
        ViewManifest::parse(&bytes).map_err(|reason| Error::ViewDamaged { path: path.to_path_buf(), reason })
    }

    fn parse(bytes: &[u8]) -> std::result::Result<ViewManifest, String> {
        if bytes.is_empty() {
            return Err("is empty (a power loss before it was synced, or a truncation)".into());
        }
        let manifest: ViewManifest = serde_json::from_slice(bytes).map_err(|e| format!("is not a view manifest: {e}"))?;
        if manifest.schema != rule::MANIFEST_SCHEMA || manifest.schema_version != rule::MANIFEST_SCHEMA_VERSION {
            return Err(format!(
                "has schema {:?} version {}, this build reads {:?} version {}",
                manifest.schema,
                manifest.schema_version,
                rule::MANIFEST_SCHEMA,
                rule::MANIFEST_SCHEMA_VERSION
            ));
        }
        Ok(manifest)
    }
}

/// Reads and parses the `_manifest.json` of an open view directory; why not, in words.
pub(super) fn read_manifest_at(view: BorrowedFd<'_>) -> std::result::Result<ViewManifest, String> {
    let fd = match rustix::fs::openat(view, rule::MANIFEST_FILE, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Err("is missing".into()),
        Err(e) => return Err(format!("cannot be opened: {}", errno(e))),
    };
    let mut bytes = Vec::new();
    std::fs::File::from(fd).read_to_end(&mut bytes).map_err(|e| format!("cannot be read: {e}"))?;
    ViewManifest::parse(&bytes)
}

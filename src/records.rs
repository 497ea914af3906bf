//! On-disk records, one per table (see `schema.rs`). Kept apart from the domain types so the
//! format changes only on purpose. Each record checks itself after decoding
//! ([`Checked::check`]), so a value that decodes but contradicts itself is reported as
//! corruption instead of being trusted.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Corruption, Error};
use crate::grain::{Grain, Reconciliation};
use crate::lifecycle::{CleanupReason, KeepReason, PlannedPath, SkipReason};
use crate::model::{
    AttemptKey, AttemptStatus, Candidate, Effect, EffectClaim, EffectKey, EffectStatus, FileEntry, Generation, GenerationKind,
    NondeterminismOverride, PartitionEntry, Verdict,
};
use crate::schema::{self, Def};

/// Decodes a record stored in `table` under `key` and checks it: the one place a stored value
/// becomes a record. A bad frame, checksum or payload, or a record that contradicts itself, is
/// [`Error::Corrupted`] naming table and key.
pub(crate) fn decode<R: Checked>(table: &'static str, key: &[u8], bytes: &[u8]) -> Result<R, Error> {
    let record: R = crate::codec::decode(table, key, bytes)?;
    record.check().map_err(|message| Error::Corrupted {
        table,
        key: crate::codec::printable_key(key),
        detail: Corruption::Inconsistent { message },
    })?;
    Ok(record)
}

/// A record that can check its own consistency once decoded.
pub(crate) trait Checked: Serialize + DeserializeOwned {
    /// The table records of this type are stored in: its name is part of every frame's
    /// checksum (see `codec.rs`).
    const TABLE: Def;

    /// `Err(message)` when the record contradicts itself.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MetaRecord {
    pub(crate) format_version: u32,
    pub(crate) created_at_ms: u64,
    /// The longest attempt lifetime any writer has opened the store with. It only grows, so
    /// that a process opened with a shorter lifetime (an operator's CLI with the default) can
    /// neither abandon a scheduler's attempt early nor plan a cleanup inside its lease.
    pub(crate) attempt_lifetime_max_ms: u64,
    /// The staging identity: the staging root's marker file must name it (see
    /// `rules::staging`).
    pub(crate) staging_identity: String,
}
impl Checked for MetaRecord {
    const TABLE: Def = schema::META;
    fn check(&self) -> Result<(), String> {
        if self.staging_identity.is_empty() || !self.staging_identity.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("staging identity {:?} is not a hex string", self.staging_identity));
        }
        Ok(())
    }
}

/// The store's view root (key `views` of `meta_v1`): it belongs to the store, like the attempt
/// lease, so every writable handle keeps the views, an operator's CLI included.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ViewsRecord {
    /// The canonical, absolute view root.
    pub(crate) root: String,
    /// Copies instead of hard links.
    pub(crate) copy: bool,
}
impl Checked for ViewsRecord {
    const TABLE: Def = schema::META;
    fn check(&self) -> Result<(), String> {
        // A local directory (canonical) or a root on object storage (`s3://bucket/prefix`).
        if self.root.starts_with('/') || self.root.starts_with("s3://") {
            Ok(())
        } else {
            Err(format!("view root {:?} is neither an absolute path nor an s3:// URL", self.root))
        }
    }
}

/// Which datasets get directory trees under the store's view root (key `view_trees` of
/// `meta_v1`; see [`crate::ViewTrees`]). Absent beside a [`ViewsRecord`]: the root was recorded
/// before the setting existed, and every dataset keeps its trees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ViewTreesRecord {
    /// Every dataset.
    pub(crate) all: bool,
    /// Else the named datasets, sorted, each once.
    pub(crate) datasets: Vec<String>,
}
impl Checked for ViewTreesRecord {
    const TABLE: Def = schema::META;
    fn check(&self) -> Result<(), String> {
        if self.all && !self.datasets.is_empty() {
            return Err("names datasets beside `all`".into());
        }
        if self.datasets.windows(2).any(|w| w[0] >= w[1]) {
            return Err("dataset names not sorted and unique".into());
        }
        if self.datasets.iter().any(String::is_empty) {
            return Err("an empty dataset name".into());
        }
        Ok(())
    }
}

impl ViewTreesRecord {
    /// The record of `trees`.
    pub(crate) fn of(trees: &crate::ViewTrees) -> ViewTreesRecord {
        match trees {
            crate::ViewTrees::Off => ViewTreesRecord { all: false, datasets: Vec::new() },
            crate::ViewTrees::All => ViewTreesRecord { all: true, datasets: Vec::new() },
            crate::ViewTrees::Only(names) => ViewTreesRecord { all: false, datasets: names.iter().cloned().collect() },
        }
    }

    /// The setting it records.
    pub(crate) fn trees(&self) -> crate::ViewTrees {
        match (self.all, self.datasets.is_empty()) {
            (true, _) => crate::ViewTrees::All,
            (false, true) => crate::ViewTrees::Off,
            (false, false) => crate::ViewTrees::Only(self.datasets.iter().cloned().collect()),
        }
    }
}

/// The runs a writable handle begins attempts in without a commit of their own (key
/// `lazy_begins` of `meta_v1`; redb only): written, durably, before the first such begin of a
/// run, and removed by the next open. Found by an open that had to repair the store (its
/// writer crashed), it means a begin of each of those runs may have been acknowledged and then
/// forgotten: every task of the run skips one attempt number (see `store::lazy`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LazyBeginsRecord {
    /// (dataset, run) pairs, each once.
    pub(crate) runs: Vec<(String, String)>,
}
impl Checked for LazyBeginsRecord {
    const TABLE: Def = schema::META;
    fn check(&self) -> Result<(), String> {
        if self.runs.iter().any(|(dataset, run)| dataset.is_empty() || run.is_empty()) {
            return Err("a lazy-begins run with an empty name".into());
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    pub(crate) snapshot: String,
    pub(crate) task_count: u64,
    pub(crate) declared_at_ms: u64,
    pub(crate) published_generation: Option<u64>,
    /// The output's declared grain; `None` keeps the reported-figure checks.
    pub(crate) grain: Option<Grain>,
}
impl Checked for RunRecord {
    const TABLE: Def = schema::RUNS;
    fn check(&self) -> Result<(), String> {
        if self.task_count == 0 {
            return Err("run declares no task".into());
        }
        if self.published_generation == Some(0) {
            return Err("run published as generation 0".into());
        }
        if let Some(grain) = &self.grain {
            crate::rules::ids::check_grain(grain).map_err(|e| format!("declared grain is not acceptable: {e}"))?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TaskRecord {
    pub(crate) expected_rows: u64,
    pub(crate) expected_total: Option<i64>,
    /// The number the next attempt gets; attempts 1..next_attempt were begun (cleanup removes
    /// the records of dead, unreferenced ones, so some of them may be gone).
    pub(crate) next_attempt: u32,
}
impl Checked for TaskRecord {
    const TABLE: Def = schema::TASKS;
    fn check(&self) -> Result<(), String> {
        if self.next_attempt == 0 { Err("next attempt number is 0".into()) } else { Ok(()) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AttemptRecord {
    pub(crate) started_at_ms: u64,
    /// Last sign of life (the start, or a heartbeat); the lease runs from here.
    pub(crate) heartbeat_at_ms: u64,
    /// Set when the attempt was declared abandoned (its lease ran out unfinished).
    pub(crate) abandoned_at_ms: Option<u64>,
    pub(crate) staging_rel: String,
    pub(crate) candidate: Option<Candidate>,
    pub(crate) verdict: Option<Verdict>,
    /// The verdict's figures (expected, reported, computed); written with the verdict.
    pub(crate) reconciliation: Option<Reconciliation>,
}
impl Checked for AttemptRecord {
    const TABLE: Def = schema::ATTEMPTS;
    fn check(&self) -> Result<(), String> {
        if self.verdict.is_some() && self.candidate.is_none() {
            return Err("attempt has a verdict but no candidate".into());
        }
        if self.verdict.is_some() != self.reconciliation.is_some() {
            return Err("attempt's verdict and its figures are not stored together".into());
        }
        if let (Some(Verdict::Valid), Some(figures)) = (&self.verdict, &self.reconciliation) {
            let (rows, total, digest) = figures.effective();
            if rows != Some(figures.expected_rows) || digest.is_none() {
                return Err("attempt is valid but its figures do not reconcile with the expectations".into());
            }
            if figures.expected_total.is_some() && total != figures.expected_total {
                return Err("attempt is valid but its total differs from the expected one".into());
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AcceptedRecord {
    pub(crate) attempt: u32,
}
impl Checked for AcceptedRecord {
    const TABLE: Def = schema::ACCEPTED;
    fn check(&self) -> Result<(), String> {
        if self.attempt == 0 { Err("accepted attempt 0".into()) } else { Ok(()) }
    }
}

/// The content of one partition from a given generation on. `None` would mark a partition
/// removed from the dataset (reserved for rollback).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PartitionVersionRecord {
    pub(crate) entry: Option<PartitionEntryRecord>,
}
impl Checked for PartitionVersionRecord {
    const TABLE: Def = schema::VERSIONS;
}

impl PartitionVersionRecord {
    /// The partition entry this version holds (of `partition`, current since
    /// `since_generation`), or `None` for a removed partition. Both storage layers read
    /// manifests through it.
    pub(crate) fn into_entry(self, partition: &str, since_generation: u64) -> Option<PartitionEntry> {
        self.entry.map(|e| PartitionEntry {
            partition: partition.to_owned(),
            since_generation,
            run: e.run,
            attempt: e.attempt,
            snapshot: e.snapshot,
            rows: e.rows,
            total: e.total,
            digest: e.digest,
            staging_rel: e.staging_rel,
            staging_dir: None,
            files: e.files,
            // Not recorded with the version: `Snapshot` reads it from the run's record.
            figures_checked: false,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PartitionEntryRecord {
    pub(crate) run: String,
    pub(crate) attempt: u32,
    pub(crate) snapshot: String,
    pub(crate) rows: u64,
    pub(crate) total: Option<i64>,
    pub(crate) digest: String,
    pub(crate) staging_rel: String,
    pub(crate) files: Vec<FileEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GenerationRecord {
    pub(crate) parent: u64,
    pub(crate) run: String,
    pub(crate) snapshot: String,
    pub(crate) published_at_ms: u64,
    pub(crate) partitions_replaced: u64,
    pub(crate) nondeterminism_accepted: Option<NondeterminismOverride>,
    pub(crate) kind: GenerationKind,
}
impl Checked for GenerationRecord {
    const TABLE: Def = schema::GENERATIONS;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PointerRecord {
    pub(crate) generation: u64,
}
impl Checked for PointerRecord {
    const TABLE: Def = schema::POINTERS;
    fn check(&self) -> Result<(), String> {
        if self.generation == 0 { Err("pointer names generation 0".into()) } else { Ok(()) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DigestRecord {
    pub(crate) digest: String,
    pub(crate) run: String,
    pub(crate) generation: u64,
}
impl Checked for DigestRecord {
    const TABLE: Def = schema::DIGESTS;
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct EffectRecord {
    pub(crate) payload: Vec<u8>,
    pub(crate) recorded_at_ms: u64,
    pub(crate) status: EffectStatus,
    /// The last claim (format 3); kept once emitted.
    pub(crate) claim: Option<EffectClaim>,
}
impl Checked for EffectRecord {
    const TABLE: Def = schema::EFFECTS;
    fn check(&self) -> Result<(), String> {
        match (&self.status, &self.claim) {
            (EffectStatus::Recorded, Some(_)) => Err("an effect whose run is not published holds a claim".into()),
            (_, Some(claim)) if claim.expires_at_ms <= claim.claimed_at_ms => {
                Err(format!("claim by {:?} expires before it was granted", claim.claimant))
            }
            _ => Ok(()),
        }
    }
}

/// A persisted cleanup plan (see `rules::cleanup`): everything it considered deleting, kept so
/// that an apply can be audited and re-checked against it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CleanupPlanRecord {
    pub(crate) created_at_ms: u64,
    pub(crate) age_threshold_ms: u64,
    pub(crate) attempt_lifetime_max_ms: u64,
    pub(crate) forced: bool,
    pub(crate) candidates: Vec<PlannedPath>,
    pub(crate) unknown: Vec<PlannedPath>,
    pub(crate) kept: Vec<(KeepReason, u64)>,
    pub(crate) unconsidered: Vec<String>,
}
impl Checked for CleanupPlanRecord {
    const TABLE: Def = schema::CLEANUP_PLANS;
    fn check(&self) -> Result<(), String> {
        if !self.forced && self.age_threshold_ms <= self.attempt_lifetime_max_ms {
            return Err("plan's age threshold does not exceed the attempt lifetime, yet it was not forced".into());
        }
        if let Some(p) = self.candidates.iter().find(|p| p.reason == CleanupReason::Unknown) {
            return Err(format!("candidate {:?} has reason unknown", p.path));
        }
        if let Some(p) = self.unknown.iter().find(|p| p.reason != CleanupReason::Unknown) {
            return Err(format!("unknown file {:?} has an owner's reason", p.path));
        }
        Ok(())
    }
}

/// One applied batch of a cleanup plan: what it deleted and what it skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CleanupBatchRecord {
    pub(crate) applied_at_ms: u64,
    pub(crate) deleted: Vec<String>,
    pub(crate) bytes_deleted: u64,
    pub(crate) skipped: Vec<(String, SkipReason)>,
    pub(crate) attempt_records_removed: Vec<AttemptKey>,
}
impl Checked for CleanupBatchRecord {
    const TABLE: Def = schema::CLEANUP_BATCHES;
}

/// A stored generation as the API shows it.
pub(crate) fn generation_from(dataset: &str, number: u64, record: GenerationRecord) -> Generation {
    Generation {
        dataset: dataset.to_owned(),
        number,
        parent: record.parent,
        run: record.run,
        snapshot: record.snapshot,
        published_at_ms: record.published_at_ms,
        partitions_replaced: record.partitions_replaced,
        nondeterminism_accepted: record.nondeterminism_accepted,
        kind: record.kind,
    }
}

/// A stored side effect as the API shows it.
pub(crate) fn effect_from(store_id: &str, key: EffectKey, record: EffectRecord) -> Effect {
    Effect {
        key,
        store_id: store_id.to_owned(),
        payload: record.payload,
        recorded_at_ms: record.recorded_at_ms,
        status: record.status,
        claim: record.claim,
    }
}

/// A stored attempt's status.
pub(crate) fn attempt_status(record: &AttemptRecord) -> AttemptStatus {
    match (&record.candidate, &record.verdict, record.abandoned_at_ms) {
        (_, Some(verdict), _) => AttemptStatus::Validated(verdict.clone()),
        (Some(_), None, _) => AttemptStatus::Finished,
        (None, None, Some(abandoned_at_ms)) => AttemptStatus::Abandoned { abandoned_at_ms },
        (None, None, None) => AttemptStatus::Running,
    }
}

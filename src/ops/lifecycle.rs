//! Rollback (a retained generation made current again, as a new generation) and the expiry of
//! generations a retention policy no longer keeps.

use super::corrupted;
use crate::error::Result;
use crate::lifecycle::{ExpireReport, RetentionPolicy, RollbackOutcome, RunMode};
use crate::meta::{Meta, Scope, TxnEnd};
use crate::model::GenerationKind;
use crate::records::{DigestRecord, GenerationRecord, PartitionVersionRecord, generation_from};
use crate::rules::retention;
use crate::schema::{POINTERS, VERSIONS, key, key_u64};

/// Rolls `dataset` back to generation `to` at `now_ms`: version entries only for the
/// partitions whose content differs between the current generation and `to` (a removal marker
/// for a partition `to` did not have), the digests they now hold, the generation record, then
/// the pointer. A refusal ([`crate::RollbackRefusal`]) writes nothing.
pub(crate) fn rollback(
    meta: &mut dyn Meta,
    dataset: &str,
    to: u64,
    actor: &str,
    reason: &str,
    now_ms: u64,
) -> Result<TxnEnd<RollbackOutcome>> {
    meta.lock(Scope::Dataset(dataset))?;
    let refused = |refusal| Ok(TxnEnd::Abort(RollbackOutcome::Refused(refusal)));
    let current = match retention::rollback_target(meta.pointer(dataset)?, to) {
        Ok(current) => current,
        Err(refusal) => return refused(refusal),
    };
    let Some(target) = meta.generation(dataset, to)? else {
        let oldest = meta.generation_times(dataset)?.first().map(|(n, _)| *n);
        return refused(retention::rollback_expired(to, oldest, current));
    };
    // Both generations' partitions, checked against their records: a rollback never writes
    // over partitions a damaged read lost.
    let Some(now_record) = meta.generation(dataset, current)? else {
        return Err(corrupted(POINTERS, &key(&[dataset]), format!("pointer names generation {current}, which does not exist")));
    };
    let now_parts = super::generation_partitions(meta, dataset, current, &now_record.kind, now_record.partitions_replaced)?;
    let target_parts = super::generation_partitions(meta, dataset, to, &target.kind, target.partitions_replaced)?;
    let restores = retention::rollback_diff(&now_parts, &target_parts);
    let number = current.checked_add(1).ok_or_else(|| corrupted(POINTERS, &key(&[dataset]), "generation number overflows"))?;
    for restore in &restores {
        let record = match restore.from_version {
            None => PartitionVersionRecord { entry: None },
            Some(version) => meta.version(dataset, &restore.partition, version)?.ok_or_else(|| {
                corrupted(VERSIONS, &key_u64(&[dataset, &restore.partition], version), "visible version vanished during rollback")
            })?,
        };
        // The restored content is what the partition now holds from its snapshot: the
        // determinism check of the next rerun on that snapshot compares against it. The record
        // names the run that published this content and the generation it published it in, as
        // a publish's record does.
        if let Some(entry) = &record.entry {
            let published = meta.run(dataset, &entry.run)?.and_then(|r| r.published_generation).ok_or_else(|| {
                corrupted(VERSIONS, &key_u64(&[dataset, &restore.partition], number), "restored content of an unpublished run")
            })?;
            let digest = DigestRecord { digest: entry.digest.clone(), run: entry.run.clone(), generation: published };
            meta.put_digest(dataset, &entry.snapshot, &restore.partition, &digest)?;
        }
        meta.put_version(dataset, &restore.partition, number, &record)?;
    }
    let record = GenerationRecord {
        parent: current,
        run: target.run,
        snapshot: target.snapshot,
        published_at_ms: now_ms,
        partitions_replaced: restores.len() as u64,
        nondeterminism_accepted: None,
        kind: GenerationKind::Rollback { restored: to, actor: actor.to_owned(), reason: reason.to_owned() },
    };
    meta.put_generation(dataset, number, &record)?;
    // The pointer only moves forward, and only once the new generation is complete.
    meta.move_pointer(dataset, current, number)?;
    tracing::info!(dataset, restored = to, generation = number, actor, reason, partitions = restores.len(), "rolled back");
    Ok(TxnEnd::Commit(RollbackOutcome::RolledBack(generation_from(dataset, number, record))))
}

/// Expires the generations of `dataset` that `policy` does not retain at `now_ms`: their
/// records, and the version entries no retained generation can see (`rules::retention`). In a
/// dry run (or with nothing to expire) nothing is written and the report says what would go.
/// `remove_views` runs once the decision is made and before the first write, with the
/// generations to expire (file work: their views go before the expiry can commit); its
/// failure aborts the expiry.
pub(crate) fn expire(
    meta: &mut dyn Meta,
    dataset: &str,
    policy: &RetentionPolicy,
    mode: RunMode,
    now_ms: u64,
    remove_views: &mut dyn FnMut(&[u64]) -> Result<Vec<u64>>,
) -> Result<TxnEnd<ExpireReport>> {
    meta.lock(Scope::Dataset(dataset))?;
    let current = meta.pointer(dataset)?.unwrap_or(0);
    let list = meta.generation_times(dataset)?;
    if list.last().map_or(0, |(n, _)| *n) != current {
        return Err(corrupted(POINTERS, &key(&[dataset]), "pointer does not name the newest generation"));
    }
    let oldest = retention::oldest_retained(&list, policy, now_ms);
    let expired: Vec<u64> = list.iter().map(|(n, _)| *n).filter(|n| *n < oldest).collect();
    // The dataset's version keys come by partition, then generation: the rule picks the
    // invisible ones of each partition.
    let keys = meta.version_keys(dataset)?;
    let mut doomed: Vec<(&str, u64)> = Vec::new();
    for group in keys.chunk_by(|a, b| a.0 == b.0) {
        let versions: Vec<(u64, bool)> = group.iter().map(|(_, generation, removal)| (*generation, *removal)).collect();
        doomed.extend(retention::versions_to_remove(&versions, oldest).into_iter().map(|generation| (group[0].0.as_str(), generation)));
    }
    let mut report = ExpireReport {
        dataset: dataset.to_owned(),
        mode,
        current,
        oldest_retained: oldest,
        expired,
        versions_removed: doomed.len() as u64,
        views_removed: Vec::new(),
    };
    if mode == RunMode::DryRun || (report.expired.is_empty() && doomed.is_empty()) {
        return Ok(TxnEnd::Abort(report));
    }
    report.views_removed = remove_views(&report.expired)?;
    for (partition, generation) in &doomed {
        meta.remove_version(dataset, partition, *generation)?;
    }
    for number in &report.expired {
        meta.remove_generation(dataset, *number)?;
    }
    tracing::info!(
        dataset,
        oldest_retained = oldest,
        expired = report.expired.len(),
        versions_removed = report.versions_removed,
        "expired generations"
    );
    Ok(TxnEnd::Commit(report))
}

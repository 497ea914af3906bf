//! Rollback: a retained generation made current again, as a new generation.

use super::corrupted;
use crate::error::Result;
use crate::lifecycle::RollbackOutcome;
use crate::meta::{Meta, TxnEnd};
use crate::model::GenerationKind;
use crate::records::{DigestRecord, GenerationRecord, PartitionVersionRecord, generation_from};
use crate::rules::retention;
use crate::schema::{POINTERS, VERSIONS, key, key_u64};

/// Rolls `dataset` back to generation `to` at `now_ms`: version entries only for the
/// partitions whose content differs between the current generation and `to` (a removal marker
/// for a partition `to` did not have), the digests they now hold, the generation record, then
/// the pointer. A refusal ([`crate::RollbackRefusal`]) writes nothing.
pub(crate) fn rollback(
    meta: &mut impl Meta,
    dataset: &str,
    to: u64,
    actor: &str,
    reason: &str,
    now_ms: u64,
) -> Result<TxnEnd<RollbackOutcome>> {
    let refused = |refusal| Ok(TxnEnd::Abort(RollbackOutcome::Refused(refusal)));
    let current = match retention::rollback_target(meta.pointer(dataset)?, to) {
        Ok(current) => current,
        Err(refusal) => return refused(refusal),
    };
    let Some(target) = meta.generation(dataset, to)? else {
        let oldest = meta.generation_times(dataset)?.first().map(|(n, _)| *n);
        return refused(retention::rollback_expired(to, oldest, current));
    };
    let now_parts = meta.partitions_at(dataset, current)?;
    let target_parts = meta.partitions_at(dataset, to)?;
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

//! Which generations are retained, which version entries they can still see, and what a
//! rollback writes.
//!
//! Pure: the store reads the generation list and the version keys, these functions decide.
//!
//! Invariant: the retained generations of a dataset are always a contiguous range ending at
//! the current generation, so expiring removes a prefix of the history; a version entry is
//! removed only if no retained generation can see it (it is superseded by a version written at
//! or before the oldest retained generation, or it is a removal marker visible only from that
//! generation on, when nothing older remains for it to hide).

use crate::lifecycle::{RetentionPolicy, RollbackRefusal};
use crate::model::{GenerationKind, PartitionEntry};

/// Whether the partitions a read of generation `number` found (`entries`, each newest version
/// at or below it) agree with the generation's record, which says how many partitions it
/// replaced; `Err` says how they disagree (the store is damaged: a page of the version table
/// swapped for another, say, would otherwise read as a generation without partitions).
///
/// A publish writes one version entry per task, all visible from its generation on (a later
/// generation writes at its own number), so exactly `partitions_replaced` entries read back
/// with `since_generation == number`. A rollback also writes removal markers, which read back
/// as no entry: at most that many. No entry can be newer than the generation read.
pub(crate) fn generation_entries_agree(
    number: u64,
    kind: &GenerationKind,
    partitions_replaced: u64,
    entries: &[PartitionEntry],
) -> Result<(), String> {
    if let Some(newer) = entries.iter().find(|e| e.since_generation > number) {
        return Err(format!(
            "generation {number} reads partition {:?} from generation {}, which is newer",
            newer.partition, newer.since_generation
        ));
    }
    let written = entries.iter().filter(|e| e.since_generation == number).count() as u64;
    let agrees = match kind {
        GenerationKind::Rollback { .. } => written <= partitions_replaced,
        GenerationKind::Publish => written == partitions_replaced,
    };
    if agrees {
        Ok(())
    } else {
        Err(format!(
            "generation {number} replaced {partitions_replaced} partition(s) but {written} of the partitions read were written by it"
        ))
    }
}

/// The oldest retained generation, given every stored generation `(number, published_at_ms)`
/// in ascending order (the last one is the current one). Returns 0 when there is none.
///
/// A generation is retained if it is among the `keep_last` newest (at least the current one),
/// or was published less than `rollback_window` before `now_ms`, or is newer than a
/// retained generation.
pub(crate) fn oldest_retained(generations: &[(u64, u64)], policy: &RetentionPolicy, now_ms: u64) -> u64 {
    let Some(&(current, _)) = generations.last() else {
        return 0;
    };
    let keep_last = policy.keep_last.max(1);
    let by_count = current.saturating_sub(keep_last - 1).max(1);
    let window_ms = u64::try_from(policy.rollback_window.as_millis()).unwrap_or(u64::MAX);
    let horizon_ms = now_ms.saturating_sub(window_ms);
    let by_age = generations.iter().find(|(_, published)| *published > horizon_ms).map_or(current, |(number, _)| *number);
    by_count.min(by_age).min(current)
}

/// The version entries of one partition to remove, given its versions `(generation,
/// is_removal_marker)` in ascending order and the oldest retained generation.
pub(crate) fn versions_to_remove(versions: &[(u64, bool)], oldest_retained: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for (i, &(generation, removal)) in versions.iter().enumerate() {
        if generation > oldest_retained {
            break;
        }
        let superseded = versions.get(i + 1).is_some_and(|&(next, _)| next <= oldest_retained);
        // A removal marker that is the newest version at or before the oldest retained
        // generation hides nothing once every older version of the partition is gone.
        if superseded || removal {
            out.push(generation);
        }
    }
    out
}

/// Whether a rollback of a dataset whose pointer names `current` (`None`: nothing published)
/// to generation `to` may go on: `Ok(current)`, or the refusal. The target must still be
/// stored ([`rollback_expired`] otherwise).
pub(crate) fn rollback_target(current: Option<u64>, to: u64) -> Result<u64, RollbackRefusal> {
    let Some(current) = current else {
        return Err(RollbackRefusal::Unknown { requested: to, current: None });
    };
    if to == current {
        return Err(RollbackRefusal::AlreadyCurrent { generation: current });
    }
    if to == 0 || to > current {
        return Err(RollbackRefusal::Unknown { requested: to, current: Some(current) });
    }
    Ok(current)
}

/// The refusal of a rollback to `to`, older than `current`, whose generation record is no
/// longer stored: it expired; `oldest_stored` is the dataset's oldest stored generation.
pub(crate) fn rollback_expired(to: u64, oldest_stored: Option<u64>, current: u64) -> RollbackRefusal {
    RollbackRefusal::Expired { requested: to, oldest_retained: oldest_stored.unwrap_or(current) }
}

/// What a rollback writes for one partition: the partition and the generation whose version
/// entry to copy, or `None` to write a removal marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Restore {
    pub(crate) partition: String,
    pub(crate) from_version: Option<u64>,
}

/// The partitions whose visible entry differs between the current generation and the target,
/// in partition order. Both inputs are in partition order (as `partitions_at` returns them);
/// two partitions hold the same content exactly when the same version entry is visible.
pub(crate) fn rollback_diff(current: &[PartitionEntry], target: &[PartitionEntry]) -> Vec<Restore> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    loop {
        match (current.get(i), target.get(j)) {
            (None, None) => return out,
            (Some(c), Some(t)) if c.partition == t.partition => {
                if c.since_generation != t.since_generation {
                    out.push(Restore { partition: t.partition.clone(), from_version: Some(t.since_generation) });
                }
                i += 1;
                j += 1;
            }
            (Some(c), t) if t.is_none_or(|t| c.partition < t.partition) => {
                out.push(Restore { partition: c.partition.clone(), from_version: None });
                i += 1;
            }
            (_, Some(t)) => {
                out.push(Restore { partition: t.partition.clone(), from_version: Some(t.since_generation) });
                j += 1;
            }
            (Some(_), None) => unreachable!("handled by the arm above"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn policy(keep_last: u64, window_ms: u64) -> RetentionPolicy {
        RetentionPolicy { keep_last, rollback_window: Duration::from_millis(window_ms) }
    }

    #[test]
    fn a_rollback_is_refused_to_the_current_a_future_or_a_zero_generation() {
        assert_eq!(rollback_target(None, 1), Err(RollbackRefusal::Unknown { requested: 1, current: None }));
        assert_eq!(rollback_target(Some(3), 3), Err(RollbackRefusal::AlreadyCurrent { generation: 3 }));
        assert_eq!(rollback_target(Some(3), 4), Err(RollbackRefusal::Unknown { requested: 4, current: Some(3) }));
        assert_eq!(rollback_target(Some(3), 0), Err(RollbackRefusal::Unknown { requested: 0, current: Some(3) }));
        assert_eq!(rollback_target(Some(3), 2), Ok(3));
        assert_eq!(rollback_expired(1, Some(2), 3), RollbackRefusal::Expired { requested: 1, oldest_retained: 2 });
        assert_eq!(rollback_expired(1, None, 3), RollbackRefusal::Expired { requested: 1, oldest_retained: 3 });
    }

    #[test]
    fn retained_range_is_the_larger_of_count_and_window() {
        let gens: Vec<(u64, u64)> = (1..=10).map(|n| (n, n * 100)).collect();
        assert_eq!(oldest_retained(&gens, &policy(3, 0), 1_000), 8);
        assert_eq!(oldest_retained(&gens, &policy(3, 550), 1_000), 5, "generations 5.. are younger than 550 ms");
        assert_eq!(oldest_retained(&gens, &policy(0, 0), 1_000), 10, "the current generation is always kept");
        assert_eq!(oldest_retained(&gens, &policy(100, 0), 1_000), 1);
        assert_eq!(oldest_retained(&[], &policy(3, 0), 1_000), 0);
        // After an earlier expiry the history starts later.
        assert_eq!(oldest_retained(&gens[6..], &policy(1, 0), 1_000), 10);
    }

    #[test]
    fn only_versions_invisible_from_the_oldest_retained_generation_go() {
        // Versions at 1, 3, 5, 8; oldest retained 5: 1 and 3 are superseded by 5 <= 5.
        let v = [(1, false), (3, false), (5, false), (8, false)];
        assert_eq!(versions_to_remove(&v, 5), vec![1, 3]);
        assert_eq!(versions_to_remove(&v, 4), vec![1], "3 is still visible in generation 4");
        assert_eq!(versions_to_remove(&v, 1), Vec::<u64>::new());
        // A removal marker visible at the oldest retained generation goes with what it hides.
        assert_eq!(versions_to_remove(&[(1, false), (2, true), (6, false)], 4), vec![1, 2]);
        // But not while an older retained generation can still see the entry it hides.
        assert_eq!(versions_to_remove(&[(1, false), (4, true)], 3), Vec::<u64>::new());
    }

    /// Issue 32, item 3: a generation read without the partitions its record says it replaced
    /// (two pages of the version table swapped) is refused, not read as an empty generation.
    #[test]
    fn a_generations_entries_must_agree_with_its_record() {
        let rollback = GenerationKind::Rollback { restored: 1, actor: "a".into(), reason: "r".into() };
        let two = [entry("a", 3), entry("b", 2)];
        assert_eq!(generation_entries_agree(3, &GenerationKind::Publish, 1, &two), Ok(()));
        assert!(generation_entries_agree(3, &GenerationKind::Publish, 1, &[]).unwrap_err().contains("replaced 1 partition(s) but 0"));
        assert!(generation_entries_agree(3, &GenerationKind::Publish, 0, &two).is_err(), "more written than replaced");
        assert!(generation_entries_agree(2, &GenerationKind::Publish, 1, &two).unwrap_err().contains("newer"));
        // A rollback's removal markers read back as no entry: fewer is fine, more is not.
        assert_eq!(generation_entries_agree(3, &rollback, 2, &two), Ok(()));
        assert!(generation_entries_agree(3, &rollback, 0, &two).is_err());
    }

    fn entry(partition: &str, since: u64) -> PartitionEntry {
        PartitionEntry {
            partition: partition.into(),
            since_generation: since,
            run: "r".into(),
            attempt: 1,
            snapshot: "s".into(),
            rows: 0,
            total: None,
            digest: "d".into(),
            staging_dir: None,
            staging_rel: "x".into(),
            files: vec![],
            figures_checked: false,
        }
    }

    #[test]
    fn rollback_rewrites_changed_partitions_and_removes_new_ones() {
        let current = [entry("a", 1), entry("b", 4), entry("d", 5)];
        let target = [entry("a", 1), entry("b", 2), entry("c", 2)];
        assert_eq!(
            rollback_diff(&current, &target),
            vec![
                Restore { partition: "b".into(), from_version: Some(2) },
                Restore { partition: "c".into(), from_version: Some(2) },
                Restore { partition: "d".into(), from_version: None },
            ]
        );
        assert!(rollback_diff(&target, &target).is_empty());
    }
}

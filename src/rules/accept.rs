//! The accepted-attempt rule of the seeds' `accepted_manifest`: per task, the lowest-numbered
//! valid attempt wins.
//!
//! Kept as a keyed index (task -> accepted attempt) and updated per validation in O(1): the new
//! accepted attempt depends only on the current one and the verdict just reached, so the
//! result is the same whatever order attempts finish or are validated in.

/// The task's accepted attempt after attempt `attempt` was validated `valid`.
///
/// Invariant: folding any permutation of a task's verdicts through this function from `None`
/// gives `min { a | a valid }`, i.e. the seeds' `accepted_manifest` without sorting.
pub(crate) fn accepted_after(current: Option<u32>, attempt: u32, valid: bool) -> Option<u32> {
    match (current, valid) {
        (current, false) => current,
        (None, true) => Some(attempt),
        (Some(current), true) => Some(current.min(attempt)),
    }
}

/// The accepted attempt to write after attempt `attempt` of a task was validated `valid`, or
/// `None` when the index does not change. Once the task's run is published its accepted
/// attempt is frozen: a later verdict is stored but changes nothing that was published.
pub(crate) fn accepted_update(run_published: bool, current: Option<u32>, attempt: u32, valid: bool) -> Option<u32> {
    if run_published {
        return None;
    }
    accepted_after(current, attempt, valid).filter(|next| Some(*next) != current)
}

/// The accepted attempt of a task from scratch: the lowest-numbered attempt whose verdict is
/// valid, given `(attempt, valid)` for every attempt with a verdict, in any order.
///
/// This is the rule itself; [`accepted_after`] is its O(1) incremental form for a new verdict.
/// When a verdict changes from valid to invalid (an operator invalidates an attempt whose files
/// were lost), the accepted attempt can move up, which the incremental form cannot express, so
/// the store recomputes it with this function over the task's attempts.
pub(crate) fn lowest_valid(verdicts: impl IntoIterator<Item = (u32, bool)>) -> Option<u32> {
    verdicts.into_iter().filter(|(_, valid)| *valid).map(|(attempt, _)| attempt).min()
}

#[cfg(test)]
mod tests {
    use super::{accepted_after, accepted_update, lowest_valid};

    #[test]
    fn the_index_is_written_only_when_it_changes_and_never_after_the_publish() {
        assert_eq!(accepted_update(false, None, 3, true), Some(3));
        assert_eq!(accepted_update(false, Some(3), 2, true), Some(2));
        assert_eq!(accepted_update(false, Some(2), 3, true), None, "a higher valid attempt changes nothing");
        assert_eq!(accepted_update(false, Some(2), 1, false), None);
        assert_eq!(accepted_update(true, Some(2), 1, true), None, "frozen once published");
        assert_eq!(accepted_update(true, None, 1, true), None);
    }

    #[test]
    fn the_incremental_form_agrees_with_the_rule_and_invalidation_moves_up() {
        let verdicts = [(3, true), (1, false), (2, true), (4, true)];
        let folded = verdicts.iter().fold(None, |current, (attempt, valid)| accepted_after(current, *attempt, *valid));
        assert_eq!(folded, lowest_valid(verdicts));
        // Attempt 2 invalidated: the next valid one (3) becomes accepted.
        assert_eq!(lowest_valid([(3, true), (1, false), (2, false), (4, true)]), Some(3));
        assert_eq!(lowest_valid([(1, false)]), None);
    }

    #[test]
    fn lowest_valid_wins_in_any_order() {
        let verdicts = [(3, true), (1, false), (2, true), (4, true)];
        let mut current = None;
        for (attempt, valid) in verdicts {
            current = accepted_after(current, attempt, valid);
        }
        assert_eq!(current, Some(2));
        let mut current = None;
        for (attempt, valid) in verdicts.iter().rev() {
            current = accepted_after(current, *attempt, *valid);
        }
        assert_eq!(current, Some(2));
    }

    #[test]
    fn invalid_verdicts_never_accept() {
        assert_eq!(accepted_after(None, 1, false), None);
        assert_eq!(accepted_after(Some(5), 1, false), Some(5));
    }
}

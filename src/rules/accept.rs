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

#[cfg(test)]
mod tests {
    use super::accepted_after;

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

//! The cleanup decision: which staging files may be deleted.
//!
//! Pure: the store gathers the facts (which attempt directories retained generations hold,
//! every attempt's state) from one read snapshot and walks the staging root; this module
//! decides. Applying re-runs [`classify`] on each path against facts re-read at apply time.
//!
//! Invariant: a path is a deletion candidate only if no retained generation holds its
//! attempt, its attempt can never be used again (abandoned, invalid, or a finished attempt of
//! an already published run), and it is older than the age threshold by a modification time
//! that does not lie in the future. The deletable attempt states are absorbing: nothing the
//! store does moves an attempt out of them, and no publish or rollback can come to reference
//! one (a publish only takes accepted attempts of unpublished runs; a rollback only restores
//! retained generations, whose entries are counted as references). So a path classified
//! deletable stays deletable, and the apply-time re-check is a second line of defence.

use std::collections::{HashMap, HashSet};

use crate::lifecycle::{CleanupReason, KeepReason, PlannedPath};
use crate::model::{AttemptKey, Verdict};

/// The name prefix of attempt directories (see `rules::ids::staging_rel`).
const ATTEMPT_DIR_PREFIX: &str = "@attempt-";

/// Where an attempt stands, as far as its files are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttemptState {
    /// No candidate and not abandoned: a worker may still be writing.
    Running,
    /// Finished, not validated, run not published: may yet be accepted.
    AwaitingValidation,
    /// Valid, run not published: may be (or become) the accepted attempt.
    ValidUnpublished,
    /// Recorded abandoned: can never finish.
    Abandoned,
    /// Validated invalid: can never be accepted.
    Invalid,
    /// Finished (valid or not yet validated) while its run is published: the run's accepted
    /// attempts are frozen, so this one is either the published one (then a generation refers
    /// to it, or did) or can never be.
    Settled,
}

impl AttemptState {
    /// The state of an attempt from its record and its run.
    pub(crate) fn of(has_candidate: bool, verdict: Option<&Verdict>, abandoned: bool, run_published: bool) -> AttemptState {
        match (has_candidate, verdict, abandoned) {
            (_, Some(Verdict::Invalid(_)), _) => AttemptState::Invalid,
            (false, _, true) => AttemptState::Abandoned,
            (false, _, false) => AttemptState::Running,
            (true, _, _) if run_published => AttemptState::Settled,
            (true, Some(Verdict::Valid), _) => AttemptState::ValidUnpublished,
            (true, None, _) => AttemptState::AwaitingValidation,
        }
    }

    /// `Ok(reason)` if files of an attempt in this state may go (age permitting), else why not.
    fn verdict(self) -> Result<CleanupReason, KeepReason> {
        match self {
            AttemptState::Running => Err(KeepReason::MayBeRunning),
            AttemptState::AwaitingValidation => Err(KeepReason::AwaitingValidation),
            AttemptState::ValidUnpublished => Err(KeepReason::ValidUnpublished),
            AttemptState::Abandoned => Ok(CleanupReason::Abandoned),
            AttemptState::Invalid => Ok(CleanupReason::Invalid),
            AttemptState::Settled => Ok(CleanupReason::NotRetained),
        }
    }
}

/// One attempt as the cleanup rule sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AttemptFact {
    pub(crate) key: AttemptKey,
    pub(crate) state: AttemptState,
    /// The task's accepted index names this attempt.
    pub(crate) accepted: bool,
}

/// What the store knows, from one read snapshot.
#[derive(Debug, Clone, Default)]
pub(crate) struct Facts {
    /// Staging directories (relative to the root) held by some partition version entry. Every
    /// stored entry counts, which is a superset of what retained generations hold.
    pub(crate) referenced: HashSet<String>,
    /// Every attempt by its staging directory.
    pub(crate) attempts: HashMap<String, AttemptFact>,
}

/// A path found under the staging root (never through a symlink).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    /// Relative to the root, `/`-separated, every component a plain name.
    pub(crate) rel: String,
    /// True for a symlink (never followed; deleting it removes the link only).
    pub(crate) symlink: bool,
    pub(crate) size_bytes: u64,
    pub(crate) modified_at_ms: u64,
    /// The entry's identity and times, compared again just before a deletion.
    pub(crate) device: u64,
    pub(crate) inode: u64,
    pub(crate) modified_at_ns: u64,
    pub(crate) changed_at_ns: u64,
}

/// The verdict on one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Class {
    Keep(KeepReason),
    Delete { reason: CleanupReason, attempt: Option<AttemptKey> },
}

/// The attempt directory a path lies in: its components up to the first `@attempt-N`
/// component, when that component is not the last one (the path is inside it). Encoded names
/// never contain `@`, so the first such component is the attempt's own directory.
pub(crate) fn attempt_dir_of(rel: &str) -> Option<&str> {
    let mut end = 0;
    for component in rel.split('/') {
        end += component.len();
        if component.strip_prefix(ATTEMPT_DIR_PREFIX).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
            return (end < rel.len()).then(|| &rel[..end]);
        }
        end += 1;
    }
    None
}

/// Classifies one path. Ownership decides first (a referenced or possibly live attempt's file
/// is kept whatever its age), then age: a path is deletable only if its modification time is
/// not in the future and it is at least `age_threshold_ms` old at `now_ms`.
pub(crate) fn classify(facts: &Facts, path: &Observed, now_ms: u64, age_threshold_ms: u64) -> Class {
    let owner = attempt_dir_of(&path.rel);
    let (reason, attempt) = match owner {
        Some(dir) if facts.referenced.contains(dir) => return Class::Keep(KeepReason::Referenced),
        Some(dir) => match facts.attempts.get(dir) {
            Some(fact) => match fact.state.verdict() {
                Ok(reason) => (reason, Some(fact.key.clone())),
                Err(keep) => return Class::Keep(keep),
            },
            None => (CleanupReason::Unknown, None),
        },
        None => (CleanupReason::Unknown, None),
    };
    if path.modified_at_ms > now_ms {
        return Class::Keep(KeepReason::FutureModificationTime);
    }
    if now_ms - path.modified_at_ms < age_threshold_ms {
        return Class::Keep(KeepReason::TooYoung);
    }
    Class::Delete { reason, attempt }
}

/// The outcome of planning, before it gets an id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Draft {
    pub(crate) candidates: Vec<PlannedPath>,
    pub(crate) unknown: Vec<PlannedPath>,
    pub(crate) kept: Vec<(KeepReason, u64)>,
}

/// Plans a cleanup over the walked paths.
pub(crate) fn plan(facts: &Facts, walked: &[Observed], now_ms: u64, age_threshold_ms: u64) -> Draft {
    let mut draft = Draft::default();
    let mut kept: HashMap<KeepReason, u64> = HashMap::new();
    for path in walked {
        match classify(facts, path, now_ms, age_threshold_ms) {
            Class::Keep(reason) => *kept.entry(reason).or_default() += 1,
            Class::Delete { reason, attempt } => {
                let planned = PlannedPath {
                    path: path.rel.clone(),
                    size_bytes: path.size_bytes,
                    modified_at_ms: path.modified_at_ms,
                    device: path.device,
                    inode: path.inode,
                    modified_at_ns: path.modified_at_ns,
                    changed_at_ns: path.changed_at_ns,
                    reason,
                    attempt,
                };
                if reason == CleanupReason::Unknown { draft.unknown.push(planned) } else { draft.candidates.push(planned) }
            }
        }
    }
    draft.candidates.sort_by(|a, b| a.path.cmp(&b.path));
    draft.unknown.sort_by(|a, b| a.path.cmp(&b.path));
    draft.kept = kept.into_iter().collect();
    draft.kept.sort_by_key(|(reason, _)| *reason as u8);
    draft
}

/// Whether the entry observed at apply time is the very one planned: same device and inode,
/// size, and modification and status-change times to the nanosecond. A new inode renamed into
/// the planned name, or a rewrite, differs in at least one of them (a rewrite by a write that
/// lands in the same clock tick as the plan's observation and keeps the size is the one change
/// no `stat` can see).
pub(crate) fn same_entry(now: &Observed, planned: &PlannedPath) -> bool {
    now.device == planned.device
        && now.inode == planned.inode
        && now.size_bytes == planned.size_bytes
        && now.modified_at_ns == planned.modified_at_ns
        && now.changed_at_ns == planned.changed_at_ns
}

/// Refuses an age threshold that does not exceed the attempt lifetime, unless forced: a file
/// younger than the lifetime may belong to a writer whose abandonment is not recorded yet.
pub(crate) fn check_threshold(age_threshold_ms: u64, attempt_lifetime_max_ms: u64, force: bool) -> Result<(), String> {
    if age_threshold_ms > attempt_lifetime_max_ms || force {
        Ok(())
    } else {
        Err(format!(
            "age threshold of {age_threshold_ms} ms does not exceed the attempt lifetime of {attempt_lifetime_max_ms} ms; \
             a running writer's files could qualify (force it explicitly to proceed)"
        ))
    }
}

/// Whether an attempt's store record may be removed once its directory is gone: it can never
/// be used again, no stored generation holds it, and no accepted index names it (the accepted
/// attempt of a published run is kept as that run's record of what it published).
pub(crate) fn record_removable(facts: &Facts, staging_rel: &str) -> bool {
    match facts.attempts.get(staging_rel) {
        Some(fact) => attempt_dead(fact.state, fact.accepted, facts.referenced.contains(staging_rel)),
        None => false,
    }
}

/// The dead-attempt rule: an attempt can never be used again, so its record may be removed
/// (once its directory is gone or empty), when it is in a deletable state (abandoned, invalid,
/// or settled by its run's publication), its task's accepted index does not name it, and no
/// version entry holds its staging directory. The accepted attempt of a published run keeps
/// its record: it is the run's account of what it published.
pub(crate) fn attempt_dead(state: AttemptState, accepted: bool, referenced: bool) -> bool {
    !accepted && !referenced && state.verdict().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TaskKey;

    const HOUR_MS: u64 = 3_600_000;
    const NOW: u64 = 1_000 * HOUR_MS;

    fn facts(states: &[(&str, AttemptState)], referenced: &[&str]) -> Facts {
        let task = TaskKey::new("d", "r", "p");
        Facts {
            referenced: referenced.iter().map(|s| (*s).to_owned()).collect(),
            attempts: states
                .iter()
                .enumerate()
                .map(|(i, (dir, state))| {
                    ((*dir).to_owned(), AttemptFact { key: task.attempt(i as u32 + 1), state: *state, accepted: false })
                })
                .collect(),
        }
    }

    fn file(rel: &str, age_ms: i64) -> Observed {
        let modified_at_ms = (NOW as i64 - age_ms) as u64;
        Observed {
            rel: rel.into(),
            symlink: false,
            size_bytes: 1,
            modified_at_ms,
            device: 1,
            inode: 1,
            modified_at_ns: modified_at_ms * 1_000_000,
            changed_at_ns: modified_at_ms * 1_000_000,
        }
    }

    #[test]
    fn attempt_dirs_are_found_by_their_first_attempt_component() {
        assert_eq!(attempt_dir_of("d/r/p/@attempt-3/part.csv"), Some("d/r/p/@attempt-3"));
        assert_eq!(attempt_dir_of("d/r/p/@attempt-3/sub/@attempt-4/x"), Some("d/r/p/@attempt-3"));
        assert_eq!(attempt_dir_of("d/r/p/@attempt-3"), None, "the directory itself is not inside it");
        assert_eq!(attempt_dir_of("d/r/p/@attempt-/x"), None);
        assert_eq!(attempt_dir_of("d/r/p/@attempt-1x/x"), None);
        assert_eq!(attempt_dir_of("stray.txt"), None);
    }

    #[test]
    fn only_dead_unreferenced_old_files_are_candidates() {
        use AttemptState::*;
        let f = facts(
            &[
                ("a/@attempt-1", Running),
                ("a/@attempt-2", AwaitingValidation),
                ("a/@attempt-3", ValidUnpublished),
                ("a/@attempt-4", Abandoned),
                ("a/@attempt-5", Invalid),
                ("a/@attempt-6", Settled),
                ("a/@attempt-7", Settled),
            ],
            &["a/@attempt-7", "a/@attempt-8"],
        );
        let old = 10 * HOUR_MS as i64;
        let class = |rel: &str, age| classify(&f, &file(rel, age), NOW, HOUR_MS);
        assert_eq!(class("a/@attempt-1/x", old), Class::Keep(KeepReason::MayBeRunning));
        assert_eq!(class("a/@attempt-2/x", old), Class::Keep(KeepReason::AwaitingValidation));
        assert_eq!(class("a/@attempt-3/x", old), Class::Keep(KeepReason::ValidUnpublished));
        assert!(matches!(class("a/@attempt-4/x", old), Class::Delete { reason: CleanupReason::Abandoned, attempt: Some(_) }));
        assert!(matches!(class("a/@attempt-5/x", old), Class::Delete { reason: CleanupReason::Invalid, .. }));
        assert!(matches!(class("a/@attempt-6/x", old), Class::Delete { reason: CleanupReason::NotRetained, .. }));
        assert_eq!(class("a/@attempt-7/x", old), Class::Keep(KeepReason::Referenced));
        // Referenced by an entry even though no attempt record is known: kept.
        assert_eq!(class("a/@attempt-8/x", old), Class::Keep(KeepReason::Referenced));
        assert!(matches!(class("a/@attempt-9/x", old), Class::Delete { reason: CleanupReason::Unknown, attempt: None }));
        assert!(matches!(class("stray", old), Class::Delete { reason: CleanupReason::Unknown, .. }));
        // Age: young and future files are kept, whatever their owner.
        assert_eq!(class("a/@attempt-4/x", HOUR_MS as i64 - 1), Class::Keep(KeepReason::TooYoung));
        assert_eq!(class("stray", -1), Class::Keep(KeepReason::FutureModificationTime));
        assert!(matches!(class("a/@attempt-4/x", HOUR_MS as i64), Class::Delete { .. }));
    }

    #[test]
    fn plan_separates_unknown_files_and_counts_kept_ones() {
        let f = facts(&[("a/@attempt-1", AttemptState::Abandoned), ("a/@attempt-2", AttemptState::Running)], &[]);
        let old = 10 * HOUR_MS as i64;
        let walked = [file("z", old), file("a/@attempt-1/x", old), file("a/@attempt-2/x", old), file("a/@attempt-1/y", 0)];
        let draft = plan(&f, &walked, NOW, HOUR_MS);
        assert_eq!(draft.candidates.iter().map(|p| p.path.as_str()).collect::<Vec<_>>(), ["a/@attempt-1/x"]);
        assert_eq!(draft.unknown.iter().map(|p| p.path.as_str()).collect::<Vec<_>>(), ["z"]);
        assert_eq!(draft.kept, vec![(KeepReason::MayBeRunning, 1), (KeepReason::TooYoung, 1)]);
    }

    #[test]
    fn threshold_must_exceed_lifetime_unless_forced() {
        assert!(check_threshold(HOUR_MS, HOUR_MS, false).is_err());
        assert!(check_threshold(HOUR_MS - 1, HOUR_MS, false).is_err());
        assert!(check_threshold(HOUR_MS + 1, HOUR_MS, false).is_ok());
        assert!(check_threshold(1, HOUR_MS, true).is_ok());
    }

    #[test]
    fn only_an_unaccepted_unreferenced_attempt_in_a_deletable_state_is_dead() {
        for state in [AttemptState::Abandoned, AttemptState::Invalid, AttemptState::Settled] {
            assert!(attempt_dead(state, false, false), "{state:?}");
            assert!(!attempt_dead(state, true, false), "accepted {state:?}");
            assert!(!attempt_dead(state, false, true), "referenced {state:?}");
        }
        for state in [AttemptState::Running, AttemptState::AwaitingValidation, AttemptState::ValidUnpublished] {
            assert!(!attempt_dead(state, false, false), "{state:?}");
        }
    }

    #[test]
    fn states_follow_the_records() {
        let invalid = Verdict::Invalid(vec![]);
        assert_eq!(AttemptState::of(false, None, false, false), AttemptState::Running);
        assert_eq!(AttemptState::of(false, None, false, true), AttemptState::Running);
        assert_eq!(AttemptState::of(false, None, true, false), AttemptState::Abandoned);
        assert_eq!(AttemptState::of(true, None, false, false), AttemptState::AwaitingValidation);
        assert_eq!(AttemptState::of(true, Some(&Verdict::Valid), false, false), AttemptState::ValidUnpublished);
        assert_eq!(AttemptState::of(true, Some(&Verdict::Valid), false, true), AttemptState::Settled);
        assert_eq!(AttemptState::of(true, None, false, true), AttemptState::Settled);
        assert_eq!(AttemptState::of(true, Some(&invalid), false, false), AttemptState::Invalid);
    }
}

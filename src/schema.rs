//! Every table manifestdb keeps (redb's; their names also name records in errors), and the key
//! encoding.
//!
//! All tables map byte keys to framed byte values (`codec.rs`). Keys are composite: text
//! fields joined by NUL (identifiers never contain NUL, see `rules::ids`), numbers as
//! fixed-width big-endian bytes at the end, so byte order is field order and a prefix of fields
//! is a contiguous key range. Table names carry a version (`_v1`); the format version lives in
//! `meta_v1`.
//!
//! | table | key | value | written by |
//! |---|---|---|---|
//! | `meta_v1` | `"format"` | `MetaRecord` (format version, attempt lease) | create, open (raises the lease) |
//! | `runs_v1` | dataset, run | `RunRecord` (snapshot, tasks, declared grain) | declare, publish |
//! | `tasks_v1` | dataset, run, partition | `TaskRecord` (expectations, next attempt number) | declare, begin |
//! | `attempts_v1` | dataset, run, partition, attempt (u32 BE) | `AttemptRecord` (candidate, verdict and its figures) | begin, finish, validate |
//! | `accepted_v1` | dataset, run, partition | `AcceptedRecord` (lowest valid attempt) | validate |
//! | `partition_versions_v1` | dataset, partition, generation (u64 BE) | `PartitionVersionRecord` | publish |
//! | `generations_v1` | dataset, generation (u64 BE) | `GenerationRecord` | publish |
//! | `pointers_v1` | dataset | `PointerRecord` (current generation) | publish |
//! | `published_digests_v1` | dataset, snapshot, partition | `DigestRecord` (first published digest) | publish |
//! | `effects_v1` | dataset, run, effect, partition ("" for run-level) | `EffectRecord` | record effect, publish, mark emitted |
//! | `cleanup_plans_v1` | plan id (u64 BE) | `CleanupPlanRecord` (every candidate path with its reason) | plan cleanup |
//! | `cleanup_batches_v1` | plan id (u64 BE), batch (u32 BE) | `CleanupBatchRecord` (paths deleted and skipped) | apply cleanup |
//!
//! Rollback writes `partition_versions_v1`, `generations_v1` and `pointers_v1` like a publish;
//! expiring generations removes from `generations_v1` and `partition_versions_v1`; applying a
//! cleanup removes dead attempts from `attempts_v1`; heartbeats and abandonment update
//! `attempts_v1`.

use crate::model::{AttemptKey, EffectKey, TaskKey};

/// A table's name (the redb layer's table definition is `store::tables::definition`). Keeping
/// the name at hand lets every decode error name its table; another storage layer names its
/// tables (or the corruption it reports) by the same names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Def {
    pub(crate) name: &'static str,
}

pub(crate) const META: Def = Def { name: "meta_v1" };
pub(crate) const RUNS: Def = Def { name: "runs_v1" };
pub(crate) const TASKS: Def = Def { name: "tasks_v1" };
pub(crate) const ATTEMPTS: Def = Def { name: "attempts_v1" };
pub(crate) const ACCEPTED: Def = Def { name: "accepted_v1" };
pub(crate) const VERSIONS: Def = Def { name: "partition_versions_v1" };
pub(crate) const GENERATIONS: Def = Def { name: "generations_v1" };
pub(crate) const POINTERS: Def = Def { name: "pointers_v1" };
pub(crate) const DIGESTS: Def = Def { name: "published_digests_v1" };
pub(crate) const EFFECTS: Def = Def { name: "effects_v1" };
pub(crate) const CLEANUP_PLANS: Def = Def { name: "cleanup_plans_v1" };
pub(crate) const CLEANUP_BATCHES: Def = Def { name: "cleanup_batches_v1" };

/// Every table, so that creation and verification can walk them all.
pub(crate) const ALL_TABLES: [Def; 12] =
    [META, RUNS, TASKS, ATTEMPTS, ACCEPTED, VERSIONS, GENERATIONS, POINTERS, DIGESTS, EFFECTS, CLEANUP_PLANS, CLEANUP_BATCHES];

/// The store format this build writes and reads.
/// - 2 (released): every frame's checksum covers the table and the key it is stored under
///   (`codec.rs`), and the meta record holds the staging identity.
/// - 3: a run records its declared grain, a candidate's rows and digest are optional, and a
///   verdict is stored with its figures (`Reconciliation`). A version-2 store is refused with
///   [`crate::Error::UnsupportedFormat`] (`tests/fixtures/format-v2.redb` guards it). An
///   effect record holds its emitter's last claim (`EffectRecord::claim`).
pub(crate) const FORMAT_VERSION: u32 = 3;

/// The key of the format record in `meta_v1`.
pub(crate) const META_FORMAT_KEY: &[u8] = b"format";
/// The key of the store's view root in `meta_v1` (a [`crate::records::ViewsRecord`]); absent
/// for a store that publishes no views. A separate key, so the format record is unchanged.
pub(crate) const META_VIEWS_KEY: &[u8] = b"views";
/// The key of the store's choice of directory trees in `meta_v1` (a
/// [`crate::records::ViewTreesRecord`]); absent for a store whose view root was recorded before
/// the choice existed (every dataset then keeps its trees).
pub(crate) const META_VIEW_TREES_KEY: &[u8] = b"view_trees";

/// The key of the runs a writer begins attempts in without a commit of their own in `meta_v1`
/// (a [`crate::records::LazyBeginsRecord`]); absent unless a writer opened without
/// cross-process readers began attempts since the last open. A separate key, so the format
/// record is unchanged.
pub(crate) const META_LAZY_BEGINS_KEY: &[u8] = b"lazy_begins";

/// Joins text fields with NUL: `a\0b\0c`.
pub(crate) fn key(fields: &[&str]) -> Vec<u8> {
    let mut out = Vec::with_capacity(fields.iter().map(|f| f.len() + 1).sum());
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            out.push(0);
        }
        out.extend_from_slice(field.as_bytes());
    }
    out
}

/// The prefix of every key whose leading fields are `fields`: `a\0b\0`.
pub(crate) fn prefix(fields: &[&str]) -> Vec<u8> {
    let mut out = key(fields);
    out.push(0);
    out
}

/// The first byte string after every key that starts with `prefix` (which ends in NUL).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    debug_assert_eq!(prefix.last(), Some(&0));
    let mut end = prefix.to_vec();
    if let Some(last) = end.last_mut() {
        *last = 1;
    }
    end
}

/// `fields\0` followed by `n` as 8 big-endian bytes.
pub(crate) fn key_u64(fields: &[&str], n: u64) -> Vec<u8> {
    let mut out = prefix(fields);
    out.extend_from_slice(&n.to_be_bytes());
    out
}

/// `fields\0` followed by `n` as 4 big-endian bytes.
pub(crate) fn key_u32(fields: &[&str], n: u32) -> Vec<u8> {
    let mut out = prefix(fields);
    out.extend_from_slice(&n.to_be_bytes());
    out
}

/// Splits `prefix` + `text\0` + 8-byte number (a version or generation key after its
/// dataset prefix). `None` if the key does not have that shape.
pub(crate) fn split_text_u64(rest: &[u8]) -> Option<(&str, u64)> {
    let (head, number) = rest.split_at_checked(rest.len().checked_sub(8)?)?;
    let (text, nul) = head.split_at_checked(head.len().checked_sub(1)?)?;
    if nul != [0] || text.contains(&0) {
        return None;
    }
    let text = std::str::from_utf8(text).ok()?;
    Some((text, u64::from_be_bytes(number.try_into().ok()?)))
}

/// The trailing 4-byte number of an attempt key.
pub(crate) fn trailing_u32(key: &[u8]) -> Option<u32> {
    let (_, number) = key.split_at_checked(key.len().checked_sub(4)?)?;
    Some(u32::from_be_bytes(number.try_into().ok()?))
}

/// The trailing 8-byte number of a generation key.
pub(crate) fn trailing_u64(key: &[u8]) -> Option<u64> {
    let (_, number) = key.split_at_checked(key.len().checked_sub(8)?)?;
    Some(u64::from_be_bytes(number.try_into().ok()?))
}

/// The text after `prefix` in a key made only of NUL-joined text fields.
pub(crate) fn text_after<'k>(key: &'k [u8], prefix: &[u8]) -> Option<&'k str> {
    let rest = key.strip_prefix(prefix)?;
    if rest.contains(&0) {
        return None;
    }
    std::str::from_utf8(rest).ok()
}

/// The text fields of a key made only of NUL-joined text fields, if it has exactly `count`.
pub(crate) fn text_fields(key: &[u8], count: usize) -> Option<Vec<String>> {
    let fields: Vec<&[u8]> = key.split(|b| *b == 0).collect();
    if fields.len() != count {
        return None;
    }
    fields.into_iter().map(|f| std::str::from_utf8(f).ok().map(str::to_owned)).collect()
}

/// `count` NUL-joined text fields, a NUL, then a big-endian number of `width` bytes (at most
/// 8), as [`key_u32`] and [`key_u64`] make them.
pub(crate) fn fields_and_number(key: &[u8], count: usize, width: usize) -> Option<(Vec<String>, u64)> {
    let (head, number) = key.split_at_checked(key.len().checked_sub(width)?)?;
    let (head, nul) = head.split_at_checked(head.len().checked_sub(1)?)?;
    if nul != [0] || width > 8 {
        return None;
    }
    let mut value = 0u64;
    for b in number {
        value = (value << 8) | u64::from(*b);
    }
    Some((text_fields(head, count)?, value))
}

/// An `attempts_v1` key back into the attempt it names: dataset, run, partition, number.
pub(crate) fn parse_attempt_key(raw: &[u8]) -> Option<AttemptKey> {
    let (fields, number) = fields_and_number(raw, 3, 4)?;
    let [dataset, run, partition]: [String; 3] = fields.try_into().ok()?;
    Some(TaskKey { dataset, run, partition }.attempt(u32::try_from(number).ok()?))
}

/// An `effects_v1` key back into the effect it names (an empty partition is a run-level
/// effect).
pub(crate) fn parse_effect_key(raw: &[u8]) -> Option<EffectKey> {
    let [dataset, run, effect, partition]: [String; 4] = text_fields(raw, 4)?.try_into().ok()?;
    Some(EffectKey { dataset, run, effect, partition: (!partition.is_empty()).then_some(partition) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_and_effect_keys_parse_back_and_malformed_ones_do_not() {
        let attempt = TaskKey::new("ds", "r1", "date=1/region=eu").attempt(7);
        assert_eq!(parse_attempt_key(&key_u32(&["ds", "r1", "date=1/region=eu"], 7)), Some(attempt));
        assert_eq!(parse_attempt_key(&key_u32(&["ds", "r1"], 7)), None, "two fields");
        assert_eq!(parse_attempt_key(&key_u64(&["ds", "r1", "p"], 7)), None, "an 8-byte number");
        assert_eq!(parse_attempt_key(b"x"), None);
        let effect = EffectKey { dataset: "ds".into(), run: "r1".into(), effect: "mail".into(), partition: None };
        assert_eq!(parse_effect_key(&key(&["ds", "r1", "mail", ""])), Some(effect));
        assert_eq!(parse_effect_key(&key(&["ds", "r1", "mail"])), None);
    }

    #[test]
    fn keys_parse_into_fields_and_numbers() {
        let key = key_u32(&["ds", "run", "a/b"], 7);
        assert_eq!(fields_and_number(&key, 3, 4), Some((vec!["ds".into(), "run".into(), "a/b".into()], 7)));
        // A number whose bytes contain NUL does not confuse the split.
        let key = key_u64(&["ds", "p"], 256);
        assert_eq!(fields_and_number(&key, 2, 8), Some((vec!["ds".into(), "p".into()], 256)));
        assert_eq!(fields_and_number(b"short", 2, 8), None);
        assert_eq!(text_fields(b"a\0b", 3), None);
        assert_eq!(text_fields(b"a\0\0", 3), Some(vec!["a".into(), String::new(), String::new()]));
    }

    #[test]
    fn prefix_ranges_cover_exactly_their_fields() {
        let p = prefix(&["ds", "part"]);
        let end = prefix_end(&p);
        let inside = key_u64(&["ds", "part"], u64::MAX);
        let longer_name = key_u64(&["ds", "partX"], 0);
        let nested = key_u64(&["ds", "part/sub"], 0);
        assert!(p.as_slice() <= inside.as_slice() && inside < end);
        assert!(longer_name >= end);
        assert!(nested >= end);
    }

    #[test]
    fn keys_split_back() {
        let k = key_u64(&["ds", "date=1/region=eu"], 42);
        let rest = k.strip_prefix(prefix(&["ds"]).as_slice()).unwrap();
        assert_eq!(split_text_u64(rest), Some(("date=1/region=eu", 42)));
        assert_eq!(split_text_u64(b"short"), None);
        assert_eq!(trailing_u32(&key_u32(&["a"], 7)), Some(7));
    }
}

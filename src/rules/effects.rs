//! Who may emit a side effect: claims with a lease, and marking an effect emitted.
//!
//! Several emitters (processes, hosts) may look at the same ready effect. To emit it once, an
//! emitter first *claims* it for a lease; while the claim is live nobody else can claim it or
//! mark it emitted, so only the claimant emits. A claimant that dies leaves a claim that runs
//! out, and then another emitter may take it over. Marking the effect emitted ends the matter:
//! any later claim or mark is told it was already emitted.
//!
//! Both decisions are pure functions over the effect's status, its current claim and the
//! caller's clock reading; the store reads the record, calls them and writes what they decided.

use sha2::{Digest, Sha256};

use crate::model::{EffectClaim, EffectStatus};

/// The store's identity as it names itself to receivers: 32 hex digits of the SHA-256 of the
/// staging identity and the creation time its meta record holds, both written once when the
/// store is created (on every storage layer), so the identity never changes over the store's
/// life, and a store created anew (even over the same, emptied staging root, whose marker it
/// adopts) has another.
pub(crate) fn store_id(staging_identity: &str, created_at_ms: u64) -> String {
    let mut hash = Sha256::new();
    hash.update(b"manifestdb store id\0");
    hash.update(staging_identity.as_bytes());
    hash.update(b"\0");
    hash.update(created_at_ms.to_be_bytes());
    let bytes: [u8; 32] = hash.finalize().into();
    hex::encode(&bytes[..16])
}

/// What a claim request leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClaimDecision {
    /// Grant the claim (new, renewed by the same claimant, or taken over from an expired
    /// claim, whose claimant is given).
    Grant {
        /// The claimant of the expired claim this one replaces.
        took_over_from: Option<String>,
    },
    /// Another claimant holds a live claim.
    HeldByOther,
    /// The effect was already marked emitted.
    AlreadyEmitted,
    /// The effect's run is not published: it must not be emitted yet.
    NotReady,
}

/// What a request to mark an effect emitted leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MarkDecision {
    /// Mark it emitted.
    Mark,
    /// It already was: nothing changes.
    AlreadyEmitted,
    /// Someone else holds a live claim: only they may mark it.
    ClaimedByOther,
    /// The effect's run is not published.
    NotReady,
}

/// Whether a claim is live at `now_ms`. A claim is live up to, not including, its expiry.
pub(crate) fn is_live(claim: &EffectClaim, now_ms: u64) -> bool {
    now_ms < claim.expires_at_ms
}

/// Decides a claim by `claimant` at `now_ms`.
pub(crate) fn claim(status: &EffectStatus, current: Option<&EffectClaim>, claimant: &str, now_ms: u64) -> ClaimDecision {
    match status {
        EffectStatus::Recorded => ClaimDecision::NotReady,
        EffectStatus::Emitted { .. } => ClaimDecision::AlreadyEmitted,
        EffectStatus::Ready { .. } => match current {
            None => ClaimDecision::Grant { took_over_from: None },
            Some(held) if held.claimant == claimant => ClaimDecision::Grant { took_over_from: None },
            Some(held) if is_live(held, now_ms) => ClaimDecision::HeldByOther,
            Some(held) => ClaimDecision::Grant { took_over_from: Some(held.claimant.clone()) },
        },
    }
}

/// Decides a mark by `claimant` (`None`: an emitter that did not claim) at `now_ms`.
///
/// The holder of a live claim is the only one who may mark the effect. Without a live claim
/// anyone may: an emitter that does not claim keeps working as before, and a claimant whose
/// lease ran out after it emitted can still record that it did.
pub(crate) fn mark(status: &EffectStatus, current: Option<&EffectClaim>, claimant: Option<&str>, now_ms: u64) -> MarkDecision {
    match status {
        EffectStatus::Recorded => MarkDecision::NotReady,
        EffectStatus::Emitted { .. } => MarkDecision::AlreadyEmitted,
        EffectStatus::Ready { .. } => match current {
            Some(held) if is_live(held, now_ms) && Some(held.claimant.as_str()) != claimant => MarkDecision::ClaimedByOther,
            _ => MarkDecision::Mark,
        },
    }
}

/// The claim granted to `claimant` at `now_ms` for `lease_ms` (at least 1 ms).
pub(crate) fn granted(claimant: &str, now_ms: u64, lease_ms: u64) -> EffectClaim {
    EffectClaim { claimant: claimant.to_owned(), claimed_at_ms: now_ms, expires_at_ms: now_ms.saturating_add(lease_ms.max(1)) }
}

/// The status of an effect marked emitted at `now_ms` ([`MarkDecision::Mark`]): only a ready
/// effect becomes emitted, keeping the generation that made it ready. `None` for any other
/// status, which [`mark`] never lets through.
pub(crate) fn emitted(status: &EffectStatus, now_ms: u64) -> Option<EffectStatus> {
    match status {
        EffectStatus::Ready { generation } => Some(EffectStatus::Emitted { generation: *generation, emitted_at_ms: now_ms }),
        EffectStatus::Recorded | EffectStatus::Emitted { .. } => None,
    }
}

/// The status of a newly recorded effect: ready at once if its run is published already.
pub(crate) fn recorded(published_generation: Option<u64>) -> EffectStatus {
    match published_generation {
        Some(generation) => EffectStatus::Ready { generation },
        None => EffectStatus::Recorded,
    }
}

/// The status of a run's effect after the run published `generation`: a recorded effect
/// becomes ready; `None` (nothing to write) for one already ready or emitted.
pub(crate) fn on_publish(status: &EffectStatus, generation: u64) -> Option<EffectStatus> {
    (*status == EffectStatus::Recorded).then_some(EffectStatus::Ready { generation })
}

#[cfg(test)]
mod tests {
    use super::*;

    const READY: EffectStatus = EffectStatus::Ready { generation: 1 };
    const EMITTED: EffectStatus = EffectStatus::Emitted { generation: 1, emitted_at_ms: 5 };

    fn held(by: &str, expires_at_ms: u64) -> EffectClaim {
        EffectClaim { claimant: by.into(), claimed_at_ms: 0, expires_at_ms }
    }

    #[test]
    fn the_store_id_is_a_function_of_the_staging_identity_and_the_creation_time() {
        let id = store_id("00ff", 1_700_000_000_000);
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(id, store_id("00ff", 1_700_000_000_000), "the same record gives the same id");
        assert_ne!(id, store_id("00fe", 1_700_000_000_000), "another staging identity");
        assert_ne!(id, store_id("00ff", 1_700_000_000_001), "a store created again over the same root");
        let key = crate::model::EffectKey {
            dataset: "d".into(),
            run: "r".into(),
            effect: "notify".into(),
            partition: Some("date=1/region=eu".into()),
        };
        let effect = crate::model::Effect {
            key: key.clone(),
            store_id: id.clone(),
            payload: Vec::new(),
            recorded_at_ms: 0,
            status: EffectStatus::Recorded,
            claim: None,
        };
        assert_eq!(effect.idempotency_key(), format!("{id}/d/r/notify/date=1/region=eu"));
        let run_level = crate::model::Effect { key: crate::model::EffectKey { partition: None, ..key }, ..effect };
        assert_eq!(run_level.idempotency_key(), format!("{id}/d/r/notify/"));
    }

    #[test]
    fn a_live_claim_refuses_another_claimant_and_an_expired_one_is_taken_over() {
        assert_eq!(claim(&READY, None, "a", 10), ClaimDecision::Grant { took_over_from: None });
        assert_eq!(claim(&READY, Some(&held("a", 100)), "b", 99), ClaimDecision::HeldByOther);
        assert_eq!(claim(&READY, Some(&held("a", 100)), "a", 99), ClaimDecision::Grant { took_over_from: None }, "renewal");
        assert_eq!(claim(&READY, Some(&held("a", 100)), "b", 100), ClaimDecision::Grant { took_over_from: Some("a".into()) });
    }

    #[test]
    fn an_emitted_or_unpublished_effect_cannot_be_claimed() {
        assert_eq!(claim(&EMITTED, None, "a", 0), ClaimDecision::AlreadyEmitted);
        assert_eq!(claim(&EMITTED, Some(&held("a", 100)), "a", 0), ClaimDecision::AlreadyEmitted);
        assert_eq!(claim(&EffectStatus::Recorded, None, "a", 0), ClaimDecision::NotReady);
    }

    #[test]
    fn an_effect_moves_recorded_ready_emitted_and_never_back() {
        assert_eq!(recorded(None), EffectStatus::Recorded);
        assert_eq!(recorded(Some(3)), EffectStatus::Ready { generation: 3 });
        assert_eq!(on_publish(&EffectStatus::Recorded, 1), Some(READY));
        assert_eq!(on_publish(&READY, 2), None);
        assert_eq!(on_publish(&EMITTED, 2), None);
        assert_eq!(emitted(&READY, 5), Some(EMITTED));
        assert_eq!(emitted(&EMITTED, 6), None);
        assert_eq!(emitted(&EffectStatus::Recorded, 6), None);
        assert_eq!(granted("a", 10, 0), EffectClaim { claimant: "a".into(), claimed_at_ms: 10, expires_at_ms: 11 });
        assert_eq!(granted("a", u64::MAX - 1, 5).expires_at_ms, u64::MAX);
    }

    #[test]
    fn only_the_live_claimant_marks() {
        let live = held("a", 100);
        assert_eq!(mark(&READY, Some(&live), Some("a"), 50), MarkDecision::Mark);
        assert_eq!(mark(&READY, Some(&live), Some("b"), 50), MarkDecision::ClaimedByOther);
        assert_eq!(mark(&READY, Some(&live), None, 50), MarkDecision::ClaimedByOther);
        assert_eq!(mark(&READY, Some(&live), Some("b"), 100), MarkDecision::Mark, "expired claim");
        assert_eq!(mark(&READY, None, None, 0), MarkDecision::Mark);
        assert_eq!(mark(&EMITTED, Some(&live), Some("a"), 50), MarkDecision::AlreadyEmitted);
        assert_eq!(mark(&EffectStatus::Recorded, None, None, 0), MarkDecision::NotReady);
    }
}

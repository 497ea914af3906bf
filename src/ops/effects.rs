//! Side effects: record, claim, mark emitted, and ready on publish.

use super::{corrupted, unknown_run, unknown_task};
use crate::error::{Error, Result};
use crate::meta::{Meta, Scope, TxnEnd};
use crate::model::{ClaimOutcome, EffectKey, MarkOutcome, RecordedEffect, TaskKey};
use crate::records::{EffectRecord, effect_from};
use crate::rules::effects::{self, ClaimDecision, MarkDecision};
use crate::schema::{EFFECTS, key};

fn unknown_effect(effect: &EffectKey) -> Error {
    Error::UnknownEffect {
        dataset: effect.dataset.clone(),
        run: effect.run.clone(),
        effect: effect.effect.clone(),
        partition: effect.partition.clone().unwrap_or_default(),
    }
}

fn not_ready(effect: &EffectKey) -> Error {
    Error::EffectNotReady { run: effect.run.clone(), effect: effect.effect.clone() }
}

/// Records an effect under its natural key at `now_ms`; an effect already recorded under it
/// is returned unchanged. `store_id` is the store's identity, which the returned effect carries.
pub(crate) fn record(
    meta: &mut dyn Meta,
    store_id: &str,
    effect: &EffectKey,
    payload: &[u8],
    now_ms: u64,
) -> Result<TxnEnd<RecordedEffect>> {
    meta.lock(Scope::Effect(effect))?;
    let run = meta.run(&effect.dataset, &effect.run)?.ok_or_else(|| unknown_run(&effect.dataset, &effect.run))?;
    if let Some(partition) = &effect.partition {
        let task = TaskKey::new(&effect.dataset, &effect.run, partition);
        meta.task(&task)?.ok_or_else(|| unknown_task(&task))?;
    }
    if let Some(existing) = meta.effect(effect)? {
        return Ok(TxnEnd::Abort(RecordedEffect { effect: effect_from(store_id, effect.clone(), existing), newly_recorded: false }));
    }
    let record = EffectRecord {
        payload: payload.to_vec(),
        recorded_at_ms: now_ms,
        status: effects::recorded(run.published_generation),
        claim: None,
    };
    meta.put_effect(effect, &record)?;
    Ok(TxnEnd::Commit(RecordedEffect { effect: effect_from(store_id, effect.clone(), record), newly_recorded: true }))
}

/// Claims an effect for `claimant` for `lease_ms` at `now_ms`.
pub(crate) fn claim(
    meta: &mut dyn Meta,
    store_id: &str,
    effect: &EffectKey,
    claimant: &str,
    lease_ms: u64,
    now_ms: u64,
) -> Result<TxnEnd<ClaimOutcome>> {
    meta.lock(Scope::Effect(effect))?;
    let mut record = meta.effect(effect)?.ok_or_else(|| unknown_effect(effect))?;
    match effects::claim(&record.status, record.claim.as_ref(), claimant, now_ms) {
        ClaimDecision::NotReady => Err(not_ready(effect)),
        ClaimDecision::HeldByOther => {
            Ok(TxnEnd::Abort(ClaimOutcome::HeldByOther { effect: effect_from(store_id, effect.clone(), record) }))
        }
        ClaimDecision::AlreadyEmitted => {
            Ok(TxnEnd::Abort(ClaimOutcome::AlreadyEmitted { effect: effect_from(store_id, effect.clone(), record) }))
        }
        ClaimDecision::Grant { took_over_from } => {
            record.claim = Some(effects::granted(claimant, now_ms, lease_ms));
            meta.put_effect(effect, &record)?;
            Ok(TxnEnd::Commit(ClaimOutcome::Claimed { effect: effect_from(store_id, effect.clone(), record), took_over_from }))
        }
    }
}

/// Marks an effect emitted at `now_ms` for `claimant` (`None`: an emitter that does not claim).
pub(crate) fn mark(
    meta: &mut dyn Meta,
    store_id: &str,
    effect: &EffectKey,
    claimant: Option<&str>,
    now_ms: u64,
) -> Result<TxnEnd<MarkOutcome>> {
    meta.lock(Scope::Effect(effect))?;
    let mut record = meta.effect(effect)?.ok_or_else(|| unknown_effect(effect))?;
    match (effects::mark(&record.status, record.claim.as_ref(), claimant, now_ms), effects::emitted(&record.status, now_ms)) {
        (MarkDecision::NotReady, _) => Err(not_ready(effect)),
        (MarkDecision::AlreadyEmitted, _) => {
            Ok(TxnEnd::Abort(MarkOutcome::AlreadyEmitted { effect: effect_from(store_id, effect.clone(), record) }))
        }
        (MarkDecision::ClaimedByOther, _) => {
            Ok(TxnEnd::Abort(MarkOutcome::ClaimedByOther { effect: effect_from(store_id, effect.clone(), record) }))
        }
        (MarkDecision::Mark, Some(status)) => {
            record.status = status;
            meta.put_effect(effect, &record)?;
            Ok(TxnEnd::Commit(MarkOutcome::Marked { effect: effect_from(store_id, effect.clone(), record) }))
        }
        (MarkDecision::Mark, None) => Err(corrupted(
            EFFECTS,
            &key(&[&effect.dataset, &effect.run, &effect.effect, effect.partition.as_deref().unwrap_or("")]),
            "an effect not ready was to be marked emitted",
        )),
    }
}

/// Makes every recorded effect of the run ready, in the transaction that publishes it as
/// `generation`. Touches only the run's own effects (one key range).
pub(crate) fn ready_on_publish(meta: &mut dyn Meta, dataset: &str, run: &str, generation: u64) -> Result<()> {
    meta.update_run_effects(dataset, run, &mut |record| {
        effects::on_publish(&record.status, generation).map(|status| EffectRecord { status, ..record })
    })
}

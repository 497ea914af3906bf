//! `effects list`, `effects record`, `effects claim`, `effects mark-emitted`.

use std::io::Write;

use manifestdb::{ClaimOutcome, Effect, EffectKey, MarkOutcome};
use serde_json::json;

use super::{read_input, require_dataset};
use crate::args::{EffectClaimArgs, EffectKeyArgs, EffectMarkArgs, EffectRecordArgs, EffectsListArgs};
use crate::exit::{Exit, not_found};
use crate::json;
use crate::location::LocationArgs;
use crate::output::{Out, Table, escape, opt, utc};

fn effect_key(args: &EffectKeyArgs) -> EffectKey {
    EffectKey { dataset: args.dataset.clone(), run: args.run.clone(), effect: args.effect.clone(), partition: args.partition.clone() }
}

fn effects_table(effects: &[Effect], w: &mut dyn Write) -> std::io::Result<()> {
    let mut table = Table::new(vec!["RUN", "EFFECT", "PARTITION", "STATUS", "GENERATION", "RECORDED", "PAYLOAD"]);
    for e in effects {
        let (status, generation, _) = json::effect_status(&e.status);
        // The table escapes and cuts the text; the exact payload is in --json.
        let payload = match std::str::from_utf8(&e.payload) {
            Ok(text) => text.to_owned(),
            Err(_) => format!("({} bytes, not UTF-8)", e.payload.len()),
        };
        table.row(vec![
            e.key.run.clone(),
            e.key.effect.clone(),
            e.key.partition.clone().unwrap_or_else(|| "-".into()),
            status.to_owned(),
            opt(generation),
            utc(e.recorded_at_ms),
            payload,
        ]);
    }
    table.write(w)
}

/// `effects list`.
pub fn list(location: &LocationArgs, out: &mut Out, args: &EffectsListArgs) -> anyhow::Result<Exit> {
    let store = location.open_reader()?;
    let snapshot = store.snapshot()?;
    require_dataset(&snapshot, &args.dataset)?;
    let effects = match (&args.run, args.ready) {
        (Some(run), ready) => {
            if snapshot.run(&args.dataset, run)?.is_none() {
                return Err(not_found(format!("unknown run {run:?} of dataset {:?}", args.dataset)));
            }
            let mut effects = snapshot.effects(&args.dataset, run)?;
            if ready {
                effects.retain(|e| matches!(e.status, manifestdb::EffectStatus::Ready { .. }));
            }
            effects
        }
        (None, true) => snapshot.ready_effects(&args.dataset)?,
        (None, false) => snapshot.dataset_effects(&args.dataset)?,
    };
    drop(snapshot);
    let doc = json!({ "effects": effects.iter().map(json::effect).collect::<Vec<_>>() });
    crate::location::close_reader(store)?;
    out.emit(&doc, |w| effects_table(&effects, w))?;
    Ok(Exit::Success)
}

/// `effects record`.
pub fn record(location: &LocationArgs, out: &mut Out, args: &EffectRecordArgs) -> anyhow::Result<Exit> {
    let payload = match (&args.payload, &args.payload_file) {
        (Some(text), _) => text.as_bytes().to_vec(),
        (None, Some(path)) => read_input(path)?,
        (None, None) => Vec::new(),
    };
    let store = location.open_writer()?;
    let recorded = store.record_effect(&effect_key(&args.key), &payload)?;
    let doc = json!({ "newly_recorded": recorded.newly_recorded, "effect": json::effect(&recorded.effect) });
    crate::location::close_writer(store)?;
    out.emit(&doc, |w| {
        if !recorded.newly_recorded {
            writeln!(w, "already recorded under this key; nothing written (the first record stands)")?;
        }
        effects_table(std::slice::from_ref(&recorded.effect), w)
    })?;
    Ok(Exit::Success)
}

/// `effects claim`: exit 0 when claimed, 3 when refused.
pub fn claim(location: &LocationArgs, out: &mut Out, args: &EffectClaimArgs) -> anyhow::Result<Exit> {
    let store = location.open_writer()?;
    let outcome = store.claim_effect(&effect_key(&args.key), &args.claimant, args.lease)?;
    crate::location::close_writer(store)?;
    let doc = json::claim_outcome(&outcome);
    let effect = outcome.effect();
    out.emit(&doc, |w| {
        match &outcome {
            ClaimOutcome::Claimed { took_over_from: Some(previous), .. } => {
                writeln!(w, "claimed (taken over from {}, whose claim had expired): emit it, then mark it emitted", escape(previous))?
            }
            ClaimOutcome::Claimed { .. } => writeln!(w, "claimed: emit it, then mark it emitted")?,
            ClaimOutcome::HeldByOther { .. } => writeln!(w, "refused: another emitter holds a live claim; do not emit")?,
            ClaimOutcome::AlreadyEmitted { .. } => writeln!(w, "refused: already emitted; do not emit")?,
        }
        effects_table(std::slice::from_ref(effect), w)
    })?;
    Ok(if matches!(outcome, ClaimOutcome::Claimed { .. }) { Exit::Success } else { Exit::Refused })
}

/// `effects mark-emitted`: exit 0 when marked or already emitted, 3 while another emitter's
/// claim is live.
pub fn mark_emitted(location: &LocationArgs, out: &mut Out, args: &EffectMarkArgs) -> anyhow::Result<Exit> {
    let store = location.open_writer()?;
    let outcome = store.mark_effect_emitted(&effect_key(&args.key), args.claimant.as_deref())?;
    crate::location::close_writer(store)?;
    let doc = json::mark_outcome(&outcome);
    out.emit(&doc, |w| {
        match &outcome {
            MarkOutcome::AlreadyEmitted { .. } => writeln!(w, "already emitted; nothing written")?,
            MarkOutcome::ClaimedByOther { .. } => writeln!(w, "refused: another emitter holds a live claim; nothing written")?,
            MarkOutcome::Marked { .. } => {}
        }
        effects_table(std::slice::from_ref(outcome.effect()), w)
    })?;
    Ok(if matches!(outcome, MarkOutcome::ClaimedByOther { .. }) { Exit::Refused } else { Exit::Success })
}

//! `effects list`, `effects record`, `effects claim`, `effects mark-emitted`.

use std::io::Write;

use manifestdb::EffectKey;
use serde_json::{Value, json};

use super::read_input;
use crate::args::{EffectClaimArgs, EffectKeyArgs, EffectMarkArgs, EffectRecordArgs, EffectsListArgs};
use crate::exit::Exit;
use crate::json;
use crate::location::LocationArgs;
use crate::output::{Out, Table, escape, text, utc};
use crate::remote::{self, Remote};

fn effect_key(args: &EffectKeyArgs) -> EffectKey {
    EffectKey { dataset: args.dataset.clone(), run: args.run.clone(), effect: args.effect.clone(), partition: args.partition.clone() }
}

/// The table of effect documents ([`json::effect`]).
fn effects_table(effects: &[&Value], w: &mut dyn Write) -> std::io::Result<()> {
    let mut table = Table::new(vec!["RUN", "EFFECT", "PARTITION", "STATUS", "GENERATION", "RECORDED", "PAYLOAD"]);
    for e in effects {
        // The table escapes and cuts the text; the exact payload is in --json.
        let payload = match e["payload"].as_str() {
            Some(text) => text.to_owned(),
            None => format!("({} bytes, not UTF-8)", e["payload_hex"].as_str().map_or(0, |h| h.len() / 2)),
        };
        table.row(vec![
            text(&e["run"]),
            text(&e["effect"]),
            text(&e["partition"]),
            text(&e["status"]),
            text(&e["generation"]),
            utc(e["recorded_at_ms"].as_u64().unwrap_or(0)),
            payload,
        ]);
    }
    table.write(w)
}

/// The effect key as the effect routes take it.
fn key_body(key: &EffectKey) -> serde_json::Map<String, Value> {
    let mut body = serde_json::Map::new();
    body.insert("dataset".into(), json!(key.dataset));
    body.insert("run".into(), json!(key.run));
    body.insert("effect".into(), json!(key.effect));
    body.insert("partition".into(), json!(key.partition));
    body
}

/// `effects list`.
pub fn list(location: &LocationArgs, out: &mut Out, args: &EffectsListArgs) -> anyhow::Result<Exit> {
    let query = json!({ "dataset": args.dataset, "run": args.run, "ready": args.ready });
    let doc = remote::read(location, "/v1/effects", &query, |snapshot| {
        json::reads::effects(snapshot, &args.dataset, args.run.as_deref(), args.ready)
    })?;
    let effects: Vec<&Value> = doc["effects"].as_array().into_iter().flatten().collect();
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
    let key = effect_key(&args.key);
    let doc = match Remote::find(location)? {
        Some(mut server) => {
            let mut body = key_body(&key);
            // Text as text; any other bytes as hexadecimal digits, which the server decodes.
            match String::from_utf8(payload) {
                Ok(text) => body.insert("payload".into(), json!(text)),
                Err(bytes) => body.insert("payload_hex".into(), json!(hex::encode(bytes.into_bytes()))),
            };
            server.post("/v1/effects/record", &Value::Object(body))?
        }
        None => {
            let store = location.open_writer()?;
            let recorded = store.record_effect(&key, &payload)?;
            crate::location::close_writer(store)?;
            json::recorded(&recorded)
        }
    };
    out.emit(&doc, |w| {
        if doc["newly_recorded"] == false {
            writeln!(w, "already recorded under this key; nothing written (the first record stands)")?;
        }
        effects_table(&[&doc["effect"]], w)
    })?;
    Ok(Exit::Success)
}

/// `effects claim`: exit 0 when claimed, 3 while another emitter's live claim holds it (wait),
/// 9 when it was already emitted (done).
pub fn claim(location: &LocationArgs, out: &mut Out, args: &EffectClaimArgs) -> anyhow::Result<Exit> {
    let key = effect_key(&args.key);
    let doc = match Remote::find(location)? {
        Some(mut server) => {
            let mut body = key_body(&key);
            body.insert("claimant".into(), json!(args.claimant));
            body.insert("lease_ms".into(), json!(u64::try_from(args.lease.as_millis()).unwrap_or(u64::MAX)));
            server.post("/v1/effects/claim", &Value::Object(body))?
        }
        None => {
            let store = location.open_writer()?;
            let outcome = store.claim_effect(&key, &args.claimant, args.lease)?;
            crate::location::close_writer(store)?;
            json::claim_outcome(&outcome)
        }
    };
    let outcome = doc["outcome"].as_str().unwrap_or_default().to_owned();
    out.emit(&doc, |w| {
        match (outcome.as_str(), doc["took_over_from"].as_str()) {
            ("claimed", Some(previous)) => {
                writeln!(w, "claimed (taken over from {}, whose claim had expired): emit it, then mark it emitted", escape(previous))?
            }
            ("claimed", None) => writeln!(w, "claimed: emit it, then mark it emitted")?,
            ("held_by_other", _) => writeln!(w, "refused: another emitter holds a live claim; do not emit")?,
            _ => writeln!(w, "refused: already emitted; do not emit")?,
        }
        effects_table(&[&doc["effect"]], w)
    })?;
    Ok(match outcome.as_str() {
        "claimed" => Exit::Success,
        "already_emitted" => Exit::AlreadyEmitted,
        _ => Exit::Refused,
    })
}

/// `effects mark-emitted`: exit 0 when marked or already emitted, 3 while another emitter's
/// claim is live.
pub fn mark_emitted(location: &LocationArgs, out: &mut Out, args: &EffectMarkArgs) -> anyhow::Result<Exit> {
    let key = effect_key(&args.key);
    let doc = match Remote::find(location)? {
        Some(mut server) => {
            let mut body = key_body(&key);
            body.insert("claimant".into(), json!(args.claimant));
            server.post("/v1/effects/mark-emitted", &Value::Object(body))?
        }
        None => {
            let store = location.open_writer()?;
            let outcome = store.mark_effect_emitted(&key, args.claimant.as_deref())?;
            crate::location::close_writer(store)?;
            json::mark_outcome(&outcome)
        }
    };
    let outcome = doc["outcome"].as_str().unwrap_or_default().to_owned();
    out.emit(&doc, |w| {
        match outcome.as_str() {
            "already_emitted" => writeln!(w, "already emitted; nothing written")?,
            "claimed_by_other" => writeln!(w, "refused: another emitter holds a live claim; nothing written")?,
            _ => {}
        }
        effects_table(&[&doc["effect"]], w)
    })?;
    Ok(if outcome == "claimed_by_other" { Exit::Refused } else { Exit::Success })
}

//! Parsers of flag values that several flag groups share (the verbs' flags in `args`, the
//! store-location flags in `location`).

/// Parses a duration the way an operator writes one (jiff's friendly format): `250ms`, `90s`,
/// `30m`, `1h 30m`, `7d` (a day is 24 hours), or ISO 8601 (`PT1H30M`). A unit is required;
/// negative durations, months and years are refused.
pub fn parse_duration(value: &str) -> Result<std::time::Duration, String> {
    if value.trim().bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{value:?} needs a unit (e.g. 250ms, 90s, 30m, 1h 30m, 7d)"));
    }
    let span: jiff::Span = value.parse().map_err(|e| format!("{value:?} is not a duration (e.g. 250ms, 90s, 30m, 1h 30m, 7d): {e}"))?;
    if span.is_negative() {
        return Err(format!("{value:?} is negative"));
    }
    let exact =
        span.to_duration(jiff::SpanRelativeTo::days_are_24_hours()).map_err(|e| format!("{value:?}: {e} (use days or smaller units)"))?;
    std::time::Duration::try_from(exact).map_err(|e| format!("{value:?}: {e}"))
}

/// `--attempt-lifetime`: a duration of at most [`manifestdb::ATTEMPT_LIFETIME_MAX`] (30 days),
/// refused here with the value as typed (the library's refusal would show milliseconds).
pub fn parse_attempt_lifetime(value: &str) -> Result<std::time::Duration, String> {
    let lifetime = parse_duration(value)?;
    if lifetime > manifestdb::ATTEMPT_LIFETIME_MAX {
        return Err(format!("{value:?} is longer than 30d, the longest attempt lifetime"));
    }
    Ok(lifetime)
}

/// `effects claim --lease`: more than zero and at most [`manifestdb::EFFECT_CLAIM_LEASE_MAX`]
/// (a day), refused here with the value as typed.
pub fn parse_claim_lease(value: &str) -> Result<std::time::Duration, String> {
    let lease = parse_duration(value)?;
    if lease.is_zero() {
        return Err(format!("{value:?} is zero: a claim lease must be more than zero"));
    }
    if lease > manifestdb::EFFECT_CLAIM_LEASE_MAX {
        return Err(format!("{value:?} is longer than 1d, the longest claim lease"));
    }
    Ok(lease)
}

/// A generation number (`show -g`, `view -g`): 1 or more. A negative number is read as a value
/// (not as an unknown flag) and refused as one.
pub fn parse_generation(value: &str) -> Result<u64, String> {
    if value.trim_start().starts_with('-') {
        return Err(format!("{value:?} is negative: generations are numbered from 1 (`manifestdb log --dataset D` lists them)"));
    }
    value.trim().parse::<u64>().map_err(|_| format!("{value:?} is not a generation number (1, 2, ...)"))
}

/// `--view-trees`: `all`, `none`, or a comma-separated list of dataset names.
pub fn parse_view_trees(value: &str) -> Result<manifestdb::ViewTrees, String> {
    match value.trim() {
        "all" => Ok(manifestdb::ViewTrees::All),
        "none" => Ok(manifestdb::ViewTrees::Off),
        list => {
            let names: Vec<&str> = list.split(',').map(str::trim).collect();
            if names.iter().any(|n| n.is_empty()) {
                return Err(format!("{value:?} has an empty dataset name: give `all`, `none` or names separated by commas"));
            }
            Ok(manifestdb::ViewTrees::only(names))
        }
    }
}

/// `gc expire --keep-last`: 1 or more (the current generation is always kept).
pub fn parse_keep_last(value: &str) -> Result<u64, String> {
    match value.trim().parse::<u64>() {
        Ok(0) => Err("0 would keep no generation, but the current one is always kept: give 1 or more".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{value:?} is not a count of generations (1 or more)")),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::parse_duration;

    #[test]
    fn durations_need_a_known_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("3 days"), Ok(Duration::from_secs(3 * 86_400)));
        for bad in ["", "5", "s", "5x", "-1s", "1s ago", "2mo", "1y", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }
}

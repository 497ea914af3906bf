//! Identifier checks and the staging-path rule.
//!
//! Every name a caller gives is checked here before it reaches a key or a path. Names become
//! staging directories through [`staging_rel`], an injective encoding: two different
//! (dataset, run, partition, attempt) never map to the same directory, no directory lies
//! inside another attempt's, and none leaves the staging root.

use crate::error::{Error, Result};
use crate::grain::Grain;
use crate::model::{Candidate, RunSpec};

/// Longest dataset, run id, snapshot id or effect name, in bytes.
pub(crate) const NAME_BYTES_MAX: usize = 200;
/// Longest partition key, in bytes.
pub(crate) const PARTITION_BYTES_MAX: usize = 1024;
/// Longest path component after encoding, in bytes (the usual file-system `NAME_MAX`).
pub(crate) const PATH_COMPONENT_BYTES_MAX: usize = 255;
/// Longest staging directory path relative to the staging root, in bytes.
pub(crate) const STAGING_REL_BYTES_MAX: usize = 3072;
/// Longest file path inside a staging directory, in bytes.
pub(crate) const FILE_PATH_BYTES_MAX: usize = 1024;
/// Longest canonical digest, in bytes.
pub(crate) const DIGEST_BYTES_MAX: usize = 256;
/// Most files one candidate may report.
pub(crate) const CANDIDATE_FILES_MAX: usize = 100_000;
/// Most tasks one run may declare.
pub(crate) const RUN_TASKS_MAX: usize = 10_000_000;

/// The prefix of the attempt directory's name. `@` is always percent-encoded inside names, so
/// no encoded partition component can equal an attempt directory's name.
const ATTEMPT_DIR_PREFIX: &str = "@attempt-";

fn check_text(what: &'static str, value: &str, bytes_max: usize) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(what, value, "must not be empty"));
    }
    if value.len() > bytes_max {
        return Err(Error::invalid(what, value, format!("is {} bytes, longer than the limit of {bytes_max}", value.len())));
    }
    if value.contains('\0') {
        return Err(Error::invalid(what, value, "must not contain a NUL byte"));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(what, value, "must not contain control characters"));
    }
    Ok(())
}

/// An input snapshot id: any printable text (it may be a URL or a path), never a path itself.
pub(crate) fn check_snapshot(value: &str) -> Result<()> {
    check_text("snapshot", value, NAME_BYTES_MAX)
}

/// A plain name: dataset, run id, effect name. One path component at most.
pub(crate) fn check_name(what: &'static str, value: &str) -> Result<()> {
    check_text(what, value, NAME_BYTES_MAX)?;
    if value.contains('/') {
        return Err(Error::invalid(what, value, "must not contain '/'"));
    }
    if value == "." || value == ".." {
        return Err(Error::invalid(what, value, "must not be '.' or '..'"));
    }
    Ok(())
}

/// Checks a `/`-separated relative path: no absolute path, no empty, `.` or `..` component.
fn check_relative(what: &'static str, value: &str, bytes_max: usize) -> Result<()> {
    check_text(what, value, bytes_max)?;
    if value.starts_with('/') {
        return Err(Error::invalid(what, value, "must be relative, not start with '/'"));
    }
    for component in value.split('/') {
        match component {
            "" => return Err(Error::invalid(what, value, "must not contain an empty component ('//' or a trailing '/')")),
            "." | ".." => return Err(Error::invalid(what, value, "must not contain a '.' or '..' component")),
            _ => {}
        }
    }
    Ok(())
}

/// A partition key such as `date=2026-11-29/region=eu`.
pub(crate) fn check_partition(value: &str) -> Result<()> {
    check_relative("partition key", value, PARTITION_BYTES_MAX)?;
    for component in value.split('/') {
        if encode_component(component).len() > PATH_COMPONENT_BYTES_MAX {
            return Err(Error::invalid(
                "partition key",
                value,
                format!("component {component:?} is longer than {PATH_COMPONENT_BYTES_MAX} bytes once encoded for a path"),
            ));
        }
    }
    Ok(())
}

/// A file path reported by a worker, relative to its staging directory.
pub(crate) fn check_file_path(value: &str) -> Result<()> {
    check_relative("file path", value, FILE_PATH_BYTES_MAX)?;
    if let Some(component) = value.split('/').find(|c| c.len() > PATH_COMPONENT_BYTES_MAX) {
        return Err(Error::invalid("file path", value, format!("component {component:?} is longer than {PATH_COMPONENT_BYTES_MAX} bytes")));
    }
    Ok(())
}

/// Checks everything in a run declaration that does not depend on stored state.
pub(crate) fn check_run_spec(spec: &RunSpec) -> Result<()> {
    check_name("dataset", &spec.dataset)?;
    check_name("run id", &spec.run)?;
    check_snapshot(&spec.snapshot)?;
    if spec.tasks.is_empty() {
        return Err(Error::invalid("run", &spec.run, "declares no task"));
    }
    if spec.tasks.len() > RUN_TASKS_MAX {
        return Err(Error::invalid("run", &spec.run, format!("declares {} tasks, more than {RUN_TASKS_MAX}", spec.tasks.len())));
    }
    let mut seen = std::collections::HashSet::with_capacity(spec.tasks.len());
    for task in &spec.tasks {
        check_partition(&task.partition)?;
        if !seen.insert(task.partition.as_str()) {
            return Err(Error::invalid("partition key", &task.partition, "is declared twice in the run"));
        }
        // Every task's staging path must fit, or that task could never begin and the run id
        // would be unusable.
        staging_parent_rel(&spec.dataset, &spec.run, &task.partition)?;
    }
    check_figures_choice(spec)?;
    if let Some(grain) = &spec.grain {
        check_grain(grain)?;
    }
    Ok(())
}

/// A run declares exactly one of a grain and [`RunSpec::trust_reported_figures`]: without a
/// grain the published figures are the workers' own, unchecked, and that must be said, never
/// fall out of a field left off. Checked by every declare and by the request bodies before
/// anything is opened.
pub(crate) fn check_figures_choice(spec: &RunSpec) -> Result<()> {
    match (&spec.grain, spec.trust_reported_figures) {
        (Some(_), false) | (None, true) => Ok(()),
        (Some(_), true) => Err(Error::invalid("run declaration", &spec.run, FIGURES_BOTH)),
        (None, false) => Err(Error::invalid("run declaration", &spec.run, FIGURES_NEITHER)),
    }
}

/// Why a run declaring a grain and trusting the reported figures is refused.
const FIGURES_BOTH: &str = "declares a grain and trust_reported_figures: with a grain the store reads the data and checks the \
                            figures; give one of the two";
/// Why a run declaring neither a grain nor trust in the reported figures is refused.
const FIGURES_NEITHER: &str = "declares no grain: give its grain (keys, measure) so that validation reads the data, or \
                               trust_reported_figures to publish the figures workers report, unchecked";

/// Most grain key columns a run may declare.
pub(crate) const GRAIN_KEYS_MAX: usize = 64;
/// Largest declared measure scale (10^18 is the largest power of ten an `i64` holds).
pub(crate) const MEASURE_SCALE_MAX: u32 = 18;

/// A declared grain: at least one key, column names that are printable, distinct and short,
/// and a measure scale an `i64` can hold.
pub(crate) fn check_grain(grain: &Grain) -> Result<()> {
    if grain.keys.is_empty() {
        return Err(Error::invalid("grain", &grain.measure, "declares no key column"));
    }
    if grain.keys.len() > GRAIN_KEYS_MAX {
        return Err(Error::invalid("grain", &grain.keys.join(","), format!("declares more than {GRAIN_KEYS_MAX} key columns")));
    }
    let mut seen = std::collections::HashSet::new();
    for column in grain.keys.iter().chain(std::iter::once(&grain.measure)) {
        check_text("grain column", column, NAME_BYTES_MAX)?;
        if !seen.insert(column.as_str()) {
            return Err(Error::invalid("grain column", column, "is named twice (keys and measure must be distinct columns)"));
        }
    }
    if grain.measure_scale > MEASURE_SCALE_MAX {
        return Err(Error::invalid("measure scale", &grain.measure_scale.to_string(), format!("is larger than {MEASURE_SCALE_MAX}")));
    }
    Ok(())
}

/// Checks a candidate's fields (not its agreement with the run; that is validation).
pub(crate) fn check_candidate(candidate: &Candidate) -> Result<()> {
    check_snapshot(&candidate.snapshot)?;
    if let Some(digest) = &candidate.digest {
        check_text("digest", digest, DIGEST_BYTES_MAX)?;
    }
    if candidate.files.len() > CANDIDATE_FILES_MAX {
        return Err(Error::invalid(
            "candidate",
            &candidate.snapshot,
            format!("reports {} files, more than {CANDIDATE_FILES_MAX}", candidate.files.len()),
        ));
    }
    let mut seen = std::collections::HashSet::with_capacity(candidate.files.len());
    for file in &candidate.files {
        check_file_path(&file.path)?;
        if !seen.insert(file.path.as_str()) {
            return Err(Error::invalid("file path", &file.path, "is reported twice"));
        }
    }
    Ok(())
}

/// Percent-encodes one name so it is a safe, unambiguous path component: ASCII letters,
/// digits and `-_.=+,` stay, every other byte (including `%`, `@` and `/`) becomes `%XX`.
fn encode_component(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.=+,".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The directory holding every attempt of a task, relative to the staging root:
/// `dataset/run/<partition components>`, each name percent-encoded.
///
/// Callers must have checked the names; this re-checks the length limits.
pub(crate) fn staging_parent_rel(dataset: &str, run: &str, partition: &str) -> Result<String> {
    let mut components = Vec::new();
    for name in [dataset, run].into_iter().chain(partition.split('/')) {
        let component = encode_component(name);
        if component.len() > PATH_COMPONENT_BYTES_MAX {
            return Err(Error::invalid("name", name, format!("is longer than {PATH_COMPONENT_BYTES_MAX} bytes once encoded for a path")));
        }
        components.push(component);
    }
    let rel = components.join("/");
    // Leave room for the attempt directory's name (`@attempt-` and up to 10 digits).
    if rel.len() + 1 + ATTEMPT_DIR_PREFIX.len() + 10 > STAGING_REL_BYTES_MAX {
        return Err(Error::invalid(
            "partition key",
            partition,
            format!("gives a staging path of {} bytes, longer than {STAGING_REL_BYTES_MAX}", rel.len()),
        ));
    }
    Ok(rel)
}

/// The attempt whose staging directory is `rel`, if any attempt's could be: the inverse of
/// [`staging_rel`] (percent-decoded components, then re-encoded and compared, so only the
/// exact encoding of a key is accepted). Lets cleanup look the owner of a path up by key.
pub(crate) fn parse_staging_rel(rel: &str) -> Option<crate::model::AttemptKey> {
    let (parent, leaf) = rel.rsplit_once('/')?;
    let attempt: u32 = leaf.strip_prefix(ATTEMPT_DIR_PREFIX)?.parse().ok()?;
    let mut names = parent.split('/').map(decode_component);
    let dataset = names.next()??;
    let run = names.next()??;
    let partition = names.collect::<Option<Vec<String>>>()?.join("/");
    let key = crate::model::TaskKey::new(&dataset, &run, &partition).attempt(attempt);
    (staging_rel(&dataset, &run, &partition, attempt).ok()? == rel).then_some(key)
}

/// Decodes one component made by [`encode_component`].
fn decode_component(component: &str) -> Option<String> {
    let bytes = component.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The name of attempt `attempt`'s own directory inside its task's directory.
pub(crate) fn attempt_dir_name(attempt: u32) -> String {
    format!("{ATTEMPT_DIR_PREFIX}{attempt}")
}

/// The attempt's staging directory relative to the staging root:
/// `dataset/run/<partition components>/@attempt-N`, each name percent-encoded.
///
/// Callers must have checked the names; this re-checks the length limits.
pub(crate) fn staging_rel(dataset: &str, run: &str, partition: &str, attempt: u32) -> Result<String> {
    Ok(format!("{}/{}", staging_parent_rel(dataset, run, partition)?, attempt_dir_name(attempt)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traversal_absolute_nul_and_overlong_partitions_are_refused() {
        for bad in ["../x", "a/../b", "/etc/passwd", "a//b", "a/", ".", "a\0b", "a\nb", ""] {
            assert!(check_partition(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_partition(&"x".repeat(PARTITION_BYTES_MAX + 1)).is_err());
        assert!(check_partition(&"x".repeat(PATH_COMPONENT_BYTES_MAX + 1)).is_err());
        check_partition("date=2026-11-29/region=eu").unwrap();
    }

    #[test]
    fn staging_paths_are_encoded_and_distinct() {
        let a = staging_rel("daily_units", "r1", "date=2026-11-29/region=eu", 1).unwrap();
        assert_eq!(a, "daily_units/r1/date=2026-11-29/region=eu/@attempt-1");
        // A partition whose component looks like an attempt directory cannot collide with one.
        let b = staging_rel("daily_units", "r1", "date=2026-11-29/region=eu/@attempt-1", 1).unwrap();
        assert_ne!(a, b);
        assert!(!b.starts_with(&format!("{a}/")));
        // `%` is encoded too, so an already-encoded name stays distinct from its decoding.
        assert_ne!(staging_rel("d", "r", "a%2Fb", 1).unwrap(), staging_rel("d", "r", "a/b", 1).unwrap());
    }

    #[test]
    fn staging_paths_parse_back_to_their_attempt_and_nothing_else_does() {
        for (d, r, p, n) in [("daily_units", "r1", "date=2026-11-29/region=eu", 1), ("d s", "r%1", "a/@attempt-1/b\u{e9}", 7)] {
            let rel = staging_rel(d, r, p, n).unwrap();
            assert_eq!(parse_staging_rel(&rel), Some(crate::model::TaskKey::new(d, r, p).attempt(n)), "{rel}");
        }
        for not_one in ["d/r/p", "d/r/@attempt-1", "d/r/p/@attempt-x", "d/r/p%2f/@attempt-1", "d/r/p/@attempt-01", "d/r/%zz/@attempt-1"] {
            assert_eq!(parse_staging_rel(not_one), None, "{not_one}");
        }
    }

    #[test]
    fn names_may_not_hold_separators() {
        assert!(check_name("dataset", "a/b").is_err());
        assert!(check_name("run id", "..").is_err());
        check_snapshot("s3://bucket/x@v1").unwrap();
    }
}

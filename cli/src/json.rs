//! The JSON documents the tool prints with `--json`: the library's [`manifestdb::documents`]
//! (the same the server answers), plus the one line of human output about a grain.

pub use manifestdb::documents::*;

use manifestdb::Grain;

/// One line describing a run's grain, for the human output.
pub fn grain_line(g: Option<&Grain>) -> String {
    match g {
        Some(g) => format!(
            "grain: {} files, one row per ({}), measure {} at scale {}: validation reads the data",
            g.format,
            g.keys.join(", "),
            g.measure,
            g.measure_scale
        ),
        None => "grain: none declared: rows and totals are the workers' figures, reported, not checked".to_owned(),
    }
}

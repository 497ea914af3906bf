//! Writing results: one JSON document with `--json`, a human table otherwise; plus the small
//! formatting helpers (aligned tables, UTC timestamps, shell quoting) and the progress bar.
//!
//! Every write returns its `io::Result`, so a closed pipe surfaces as an error that `main`
//! recognises and treats as success, instead of a panic inside `println!`.

use std::io::{self, IsTerminal, Write};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

/// Where results go.
///
/// A result is rendered whole in memory, then written straight to file descriptor 1 (a
/// duplicate of it, bypassing std's stdout buffer): a write that fails leaves nothing buffered
/// anywhere, so no success document can reach stdout later (at exit, say) after the command
/// reported its failure. Commands write only after they closed the store, so a slow reader of
/// the output never keeps the store locked.
pub struct Out {
    json: bool,
}

impl Out {
    /// Results as JSON (`--json`) or for humans.
    pub fn new(json: bool) -> Out {
        Out { json }
    }

    /// Writes `doc` (with `--json`) or what `human` writes.
    pub fn emit(&mut self, doc: &Value, human: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
        let mut rendered = Vec::new();
        if self.json {
            serde_json::to_writer_pretty(&mut rendered, doc).map_err(io::Error::from)?;
            writeln!(rendered)?;
        } else {
            human(&mut rendered)?;
        }
        write_stdout(&rendered)
    }

    /// Writes raw text (for `attempt begin --env`).
    pub fn raw(&mut self, text: &str) -> io::Result<()> {
        write_stdout(text.as_bytes())
    }

    /// A progress bar over `len` steps: drawn on stderr only when stderr is a terminal and the
    /// output is not JSON, hidden otherwise.
    pub fn progress(&self, len: u64, message: &'static str) -> ProgressBar {
        if self.json || !io::stderr().is_terminal() {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(len);
        if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({eta})") {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(message);
        bar
    }
}

impl Out {
    /// A spinner for an operation that reports no progress of its own: drawn on stderr only
    /// when stderr is a terminal and the output is not JSON.
    pub fn spinner(&self, message: &'static str) -> ProgressBar {
        if self.json || !io::stderr().is_terminal() {
            return ProgressBar::hidden();
        }
        let spinner = ProgressBar::new_spinner();
        spinner.set_message(message);
        spinner.enable_steady_tick(std::time::Duration::from_millis(120));
        spinner
    }
}

/// Writes all of `bytes` to stdout's file descriptor, unbuffered.
fn write_stdout(bytes: &[u8]) -> io::Result<()> {
    use std::os::fd::AsFd;
    let mut stdout = std::fs::File::from(io::stdout().as_fd().try_clone_to_owned()?);
    stdout.write_all(bytes)
}

/// A plain text table: a header row and left-aligned columns separated by two spaces.
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: Vec<&'static str>) -> Table {
        Table { header, rows: Vec::new() }
    }

    /// Appends a row (as many cells as columns).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Writes the table with its header row.
    pub fn write(&self, w: &mut dyn Write) -> io::Result<()> {
        self.write_rows(w, true)
    }

    /// Writes the rows only (for key-value listings).
    pub fn write_body(&self, w: &mut dyn Write) -> io::Result<()> {
        self.write_rows(w, false)
    }

    fn write_rows(&self, w: &mut dyn Write, with_header: bool) -> io::Result<()> {
        let mut widths: Vec<usize> = self.header.iter().map(|h| if with_header { h.chars().count() } else { 0 }).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if let Some(width) = widths.get_mut(i) {
                    *width = (*width).max(cell.chars().count());
                }
            }
        }
        let header: Vec<String> = self.header.iter().map(|h| (*h).to_owned()).collect();
        let header_row = with_header.then_some(&header);
        for row in header_row.into_iter().chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(cell.chars().count());
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            writeln!(w, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil conversion.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// An optional number, or `-`.
pub fn opt<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Quotes a value for a POSIX shell (single quotes, `'` as `'\''`).
pub fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_796_017_549_000), "2026-11-30T05:45:49Z");
    }

    #[test]
    fn shell_quote_survives_single_quotes() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn table_aligns_columns() {
        let mut table = Table::new(vec!["A", "LONG"]);
        table.row(vec!["xyz".into(), "1".into()]);
        let mut buf = Vec::new();
        table.write(&mut buf).unwrap();
        assert_eq!(String::from_utf8(buf).unwrap(), "A    LONG\nxyz  1\n");
    }
}

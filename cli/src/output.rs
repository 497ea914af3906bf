//! Writing results: one JSON document with `--json`, a human table otherwise; plus the small
//! formatting helpers (tables through comfy-table, RFC 3339 times and friendly durations through
//! jiff, shell quoting through shlex) and the progress bar.
//!
//! Every write returns its `io::Result`, so a closed pipe surfaces as an error that `main`
//! recognises and treats as success, instead of a panic inside `println!`.
//!
//! Human output never prints a stored name raw: [`Table`] cells and [`escape`] make control
//! characters visible (a partition key holding a newline cannot forge a line of output) and
//! table cells longer than [`CELL_WIDTH_MAX`] are cut with a marker. `--json` prints every name
//! exactly.

use std::cell::RefCell;
use std::io::{self, IsTerminal, Write};

use comfy_table::{Cell, ColumnConstraint, Row, Width};
use indicatif::{ProgressBar, ProgressStyle};
use jiff::fmt::friendly::{Designator, SpanPrinter};
use jiff::{Span, SpanRound, Timestamp, Unit};
use manifestdb::{Progress, ProgressStage};
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

    /// Whether results are JSON (`--json`).
    pub fn is_json(&self) -> bool {
        self.json
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

    /// Whether stdout is a pipe (what a shell's `$(...)` reads), not a terminal or a file.
    pub fn stdout_is_pipe(&self) -> bool {
        use std::os::fd::AsFd;
        use std::os::unix::fs::FileTypeExt;
        io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map(std::fs::File::from)
            .and_then(|file| file.metadata())
            .is_ok_and(|meta| meta.file_type().is_fifo())
    }

    /// Writes raw text (for `attempt begin --env`, completions, the man page).
    pub fn raw(&mut self, text: &str) -> io::Result<()> {
        write_stdout(text.as_bytes())
    }

    /// A progress bar over `bytes` bytes in `files` files (the caller sets the message to the
    /// files done, [`files_done`]): drawn on stderr only when stderr is a terminal and the output
    /// is not JSON, hidden otherwise.
    pub fn progress_bytes(&self, bytes: u64, files: u64, message: &'static str) -> ProgressBar {
        if self.json || !io::stderr().is_terminal() {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(bytes);
        bar.set_style(bytes_style());
        bar.set_message(files_done(message, 0, files));
        bar
    }
}

/// A bar weighed by bytes with the time left, as wide as the terminal leaves room for (a line
/// longer than the terminal would wrap and redraw as two): `{msg} [=====>    ] 1.2 GiB/4.0 GiB
/// (about 5s left)`.
fn bytes_style() -> ProgressStyle {
    let template = "{msg} [{wide_bar}] {binary_bytes}/{binary_total_bytes}{time_left}";
    match ProgressStyle::with_template(template) {
        Ok(style) => style.progress_chars("=> ").with_key("time_left", time_left_key),
        // The template is a constant that parses; were it not to, a plain bar still draws.
        Err(_) => ProgressStyle::default_bar(),
    }
}

/// A bar's message of files done: `checksumming 3/10 files`.
pub fn files_done(message: &str, done: u64, files: u64) -> String {
    format!("{message} {done}/{}", count(files, "file"))
}

/// The time left of a bar, for its `{time_left}` key (indicatif's own ETA starts from a guess
/// and read "(2m)" at the start of a 1 s job).
fn time_left_key(state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write) {
    let _ = w.write_str(&time_left(state.elapsed(), state.pos(), state.len().unwrap_or(0)));
}

/// The time left of work `done` of `len` steps in after `elapsed`, as ` (about 2m left)`: the
/// rate so far over all of it, and nothing before a second has passed and some work is done
/// (no figure is better than a wild one).
pub fn time_left(elapsed: std::time::Duration, done: u64, len: u64) -> String {
    if elapsed < std::time::Duration::from_secs(1) || done == 0 || done >= len {
        return String::new();
    }
    let left_ms = elapsed.as_millis().saturating_mul(u128::from(len - done)) / u128::from(done);
    format!(" (about {} left)", duration_s(u64::try_from(left_ms).unwrap_or(u64::MAX)))
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

    /// The drawing of a library operation's progress ([`Progress`], from its
    /// `*_with_progress` form): a spinner with `message` until the library reports, then a bar
    /// per stage. Drawn as [`Out::spinner`] is: on stderr, on a terminal, without `--json`.
    pub fn progress_of(&self, message: &'static str, words: Words) -> ProgressDraw {
        ProgressDraw { bar: self.spinner(message), stage: std::cell::Cell::new(None), prefix: RefCell::new(String::new()), words }
    }
}

/// Draws the [`Progress`] a library operation reports: per stage, a bar weighed by bytes that
/// counts files and shows the time left (`checksumming 3/10 files [==>  ] 1.2 GiB/4.0 GiB
/// (about 5s left)`). Nothing is drawn when hidden (not a terminal, or `--json`).
pub struct ProgressDraw {
    bar: ProgressBar,
    stage: std::cell::Cell<Option<ProgressStage>>,
    /// Put before the stage's words, for work over several operations (`attempt 2/5: `).
    prefix: RefCell<String>,
    words: Words,
}

/// What the words of a drawing say beyond the stage.
#[derive(Debug, Clone, Copy, Default)]
pub struct Words {
    /// Checking files reads them for their checksums.
    pub checksums: bool,
    /// Deleting files is a dry run: paths are re-checked only.
    pub dry_run: bool,
}

impl ProgressDraw {
    /// Draws one report; a new stage starts a new bar (its time left from its own rate).
    pub fn report(&self, progress: Progress) {
        if self.bar.is_hidden() {
            return;
        }
        if self.stage.get() != Some(progress.stage) {
            self.stage.set(Some(progress.stage));
            self.bar.reset();
            self.bar.set_length(progress.bytes_total);
            self.bar.set_style(bytes_style());
        }
        self.bar.set_position(progress.bytes_done);
        self.bar.set_message(format!("{}{}", self.prefix.borrow(), progress_message(progress, self.words)));
    }

    /// The hook to hand the library.
    pub fn hook(&self) -> impl Fn(Progress) + '_ {
        |progress| self.report(progress)
    }

    /// Sets what goes before the stage's words, and starts the next operation's stages afresh.
    pub fn set_prefix(&self, prefix: String) {
        *self.prefix.borrow_mut() = prefix;
        self.stage.set(None);
    }

    /// Removes the drawing.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// A report's words: `checksumming 3/10 files`.
pub fn progress_message(progress: Progress, words: Words) -> String {
    let verb = match progress.stage {
        ProgressStage::CheckingFiles if words.checksums => "checksumming",
        ProgressStage::CheckingFiles => "checking",
        ProgressStage::ReadingRows => "reading rows of",
        ProgressStage::SyncingFiles => "syncing",
        ProgressStage::DeletingFiles if words.dry_run => "re-checking (dry run)",
        ProgressStage::DeletingFiles => "deleting",
        // A stage this build does not name: the library's own words.
        other => return format!("{other} {}/{}", progress.files_done, progress.files_total),
    };
    files_done(verb, progress.files_done, progress.files_total)
}

/// The widest a table cell is printed, in terminal columns; a longer one is cut and ends in
/// [`TRUNCATED`].
pub const CELL_WIDTH_MAX: u16 = 64;

/// The marker ending a cut table cell.
pub const TRUNCATED: &str = "…";

/// Writes all of `bytes` to stdout's file descriptor, unbuffered.
fn write_stdout(bytes: &[u8]) -> io::Result<()> {
    use std::os::fd::AsFd;
    let mut stdout = std::fs::File::from(io::stdout().as_fd().try_clone_to_owned()?);
    stdout.write_all(bytes)
}

/// A plain text table (comfy-table without borders): a header row and left-aligned columns
/// separated by two spaces. Cells are escaped ([`escape`]) and cut at [`CELL_WIDTH_MAX`].
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
        let mut table = comfy_table::Table::new();
        table.load_style(comfy_table::presets::NOTHING).set_truncation_indicator(TRUNCATED);
        if with_header {
            table.set_header(Row::from(self.header.iter().map(|h| Cell::new(*h)).collect::<Vec<_>>()));
        }
        for cells in &self.rows {
            let mut row = Row::from(cells.iter().map(|c| Cell::new(escape(c))).collect::<Vec<_>>());
            // One line per row: a cell wider than its column is cut, never wrapped onto a line
            // of its own that would read as another row.
            row.max_height(1);
            table.add_row(row);
        }
        let columns = self.header.len();
        for (i, column) in table.column_iter_mut().enumerate() {
            column.set_padding((0, if i + 1 == columns { 0 } else { 2 }));
            column.set_constraint(ColumnConstraint::UpperBoundary(Width::Fixed(CELL_WIDTH_MAX)));
        }
        if self.rows.is_empty() && !with_header {
            return Ok(());
        }
        for line in table.lines() {
            writeln!(w, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

/// A stored name (or any text from the store or a caller) made safe to print on a line of its
/// own: control characters and backslashes are escaped (`\n`, `\t`, `\u{1b}`, `\\`), anything
/// else is kept as it is.
pub fn escape(text: &str) -> String {
    if !text.chars().any(|c| c.is_control() || c == '\\') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() || c == '\\' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Milliseconds since the Unix epoch as RFC 3339 in UTC, to the second
/// (`2026-11-30T05:52:57Z`).
pub fn utc(ms: u64) -> String {
    match i64::try_from(ms).ok().and_then(|ms| Timestamp::from_millisecond(ms).ok()) {
        Some(ts) => ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        // Past the year 9999: not a time this tool wrote, shown as the number it is.
        None => format!("{ms} ms after the epoch"),
    }
}

/// A duration in milliseconds the way an operator writes one: `3d`, `1h 30m`, `250ms`.
pub fn duration(ms: u64) -> String {
    friendly(ms, Unit::Millisecond)
}

/// A duration in milliseconds to the second (`2h 5m 3s`; under a second `0s`), for ages and
/// time left, where the milliseconds are noise.
pub fn duration_s(ms: u64) -> String {
    friendly(ms, Unit::Second)
}

fn friendly(ms: u64, smallest: Unit) -> String {
    static PRINTER: SpanPrinter = SpanPrinter::new().designator(Designator::Compact);
    let rounded = i64::try_from(ms)
        .ok()
        .and_then(|ms| Span::new().try_milliseconds(ms).ok())
        .and_then(|span| span.round(SpanRound::new().largest(Unit::Day).smallest(smallest).days_are_24_hours()).ok());
    match rounded {
        Some(span) => PRINTER.span_to_string(&span),
        None => format!("{ms}ms"),
    }
}

/// `n` and the noun, plural unless `n` is 1 (`1 task`, `2 tasks`, `0 tasks`). Nouns whose
/// plural is not `noun + s` are given as `"entry|entries"`.
pub fn count(n: u64, noun: &str) -> String {
    let (one, many) = match noun.split_once('|') {
        Some((one, many)) => (one.to_owned(), many.to_owned()),
        None => (noun.to_owned(), format!("{noun}s")),
    };
    format!("{n} {}", if n == 1 { one } else { many })
}

/// An optional number, or `-`.
pub fn opt<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// A value of a JSON document as a table cell: a string as it is, null as `-`, anything else
/// as its JSON text.
pub fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A count of a JSON document with its noun, singular for exactly one: `1 partition`, `2
/// partitions`, `- files` for a missing count.
pub fn counted(value: &Value, noun: &str) -> String {
    match value.as_u64() {
        Some(1) => format!("1 {noun}"),
        _ => format!("{} {noun}s", text(value)),
    }
}

/// Quotes a value for a POSIX shell's `eval` (shlex). A value holding a NUL byte cannot be
/// quoted (no shell variable can hold one).
pub fn shell_quote(value: &str) -> Result<String, shlex::QuoteError> {
    shlex::try_quote(value).map(|quoted| quoted.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_796_017_549_999), "2026-11-30T05:45:49Z");
        assert_eq!(utc(u64::MAX), format!("{} ms after the epoch", u64::MAX));
    }

    #[test]
    fn durations_read_as_operators_write_them() {
        assert_eq!(duration(259_200_000), "3d");
        assert_eq!(duration(5_400_000), "1h 30m");
        assert_eq!(duration(250), "250ms");
        assert_eq!(duration(0), "0s");
        assert_eq!(duration_s(90_061_500), "1d 1h 1m 2s");
        assert_eq!(duration_s(400), "0s");
    }

    #[test]
    fn time_left_waits_for_a_second_and_some_work_then_uses_the_rate_so_far() {
        use std::time::Duration;
        assert_eq!(time_left(Duration::from_millis(300), 1, 10), "", "too early to say");
        assert_eq!(time_left(Duration::from_secs(5), 0, 10), "", "no rate yet");
        assert_eq!(time_left(Duration::from_secs(5), 10, 10), "", "done");
        assert_eq!(time_left(Duration::from_secs(2), 1, 3), " (about 4s left)");
        assert_eq!(time_left(Duration::from_secs(10), 5_000, 10_000), " (about 10s left)");
        assert_eq!(time_left(Duration::from_secs(60), 1, 121), " (about 2h left)");
        assert_eq!(files_done("checksumming", 3, 10), "checksumming 3/10 files");
    }

    #[test]
    fn progress_reads_as_its_stage_and_files() {
        let p = Progress { stage: ProgressStage::CheckingFiles, files_done: 1, files_total: 4, bytes_done: 9, bytes_total: 90 };
        assert_eq!(progress_message(p, Words::default()), "checking 1/4 files");
        assert_eq!(progress_message(p, Words { checksums: true, dry_run: false }), "checksumming 1/4 files");
        let p = Progress { stage: ProgressStage::DeletingFiles, files_done: 1, files_total: 1, bytes_done: 0, bytes_total: 0 };
        assert_eq!(progress_message(p, Words::default()), "deleting 1/1 file");
        assert_eq!(progress_message(p, Words { checksums: false, dry_run: true }), "re-checking (dry run) 1/1 file");
    }

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(count(1, "task"), "1 task");
        assert_eq!(count(0, "task"), "0 tasks");
        assert_eq!(count(2, "file"), "2 files");
        assert_eq!(count(1, "directory|directories"), "1 directory");
        assert_eq!(count(3, "directory|directories"), "3 directories");
    }

    #[test]
    fn shell_quote_survives_single_quotes() {
        assert_eq!(shell_quote("a b").unwrap(), "'a b'");
        let quoted = shell_quote("it's").unwrap();
        assert_eq!(shlex::split(&quoted).unwrap(), ["it's"]);
        assert!(shell_quote("nul\0").is_err());
    }

    #[test]
    fn escape_makes_control_characters_visible() {
        assert_eq!(escape("date=2026-11-29/region=eu"), "date=2026-11-29/region=eu");
        assert_eq!(escape("a\nb\tc\u{1b}[31m\\"), "a\\nb\\tc\\u{1b}[31m\\\\");
        assert_eq!(escape("région"), "région");
    }

    fn render(table: &Table) -> String {
        let mut buf = Vec::new();
        table.write(&mut buf).unwrap();
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn table_aligns_columns() {
        let mut table = Table::new(vec!["A", "LONG"]);
        table.row(vec!["xyz".into(), "1".into()]);
        assert_eq!(render(&table), "A    LONG\nxyz  1\n");
    }

    #[test]
    fn table_cells_are_escaped_and_cut_to_one_line() {
        let mut table = Table::new(vec!["NAME", "N"]);
        table.row(vec!["forged\nNAME  N".into(), "1".into()]);
        table.row(vec!["x".repeat(1000), "2".into()]);
        let text = render(&table);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[1].starts_with("forged\\nNAME  N"), "{text}");
        assert!(lines[2].contains(TRUNCATED) && lines[2].ends_with('2'), "{text}");
        assert!(lines[2].chars().count() < 80, "{text}");
    }
}

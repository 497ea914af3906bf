//! Every fenced block of the book (`docs/src/*.md`) and of the README, run or accounted for.
//!
//! - Shell blocks (`sh`, `bash`, `shell`; `console`: its `$ ` lines) run as printed, a
//!   chapter's blocks in order in one `bash` (`set -euo pipefail`, as a reader's terminal keeps
//!   what an earlier block set), in a scratch directory of the chapter's own with the built
//!   `manifestdb` first on `PATH`, `HOME` inside the scratch directory and no `MANIFESTDB_*`
//!   variable from the caller. The book's example directories `/srv/...` and `/tmp/jobs` are
//!   taken into the scratch directory (a test can write neither). Background jobs (a `serve &`)
//!   are killed when the chapter ends; `examples/` in the scratch directory is the repository's
//!   (for a block that runs an example from a clone); a chapter that runs past [`CHAPTER_TIMEOUT`] fails.
//! - Rust blocks are the library's doctests (`src/lib.rs`, `doc_examples`: each chapter with a
//!   Rust block is included there); this test checks that each chapter is, and counts them.
//! - Python blocks run under the wheel's pytest suite (`python/tests/test_docs.py`, same
//!   directives); this test counts them.
//! - `text` blocks (and blocks without a language) are output, not code.
//! - A `manifestdb ...` command named in running text (inline code) must parse: its verb and
//!   flags exist (run with `--help` appended).
//!
//! A block that cannot run as printed carries an HTML comment right above its fence, which the
//! rendered book does not show:
//!
//! - `<!-- book-test: not run: REASON -->`: skipped, counted, the reason printed (for a Rust
//!   block marked `ignore` or `no_run`, the reason rustdoc does not run it).
//! - `<!-- book-test: run by PATH TEST -->`: a test of its own runs it (on the state the text
//!   describes); the named function must exist in that file.
//! - `<!-- book-test: before` / `after`, then lines of code, then `-->`: hidden lines run right
//!   before or after the block, in the same shell (the state the text describes, a check of what
//!   it says).
//! - `<!-- book-test: needs COMMAND -->`: the block runs if COMMAND succeeds; otherwise it is
//!   skipped with the reason printed, and under `CI=true` the test fails.
//!
//! An unmarked block that fails fails the test, with the chapter's line of the failing command.
//! The counts are printed and written to `target/tmp/book-blocks.txt` (`.ci/run` prints it).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::BIN;

/// The longest a chapter's shell may run.
const CHAPTER_TIMEOUT: Duration = Duration::from_secs(180);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Shell,
    Rust,
    Python,
    Text,
}

#[derive(Debug, Default)]
struct Directives {
    skip: Option<String>,
    run_by: Option<(String, String)>,
    before: Vec<(usize, String)>,
    after: Vec<(usize, String)>,
    needs: Vec<String>,
}

#[derive(Debug)]
struct Block {
    file: String,
    /// 1-based line of the opening fence.
    line: usize,
    kind: Kind,
    attrs: Vec<String>,
    body: String,
    directives: Directives,
}

impl Block {
    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// The book's chapters and the README, in a stable order.
fn sources() -> Vec<(String, String)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("docs/src"))
        .expect("docs/src")
        .map(|e| e.expect("an entry of docs/src").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files.push(repo().join("README.md"));
    files
        .into_iter()
        .map(|p| {
            let name = p.strip_prefix(repo()).expect("inside the repository").to_string_lossy().into_owned();
            let name = name.trim_start_matches("./").to_owned();
            (name, std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display())))
        })
        .collect()
}

fn kind_of(language: &str) -> Option<Kind> {
    match language {
        "sh" | "bash" | "shell" | "console" => Some(Kind::Shell),
        "rust" => Some(Kind::Rust),
        "python" | "py" => Some(Kind::Python),
        "text" | "" => Some(Kind::Text),
        _ => None,
    }
}

/// The fenced blocks of one Markdown file with the directives above each; panics on a
/// directive that no block follows, an unknown language or an unclosed block.
fn parse(file: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut pending = Directives::default();
    let mut pending_at: Option<usize> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("<!-- book-test:") {
            // A directive: up to the line holding `-->`.
            let start = i;
            let mut content = rest.to_owned();
            while !content.contains("-->") {
                i += 1;
                assert!(i < lines.len(), "{file}:{}: a book-test comment without its `-->`", start + 1);
                content.push('\n');
                content.push_str(lines[i]);
            }
            let content = content[..content.find("-->").expect("checked")].to_owned();
            let (head, code) = content.split_once('\n').unwrap_or((&content, ""));
            let head = head.trim();
            // Line of the first hidden line in the Markdown file, for the failure's report.
            let code_line = start + 2;
            if let Some(reason) = head.strip_prefix("not run:") {
                assert!(!reason.trim().is_empty(), "{file}:{}: `not run:` needs a reason", start + 1);
                pending.skip = Some(format!("{} {}", reason.trim(), code.trim()).trim().to_owned());
            } else if let Some(by) = head.strip_prefix("run by ") {
                let (path, test) = by.trim().split_once(' ').unwrap_or_else(|| panic!("{file}:{}: `run by PATH TEST`", start + 1));
                pending.run_by = Some((path.to_owned(), test.trim().to_owned()));
            } else if head == "before" {
                pending.before.push((code_line, code.to_owned()));
            } else if head == "after" {
                pending.after.push((code_line, code.to_owned()));
            } else if let Some(command) = head.strip_prefix("needs ") {
                pending.needs.push(command.trim().to_owned());
            } else {
                panic!("{file}:{}: unknown book-test directive {head:?}", start + 1);
            }
            pending_at.get_or_insert(start + 1);
            i += 1;
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("```") {
            let ticks = 3 + rest.len() - rest.trim_start_matches('`').len();
            let fence = "`".repeat(ticks);
            let info = rest.trim_start_matches('`').trim();
            let indent = line.len() - trimmed.len();
            let mut parts = info.split([',', ' ']).filter(|s| !s.is_empty());
            let language = parts.next().unwrap_or("");
            let attrs: Vec<String> = parts.map(str::to_owned).collect();
            let kind = kind_of(language)
                .unwrap_or_else(|| panic!("{file}:{}: a block in {language:?}: the book test knows sh, rust, python and text", i + 1));
            let open = i;
            let mut body = String::new();
            i += 1;
            while lines.get(i).is_some_and(|l| l.trim() != fence) {
                let l = lines[i];
                let strip = l.len() - l.trim_start().len();
                body.push_str(&l[strip.min(indent)..]);
                body.push('\n');
                i += 1;
            }
            assert!(i < lines.len(), "{file}:{}: a block that is never closed", open + 1);
            let directives = std::mem::take(&mut pending);
            pending_at = None;
            if kind == Kind::Text {
                let none = directives.skip.is_none()
                    && directives.run_by.is_none()
                    && directives.before.is_empty()
                    && directives.after.is_empty()
                    && directives.needs.is_empty();
                assert!(none, "{file}:{}: a book-test directive on a text block (output, never run)", open + 1);
            }
            blocks.push(Block { file: file.to_owned(), line: open + 1, kind, attrs, body, directives });
            i += 1;
            continue;
        }
        if let Some(at) = pending_at {
            panic!("{file}:{at}: a book-test directive must sit right above a block's fence");
        }
        i += 1;
    }
    if let Some(at) = pending_at {
        panic!("{file}:{at}: a book-test directive with no block after it");
    }
    blocks
}

/// The shell text of a block, the book's example directories taken into the scratch directory.
fn shell_text(block: &Block) -> String {
    block.body.lines().map(|l| relocate(l) + "\n").collect()
}

/// `/srv/...` and `/tmp/jobs` moved under `$BOOK_ROOT` (the chapter's scratch directory).
fn relocate(line: &str) -> String {
    line.replace("/srv/", "$BOOK_ROOT/srv/").replace("/tmp/jobs", "$BOOK_ROOT/tmp/jobs")
}

/// One chapter's shell script, and for each of its lines the Markdown line it came from.
fn chapter_script(blocks: &[&Block]) -> (String, Vec<String>) {
    let mut script = String::new();
    let mut origin: Vec<String> = Vec::new();
    let mut push = |script: &mut String, text: &str, from: &dyn Fn(usize) -> String| {
        for (n, line) in text.lines().enumerate() {
            script.push_str(line);
            script.push('\n');
            origin.push(from(n));
        }
    };
    let prelude = "set -euo pipefail\n\
        trap 'echo \"@@book-failed $LINENO $?\" >&2' ERR\n\
        trap 'status=$?; for job in $(jobs -p); do kill \"$job\" 2>/dev/null || true; done; wait || true; exit $status' EXIT\n";
    push(&mut script, prelude, &|_| "the harness's prelude".to_owned());
    for block in blocks {
        let here = block.at();
        push(&mut script, &format!("echo '@@book-block {here}' >&2"), &|_| here.clone());
        for (line, code) in &block.directives.before {
            let file = block.file.clone();
            push(&mut script, &relocate(code), &|n| format!("{file}:{} (hidden, before the block)", line + n));
        }
        let file = block.file.clone();
        let first = block.line + 1;
        let body = if block.body.lines().any(|l| l.starts_with("$ ")) {
            // A console block: its commands, one line each, the output lines blanked (so line
            // numbers still map).
            block.body.lines().map(|l| l.strip_prefix("$ ").map_or(String::new(), relocate) + "\n").collect()
        } else {
            shell_text(block)
        };
        push(&mut script, &body, &|n| format!("{file}:{}", first + n));
        for (line, code) in &block.directives.after {
            let file = block.file.clone();
            push(&mut script, &relocate(code), &|n| format!("{file}:{} (hidden, after the block)", line + n));
        }
    }
    push(&mut script, "echo '@@book-done' >&2", &|_| "the harness's end".to_owned());
    (script, origin)
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    timed_out: bool,
    seconds: f64,
}

/// Runs `script` in bash in `root` (cwd `root/work`, `HOME` `root/home`), the binary's
/// directory first on PATH; kills the process group when it ends or times out.
fn run_bash(root: &Path, script: &str) -> Ran {
    use std::os::unix::process::CommandExt as _;
    let work = root.join("work");
    let home = root.join("home");
    std::fs::create_dir_all(&work).expect("work dir");
    std::fs::create_dir_all(&home).expect("home dir");
    if !work.join("examples").exists() {
        std::os::unix::fs::symlink(repo().join("examples"), work.join("examples")).expect("link examples/");
    }
    let script_path = root.join("chapter.sh");
    std::fs::write(&script_path, script).expect("write the chapter's script");
    let bin_dir = Path::new(BIN).parent().expect("binary's directory");
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_path_buf()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH");
    let out_path = root.join("stdout");
    let err_path = root.join("stderr");
    let mut command = std::process::Command::new("bash");
    command
        .arg(&script_path)
        .current_dir(&work)
        .env("PATH", path)
        .env("HOME", &home)
        .env("BOOK_ROOT", root)
        .env("BOOK_REPO", repo())
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .process_group(0);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("MANIFESTDB_") {
            command.env_remove(name);
        }
    }
    let started = Instant::now();
    let mut child = command.spawn().expect("run bash");
    let group = i32::try_from(child.id()).expect("a pid");
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for bash") {
            break status;
        }
        if started.elapsed() > CHAPTER_TIMEOUT {
            timed_out = true;
            // SAFETY: a signal to the process group this test started (its own id).
            unsafe { libc::kill(-group, libc::SIGKILL) };
            break child.wait().expect("wait for the killed bash");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Whatever the chapter left running in its group (a server it failed to stop).
    // SAFETY: as above; an empty group answers ESRCH, which is ignored.
    unsafe { libc::kill(-group, libc::SIGKILL) };
    let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    Ran { code: status.code(), stdout: read(&out_path), stderr: read(&err_path), timed_out, seconds: started.elapsed().as_secs_f64() }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Why a chapter failed: the Markdown line of the command that failed, or the block it was in.
fn explain(ran: &Ran, origin: &[String]) -> String {
    let mut why = String::new();
    if ran.timed_out {
        let _ = writeln!(why, "timed out after {CHAPTER_TIMEOUT:?}");
    }
    let failed = ran.stderr.lines().rev().find_map(|l| l.strip_prefix("@@book-failed "));
    if let Some(failed) = failed {
        let mut parts = failed.split(' ');
        let line: usize = parts.next().and_then(|l| l.parse().ok()).unwrap_or(0);
        let status = parts.next().unwrap_or("?");
        let at = origin.get(line.wrapping_sub(1)).cloned().unwrap_or_else(|| format!("script line {line}"));
        let _ = writeln!(why, "the command at {at} exited {status}");
    } else if let Some(block) = ran.stderr.lines().rev().find_map(|l| l.strip_prefix("@@book-block ")) {
        let _ = writeln!(why, "the shell ended (exit {:?}) in the block at {block}", ran.code);
    }
    let _ = writeln!(why, "--- stdout (end):\n{}\n--- stderr (end):\n{}", tail(&ran.stdout, 40), tail(&ran.stderr, 40));
    why
}

/// `lib.rs`'s doctest module includes `file` (so its Rust blocks are doctests).
fn is_a_doctest(lib: &str, file: &str) -> bool {
    let from_src = if file == "README.md" { "../README.md".to_owned() } else { format!("../{file}") };
    lib.contains(&format!("include_str!(\"{from_src}\")"))
}

#[derive(Default)]
struct Count {
    ran: usize,
    compiled_only: usize,
    skipped: usize,
    run_by: usize,
}

#[test]
fn every_block_of_the_book_runs_or_says_why_not() {
    if crate::support::redb_only("the book's blocks make store directories (the suite's first run ran them)") {
        return;
    }
    let lib = std::fs::read_to_string(repo().join("src/lib.rs")).expect("src/lib.rs");
    let mut counts: BTreeMap<Kind, Count> = BTreeMap::new();
    let mut notes: Vec<String> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let mut chapters: Vec<(String, Vec<Block>)> = Vec::new();
    for (file, text) in sources() {
        chapters.push((file.clone(), parse(&file, &text)));
    }
    let mut outputs = 0;
    for (file, blocks) in &chapters {
        let mut to_run: Vec<&Block> = Vec::new();
        for block in blocks {
            let count = counts.entry(block.kind).or_default();
            if let Some((path, test)) = &block.directives.run_by {
                let source = std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{}: run by {path}: {e}", block.at()));
                assert!(source.contains(&format!("fn {test}(")), "{}: run by {path} {test}, which has no such function", block.at());
                count.run_by += 1;
                notes.push(format!("{}: run by {path} {test}", block.at()));
                continue;
            }
            match block.kind {
                Kind::Text => outputs += 1,
                Kind::Rust => {
                    assert!(
                        is_a_doctest(&lib, file),
                        "{}: a Rust block in {file}, which src/lib.rs's doc_examples does not include (so no test compiles it)",
                        block.at()
                    );
                    let marked = block.attrs.iter().any(|a| a == "ignore" || a == "no_run");
                    match (&block.directives.skip, marked) {
                        (Some(reason), true) => {
                            if block.attrs.iter().any(|a| a == "ignore") {
                                count.skipped += 1;
                            } else {
                                count.compiled_only += 1;
                            }
                            notes.push(format!("{}: rust, {}: {reason}", block.at(), block.attrs.join(",")));
                        }
                        (None, false) => count.ran += 1,
                        (None, true) => {
                            panic!("{}: a Rust block marked ignore or no_run needs `<!-- book-test: not run: REASON -->`", block.at())
                        }
                        (Some(_), false) => {
                            panic!(
                                "{}: a Rust block with `not run:` must say so to rustdoc too (`rust,no_run` or `rust,ignore`)",
                                block.at()
                            )
                        }
                    }
                }
                Kind::Python => {
                    // Run by python/tests/test_docs.py under the wheel; counted here.
                    if let Some(reason) = &block.directives.skip {
                        count.skipped += 1;
                        notes.push(format!("{}: python, not run: {reason}", block.at()));
                    } else {
                        count.ran += 1;
                        if !block.directives.needs.is_empty() {
                            notes.push(format!(
                                "{}: python, needs {:?} (the environment of .ci/run that has it)",
                                block.at(),
                                block.directives.needs
                            ));
                        }
                    }
                }
                Kind::Shell => {
                    if let Some(reason) = &block.directives.skip {
                        count.skipped += 1;
                        notes.push(format!("{}: shell, not run: {reason}", block.at()));
                    } else {
                        to_run.push(block);
                    }
                }
            }
        }
        if to_run.is_empty() {
            continue;
        }
        // The blocks whose needs this machine lacks are skipped (fail under CI=true).
        let scratch = tempfile::Builder::new().prefix("book-").tempdir().expect("scratch dir");
        let mut runnable: Vec<&Block> = Vec::new();
        for block in to_run {
            let missing: Vec<&String> = block
                .directives
                .needs
                .iter()
                .filter(|need| {
                    !std::process::Command::new("bash").arg("-c").arg(format!("{need} >/dev/null 2>&1")).status().is_ok_and(|s| s.success())
                })
                .collect();
            if missing.is_empty() {
                runnable.push(block);
            } else {
                assert!(std::env::var("CI").as_deref() != Ok("true"), "{}: CI=true but this machine lacks {missing:?}", block.at());
                counts.entry(Kind::Shell).or_default().skipped += 1;
                notes.push(format!("{}: shell, SKIPPED here: needs {missing:?}", block.at()));
            }
        }
        let (script, origin) = chapter_script(&runnable);
        let ran = run_bash(scratch.path(), &script);
        let done = ran.stderr.lines().any(|l| l == "@@book-done");
        if ran.code == Some(0) && done {
            counts.entry(Kind::Shell).or_default().ran += runnable.len();
            notes.push(format!("{file}: {} shell blocks ran in {:.1} s", runnable.len(), ran.seconds));
        } else {
            failures.push(format!("{file}: {}", explain(&ran, &origin)));
        }
    }
    let mut summary = String::from("The book's blocks (docs/src/*.md and README.md):\n");
    for (kind, c) in &counts {
        let how = match kind {
            Kind::Shell => "ran (cli/tests/it/book.rs)",
            Kind::Rust => "doctests run (src/lib.rs doc_examples)",
            Kind::Python => "run by python/tests/test_docs.py",
            Kind::Text => "",
        };
        if *kind != Kind::Text {
            let _ = writeln!(
                summary,
                "  {kind:?}: {} {how}, {} compiled only, {} run by a test of their own, {} not run",
                c.ran, c.compiled_only, c.run_by, c.skipped
            );
        }
    }
    let _ = writeln!(summary, "  text (output, not code): {outputs}");
    for note in &notes {
        let _ = writeln!(summary, "  {note}");
    }
    println!("{summary}");
    let _ = std::fs::write(Path::new(env!("CARGO_TARGET_TMPDIR")).join("book-blocks.txt"), &summary);
    assert!(failures.is_empty(), "{} chapter(s) failed:\n{}", failures.len(), failures.join("\n"));
}

/// The harness itself: a failing command is reported at its Markdown line (hidden lines
/// included), a skipped block does not run, and a later block sees what an earlier one set.
#[test]
fn the_book_harness_reports_a_failing_line_where_the_chapter_has_it() {
    let chapter = "# A chapter\n\n```sh\nX=1\n```\n\n<!-- book-test: not run: a placeholder -->\n```sh\nfalse\n```\n\n\
        <!-- book-test: before\ntest \"$X\" = 1\n-->\n```sh\necho ok\nmanifestdb no-such-verb\necho never\n```\n";
    let blocks = parse("chapter.md", chapter);
    assert_eq!(blocks.len(), 3);
    assert_eq!(blocks[1].directives.skip.as_deref(), Some("a placeholder"));
    let runnable: Vec<&Block> = blocks.iter().filter(|b| b.directives.skip.is_none()).collect();
    let (script, origin) = chapter_script(&runnable);
    let scratch = tempfile::tempdir().expect("scratch");
    let ran = run_bash(scratch.path(), &script);
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(ran.stdout.contains("ok") && !ran.stdout.contains("never"), "{}", ran.stdout);
    let why = explain(&ran, &origin);
    assert!(why.starts_with("the command at chapter.md:17 exited 2"), "{why}");

    // A console block runs its `$ ` lines only, not the output printed under them.
    let blocks = parse("c.md", "```console\n$ echo one\none\nfalse output line\n$ echo two\ntwo\n```\n");
    let (script, _) = chapter_script(&blocks.iter().collect::<Vec<_>>());
    let ran = run_bash(scratch.path(), &script);
    assert_eq!((ran.code, ran.stdout.as_str()), (Some(0), "one\ntwo\n"), "{}", ran.stderr);

    // A hidden line that fails is named as hidden.
    let blocks = parse("c.md", "<!-- book-test: before\ntrue\nfalse\n-->\n```sh\necho hi\n```\n");
    let (script, origin) = chapter_script(&blocks.iter().collect::<Vec<_>>());
    let ran = run_bash(scratch.path(), &script);
    assert!(explain(&ran, &origin).starts_with("the command at c.md:3 (hidden, before the block) exited 1"), "{}", explain(&ran, &origin));
}

#[test]
#[should_panic(expected = "must sit right above a block's fence")]
fn a_book_test_directive_away_from_a_block_is_refused() {
    parse("c.md", "<!-- book-test: not run: x -->\n\nSome text.\n```sh\ntrue\n```\n");
}

/// The `manifestdb ...` commands the chapters name in running text (inline code, outside the
/// blocks): each parses, its verb and flags existing, checked by running it with `--help`
/// appended (the part before a `|`, `>`, `&&` or `;`). An all-caps word where a number is due
/// (`--generation N`) is a placeholder, not a wrong line.
#[test]
fn every_command_the_chapters_name_in_running_text_parses() {
    let bin_dir = Path::new(BIN).parent().expect("binary's directory");
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_path_buf()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH");
    let scratch = tempfile::tempdir().expect("scratch");
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (file, text) in sources() {
        // Running text only: the lines outside the fenced blocks.
        let mut inside: Option<String> = None;
        let mut prose = String::new();
        for line in text.lines() {
            let trimmed = line.trim_start();
            match &inside {
                Some(fence) if trimmed.trim_end() == fence => inside = None,
                Some(_) => {}
                None if trimmed.starts_with("```") => {
                    inside = Some("`".repeat(3 + trimmed[3..].len() - trimmed[3..].trim_start_matches('`').len()));
                }
                None => {
                    prose.push_str(line);
                    prose.push('\n');
                }
            }
        }
        for span in prose.split('`').skip(1).step_by(2) {
            // A span may wrap across lines of the Markdown source.
            let span = span.split_whitespace().collect::<Vec<_>>().join(" ");
            let Some(command) = span.strip_prefix("manifestdb ") else { continue };
            let command = command.split(['|', '>', ';']).next().unwrap_or("").split("&&").next().unwrap_or("").trim();
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(format!("manifestdb {command} --help"))
                .current_dir(scratch.path())
                .env("PATH", &path)
                .env_remove("MANIFESTDB_DIR")
                .env_remove("MANIFESTDB_STORE")
                .output()
                .expect("run bash");
            checked += 1;
            let stderr = String::from_utf8_lossy(&out.stderr);
            let placeholder = stderr
                .split("invalid value '")
                .nth(1)
                .and_then(|rest| rest.split('\'').next())
                .is_some_and(|value| !value.is_empty() && value.chars().all(|c| c.is_ascii_uppercase() || c == '_'));
            if !out.status.success() && !placeholder {
                wrong.push(format!("{file}: `{span}`: {}", stderr.lines().next().unwrap_or("")));
            }
        }
    }
    assert!(checked >= 30, "the chapters name {checked} commands in running text; the test finds them no longer?");
    assert!(wrong.is_empty(), "commands in the book's running text that do not parse:\n{}", wrong.join("\n"));
}

//! DOMAIN invariant 10 over many damaged copies of a real store.
//!
//! Each copy is the committed `tests/fixtures/good.redb` (the scripted workload run to the
//! end) with one kind of damage: the type byte of each 4 KiB page changed, and a spread of
//! other bytes (every 509th byte, so every offset within a page is hit across pages) flipped
//! or overwritten. Each copy is then used as a user would, through the public API on the
//! store file: a read-only open and a full read, a read-only verify, a writable open and a full
//! read, a few writes and a full read after them, and a verify with redb's integrity check.
//!
//! Every step either fails with an error saying the store is damaged, or gives exactly the
//! answer the undamaged store gives; none panics, none gives another answer (a "silent wrong
//! answer"), none reports a damaged store as "not found" or as any other error. Whole pages
//! swapped with their neighbour are counted and printed apart: some are only caught by redb's
//! page checksums, which only its integrity check verifies (see the book, `docs/src/crash-safety.md`).
//!
//! `cargo test --workspace --test it damage:: -- --nocapture` prints the figures.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use manifestdb::testing::{self, Op};
use manifestdb::{Error, ReadOnlyStore, Store, VerifyOptions};

const PAGE_BYTES: usize = 4096;

/// Writes tried on each damaged copy, in order: they read runs, tasks, attempts, versions,
/// generations, pointers and digests before writing.
const WRITES: [Op; 5] = [
    Op::Declare { run: 2 },
    Op::Begin { run: 2, part: 0 },
    Op::Publish { run: 1 },
    Op::Rollback { to: 2 },
    Op::Effect { run: 1, part: None, name: 1 },
];

fn good_fixture() -> Vec<u8> {
    std::fs::read(crate::support::repo_root().join("tests/fixtures/good.redb")).unwrap()
}

/// How one step of one damaged copy ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// The same answer as the undamaged store.
    Correct,
    /// An error saying the store is damaged.
    Detected,
    /// Another answer than the undamaged store's, given as if it were right.
    Silent(String),
    /// Another error than the undamaged store's, not saying the store is damaged.
    Wrong(String),
}

/// A step's answer: the value as text, or the error.
type Answer = Result<String, Error>;

/// Runs every step on the store file at `path`; returns each step's name and answer.
fn script(path: &Path, staging: &Path) -> Vec<(&'static str, Answer)> {
    let mut out: Vec<(&'static str, Answer)> = Vec::new();
    let dump = |snapshot: manifestdb::Result<manifestdb::Snapshot>| -> Answer { Ok(testing::dump(&snapshot?)?.join("\n")) };
    let verdict = |report: manifestdb::VerifyReport| if report.is_clean() { "clean".to_owned() } else { format!("{report}") };
    match ReadOnlyStore::open(path) {
        Err(err) => out.push(("read-only open", Err(err))),
        Ok(reader) => {
            out.push(("read-only read", dump(reader.snapshot())));
            out.push(("read-only verify", reader.verify(&VerifyOptions::default()).map(verdict)));
        }
    }
    match Store::open(path, staging) {
        Err(err) => out.push(("open", Err(err))),
        Ok(mut store) => {
            out.push(("read", dump(store.snapshot())));
            for op in WRITES {
                out.push(("write", testing::apply(&store, op)));
            }
            out.push(("read after writes", dump(store.snapshot())));
            out.push(("verify", store.verify(&VerifyOptions::default()).map(verdict)));
        }
    }
    out
}

/// Runs the script on a copy of `image`; `None` if a panic escaped the public API.
fn run_copy(image: &[u8]) -> Option<Vec<(&'static str, Answer)>> {
    let dir = tempdir();
    let path = dir.path().join("store.redb");
    std::fs::write(&path, image).unwrap();
    let staging = dir.path().join("staging");
    catch_unwind(AssertUnwindSafe(|| script(&path, &staging))).ok()
}

fn tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() { tempfile::tempdir_in(shm).unwrap() } else { tempfile::tempdir().unwrap() }
}

fn judge(step: &str, got: &Answer, expected: &Answer) -> Outcome {
    match (got, expected) {
        (Err(err), _) if err.is_corruption() => Outcome::Detected,
        (Ok(got), Ok(expected)) if got == expected => Outcome::Correct,
        // A refusal of a write (an op that does not apply) is an answer like any other.
        (Err(got), Err(expected)) if got.to_string() == expected.to_string() => Outcome::Correct,
        (Ok(_) | Err(_), _) if step == "verify" || step == "read-only verify" => match got {
            Ok(text) if text != "clean" => Outcome::Detected,
            Ok(_) => Outcome::Silent(format!("{step}: clean")),
            Err(_) => Outcome::Wrong(format!("{step}: {got:?}")),
        },
        (Ok(_), _) => Outcome::Silent(format!("{step}: got {}, expected {}", show(got), show(expected))),
        (Err(_), _) => Outcome::Wrong(format!("{step}: got {}, expected {}", show(got), show(expected))),
    }
}

fn show(answer: &Answer) -> String {
    match answer {
        Ok(text) => format!("Ok({} lines)", text.lines().count()),
        Err(err) => format!("Err({err})"),
    }
}

#[derive(Default, Debug)]
struct Tally {
    copies: usize,
    runs: usize,
    panics: usize,
    detected: usize,
    correct: usize,
    /// Silent wrong answers and other wrong outcomes (a panic, an error not saying the store
    /// is damaged).
    wrong: Vec<String>,
    silent: usize,
}

impl Tally {
    fn add(&mut self, label: &str, reference: &[(&'static str, Answer)], image: &[u8]) {
        self.copies += 1;
        let Some(answers) = run_copy(image) else {
            self.panics += 1;
            self.wrong.push(format!("{label}: a panic escaped the public API"));
            return;
        };
        for (i, (step, got)) in answers.iter().enumerate() {
            self.runs += 1;
            // The steps run in a fixed order; a failed open shortens the list, so a step is
            // compared with the reference step of the same name and position among its kind.
            let expected = reference.iter().filter(|(s, _)| s == step).nth(answers[..i].iter().filter(|(s, _)| s == step).count());
            let outcome = match expected {
                Some((_, expected)) => judge(step, got, expected),
                None => match got {
                    Err(err) if err.is_corruption() => Outcome::Detected,
                    _ => Outcome::Wrong(format!("{step}: {} where the undamaged store has no such step", show(got))),
                },
            };
            match outcome {
                Outcome::Correct => self.correct += 1,
                Outcome::Detected => self.detected += 1,
                Outcome::Silent(why) => {
                    self.silent += 1;
                    self.wrong.push(format!("{label}: silently wrong: {why}"));
                }
                Outcome::Wrong(why) => self.wrong.push(format!("{label}: {why}")),
            }
        }
    }
}

fn with_byte(good: &[u8], at: usize, value: impl Fn(u8) -> u8) -> Vec<u8> {
    let mut image = good.to_vec();
    image[at] = value(image[at]);
    image
}

#[test]
fn no_damaged_byte_makes_the_api_panic_or_answer_wrongly() {
    if crate::support::redb_only("damages bytes of a redb file") {
        return;
    }
    let good = good_fixture();
    let reference = run_copy(&good).expect("the good fixture runs");
    assert!(reference.iter().all(|(step, answer)| answer.is_ok() || *step == "write"), "{reference:?}");
    let pages = good.len() / PAGE_BYTES;
    let mut tally = Tally::default();
    for page in 0..pages {
        for (name, value) in [("+1", 1u8), ("^0xff", 0xff)] {
            let image = with_byte(&good, page * PAGE_BYTES, |b| if name == "+1" { b.wrapping_add(value) } else { b ^ value });
            tally.add(&format!("page {page} type byte {name}"), &reference, &image);
        }
    }
    let mut at = 1;
    while at < good.len() {
        tally.add(&format!("byte {at} ^0x04"), &reference, &with_byte(&good, at, |b| b ^ 0x04));
        tally.add(&format!("byte {at} =0xff"), &reference, &with_byte(&good, at, |_| 0xff));
        at += 509;
    }
    println!(
        "damaged bytes: {} copies, {} API runs: {} panics, {} detected as damage, {} correct answers, {} silent wrong answers, {} \
         other wrong outcomes",
        tally.copies,
        tally.runs,
        tally.panics,
        tally.detected,
        tally.correct,
        tally.silent,
        tally.wrong.len() - tally.silent
    );
    assert!(tally.wrong.is_empty(), "{} wrong outcomes:\n{}", tally.wrong.len(), tally.wrong.join("\n"));
    // About half the copies damage bytes nothing reads (free pages, unused space).
    assert!(tally.detected >= tally.copies / 4, "the sweep damaged nothing that matters");
}

#[test]
fn swapped_pages_are_counted() {
    if crate::support::redb_only("swaps pages of a redb file") {
        return;
    }
    let good = good_fixture();
    let reference = run_copy(&good).expect("the good fixture runs");
    let pages = good.len() / PAGE_BYTES;
    let mut tally = Tally::default();
    for page in 1..pages - 1 {
        let mut image = good.clone();
        let (a, b) = image.split_at_mut((page + 1) * PAGE_BYTES);
        a[page * PAGE_BYTES..].swap_with_slice(&mut b[..PAGE_BYTES]);
        tally.add(&format!("pages {page} and {} swapped", page + 1), &reference, &image);
    }
    // What would catch them: redb's page checksums, which only its integrity check verifies.
    // Run first on a fresh copy (as an open with `check_integrity_on_open` would).
    let mut caught_by_integrity = 0;
    let mut wrong_and_caught = (0, 0);
    let started = std::time::Instant::now();
    for page in 1..pages - 1 {
        let mut image = good.clone();
        let (a, b) = image.split_at_mut((page + 1) * PAGE_BYTES);
        a[page * PAGE_BYTES..].swap_with_slice(&mut b[..PAGE_BYTES]);
        let dir = tempdir();
        let path = dir.path().join("store.redb");
        std::fs::write(&path, &image).unwrap();
        let caught = match Store::open(&path, dir.path().join("staging")) {
            Err(_) => true,
            Ok(mut store) => store.verify(&VerifyOptions::default()).map_or(true, |r| !r.is_clean()),
        };
        caught_by_integrity += usize::from(caught);
        let label = format!("pages {page} and {} swapped:", page + 1);
        if tally.wrong.iter().any(|w| w.starts_with(&label)) {
            wrong_and_caught.0 += 1;
            wrong_and_caught.1 += usize::from(caught);
        }
    }
    println!(
        "swapped pages: {} copies, {} API runs: {} panics, {} detected as damage, {} correct answers, {} silent wrong answers, {} \
         other wrong outcomes; a verify with redb's integrity check run first catches {caught_by_integrity} of the {} copies, \
         {} of the {} with a wrong outcome ({:.1} ms per {} KiB store, open included)",
        tally.copies,
        tally.runs,
        tally.panics,
        tally.detected,
        tally.correct,
        tally.silent,
        tally.wrong.len() - tally.silent,
        tally.copies,
        wrong_and_caught.1,
        wrong_and_caught.0,
        started.elapsed().as_secs_f64() * 1000.0 / tally.copies as f64,
        good.len() / 1024
    );
    for wrong in &tally.wrong {
        println!("  {wrong}");
    }
    assert_eq!(tally.panics, 0, "{:?}", tally.wrong);
}

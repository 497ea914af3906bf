"""Every Python block of the book (docs/src/*.md) and of the README runs as printed.

A chapter's blocks run in order in one fresh interpreter (a later block sees what an earlier
one defined), in a scratch directory, with this interpreter (the installed wheel). Each block
is compiled under its Markdown file's name with its lines where the file has them, so a
traceback names the chapter's line. The directives are the book test's
(cli/tests/it/book.rs), HTML comments right above a fence that the rendered book does not
show: ``<!-- book-test: not run: REASON -->`` skips a block, ``<!-- book-test: needs MODULE -->``
runs it only where MODULE imports (the Airflow and Dagster environments of .ci/run run this
file too), ``<!-- book-test: before`` / ``after`` and lines of Python hide setup or a check.
The counts are printed (pytest -s, or the skip reasons with -rs).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(\s*)(`{3,})\s*([^`]*)$")


@dataclass
class Directives:
    skip: str | None = None
    needs: list[str] = field(default_factory=list)
    before: list[tuple[int, str]] = field(default_factory=list)
    after: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class Block:
    file: str
    line: int  # 1-based line of the opening fence
    language: str
    body: str
    directives: Directives


def parse(file: str, text: str) -> list[Block]:
    """The fenced blocks of one Markdown file with the book-test directives above each."""
    lines = text.split("\n")
    blocks: list[Block] = []
    pending = Directives()
    pending_at: int | None = None
    i = 0
    while i < len(lines):
        stripped = lines[i].lstrip()
        if stripped.startswith("<!-- book-test:"):
            start = i
            content = stripped[len("<!-- book-test:") :]
            while "-->" not in content:
                i += 1
                assert i < len(lines), f"{file}:{start + 1}: a book-test comment without its -->"
                content += "\n" + lines[i]
            content = content[: content.index("-->")]
            head, _, code = content.partition("\n")
            head = head.strip()
            if head.startswith("not run:"):
                pending.skip = head[len("not run:") :].strip()
            elif head.startswith("needs "):
                pending.needs.append(head[len("needs ") :].strip())
            elif head == "before":
                pending.before.append((start + 2, code))
            elif head == "after":
                pending.after.append((start + 2, code))
            elif not head.startswith("run by "):
                raise AssertionError(f"{file}:{start + 1}: unknown book-test directive {head!r}")
            pending_at = start + 1 if pending_at is None else pending_at
            i += 1
            continue
        fence = FENCE.match(lines[i])
        if fence:
            indent, ticks, info = fence.groups()
            language = re.split(r"[ ,]", info.strip())[0] if info.strip() else ""
            open_line = i
            body: list[str] = []
            i += 1
            while i < len(lines) and lines[i].strip() != ticks:
                body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i].lstrip())
                i += 1
            assert i < len(lines), f"{file}:{open_line + 1}: a block that is never closed"
            blocks.append(Block(file, open_line + 1, language, "\n".join(body) + "\n", pending))
            pending = Directives()
            pending_at = None
            i += 1
            continue
        assert pending_at is None, f"{file}:{pending_at}: a book-test directive must sit right above a block's fence"
        i += 1
    assert pending_at is None, f"{file}:{pending_at}: a book-test directive with no block after it"
    return blocks


def chapters() -> dict[str, list[Block]]:
    """Each chapter (and the README) with Python blocks: its Python blocks, in order."""
    files = sorted((ROOT / "docs" / "src").glob("*.md")) + [ROOT / "README.md"]
    found: dict[str, list[Block]] = {}
    for path in files:
        name = str(path.relative_to(ROOT))
        python = [b for b in parse(name, path.read_text()) if b.language in ("python", "py")]
        if python:
            found[name] = python
    return found


# Runs a chapter's blocks: argv[1] is a JSON list of [file, first line, code] pieces; each is
# compiled under the Markdown file's path with its first line where the file has it.
RUNNER = """
import json, sys
namespace = {"__name__": "__main__"}
for file, line, code in json.loads(sys.argv[1]):
    print(f"@@book-block {file}:{line}", file=sys.stderr, flush=True)
    exec(compile("\\n" * (line - 1) + code, file, "exec"), namespace)
print("@@book-done", file=sys.stderr)
"""


def missing_modules(block: Block) -> list[str]:
    return [m for m in block.directives.needs if importlib.util.find_spec(m) is None]


CHAPTERS = chapters()


def test_the_book_has_python_blocks_and_each_is_accounted_for() -> None:
    counted = [b for blocks in CHAPTERS.values() for b in blocks]
    assert len(counted) >= 5, "the Python chapter's examples and the README's"
    ran = [b for b in counted if b.directives.skip is None and not missing_modules(b)]
    skipped = [b for b in counted if b.directives.skip is not None]
    lacking = [b for b in counted if b.directives.skip is None and missing_modules(b)]
    print(f"\nThe book's Python blocks: {len(ran)} run here, {len(skipped)} not run, {len(lacking)} need a module missing here")
    for b in skipped:
        print(f"  {b.file}:{b.line}: not run: {b.directives.skip}")
    for b in lacking:
        print(f"  {b.file}:{b.line}: needs {missing_modules(b)} (run where it is installed)")


NOT_RUN_EVERYWHERE = [b for blocks in CHAPTERS.values() for b in blocks if b.directives.skip is not None or b.directives.needs]


@pytest.mark.parametrize("block", NOT_RUN_EVERYWHERE, ids=[f"{b.file}:{b.line}" for b in NOT_RUN_EVERYWHERE])
def test_a_block_not_run_here_says_why(block: Block) -> None:
    """One line per such block under ``pytest -rs``: why it did not run here (a block whose
    modules are installed here ran in its chapter's test and passes)."""
    if block.directives.skip is not None:
        pytest.skip(f"{block.file}:{block.line}: not run: {block.directives.skip}")
    if missing_modules(block):
        pytest.skip(f"{block.file}:{block.line}: needs {missing_modules(block)}: run in the .ci/run environment that installs it")


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_the_chapters_python_blocks_run_as_printed(chapter: str, tmp_path: Path) -> None:
    blocks = CHAPTERS[chapter]
    pieces: list[tuple[str, int, str]] = []
    lacking: list[str] = []
    for block in blocks:
        if block.directives.skip is not None:
            continue
        if missing_modules(block):
            lacking.append(f"{block.file}:{block.line} needs {missing_modules(block)}")
            continue
        pieces += [(chapter, line, code) for line, code in block.directives.before]
        pieces.append((chapter, block.line + 1, block.body))
        pieces += [(chapter, line, code) for line, code in block.directives.after]
    if not pieces:
        pytest.skip("; ".join(lacking) or "no block runs")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MANIFESTDB_")}
    env["HOME"] = str(tmp_path / "home")
    env["AIRFLOW_HOME"] = str(tmp_path / "airflow")
    (tmp_path / "home").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(pieces)], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0 and "@@book-done" in done.stderr, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    if lacking:
        print("; ".join(lacking))


def test_a_failing_line_is_reported_at_its_chapter_line(tmp_path: Path) -> None:
    blocks = parse("c.md", "# C\n\n```python\nx = 1\n```\n\n<!-- book-test: not run: a placeholder -->\n```python\nraise SystemExit(3)\n```\n\n```python\nassert x == 1\n1 / 0\n```\n")
    assert [b.directives.skip for b in blocks] == [None, "a placeholder", None]
    pieces = [("c.md", b.line + 1, b.body) for b in blocks if b.directives.skip is None]
    done = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(pieces)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1
    assert 'File "c.md", line 14' in done.stderr and "ZeroDivisionError" in done.stderr, done.stderr

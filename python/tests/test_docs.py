"""The book's Python example runs as written (in a fresh directory)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def chapter() -> Path:
    return DOCS / "src" / "python.md"


def test_the_fifteen_line_example_runs(tmp_path: Path) -> None:
    text = chapter().read_text()
    section = text[text.index("## Fifteen lines") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    (tmp_path / "jobs").mkdir()
    done = subprocess.run([sys.executable, "-c", code.group(1)], cwd=tmp_path, capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("generation 1 [") and "part.csv" in done.stdout, done.stdout


def test_the_readme_example_runs(tmp_path: Path) -> None:
    text = (DOCS.parent / "README.md").read_text()
    code = re.search(r"```python\n(import manifestdb.*?)```", text, re.S)
    assert code is not None, "the README's Python example is missing"
    (tmp_path / "jobs").mkdir()
    done = subprocess.run([sys.executable, "-c", code.group(1)], cwd=tmp_path, capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode == 0, done.stderr

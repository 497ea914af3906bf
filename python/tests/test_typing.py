"""The package is typed (py.typed, the native module's .pyi): mypy --strict accepts a worker
written against it and rejects a call with a wrong type."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

GOOD = '''
from datetime import timedelta
from pathlib import Path
import manifestdb as m

def work(store: m.Store | m.Client, staging_file: str) -> int:
    store.declare_run(m.RunSpec("d", "r", "s", [m.TaskSpec("p=1", 1, 5)], m.Grain("csv", ["k"], "v")))
    ticket: m.AttemptTicket = store.begin_attempt(m.TaskKey("d", "r", "p=1"))
    path: Path = ticket.staging_dir / staging_file
    path.write_text("k,v\\n1,5\\n")
    store.finish_attempt(ticket.key, m.Candidate("s", files=[m.describe_file(ticket.staging_dir, staging_file)]))
    verdict = store.validate_attempt(ticket.key, m.FileCheck.SIZE_AND_CHECKSUM)
    assert verdict.is_valid()
    outcome = store.publish("d", "r")
    match outcome:
        case m.Published(generation=g) | m.AlreadyPublished(generation=g):
            return g.number
        case m.Refused(tasks=tasks):
            raise RuntimeError(", ".join(t.message for t in tasks))
    claim = store.claim_effect(m.EffectKey("d", "r", "notify"), "me", timedelta(seconds=30))
    return 0 if isinstance(claim, m.Claimed) else 1

with m.Store.open("s.redb", "staging") as s:
    work(s, "part.csv")
work(m.Client("/tmp/manifestdb.sock"), "part.csv")
'''

BAD = '''
import manifestdb as m
with m.Store.open("s.redb", "staging") as s:
    s.begin_attempt("d/r/p")
'''


def mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    file = tmp_path / "worker.py"
    file.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / ".mypy"), str(file)],
        capture_output=True, text=True, cwd=tmp_path,
    )


def test_mypy_strict_accepts_a_typed_worker(tmp_path: Path) -> None:
    result = mypy(tmp_path, GOOD)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_rejects_a_wrong_argument_type(tmp_path: Path) -> None:
    result = mypy(tmp_path, BAD)
    assert result.returncode == 1 and 'Argument 1 to "begin_attempt"' in result.stdout, result.stdout + result.stderr

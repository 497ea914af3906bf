"""The package's public interface is fully typed for a checker: pyright's ``--verifytypes``
(through basedpyright from PyPI) over the installed package scores 100 %: every symbol
manifestdb exports has a known type, and a docstring.

It runs where Dagster is installed (CI's Dagster virtualenv), since ``manifestdb.dagster`` is
part of the interface and its base class, Dagster's ``ConfigurableIOManager``, must resolve.
pyright takes its interpreter from PATH, so the virtualenv's ``bin`` goes first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("dagster")


def test_every_exported_symbol_has_a_known_type_and_a_docstring(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    exe = bin_dir / "basedpyright"
    if not exe.exists():
        if os.environ.get("CI"):
            pytest.fail("basedpyright is not installed in this virtualenv (CI installs it beside dagster)")
        pytest.skip("basedpyright is not installed (pip install basedpyright)")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [str(exe), "--verifytypes", "manifestdb", "--ignoreexternal", "--outputjson"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )
    try:
        completeness = json.loads(result.stdout)["typeCompleteness"]
    except (json.JSONDecodeError, KeyError):
        raise AssertionError(f"basedpyright printed no report (exit {result.returncode}): {result.stdout}{result.stderr}") from None
    # The installed package, not a source tree beside the test.
    assert "site-packages" in completeness["packageRootDirectory"], completeness["packageRootDirectory"]
    findings = {
        s["name"]: [d["message"] for d in s["diagnostics"]]
        for s in completeness["symbols"]
        if not s["isTypeKnown"] or s["isTypeAmbiguous"] or s["diagnostics"]
    }
    assert findings == {}, json.dumps(findings, indent=1)
    exported = completeness["exportedSymbolCounts"]
    assert exported["withUnknownType"] == 0 and exported["withAmbiguousType"] == 0 and exported["withKnownType"] > 800, exported
    assert completeness["missingFunctionDocStringCount"] == 0 and completeness["missingClassDocStringCount"] == 0
    assert completeness["completenessScore"] == 1, completeness["completenessScore"]

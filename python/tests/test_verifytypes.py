"""The package's public interface is fully typed for a checker (pyright's ``--verifytypes``, run
through basedpyright from PyPI): every symbol manifestdb exports has a known type.

It runs where Dagster is installed (CI's Dagster virtualenv), since ``manifestdb.dagster`` is
part of the interface. One finding is Dagster's, not the package's, and is the only one allowed:
``ManifestdbIOManager``'s base class, Dagster's ``ConfigurableIOManager``, has a metaclass that
pyright cannot type (Dagster imports pydantic's ``ModelMetaclass`` from ``pydantic.main``, where
pyright sees ``Any``), so pyright counts the class's metaclass and base as unknown.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("dagster")

DAGSTERS = {"manifestdb.dagster.ManifestdbIOManager": {"Type of metaclass unknown", "Type of base class unknown"}}


def verifytypes(cwd: Path) -> dict[str, object]:
    exe = Path(sys.executable).parent / "basedpyright"
    found = str(exe) if exe.exists() else shutil.which("basedpyright")
    if found is None:
        pytest.skip("basedpyright is not installed (pip install basedpyright)")
    result = subprocess.run(
        [found, "--pythonpath", sys.executable, "--verifytypes", "manifestdb", "--ignoreexternal", "--outputjson"],
        capture_output=True, text=True, cwd=cwd, timeout=300,
    )
    try:
        report: dict[str, object] = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"basedpyright printed no report (exit {result.returncode}): {result.stdout}{result.stderr}") from None
    return report


def test_every_exported_symbol_has_a_known_type(tmp_path: Path) -> None:
    report = verifytypes(tmp_path)
    completeness = report["typeCompleteness"]
    assert isinstance(completeness, dict)
    # The installed package, not a source tree beside the test.
    assert "site-packages" in str(completeness["packageRootDirectory"]), completeness["packageRootDirectory"]
    unknown: dict[str, set[str]] = {}
    for symbol in completeness["symbols"]:
        if not symbol["isTypeKnown"] or symbol["diagnostics"]:
            unknown[symbol["name"]] = {d["message"] for d in symbol["diagnostics"] if d["severity"] == "error"}
    # Anything beyond Dagster's metaclass is the package's own gap.
    ours = {name: messages for name, messages in unknown.items() if not messages <= DAGSTERS.get(name, set())}
    assert ours == {}, json.dumps({k: sorted(v) for k, v in ours.items()}, indent=1)
    # Every other exported symbol counts: the score misses only the one class.
    exported = completeness["exportedSymbolCounts"]
    assert isinstance(exported, dict)
    assert exported["withUnknownType"] <= len(DAGSTERS) and exported["withAmbiguousType"] == 0, exported
    assert exported["withKnownType"] > 800, exported
    # And each has its docstring.
    assert completeness["missingFunctionDocStringCount"] == 0 and completeness["missingClassDocStringCount"] == 0, [
        d["message"] for s in completeness["symbols"] for d in s["diagnostics"] if "docstring" in d["message"]
    ]

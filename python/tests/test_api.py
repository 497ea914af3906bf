"""The Python API covers the Rust one: every public method of `Store`, `ReadOnlyStore` and
`Snapshot` in the library has a counterpart on `manifestdb.Store` (or a reason here why not),
and `Client` has every operation `Store` has. Run against the library's source, so a method
added to the Rust API fails this test until it is bound."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import manifestdb as m

SRC = Path(__file__).resolve().parents[2] / "src"

# Rust names whose Python counterpart has another name.
RENAMED = {
    "open_with_options": "open",  # the options are keywords of Store.open
    "attempt_lifetime_max_ms": "attempt_lifetime_max",  # a timedelta, as every Python duration
}

# Rust methods deliberately not bound, and why.
NOT_BOUND = {
    "open_with_backend": "takes a Rust StorageBackend (fault injection for Rust tests)",
    "inject_view_failure": "a test hook of the Rust crate",
    "view_operations": "a test hook of the Rust crate",
    "wait_for_view_removals": "a test hook of the Rust crate (Store.close waits for the removals)",
    "snapshot": "each Python read is one consistent snapshot of its own",
    "store_id": "Effect.store_id: every effect carries the id of the store that holds it",
    "prepare_validation": "validate_attempt runs both halves with the GIL released",
    "store_validation": "validate_attempt runs both halves with the GIL released",
    "with_staging_root": "ReadOnlyStore.open(path, staging) takes the staging root",
    "view_root": "Store.view(dataset).view_root",
    "view_mode": "fixed when the store is opened (Store.open(view_mode=...))",
    "views": "Store.view(dataset)",
    "view_path": "Store.view(dataset, generation).path",
    "view_files": "Store.view(dataset, generation).files",
    "table_entries": "Store.stats()['tables']",
    # The progress hooks are for a caller that draws progress while it waits (the CLI on a
    # terminal); a Python call runs with the GIL released and reports none.
    "validate_attempt_with_progress": "validate_attempt, without a progress hook",
    "prepare_validation_with_progress": "validate_attempt runs both halves with the GIL released",
    "apply_cleanup_with_progress": "apply_cleanup, without a progress hook",
    "verify_with_progress": "verify, without a progress hook",
    # One call applies every batch on the Python handle; the three steps are for a caller that
    # closes the store between batches (the CLI's gc apply).
    "start_cleanup_apply": "apply_cleanup runs every batch",
    "apply_cleanup_batch": "apply_cleanup runs every batch",
    "finish_cleanup_apply": "apply_cleanup runs every batch",
    "verify_without_writing": "the CLI's verify --integrity on a handle of its own; Store.verify checks through the open handle",
    # The wheel writes the table (feature `delta`, manifestdb.features()); the view document has
    # its path and the version holding each generation.
    "delta_table": "Store.view(dataset).table['path'] (and ['version'])",
}

ONLY_EMBEDDED = {"open", "recover", "staging_root", "staging_url", "path", "close", "closed"}


def rust_methods(type_name: str) -> set[str]:
    names = set()
    for file in SRC.rglob("*.rs"):
        text = file.read_text()
        for block in re.finditer(rf"^impl {type_name} \{{\n(.*?)^\}}", text, re.S | re.M):
            names.update(re.findall(r"^    pub fn (\w+)", block.group(1), re.M))
    return names


def test_every_public_rust_method_has_a_python_counterpart() -> None:
    rust = rust_methods("Store") | rust_methods("Snapshot") | rust_methods("ReadOnlyStore")
    assert {"declare_run", "begin_attempt", "publish", "manifest"} <= rust, "the source was not found or not parsed"
    missing = sorted(
        name for name in rust if name not in NOT_BOUND and not hasattr(m.Store, RENAMED.get(name, name))
    )
    assert missing == [], f"Rust methods without a Python counterpart (bind them, or say why in NOT_BOUND): {missing}"


@pytest.mark.parametrize("name", sorted(n for n in dir(m.Store) if not n.startswith("_") and n not in ONLY_EMBEDDED))
def test_the_client_has_every_operation_of_the_store(name: str) -> None:
    assert hasattr(m.Client, name)

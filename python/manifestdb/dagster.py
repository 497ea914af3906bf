"""Dagster: an IO manager that writes each partition of an asset through an attempt and
publishes it on materialization (``pip install "manifestdb[dagster]"``).

::

    @asset(partitions_def=StaticPartitionsDefinition(["region=eu", "region=us"]), io_manager_key="manifestdb")
    def daily_units(context) -> PartitionOutput:
        rows = compute(context.partition_key)
        return PartitionOutput(lambda d: write_csv(d / "part.csv", rows), rows=len(rows), total=sum(...))

    defs = Definitions(assets=[daily_units], resources={"manifestdb": ManifestdbIOManager(store=..., staging=...)})

The dataset is the asset key (``/``-joined); each materialization of a partition is a
manifestdb run of one task, named ``<partition>@<snapshot>`` (the snapshot is the
IO manager's ``snapshot`` config, or else the partition key), so a re-execution after a failure is another attempt of the same task, and the
published partition holds exactly one. A downstream asset gets the published partition's files
(a list of absolute paths), read through the current generation.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from dagster import ConfigurableIOManager, InputContext, OutputContext

from .client import Client
from .integrations import PublishRefused, run_attempt
from .store import Store
from .types import AlreadyPublished, FileCheck, Published, RunSpec, TaskKey, TaskSpec

__all__ = ["ManifestdbIOManager", "PartitionOutput"]


def _files_digest(staging_dir: Path) -> str:
    """A digest of the partition's bytes (every file's path and content, in path order): equal
    output gives an equal digest, so a re-materialization of the same snapshot that writes other
    bytes is flagged as non-deterministic by the publish."""
    h = hashlib.sha256()
    for f in sorted(p for p in staging_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        h.update(f.relative_to(staging_dir).as_posix().encode() + b"\0")
        h.update(f.read_bytes())
    return "sha256:" + h.hexdigest()


@dataclass(frozen=True)
class PartitionOutput:
    """What a partitioned asset returns: ``write(staging_dir)`` writes the partition's files
    into the attempt's private staging directory; ``rows`` and ``total`` are what they hold, and
    ``expected_rows``/``expected_total`` what the input says they must hold (by default the same:
    then validation checks the files are there as described)."""

    write: Callable[[Path], None]
    rows: int
    total: Optional[int] = None
    digest: Optional[str] = None
    expected_rows: Optional[int] = None
    expected_total: Optional[int] = None


class ManifestdbIOManager(ConfigurableIOManager):  # type: ignore[misc]
    """Writes partitions through manifestdb attempts and publishes each on materialization.

    Give ``store`` and ``staging`` for an embedded store (one writer at a time: runs that
    materialize one after the other), or ``server`` (a socket path or ``http://`` URL of
    ``manifestdb serve``) and ``token`` for runs in parallel processes."""

    store: str = ""
    staging: str = ""
    server: str = ""
    token: str = ""
    snapshot: str = ""
    check_checksums: bool = False

    def _connect(self) -> Store | Client:
        if self.server:
            return Client(self.server, token=self.token or None)
        return Store.open(self.store, self.staging)

    @staticmethod
    def _dataset(context: OutputContext | InputContext) -> str:
        return "/".join(context.asset_key.path)

    def _run(self, partition: str) -> tuple[str, str]:
        snapshot = self.snapshot or partition
        return f"{partition}@{snapshot}", snapshot

    def handle_output(self, context: OutputContext, obj: PartitionOutput) -> None:
        if not isinstance(obj, PartitionOutput):
            raise TypeError(f"an asset written by ManifestdbIOManager returns a PartitionOutput, not {type(obj).__name__}")
        if not context.has_asset_partitions:
            raise ValueError("ManifestdbIOManager writes partitioned assets: the asset has no partition")
        dataset, partition = self._dataset(context), context.asset_partition_key
        run, snapshot = self._run(partition)
        expected_rows = obj.rows if obj.expected_rows is None else obj.expected_rows
        expected_total = obj.total if obj.expected_total is None else obj.expected_total
        spec = RunSpec(dataset, run, snapshot, [TaskSpec(partition, expected_rows, expected_total)], trust_reported_figures=True)
        with self._connect() as store:
            store.declare_run(spec)

        def write(staging_dir: Path) -> dict[str, Any]:
            obj.write(staging_dir)
            return {"rows": obj.rows, "total": obj.total, "digest": obj.digest or _files_digest(staging_dir)}

        check = FileCheck.SIZE_AND_CHECKSUM if self.check_checksums else FileCheck.SIZE
        attempt, _ = run_attempt(self._connect, TaskKey(dataset, run, partition), write, check=check)
        with self._connect() as store:
            outcome = store.publish(dataset, run)
        if not isinstance(outcome, (Published, AlreadyPublished)):
            raise PublishRefused(str(outcome))
        context.add_output_metadata(
            {"manifestdb_run": run, "manifestdb_attempt": attempt.attempt, "manifestdb_generation": outcome.generation.number}
        )

    def load_input(self, context: InputContext) -> list[Path]:
        dataset = self._dataset(context)
        with self._connect() as store:
            manifest = store.manifest(dataset)
        if manifest is None:
            raise ValueError(f"dataset {dataset!r} has no published generation")
        keys = set(context.asset_partition_keys) if context.has_asset_partitions else None
        return [p for part in manifest.partitions if keys is None or part.partition in keys for p in part.paths()]

"""Dagster: an IO manager that writes each partition of an asset through an attempt and
publishes it on materialization (``pip install "manifestdb[dagster]"``).

::

    grain = Grain("csv", ["store", "item"], "units")  # one row per (store, item), summing units

    @asset(partitions_def=StaticPartitionsDefinition(["region=eu", "region=us"]), io_manager_key="manifestdb",
           metadata=grain_metadata(grain))
    def daily_units(context) -> PartitionOutput:
        rows = compute(context.partition_key)
        return PartitionOutput(lambda d: write_csv(d / "part.csv", rows), rows=len(rows), total=sum(...))

    defs = Definitions(assets=[daily_units], resources={"manifestdb": ManifestdbIOManager(store=..., staging=...)})

**The data is read.** A run's grain (format, key columns, measure) comes from the asset's
metadata (``grain_metadata(grain)``: the key ``manifestdb/grain``) or else from the IO manager's
``grain_format``, ``grain_keys``, ``grain_measure`` (and ``grain_measure_scale``); validation
then reads every file and computes the rows, the total and the duplicate keys itself, and the
figures the asset returns must agree with them (an empty or half-written file, or duplicated
keys, make the attempt invalid and the materialization fail). Without a grain, the figures the
asset reports are published unchecked, and only if that is said in words: the asset's metadata
``{"manifestdb/trust_reported_figures": True}`` or the IO manager's ``trust_reported_figures``;
otherwise the materialization raises :class:`manifestdb.Usage`. The ``manifestdb_figures_checked``
output metadata (and :attr:`manifestdb.PartitionEntry.figures_checked`) says which it was.

**Run identity.** The dataset is the asset key (``/``-joined). A materialization of a partition
is a manifestdb run of one task named ``<partition>@<root run id>``: the Dagster run that
launched it, or, for a re-execution (retry from failure, Dagster's run retries), the first run of
its re-execution chain (``root_run_id``). So a step retried within a run and a re-execution of a
failed run are further attempts of the same manifestdb run, of which the published partition
holds exactly one; a new materialization (a new launch, a backfill) is a new run, which publishes
a new generation: re-materializing never conflicts. A re-execution of a run that already
published the partition is a new materialization too (named after its own run id), and so is one
whose asset now reports other figures than the declared ones. The run's input snapshot is the
IO manager's ``snapshot`` if set (then a rerun whose data differs from what the same snapshot
published is refused as non-deterministic, as the store's contract says), else
``dagster:<root run id>``, each materialization its own input. The output metadata says
``manifestdb_unchanged`` when the new generation holds the same content (digest) for the
partition as the one before.

A downstream asset gets the published partition's files (a list of absolute paths), read
through the current generation.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from dagster import ConfigurableIOManager, InputContext, OutputContext

from . import errors
from .client import Client
from .integrations import PublishRefused, run_attempt
from .store import Store
from .types import AlreadyPublished, DataFormat, FileCheck, Grain, Published, RunSpec, TaskKey, TaskSpec

__all__ = ["ManifestdbIOManager", "PartitionOutput", "grain_metadata"]

#: The asset metadata key of a grain (:func:`grain_metadata`).
GRAIN_KEY = "manifestdb/grain"
#: The asset metadata key that publishes an asset's reported figures unchecked.
TRUST_KEY = "manifestdb/trust_reported_figures"


def grain_metadata(grain: Grain) -> dict[str, Any]:
    """The asset metadata that declares ``grain`` for the asset's runs:
    ``@asset(..., metadata=grain_metadata(Grain("csv", ["store", "item"], "units")))``."""
    if not isinstance(grain, Grain):
        raise TypeError(f"grain must be a Grain, not {type(grain).__name__}")
    fmt = grain.format.value if isinstance(grain.format, DataFormat) else grain.format
    return {GRAIN_KEY: {"format": fmt, "keys": list(grain.keys), "measure": grain.measure, "measure_scale": grain.measure_scale}}


def _metadata_value(value: Any) -> Any:
    """A raw value of asset metadata: Dagster keeps a dict or a bool as a ``MetadataValue``
    whose ``value`` is the raw one."""
    return getattr(value, "value", value)


def _grain_of(doc: Any, where: str) -> Grain:
    if not isinstance(doc, Mapping):
        raise errors.Usage(f"{where} must be a dict with format, keys and measure (see grain_metadata), not {type(doc).__name__}")
    unknown = set(doc) - {"format", "keys", "measure", "measure_scale"}
    if unknown or not {"format", "keys", "measure"} <= set(doc):
        raise errors.Usage(f"{where} must have format, keys and measure (and optionally measure_scale), not {sorted(doc)}")
    return Grain(doc["format"], list(doc["keys"]), doc["measure"], doc.get("measure_scale", 0))


def _files_digest(staging_dir: Path) -> str:
    """A digest of the partition's bytes (every file's path and content, in path order): equal
    output gives an equal digest, so a re-materialization of the same snapshot that writes other
    bytes is flagged as non-deterministic by the publish (a run without a grain only; with one,
    the store computes the canonical digest of the rows)."""
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
    with a grain, validation then checks the files hold them; without one, that the files are
    there as described)."""

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
    ``manifestdb serve``) and ``token`` for runs in parallel processes. The grain of an asset
    without ``manifestdb/grain`` metadata is ``grain_format`` (``csv`` or ``parquet``),
    ``grain_keys``, ``grain_measure`` and ``grain_measure_scale``; ``trust_reported_figures``
    publishes the figures of an asset with no grain unchecked. See the module's documentation
    for the run identity and ``snapshot``."""

    store: str = ""
    staging: str = ""
    server: str = ""
    token: str = ""
    snapshot: str = ""
    check_checksums: bool = False
    grain_format: str = ""
    grain_keys: Optional[list[str]] = None
    grain_measure: str = ""
    grain_measure_scale: int = 0
    trust_reported_figures: bool = False

    def _connect(self) -> Store | Client:
        if self.server:
            return Client(self.server, token=self.token or None)
        return Store.open(self.store, self.staging)

    @staticmethod
    def _dataset(context: OutputContext | InputContext) -> str:
        return "/".join(context.asset_key.path)

    def _grain(self, context: OutputContext) -> tuple[Grain | None, bool]:
        """The run's grain and whether its reported figures are trusted: the asset's metadata
        first, then this IO manager's configuration."""
        metadata = context.definition_metadata or {}
        if GRAIN_KEY in metadata:
            return _grain_of(_metadata_value(metadata[GRAIN_KEY]), f"the asset's {GRAIN_KEY} metadata"), False
        if TRUST_KEY in metadata:
            trusted = _metadata_value(metadata[TRUST_KEY])
            if not isinstance(trusted, bool):
                raise errors.Usage(f"the asset's {TRUST_KEY} metadata must be True or False, not {trusted!r}")
            return None, trusted
        if self.grain_format or self.grain_keys or self.grain_measure:
            return Grain(self.grain_format, list(self.grain_keys or ()), self.grain_measure, self.grain_measure_scale), False
        return None, self.trust_reported_figures

    @staticmethod
    def _run_ids(context: OutputContext) -> tuple[str, str]:
        """(the root of this run's re-execution chain, this run's own id)."""
        own: str = context.run_id
        try:
            root = context.step_context.dagster_run.root_run_id
        except Exception:  # noqa: BLE001 (a context built outside a run has no step context)
            root = None
        return (root or own), own

    def handle_output(self, context: OutputContext, obj: PartitionOutput) -> None:
        """Publishes the partition the asset wrote (Dagster calls it after the asset returns)."""
        if not isinstance(obj, PartitionOutput):
            raise TypeError(f"an asset written by ManifestdbIOManager returns a PartitionOutput, not {type(obj).__name__}")
        if not context.has_asset_partitions:
            raise ValueError("ManifestdbIOManager writes partitioned assets: the asset has no partition")
        dataset, partition = self._dataset(context), context.asset_partition_key
        grain, trusted = self._grain(context)
        expected_rows = obj.rows if obj.expected_rows is None else obj.expected_rows
        expected_total = obj.total if obj.expected_total is None else obj.expected_total

        def spec(dagster_run: str) -> RunSpec:
            snapshot = self.snapshot or f"dagster:{dagster_run}"
            tasks = [TaskSpec(partition, expected_rows, expected_total)]
            return RunSpec(dataset, f"{partition}@{dagster_run}", snapshot, tasks, grain, trust_reported_figures=trusted)

        root, own = self._run_ids(context)
        run = spec(root)
        with self._connect() as store:
            declared = store.run(dataset, run.run)
            if declared is not None and declared.published_generation is not None and root != own:
                # A re-execution of a run that published the partition: a new materialization.
                run = spec(own)
                declared = store.run(dataset, run.run)
            if declared is not None and declared.published_generation is not None:
                # A retry of a step of this very run after its publish: nothing left to do.
                outcome = store.publish(dataset, run.run)
                before = None
            else:
                try:
                    store.declare_run(run)
                except errors.Conflict:
                    if root == own:
                        raise
                    # Re-executed with other figures than the chain's first run declared: its
                    # input changed, so it is a new materialization.
                    run = spec(own)
                    store.declare_run(run)
                before = store.partition(dataset, partition)
                outcome = None
        if outcome is None:

            def write(staging_dir: Path) -> dict[str, Any]:
                obj.write(staging_dir)
                digest = obj.digest if obj.digest is not None or grain is not None else _files_digest(staging_dir)
                return {"rows": obj.rows, "total": obj.total, "digest": digest}

            check = FileCheck.SIZE_AND_CHECKSUM if self.check_checksums else FileCheck.SIZE
            attempt, _ = run_attempt(self._connect, TaskKey(dataset, run.run, partition), write, check=check)
            with self._connect() as store:
                outcome = store.publish(dataset, run.run)
        if not isinstance(outcome, (Published, AlreadyPublished)):
            raise PublishRefused(str(outcome))
        with self._connect() as store:
            entry = store.partition(dataset, partition, outcome.generation.number)
        if entry is None:
            raise errors.Fault(f"generation {outcome.generation.number} of {dataset!r} has no partition {partition!r}")
        context.add_output_metadata(
            {
                "manifestdb_run": run.run,
                "manifestdb_attempt": entry.attempt,
                "manifestdb_generation": outcome.generation.number,
                "manifestdb_figures_checked": entry.figures_checked,
                "manifestdb_unchanged": before is not None and before.digest == entry.digest,
            }
        )

    def load_input(self, context: InputContext) -> list[Path]:
        """The published files of the upstream partition (Dagster calls it for a downstream asset)."""
        dataset = self._dataset(context)
        with self._connect() as store:
            manifest = store.manifest(dataset)
        if manifest is None:
            raise ValueError(f"dataset {dataset!r} has no published generation")
        keys = set(context.asset_partition_keys) if context.has_asset_partitions else None
        return [p for part in manifest.partitions if keys is None or part.partition in keys for p in part.paths()]

"""Dagster (the real package, `dagster.materialize`): a partitioned asset written through
manifestdb attempts by the IO manager; the first run fails after writing its file, the next
one publishes, and the published partition holds one attempt. Needs `pip install dagster`
(22 s here from PyPI); skipped without it."""


from pathlib import Path

import pytest

import manifestdb as m

dagster = pytest.importorskip("dagster")

from manifestdb.dagster import ManifestdbIOManager, PartitionOutput  # noqa: E402

ROWS = {"region=eu": [(1, 7, 300), (2, 7, 400)], "region=us": [(3, 9, 50)]}


def test_a_failed_materialization_leaves_an_abandoned_attempt_and_the_next_publishes_once(tmp_path: Path) -> None:
    died = {"region=eu": False}
    partitions = dagster.StaticPartitionsDefinition(list(ROWS))

    @dagster.asset(partitions_def=partitions, io_manager_key="manifestdb")
    def daily_units(context: dagster.AssetExecutionContext) -> PartitionOutput:
        key = context.partition_key
        rows = ROWS[key]

        def write(staging_dir: Path) -> None:
            (staging_dir / "part.csv").write_text("store,item,units\n" + "".join(f"{s},{i},{u}\n" for s, i, u in rows))
            if key in died and not died[key]:
                died[key] = True
                raise RuntimeError("died after writing its file")

        return PartitionOutput(write, rows=len(rows), total=sum(r[2] for r in rows))

    @dagster.asset(partitions_def=partitions, io_manager_key="manifestdb_reader")
    def units_total(daily_units: list[Path]) -> int:
        return sum(int(line.split(",")[2]) for path in daily_units for line in path.read_text().splitlines()[1:])

    io = ManifestdbIOManager(store=str(tmp_path / "store.redb"), staging=str(tmp_path / "staging"))
    resources = {"manifestdb": io, "manifestdb_reader": dagster.InMemoryIOManager()}
    first = dagster.materialize([daily_units], partition_key="region=eu", resources=resources, raise_on_error=False)
    assert not first.success
    for key in ROWS:
        assert dagster.materialize([daily_units], partition_key=key, resources=resources).success
    total = dagster.materialize(
        [daily_units, units_total], partition_key="region=eu", resources=resources, selection=[units_total]
    )
    assert total.success and total.output_for_node("units_total") == 700

    with m.Store.open(tmp_path / "store.redb", tmp_path / "staging") as store:
        manifest = store.manifest("daily_units")
        assert manifest is not None
        assert [(p.partition, p.attempt) for p in manifest.partitions] == [("region=eu", 2), ("region=us", 1)]
        assert (manifest.totals.rows, manifest.totals.total) == (3, 750)
        eu = store.attempts(m.TaskKey("daily_units", "region=eu@region=eu", "region=eu"))
        assert [a.status for a in eu] == ["abandoned", "valid"]

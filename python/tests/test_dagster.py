"""Dagster (the real package, `dagster.materialize`): partitioned assets written through
manifestdb attempts by the IO manager, validated at their grain. A run that fails after writing
leaves an abandoned attempt; a step retried within its run is another attempt of the same
manifestdb run; re-materializing a partition (the same data, then corrected data) publishes a
new generation each time and never conflicts; a file that does not hold what the asset reports
is never published; an asset with no grain must say it trusts its figures. Needs
`pip install dagster` (22 s here from PyPI); skipped without it."""


from pathlib import Path
from typing import Any

import pytest

import manifestdb as m

dagster = pytest.importorskip("dagster")

from manifestdb.dagster import ManifestdbIOManager, PartitionOutput, grain_metadata  # noqa: E402

ROWS = {"region=eu": [(1, 7, 300), (2, 7, 400)], "region=us": [(3, 9, 50)]}
GRAIN = m.Grain("csv", ["store", "item"], "units")


def csv(rows: list[tuple[int, int, int]]) -> str:
    return "store,item,units\n" + "".join(f"{s},{i},{u}\n" for s, i, u in rows)


def io_manager(tmp_path: Path, **config: Any) -> ManifestdbIOManager:
    return ManifestdbIOManager(store=str(tmp_path / "store.redb"), staging=str(tmp_path / "staging"), **config)


def materialize(asset: Any, io: ManifestdbIOManager, key: str, **kwargs: Any) -> Any:
    return dagster.materialize([asset], partition_key=key, resources={"manifestdb": io}, **kwargs)


def output_metadata(result: Any) -> dict[str, Any]:
    [event] = result.get_asset_materialization_events()
    return {k: getattr(v, "value", v) for k, v in event.materialization.metadata.items()}


def test_a_failed_run_leaves_an_abandoned_attempt_and_rematerializing_publishes_new_generations_without_conflict(
    tmp_path: Path,
) -> None:
    state: dict[str, Any] = {"rows": ROWS["region=eu"], "die": True}
    partitions = dagster.StaticPartitionsDefinition(list(ROWS))

    @dagster.asset(partitions_def=partitions, io_manager_key="manifestdb", metadata=grain_metadata(GRAIN))
    def daily_units(context: dagster.AssetExecutionContext) -> PartitionOutput:
        rows = state["rows"] if context.partition_key == "region=eu" else ROWS[context.partition_key]

        def write(staging_dir: Path) -> None:
            (staging_dir / "part.csv").write_text(csv(rows))
            if state["die"] and context.partition_key == "region=eu":
                state["die"] = False
                raise RuntimeError("died after writing its file")

        return PartitionOutput(write, rows=len(rows), total=sum(r[2] for r in rows))

    @dagster.asset(partitions_def=partitions, io_manager_key="manifestdb_reader")
    def units_total(daily_units: list[Path]) -> int:
        return sum(int(line.split(",")[2]) for path in daily_units for line in path.read_text().splitlines()[1:])

    io = io_manager(tmp_path)
    first = materialize(daily_units, io, "region=eu", raise_on_error=False)
    assert not first.success
    published = materialize(daily_units, io, "region=eu")
    assert materialize(daily_units, io, "region=us").success
    meta = output_metadata(published)
    assert meta["manifestdb_generation"] == 1 and meta["manifestdb_figures_checked"] is True
    assert meta["manifestdb_run"] == f"region=eu@{published.run_id}" and meta["manifestdb_unchanged"] is False

    # The same data again: a new run, a new generation with the same content.
    same = output_metadata(materialize(daily_units, io, "region=eu"))
    assert (same["manifestdb_generation"], same["manifestdb_unchanged"]) == (3, True)
    # Corrected data: a new generation with it (the store read it and checked its figures).
    state["rows"] = [(1, 7, 300), (2, 7, 450), (4, 7, 5)]
    corrected = output_metadata(materialize(daily_units, io, "region=eu"))
    assert (corrected["manifestdb_generation"], corrected["manifestdb_unchanged"]) == (4, False)

    resources = {"manifestdb": io, "manifestdb_reader": dagster.InMemoryIOManager()}
    total = dagster.materialize(
        [daily_units, units_total], partition_key="region=eu", resources=resources, selection=[units_total]
    )
    assert total.success and total.output_for_node("units_total") == 755

    with m.Store.open(tmp_path / "store.redb", tmp_path / "staging") as store:
        manifest = store.manifest("daily_units")
        assert manifest is not None and manifest.generation.number == 4
        assert [(p.partition, p.attempt, p.figures_checked) for p in manifest.partitions] == [
            ("region=eu", 1, True),
            ("region=us", 1, True),
        ]
        assert (manifest.totals.rows, manifest.totals.total) == (4, 805)
        # The failed run's attempt was abandoned at once and its run never published.
        [failed_run] = [r for r in store.runs("daily_units") if r.run == f"region=eu@{first.run_id}"]
        assert failed_run.published_generation is None
        assert [a.status for a in store.attempts(m.TaskKey("daily_units", failed_run.run, "region=eu"))] == ["abandoned"]


def test_a_step_retried_within_its_run_is_another_attempt_of_the_same_run(tmp_path: Path) -> None:
    died = {"done": False}

    @dagster.asset(
        partitions_def=dagster.StaticPartitionsDefinition(["region=eu"]),
        io_manager_key="manifestdb",
        metadata=grain_metadata(GRAIN),
        retry_policy=dagster.RetryPolicy(max_retries=1),
    )
    def daily_units() -> PartitionOutput:
        def write(staging_dir: Path) -> None:
            (staging_dir / "part.csv").write_text(csv(ROWS["region=eu"]))
            if not died["done"]:
                died["done"] = True
                raise RuntimeError("died after writing its file")

        return PartitionOutput(write, rows=2, total=700)

    result = materialize(daily_units, io_manager(tmp_path), "region=eu")
    assert result.success
    run = f"region=eu@{result.run_id}"
    with m.Store.open(tmp_path / "store.redb", tmp_path / "staging") as store:
        assert [a.status for a in store.attempts(m.TaskKey("daily_units", run, "region=eu"))] == ["abandoned", "valid"]
        manifest = store.manifest("daily_units")
        assert manifest is not None and [(p.run, p.attempt) for p in manifest.partitions] == [(run, 2)]


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("", id="empty file"),
        pytest.param("store,item,units\n1,7,300\n", id="half-written file"),
        pytest.param("store,item,units\n1,7,300\n1,7,400\n", id="duplicated key"),
    ],
)
def test_a_file_that_does_not_hold_what_the_asset_reports_is_never_published(tmp_path: Path, bad: str) -> None:
    # The grain from the IO manager's configuration this time.
    io = io_manager(tmp_path, grain_format="csv", grain_keys=["store", "item"], grain_measure="units")

    @dagster.asset(partitions_def=dagster.StaticPartitionsDefinition(["region=eu"]), io_manager_key="manifestdb")
    def daily_units() -> PartitionOutput:
        return PartitionOutput(lambda d: (d / "part.csv").write_text(bad), rows=2, total=700)

    assert not materialize(daily_units, io, "region=eu", raise_on_error=False).success
    with m.Store.open(tmp_path / "store.redb", tmp_path / "staging") as store:
        assert store.manifest("daily_units") is None


def test_an_asset_without_a_grain_must_say_it_trusts_its_figures(tmp_path: Path) -> None:
    partitions = dagster.StaticPartitionsDefinition(["region=eu"])

    @dagster.asset(partitions_def=partitions, io_manager_key="manifestdb", name="unchecked")
    def unchecked() -> PartitionOutput:
        return PartitionOutput(lambda d: (d / "part.csv").write_text(""), rows=50, total=500)

    @dagster.asset(
        partitions_def=partitions, io_manager_key="manifestdb", metadata={"manifestdb/trust_reported_figures": True}
    )
    def trusted() -> PartitionOutput:
        return PartitionOutput(lambda d: (d / "part.csv").write_text(""), rows=50, total=500)

    io = io_manager(tmp_path)
    with pytest.raises(m.Usage, match="declares no grain"):
        materialize(unchecked, io, "region=eu")
    meta = output_metadata(materialize(trusted, io, "region=eu"))
    assert meta["manifestdb_figures_checked"] is False
    assert output_metadata(materialize(unchecked, io_manager(tmp_path, trust_reported_figures=True), "region=eu"))[
        "manifestdb_figures_checked"
    ] is False


def test_the_books_dagster_example_materializes_as_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    chapter = (Path(__file__).resolve().parents[2] / "docs" / "src" / "python.md").read_text()
    code = re.search(r"```python\n(.*?)```", chapter[chapter.index("## Dagster") :], re.S)
    assert code is not None
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jobs").mkdir()
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), "python.md", "exec"), namespace)
    defs = namespace["defs"]
    for key in ("region=eu", "region=us"):
        result = dagster.materialize(
            [namespace["daily_units"]], partition_key=key, resources={"manifestdb": defs.resources["manifestdb"]}
        )
        assert result.success and output_metadata(result)["manifestdb_figures_checked"] is True
    with m.Store.open(tmp_path / "jobs" / "store.redb", tmp_path / "jobs" / "staging") as store:
        manifest = store.manifest("daily_units")
        assert manifest is not None and (manifest.totals.rows, manifest.totals.total) == (3, 750)


BACKFILL = '''
import sys
from pathlib import Path

import dagster
import manifestdb
from manifestdb.dagster import ManifestdbIOManager, PartitionOutput, grain_metadata

socket, partition, bump = sys.argv[1], sys.argv[2], int(sys.argv[3])
PARTITIONS = [f"region={r}" for r in ("eu", "us", "apac", "latam")]


@dagster.asset(partitions_def=dagster.StaticPartitionsDefinition(PARTITIONS), io_manager_key="manifestdb",
               metadata=grain_metadata(manifestdb.Grain("csv", ["store", "item"], "units")))
def daily_units(context) -> PartitionOutput:
    n = PARTITIONS.index(context.partition_key) + 1
    rows = [(s, 7, 100 * n + bump) for s in range(n)]
    def write(staging_dir: Path) -> None:
        (staging_dir / "part.csv").write_text("store,item,units\\n" + "".join(f"{s},{i},{u}\\n" for s, i, u in rows))
    return PartitionOutput(write, rows=len(rows), total=sum(u for *_, u in rows))


result = dagster.materialize([daily_units], partition_key=partition,
                             resources={"manifestdb": ManifestdbIOManager(server=socket)})
sys.exit(0 if result.success else 1)
'''


def test_a_backfill_of_four_partitions_in_parallel_processes_through_serve_publishes_each_and_again(
    tmp_path: Path, server: Any
) -> None:
    import subprocess
    import sys

    script = tmp_path / "backfill.py"
    script.write_text(BACKFILL)
    partitions = [f"region={r}" for r in ("eu", "us", "apac", "latam")]

    def backfill(bump: int) -> None:
        procs = [
            subprocess.Popen([sys.executable, str(script), str(server.socket), p, str(bump)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for p in partitions
        ]
        outputs = [p.communicate(timeout=600)[0] for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, "\n".join(o[-3000:] for o in outputs)

    def expected(bump: int) -> tuple[int, int]:
        return sum(n for n in range(1, 5)), sum(n * (100 * n + bump) for n in range(1, 5))

    backfill(0)
    with m.Client(str(server.socket)) as client:
        manifest = client.manifest("daily_units")
        assert manifest is not None and manifest.generation.number == 4
        assert sorted((p.partition, p.attempt, p.figures_checked) for p in manifest.partitions) == sorted(
            (p, 1, True) for p in partitions
        )
        assert (manifest.totals.rows, manifest.totals.total) == expected(0)
    # The backfill again, with corrected data: four new generations, no conflict.
    backfill(1)
    with m.Client(str(server.socket)) as client:
        manifest = client.manifest("daily_units")
        assert manifest is not None and manifest.generation.number == 8
        assert (manifest.totals.rows, manifest.totals.total) == expected(1)
        assert len({p.run for p in manifest.partitions}) == 4


REEXEC_JOB = '''
import os
from pathlib import Path

import dagster
import manifestdb
from manifestdb.dagster import ManifestdbIOManager, PartitionOutput, grain_metadata

DIR = Path(os.environ["MANIFESTDB_REEXEC_DIR"])


@dagster.asset(partitions_def=dagster.StaticPartitionsDefinition(["region=eu"]), io_manager_key="manifestdb",
               metadata=grain_metadata(manifestdb.Grain("csv", ["store", "item"], "units")))
def daily_units() -> PartitionOutput:
    def write(staging_dir: Path) -> None:
        (staging_dir / "part.csv").write_text("store,item,units\\n1,7,300\\n2,7,400\\n")
        died = DIR / "died"
        if not died.exists():
            died.write_text("the first run died after writing its file")
            raise RuntimeError("died after writing its file")
    return PartitionOutput(write, rows=2, total=700)


defs = dagster.Definitions(
    assets=[daily_units],
    jobs=[dagster.define_asset_job("units", selection=[daily_units], executor_def=dagster.in_process_executor)],
    resources={"manifestdb": ManifestdbIOManager(store=str(DIR / "store.redb"), staging=str(DIR / "staging"))},
)


def units_job():
    return defs.resolve_job_def("units")
'''


def test_a_reexecution_of_a_failed_run_is_another_attempt_of_its_run_and_of_a_successful_one_a_new_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    (tmp_path / "manifestdb_reexec_job.py").write_text(REEXEC_JOB)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("MANIFESTDB_REEXEC_DIR", str(tmp_path))
    job = importlib.import_module("manifestdb_reexec_job")
    recon = dagster.reconstructable(job.units_job)
    tags = {"dagster/partition": "region=eu"}
    with dagster.instance_for_test() as instance:
        first = dagster.execute_job(recon, instance, tags=tags, raise_on_error=False)
        assert not first.success
        from_failure = dagster.ReexecutionOptions.from_failure(first.run_id, instance)
        second = dagster.execute_job(recon, instance, reexecution_options=from_failure, tags=tags, raise_on_error=False)
        assert second.success and instance.get_run_by_id(second.run_id).root_run_id == first.run_id
        again = dagster.ReexecutionOptions(parent_run_id=second.run_id, step_selection=["daily_units"])
        third = dagster.execute_job(recon, instance, reexecution_options=again, tags=tags, raise_on_error=False)
        assert third.success
    with m.Store.open(tmp_path / "store.redb", tmp_path / "staging") as store:
        # The re-execution of the failed run is attempt 2 of the first run's manifestdb run.
        retried = f"region=eu@{first.run_id}"
        assert [a.status for a in store.attempts(m.TaskKey("daily_units", retried, "region=eu"))] == ["abandoned", "valid"]
        # The re-execution of the successful run is a new run: generation 2, the same content.
        runs = {r.run: r.published_generation for r in store.runs("daily_units")}
        assert runs == {retried: 1, f"region=eu@{third.run_id}": 2}
        manifest = store.manifest("daily_units")
        assert manifest is not None and [(p.run, p.attempt) for p in manifest.partitions] == [(f"region=eu@{third.run_id}", 1)]
        assert store.partition("daily_units", "region=eu", 1).digest == manifest.partitions[0].digest  # type: ignore[union-attr]

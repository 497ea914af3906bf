"""Real engines read what Python published: DuckDB and polars over the manifest's files, and
DuckDB over the published view while publishes go on (it sees one generation or the next,
never a mix, never a candidate)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import manifestdb as m

duckdb = pytest.importorskip("duckdb")
pl = pytest.importorskip("polars")

GRAIN = m.Grain("csv", ["store", "item"], "units")
PARTS = ["region=eu", "region=us"]


def publish_generation(store: m.Store, n: int) -> int:
    """Publishes run `n`, whose partitions hold n and 10*n units, with a retried (duplicate)
    attempt in each partition; returns the total a reader must see."""
    run = f"run-{n}"
    store.declare_run(m.RunSpec("units", run, f"snap-{n}", [m.TaskSpec(p, 1, n * (1 + 9 * i)) for i, p in enumerate(PARTS)], GRAIN))
    for i, p in enumerate(PARTS):
        for _ in range(2):  # the first answer is lost; the retry writes the same rows again
            t = store.begin_attempt(m.TaskKey("units", run, p))
            (t.staging_dir / "part.csv").write_text(f"store,item,units\n{i},{n},{n * (1 + 9 * i)}\n")
            store.finish_attempt(t.key, m.Candidate(f"snap-{n}", files=[m.describe_file(t.staging_dir, "part.csv")]))
            assert store.validate_attempt(t.key).is_valid()
    assert isinstance(store.publish("units", run), m.Published)
    return 11 * n


def test_duckdb_and_polars_read_the_published_totals_once(paths: tuple[Path, Path]) -> None:
    with m.Store.open(*paths) as store:
        expected = publish_generation(store, 7)
        manifest = store.manifest("units")
    assert manifest is not None
    files = [str(p) for p in manifest.paths()]
    assert len(files) == 2  # one attempt per partition, though each partition has two
    total = duckdb.sql(f"select sum(units) from read_csv({files!r})").fetchall()[0][0]
    assert total == expected == manifest.totals.total
    assert pl.scan_csv(files).select(pl.col("units").sum()).collect().item() == expected
    # Another process's view of the same store: a read-only handle with the staging root.
    with m.ReadOnlyStore.open(paths[0], paths[1]) as reader:
        again = reader.manifest("units")
        assert again is not None and [str(p) for p in again.paths()] == files


def test_duckdb_reading_the_view_during_publishes_sees_whole_generations(tmp_path: Path) -> None:
    views = tmp_path / "views"
    totals = set()
    seen: list[int] = []
    failures: list[BaseException] = []
    with m.Store.open(tmp_path / "s.redb", tmp_path / "staging", views=views, view_trees=True) as store:
        totals.add(publish_generation(store, 1))
        stop = threading.Event()

        def read() -> None:
            con = duckdb.connect()
            try:
                while not stop.is_set():
                    current = views / "units" / "current"
                    # Resolve `current` once: the view it names is complete and immutable.
                    target = current.resolve()
                    seen.append(con.sql(f"select sum(units) from read_csv('{target}/**/*.csv')").fetchall()[0][0])
            except BaseException as e:  # noqa: BLE001
                failures.append(e)

        reader = threading.Thread(target=read)
        reader.start()
        for n in range(2, 12):
            totals.add(publish_generation(store, n))
        stop.set()
        reader.join()
        status = store.view("units")
        # A retained generation by number: its own directory, never a path through `current`.
        ten = store.view("units", 10)
        assert ten is not None and ten.path.name == "v10" and ten.path.is_dir(), ten
    assert not failures, failures
    assert seen and set(seen) <= totals, (set(seen) - totals)
    assert status is not None and status.view_generation == status.store_generation == 11 and not status.lagging


def test_parquet_written_by_polars_is_validated_and_read_back(paths: tuple[Path, Path]) -> None:
    """A Parquet grain: validation reads the files polars wrote (rows, total, duplicate keys);
    the attempt with a repeated key is refused, the next one published, and DuckDB reads it."""
    grain = m.Grain(m.DataFormat.PARQUET, ["store", "item"], "units")
    task = m.TaskKey("units_pq", "r1", "region=eu")
    with m.Store.open(*paths) as store:
        store.declare_run(m.RunSpec("units_pq", "r1", "snap", [m.TaskSpec("region=eu", 2, 700)], grain))
        verdicts = []
        for stores in ([1, 1], [1, 2]):  # the first try repeats a key
            t = store.begin_attempt(task)
            frame = pl.DataFrame({"store": stores, "item": [7, 7], "units": [300, 400]})
            # Snappy, pandas' and pyarrow's default: the core reads no zstd (polars' default).
            frame.write_parquet(t.staging_dir / "part.parquet", compression="snappy")
            store.finish_attempt(t.key, m.Candidate("snap", files=[m.describe_file(t.staging_dir, "part.parquet")]))
            verdicts.append(store.validate_attempt(t.key))
        assert [f.kind for f in verdicts[0].failures] == ["duplicate_grain_key"]
        assert verdicts[1].is_valid() and verdicts[1].accepted_attempt == 2
        assert verdicts[1].reconciliation is not None and verdicts[1].reconciliation.computed_total == 700
        assert isinstance(store.publish("units_pq", "r1"), m.Published)
        manifest = store.manifest("units_pq")
    assert manifest is not None
    files = [str(p) for p in manifest.paths()]
    assert duckdb.sql(f"select count(*), sum(units) from read_parquet({files!r})").fetchall() == [(2, 700)]


def test_a_parquet_dataset_published_from_python_has_its_delta_table(tmp_path: Path) -> None:
    """The wheel is built with the Rust library's ``delta`` feature (``manifestdb.features()``):
    a publish from Python writes the Parquet dataset's Delta table, one version per generation,
    and a Delta reader (polars over deltalake, where installed) sums what the manifest says. A
    build without the feature says so instead: ``view`` reports the table lagging and why,
    never current (a ``delta`` build, the CLI, writes it at its next open, publish or sync)."""
    grain = m.Grain(m.DataFormat.PARQUET, ["store", "item"], "units")
    views = tmp_path / "views"
    with m.Store.open(tmp_path / "s.redb", tmp_path / "staging", views=views) as store:
        for n in (1, 2):
            run = f"r{n}"
            store.declare_run(m.RunSpec("units_pq", run, f"snap-{n}", [m.TaskSpec("region=eu", 2, 700 * n)], grain))
            t = store.begin_attempt(m.TaskKey("units_pq", run, "region=eu"))
            frame = pl.DataFrame({"store": [1, 2], "item": [7, 7], "units": [300 * n, 400 * n]})
            frame.write_parquet(t.staging_dir / "part.parquet", compression="snappy")
            store.finish_attempt(t.key, m.Candidate(f"snap-{n}", files=[m.describe_file(t.staging_dir, "part.parquet")]))
            assert store.validate_attempt(t.key).is_valid()
            assert isinstance(store.publish("units_pq", run), m.Published)
        view = store.view("units_pq")
        first = store.view("units_pq", 1)
    assert view is not None and first is not None and view.view_generation == view.store_generation == 2
    if not m.features()["delta"]:
        assert view.lagging and view.table["lagging"], view.table
        assert "delta" in view.table["reason"], view.table
        return
    assert not view.lagging and not view.table["lagging"], view.table
    table = Path(view.table["path"])
    assert (table / "_delta_log").is_dir(), view.table
    # One version per generation; the earlier generation keeps its own.
    assert view.table["version"] is not None and first.table["version"] is not None
    assert view.table["version"] > first.table["version"], (first.table, view.table)
    try:
        import deltalake  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise  # CI's suite installs deltalake
        return  # elsewhere the log's own versions above are the check
    assert pl.read_delta(str(table))["units"].sum() == 1400
    assert pl.read_delta(str(table), version=first.table["version"])["units"].sum() == 700


def test_without_directory_trees_the_views_file_list_reads_each_generation_exactly(tmp_path: Path) -> None:
    """A new view root keeps no directory trees (a publish costs what it changes): ``view``
    gives no ``path`` but the generation's exact files, which DuckDB and polars read; a list
    taken before later publishes still reads its own generation. ``view_trees`` turns trees on
    for the named datasets."""
    views = tmp_path / "views"
    with m.Store.open(tmp_path / "s.redb", tmp_path / "staging", views=views) as store:
        first_total = publish_generation(store, 1)
        first = store.view("units")
        for n in range(2, 4):
            last_total = publish_generation(store, n)
        last = store.view("units")
    assert first is not None and last is not None
    assert not first.trees and first.path is None and first.current is None
    assert not (views / "units" / "current").exists()
    assert len(first.files) == 2 and all(f.is_file() for f in first.files)
    names = [str(f) for f in first.files]
    assert duckdb.sql(f"select sum(units) from read_csv({names!r})").fetchall()[0][0] == first_total
    assert pl.scan_csv([str(f) for f in last.files]).select(pl.col("units").sum()).collect().item() == last_total
    with m.Store.open(tmp_path / "s.redb", tmp_path / "staging", views=views, view_trees=["units"]) as store:
        view = store.view("units")
    assert view is not None and view.trees and view.path is not None and view.path.name == "v3"
    with pytest.raises(TypeError):
        m.Store.open(tmp_path / "s.redb", tmp_path / "staging", views=views, view_trees="units")

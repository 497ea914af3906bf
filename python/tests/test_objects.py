"""A staging root on S3-compatible object storage from Python (issue 40): ``Store.open(path,
"s3://bucket/prefix")``, a worker writing its objects with a real S3 client (polars, through
its object store), validation at the grain reading the objects, and a reader reading the
published objects back by their URLs.

Against the s3s-fs server ``scripts/s3-server start`` runs on loopback: its printed environment
(AWS_ENDPOINT_URL, the throwaway keys, MANIFESTDB_TEST_S3) is what the store's S3 client and
polars read. Without MANIFESTDB_TEST_S3 the tests that need the server skip, saying so; with CI
set they fail instead. A build without the ``s3`` feature must refuse an ``s3://`` root.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

import manifestdb as m

GRAIN = m.Grain("parquet", ["id"], "units")


def test_features_say_what_the_build_holds(tmp_path: Path) -> None:
    built = m.features()
    assert set(built) == {"parquet", "postgres", "delta", "s3"}
    assert built["parquet"] and built["postgres"]
    assert all(isinstance(v, bool) for v in built.values())
    if not built["s3"]:
        # Said at open, never taken for a relative directory named "s3:".
        with pytest.raises(m.Usage, match="object-storage staging"):
            m.Store.open(tmp_path / "s.redb", "s3://manifestdb-test/py-refused")
        assert not (tmp_path / "s3:").exists()


@pytest.fixture
def s3_root() -> str:
    bucket = os.environ.get("MANIFESTDB_TEST_S3")
    if not m.features()["s3"]:
        pytest.skip("this build has no s3 feature (manifestdb.features())")
    if not bucket:
        if os.environ.get("CI"):
            pytest.fail("MANIFESTDB_TEST_S3 is not set: start the server with scripts/s3-server start")
        pytest.skip("MANIFESTDB_TEST_S3 is not set (eval \"$(scripts/s3-server start)\")")
    return f"{bucket}/py-{uuid.uuid4().hex}"


def storage_options() -> dict[str, str]:
    """The server's endpoint and keys, as polars' (object_store's) storage options."""
    return {
        "aws_endpoint_url": os.environ["AWS_ENDPOINT_URL"],
        "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "aws_region": os.environ.get("AWS_REGION", "us-east-1"),
        "aws_allow_http": "true",
    }


# 200,000 rows (about 0.8 MB): polars reads a Parquet footer with a suffix range (bytes=-N)
# longer than a small object, which s3s-fs 0.14.1 answers with a 500 (it seeks before the
# file's start) where S3 returns the whole object; an object larger than polars' suffix reads.
ROWS = 200_000
UNITS = [i * 7 % 1000 for i in range(ROWS)]


def write(pl: Any, url: str, ids: list[int]) -> None:
    """A worker's write: one Parquet object (Snappy: the core's Parquet reader has no zstd)."""
    frame = pl.DataFrame({"id": ids, "units": UNITS})
    frame.write_parquet(url, compression="snappy", storage_options=storage_options())


def test_a_partition_on_object_storage_is_validated_at_its_grain_published_and_read_back(tmp_path: Path, s3_root: str) -> None:
    pl = pytest.importorskip("polars")
    options = storage_options()
    with m.Store.open(tmp_path / "s.redb", s3_root) as store:
        assert store.staging_url == s3_root
        store.declare_run(m.RunSpec("sales", "r1", "src@1", [m.TaskSpec("region=eu", ROWS, sum(UNITS))], GRAIN))
        task = m.TaskKey("sales", "r1", "region=eu")

        # The first attempt writes a duplicated key and reports the expected figures: refused,
        # since the store reads the object at the grain.
        bad = store.begin_attempt(task)
        assert bad.staging_url is not None and bad.staging_url.startswith(s3_root + "/")
        write(pl, f"{bad.staging_url}/part.parquet", [0, *range(ROWS - 1)])
        described = m.describe_file(bad.staging_url, "part.parquet")
        store.finish_attempt(bad.key, m.Candidate("src@1", rows=ROWS, total=sum(UNITS), files=[described]))
        verdict = store.validate_attempt(bad.key, m.FileCheck.SIZE_AND_CHECKSUM)
        assert not verdict.is_valid() and "duplicate_grain_key" in {f.kind for f in verdict.failures}, verdict

        # The retry writes the right rows into its own prefix.
        good = store.begin_attempt(task)
        assert good.staging_url is not None and good.staging_url != bad.staging_url
        write(pl, f"{good.staging_url}/part.parquet", list(range(ROWS)))
        entry = m.describe_file(good.staging_url, "part.parquet")
        assert entry.path == "part.parquet" and entry.size_bytes > 0
        store.finish_attempt(good.key, m.Candidate("src@1", files=[entry]))
        assert store.validate_attempt(good.key, m.FileCheck.SIZE_AND_CHECKSUM).is_valid()
        assert isinstance(store.publish("sales", "r1"), m.Published)

        manifest = store.manifest("sales")
        assert manifest is not None
        (part,) = manifest.partitions
        assert part.attempt == good.key.attempt and part.figures_checked and (part.rows, part.total) == (ROWS, sum(UNITS))
        assert part.staging_url == good.staging_url and manifest.urls() == [f"{good.staging_url}/part.parquet"]
        with pytest.raises(ValueError, match="use urls"):
            part.paths()
        # What a reader does: the published objects, by URL, from the server.
        assert pl.read_parquet(manifest.urls()[0], storage_options=options)["units"].sum() == sum(UNITS)
        report = store.verify(m.FileCheck.SIZE_AND_CHECKSUM)
        assert report.clean and report.files_checked >= 1, report


def test_the_integrations_refuse_an_object_root_and_abandon_the_attempt(tmp_path: Path, s3_root: str) -> None:
    from manifestdb.integrations import run_attempt

    db = tmp_path / "s.redb"
    with m.Store.open(db, s3_root) as store:
        store.declare_run(m.RunSpec("sales", "r1", "src@1", [m.TaskSpec("region=eu", 3, 60)], GRAIN))
    task = m.TaskKey("sales", "r1", "region=eu")
    written: list[Path] = []
    with pytest.raises(m.Usage, match="local staging root"):
        run_attempt(lambda: m.Store.open(db, s3_root), task, written.append)
    assert written == []  # write() never ran with a URL taken for a directory
    with m.Store.open(db, s3_root) as store:
        assert [a.status for a in store.attempts(task)] == ["abandoned"]

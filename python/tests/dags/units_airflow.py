"""The Airflow DAG of tests/test_airflow.py (also the book's example): two partitions built
through attempts, the first try of one writing its file and then failing, the first try of
the other timing out (`execution_timeout`) after writing, and a publish whose
first try delivers the notification and dies before marking it emitted.

Run by the test as `python units_airflow.py` (dag.test(), in-process) with MANIFESTDB_TEST_DIR
naming a directory with store.redb, staging/ and the markers, MANIFESTDB_SOCKET the socket of
the `manifestdb serve` over that store, and RECEIVER_URL the receiver."""

from __future__ import annotations

import os
import time
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import dag

import manifestdb
from manifestdb.airflow import dag_run_id, declare_run, partition_task, publish_run

HERE = Path(os.environ.get("MANIFESTDB_TEST_DIR", "/tmp/manifestdb-airflow"))
RECEIVER = os.environ.get("RECEIVER_URL", "http://127.0.0.1:9/")
DATASET = "daily_units"
ROWS = {"region=eu": [(1, 7, 300), (2, 7, 400)], "region=us": [(3, 9, 50)]}
GRAIN = manifestdb.Grain("csv", ["store", "item"], "units")


def connect() -> manifestdb.Client:
    # The arrangement the book recommends for tasks that may run in parallel (LocalExecutor,
    # Celery): one `manifestdb serve` and a Client per task, never the store file in each task.
    return manifestdb.Client(os.environ["MANIFESTDB_SOCKET"])


def spec(context) -> manifestdb.RunSpec:
    tasks = [manifestdb.TaskSpec(p, len(rows), sum(r[2] for r in rows)) for p, rows in ROWS.items()]
    return manifestdb.RunSpec(DATASET, dag_run_id(context), "sales@v42", tasks, GRAIN)


def build(partition: str):
    def write(staging_dir: Path, context) -> None:
        lines = ["store,item,units"] + [f"{s},{i},{u}" for s, i, u in ROWS[partition]]
        (staging_dir / "part.csv").write_text("\n".join(lines) + "\n")
        marker = HERE / f"failed-{partition.replace('=', '_')}"
        if not marker.exists():
            marker.touch()
            if partition == "region=eu":
                raise RuntimeError("the first try wrote its file and then died")
            time.sleep(60)  # the first try of region=us hangs: Airflow's execution_timeout ends it
        return None  # the files under staging_dir, figures computed from them (a grain)

    return write


def send(effect: manifestdb.Effect, idempotency_key: str) -> None:
    request = urllib.request.Request(
        RECEIVER, data=effect.payload, method="POST", headers={"Idempotency-Key": idempotency_key}
    )
    urllib.request.urlopen(request, timeout=10).read()
    marker = HERE / "emit-died"
    if not marker.exists():
        marker.touch()
        raise RuntimeError("delivered, then died before marking it emitted")


@dag(dag_id="daily_units", schedule=None, start_date=datetime(2026, 11, 1), catchup=False)
def daily_units():
    declared = declare_run(connect, spec)
    parts = [
        partition_task(
            connect, DATASET, dag_run_id, p, task_id=f"build_{p.split('=')[1]}",
            retries=2, retry_delay=timedelta(0), execution_timeout=timedelta(seconds=5),
        )(build(p))()
        for p in ROWS
    ]
    published = publish_run(
        connect, DATASET, dag_run_id, effects=[("notify", None, "daily_units published")], emit=send, retries=2, retry_delay=timedelta(0)
    )
    declared >> parts >> published


the_dag = daily_units()

if __name__ == "__main__":
    run = the_dag.test()
    print("DAG_RUN_STATE", run.state if run is not None else None)

"""Airflow (the real package, `dag.test()` in a process of its own): a partition's first try
writes its file and fails, another's writes and times out; each retry is another attempt and
the published partition holds one; the notification, delivered once before its try died
unmarked and again by the retry, reaches a receiver that drops the repeat by its idempotency
key. Every task reaches the store through a Client of one `manifestdb serve`, the arrangement
the book recommends for tasks that run in parallel. Needs `pip install apache-airflow`
(49 s here from PyPI; `airflow db migrate` about 40 s); skipped without it."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import manifestdb as m

pytest.importorskip("airflow.sdk")

HERE = Path(__file__).resolve().parent


class Receiver(http.server.BaseHTTPRequestHandler):
    """A receiver that drops repeats: it applies a message once per Idempotency-Key."""

    deliveries: list[str] = []
    applied: dict[str, bytes] = {}

    def do_POST(self) -> None:  # noqa: N802
        key = self.headers["Idempotency-Key"]
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Receiver.deliveries.append(key)
        Receiver.applied.setdefault(key, body)  # a repeat changes nothing
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_dag_with_failing_tries_publishes_each_partition_once_and_notifies_once(tmp_path: Path, server: Any) -> None:
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "units_airflow.py").write_text((HERE / "dags" / "units_airflow.py").read_text())
    env = dict(
        os.environ,
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        MANIFESTDB_TEST_DIR=str(tmp_path),
        MANIFESTDB_SOCKET=str(server.socket),
        RECEIVER_URL=f"http://127.0.0.1:{receiver.server_address[1]}/",
    )
    airflow = Path(sys.executable).parent / "airflow"
    subprocess.run([str(airflow), "db", "migrate"], env=env, check=True, capture_output=True, timeout=600)
    done = subprocess.run([sys.executable, str(dags / "units_airflow.py")], env=env, capture_output=True, text=True, timeout=900)
    receiver.shutdown()
    assert "DAG_RUN_STATE success" in done.stdout, done.stdout[-4000:] + done.stderr[-4000:]

    with m.ReadOnlyStore.open(tmp_path / "store.redb", tmp_path / "staging") as store:
        manifest = store.manifest("daily_units")
        assert manifest is not None
        assert [(p.partition, p.attempt) for p in manifest.partitions] == [("region=eu", 2), ("region=us", 2)]
        assert (manifest.totals.rows, manifest.totals.total) == (3, 750)
        run = manifest.generation.run
        eu = store.attempts(m.TaskKey("daily_units", run, "region=eu"))
        assert [a.status for a in eu] == ["abandoned", "valid"]  # the failed try was abandoned at once
        us = store.attempts(m.TaskKey("daily_units", run, "region=us"))
        assert [a.status for a in us] == ["abandoned", "valid"]  # so was the timed-out one
        [effect] = store.effects("daily_units", run)
        assert effect.status == "emitted" and effect.claim is not None and effect.claim.claimant.startswith("airflow:")
    # The run is the DAG run (dag_run_id: dag.test() makes a manual one), and the key names the store.
    assert run.startswith("manual__")
    key = f"{effect.store_id}/daily_units/{run}/notify/"
    assert effect.idempotency_key == key
    assert Receiver.deliveries == [key, key]  # the retry sent it again ...
    assert Receiver.applied == {key: b"daily_units published"}  # ... and the receiver dropped the repeat


def test_the_books_airflow_template_defines_its_dag_and_names_runs_without_a_logical_date() -> None:
    import re

    chapter = (HERE.parents[1] / "docs" / "src" / "python.md").read_text()
    code = re.search(r"```python\n(.*?)```", chapter[chapter.index("## Airflow") :], re.S)
    assert code is not None and 'ctx["ds"]' not in code.group(1).replace('never ctx["ds"]', "")
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), "python.md", "exec"), namespace)  # as printed: it defines the DAG
    dag = namespace["daily_units"]()
    assert {t.task_id for t in dag.tasks} == {"declare_run", "build_eu", "build_us", "publish_run"}
    # A manual DAG run has a run id and no logical date: the template's run name needs only the id.
    manual = {"run_id": "manual__2026-12-05T01:02:03.456789+00:00"}
    assert namespace["run_of"](manual) == "manual__2026-12-05T01_02_03.456789_00_00"
    spec = namespace["spec"](manual)
    assert isinstance(spec, m.RunSpec) and spec.run == "manual__2026-12-05T01_02_03.456789_00_00" and spec.grain is not None

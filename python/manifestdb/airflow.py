"""Airflow: TaskFlow tasks that declare a run, build its partitions through attempts and
publish it (``pip install "manifestdb[airflow]"``; Airflow 3's ``airflow.sdk``).

::

    connect = lambda: manifestdb.Client("/srv/jobs/manifestdb.sock")
    run_of = dag_run_id  # the DAG run's id: a task's retry is the same run, a new DAG run a new one

    @dag(schedule="@daily")
    def daily_units():
        declared = declare_run(connect, lambda ctx: RunSpec("daily_units", run_of(ctx), ...))
        parts = [
            partition_task(connect, "daily_units", run_of, p, task_id=f"build_{i}", retries=3)(build)()
            for i, p in enumerate(PARTITIONS)
        ]
        published = publish_run(connect, "daily_units", run_of, effects=[("notify", None, "done")], emit=send)
        declared >> parts >> published

A partition task begins an attempt, hands ``build(staging_dir, context)`` the attempt's private
staging directory, then finishes and validates it; a failed try's attempt is abandoned at once
(by the task itself when it raises, by the retry or failure callback when it was killed or
timed out), and a retry is a new attempt, so the published partition holds one. The publish
task records the run's effects under their natural keys, publishes, and emits each ready
effect with its idempotency key (which names the store), marking it emitted in the same step.

The run identity is the DAG run's (:func:`dag_run_id`): every try of every task of one DAG run
(retries, a cleared task) works on the same manifestdb run, so the published partition holds
one attempt; another DAG run (the schedule, a manual trigger, a backfill) is another run, which
publishes a new generation. Do not name runs after ``ctx["ds"]``: a manually triggered DAG run
in Airflow 3 has no logical date (``KeyError: 'ds'``), and two DAG runs of one date would share
a run.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Sequence, Union

from airflow.sdk import task

from .integrations import (
    Connect,
    Emit,
    abandon_running,
    publish_and_emit,
    run_attempt,
)
from .types import FileCheck, RunSpec, TaskKey

__all__ = ["declare_run", "partition_task", "publish_run", "abandon_callback", "dag_run_id"]

Context = Any
#: A value given as is, or computed from the task's context (:func:`dag_run_id`).
Templated = Union[str, Callable[[Context], str]]


def dag_run_id(context: Context) -> str:
    """The manifestdb run of a task: its DAG run's ``run_id`` (``manual__2026-12-05T00:00:00+00:00``,
    ``scheduled__...``), with ``:`` and ``+`` made ``_`` so that the name reads the same in a
    path and in a URL. Every try of every task of one DAG run gets the same name; every DAG
    run, manual ones included (which have no logical date), its own."""
    run_id = context["run_id"] if "run_id" in context else context["dag_run"].run_id
    if not isinstance(run_id, str) or not run_id:
        raise ValueError(f"the task's context has no DAG run id (run_id is {run_id!r})")
    return run_id.replace(":", "_").replace("+", "_")


def _resolve(value: Templated, context: Context) -> str:
    return value(context) if callable(value) else value


def abandon_callback(connect: Connect, dataset: str, run: Templated, partition: Templated) -> Callable[[Context], None]:
    """An ``on_retry_callback`` / ``on_failure_callback`` that abandons the failed try's attempt
    at once (``abandon_attempt``), so a killed or timed-out try is not left ``running`` for its
    whole lease."""

    def callback(context: Context) -> None:
        abandon_running(connect, TaskKey(dataset, _resolve(run, context), _resolve(partition, context)))

    return callback


def declare_run(connect: Connect, spec: Union[RunSpec, Callable[[Context], RunSpec]], *, task_id: str = "declare_run", **task_kwargs: Any) -> Any:
    """A task that declares the run (idempotent: a retry, or a re-run of the DAG run, declares
    the same run again harmlessly)."""

    def declare(**context: Any) -> str:
        run_spec = spec(context) if callable(spec) else spec
        with connect() as store:
            return store.declare_run(run_spec).value

    declare.__name__ = task_id
    return task(task_id=task_id, **task_kwargs)(declare)()


def partition_task(
    connect: Connect,
    dataset: str,
    run: Templated,
    partition: Templated,
    *,
    check: FileCheck = FileCheck.SIZE,
    task_id: str | None = None,
    **task_kwargs: Any,
) -> Callable[[Callable[[Path, Context], object]], Any]:
    """Decorates ``build(staging_dir, context)`` into a task that builds one partition through
    an attempt (see :func:`manifestdb.integrations.run_attempt` for what ``build`` returns).
    Extra keyword arguments go to Airflow's ``@task`` (``retries``, ``execution_timeout``, ...);
    the abandon callback is added to ``on_retry_callback`` and ``on_failure_callback``."""

    def decorate(build: Callable[[Path, Context], object]) -> Any:
        def build_partition(**context: Any) -> dict[str, Any]:
            key = TaskKey(dataset, _resolve(run, context), _resolve(partition, context))
            attempt, verdict = run_attempt(connect, key, lambda staging_dir: build(staging_dir, context), check=check)
            return {"partition": key.partition, "attempt": attempt.attempt, "accepted_attempt": verdict.accepted_attempt}

        name = task_id or getattr(build, "__name__", "build_partition")
        build_partition.__name__ = name
        build_partition.__doc__ = build.__doc__
        callback = abandon_callback(connect, dataset, run, partition)
        kwargs = dict(task_kwargs)
        for hook in ("on_retry_callback", "on_failure_callback"):
            given = kwargs.pop(hook, None)
            kwargs[hook] = [callback, *([] if given is None else given if isinstance(given, list) else [given])]
        return task(task_id=name, **kwargs)(build_partition)

    return decorate


def publish_run(
    connect: Connect,
    dataset: str,
    run: Templated,
    *,
    effects: Sequence[tuple[str, str | None, Union[str, bytes]]] = (),
    emit: Emit | None = None,
    claimant: str | None = None,
    lease: timedelta | float = 60.0,
    check: FileCheck = FileCheck.SIZE,
    task_id: str = "publish_run",
    **task_kwargs: Any,
) -> Any:
    """A task that validates the run's pending attempts (a partition try that finished and
    died before its verdict), records the run's ``effects`` (``(name, partition or None,
    payload)``, under their natural keys), publishes the run (a refusal fails the task with the
    per-task report: :class:`PublishRefused`), and emits each ready effect through ``emit(effect,
    idempotency_key)``, marking it emitted in the same step. The claimant defaults to a name
    stable across the task's retries (``airflow:<dag>:<task>:<run>@<host>``), so a retry renews the
    claim of a try that died between emitting and marking, and emits again: the receiver drops
    the repeat by its idempotency key."""

    def publish(**context: Any) -> dict[str, Any]:
        run_id = _resolve(run, context)
        ti = context.get("ti")
        # A claimant may not contain "/".
        who = claimant or f"airflow:{getattr(ti, 'dag_id', '?')}:{getattr(ti, 'task_id', task_id)}:{run_id}@{socket.gethostname()}"
        with connect() as store:
            outcome, emitted = publish_and_emit(
                store, dataset, run_id, effects=effects, emit=emit, claimant=who, lease=lease, check=check
            )
        return {"generation": outcome.generation.number, "emitted": [e.idempotency_key for e in emitted]}

    publish.__name__ = task_id
    return task(task_id=task_id, **task_kwargs)(publish)()

"""What the Airflow and Dagster integrations share (manifestdb.integrations), without either
scheduler: an attempt abandoned at once when its try raises, the coordinator's step that
validates pending attempts, publishes and emits with the natural key, through the embedded store
and a real server alike."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

import manifestdb as m
from manifestdb.integrations import PublishRefused, abandon_running, publish_and_emit, run_attempt

from test_protocol import DATASET, EU, RUN, US, attempt, declare

Handle = m.Store | m.Client


def borrowed(handle: Handle):  # type: ignore[no-untyped-def]
    """A `connect` that lends the test's open handle for each step (an embedded store has one
    writer at a time, and the test holds it)."""

    @contextmanager
    def connect() -> Iterator[Handle]:
        yield handle

    return connect


def write_eu(staging_dir: Path) -> dict[str, int]:
    (staging_dir / "part.csv").write_text("store,item,units\n1,7,300\n2,7,400\n")
    return {"rows": 2, "total": 700}


def test_a_try_that_raises_abandons_its_attempt_and_the_next_is_accepted(handle: Handle) -> None:
    declare(handle)
    task = m.TaskKey(DATASET, RUN, EU)

    def dies(staging_dir: Path) -> None:
        write_eu(staging_dir)
        raise RuntimeError("died after writing")

    with pytest.raises(RuntimeError, match="died after writing"):
        run_attempt(borrowed(handle), task, dies)
    key, verdict = run_attempt(borrowed(handle), task, write_eu)
    assert (key.attempt, verdict.is_valid(), verdict.accepted_attempt) == (2, True, 2)
    assert [a.status for a in handle.attempts(task)] == ["abandoned", "valid"]
    # A killed try's attempt (left running) is what the retry callback abandons.
    ticket = handle.begin_attempt(m.TaskKey(DATASET, RUN, US))
    assert abandon_running(borrowed(handle), m.TaskKey(DATASET, RUN, US)) == [ticket.key]
    assert [a.status for a in handle.attempts(m.TaskKey(DATASET, RUN, US))] == ["abandoned"]


def test_the_coordinator_validates_pending_attempts_publishes_and_emits_by_natural_key(handle: Handle) -> None:
    declare(handle)
    # Both workers finished and lost their answers before validating.
    eu, us = attempt(handle, EU), attempt(handle, US)
    sent: list[str] = []

    def emit_then_die(effect: m.Effect, idempotency_key: str) -> None:
        sent.append(idempotency_key)
        raise RuntimeError("delivered, then died before marking it emitted")

    effects = [("notify", None, "published")]
    with pytest.raises(RuntimeError, match="before marking"):
        publish_and_emit(handle, DATASET, RUN, effects=effects, emit=emit_then_die, claimant="coordinator")
    manifest = handle.manifest(DATASET)
    assert manifest is not None and [(p.partition, p.attempt) for p in manifest.partitions] == [(eu.key.task.partition, 1), (us.key.task.partition, 1)]
    assert (manifest.totals.rows, manifest.totals.total) == (3, 750)

    # The retry (same claimant) publishes again harmlessly and delivers again, with the same key.
    outcome, emitted = publish_and_emit(
        handle, DATASET, RUN, effects=effects, emit=lambda e, k: sent.append(k), claimant="coordinator"
    )
    assert isinstance(outcome, m.AlreadyPublished) and [e.idempotency_key for e in emitted] == sent[1:]
    assert sent == [f"{emitted[0].store_id}/{DATASET}/{RUN}/notify/"] * 2
    [effect] = handle.effects(DATASET, RUN)
    assert effect.status == "emitted"
    # Emitted and marked: a third step sends nothing.
    assert publish_and_emit(handle, DATASET, RUN, effects=effects, emit=lambda e, k: sent.append(k), claimant="coordinator")[1] == []
    assert len(sent) == 2


def test_the_coordinator_raises_the_per_task_report_when_a_partition_is_missing(handle: Handle) -> None:
    declare(handle)
    attempt(handle, EU)
    with pytest.raises(PublishRefused, match="region=us"):
        publish_and_emit(handle, DATASET, RUN, claimant="coordinator")
    assert handle.manifest(DATASET) is None

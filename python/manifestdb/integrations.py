"""What the scheduler integrations share: one partition written through an attempt, the sweep
that abandons a failed try's attempt, and the emission of a run's ready effects.

A store is reached through ``connect``, a callable returning a fresh :class:`manifestdb.Store`
or :class:`manifestdb.Client` (used as a context manager and closed after each step). Give a
``Client`` of ``manifestdb serve`` where tasks run in parallel processes (an embedded store has
one writer at a time); an embedded ``Store`` serves tasks that run one at a time.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence, Union

from . import errors
from .client import Client
from .store import Store, describe_file
from .types import (
    AttemptKey,
    AttemptTicket,
    Candidate,
    Claimed,
    AlreadyPublished,
    Effect,
    EffectKey,
    FileCheck,
    FileEntry,
    Published,
    TaskKey,
    Verdict,
)

__all__ = [
    "Connect",
    "Emit",
    "InvalidAttempt",
    "PublishRefused",
    "describe_dir",
    "run_attempt",
    "abandon_running",
    "emit_ready_effects",
    "publish_and_emit",
]

Handle = Union[Store, Client]
#: Opens the store for one step: ``lambda: manifestdb.Client(socket)`` or
#: ``lambda: manifestdb.Store.open(path, staging)``.
Connect = Callable[[], Handle]


class Emit(Protocol):
    """Sends one effect: ``emit(effect, idempotency_key)``. Pass ``idempotency_key`` to the
    receiver (an ``Idempotency-Key`` header, a message id) so that it drops a repeat: a try that
    died between sending and marking is followed by a retry that sends again."""

    def __call__(self, effect: Effect, idempotency_key: str) -> None: ...


class InvalidAttempt(errors.Error):
    """The attempt's candidate was validated invalid (the scheduler's retry makes a new one)."""

    kind = "invalid_attempt"

    def __init__(self, attempt: AttemptKey, verdict: Verdict) -> None:
        reasons = "; ".join(f.message for f in verdict.failures)
        super().__init__(f"attempt {attempt} is invalid: {reasons}")
        self.attempt = attempt
        self.verdict = verdict


class PublishRefused(errors.Error):
    """A publish was refused by a gate (the message lists every failing task)."""

    kind = "publish_refused"


def describe_dir(staging_dir: Union[str, "os.PathLike[str]"]) -> list[FileEntry]:
    """Every regular file under an attempt's staging directory, described (size, CRC32), in
    path order. Symbolic links are refused by validation, so they are not followed here."""
    root = Path(staging_dir)
    entries = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            rel = (Path(dirpath) / name).relative_to(root).as_posix()
            entries.append(describe_file(root, rel))
    return sorted(entries, key=lambda f: f.path)


def _candidate(store: Handle, task: TaskKey, ticket: AttemptTicket, result: object) -> Candidate:
    if isinstance(result, Candidate):
        return result
    figures: Mapping[str, object] = {}
    if isinstance(result, Mapping):
        figures = result
    elif result is not None:
        raise TypeError(f"a partition function returns a Candidate, a dict of rows/total/digest or None, not {type(result).__name__}")
    info = store.run(task.dataset, task.run)
    if info is None:
        raise errors.NotFound(f"unknown run {task.run!r} of dataset {task.dataset!r}")
    return Candidate(
        snapshot=info.snapshot,
        rows=figures.get("rows"),  # type: ignore[arg-type]
        total=figures.get("total"),  # type: ignore[arg-type]
        digest=figures.get("digest"),  # type: ignore[arg-type]
        files=describe_dir(ticket.staging_dir),
    )


def run_attempt(
    connect: Connect,
    task: TaskKey,
    write: Callable[[Path], object],
    *,
    check: FileCheck = FileCheck.SIZE,
) -> tuple[AttemptKey, Verdict]:
    """One attempt of ``task``: begins it, calls ``write(staging_dir)``, finishes it with the
    candidate ``write`` returns (a :class:`Candidate`; or a dict of ``rows``/``total``/``digest``
    or None, with the files found under the staging directory and the run's snapshot), validates
    it, and raises :class:`InvalidAttempt` if invalid. If ``write`` raises, the attempt is
    abandoned at once (so it is not left ``running`` for its whole lease) and the error goes on.
    The store is opened for each step, not held while ``write`` runs."""
    with connect() as store:
        ticket = store.begin_attempt(task)
        if ticket.staging_url is not None:
            # write() takes a local directory; an object root's attempt is a prefix (a URL).
            store.abandon_attempt(ticket.key)
            raise errors.Usage(
                f"the staging root is on object storage ({ticket.staging_url}): the integrations hand write() "
                "a local directory, so open the store with a local staging root (or write the objects yourself: "
                "begin_attempt, then describe_file(ticket.staging_url, name))"
            )
    try:
        result = write(ticket.staging_dir)
    except BaseException:
        with connect() as store:
            store.abandon_attempt(ticket.key)
        raise
    with connect() as store:
        store.finish_attempt(ticket.key, _candidate(store, task, ticket, result))
        verdict = store.validate_attempt(ticket.key, check)
    if not verdict.is_valid():
        raise InvalidAttempt(ticket.key, verdict)
    return ticket.key, verdict


def abandon_running(connect: Connect, task: TaskKey) -> list[AttemptKey]:
    """Abandons every running attempt of ``task``: what a scheduler's failure or retry callback
    calls for a try that was killed or timed out (its own code never got to abandon it). Only
    one try of a task runs at a time, so a running attempt at that moment is the failed try's."""
    abandoned = []
    with connect() as store:
        for a in store.attempts(task):
            if a.status == "running":
                store.abandon_attempt(a.key)
                abandoned.append(a.key)
    return abandoned


def emit_ready_effects(
    store: Handle,
    dataset: str,
    run: str,
    emit: Emit,
    *,
    claimant: str,
    lease: timedelta | float = 60.0,
) -> list[Effect]:
    """Emits the run's ready effects: for each, claims it (as ``claimant``; a stable name across
    the retries of one step, so a retry renews its dead predecessor's claim), calls
    ``emit(effect, idempotency_key)``, and marks it emitted in the same step. Returns the
    effects this call emitted. An effect already emitted, or claimed by another live emitter,
    is skipped."""
    emitted = []
    for effect in store.effects(dataset, run, ready=True):
        outcome = store.claim_effect(effect.key, claimant, lease)
        if not isinstance(outcome, Claimed):
            continue
        emit(outcome.effect, outcome.effect.idempotency_key)
        store.mark_effect_emitted(effect.key, claimant)
        emitted.append(outcome.effect)
    return emitted


def publish_and_emit(
    store: Handle,
    dataset: str,
    run: str,
    *,
    effects: Sequence[tuple[str, str | None, Union[str, bytes]]] = (),
    emit: Emit | None = None,
    claimant: str,
    lease: timedelta | float = 60.0,
    check: FileCheck = FileCheck.SIZE,
) -> tuple[Published | AlreadyPublished, list[Effect]]:
    """The coordinator's step: validates the run's pending attempts (finished, never validated:
    a worker that lost its answer; ``validate_pending``, one call), records ``effects`` (``(name,
    partition or None, payload)``, under their natural keys), publishes the run (a refusal
    raises :class:`PublishRefused` with the per-task report) and emits the ready effects
    (:func:`emit_ready_effects`). Returns the publish's outcome and the effects emitted."""
    store.validate_pending(dataset, run, check)  # a pending attempt that is invalid just stays unaccepted
    for name, partition, payload in effects:
        store.record_effect(EffectKey(dataset, run, name, partition), payload)
    outcome = store.publish(dataset, run)
    if not isinstance(outcome, (Published, AlreadyPublished)):
        raise PublishRefused(str(outcome))
    emitted = [] if emit is None else emit_ready_effects(store, dataset, run, emit, claimant=claimant, lease=lease)
    return outcome, emitted

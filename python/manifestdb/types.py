"""The values manifestdb takes and gives back, as plain Python classes.

Names and fields mirror the Rust crate's (``TaskKey``, ``Candidate``, ``Generation``, ...), with
three Python habits: a time is a timezone-aware :class:`~datetime.datetime` (UTC) and a duration
a :class:`~datetime.timedelta` where Rust has ``*_at_ms`` / ``*_ms`` integers (the field loses
its ``_ms``); a staging directory is a :class:`~pathlib.Path`; an enum of outcomes is a small
class per outcome (``Published``, ``AlreadyPublished``, ``Refused``), so ``match`` and
``isinstance`` both work. The values are decoded from the documents the server answers and the
command-line tool prints (``docs/openapi.json``), so the embedded store and the client give the
same values.
"""

from __future__ import annotations

import enum
import operator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence, SupportsIndex, Union, cast

from . import errors
__all__ = [
    "TaskKey", "AttemptKey", "TaskSpec", "Grain", "DataFormat", "RunSpec", "FileEntry", "Candidate", "FileCheck",
    "PublishOptions", "EffectKey", "RunMode", "RetentionPolicy", "CleanupOptions", "ApplyOptions", "BatchOp",
    "DeclareOutcome", "AttemptTicket", "FinishOutcome", "GateFailure", "Reconciliation", "Verdict", "Generation",
    "GenerationRollback", "NondeterminismOverride", "PublishOutcome", "Published", "AlreadyPublished", "Refused",
    "TaskRefusal", "PartitionEntry", "Manifest", "ManifestTotals", "ManifestDiff", "AttemptInfo", "AttemptSummary",
    "RunInfo", "TaskInfo", "RunSummary", "Effect", "EffectClaim", "RecordedEffect", "ClaimOutcome", "Claimed",
    "HeldByOther", "AlreadyEmitted", "MarkOutcome", "Marked", "ClaimedByOther", "AbandonOutcome", "Abandoned",
    "AlreadyAbandoned", "InvalidateOutcome", "Invalidated", "AlreadyInvalid", "AttemptLease", "RollbackOutcome",
    "RolledBack", "RollbackRefused", "ExpireReport", "PlannedPath", "CleanupPlan", "SkippedPath", "ApplyReport",
    "ViewStatus", "View", "VerifyReport", "DatasetSummary", "BatchOutcome",
]

Document = Mapping[str, Any]


def _time(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _time_required(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _ms_of(value: timedelta | float | int, what: str) -> int:
    """A duration in whole milliseconds: a timedelta, or a number of seconds."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif not isinstance(value, bool) and hasattr(type(value), "__index__"):
        seconds = float(operator.index(cast(SupportsIndex, value)))
    else:
        raise TypeError(f"{what} must be a datetime.timedelta or a number of seconds, not {type(value).__name__}")
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"{what} must be a finite duration >= 0, not {value!r}")
    return round(seconds * 1000)


def _int(what: str, value: object, *, optional: bool = False) -> Any:
    """``value`` as an ``int``: an ``int`` or any integer that says it is one through
    ``__index__`` (a numpy integer, as ``operator.index`` takes it); a TypeError naming the
    field otherwise (a bool, a float, a str). ``None`` stays ``None`` when ``optional``."""
    if value is None and optional:
        return None
    if not isinstance(value, bool):
        try:
            return operator.index(cast(SupportsIndex, value))
        except TypeError:
            pass
    raise TypeError(f"{what} must be int{' or None' if optional else ''}, not {type(value).__name__}")


def _set_int(obj: object, name: str, what: str, *, optional: bool = False) -> None:
    """Replaces the int field ``name`` of a frozen dataclass with :func:`_int` of its value."""
    object.__setattr__(obj, name, _int(what, getattr(obj, name), optional=optional))


def _check(what: str, value: object, expected: type | tuple[type, ...], *, optional: bool = False) -> None:
    """Raises a TypeError naming the field when ``value`` is not of the type the store takes (a
    bool is not taken for an int)."""
    if value is None and optional:
        return
    types = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
        return
    names = " or ".join(t.__name__ for t in types)
    raise TypeError(f"{what} must be {names}{' or None' if optional else ''}, not {type(value).__name__}")


# ---------------------------------------------------------------------------------------------
# What callers hand to the store.


@dataclass(frozen=True, slots=True)
class TaskKey:
    """The natural key of one unit of work: a task owns exactly one partition."""

    dataset: str
    run: str
    partition: str

    def __post_init__(self) -> None:
        _check("dataset", self.dataset, str)
        _check("run", self.run, str)
        _check("partition", self.partition, str)

    def attempt(self, attempt: int) -> AttemptKey:
        """The key of attempt number ``attempt`` of this task."""
        return AttemptKey(self, attempt)

    def __str__(self) -> str:
        return f"{self.dataset}/{self.run}/{self.partition}"

    def _body(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "run": self.run, "partition": self.partition}


@dataclass(frozen=True, slots=True)
class AttemptKey:
    """One attempt of a task; numbers are assigned by the store, from 1, in begin order."""

    task: TaskKey
    attempt: int

    def __post_init__(self) -> None:
        _check("task", self.task, TaskKey)
        _set_int(self, "attempt", "attempt")

    @property
    def dataset(self) -> str:
        return self.task.dataset

    @property
    def run(self) -> str:
        return self.task.run

    @property
    def partition(self) -> str:
        return self.task.partition

    def __str__(self) -> str:
        return f"{self.task}#{self.attempt}"

    def _body(self) -> dict[str, Any]:
        t = self.task
        return {"dataset": t.dataset, "run": t.run, "partition": t.partition, "attempt": self.attempt}

    @staticmethod
    def _of(doc: Document) -> AttemptKey:
        return AttemptKey(TaskKey(doc["dataset"], doc["run"], doc["partition"]), doc["attempt"])


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One declared task and what its output must reconcile to at the declared grain."""

    partition: str
    expected_rows: int
    expected_total: int | None = None

    def __post_init__(self) -> None:
        _check("partition", self.partition, str)
        _set_int(self, "expected_rows", "expected_rows")
        _set_int(self, "expected_total", "expected_total", optional=True)

    def _body(self) -> dict[str, Any]:
        return {"partition": self.partition, "expected_rows": self.expected_rows, "expected_total": self.expected_total}


class DataFormat(str, enum.Enum):
    """The file format a grain's partitions are written in."""

    CSV = "csv"
    PARQUET = "parquet"


@dataclass(frozen=True, slots=True)
class Grain:
    """A run's declared grain: what one row means (its key columns) and its measure. With one,
    validation reads every file and computes rows, total, duplicate keys and the canonical
    digest itself; ``measure_scale`` is the number of decimals the measure is read at.

    ``format`` is a :class:`DataFormat` or its name in any case (``"csv"``, ``"CSV"``,
    ``"parquet"``), kept as the :class:`DataFormat`. What can be checked without a store is
    checked when the grain is made, raising :class:`manifestdb.Usage`: a format the store does
    not read, no key column, a column named twice, a negative scale."""

    format: DataFormat | str
    keys: Sequence[str]
    measure: str
    measure_scale: int = 0

    def __post_init__(self) -> None:
        _check("grain.format", self.format, (DataFormat, str))
        if isinstance(self.keys, str) or not isinstance(self.keys, Sequence):
            raise TypeError(f"grain.keys must be a sequence of str, not {type(self.keys).__name__}")
        for key in self.keys:
            _check("grain.keys[]", key, str)
        _check("grain.measure", self.measure, str)
        _set_int(self, "measure_scale", "grain.measure_scale")
        # Checked here, where the grain is written, rather than when a run declaring it is.
        if not isinstance(self.format, DataFormat):
            names = {f.value: f for f in DataFormat}
            fmt = names.get(self.format.lower())
            if fmt is None:
                raise errors.Usage(f"grain.format {self.format!r} is not a format the store reads: give one of {sorted(names)}")
            object.__setattr__(self, "format", fmt)
        object.__setattr__(self, "keys", tuple(self.keys))
        if not self.keys:
            raise errors.Usage("grain.keys is empty: a grain names the key columns one row is unique by")
        columns = [*self.keys, self.measure]
        twice = sorted({c for c in columns if columns.count(c) > 1})
        if twice:
            raise errors.Usage(f"grain column {twice[0]!r} is named twice (keys and measure must be distinct columns)")
        if self.measure_scale < 0:
            raise errors.Usage(f"grain.measure_scale must be >= 0, not {self.measure_scale}")

    def _body(self) -> dict[str, Any]:
        fmt = self.format.value if isinstance(self.format, DataFormat) else self.format
        return {"format": fmt, "keys": list(self.keys), "measure": self.measure, "scale": self.measure_scale}

    @staticmethod
    def _of(doc: Document | None) -> Grain | None:
        if doc is None:
            return None
        return Grain(DataFormat(doc["format"]), tuple(doc["keys"]), doc["measure"], doc["scale"])


@dataclass(frozen=True, slots=True)
class RunSpec:
    """A run to declare: one execution of a step over one pinned input snapshot, with its tasks.

    A run either declares its output's ``grain`` (validation then reads every file and computes
    rows, total, duplicate keys and the digest itself) or says in words that the figures its
    workers report are published unchecked: ``trust_reported_figures=True``. Nothing reads the
    data of such a run (a 0-byte file reported as 5 rows is published as 5 rows), and every
    document of its figures marks them reported (:attr:`PartitionEntry.figures_checked` is
    False). A spec with neither, or both, raises :class:`manifestdb.Usage` when it is made, as
    the command-line tool refuses a declaration without ``--grain`` or
    ``--trust-reported-figures``."""

    dataset: str
    run: str
    snapshot: str
    tasks: Sequence[TaskSpec]
    grain: Grain | None = None
    trust_reported_figures: bool = False

    def __post_init__(self) -> None:
        _check("dataset", self.dataset, str)
        _check("run", self.run, str)
        _check("snapshot", self.snapshot, str)
        if isinstance(self.tasks, (str, bytes)) or not isinstance(self.tasks, Sequence):
            raise TypeError(f"tasks must be a sequence of TaskSpec, not {type(self.tasks).__name__}")
        for task in self.tasks:
            _check("tasks[]", task, TaskSpec)
        _check("grain", self.grain, Grain, optional=True)
        _check("trust_reported_figures", self.trust_reported_figures, bool)
        if self.grain is None and not self.trust_reported_figures:
            raise errors.Usage(
                f"run {self.run!r} declares no grain: give grain=Grain(format, keys, measure) so that validation reads the "
                "data, or trust_reported_figures=True to publish the figures workers report, unchecked"
            )
        if self.grain is not None and self.trust_reported_figures:
            raise errors.Usage(
                f"run {self.run!r} declares a grain and trust_reported_figures=True: with a grain the store reads the data "
                "and checks the figures; give one of the two"
            )

    def _body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "dataset": self.dataset,
            "run": self.run,
            "snapshot": self.snapshot,
            "tasks": [t._body() for t in self.tasks],
        }
        if self.grain is not None:
            body["grain"] = self.grain._body()
        if self.trust_reported_figures:
            body["trust_reported_figures"] = True
        return body


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One output file of an attempt: its path relative to the staging directory, size and
    CRC32 (:func:`manifestdb.describe_file` computes both)."""

    path: str
    size_bytes: int
    crc32: int

    def __post_init__(self) -> None:
        _check("file.path", self.path, str)
        _set_int(self, "size_bytes", "file.size_bytes")
        _set_int(self, "crc32", "file.crc32")

    def _body(self) -> dict[str, Any]:
        return {"path": self.path, "size_bytes": self.size_bytes, "crc32": self.crc32}

    @staticmethod
    def _of(doc: Document) -> FileEntry:
        return FileEntry(doc["path"], doc["size_bytes"], doc["crc32"])


@dataclass(frozen=True, slots=True)
class Candidate:
    """What a finished attempt reports; not data until validated, accepted and published. With
    a grain, ``rows``, ``total`` and ``digest`` are optional cross-checks; without one, ``rows``
    and ``digest`` are required."""

    snapshot: str
    rows: int | None = None
    total: int | None = None
    digest: str | None = None
    files: Sequence[FileEntry] = ()

    def __post_init__(self) -> None:
        _check("candidate.snapshot", self.snapshot, str)
        _set_int(self, "rows", "candidate.rows", optional=True)
        _set_int(self, "total", "candidate.total", optional=True)
        _check("candidate.digest", self.digest, str, optional=True)
        if isinstance(self.files, (str, bytes)) or not isinstance(self.files, Sequence):
            raise TypeError(f"candidate.files must be a sequence of FileEntry, not {type(self.files).__name__}")
        for f in self.files:
            _check("candidate.files[]", f, FileEntry)

    def _body(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot,
            "rows": self.rows,
            "total": self.total,
            "digest": self.digest,
            "files": [f._body() for f in self.files],
        }

    @staticmethod
    def _of(doc: Document | None) -> Candidate | None:
        if doc is None:
            return None
        return Candidate(doc["snapshot"], doc["rows"], doc["total"], doc["digest"], tuple(FileEntry._of(f) for f in doc["files"]))


class FileCheck(enum.Enum):
    """How thoroughly validation checks an attempt's files."""

    #: Each file exists as a regular file with the reported size.
    SIZE = "size"
    #: As SIZE, and the content's CRC32 equals the reported one (reads every byte).
    SIZE_AND_CHECKSUM = "checksums"


@dataclass(frozen=True, slots=True)
class PublishOptions:
    """Options of a publish: ``accept_nondeterminism`` publishes even if a partition's digest
    differs from the one published earlier for the same input snapshot (the reason is kept in
    the generation's history)."""

    accept_nondeterminism: str | None = None


@dataclass(frozen=True, slots=True)
class EffectKey:
    """The natural key of a side effect, derived from the work and never from the attempt, so a
    repeat collides with the first record. ``partition`` is None for a run-level effect."""

    dataset: str
    run: str
    effect: str
    partition: str | None = None

    def __post_init__(self) -> None:
        _check("dataset", self.dataset, str)
        _check("run", self.run, str)
        _check("effect", self.effect, str)
        _check("partition", self.partition, str, optional=True)

    def _body(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "run": self.run, "effect": self.effect, "partition": self.partition}


class RunMode(enum.Enum):
    """Whether a destructive call only reports (the default everywhere) or acts."""

    DRY_RUN = "dry_run"
    EXECUTE = "execute"


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Which generations are kept: the ``keep_last`` newest and all younger than
    ``rollback_window``; the current one always."""

    keep_last: int = 10
    rollback_window: timedelta = timedelta(days=7)

    def __post_init__(self) -> None:
        _set_int(self, "keep_last", "keep_last")


@dataclass(frozen=True, slots=True)
class CleanupOptions:
    """Settings of a cleanup plan: a file must be older than ``age_threshold``, which must
    exceed the attempt lease unless ``force_short_threshold``."""

    age_threshold: timedelta = timedelta(days=3)
    force_short_threshold: bool = False


@dataclass(frozen=True, slots=True)
class ApplyOptions:
    """How a cleanup plan is applied: a dry run by default."""

    mode: RunMode = RunMode.DRY_RUN
    delete_unknown: bool = False
    batch_size: int = 1000

    def __post_init__(self) -> None:
        _set_int(self, "batch_size", "batch_size")


def _payload(payload: bytes | str) -> dict[str, Any]:
    if isinstance(payload, str):
        return {"payload": payload}
    if isinstance(payload, (bytes, bytearray, memoryview)):
        data = bytes(payload)
        try:
            return {"payload": data.decode("utf-8")}
        except UnicodeDecodeError:
            return {"payload_hex": data.hex()}
    raise TypeError(f"payload must be bytes or str, not {type(payload).__name__}")


@dataclass(frozen=True, slots=True)
class BatchOp:
    """One operation of :meth:`Store.run_batch`; make one with its constructors
    (``BatchOp.begin(task)``, ...)."""

    op: str
    body: Mapping[str, Any]

    @staticmethod
    def begin(task: TaskKey) -> BatchOp:
        """Begins an attempt of ``task`` (as :meth:`Store.begin_attempt`)."""
        _check("task", task, TaskKey)
        return BatchOp("begin", task._body())

    @staticmethod
    def finish(attempt: AttemptKey, candidate: Candidate) -> BatchOp:
        """Records the attempt's candidate (as :meth:`Store.finish_attempt`)."""
        _check("attempt", attempt, AttemptKey)
        _check("candidate", candidate, Candidate)
        return BatchOp("finish", {**attempt._body(), "candidate": candidate._body()})

    @staticmethod
    def validate(attempt: AttemptKey, check: FileCheck = FileCheck.SIZE) -> BatchOp:
        """Validates the attempt's candidate (as :meth:`Store.validate_attempt`)."""
        _check("attempt", attempt, AttemptKey)
        _check("check", check, FileCheck)
        return BatchOp("validate", {**attempt._body(), "checksums": check is FileCheck.SIZE_AND_CHECKSUM})

    @staticmethod
    def record_effect(effect: EffectKey, payload: bytes | str = b"") -> BatchOp:
        """Records an effect to emit once (as :meth:`Store.record_effect`)."""
        _check("effect", effect, EffectKey)
        return BatchOp("record_effect", {**effect._body(), **_payload(payload)})

    @staticmethod
    def claim_effect(effect: EffectKey, claimant: str, lease: timedelta | float) -> BatchOp:
        """Claims an effect for ``lease`` (as :meth:`Store.claim_effect`)."""
        _check("effect", effect, EffectKey)
        _check("claimant", claimant, str)
        return BatchOp("claim_effect", {**effect._body(), "claimant": claimant, "lease_ms": _ms_of(lease, "lease")})

    @staticmethod
    def mark_emitted(effect: EffectKey, claimant: str | None = None) -> BatchOp:
        """Marks an effect emitted (as :meth:`Store.mark_emitted`)."""
        _check("effect", effect, EffectKey)
        _check("claimant", claimant, str, optional=True)
        return BatchOp("mark_emitted", {**effect._body(), "claimant": claimant})

    def _document(self) -> dict[str, Any]:
        return {"op": self.op, **self.body}


# ---------------------------------------------------------------------------------------------
# What the store gives back.


class DeclareOutcome(enum.Enum):
    """What ``declare_run`` did."""

    DECLARED = "declared"
    ALREADY_DECLARED = "already_declared"


class FinishOutcome(enum.Enum):
    """What ``finish_attempt`` did."""

    RECORDED = "recorded"
    ALREADY_RECORDED = "already_recorded"


@dataclass(frozen=True, slots=True)
class AttemptTicket:
    """A begun attempt: its key and its private staging directory (it exists, and no other
    attempt shares it).

    On a staging root on object storage (``Store.open(path, "s3://bucket/prefix")``) the attempt's
    private place is a prefix, ``staging_url`` (``s3://bucket/prefix/<dataset>/...``): the worker
    writes its objects below it with any S3 client and describes them with
    ``describe_file(ticket.staging_url, name)``; ``staging_dir`` is then that URL as a path, not a
    directory. ``staging_url`` is None on a local root."""

    key: AttemptKey
    staging_dir: Path
    started_at: datetime
    staging_url: str | None = None

    @staticmethod
    def _of(doc: Document) -> AttemptTicket:
        d: str = doc["staging_dir"]
        return AttemptTicket(AttemptKey._of(doc), Path(d), _time_required(doc["started_at_ms"]), _object_url(d))


@dataclass(frozen=True, slots=True)
class GateFailure:
    """One failed check of a candidate or a publish: ``kind`` names it (``rows_mismatch``,
    ``file_missing``, ``duplicate_grain_key``, ``invalidated``, ...; the variants of the Rust
    ``GateFailure``), ``message`` says it, ``details`` holds its figures."""

    kind: str
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)

    @staticmethod
    def _of(doc: Document) -> GateFailure:
        details = {k: v for k, v in doc.items() if k not in ("kind", "message")}
        return GateFailure(doc["kind"], doc["message"], details)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """A verdict's figures side by side: expected (the task's), reported (the worker's) and
    computed (read from the files, for a run with a grain)."""

    basis: str
    expected_rows: int
    expected_total: int | None
    reported_rows: int | None
    reported_total: int | None
    reported_digest: str | None
    computed_rows: int | None
    computed_total: int | None
    computed_digest: str | None
    duplicate_keys: int
    rejected_rows: int
    files_read: int
    bytes_read: int

    @staticmethod
    def _of(doc: Document | None) -> Reconciliation | None:
        if doc is None:
            return None
        e, r, c = doc["expected"], doc["reported"], doc["computed"]
        return Reconciliation(
            doc["basis"], e["rows"], e["total"], r["rows"], r["total"], r["digest"], c["rows"], c["total"], c["digest"],
            doc["duplicate_keys"], doc["rejected_rows"], doc["files_read"], doc["bytes_read"],
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    """The coordinator's verdict on a candidate. ``failures`` lists every failed check of an
    invalid one. From ``validate_attempt``, also the task's accepted attempt after it and the
    figures; from a batch, those two are None."""

    valid: bool
    failures: tuple[GateFailure, ...] = ()
    accepted_attempt: int | None = None
    reconciliation: Reconciliation | None = None

    def is_valid(self) -> bool:
        """Whether the candidate passed every gate (the field ``valid``)."""
        return self.valid

    @staticmethod
    def _of(doc: Document) -> Verdict:
        return Verdict(
            doc["verdict"] == "valid",
            tuple(GateFailure._of(f) for f in doc["failures"]),
            doc.get("accepted_attempt"),
            Reconciliation._of(doc.get("reconciliation")),
        )


@dataclass(frozen=True, slots=True)
class NondeterminismOverride:
    """An accepted non-determinism, kept in the history."""

    reason: str
    partitions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GenerationRollback:
    """What a rollback generation restored, who asked and why."""

    restored: int
    actor: str
    reason: str


@dataclass(frozen=True, slots=True)
class Generation:
    """A generation as the history records it. ``kind`` is ``"publish"`` or ``"rollback"``
    (then ``rollback`` says what it restored)."""

    dataset: str
    number: int
    parent: int
    run: str
    snapshot: str
    published_at: datetime
    partitions_replaced: int
    nondeterminism_accepted: NondeterminismOverride | None
    kind: str
    rollback: GenerationRollback | None

    @staticmethod
    def _of(doc: Document) -> Generation:
        nd, rb = doc["nondeterminism_accepted"], doc["rollback"]
        return Generation(
            doc["dataset"], doc["number"], doc["parent"], doc["run"], doc["snapshot"], _time_required(doc["published_at_ms"]),
            doc["partitions_replaced"],
            None if nd is None else NondeterminismOverride(nd["reason"], tuple(nd["partitions"])),
            doc["kind"],
            None if rb is None else GenerationRollback(rb["restored"], rb["actor"], rb["reason"]),
        )


class PublishOutcome:
    """What a publish did: :class:`Published`, :class:`AlreadyPublished` or :class:`Refused`.
    A :class:`Refused` is falsy and the others truthy, so ``if store.publish(...):`` is true
    exactly when the run is published."""

    __slots__ = ()

    @staticmethod
    def _of(doc: Document) -> PublishOutcome:
        outcome = doc["outcome"]
        if outcome == "published":
            return Published(Generation._of(doc["generation"]))
        if outcome == "already_published":
            return AlreadyPublished(Generation._of(doc["generation"]))
        return Refused(doc["dataset"], doc["run"], tuple(TaskRefusal._of(t) for t in doc["refused_tasks"]))


@dataclass(frozen=True, slots=True)
class Published(PublishOutcome):
    """The run is now the dataset's current generation."""

    generation: Generation


@dataclass(frozen=True, slots=True)
class AlreadyPublished(PublishOutcome):
    """The run was already published (perhaps by a call whose answer was lost); nothing was
    written."""

    generation: Generation


@dataclass(frozen=True, slots=True)
class TaskRefusal:
    """One failing task of a refused publish: ``reason`` is ``no_accepted_attempt``, ``gate`` or
    ``nondeterministic``; ``details`` holds the attempts, failures or digests."""

    partition: str
    reason: str
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)

    @staticmethod
    def _of(doc: Document) -> TaskRefusal:
        details = {k: v for k, v in doc.items() if k not in ("partition", "reason", "message")}
        return TaskRefusal(doc["partition"], doc["reason"], doc["message"], details)


@dataclass(frozen=True, slots=True)
class Refused(PublishOutcome):
    """A gate refused the publish: nothing was written, the pointer did not move. ``tasks``
    has one entry per failing task, in partition order."""

    dataset: str
    run: str
    tasks: tuple[TaskRefusal, ...]

    def __bool__(self) -> bool:
        """False: the run was not published (``if outcome:`` is the success check)."""
        return False

    def __str__(self) -> str:
        lines = [f"publish of run {self.run!r} of {self.dataset!r} refused:"]
        lines += [f"  {t.partition}: {t.message}" for t in self.tasks]
        return "\n".join(lines)


def _object_url(location: str | None) -> str | None:
    """A staging location on object storage is a URL, kept as text (a ``Path`` folds its ``//``)."""
    return location if location is not None and location.startswith("s3://") else None


@dataclass(frozen=True, slots=True)
class PartitionEntry:
    """One partition of a generation: the accepted attempt that fills it and its files.
    ``staging_dir`` is absolute when the staging root is known; :meth:`paths` gives the files'
    absolute paths. On a staging root on object storage, ``staging_url`` is the attempt's URL
    and :meth:`urls` gives the objects' URLs instead."""

    partition: str
    since_generation: int
    run: str
    attempt: int
    snapshot: str
    rows: int
    total: int | None
    digest: str
    staging_rel: str
    staging_dir: Path | None
    files: tuple[FileEntry, ...]
    #: True when the store computed ``rows``, ``total`` and ``digest`` from the files (the run
    #: that filled the partition declares a grain); False when they are the worker's own,
    #: reported and not checked (``trust_reported_figures=True``), what ``manifestdb show``
    #: prints as "reported, not checked".
    figures_checked: bool
    #: The attempt's URL (``s3://bucket/prefix/...``) when the staging root is on object storage.
    staging_url: str | None = None

    def paths(self) -> list[Path]:
        """The partition's files as paths under its attempt's staging directory (ValueError when the
        staging root is not known, or is on object storage: see :meth:`urls`)."""
        if self.staging_url is not None:
            raise ValueError(f"the partition's files are objects under {self.staging_url}: use urls()")
        if self.staging_dir is None:
            raise ValueError("the staging root is not known (open the read-only store with staging=...)")
        return [self.staging_dir / f.path for f in self.files]

    def urls(self) -> list[str]:
        """The partition's objects' URLs, when the staging root is on object storage (ValueError
        for a local root: see :meth:`paths`)."""
        if self.staging_url is None:
            raise ValueError("the partition's files are local files: use paths()")
        return [f"{self.staging_url}/{f.path}" for f in self.files]

    @staticmethod
    def _of(doc: Document) -> PartitionEntry:
        d = doc["staging_dir"]
        return PartitionEntry(
            doc["partition"], doc["since_generation"], doc["run"], doc["attempt"], doc["snapshot"], doc["rows"], doc["total"],
            doc["digest"], doc["staging_rel"], None if d is None else Path(d), tuple(FileEntry._of(f) for f in doc["files"]),
            doc["figures"] == "computed", _object_url(d),
        )


@dataclass(frozen=True, slots=True)
class ManifestTotals:
    """Sizes summed over a manifest's partitions (``total`` None if no partition has one)."""

    partitions: int
    rows: int
    total: int | None
    files: int
    bytes: int


@dataclass(frozen=True, slots=True)
class Manifest:
    """A generation and all its partitions, in key order; ``current`` says whether it is the
    dataset's current generation when read."""

    generation: Generation
    partitions: tuple[PartitionEntry, ...]
    current: bool
    totals: ManifestTotals

    def paths(self) -> list[Path]:
        """Every file of the generation, as absolute paths (what an engine reads)."""
        return [p for part in self.partitions for p in part.paths()]

    def urls(self) -> list[str]:
        """Every object of the generation, as URLs, when the staging root is on object storage
        (what an engine reads there, with the endpoint and credentials in its storage options)."""
        return [u for part in self.partitions for u in part.urls()]

    @staticmethod
    def _of(doc: Document) -> Manifest:
        t = doc["totals"]
        return Manifest(
            Generation._of(doc["generation"]),
            tuple(PartitionEntry._of(p) for p in doc["partitions"]),
            doc["current"],
            ManifestTotals(t["partitions"], t["rows"], t["total"], t["files"], t["bytes"]),
        )


@dataclass(frozen=True, slots=True)
class ManifestDiff:
    """What changed from generation ``from_generation`` to ``to_generation``."""

    dataset: str
    from_generation: int
    to_generation: int
    added: tuple[PartitionEntry, ...]
    removed: tuple[PartitionEntry, ...]
    replaced: tuple[tuple[PartitionEntry, PartitionEntry], ...]
    unchanged: int

    @staticmethod
    def _of(doc: Document) -> ManifestDiff:
        return ManifestDiff(
            doc["dataset"], doc["from"], doc["to"],
            tuple(PartitionEntry._of(p) for p in doc["added"]),
            tuple(PartitionEntry._of(p) for p in doc["removed"]),
            tuple((PartitionEntry._of(r["from"]), PartitionEntry._of(r["to"])) for r in doc["replaced"]),
            doc["unchanged"],
        )


@dataclass(frozen=True, slots=True)
class AttemptInfo:
    """Everything the store knows about one attempt (``attempt(key)``; in ``run(...)``'s tasks
    without ``staging_dir`` and ``grain``). ``status`` is ``running``, ``finished``, ``valid``,
    ``invalid`` or ``abandoned``."""

    key: AttemptKey
    status: str
    failures: tuple[GateFailure, ...]
    started_at: datetime
    staging_rel: str
    staging_dir: Path | None
    candidate: Candidate | None
    reconciliation: Reconciliation | None
    grain: Grain | None = None

    @staticmethod
    def _of(doc: Document, task: TaskKey | None = None) -> AttemptInfo:
        key = AttemptKey._of(doc) if task is None else task.attempt(doc["attempt"])
        d = doc.get("staging_dir")
        return AttemptInfo(
            key, doc["status"], tuple(GateFailure._of(f) for f in doc["failures"]), _time_required(doc["started_at_ms"]),
            doc["staging_rel"], None if d is None else Path(d), Candidate._of(doc["candidate"]),
            Reconciliation._of(doc.get("reconciliation")), Grain._of(doc.get("grain")),
        )


@dataclass(frozen=True, slots=True)
class AttemptSummary:
    """One attempt as ``attempts(...)`` lists it: its state and lease. A running attempt not
    recorded abandoned holds a lease until ``lease_expires_at``."""

    key: AttemptKey
    status: str
    accepted: bool
    started_at: datetime
    heartbeat_at: datetime
    abandoned_at: datetime | None
    lease_expires_at: datetime | None
    staging_rel: str

    @staticmethod
    def _of(doc: Document, dataset: str, run: str) -> AttemptSummary:
        return AttemptSummary(
            TaskKey(dataset, run, doc["partition"]).attempt(doc["attempt"]), doc["status"], doc["accepted"],
            _time_required(doc["started_at_ms"]), _time_required(doc["heartbeat_at_ms"]), _time(doc["abandoned_at_ms"]),
            _time(doc["lease_expires_at_ms"]), doc["staging_rel"],
        )


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """A declared task with its accepted attempt and every attempt."""

    spec: TaskSpec
    accepted_attempt: int | None
    attempts: tuple[AttemptInfo, ...]


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A run as declared, with how far each task got."""

    dataset: str
    run: str
    snapshot: str
    declared_at: datetime
    published_generation: int | None
    grain: Grain | None
    tasks: tuple[TaskInfo, ...]

    @staticmethod
    def _of(doc: Document) -> RunInfo:
        tasks = []
        for t in doc["tasks"]:
            key = TaskKey(doc["dataset"], doc["run"], t["partition"])
            tasks.append(
                TaskInfo(
                    TaskSpec(t["partition"], t["expected_rows"], t["expected_total"]),
                    t["accepted_attempt"],
                    tuple(AttemptInfo._of(a, key) for a in t["attempts"]),
                )
            )
        return RunInfo(
            doc["dataset"], doc["run"], doc["snapshot"], _time_required(doc["declared_at_ms"]), doc["published_generation"],
            Grain._of(doc["grain"]), tuple(tasks),
        )


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run of a dataset as ``runs(dataset)`` lists it. ``state`` is ``published``,
    ``complete`` (every task has an accepted attempt) or ``open``."""

    dataset: str
    run: str
    snapshot: str
    declared_at: datetime
    state: str
    tasks: int
    accepted_tasks: int
    published_generation: int | None


@dataclass(frozen=True, slots=True)
class DatasetSummary:
    """A dataset with a current generation."""

    dataset: str
    current_generation: int
    run: str
    published_at: datetime


@dataclass(frozen=True, slots=True)
class EffectClaim:
    """An emitter's claim on a ready effect: until ``expires_at`` only ``claimant`` may emit it."""

    claimant: str
    claimed_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Effect:
    """A recorded side effect. ``status`` is ``recorded`` (its run is not published: do not
    emit), ``ready`` (emit, then mark emitted) or ``emitted``.

    ``idempotency_key`` is what to hand a receiver that drops repeats (an ``Idempotency-Key``
    header, a message id): ``<store id>/<dataset>/<run>/<effect>/<partition>``, the partition
    empty for a run-level effect. It is the same for every attempt, retry and emitter of this
    effect, and names the store (``store_id``: made when the store was created, kept across
    reopens), so two stores' effects never collide at one receiver."""

    key: EffectKey
    payload: bytes
    recorded_at: datetime
    status: str
    generation: int | None
    emitted_at: datetime | None
    claim: EffectClaim | None
    store_id: str
    idempotency_key: str

    @staticmethod
    def _of(doc: Document) -> Effect:
        c = doc["claim"]
        return Effect(
            EffectKey(doc["dataset"], doc["run"], doc["effect"], doc["partition"]),
            bytes.fromhex(doc["payload_hex"]),
            _time_required(doc["recorded_at_ms"]),
            doc["status"],
            doc["generation"],
            _time(doc["emitted_at_ms"]),
            None if c is None else EffectClaim(c["claimant"], _time_required(c["claimed_at_ms"]), _time_required(c["expires_at_ms"])),
            doc["store_id"],
            doc["idempotency_key"],
        )


@dataclass(frozen=True, slots=True)
class RecordedEffect:
    """What ``record_effect`` did: the stored effect (the first record under its key) and
    whether this call wrote it."""

    effect: Effect
    newly_recorded: bool

    @staticmethod
    def _of(doc: Document) -> RecordedEffect:
        return RecordedEffect(Effect._of(doc["effect"]), doc["newly_recorded"])


class ClaimOutcome:
    """What ``claim_effect`` decided: only :class:`Claimed` lets the caller emit, and only it
    is truthy (``if store.claim_effect(...): emit()``)."""

    __slots__ = ()
    effect: Effect

    @staticmethod
    def _of(doc: Document) -> ClaimOutcome:
        effect = Effect._of(doc["effect"])
        outcome = doc["outcome"]
        if outcome == "claimed":
            return Claimed(effect, doc["took_over_from"])
        if outcome == "held_by_other":
            return HeldByOther(effect)
        return AlreadyEmitted(effect)


class MarkOutcome:
    """What ``mark_effect_emitted`` decided: :class:`Marked` (truthy) or, falsy because this
    call marked nothing, :class:`AlreadyEmitted` and :class:`ClaimedByOther`."""

    __slots__ = ()
    effect: Effect

    @staticmethod
    def _of(doc: Document) -> MarkOutcome:
        effect = Effect._of(doc["effect"])
        outcome = doc["outcome"]
        if outcome == "marked":
            return Marked(effect)
        if outcome == "claimed_by_other":
            return ClaimedByOther(effect)
        return AlreadyEmitted(effect)


@dataclass(frozen=True, slots=True)
class Claimed(ClaimOutcome):
    """The caller holds the claim: emit, then mark emitted with the same claimant before the
    lease runs out."""

    effect: Effect
    took_over_from: str | None = None


@dataclass(frozen=True, slots=True)
class HeldByOther(ClaimOutcome):
    """Another emitter holds a live claim: do not emit."""

    effect: Effect

    def __bool__(self) -> bool:
        """False: do not emit (``if outcome:`` is the success check)."""
        return False


@dataclass(frozen=True, slots=True)
class AlreadyEmitted(ClaimOutcome, MarkOutcome):
    """The effect was already marked emitted: do not emit (a claim), nothing changed (a mark)."""

    effect: Effect

    def __bool__(self) -> bool:
        """False: nothing to emit, and this call marked nothing (``if outcome:`` is the success check)."""
        return False


@dataclass(frozen=True, slots=True)
class Marked(MarkOutcome):
    """Marked emitted now."""

    effect: Effect


@dataclass(frozen=True, slots=True)
class ClaimedByOther(MarkOutcome):
    """Another emitter holds a live claim; nothing changed."""

    effect: Effect

    def __bool__(self) -> bool:
        """False: this call marked nothing (``if outcome:`` is the success check)."""
        return False


class AbandonOutcome:
    """What ``abandon_attempt`` did."""

    __slots__ = ()
    abandoned_at: datetime

    @staticmethod
    def _of(doc: Document) -> AbandonOutcome:
        at = _time_required(doc["abandoned_at_ms"])
        return Abandoned(at) if doc["outcome"] == "abandoned" else AlreadyAbandoned(at)


@dataclass(frozen=True, slots=True)
class Abandoned(AbandonOutcome):
    """The attempt is now recorded abandoned: it can no longer finish, renew or be validated."""

    abandoned_at: datetime


@dataclass(frozen=True, slots=True)
class AlreadyAbandoned(AbandonOutcome):
    """It was already recorded abandoned; nothing was written."""

    abandoned_at: datetime


class InvalidateOutcome:
    """What ``invalidate_attempt`` did."""

    __slots__ = ()

    @staticmethod
    def _of(doc: Document) -> InvalidateOutcome:
        if doc["outcome"] == "invalidated":
            return Invalidated(doc["accepted_before"], doc["accepted_after"])
        return AlreadyInvalid()


@dataclass(frozen=True, slots=True)
class Invalidated(InvalidateOutcome):
    """The verdict is now invalid; the task's accepted attempt moved from ``accepted_before``
    to ``accepted_after`` (None: a new attempt may begin)."""

    accepted_before: int | None
    accepted_after: int | None


@dataclass(frozen=True, slots=True)
class AlreadyInvalid(InvalidateOutcome):
    """It was already invalid; nothing was written."""


@dataclass(frozen=True, slots=True)
class AttemptLease:
    """An attempt's lease after a heartbeat."""

    heartbeat_at: datetime
    expires_at: datetime


class RollbackOutcome:
    """What ``rollback`` did: :class:`RolledBack` or (falsy) :class:`RollbackRefused`."""

    __slots__ = ()

    @staticmethod
    def _of(doc: Document) -> RollbackOutcome:
        if doc["outcome"] == "rolled_back":
            return RolledBack(Generation._of(doc["generation"]))
        r = doc["refusal"]
        return RollbackRefused(r["kind"], r["message"], {k: v for k, v in r.items() if k not in ("kind", "message")})


@dataclass(frozen=True, slots=True)
class RolledBack(RollbackOutcome):
    """The restored content is current again, as this new generation."""

    generation: Generation


@dataclass(frozen=True, slots=True)
class RollbackRefused(RollbackOutcome):
    """Nothing was written: ``kind`` is ``expired``, ``unknown`` or ``already_current``."""

    kind: str
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        """False: nothing was rolled back (``if outcome:`` is the success check)."""
        return False


@dataclass(frozen=True, slots=True)
class ExpireReport:
    """What ``expire_generations`` expired (or would, in a dry run)."""

    dataset: str
    mode: RunMode
    current: int
    oldest_retained: int
    expired: tuple[int, ...]
    versions_removed: int


@dataclass(frozen=True, slots=True)
class PlannedPath:
    """A file of a cleanup plan (path relative to the staging root)."""

    path: str
    size_bytes: int
    modified_at: datetime
    reason: str
    attempt: AttemptKey | None


@dataclass(frozen=True, slots=True)
class CleanupPlan:
    """A persisted cleanup plan: its candidates, unknown files and what was kept, by reason."""

    id: int
    created_at: datetime
    age_threshold: timedelta
    attempt_lifetime_max: timedelta
    candidates: tuple[PlannedPath, ...]
    candidate_bytes: int
    unknown: tuple[PlannedPath, ...]
    kept: Mapping[str, int]
    unconsidered: int

    @staticmethod
    def _of(doc: Document) -> CleanupPlan:
        def path(p: Document) -> PlannedPath:
            a = p["attempt"]
            return PlannedPath(p["path"], p["size_bytes"], _time_required(p["modified_at_ms"]), p["reason"], None if a is None else AttemptKey._of(a))

        return CleanupPlan(
            doc["plan"], _time_required(doc["created_at_ms"]), timedelta(milliseconds=doc["age_threshold_ms"]),
            timedelta(milliseconds=doc["attempt_lifetime_max_ms"]), tuple(path(p) for p in doc["candidates"]),
            doc["candidate_bytes"], tuple(path(p) for p in doc["unknown"]), dict(doc["kept"]), doc["unconsidered"],
        )


@dataclass(frozen=True, slots=True)
class SkippedPath:
    """A planned file an applied cleanup did not delete, and why."""

    path: str
    reason: str
    detail: str | None


@dataclass(frozen=True, slots=True)
class ApplyReport:
    """What applying a cleanup plan did (or would, in a dry run)."""

    plan: int
    mode: RunMode
    deleted: tuple[str, ...]
    bytes_deleted: int
    skipped: tuple[SkippedPath, ...]
    directories_removed: int
    attempt_records_removed: tuple[AttemptKey, ...]

    @staticmethod
    def _of(doc: Document) -> ApplyReport:
        return ApplyReport(
            doc["plan"], RunMode(doc["mode"]), tuple(doc["deleted"]), doc["bytes_deleted"],
            tuple(SkippedPath(s["path"], s["reason"], s["detail"]) for s in doc["skipped"]), doc["directories_removed"],
            tuple(AttemptKey._of(a) for a in doc["attempt_records_removed"]),
        )


@dataclass(frozen=True, slots=True)
class ViewStatus:
    """One synced view: the generation it shows, ``current``'s path and the view's."""

    dataset: str
    generation: int
    current: Path
    path: Path
    built: bool
    swapped: bool
    removed: tuple[int, ...]

    @staticmethod
    def _of(doc: Document) -> ViewStatus:
        return ViewStatus(
            doc["dataset"], doc["generation"], Path(doc["current"]), Path(doc["path"]), doc["built"], doc["swapped"], tuple(doc["removed"])
        )


@dataclass(frozen=True, slots=True)
class View:
    """Where a dataset's current view is, which generation it shows beside the store's, and its
    ``_manifest.json``."""

    dataset: str
    view_root: Path
    #: ``views/<dataset>/current``; ``None`` for a dataset without directory trees.
    current: Path | None
    #: The directory of the generation shown (``current`` resolved); ``None`` without trees.
    path: Path | None
    view_generation: int | None
    store_generation: int | None
    #: True if the view or the Delta table lags the store (``table["reason"]`` says why for the
    #: table: a build without the ``delta`` feature, as this package's wheel, cannot write it).
    lagging: bool
    manifest: Mapping[str, Any]
    #: The dataset's Delta table as its log holds it (``view --json``'s ``table``): ``path``,
    #: ``version`` (the version holding the generation shown), ``latest_version``,
    #: ``latest_generation``, ``lagging``, ``foreign_versions``, ``damaged_versions``, ``reason``.
    table: Mapping[str, Any]
    #: Whether the dataset has directory trees (the store's ``view_trees`` choice).
    trees: bool
    #: The exact files of the generation shown, absolute (the accepted attempts' files), for
    #: engines that take a list: ``pl.scan_csv(list(view.files))``, ``duckdb.read_csv([...])``.
    files: tuple[Path, ...]


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What ``verify`` found: ``clean`` when nothing."""

    clean: bool
    integrity: Mapping[str, Any]
    records: Mapping[str, int]
    records_total: int
    files_checked: int
    findings: tuple[Mapping[str, Any], ...]
    notes: tuple[str, ...]


BatchOutcome = Union[AttemptTicket, FinishOutcome, Verdict, RecordedEffect, ClaimOutcome, MarkOutcome]


def _batch_outcome(op: str, doc: Document) -> BatchOutcome:
    if op == "begin":
        return AttemptTicket._of(doc)
    if op == "finish":
        return FinishOutcome(doc["outcome"])
    if op == "validate":
        return Verdict._of(doc)
    if op == "record_effect":
        return RecordedEffect._of(doc)
    if op == "claim_effect":
        return ClaimOutcome._of(doc)
    return MarkOutcome._of(doc)

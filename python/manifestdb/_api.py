"""The operations, written once for the embedded store and the server client.

Each method checks its arguments' types (a ``TypeError`` naming the field), makes the request
body the server's route takes, sends it through ``self._call(method, route, body)`` (in-process
for :class:`manifestdb.Store`, HTTP for :class:`manifestdb.Client`) and decodes the document it
answers. The store itself checks the values (names with ``..`` or NUL, states, gates).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import errors
from .types import (
    AbandonOutcome,
    ApplyOptions,
    ApplyReport,
    AttemptInfo,
    AttemptKey,
    AttemptLease,
    AttemptSummary,
    AttemptTicket,
    BatchOp,
    BatchOutcome,
    Candidate,
    ClaimOutcome,
    CleanupOptions,
    CleanupPlan,
    DatasetSummary,
    DeclareOutcome,
    Effect,
    EffectKey,
    ExpireReport,
    FileCheck,
    FinishOutcome,
    Generation,
    InvalidateOutcome,
    Manifest,
    ManifestDiff,
    MarkOutcome,
    PartitionEntry,
    PublishOptions,
    PublishOutcome,
    RecordedEffect,
    RetentionPolicy,
    RollbackOutcome,
    RunInfo,
    RunMode,
    RunSpec,
    RunSummary,
    TaskKey,
    Verdict,
    VerifyReport,
    View,
    ViewStatus,
    _batch_outcome,
    _check,
    _int,
    _ms_of,
    _payload,
    _time_required,
)

Document = Mapping[str, Any]


class _Operations:
    """Every operation of the store, over one call to the served API."""

    #: Whether ``POST attempts/validate-pending`` is answered (the native module's routes);
    #: without it ``validate_pending`` validates each pending attempt in a call of its own.
    _validate_pending_route = True
    #: Whether ``POST attempts/finish-and-validate`` is answered (the native module's and the
    #: server's, in one commit); without it ``finish_and_validate`` finishes, then validates.
    _finish_and_validate_route = True

    def _call(self, method: str, route: str, body: dict[str, Any] | None = None) -> Document:
        raise NotImplementedError

    # ---- the attempt protocol ----

    def declare_run(self, spec: RunSpec) -> DeclareOutcome:
        """Declares a run and its tasks (idempotent: an identical declaration again is
        ``ALREADY_DECLARED``; a different one with the same id raises :class:`Conflict`)."""
        _check("spec", spec, RunSpec)
        return DeclareOutcome(self._call("POST", "runs/declare", spec._body())["outcome"])

    def begin_attempt(self, task: TaskKey) -> AttemptTicket:
        """Begins a new attempt of ``task``: a new number and a private staging directory."""
        _check("task", task, TaskKey)
        return AttemptTicket._of(self._call("POST", "attempts/begin", task._body()))

    def finish_attempt(self, attempt: AttemptKey, candidate: Candidate) -> FinishOutcome:
        """Records the attempt's candidate (idempotent for the same candidate)."""
        _check("attempt", attempt, AttemptKey)
        _check("candidate", candidate, Candidate)
        body = attempt._body()
        body["candidate"] = candidate._body()
        return FinishOutcome(self._call("POST", "attempts/finish", body)["outcome"])

    def validate_attempt(self, attempt: AttemptKey, check: FileCheck = FileCheck.SIZE) -> Verdict:
        """Validates a finished attempt against its run's snapshot and its task's expectations
        (reading the files for a run with a grain); the verdict is stored and final."""
        _check("attempt", attempt, AttemptKey)
        _check("check", check, FileCheck)
        body = attempt._body()
        body["checksums"] = check is FileCheck.SIZE_AND_CHECKSUM
        return Verdict._of(self._call("POST", "attempts/validate", body))

    def finish_and_validate(
        self, attempt: AttemptKey, candidate: Candidate, check: FileCheck = FileCheck.SIZE
    ) -> Verdict:
        """Records the attempt's candidate and validates it at once: what :meth:`finish_attempt`
        then :meth:`validate_attempt` do, for a scheduler that validates each candidate as it
        arrives. One durable commit stores both (a crash leaves both or neither), after the
        files of a valid candidate were made durable; embedded or through a server, one call.
        Again with the same candidate: the stored verdict; another candidate raises
        :class:`Conflict`."""
        _check("attempt", attempt, AttemptKey)
        _check("candidate", candidate, Candidate)
        _check("check", check, FileCheck)
        if not self._finish_and_validate_route:
            self.finish_attempt(attempt, candidate)
            return self.validate_attempt(attempt, check)
        body = attempt._body()
        body["candidate"] = candidate._body()
        body["checksums"] = check is FileCheck.SIZE_AND_CHECKSUM
        return Verdict._of(self._call("POST", "attempts/finish-and-validate", body))

    def publish(self, dataset: str, run: str, options: PublishOptions | None = None) -> PublishOutcome:
        """Publishes the run: one transaction checks completeness, the gates and determinism,
        writes the next generation and moves the pointer. A refusal is a :class:`Refused`
        value, not an error; publishing again returns :class:`AlreadyPublished`."""
        _check("dataset", dataset, str)
        _check("run", run, str)
        _check("options", options, PublishOptions, optional=True)
        body: dict[str, Any] = {"dataset": dataset, "run": run}
        if options is not None and options.accept_nondeterminism is not None:
            _check("options.accept_nondeterminism", options.accept_nondeterminism, str)
            body["accept_nondeterminism"] = options.accept_nondeterminism
        return PublishOutcome._of(self._call("POST", "publish", body))

    def heartbeat(self, attempt: AttemptKey) -> AttemptLease:
        """Renews a running attempt's lease."""
        _check("attempt", attempt, AttemptKey)
        doc = self._call("POST", "attempts/heartbeat", attempt._body())
        return AttemptLease(_time_required(doc["heartbeat_at_ms"]), _time_required(doc["expires_at_ms"]))

    def abandon_attempt(self, attempt: AttemptKey) -> AbandonOutcome:
        """Fences an attempt at once (a killed or timed-out try): it can no longer finish,
        renew its lease or be validated, and cleanup may take its files."""
        _check("attempt", attempt, AttemptKey)
        return AbandonOutcome._of(self._call("POST", "attempts/abandon", attempt._body()))

    def invalidate_attempt(self, attempt: AttemptKey, actor: str, reason: str) -> InvalidateOutcome:
        """Makes a validated attempt invalid (its files were lost, say); the task's accepted
        attempt moves to the lowest valid one left."""
        _check("attempt", attempt, AttemptKey)
        _check("actor", actor, str)
        _check("reason", reason, str)
        body = attempt._body()
        body.update(actor=actor, reason=reason)
        return InvalidateOutcome._of(self._call("POST", "attempts/invalidate", body))

    def run_batch(self, ops: Sequence[BatchOp]) -> list[BatchOutcome | errors.Error]:
        """Runs many begins, finishes, validations and effect operations in one commit. Each
        gets its own outcome; an operation refused on its merits comes back as its error
        (not raised) and writes nothing, while the others commit."""
        if isinstance(ops, (str, bytes)) or not isinstance(ops, Sequence):
            raise TypeError(f"ops must be a sequence of BatchOp, not {type(ops).__name__}")
        for op in ops:
            _check("ops[]", op, BatchOp)
        doc = self._call("POST", "batch", {"ops": [op._document() for op in ops]})
        results: list[BatchOutcome | errors.Error] = []
        for op, line in zip(ops, doc["results"]):
            if line["ok"]:
                results.append(_batch_outcome(op.op, line["result"]))
            else:
                results.append(errors._error_of_kind(line["error"]["kind"], line["error"]["message"]))
        return results

    # ---- side effects ----

    def record_effect(self, effect: EffectKey, payload: bytes | str = b"") -> RecordedEffect:
        """Records a side effect under its natural key; a repeat returns the first record."""
        _check("effect", effect, EffectKey)
        return RecordedEffect._of(self._call("POST", "effects/record", {**effect._body(), **_payload(payload)}))

    def claim_effect(self, effect: EffectKey, claimant: str, lease: timedelta | float) -> ClaimOutcome:
        """Claims a ready effect for ``lease`` (a timedelta or seconds): only :class:`Claimed`
        lets the caller emit."""
        _check("effect", effect, EffectKey)
        _check("claimant", claimant, str)
        body = {**effect._body(), "claimant": claimant, "lease_ms": _ms_of(lease, "lease")}
        return ClaimOutcome._of(self._call("POST", "effects/claim", body))

    def mark_effect_emitted(self, effect: EffectKey, claimant: str | None = None) -> MarkOutcome:
        """Marks a ready effect emitted (by its claimant, if it was claimed)."""
        _check("effect", effect, EffectKey)
        _check("claimant", claimant, str, optional=True)
        return MarkOutcome._of(self._call("POST", "effects/mark-emitted", {**effect._body(), "claimant": claimant}))

    # ---- retention, cleanup, views ----

    def abandon_expired_attempts(self, mode: RunMode = RunMode.DRY_RUN) -> list[AttemptKey]:
        """Records abandoned every attempt whose lease ran out unfinished (a dry run by
        default: lists them)."""
        _check("mode", mode, RunMode)
        doc = self._call("POST", "gc/abandon", {"execute": mode is RunMode.EXECUTE})
        return [AttemptKey._of(a) for a in doc["abandoned"]]

    def expire_generations(
        self, dataset: str, policy: RetentionPolicy | None = None, mode: RunMode = RunMode.DRY_RUN
    ) -> ExpireReport:
        """Expires the generations ``policy`` does not retain (a dry run by default)."""
        _check("dataset", dataset, str)
        _check("policy", policy, RetentionPolicy, optional=True)
        _check("mode", mode, RunMode)
        policy = policy or RetentionPolicy()
        body = {
            "dataset": dataset,
            "keep_last": policy.keep_last,
            "rollback_window_ms": _ms_of(policy.rollback_window, "policy.rollback_window"),
            "execute": mode is RunMode.EXECUTE,
        }
        d = self._call("POST", "gc/expire", body)
        return ExpireReport(d["dataset"], RunMode(d["mode"]), d["current"], d["oldest_retained"], tuple(d["expired"]), d["versions_removed"])

    def rollback(self, dataset: str, to: int, actor: str, reason: str) -> RollbackOutcome:
        """Makes retained generation ``to``'s content current again, as a new generation; a
        refusal is a :class:`RollbackRefused` value."""
        _check("dataset", dataset, str)
        to = _int("to", to)
        _check("actor", actor, str)
        _check("reason", reason, str)
        return RollbackOutcome._of(self._call("POST", "rollback", {"dataset": dataset, "to": to, "actor": actor, "reason": reason}))

    def plan_cleanup(self, options: CleanupOptions | None = None) -> CleanupPlan:
        """Plans (and stores) a cleanup of staging files nobody can need; deletes nothing."""
        _check("options", options, CleanupOptions, optional=True)
        options = options or CleanupOptions()
        body = {
            "age_threshold_ms": _ms_of(options.age_threshold, "options.age_threshold"),
            "force_short_threshold": options.force_short_threshold,
        }
        return CleanupPlan._of(self._call("POST", "gc/plan", body))

    def cleanup_plan(self, id: int) -> CleanupPlan | None:
        """A stored cleanup plan, or None."""
        id = _int("id", id)
        try:
            return CleanupPlan._of(self._call("GET", "gc/plan", {"plan": id}))
        except errors.NotFound:
            return None

    def apply_cleanup(self, id: int, options: ApplyOptions | None = None) -> ApplyReport:
        """Applies a stored plan, re-checking each file (a dry run by default)."""
        id = _int("id", id)
        _check("options", options, ApplyOptions, optional=True)
        options = options or ApplyOptions()
        body = {
            "plan": id,
            "execute": options.mode is RunMode.EXECUTE,
            "delete_unknown": options.delete_unknown,
            "batch_size": options.batch_size,
        }
        return ApplyReport._of(self._call("POST", "gc/apply", body))

    def sync_view(self, dataset: str) -> ViewStatus | None:
        """Brings the dataset's published view up to its current generation (None if it has
        none yet). Raises :class:`NotFound` if the store publishes no views."""
        _check("dataset", dataset, str)
        synced = self._call("POST", "views/sync", {"dataset": dataset})["synced"]
        return ViewStatus._of(synced[0]) if synced else None

    def sync_views(self) -> list[ViewStatus]:
        """:meth:`sync_view` for every dataset."""
        return [ViewStatus._of(s) for s in self._call("POST", "views/sync", {})["synced"]]

    def verify(self, files: FileCheck | None = None) -> VerifyReport:
        """Checks every record (and, with ``files``, every retained file) of the store."""
        _check("files", files, FileCheck, optional=True)
        d = self._call("POST", "verify", {"files": None if files is None else files.value})
        return VerifyReport(
            d["clean"], d["integrity"], d["records"], d["records_total"], d["files_checked"], tuple(d["findings"]), tuple(d["notes"])
        )

    # ---- reads: each one consistent snapshot ----

    def datasets(self) -> list[DatasetSummary]:
        """Every dataset with a current generation."""
        rows = self._call("GET", "datasets", {})["datasets"]
        return [DatasetSummary(r["dataset"], r["current_generation"], r["run"], _time_required(r["published_at_ms"])) for r in rows]

    def current(self, dataset: str) -> Generation | None:
        """The dataset's current generation, or None (nothing published, or unknown dataset)."""
        _check("dataset", dataset, str)
        try:
            g = self._call("GET", "current", {"dataset": dataset})["generation"]
        except errors.NotFound:
            return None
        return None if g is None else Generation._of(g)

    def manifest(self, dataset: str, generation: int | None = None) -> Manifest | None:
        """Generation ``generation`` (the current one by default) with all its partitions, or
        None if the dataset has no such generation."""
        _check("dataset", dataset, str)
        generation = _int("generation", generation, optional=True)
        try:
            return Manifest._of(self._call("GET", "manifest", {"dataset": dataset, "generation": generation}))
        except errors.NotFound:
            return None

    def generation(self, dataset: str, number: int) -> Generation | None:
        """Retained generation ``number``'s history record, or None."""
        manifest = self.manifest(dataset, number)
        return None if manifest is None else manifest.generation

    def partition(self, dataset: str, partition: str, generation: int | None = None) -> PartitionEntry | None:
        """One partition of a generation (the current one by default), or None."""
        _check("partition", partition, str)
        manifest = self.manifest(dataset, generation)
        if manifest is None:
            return None
        return next((p for p in manifest.partitions if p.partition == partition), None)

    def history(self, dataset: str) -> list[Generation]:
        """The dataset's retained generations, oldest first (empty if none)."""
        _check("dataset", dataset, str)
        try:
            logs = self._call("GET", "history", {"dataset": dataset})["datasets"]
        except errors.NotFound:
            return []
        return [Generation._of(g) for log in logs for g in reversed(log["generations"])]

    def log(self, dataset: str) -> list[Generation]:
        """:meth:`history`, newest first (as ``manifestdb log`` prints it)."""
        return list(reversed(self.history(dataset)))

    def diff(self, dataset: str, from_generation: int, to_generation: int) -> ManifestDiff:
        """What changed from one retained generation to another."""
        _check("dataset", dataset, str)
        from_generation = _int("from_generation", from_generation)
        to_generation = _int("to_generation", to_generation)
        return ManifestDiff._of(self._call("GET", "diff", {"dataset": dataset, "from": from_generation, "to": to_generation}))

    def runs(self, dataset: str) -> list[RunSummary]:
        """Every run of the dataset (empty for an unknown dataset)."""
        _check("dataset", dataset, str)
        try:
            d = self._call("GET", "runs", {"dataset": dataset})
        except errors.NotFound:
            return []
        return [
            RunSummary(
                d["dataset"], r["run"], r["snapshot"], _time_required(r["declared_at_ms"]), r["state"], r["tasks"],
                r["accepted_tasks"], r["published_generation"],
            )
            for r in d["runs"]
        ]

    def run(self, dataset: str, run: str) -> RunInfo | None:
        """The run as declared, with each task's accepted attempt and attempts, or None."""
        _check("dataset", dataset, str)
        _check("run", run, str)
        try:
            return RunInfo._of(self._call("GET", "runs/show", {"dataset": dataset, "run": run}))
        except errors.NotFound:
            return None

    def attempts(self, task: TaskKey) -> list[AttemptSummary]:
        """The task's attempts in number order, with their state and lease."""
        _check("task", task, TaskKey)
        try:
            d = self._call("GET", "attempts", task._body())
        except errors.NotFound:
            return []
        return [AttemptSummary._of(a, task.dataset, task.run) for a in d["attempts"]]

    def run_attempts(self, dataset: str, run: str) -> list[AttemptSummary]:
        """Every attempt of every task of the run."""
        _check("dataset", dataset, str)
        _check("run", run, str)
        try:
            d = self._call("GET", "attempts", {"dataset": dataset, "run": run})
        except errors.NotFound:
            return []
        return [AttemptSummary._of(a, dataset, run) for a in d["attempts"]]

    def pending_attempts(self, dataset: str, run: str) -> list[AttemptKey]:
        """The run's attempts that finished and await validation (a candidate recorded, no
        verdict yet), in (partition, attempt) order: what a coordinator validates after a
        worker lost its answer. Raises :class:`NotFound` for an unknown run."""
        _check("dataset", dataset, str)
        _check("run", run, str)
        d = self._call("GET", "attempts", {"dataset": dataset, "run": run})
        keys = [AttemptSummary._of(a, dataset, run).key for a in d["attempts"] if a["status"] == "finished"]
        return sorted(keys, key=lambda k: (k.partition, k.attempt))

    def validate_pending(
        self, dataset: str, run: str, check: FileCheck = FileCheck.SIZE
    ) -> list[tuple[AttemptKey, Verdict | errors.Error]]:
        """Validates every pending attempt of the run (:meth:`pending_attempts`), one result
        per attempt in (partition, attempt) order: its verdict, or the error that stopped its
        validation (not raised: an attempt fails alone)."""
        _check("dataset", dataset, str)
        _check("run", run, str)
        _check("check", check, FileCheck)
        if not self._validate_pending_route:
            # The same, one attempt at a time: each attempt is validated alone either way.
            results: list[tuple[AttemptKey, Verdict | errors.Error]] = []
            for key in self.pending_attempts(dataset, run):
                try:
                    results.append((key, self.validate_attempt(key, check)))
                except errors.Error as failure:
                    results.append((key, failure))
            return results
        body = {"dataset": dataset, "run": run, "checksums": check is FileCheck.SIZE_AND_CHECKSUM}
        doc = self._call("POST", "attempts/validate-pending", body)
        out: list[tuple[AttemptKey, Verdict | errors.Error]] = []
        for line in doc["results"]:
            key = AttemptKey._of(line)
            if "error" in line:
                out.append((key, errors._error_of_kind(line["error"]["kind"], line["error"]["message"])))
            else:
                out.append((key, Verdict._of(line)))
        return out

    def attempt(self, attempt: AttemptKey) -> AttemptInfo | None:
        """Everything the store knows of one attempt, or None."""
        _check("attempt", attempt, AttemptKey)
        try:
            return AttemptInfo._of(self._call("GET", "attempts/show", attempt._body()))
        except errors.NotFound:
            return None

    def accepted(self, task: TaskKey) -> int | None:
        """The task's accepted attempt (the lowest valid one), or None."""
        _check("task", task, TaskKey)
        for a in self.attempts(task):
            if a.accepted:
                return a.key.attempt
        return None

    def effects(self, dataset: str, run: str | None = None, *, ready: bool = False) -> list[Effect]:
        """The effects of a run (or of the whole dataset), only the ready ones if ``ready``."""
        _check("dataset", dataset, str)
        _check("run", run, str, optional=True)
        try:
            d = self._call("GET", "effects", {"dataset": dataset, "run": run, "ready": ready})
        except errors.NotFound:
            return []
        return [Effect._of(e) for e in d["effects"]]

    def ready_effects(self, dataset: str) -> list[Effect]:
        """The dataset's effects ready to emit (their run is published, not yet emitted)."""
        return self.effects(dataset, ready=True)

    def view(self, dataset: str, generation: int | None = None) -> View | None:
        """Where the dataset's current view (or retained generation ``generation``'s) is and
        what it shows, or None. ``path`` is the generation's own directory: give engines that
        path, never one through ``current``. An expired generation raises
        :class:`NotFound` naming the oldest retained one."""
        _check("dataset", dataset, str)
        generation = _int("generation", generation, optional=True)
        query: dict[str, Any] = {"dataset": dataset}
        if generation is not None:
            query["generation"] = generation
        try:
            d = self._call("GET", "views", query)
        except errors.NotFound:
            if generation is not None:
                raise
            return None
        return View(
            d["dataset"], Path(d["view_root"]), None if d["current"] is None else Path(d["current"]),
            None if d["path"] is None else Path(d["path"]), d["view_generation"], d["store_generation"],
            d["lagging"], d["manifest"], d["table"], d["trees"], tuple(Path(f) for f in d["files"] or ()),
        )

    def has_dataset(self, dataset: str) -> bool:
        """True if the store knows the dataset (a run was declared or a generation published)."""
        _check("dataset", dataset, str)
        try:
            self._call("GET", "runs", {"dataset": dataset})
        except errors.NotFound:
            return False
        return True

    def dataset_effects(self, dataset: str) -> list[Effect]:
        """Every effect of every run of the dataset."""
        return self.effects(dataset)

    def attempt_lifetime_max(self) -> timedelta:
        """The store's attempt lease: how long an attempt may go without finishing or a
        heartbeat before it may be abandoned (asks a writable handle)."""
        doc = self._call("POST", "gc/abandon", {"execute": False})
        return timedelta(milliseconds=doc["attempt_lifetime_max_ms"])

    def stats(self) -> dict[str, Any]:
        """Table sizes and each dataset's current sizes (the ``stats`` document)."""
        return dict(self._call("GET", "stats", {}))

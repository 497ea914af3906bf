"""The whole protocol from Python, through the embedded store and a real server alike."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import manifestdb as m

DATASET = "daily_units"
RUN = "2026-11-29"
SNAPSHOT = "sales@v42"
EU = "date=2026-11-29/region=eu"
US = "date=2026-11-29/region=us"
GRAIN = m.Grain(m.DataFormat.CSV, ["store", "item"], "units")
ROWS = {EU: "store,item,units\n1,7,300\n2,7,400\n", US: "store,item,units\n3,9,50\n"}


def declare(h: m.Store | m.Client, run: str = RUN, snapshot: str = SNAPSHOT) -> None:
    spec = m.RunSpec(
        DATASET, run, snapshot,
        [m.TaskSpec(EU, expected_rows=2, expected_total=700), m.TaskSpec(US, expected_rows=1, expected_total=50)],
        GRAIN,
    )
    assert h.declare_run(spec) in (m.DeclareOutcome.DECLARED, m.DeclareOutcome.ALREADY_DECLARED)


def attempt(h: m.Store | m.Client, partition: str, run: str = RUN, snapshot: str = SNAPSHOT, text: str | None = None) -> m.AttemptTicket:
    """One worker's attempt: begin, write the file, finish (not validated)."""
    ticket = h.begin_attempt(m.TaskKey(DATASET, run, partition))
    (ticket.staging_dir / "part.csv").write_text(ROWS[partition] if text is None else text)
    candidate = m.Candidate(snapshot, files=[m.describe_file(ticket.staging_dir, "part.csv")])
    assert h.finish_attempt(ticket.key, candidate) is m.FinishOutcome.RECORDED
    assert h.finish_attempt(ticket.key, candidate) is m.FinishOutcome.ALREADY_RECORDED
    return ticket


def test_a_run_is_declared_attempted_validated_and_published(handle: m.Store | m.Client) -> None:
    declare(handle)
    assert handle.declare_run(
        m.RunSpec(DATASET, RUN, SNAPSHOT, [m.TaskSpec(EU, 2, 700), m.TaskSpec(US, 1, 50)], GRAIN)
    ) is m.DeclareOutcome.ALREADY_DECLARED
    tickets = [attempt(handle, EU), attempt(handle, US)]
    for t in tickets:
        assert isinstance(t.staging_dir, Path) and t.staging_dir.is_dir()
        assert t.started_at.tzinfo is timezone.utc and abs(datetime.now(timezone.utc) - t.started_at) < timedelta(minutes=5)
        verdict = handle.validate_attempt(t.key, m.FileCheck.SIZE_AND_CHECKSUM)
        assert verdict.is_valid() and verdict.accepted_attempt == 1
        assert verdict.reconciliation is not None and verdict.reconciliation.duplicate_keys == 0
    assert handle.validate_attempt(tickets[0].key).reconciliation.computed_total == 700  # type: ignore[union-attr]

    outcome = handle.publish(DATASET, RUN)
    assert isinstance(outcome, m.Published)
    assert outcome.generation.number == 1 and outcome.generation.kind == "publish"
    again = handle.publish(DATASET, RUN)
    assert isinstance(again, m.AlreadyPublished) and again.generation == outcome.generation

    manifest = handle.manifest(DATASET)
    assert manifest is not None and manifest.current
    assert [p.partition for p in manifest.partitions] == [EU, US]
    assert manifest.totals.rows == 3 and manifest.totals.total == 750
    assert all(p.digest.startswith("ms256:") for p in manifest.partitions)
    assert [path.read_text() for path in manifest.paths()] == [ROWS[EU], ROWS[US]]
    assert handle.current(DATASET) == outcome.generation
    assert handle.generation(DATASET, 1) == outcome.generation
    assert handle.generation(DATASET, 2) is None
    assert handle.manifest("nobody") is None and handle.current("nobody") is None
    assert handle.partition(DATASET, EU).attempt == 1  # type: ignore[union-attr]
    assert [g.number for g in handle.history(DATASET)] == [1] == [g.number for g in handle.log(DATASET)]
    assert [d.dataset for d in handle.datasets()] == [DATASET]
    runs = handle.runs(DATASET)
    assert [(r.run, r.state, r.tasks, r.accepted_tasks, r.published_generation) for r in runs] == [(RUN, "published", 2, 2, 1)]
    info = handle.run(DATASET, RUN)
    assert info is not None and info.grain == m.Grain(m.DataFormat.CSV, ("store", "item"), "units")
    assert [(t.spec.partition, t.accepted_attempt, [a.status for a in t.attempts]) for t in info.tasks] == [(EU, 1, ["valid"]), (US, 1, ["valid"])]
    task = m.TaskKey(DATASET, RUN, EU)
    assert handle.accepted(task) == 1
    assert [(a.key.attempt, a.status, a.accepted) for a in handle.attempts(task)] == [(1, "valid", True)]
    one = handle.attempt(task.attempt(1))
    assert one is not None and one.candidate is not None and one.candidate.files[0].path == "part.csv"
    assert handle.attempt(task.attempt(9)) is None

    # A new run of the same dataset replaces only its partition; the other carries over.
    spec = m.RunSpec(DATASET, "fix", "sales@v43", [m.TaskSpec(EU, 1, 10)], GRAIN)
    handle.declare_run(spec)
    t = handle.begin_attempt(m.TaskKey(DATASET, "fix", EU))
    (t.staging_dir / "part.csv").write_text("store,item,units\n1,1,10\n")
    handle.finish_attempt(t.key, m.Candidate("sales@v43", files=[m.describe_file(t.staging_dir, "part.csv")]))
    assert handle.validate_attempt(t.key).is_valid()
    second = handle.publish(DATASET, "fix")
    assert isinstance(second, m.Published) and second.generation.number == 2
    diff = handle.diff(DATASET, 1, 2)
    assert [p.partition for p, _ in diff.replaced] == [EU] and diff.unchanged == 1

    rolled = handle.rollback(DATASET, 1, "ops", "bad fix")
    assert isinstance(rolled, m.RolledBack) and rolled.generation.rollback == m.GenerationRollback(1, "ops", "bad fix")
    refused = handle.rollback(DATASET, 99, "ops", "no such")
    assert isinstance(refused, m.RollbackRefused) and refused.kind == "unknown"
    report = handle.expire_generations(DATASET, m.RetentionPolicy(keep_last=1, rollback_window=timedelta(0)))
    assert report.mode is m.RunMode.DRY_RUN and report.expired == (1, 2)
    assert handle.manifest(DATASET, 1) is not None  # a dry run expired nothing


def test_a_worker_that_loses_its_answer_leaves_two_attempts_and_the_publish_holds_one(handle: m.Store | m.Client) -> None:
    declare(handle)
    # Attempt 1 writes and finishes, but its answer is lost: the scheduler retries elsewhere.
    lost = attempt(handle, EU)
    retry = attempt(handle, EU)
    assert (lost.key.attempt, retry.key.attempt) == (1, 2) and lost.staging_dir != retry.staging_dir
    us = attempt(handle, US)
    # The coordinator finds what finished but was never validated, and validates it all.
    assert handle.pending_attempts(DATASET, RUN) == [lost.key, retry.key, us.key]
    assert handle.validate_attempt(retry.key).is_valid()  # in any order: the lowest valid one is accepted
    results = handle.validate_pending(DATASET, RUN)
    assert [(k, v.is_valid()) for k, v in results] == [(lost.key, True), (us.key, True)]  # type: ignore[union-attr]
    assert handle.pending_attempts(DATASET, RUN) == [] and handle.validate_pending(DATASET, RUN) == []
    with pytest.raises(m.NotFound):
        handle.pending_attempts(DATASET, "no-such-run")
    outcome = handle.publish(DATASET, RUN)
    assert isinstance(outcome, m.Published)
    manifest = handle.manifest(DATASET)
    assert manifest is not None
    eu = next(p for p in manifest.partitions if p.partition == EU)
    assert eu.attempt == 1 and eu.rows == 2 and eu.total == 700  # one attempt, not both
    assert manifest.totals.total == 750

    # A rerun on the same snapshot reproduces the same canonical digest; other rows are flagged.
    declare(handle, run="rerun")
    attempt(handle, EU, run="rerun", text="store,item,units\n2,7,400\n1,7,300\n")  # same rows, other order
    attempt(handle, US, run="rerun", text="store,item,units\n3,9,50\n")
    for p in (EU, US):
        assert handle.validate_attempt(m.TaskKey(DATASET, "rerun", p).attempt(1)).is_valid()
    assert isinstance(handle.publish(DATASET, "rerun"), m.Published)
    assert handle.manifest(DATASET).partitions[0].digest == eu.digest  # type: ignore[union-attr]


def test_a_refused_publish_is_a_value_with_a_report_per_task(handle: m.Store | m.Client) -> None:
    declare(handle)
    bad = attempt(handle, EU, text="store,item,units\n1,7,300\n1,7,400\n")  # a repeated grain key
    verdict = handle.validate_attempt(bad.key)
    assert not verdict.is_valid()
    kinds = {f.kind for f in verdict.failures}
    assert "duplicate_grain_key" in kinds, kinds
    outcome = handle.publish(DATASET, RUN)
    assert isinstance(outcome, m.Refused)
    assert [(t.partition, t.reason) for t in outcome.tasks] == [(EU, "no_accepted_attempt"), (US, "no_accepted_attempt")]
    assert "refused" in str(outcome)
    assert handle.current(DATASET) is None


def test_idempotency_keys_name_the_store_two_stores_never_collide_and_a_reopened_store_keeps_its_key(tmp_path: Path) -> None:
    def ready_key(db: Path, staging: Path) -> str:
        with m.Store.open(db, staging) as store:
            declare(store)
            for p in (EU, US):
                assert store.validate_attempt(attempt(store, p).key).is_valid()
            assert isinstance(store.publish(DATASET, RUN), m.Published)
            return store.record_effect(m.EffectKey(DATASET, RUN, "notify", EU), "x").effect.idempotency_key

    first = ready_key(tmp_path / "a.redb", tmp_path / "a")
    second = ready_key(tmp_path / "b.redb", tmp_path / "b")
    assert first != second and first.endswith(f"/{DATASET}/{RUN}/notify/{EU}") and second.endswith(f"/{DATASET}/{RUN}/notify/{EU}")
    with m.Store.open(tmp_path / "a.redb", tmp_path / "a") as reopened:
        [effect] = reopened.effects(DATASET, RUN)
        assert effect.idempotency_key == first and first == f"{effect.store_id}/{DATASET}/{RUN}/notify/{EU}"
        claimed = reopened.claim_effect(effect.key, "w1", 60)
        assert isinstance(claimed, m.Claimed) and claimed.effect.idempotency_key == first


def test_effects_are_recorded_once_claimed_and_marked(handle: m.Store | m.Client) -> None:
    declare(handle)
    key = m.EffectKey(DATASET, RUN, "notify")
    first = handle.record_effect(key, b"\x00\xffbinary")
    assert first.newly_recorded and first.effect.status == "recorded"
    repeat = handle.record_effect(key, "another payload")
    assert not repeat.newly_recorded and repeat.effect.payload == b"\x00\xffbinary"
    with pytest.raises(m.Conflict):  # not ready: its run is not published
        handle.claim_effect(key, "w1", 60)
    for p in (EU, US):
        assert handle.validate_attempt(attempt(handle, p).key).is_valid()
    assert isinstance(handle.publish(DATASET, RUN), m.Published)
    [ready] = handle.ready_effects(DATASET)
    assert ready.key == key and ready.status == "ready"
    assert len(ready.store_id) == 32 and ready.idempotency_key == f"{ready.store_id}/{DATASET}/{RUN}/notify/"
    claimed = handle.claim_effect(key, "w1", timedelta(seconds=60))
    assert isinstance(claimed, m.Claimed) and claimed.effect.claim is not None and claimed.effect.claim.claimant == "w1"
    assert isinstance(handle.claim_effect(key, "w2", 60), m.HeldByOther)
    assert isinstance(handle.mark_effect_emitted(key, "w2"), m.ClaimedByOther)
    marked = handle.mark_effect_emitted(key, "w1")
    assert isinstance(marked, m.Marked) and marked.effect.emitted_at is not None
    again = handle.mark_effect_emitted(key, "w1")
    assert isinstance(again, m.AlreadyEmitted) and isinstance(again, m.MarkOutcome)
    assert isinstance(handle.claim_effect(key, "w3", 60), m.AlreadyEmitted)
    assert [e.status for e in handle.effects(DATASET, RUN)] == ["emitted"]


def test_lifecycle_heartbeat_abandon_invalidate(handle: m.Store | m.Client) -> None:
    declare(handle)
    task = m.TaskKey(DATASET, RUN, EU)
    running = handle.begin_attempt(task)
    lease = handle.heartbeat(running.key)
    assert lease.expires_at > lease.heartbeat_at
    outcome = handle.abandon_attempt(running.key)
    assert isinstance(outcome, m.Abandoned)
    assert isinstance(handle.abandon_attempt(running.key), m.AlreadyAbandoned)
    with pytest.raises(m.Conflict, match="abandoned"):
        handle.finish_attempt(running.key, m.Candidate(SNAPSHOT, files=[]))
    ok = attempt(handle, EU)
    assert handle.validate_attempt(ok.key).accepted_attempt == 2
    inv = handle.invalidate_attempt(ok.key, "ops", "files lost")
    assert inv == m.Invalidated(accepted_before=2, accepted_after=None)
    assert handle.invalidate_attempt(ok.key, "ops", "again") == m.AlreadyInvalid()
    assert [a.status for a in handle.attempts(task)] == ["abandoned", "invalid"]
    assert handle.abandon_expired_attempts() == []
    plan = handle.plan_cleanup(m.CleanupOptions(age_threshold=timedelta(days=30)))
    assert plan.candidates == () and handle.cleanup_plan(plan.id) == plan
    assert handle.cleanup_plan(plan.id + 100) is None
    applied = handle.apply_cleanup(plan.id)
    assert applied.mode is m.RunMode.DRY_RUN and applied.deleted == ()
    with pytest.raises(m.Usage):
        handle.plan_cleanup(m.CleanupOptions(age_threshold=timedelta(seconds=1)))


def test_a_batch_runs_many_operations_in_one_commit_each_with_its_outcome(handle: m.Store | m.Client) -> None:
    declare(handle)
    results = handle.run_batch([m.BatchOp.begin(m.TaskKey(DATASET, RUN, EU)), m.BatchOp.begin(m.TaskKey(DATASET, RUN, "nope"))])
    ticket, error = results
    assert isinstance(ticket, m.AttemptTicket) and ticket.key.attempt == 1
    assert isinstance(error, m.NotFound)
    (ticket.staging_dir / "part.csv").write_text(ROWS[EU])
    candidate = m.Candidate(SNAPSHOT, files=[m.describe_file(ticket.staging_dir, "part.csv")])
    key = m.EffectKey(DATASET, RUN, "audit", EU)
    finish, recorded = handle.run_batch([m.BatchOp.finish(ticket.key, candidate), m.BatchOp.record_effect(key, "x")])
    assert finish is m.FinishOutcome.RECORDED and isinstance(recorded, m.RecordedEffect)
    [verdict] = handle.run_batch([m.BatchOp.validate(ticket.key, m.FileCheck.SIZE_AND_CHECKSUM)])
    assert isinstance(verdict, m.Verdict) and verdict.is_valid()


def test_reads_of_an_empty_store_and_unknown_names(handle: m.Store | m.Client) -> None:
    assert handle.datasets() == [] and handle.history("x") == [] and handle.runs("x") == [] and handle.effects("x") == []
    assert handle.run("x", "y") is None and handle.attempts(m.TaskKey("x", "y", "z")) == []
    with pytest.raises(m.NotFound):
        handle.begin_attempt(m.TaskKey("x", "y", "z"))
    with pytest.raises(m.NotFound):
        handle.diff("x", 1, 2)
    assert handle.verify().clean


def test_a_run_without_a_grain_must_trust_the_reported_figures_in_words(handle: m.Store | m.Client) -> None:
    """Issue 38, item 3: a RunSpec without a grain was declared silently and a 0-byte file
    published as 5 rows. Now the choice is said, and the published partition says which it is."""
    tasks = [m.TaskSpec(EU, 5)]
    with pytest.raises(m.Usage, match="declares no grain.*trust_reported_figures=True"):
        m.RunSpec(DATASET, "silent", SNAPSHOT, tasks)
    with pytest.raises(m.Usage, match="give one of the two"):
        m.RunSpec(DATASET, "both", SNAPSHOT, tasks, GRAIN, trust_reported_figures=True)
    # A hand-made body without either is refused by the store itself, embedded or served.
    with pytest.raises(m.Usage, match="declares no grain"):
        handle._call("POST", "runs/declare", {"dataset": DATASET, "run": "raw", "snapshot": SNAPSHOT, "tasks": [{"partition": EU, "expected_rows": 5}]})
    assert handle.run(DATASET, "raw") is None

    handle.declare_run(m.RunSpec(DATASET, "trusted", SNAPSHOT, tasks, trust_reported_figures=True))
    ticket = handle.begin_attempt(m.TaskKey(DATASET, "trusted", EU))
    (ticket.staging_dir / "part.csv").write_bytes(b"")
    files = [m.describe_file(ticket.staging_dir, "part.csv")]
    verdict = handle.finish_and_validate(ticket.key, m.Candidate(SNAPSHOT, rows=5, digest="sha256:worker", files=files))
    assert verdict.is_valid() and verdict.reconciliation is not None and verdict.reconciliation.basis == "reported"
    assert isinstance(handle.publish(DATASET, "trusted"), m.Published)
    manifest = handle.manifest(DATASET)
    assert manifest is not None
    [entry] = manifest.partitions
    assert (entry.rows, entry.figures_checked) == (5, False)  # reported, not checked

    declare(handle, run="checked", snapshot="sales@v43")
    for p in (EU, US):
        attempt(handle, p, run="checked", snapshot="sales@v43")
    assert all(v.is_valid() for _, v in handle.validate_pending(DATASET, "checked"))  # type: ignore[union-attr]
    assert isinstance(handle.publish(DATASET, "checked"), m.Published)
    manifest = handle.manifest(DATASET)
    assert manifest is not None and [p.figures_checked for p in manifest.partitions] == [True, True]

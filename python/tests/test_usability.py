"""What a Python user meets in the first hour (issue 38, item 6): integers of any kind that say
they are one (numpy's), outcomes whose truth is the success check, one name for a refusal's
reason, embedded errors that name the call, a grain checked when it is made, errors that
pickle with their annotations."""

from __future__ import annotations

import pickle
import threading
import time
import typing
from datetime import timedelta
from pathlib import Path

import pytest

import manifestdb as m

GRAIN = m.Grain("csv", ["store", "item"], "units")
ROWS = "store,item,units\n1,7,300\n2,7,400\n"


class Index:
    """An integer that is not an ``int``, as numpy's are: it says it is one through ``__index__``."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


def publish_one(store: m.Store, rows: typing.Any, total: typing.Any) -> m.PublishOutcome:
    store.declare_run(m.RunSpec("d", "r", "s", [m.TaskSpec("p=1", rows, total)], GRAIN))
    ticket = store.begin_attempt(m.TaskKey("d", "r", "p=1"))
    (ticket.staging_dir / "part.csv").write_text(ROWS)
    store.finish_attempt(ticket.key, m.Candidate("s", files=[m.describe_file(ticket.staging_dir, "part.csv")]))
    assert store.validate_attempt(ticket.key).is_valid()
    return store.publish("d", "r")


def test_index_integers_are_taken_wherever_an_int_is_and_kept_as_int(store: m.Store) -> None:
    spec = m.TaskSpec("p=1", Index(2), Index(700))
    assert (spec.expected_rows, spec.expected_total) == (2, 700) and type(spec.expected_rows) is int
    assert type(m.Candidate("s", rows=Index(2), total=Index(-5)).total) is int
    assert type(m.TaskKey("d", "r", "p").attempt(Index(3)).attempt) is int
    assert m.Grain("csv", ["k"], "v", Index(2)).measure_scale == 2
    assert m.RetentionPolicy(keep_last=Index(4)).keep_last == 4
    assert m.ApplyOptions(batch_size=Index(10)).batch_size == 10
    assert isinstance(publish_one(store, Index(2), Index(700)), m.Published)
    manifest = store.manifest("d", Index(1))
    assert manifest is not None and manifest.generation.number == 1
    assert store.diff("d", Index(1), Index(1)).unchanged == 1
    for wrong in (True, 2.0, "2"):
        with pytest.raises(TypeError, match="expected_rows must be int, not"):
            m.TaskSpec("p=1", wrong)


def test_numpy_integers_are_taken(store: m.Store) -> None:
    np = pytest.importorskip("numpy")
    units = np.array([300, 400], dtype=np.int64)
    # The line: a DataFrame's length and a column's sum.
    assert isinstance(publish_one(store, np.int64(len(units)), units.sum()), m.Published)
    spec = m.TaskSpec("p=1", np.int32(2), np.uint64(700))
    assert (type(spec.expected_rows), type(spec.expected_total)) == (int, int)
    assert store.manifest("d", np.int64(1)) is not None


def test_a_refusal_is_falsy_and_a_success_truthy(store: m.Store) -> None:
    store.declare_run(m.RunSpec("d", "r0", "s", [m.TaskSpec("p=1", 2, 700)], GRAIN))
    refused = store.publish("d", "r0")  # no attempt at all
    assert isinstance(refused, m.Refused) and not refused
    published = publish_one(store, 2, 700)
    assert isinstance(published, m.Published) and published
    assert store.publish("d", "r")  # AlreadyPublished: the run is published
    key = m.EffectKey("d", "r", "notify")
    store.record_effect(key, "x")
    claimed = store.claim_effect(key, "w1", 60)
    assert isinstance(claimed, m.Claimed) and claimed
    held = store.claim_effect(key, "w2", 60)
    assert isinstance(held, m.HeldByOther) and not held
    other = store.mark_effect_emitted(key, "w2")
    assert isinstance(other, m.ClaimedByOther) and not other
    marked = store.mark_effect_emitted(key, "w1")
    assert isinstance(marked, m.Marked) and marked
    again = store.claim_effect(key, "w1", 60)
    assert isinstance(again, m.AlreadyEmitted) and not again
    rollback = store.rollback("d", 1, "me", "already current")
    assert isinstance(rollback, m.RollbackRefused) and not rollback


def test_a_task_refusal_has_its_reason_under_one_name_in_python_the_documents_and_the_book(store: m.Store) -> None:
    store.declare_run(m.RunSpec("d", "r0", "s", [m.TaskSpec("p=1", 2, 700)], GRAIN))
    refused = store.publish("d", "r0")
    assert isinstance(refused, m.Refused)
    [task] = refused.tasks
    assert task.reason == "no_accepted_attempt" and not hasattr(task, "kind")
    book = (Path(__file__).resolve().parents[2] / "docs" / "src" / "python.md").read_text()
    assert "`TaskRefusal` has `reason`" in book


def test_embedded_errors_name_the_call_not_a_route(paths: tuple[Path, Path]) -> None:
    with m.Store.open(*paths) as store:
        store.declare_run(m.RunSpec("d", "r", "s", [m.TaskSpec("p=1", 1, 5)], GRAIN))
        with pytest.raises(m.Usage) as bad:
            store.declare_run(m.RunSpec("d", "r2", "s", [m.TaskSpec("p=1", -1)], GRAIN))
        assert str(bad.value).startswith("declare_run: ") and "runs/declare" not in str(bad.value)
        assert "request" not in str(bad.value)
    with m.ReadOnlyStore.open(*paths) as reader:
        with pytest.raises(m.Usage) as read_only:
            reader.begin_attempt(m.TaskKey("d", "r", "p=1"))
        assert str(read_only.value).startswith("begin_attempt writes, and this handle is read-only")
        assert "attempts/begin" not in str(read_only.value)


def test_a_grain_is_checked_when_it_is_made() -> None:
    assert m.Grain("CSV", ["k"], "v").format is m.DataFormat.CSV
    assert m.Grain("Parquet", ("k",), "v").format is m.DataFormat.PARQUET
    assert m.Grain("csv", ["a", "b"], "v") == m.Grain(m.DataFormat.CSV, ("a", "b"), "v")
    with pytest.raises(m.Usage, match="'json' is not a format"):
        m.Grain("json", ["k"], "v")
    with pytest.raises(m.Usage, match="keys is empty"):
        m.Grain("csv", [], "v")
    with pytest.raises(m.Usage, match="named twice"):
        m.Grain("csv", ["k", "v"], "v")
    with pytest.raises(m.Usage, match=">= 0"):
        m.Grain("csv", ["k"], "v", -1)
    with pytest.raises(TypeError):
        m.Grain(3, ["k"], "v")  # type: ignore[arg-type]


def test_errors_pickle_as_their_class_and_reduce_is_annotated() -> None:
    hints = typing.get_type_hints(m.Error.__reduce__)
    assert "return" in hints
    error = m.Conflict("run r declared differently", status=409)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is m.Conflict and (back.message, back.status) == (error.message, 409)


def test_open_waits_out_a_busy_store_and_busy_says_what_to_do(paths: tuple[Path, Path]) -> None:
    first = m.Store.open(*paths)
    with pytest.raises(m.Busy) as busy:
        m.Store.open(*paths)
    assert "manifestdb serve" in str(busy.value) and "wait=" in str(busy.value)
    started = time.monotonic()
    with pytest.raises(m.Busy, match="still busy after waiting 0.2 s"):
        m.Store.open(*paths, wait=0.2)
    assert time.monotonic() - started >= 0.2
    closer = threading.Timer(0.3, first.close)
    closer.start()
    started = time.monotonic()
    with m.Store.open(*paths, wait=timedelta(seconds=30)) as second:
        assert time.monotonic() - started >= 0.25 and second.datasets() == []
    closer.join()

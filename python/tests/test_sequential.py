"""The sequential scheduler's path: `finish_and_validate` (one commit for the candidate and
its verdict, embedded or through the server's route) and the two options of
`Store.open` that trade cross-process readers and durable begins for fewer flushes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import manifestdb as m

DATASET = "daily_units"
RUN = "2026-12-03"
SNAPSHOT = "sales@v7"
EU = "region=eu"
US = "region=us"


def declare(h: m.Store | m.Client) -> None:
    spec = m.RunSpec(DATASET, RUN, SNAPSHOT, [m.TaskSpec(EU, expected_rows=2), m.TaskSpec(US, expected_rows=1)], trust_reported_figures=True)
    h.declare_run(spec)


def output(ticket: m.AttemptTicket, rows: int) -> m.Candidate:
    (ticket.staging_dir / "part.csv").write_text("store,units\n" + "".join(f"{i},5\n" for i in range(rows)))
    return m.Candidate(SNAPSHOT, rows=rows, digest=f"rows-{rows}", files=(m.describe_file(ticket.staging_dir, "part.csv"),))


def test_finish_and_validate_records_the_candidate_and_its_verdict(handle: m.Store | m.Client) -> None:
    declare(handle)
    ticket = handle.begin_attempt(m.TaskKey(DATASET, RUN, EU))
    candidate = output(ticket, 2)
    verdict = handle.finish_and_validate(ticket.key, candidate, m.FileCheck.SIZE_AND_CHECKSUM)
    assert verdict.is_valid() and verdict.accepted_attempt == 1
    info = handle.attempt(ticket.key)
    assert info is not None and info.status == "valid" and info.candidate == candidate
    # Again with the same candidate: the stored verdict.
    assert handle.finish_and_validate(ticket.key, candidate).is_valid()
    # Another candidate for the same attempt is refused.
    other = m.Candidate(SNAPSHOT, rows=3, digest="rows-3", files=candidate.files)
    with pytest.raises(m.Conflict):
        handle.finish_and_validate(ticket.key, other)
    # A candidate whose figures miss the task's expectations is recorded, and invalid.
    second = handle.begin_attempt(m.TaskKey(DATASET, RUN, US))
    verdict = handle.finish_and_validate(second.key, output(second, 4))
    assert not verdict.is_valid() and verdict.accepted_attempt is None
    assert handle.attempt(second.key).status == "invalid"  # type: ignore[union-attr]
    # Never begun.
    with pytest.raises(m.NotFound):
        handle.finish_and_validate(m.TaskKey(DATASET, RUN, US).attempt(9), candidate)
    third = handle.begin_attempt(m.TaskKey(DATASET, RUN, US))
    assert handle.finish_and_validate(third.key, output(third, 1)).is_valid()
    assert isinstance(handle.publish(DATASET, RUN), m.Published)


def test_finish_and_validate_checks_its_arguments(store: m.Store) -> None:
    declare(store)
    ticket = store.begin_attempt(m.TaskKey(DATASET, RUN, EU))
    with pytest.raises(TypeError, match="check"):
        store.finish_and_validate(ticket.key, output(ticket, 2), "size")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="candidate"):
        store.finish_and_validate(ticket.key, None)  # type: ignore[arg-type]


def read_in_another_process(path: Path) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(
        f"""
        import manifestdb as m
        try:
            with m.ReadOnlyStore.open({str(path)!r}) as r:
                print("read", [d.dataset for d in r.datasets()])
        except m.Busy as e:
            print("busy", e)
        """
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_cross_process_readers_false_keeps_other_processes_out_until_close(paths: tuple[Path, Path]) -> None:
    with m.Store.open(*paths) as s:
        declare(s)
        shared = read_in_another_process(paths[0])
        assert shared.stdout.startswith("read ['daily_units']") or shared.stdout.startswith("read []"), shared
    with m.Store.open(*paths, cross_process_readers=False) as s:
        ticket = s.begin_attempt(m.TaskKey(DATASET, RUN, EU))
        assert s.finish_and_validate(ticket.key, output(ticket, 2)).is_valid()
        alone = read_in_another_process(paths[0])
        assert alone.stdout.startswith("busy"), alone
    after = read_in_another_process(paths[0])
    assert after.stdout.startswith("read"), after
    with pytest.raises(TypeError, match="cross_process_readers"):
        m.Store.open(*paths, cross_process_readers="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="durable_begins"):
        m.Store.open(*paths, durable_begins=1)  # type: ignore[arg-type]


def begin_then_crash(paths: tuple[Path, Path], durable_begins: bool) -> int:
    """A writer process without cross-process readers that begins an attempt, reports its
    number and dies without closing the store (as a SIGKILL would)."""
    code = textwrap.dedent(
        f"""
        import os
        import manifestdb as m
        s = m.Store.open({str(paths[0])!r}, {str(paths[1])!r}, cross_process_readers=False, durable_begins={durable_begins!r})
        s.declare_run(m.RunSpec({DATASET!r}, {RUN!r}, {SNAPSHOT!r}, [m.TaskSpec({EU!r}, expected_rows=2)], trust_reported_figures=True))
        ticket = s.begin_attempt(m.TaskKey({DATASET!r}, {RUN!r}, {EU!r}))
        print(ticket.key.attempt, flush=True)
        os._exit(0)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[0])


@pytest.mark.parametrize("durable_begins", [True, False])
def test_a_begin_lost_in_a_crash_is_never_issued_again_and_a_durable_one_survives(
    paths: tuple[Path, Path], durable_begins: bool
) -> None:
    begun = begin_then_crash(paths, durable_begins)
    assert begun == 1
    with m.Store.open(*paths, cross_process_readers=False) as s:
        key = m.TaskKey(DATASET, RUN, EU).attempt(begun)
        known = s.attempt(key)
        if durable_begins:
            assert known is not None and known.status == "running", "a durable begin survives the crash"
        else:
            # The begin committed without a flush: whether the crash forgot it or not, its
            # number is never issued again.
            assert known is None or known.status == "running"
        nxt = s.begin_attempt(m.TaskKey(DATASET, RUN, EU))
        assert nxt.key.attempt > begun and nxt.staging_dir != s.staging_root / DATASET / RUN / EU / f"@attempt-{begun}"
        if known is None:
            with pytest.raises(m.NotFound):
                s.finish_attempt(key, m.Candidate(SNAPSHOT, rows=0, digest="none"))


def syncs_of_a_begin(tmp_path: Path, durable_begins: bool) -> int:
    """The fsync/fdatasync calls of one begin (of a task of a run that already had one) in a
    writer without cross-process readers, counted by strace in a process of its own."""
    if shutil.which("strace") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("strace is not installed (.ci/run installs it)")
        pytest.skip("strace is not installed")
    d = tmp_path / f"durable-{durable_begins}"
    code = textwrap.dedent(
        f"""
        import os
        import manifestdb as m
        with m.Store.open({str(d / "store.redb")!r}, {str(d / "staging")!r}, cross_process_readers=False, durable_begins={durable_begins!r}) as s:
            s.declare_run(m.RunSpec("ds", "r", "s", [m.TaskSpec("p=1", expected_rows=1), m.TaskSpec("p=2", expected_rows=1)], trust_reported_figures=True))
            s.begin_attempt(m.TaskKey("ds", "r", "p=1"))
            os.write(2, b"BEGIN-STARTS")
            s.begin_attempt(m.TaskKey("ds", "r", "p=2"))
            os.write(2, b"BEGIN-ENDS")
        """
    )
    trace = tmp_path / f"trace-{durable_begins}"
    done = subprocess.run(
        ["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=fsync,fdatasync,write", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = trace.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "BEGIN-STARTS" in line)
    end = next(i for i, line in enumerate(lines) if "BEGIN-ENDS" in line)
    return sum(1 for line in lines[start:end] if "fsync(" in line or "fdatasync(" in line)


def test_durable_begins_decides_whether_a_begin_flushes(tmp_path: Path) -> None:
    assert syncs_of_a_begin(tmp_path, durable_begins=False) == 0, "a begin commits without a flush of its own"
    assert syncs_of_a_begin(tmp_path, durable_begins=True) >= 1, "a durable begin flushes the store file"

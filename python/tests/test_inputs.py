"""Bad input gets a clear error: wrong types, hostile names, a closed store, use after fork, a
second writer; the error classes mirror the library's kinds."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

import manifestdb as m


def test_wrong_types_raise_type_error_naming_the_field(store: m.Store) -> None:
    with pytest.raises(TypeError, match="partition must be str, not int"):
        m.TaskKey("d", "r", 7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected_rows must be int, not str"):
        m.TaskSpec("p", "2")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected_rows must be int, not bool"):
        m.TaskSpec("p", True)
    with pytest.raises(TypeError, match="candidate.rows must be int or None, not float"):
        m.Candidate("s", rows=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"tasks\[\] must be TaskSpec, not dict"):
        m.RunSpec("d", "r", "s", [{"partition": "p"}])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="task must be TaskKey, not tuple"):
        store.begin_attempt(("d", "r", "p"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="check must be FileCheck, not str"):
        store.validate_attempt(m.TaskKey("d", "r", "p").attempt(1), "size")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="payload must be bytes or str, not int"):
        store.record_effect(m.EffectKey("d", "r", "e"), 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lease must be a datetime.timedelta or a number of seconds"):
        store.claim_effect(m.EffectKey("d", "r", "e"), "w", "60s")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path must be a str or os.PathLike, not int"):
        m.Store.open(3, "x")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["../escape", "a/../../b", "nul\x00here", "/absolute"])
def test_hostile_names_get_the_librarys_error_and_nothing_is_written(store: m.Store, name: str) -> None:
    with pytest.raises(m.Usage) as caught:
        store.declare_run(m.RunSpec("d", "r", "s", [m.TaskSpec(name, 1)], trust_reported_figures=True))
    assert caught.value.kind == "usage" and caught.value.exit_code == 2 and "invalid" in caught.value.message
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, m.Error)
    assert store.runs("d") == []


def test_a_closed_store_says_so(paths: tuple[Path, Path]) -> None:
    s = m.Store.open(*paths)
    s.close()
    s.close()  # a second close does nothing
    assert s.closed
    with pytest.raises(m.Usage, match="is closed"):
        s.datasets()
    with m.Store.open(*paths) as again:  # closing released the writer lock
        assert again.datasets() == []
    assert again.closed


def test_a_second_writer_is_busy_and_a_reader_reads_meanwhile(paths: tuple[Path, Path]) -> None:
    with m.Store.open(*paths) as s:
        s.declare_run(m.RunSpec("d", "r", "s", [m.TaskSpec("p=1", 0)], trust_reported_figures=True))
        with pytest.raises(m.Busy):
            m.Store.open(*paths)
        with m.ReadOnlyStore.open(paths[0], paths[1]) as reader:
            assert [r.run for r in reader.runs("d")] == ["r"]
            with pytest.raises(m.Usage, match="read-only"):
                reader._call("POST", "attempts/begin", {"dataset": "d", "run": "r", "partition": "p=1"})


def test_use_after_fork_is_refused_in_the_child(store: m.Store) -> None:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            store.datasets()
            os.write(w, b"no error")
        except m.Usage as e:
            os.write(w, b"usage: " + str(e).encode()[:200])
        except BaseException as e:  # noqa: BLE001
            os.write(w, repr(e).encode()[:200])
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    said = os.read(r, 400).decode()
    assert said.startswith("usage: ") and "forked" in said, said
    assert store.datasets() == []  # the parent's handle still works


def test_errors_mirror_the_kinds_and_survive_pickling() -> None:
    for cls, kind, code in [
        (m.Fault, "fault", 1), (m.Usage, "usage", 2), (m.NotFound, "not_found", 4), (m.Conflict, "conflict", 5),
        (m.Busy, "busy", 6), (m.Corrupt, "corrupt", 7), (m.Unauthorized, "unauthorized", 10),
    ]:
        e = m.errors._error_of_kind(kind, "msg")
        assert type(e) is cls and e.kind == kind and e.exit_code == code and isinstance(e, m.Error)
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is cls and back.message == "msg"
    assert m.Corrupted is m.Corrupt
    assert issubclass(m.NotFound, LookupError)


def test_a_damaged_store_file_is_corrupt_not_a_crash(paths: tuple[Path, Path]) -> None:
    db, staging = paths
    m.Store.open(db, staging).close()
    data = bytearray(db.read_bytes())
    data[0:64] = b"\xff" * 64
    db.write_bytes(bytes(data))
    with pytest.raises(m.Corrupt):
        m.Store.open(db, staging)


def test_a_wrong_token_is_unauthorized(paths: tuple[Path, Path], tmp_path: Path) -> None:
    from conftest import Server

    m.Store.open(*paths).close()
    token = tmp_path / "token"
    token.write_text("s3cret")
    token.chmod(0o600)
    srv = Server(paths[0], paths[1], tmp_path / "s.sock", token_file=token)
    try:
        with pytest.raises(m.Unauthorized) as caught:
            m.Client(str(srv.socket), token="wrong").datasets()
        assert caught.value.status == 401
        assert m.Client(str(srv.socket), token="s3cret").datasets() == []
    finally:
        srv.stop()
    with pytest.raises(m.Fault, match="server request"):
        m.Client(str(srv.socket)).datasets()  # nobody listens any more


def test_a_connection_the_server_closed_while_idle_is_reopened(paths: tuple[Path, Path], tmp_path: Path) -> None:
    import time

    from conftest import Server

    m.Store.open(*paths).close()
    srv = Server(paths[0], paths[1], tmp_path / "s.sock", extra=("--idle-timeout", "300ms"))
    try:
        client = m.Client(str(srv.socket))
        client.declare_run(m.RunSpec("d", "r", "s", [m.TaskSpec("p=1", 0)], trust_reported_figures=True))
        time.sleep(1.0)  # the server closes the kept-alive connection meanwhile
        assert [r.run for r in client.runs("d")] == ["r"]
        assert client.begin_attempt(m.TaskKey("d", "r", "p=1")).key.attempt == 1
    finally:
        srv.stop()

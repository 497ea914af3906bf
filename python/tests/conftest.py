"""Fixtures: a fresh store, a real `manifestdb serve` process over it, and a handle of either
kind, so the protocol tests run against the embedded store and the served one alike."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

import manifestdb

REPO = Path(__file__).resolve().parents[2]


def manifestdb_binary() -> Path | None:
    """The `manifestdb` binary: $MANIFESTDB_BIN, else one built in the workspace's target dir
    (release first), else one on PATH."""
    given = os.environ.get("MANIFESTDB_BIN")
    if given:
        return Path(given)
    targets = [Path(os.environ["CARGO_TARGET_DIR"])] if os.environ.get("CARGO_TARGET_DIR") else []
    targets.append(REPO / "target")
    for target in targets:
        for profile in ("release", "debug"):
            candidate = target / profile / "manifestdb"
            if candidate.is_file():
                return candidate
    found = shutil.which("manifestdb")
    return Path(found) if found else None


@pytest.fixture
def paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "store.redb", tmp_path / "staging"


@pytest.fixture
def store(paths: tuple[Path, Path]) -> Iterator[manifestdb.Store]:
    with manifestdb.Store.open(*paths) as s:
        yield s


class Server:
    """A `manifestdb serve` process on a Unix socket."""

    def __init__(self, db: Path, staging: Path, socket: Path, token_file: Path | None = None, extra: tuple[str, ...] = ()) -> None:
        binary = manifestdb_binary()
        if binary is None:
            reason = "no manifestdb binary: build it (cargo build -p manifestdb-cli) or set MANIFESTDB_BIN"
            if os.environ.get("CI") == "true":
                pytest.fail(reason)  # CI runs every test with its real components
            pytest.skip(reason)
        args = [str(binary), "--store", str(db), "--staging", str(staging), "serve", "--json", "--socket", str(socket)]
        if token_file is not None:
            args += ["--token-file", str(token_file)]
        args += list(extra)
        self.socket = socket
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"manifestdb serve did not start: {self.process.stderr.read() if self.process.stderr else ''}")
        self.listening = json.loads(line)["listening"]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)


@pytest.fixture
def server(paths: tuple[Path, Path], tmp_path: Path) -> Iterator[Server]:
    # The store is created by a writable open first (the server opens an existing or new one).
    manifestdb.Store.open(*paths).close()
    s = Server(paths[0], paths[1], tmp_path / "manifestdb.sock")
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(params=["embedded", "served"])
def handle(request: pytest.FixtureRequest, paths: tuple[Path, Path], tmp_path: Path) -> Iterator[manifestdb.Store | manifestdb.Client]:
    """The same tests through `Store` (embedded) and `Client` (a real server process)."""
    if request.param == "embedded":
        with manifestdb.Store.open(*paths) as s:
            yield s
    else:
        manifestdb.Store.open(*paths).close()
        srv = Server(paths[0], paths[1], tmp_path / "manifestdb.sock")
        try:
            with manifestdb.Client(str(srv.socket)) as c:
                yield c
        finally:
            srv.stop()

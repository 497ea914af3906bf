"""The client of ``manifestdb serve``: the same methods and values as :class:`manifestdb.Store`,
over HTTP/1.1 with JSON bodies on a Unix socket or TCP (standard library only)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
import urllib.parse
from types import TracebackType
from typing import Any, Mapping, Union

from . import errors
from ._api import _Operations
from .types import _check

__all__ = ["Client"]


class _UnixConnection(http.client.HTTPConnection):
    """http.client's connection over a Unix socket."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _query(body: Mapping[str, Any]) -> str:
    fields = []
    for k, v in body.items():
        if v is None:
            continue
        fields.append((k, ("true" if v else "false") if isinstance(v, bool) else str(v)))
    return urllib.parse.urlencode(fields)


class Client(_Operations):
    """A connection to ``manifestdb serve``: ``Client("/srv/jobs/manifestdb.sock")`` for a Unix
    socket, ``Client("http://127.0.0.1:7070", token=...)`` for TCP.

    Every method of :class:`Store` is here with the same arguments, values and errors (the
    server answers the documents the store's Python layer decodes). Each thread has its own
    kept-alive connection, so threads call in parallel and meet in the server's group commit.

    A call that could not reach the server (refused, reset, timed out before an answer) raises
    :class:`Fault`, unless ``retry_for`` (seconds) is set: then it is sent again until that
    time has passed. Every route is safe to repeat: a repeated declare, finish, validate,
    publish, record or mark is recognised as the same; a repeated begin numbers a new attempt,
    which is what a retried task is anyway.
    """

    # `manifestdb serve` answers both `attempts/validate-pending` and
    # `attempts/finish-and-validate` (one request, one commit on the server), as the native
    # module does (`_api.Api`'s defaults).

    def __init__(
        self,
        target: Union[str, "os.PathLike[str]"],
        *,
        token: str | None = None,
        timeout: float = 90.0,
        retry_for: float = 0.0,
    ) -> None:
        if isinstance(target, os.PathLike):
            target = os.fspath(target)
        _check("target", target, str)
        _check("token", token, str, optional=True)
        _check("timeout", timeout, (int, float))
        _check("retry_for", retry_for, (int, float))
        if target.startswith(("http://", "https://")):
            url = urllib.parse.urlsplit(target)
            if url.scheme != "http" or url.hostname is None:
                raise errors.Usage(f"invalid server URL {target!r}: the server speaks plain HTTP (http://HOST:PORT)")
            self._host: tuple[str, int] | None = (url.hostname, url.port or 80)
            self._socket: str | None = None
        else:
            self._host = None
            self._socket = target
        self.target = target
        self._token = token
        self._timeout = float(timeout)
        self._retry_for = float(retry_for)
        self._local = threading.local()
        self._closed = False

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        pid = getattr(self._local, "pid", None)
        if conn is None or pid != os.getpid():
            if self._socket is not None:
                conn = _UnixConnection(self._socket, self._timeout)
            else:
                assert self._host is not None
                conn = http.client.HTTPConnection(self._host[0], self._host[1], timeout=self._timeout)
            self._local.conn = conn
            self._local.pid = os.getpid()
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def _call(self, method: str, route: str, body: dict[str, Any] | None = None) -> Mapping[str, Any]:
        if self._closed:
            raise errors.Usage(f"client of {self.target} is closed")
        body = body or {}
        path = "/v1/" + route
        headers = {"Host": "localhost"}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        if method == "GET":
            query = _query(body)
            if query:
                path += "?" + query
            payload = None
        else:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        deadline = time.monotonic() + self._retry_for
        while True:
            conn = self._connection()
            reused = getattr(conn, "_manifestdb_answered", False)
            try:
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                status, raw = response.status, response.read()
                conn._manifestdb_answered = True  # type: ignore[attr-defined]
                break
            except (OSError, http.client.HTTPException) as e:
                self._drop()
                if reused and isinstance(e, (ConnectionError, http.client.RemoteDisconnected)):
                    # A kept-alive connection the server closed while idle (its idle time-out):
                    # the request goes again on a fresh connection.
                    continue
                if time.monotonic() >= deadline:
                    raise errors.Fault(f"server request to {self.target}: {method} {path}: {e}") from e
                time.sleep(0.05)
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError as e:
            raise errors.Fault(f"server request to {self.target}: {method} {path}: the answer is not JSON ({status})") from e
        if status >= 400 or (isinstance(doc, dict) and "error" in doc and status != 200):
            error = doc.get("error", {}) if isinstance(doc, dict) else {}
            raise errors._error_of_kind(error.get("kind", "fault"), error.get("message", f"HTTP {status}"), status)
        return doc  # type: ignore[no-any-return]

    def health(self) -> dict[str, Any]:
        """The server's health document (``{"status": "serving", "version"}``)."""
        return dict(self._call("GET", "health", {}))

    def close(self) -> None:
        """Closes this thread's connection; later calls raise :class:`Usage`."""
        self._drop()
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Client {self.target!r}>"

"""The errors of manifestdb: one class per kind of the library's ``ErrorKind``, all under
:class:`Error`.

Errors are faults: something the caller must fix, or that went wrong underneath. Expected
refusals (a publish stopped by a gate, a claim held by another emitter, a refused rollback) are
not errors; they come back as values (:class:`manifestdb.Refused`, ...).

The embedded store and the server client raise the same classes with the same messages: the
message is the library's (``Display`` of ``manifestdb::Error``), the kind its ``ErrorKind``.
"""

from __future__ import annotations

from typing import Callable

__all__ = [
    "Error",
    "Fault",
    "Usage",
    "NotFound",
    "Conflict",
    "Busy",
    "Corrupt",
    "Corrupted",
    "Unauthorized",
]


class Error(Exception):
    """Base class of every manifestdb error.

    Attributes:
        kind: the library's ``ErrorKind`` name (``"fault"``, ``"usage"``, ``"not_found"``,
            ``"conflict"``, ``"busy"``, ``"corrupt"``, ``"unauthorized"``).
        message: the library's message.
        exit_code: the command-line tool's exit code for the kind.
        status: the HTTP status when the error came from a server, else None.
    """

    kind: str = "fault"
    exit_code: int = 1

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def __reduce__(self) -> tuple[Callable[[str, str, int | None], Error], tuple[str, str, int | None]]:
        """Pickles the error as its kind, message and status: errors cross process boundaries
        (multiprocessing, Airflow's and Dagster's workers) and come back as the same class."""
        return (_rebuild, (type(self).kind, self.message, self.status))


class Fault(Error):
    """An I/O or storage failure, anything unexpected (also: a handle poisoned by an earlier
    failed write, a view that lags its committed generation)."""

    kind = "fault"
    exit_code = 1


class Usage(Error, ValueError):
    """The call is wrong: an invalid name, path or value (``..``, NUL, an absolute path), a
    closed store, a handle used after ``fork``, a cleanup threshold inside the attempt lease, a
    staging or view root that cannot serve."""

    kind = "usage"
    exit_code = 2


class NotFound(Error, LookupError):
    """Something named does not exist: run, task, attempt, effect, cleanup plan, file."""

    kind = "not_found"
    exit_code = 4


class Conflict(Error):
    """The store's state forbids the operation: a run declared differently or already
    published, an attempt finished differently, not finished or abandoned, a foreign snapshot,
    an effect whose run is not published, an expired generation."""

    kind = "conflict"
    exit_code = 5


class Busy(Error):
    """Another handle holds the store for writing, or a concurrent transaction won; retrying
    later may succeed."""

    kind = "busy"
    exit_code = 6


class Corrupt(Error):
    """The store is damaged or of an unsupported format. Nothing is written over damage."""

    kind = "corrupt"
    exit_code = 7


#: Another name of :class:`Corrupt`.
Corrupted = Corrupt


class Unauthorized(Error):
    """A server refused the request: no or a wrong bearer token. Only the client raises it."""

    kind = "unauthorized"
    exit_code = 10


_BY_KIND: dict[str, type[Error]] = {
    cls.kind: cls for cls in (Fault, Usage, NotFound, Conflict, Busy, Corrupt, Unauthorized)
}


def _error_of_kind(kind: str, message: str, status: int | None = None) -> Error:
    """The error of ``kind`` (a kind this build does not know is a :class:`Fault` whose
    ``kind`` keeps the name)."""
    cls = _BY_KIND.get(kind)
    if cls is not None:
        return cls(message, status=status)
    error = Fault(message, status=status)
    error.kind = kind
    return error


def _rebuild(kind: str, message: str, status: int | None) -> Error:
    return _error_of_kind(kind, message, status)

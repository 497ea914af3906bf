"""The embedded store: the Rust library in this process."""

from __future__ import annotations

import os
import random
import time
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Iterable, Mapping, Union

from . import _native, errors
from ._api import _Operations
from .types import FileEntry, _check, _int, _ms_of

__all__ = ["Store", "ReadOnlyStore", "describe_file"]

PathLike = Union[str, "os.PathLike[str]"]


def _path(what: str, value: object) -> str:
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)  # type: ignore[return-value]
    raise TypeError(f"{what} must be a str or os.PathLike, not {type(value).__name__}")


class _Handle(_Operations):
    """The in-process calls shared by :class:`Store` and :class:`ReadOnlyStore`."""

    _native: Any

    def _call(self, method: str, route: str, body: dict[str, Any] | None = None) -> Mapping[str, Any]:
        return self._native.call(method, route, body)  # type: ignore[no-any-return]

    @property
    def path(self) -> str:
        """The store as given when opened (a file path or a postgres:// URL)."""
        return self._native.path  # type: ignore[no-any-return]

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._native.closed  # type: ignore[no-any-return]

    def close(self) -> None:
        """Closes the store, after the calls in flight on other threads; raises if closing
        failed (a writable store's last sync). Later calls raise :class:`Usage`; a second
        close does nothing."""
        self._native.close()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<{type(self).__name__} {self.path!r} ({state})>"


class Store(_Handle):
    """A writable store, embedded: one redb file (or a PostgreSQL database) and a staging root.

    Open it with :meth:`open`; use it as a context manager so it is closed (and a failure to
    close is raised). One writable handle per store at a time (another raises :class:`Busy`);
    share it between threads: every call releases the GIL, and concurrent calls share the
    store's group commit. A handle cannot be used in a process forked from the one that
    opened it (:class:`Usage`): open the store in the child instead.
    """

    def __init__(self, native: Any) -> None:
        self._native = native

    @classmethod
    def open(
        cls,
        path: PathLike,
        staging: PathLike,
        *,
        cache_size_bytes: int | None = None,
        attempt_lifetime_max: timedelta | float | None = None,
        views: PathLike | None = None,
        view_mode: str | None = None,
        view_trees: bool | Iterable[str] | None = None,
        cross_process_readers: bool = True,
        durable_begins: bool = False,
        wait: timedelta | float = 0,
    ) -> Store:
        """Opens (creating if needed) the store at ``path`` with its staging root ``staging``.

        Options, as ``StoreOptions`` in Rust: ``cache_size_bytes`` (redb's page cache, 64 MiB by
        default), ``attempt_lifetime_max`` (the attempt lease, a timedelta or seconds; it only
        ever grows), ``views`` (a view root: after each publish the current generation is a
        Delta table under ``views/<dataset>/table`` for a Parquet dataset), ``view_mode``
        (``"hardlink"``, the default, or ``"copy"``) and ``view_trees``: which datasets also get
        a plain directory tree per generation under ``views/<dataset>/current`` (``True``
        every dataset, ``False`` none, or an iterable of dataset names; ``None``, the default,
        keeps the store's recorded choice, none for a new view root). A tree costs one
        directory per partition and one link per file of the whole dataset at every publish;
        without one, read the Delta table or :meth:`Store.view`'s ``files``.

        ``cross_process_readers`` (``True`` by default) lets other processes read the store
        (:class:`ReadOnlyStore`, the CLI's reads) while this handle writes, at two flushes of
        the store file per commit. ``False`` locks the file for this handle alone (another
        process's open raises :class:`Busy` until it closes): one flush per commit, and begins
        commit without a flush of their own. That is the faster choice for a scheduler that
        reads through its own handle. The redb file only; a PostgreSQL store ignores it.

        ``durable_begins`` (with ``cross_process_readers=False`` only): ``False`` (the default)
        trades a begin's durability for speed: a power loss or crash may forget a begin that
        returned, before the handle's next durable commit (a finish, a verdict, a publish, the
        close). Its attempt number and staging directory are never issued again, and its
        finish raises :class:`NotFound` (unknown attempt), so the task is retried. ``True``:
        every begin is durable when it returns.

        ``wait`` (a timedelta or seconds; 0 by default) is how long to wait while another
        handle or process holds the store for writing, retrying with backoff as the CLI's
        ``--wait`` does, before raising :class:`Busy`. Workers that run in parallel should not
        take turns at the file: run ``manifestdb serve`` and give each a :class:`Client`.
        """
        cache_size_bytes = _int("cache_size_bytes", cache_size_bytes, optional=True)
        _check("view_mode", view_mode, str, optional=True)
        trees: list[str] | None
        if view_trees is None:
            trees = None
        elif view_trees is True:
            trees = ["*"]
        elif view_trees is False:
            trees = []
        elif isinstance(view_trees, str):
            raise TypeError("view_trees must be a bool or an iterable of dataset names, not a str (wrap one name in a list)")
        else:
            trees = list(view_trees)
            for name in trees:
                _check("view_trees item", name, str)
            if not trees:
                raise ValueError("view_trees=[] names no dataset: pass False for none")
        _check("cross_process_readers", cross_process_readers, bool)
        _check("durable_begins", durable_begins, bool)
        lease = None if attempt_lifetime_max is None else _ms_of(attempt_lifetime_max, "attempt_lifetime_max")
        wait_ms = _ms_of(wait, "wait")
        deadline = time.monotonic() + wait_ms / 1000
        pause = 0.01
        while True:
            try:
                native = _native.NativeStore.open(
                    _path("path", path),
                    _path("staging", staging),
                    cache_size_bytes,
                    None if lease is None else float(lease),
                    None if views is None else _path("views", views),
                    view_mode,
                    cross_process_readers,
                    durable_begins,
                    trees,
                )
                return cls(native)
            except errors.Busy as e:
                left = deadline - time.monotonic()
                if left <= 0:
                    waited = f"still busy after waiting {wait_ms / 1000:g} s; " if wait_ms else ""
                    raise errors.Busy(
                        f"{e.message} ({waited}wait=SECONDS waits for it; workers in parallel processes share one "
                        "`manifestdb serve` through Client instead of taking turns at the file)",
                        status=e.status,
                    ) from e
                # Backoff with jitter, as the CLI's --wait: 10 ms doubling up to 0.5 s.
                time.sleep(min(left, pause * random.uniform(0.5, 1.0)))
                pause = min(pause * 2, 0.5)

    @staticmethod
    def recover(path: PathLike) -> bool:
        """Recovers a store whose writer crashed; True if it needed recovery."""
        return _native.NativeStore.recover(_path("path", path))  # type: ignore[no-any-return]

    @property
    def staging_root(self) -> Path:
        """The staging root: a local directory, or for a root on object storage its URL as a path
        (a ``Path`` folds the URL's ``//``: use :attr:`staging_url` there)."""
        return Path(self._native.staging_root)

    @property
    def staging_url(self) -> str | None:
        """The staging root's URL, ``s3://bucket/prefix``, when it is on object storage (a build
        with the ``s3`` feature, as the published wheel is: see :func:`manifestdb.features`);
        None for a local root."""
        return self._native.staging_url  # type: ignore[no-any-return]

    def __enter__(self) -> Store:
        return self


class ReadOnlyStore(_Handle):
    """A store opened for reading, in this process, while a writer (another process, or a
    server) may hold it: every read is one consistent snapshot of the last committed state.
    Give ``staging`` to get absolute staging paths in manifests."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @classmethod
    def open(cls, path: PathLike, staging: PathLike | None = None, *, cache_size_bytes: int | None = None) -> ReadOnlyStore:
        """Opens the store at ``path`` for reading."""
        cache_size_bytes = _int("cache_size_bytes", cache_size_bytes, optional=True)
        native = _native.NativeStore.open_read_only(
            _path("path", path), None if staging is None else _path("staging", staging), cache_size_bytes
        )
        return cls(native)

    def __enter__(self) -> ReadOnlyStore:
        return self


def describe_file(staging_dir: PathLike, relative: str) -> FileEntry:
    """The :class:`FileEntry` of a file a worker wrote into its staging directory: its size and
    CRC32, read by the library (the GIL is released while it reads). On a staging root on object
    storage, ``staging_dir`` is the attempt's URL (:attr:`AttemptTicket.staging_url`) and the
    object is read whole, streamed."""
    _check("relative", relative, str)
    return FileEntry._of(_native.describe(_path("staging_dir", staging_dir), relative))

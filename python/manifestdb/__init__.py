"""manifestdb for Python: retried work publishes exactly once.

Every attempt of a task writes into its own private staging directory; a finished attempt is a
candidate until validated; per task the lowest valid attempt is accepted, and a publish moves
the dataset's generation pointer to a manifest holding exactly one attempt per partition, in one
transaction. Readers see the last complete generation.

``Store`` is the Rust library embedded in this process; ``Client`` speaks to ``manifestdb
serve`` with the same methods, values and errors; ``ReadOnlyStore`` reads a store another
process writes. ``manifestdb.airflow`` and ``manifestdb.dagster`` are the scheduler
integrations. The book's Python chapter (docs/src/python.md) has the guide.
"""

from . import errors
from ._native import __version__
from .client import Client
from .errors import Busy, Conflict, Corrupt, Corrupted, Error, Fault, NotFound, Unauthorized, Usage
from .store import ReadOnlyStore, Store, describe_file
from .types import *  # noqa: F403
from .types import __all__ as _types_all

__all__ = [
    "__version__",
    "errors",
    "Store",
    "ReadOnlyStore",
    "Client",
    "describe_file",
    "Error",
    "Fault",
    "Usage",
    "NotFound",
    "Conflict",
    "Busy",
    "Corrupt",
    "Corrupted",
    "Unauthorized",
    *_types_all,
]

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

from . import _native, errors
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
    "features",
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


def features() -> dict[str, bool]:
    """What this build of the package includes, by the Rust crate's feature names.

    ``parquet`` (validation of Parquet partitions) and ``postgres`` (``Store.open`` on a
    ``postgres://`` URL) are in every build; ``delta`` (the Delta Lake table beside a Parquet
    dataset's views, ``<views>/<dataset>/table``) and ``s3`` (staging roots on S3-compatible
    object storage, ``s3://bucket/prefix``) are in ``scripts/python-wheel``'s wheel and in ``pip
    install ./python`` unless built with ``--no-default-features``. A build without ``delta``
    writes no table (``Store.view(dataset).table`` says it lags, and why); one without ``s3``
    refuses an ``s3://`` staging root with :class:`Usage`.
    """
    return dict(_native.features())

# Type stubs of the native module (python/src/lib.rs). The package's public API is the Python
# layer over it (store.py, client.py, _api.py); these are its internals.
from pathlib import Path
from typing import Any

__version__: str

class NativeStore:
    @staticmethod
    def open(
        path: str,
        staging: str,
        cache_size_bytes: int | None = ...,
        attempt_lifetime_max_ms: float | None = ...,
        views: str | None = ...,
        view_mode: str | None = ...,
        cross_process_readers: bool | None = ...,
        durable_begins: bool | None = ...,
        view_trees: list[str] | None = ...,
    ) -> NativeStore: ...
    @staticmethod
    def open_read_only(path: str, staging: str | None = ..., cache_size_bytes: int | None = ...) -> NativeStore: ...
    @staticmethod
    def recover(path: str) -> bool: ...
    @property
    def path(self) -> str: ...
    @property
    def staging_root(self) -> Path | None: ...
    @property
    def staging_url(self) -> str | None: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def call(self, method: str, route: str, body: dict[str, Any] | None = ...) -> dict[str, Any]: ...

def describe(staging_dir: str, path: str) -> dict[str, Any]: ...
def bench_rust_cycles(
    store: NativeStore, dataset: str, run: str, partition: str, snapshot: str, duration_s: float
) -> int: ...
def features() -> dict[str, bool]: ...

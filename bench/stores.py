"""Object stores for the request and latency benchmarks: moto's S3 and Azurite's Blob
API (ADLS) on 127.0.0.1, each behind :class:`tests.storeproxy.StoreProxy`, which counts
every request by verb, delays it on demand, and takes marks (:class:`Tracer`), so that
each request of a traced write is named by the call that caused it.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tests.storeproxy import KINDS, StoreProxy

__all__ = ["KINDS", "Store", "Tracer", "open_store"]


class Store:
    """One store server behind a proxy.

    Attributes:
        name: ``"s3"`` or ``"adls"``.
        proxy: The counting, delaying proxy every client goes through.
    """

    def __init__(self, name: str, proxy: StoreProxy, options: dict[str, str], root: str) -> None:
        self.name = name
        self.proxy = proxy
        self.options = options
        self._root = root

    def uri(self, label: str) -> str:
        """A fresh table location."""
        return f"{self._root}/{uuid.uuid4().hex[:10]}/{label}"


@contextmanager
def open_store(name: str, delay_ms: float = 0.0) -> Iterator[Store]:
    """Start the store ``name`` (``"s3"`` or ``"adls"``) and its proxy; stop both after.

    Raises:
        RuntimeError: Azurite cannot be installed or started (no node/npm).
    """
    if name == "s3":
        from tests.s3server import BUCKET, S3Server

        server = S3Server()
        proxy = StoreProxy(server.port, delay_ms)
        try:
            server.client().create_bucket(Bucket=BUCKET)
            options = server.storage_options(AWS_ENDPOINT_URL=proxy.endpoint)
            yield Store("s3", proxy, options, f"s3://{BUCKET}")
        finally:
            proxy.stop()
            server.stop()
        return
    if name != "adls":
        raise ValueError(f"unknown store {name!r}: s3 or adls")
    from tests.azurite import Azurite, azurite_main

    main = azurite_main()
    if isinstance(main, str):
        raise RuntimeError(main)
    azurite = Azurite(main)
    proxy = StoreProxy(azurite.port, delay_ms)
    saved = os.environ.get("AZURITE_BLOB_STORAGE_URL")
    os.environ["AZURITE_BLOB_STORAGE_URL"] = proxy.endpoint  # how delta-rs finds it
    try:
        azurite.service().create_container("lake")
        yield Store("adls", proxy, azurite.storage_options(), "az://lake")
    finally:
        if saved is None:
            os.environ.pop("AZURITE_BLOB_STORAGE_URL", None)
        else:
            os.environ["AZURITE_BLOB_STORAGE_URL"] = saved
        proxy.stop()
        azurite.stop()


def _caller() -> str:
    """The innermost deltasink frames of the current stack, as ``a.b < c.d``."""
    names = []
    for frame in inspect.stack(context=0)[2:]:
        module = frame.frame.f_globals.get("__name__", "")
        if module.startswith("deltasink") and not module.startswith("deltasink._faults"):
            short = module.removeprefix("deltasink.").replace("backends.", "")
            names.append(f"{short}.{frame.function}")
            if len(names) == 3:
                break
    return " < ".join(names) or "(caller)"


class Tracer:
    """Wraps delta-rs's Python entry points and deltasink's own store calls so that
    each call marks its start and end in the proxy's log (a mark per outermost
    call). :meth:`trace` then gives each request with the call that caused it.

    Args:
        proxy: The proxy the store's clients go through.
    """

    def __init__(self, proxy: StoreProxy) -> None:
        self.proxy = proxy
        self._depth = threading.local()
        self._undo: list[Callable[[], None]] = []

    def _wrap(self, owner: Any, attr: str, label: str) -> None:
        if not hasattr(owner, attr):  # another checkout's code (an A/B run): not traced
            return
        original = getattr(owner, attr)
        if isinstance(inspect.getattr_static(owner, attr), (staticmethod, classmethod)):
            return
        tracer = self

        @functools.wraps(original)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(tracer._depth, "n", 0)
            if depth:
                tracer._depth.n = depth + 1
                try:
                    return original(*args, **kwargs)
                finally:
                    tracer._depth.n = depth
            name = f"{label} <- {_caller()}"
            tracer._depth.n = 1
            tracer.proxy.mark("> " + name)
            try:
                return original(*args, **kwargs)
            finally:
                tracer.proxy.mark("< " + name)
                tracer._depth.n = 0

        setattr(owner, attr, wrapped)
        self._undo.append(lambda: setattr(owner, attr, original))

    def install(self) -> None:
        """Wrap the entry points (undone by :meth:`remove`)."""
        import deltalake
        import deltalake.table as dt_table
        from deltalake import DeltaTable
        from deltalake.fs import DeltaStorageHandler

        from deltasink.backends.deltalog import tables

        for attr in (
            "update_incremental",
            "load_as_version",
            "transaction_version",
            "history",
            "create_write_transaction",
            "to_pyarrow_table",
            "cleanup_metadata",
            "create_checkpoint",
            "vacuum",
        ):
            self._wrap(DeltaTable, attr, f"deltalake.DeltaTable.{attr}")
        original_init = DeltaTable.__init__
        tracer = self

        def init(table: Any, *args: Any, **kwargs: Any) -> None:
            tracer.proxy.mark("> deltalake.DeltaTable() <- " + _caller())
            try:
                original_init(table, *args, **kwargs)
            finally:
                tracer.proxy.mark("< deltalake.DeltaTable()")

        DeltaTable.__init__ = init  # type: ignore[method-assign,assignment]
        self._undo.append(lambda: setattr(DeltaTable, "__init__", original_init))
        self._wrap(dt_table.TableMerger, "execute", "deltalake.merge.execute")
        for attr in ("set_table_properties", "add_columns"):
            self._wrap(dt_table.TableAlterer, attr, f"deltalake.alter.{attr}")
        self._wrap(dt_table.TableOptimizer, "compact", "deltalake.optimize.compact")
        for attr in (
            "open_input_file",
            "open_output_stream",
            "get_file_info",
            "create_dir",
            "delete_file",
            "get_file_info_selector",
        ):
            self._wrap(DeltaStorageHandler, attr, f"pyarrow-fs.{attr}")
        import sys

        original = deltalake.write_deltalake
        for name, module in list(sys.modules.items()):
            if (name == "deltalake" or name.startswith("deltasink")) and getattr(
                module, "write_deltalake", None
            ) is original:
                self._wrap(module, "write_deltalake", "deltalake.write_deltalake")
        self._wrap(tables, "_txn_since", "deltalog.tables._txn_since (commit files by name)")
        self._wrap(tables, "_exists", "deltalog.tables._exists (probe of the next commit file)")
        from deltasink.backends.embedded import retention

        self._wrap(retention, "delete_old_log", "embedded.retention.delete_old_log")

    def remove(self) -> None:
        """Undo :meth:`install`."""
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def trace(self) -> list[tuple[str, str]]:
        """The requests since the proxy's last reset: ``(request, call)`` pairs."""
        out: list[tuple[str, str]] = []
        stack: list[str] = []
        for line in self.proxy.log():
            if line.startswith("# > "):
                stack.append(line[4:])
            elif line.startswith("# < "):
                if stack:
                    stack.pop()
            elif line.startswith("# "):
                stack.append(line[2:]) if not stack else None
            else:
                out.append((line, stack[-1] if stack else "(outside any traced call)"))
        return out

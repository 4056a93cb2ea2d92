"""The embedded engine: an in-process Sail server behind a Spark Connect session."""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

__all__ = ["embedded_spark", "serves", "stop_embedded_spark"]

_lock = threading.Lock()
_server: Any = None
_session: Any = None


def embedded_spark(*, quiet: bool = True) -> Any:
    """Return a PySpark ``SparkSession`` on the embedded engine, starting it once.

    The engine is Sail (``pysail``), a Rust engine that speaks Spark Connect, started
    in this process on a free localhost port (about a second, the first time). Later
    calls return the same session. It is stopped when the process exits.

    Args:
        quiet: Keep the engine's own logging at warnings, without the shutdown
            chatter (sets ``RUST_LOG`` unless it is already set).

    Returns:
        A ``pyspark.sql.connect.session.SparkSession``.
    """
    global _server
    try:
        from pysail.spark import SparkConnectServer
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise ImportError(
            "the embedded engine needs the 'embedded' extra: pip install 'deltasink[embedded]' "
            f"({exc})"
        ) from exc

    with _lock:
        if _server is None or not _server.running:
            if quiet:
                os.environ.setdefault("RUST_LOG", "warn,sail_common::actor=error")
            server = SparkConnectServer(ip="127.0.0.1", port=0)
            server.start(background=True)
            _server = server
            atexit.register(stop_embedded_spark)
        host, port = _server.listening_address
        url = f"sc://{host}:{port}"
        # Not builder.getOrCreate(): that answers the process's active session, which
        # may be a Spark Connect session to another server (a Delta-enabled one, say).
        global _session
        session = _session
        if session is None or session.is_stopped or not serves(session):
            session = _session = SparkSession.builder.remote(url).create()
        return session


def serves(session: Any) -> bool:
    """Whether ``session`` is a Spark Connect session of the embedded engine running in
    this process (so the engine reads and writes this process's file system)."""
    server = _server
    if server is None or not server.running:
        return False
    try:
        endpoint = session.client._builder.endpoint
    except Exception:  # classic PySpark (4.x raises ONLY_SUPPORTED_WITH_SPARK_CONNECT), or
        return False  # a client without a channel builder
    host, port = server.listening_address
    return bool(endpoint == f"{host}:{port}")


def stop_embedded_spark() -> None:
    """Stop the embedded engine if it runs (its sessions become unusable)."""
    global _server, _session
    with _lock:
        if _server is not None:
            try:
                from pyspark.sql import SparkSession

                # This engine's sessions only: another Connect session of the process
                # (to another server) stays open.
                active = SparkSession.getActiveSession()
                for session in {id(s): s for s in (_session, active) if s is not None}.values():
                    if hasattr(session, "client") and serves(session):
                        session.stop()
            finally:
                _server.stop()
                _server = None
                _session = None

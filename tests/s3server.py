"""A real S3 (and DynamoDB) API on 127.0.0.1 for the tests and the request bench: moto's
server in a child process, with a count of the requests it answered.

The server runs in its own process, not a thread: delta-rs holds the GIL during some
calls, which would deadlock an in-process server thread. ``python -m tests.s3server``
serves on a free port and prints it; :class:`S3Server` starts and stops it.

Counts, by kind (``GET``, ``HEAD``, ``PUT``, ``COPY``, ``LIST``, ``DELETE``, ``POST``,
``DYNAMODB``), are read with ``GET /_deltasink/requests`` and reset with
``DELETE /_deltasink/requests`` (neither is counted).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["ACCESS_KEY", "BUCKET", "REGION", "SECRET_KEY", "S3Server"]

ACCESS_KEY, SECRET_KEY, REGION = "deltasink-test", "deltasink-secret", "us-east-1"
BUCKET = "deltasink-tests"
_COUNTS = "/_deltasink/requests"


def _kind(environ: dict[str, Any]) -> str:
    """What an S3/DynamoDB request is, for the counts."""
    if str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith("DynamoDB"):
        return "DYNAMODB"
    method = environ["REQUEST_METHOD"]
    path = environ.get("PATH_INFO", "").strip("/")
    query = environ.get("QUERY_STRING", "")
    if method == "GET" and ("list-type" in query or "/" not in path):
        return "LIST"
    if method == "PUT" and environ.get("HTTP_X_AMZ_COPY_SOURCE"):
        return "COPY"
    if method == "POST" and "delete" in query:
        return "DELETE"
    return str(method)


class _Counting:
    """WSGI middleware: counts every request by kind, serves the counts."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.counts: Counter[str] = Counter()
        self.seen: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == _COUNTS:
            with self.lock:
                wanted = self.seen if "log" in environ.get("QUERY_STRING", "") else self.counts
                body = json.dumps(wanted).encode()
                if environ["REQUEST_METHOD"] == "DELETE":
                    self.counts.clear()
                    self.seen.clear()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        kind = _kind(environ)
        with self.lock:
            self.counts[kind] += 1
            if len(self.seen) < 10_000:
                query = environ.get("QUERY_STRING", "")
                self.seen.append(f"{kind} {environ.get('PATH_INFO', '')}?{query}")
        return self.app(environ, start_response)


def serve() -> None:
    """Serve moto on 127.0.0.1 on a free port; print the port, then serve forever."""
    import logging

    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = _Counting(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


class S3Server:
    """A moto server in a child process (see the module docstring)."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.s3server"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line.isdigit():
            self._proc.kill()
            raise RuntimeError(f"moto server did not start (printed {line!r})")
        self.port = int(line)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._wait()

    def _wait(self) -> None:
        for _ in range(100):
            try:
                self.counts()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("moto server did not answer")

    def client(self, service: str = "s3") -> Any:
        """A boto3 client for the server."""
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def storage_options(self, **extra: str) -> dict[str, str]:
        """delta-rs storage options for the server (``extra`` added)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
            **extra,
        }

    def counts(self, *, reset: bool = False) -> dict[str, int]:
        """The requests answered since the last reset, by kind."""
        request = urllib.request.Request(
            self.endpoint + _COUNTS, method="DELETE" if reset else "GET"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            counts: dict[str, int] = json.loads(response.read())
        return counts

    def requests(self) -> list[str]:
        """The requests answered since the last reset (kind, path and query; the first
        10,000), for finding out what a side asks."""
        url = self.endpoint + _COUNTS + "?log"
        with urllib.request.urlopen(url, timeout=10) as response:
            seen: list[str] = json.loads(response.read())
        return seen

    def stop(self) -> None:
        """Stop the server process."""
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


if __name__ == "__main__":
    serve()

"""A counting, delaying HTTP proxy in front of an object-store server (moto's S3 or
Azurite's Blob API) on 127.0.0.1, for the request tests and the store benchmarks.

Every request the proxy forwards is logged with its verb (``GET``, ``HEAD``, ``PUT``,
``LIST``, ``DELETE``, ...; see :func:`kind`) and can be delayed by a fixed number of
milliseconds before it is forwarded (a round trip to a real store: ``delay_ms``, set at
start or changed with :meth:`StoreProxy.set_delay`). A client may insert *marks* into
the log (``POST /_proxy/mark`` with the label as the body, not forwarded, not counted,
not delayed), which is how :mod:`bench.store_trace` names the call that caused each
request.

The proxy runs in a child process (``python -m tests.storeproxy UPSTREAM_PORT
DELAY_MS``, which prints its port): delta-rs holds the GIL during some calls, which
would stall an in-process server thread (see :mod:`tests.s3server`).
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["KINDS", "StoreProxy", "kind", "sequential"]

#: The verbs counted, in the order reports print them.
KINDS = ("GET", "HEAD", "PUT", "LIST", "DELETE", "COPY", "POST", "DYNAMODB")
_CONTROL = "/_proxy/"
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-connection"}


def kind(method: str, path: str, headers: Any) -> str:
    """What a store request is, for the counts: an S3 or Azure Blob listing is
    ``LIST`` whatever its HTTP verb, a server-side copy ``COPY``, a multi-object delete
    ``DELETE``; otherwise the HTTP method."""
    route, _, query = path.partition("?")
    if str(headers.get("X-Amz-Target", "")).startswith("DynamoDB"):
        return "DYNAMODB"
    if method == "GET" and ("list-type" in query or "comp=list" in query):
        return "LIST"
    if method == "GET" and route.strip("/").count("/") == 0 and "restype=container" not in query:
        return "LIST"  # an S3 bucket listing (v1): GET /bucket
    if method == "PUT" and (headers.get("x-amz-copy-source") or headers.get("x-ms-copy-source")):
        return "COPY"
    if method == "POST" and "delete" in query:
        return "DELETE"
    return method


def sequential(spans: Iterable[tuple[float, float]]) -> int:
    """The longest chain of ``(start, end)`` spans each starting after the previous one
    ended: the round trips a client waited for one after another (spans that overlap
    went out together). The earliest-ending span first, greedily, gives the longest."""
    count, free = 0, float("-inf")
    for start, end in sorted(spans, key=lambda span: span[1]):
        if start >= free:
            count, free = count + 1, end
    return count


class _State:
    def __init__(self, upstream: int, delay_ms: float) -> None:
        self.upstream = upstream
        self.delay_s = delay_ms / 1000
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.log: list[str] = []
        #: (start, end, request) of each forwarded request, seconds on the proxy's clock.
        self.spans: list[tuple[float, float, str]] = []


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    local = threading.local()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _control(self, body: bytes) -> None:
            what = self.path[len(_CONTROL) :].split("?")[0]
            answer: Any = {}
            with state.lock:
                if what == "mark":
                    state.log.append("# " + body.decode())
                elif what == "log":
                    answer = list(state.log)
                elif what == "counts":
                    answer = dict(state.counts)
                elif what == "spans":
                    answer = list(state.spans)
                elif what == "reset":
                    state.counts.clear()
                    state.log.clear()
                    state.spans.clear()
                elif what == "delay":
                    state.delay_s = float(body.decode()) / 1000
            out = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if self.path.startswith(_CONTROL):
                self._control(body)
                return
            verb = kind(self.command, self.path, self.headers)
            start = time.monotonic()
            with state.lock:
                state.counts[verb] += 1
                if len(state.log) < 100_000:
                    state.log.append(f"{verb} {self.path}")
                delay = state.delay_s
            if delay:
                time.sleep(delay)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            for attempt in (0, 1):
                conn = getattr(local, "conn", None)
                if conn is None:
                    conn = local.conn = http.client.HTTPConnection(
                        "127.0.0.1", state.upstream, timeout=60
                    )
                try:
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                    break
                except (http.client.HTTPException, OSError):
                    conn.close()
                    local.conn = None
                    if attempt:
                        raise
            self.send_response_only(response.status, response.reason)
            head = self.command == "HEAD"  # its Content-Length is the object's size
            for key, value in response.getheaders():
                if key.lower() not in _HOP and (head or key.lower() != "content-length"):
                    self.send_header(key, value)
            if not head:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            self.wfile.flush()
            with state.lock:
                if len(state.spans) < 100_000:
                    state.spans.append((start, time.monotonic(), f"{verb} {self.path}"))

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _forward

    return Handler


def serve(upstream: int, delay_ms: float) -> None:
    """Serve the proxy on 127.0.0.1 on a free port; print the port, then serve forever."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(_State(upstream, delay_ms)))
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


class StoreProxy:
    """The proxy in a child process, in front of ``127.0.0.1:upstream``.

    Args:
        upstream: The port of the store server.
        delay_ms: Milliseconds each forwarded request waits before it is sent on.
    """

    def __init__(self, upstream: int, delay_ms: float = 0.0) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.storeproxy", str(upstream), str(delay_ms)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line.isdigit():
            self._proc.kill()
            raise RuntimeError(f"the store proxy did not start (printed {line!r})")
        self.port = int(line)
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def _call(self, what: str, body: str = "") -> Any:
        request = urllib.request.Request(
            self.endpoint + _CONTROL + what, data=body.encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def mark(self, label: str) -> None:
        """Insert ``label`` into the request log (as ``# label``)."""
        self._call("mark", label)

    def counts(self, *, reset: bool = False) -> dict[str, int]:
        """The requests forwarded since the last reset, by verb."""
        counts: dict[str, int] = self._call("counts")
        if reset:
            self.reset()
        return counts

    def log(self) -> list[str]:
        """The requests (``VERB /path?query``) and marks since the last reset."""
        seen: list[str] = self._call("log")
        return seen

    def spans(self) -> list[tuple[float, float, str]]:
        """``(start, end, request)`` of each request since the last reset, in the order
        they answered (seconds on the proxy's clock; ``request`` as in :meth:`log`)."""
        return [(float(a), float(b), str(r)) for a, b, r in self._call("spans")]

    def round_trips(self) -> int:
        """The requests since the last reset that ran one after another (:func:`sequential`:
        what a client waits for when each request takes one round trip; requests sent
        together count once)."""
        return sequential([(a, b) for a, b, _ in self.spans()])

    def reset(self) -> None:
        """Clear the counts, the log and the round trips."""
        self._call("reset")

    def set_delay(self, delay_ms: float) -> None:
        """Delay every later request by ``delay_ms`` milliseconds."""
        self._call("delay", str(delay_ms))

    def stop(self) -> None:
        """Stop the proxy process."""
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


if __name__ == "__main__":
    serve(int(sys.argv[1]), float(sys.argv[2]))

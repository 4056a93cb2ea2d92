"""Azurite, Microsoft's Blob storage emulator (the npm package ``azurite``), on 127.0.0.1
for the ADLS / Blob tests.

:func:`azurite_main` installs it on first use with ``npm install`` into a cache directory
(``$DELTASINK_CACHE`` or ``~/.cache/deltasink``, then ``azurite/``), so a fresh machine
with Node needs nothing else; without ``node``/``npm`` the tests skip with that reason.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["ACCOUNT", "KEY", "Azurite", "azurite_main"]

#: The emulator's account; its key is made up per run (``AZURITE_ACCOUNTS``).
ACCOUNT = "deltasink"
KEY = base64.b64encode(secrets.token_bytes(64)).decode()
VERSION = "3"


def _cache() -> Path:
    root = os.environ.get("DELTASINK_CACHE") or os.path.join(Path.home(), ".cache", "deltasink")
    return Path(root) / "azurite"


def azurite_main() -> Path | str:
    """The path of Azurite's blob server script, installed if needed; or why it cannot
    be (a reason to skip with)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return "node and npm are needed for the Azurite (ADLS / Blob) tests"
    cache = _cache()
    main = cache / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"
    if not main.exists():
        cache.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                npm,
                "install",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(cache),
                f"azurite@{VERSION}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0 or not main.exists():
            return f"npm install azurite failed: {done.stderr.strip()[-500:]}"
    return main


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class Azurite:
    """An Azurite blob server in a child process, data in memory."""

    def __init__(self, main: Path) -> None:
        self.port = _free_port()
        self._proc = subprocess.Popen(
            [
                "node",
                str(main),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--silent",
                "--skipApiVersionCheck",
                "--inMemoryPersistence",
                "--disableTelemetry",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "AZURITE_ACCOUNTS": f"{ACCOUNT}:{KEY}"},
        )
        self.endpoint = f"http://127.0.0.1:{self.port}/{ACCOUNT}"
        for _ in range(600):  # up to 30 s: node starts slowly on a loaded machine
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("Azurite did not start")

    def storage_options(self, **extra: str) -> dict[str, str]:
        """delta-rs storage options for the emulator (``extra`` added). delta-rs finds
        it through ``AZURITE_BLOB_STORAGE_URL`` in the environment (see
        :meth:`environ`); an ``AZURE_STORAGE_ENDPOINT`` with the account in its path
        instead breaks ``alter.set_table_properties`` in deltalake 1.6.6 ("Invalid
        table version")."""
        return {
            "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": KEY,
            "AZURE_STORAGE_USE_EMULATOR": "true",
            **extra,
        }

    def environ(self) -> dict[str, str]:
        """The environment variables delta-rs needs to find the emulator."""
        return {"AZURITE_BLOB_STORAGE_URL": f"http://127.0.0.1:{self.port}"}

    def service(self) -> Any:
        """An ``azure.storage.blob.BlobServiceClient`` for the emulator."""
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint={self.endpoint};",
            retry_total=2,
        )

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

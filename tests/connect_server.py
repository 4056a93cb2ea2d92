"""A real Spark Connect server with Delta on 127.0.0.1, for testing the spark engine as
Databricks serverless and standard access mode run it: the client talks gRPC to a JVM
that makes the Delta commits.

The server is PySpark's own (``jars/spark-connect_2.13-*.jar``, started with
``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``) with
delta-spark's jars (:func:`tests.test_contract_spark.delta_jars`), Delta's extension and
catalog, and the suite's cheap settings (:data:`tests.support.CHEAP_SPARK_CONF`). It runs
as a child process (its own session, so its JVM dies with it) on a free port; the
repository root is on the server's ``PYTHONPATH``, so the Python workers it starts for a
Connect ``foreachBatch`` function can import ``deltasink``.

:func:`unavailable` says why a server cannot start here (no Java, no jars);
:class:`ConnectServer` starts one, waits until it answers, and stops it.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests import support

__all__ = ["ConnectServer", "unavailable"]

ROOT = Path(__file__).resolve().parent.parent
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: How long the server may take to listen (a cold JVM on a busy 2-core machine).
START_TIMEOUT_S = 180.0


def _pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def connect_jar() -> str | None:
    """PySpark's Spark Connect server jar, or ``None``."""
    found = sorted(glob.glob(str(_pyspark_home() / "jars" / "spark-connect_*.jar")))
    return found[-1] if found else None


def delta_jars() -> list[str]:
    from tests.test_contract_spark import delta_jars as jars

    return jars()


def unavailable() -> str | None:
    """Why a Spark Connect server with Delta cannot start here, or ``None``."""
    if shutil.which("java") is None:
        return "needs Java 17 to run the Spark Connect server"
    if connect_jar() is None:
        return f"this PySpark ({_pyspark_home()}) ships no Spark Connect server jar"
    if not any("delta-spark" in os.path.basename(p) for p in delta_jars()):
        return (
            "no delta-spark JVM jars for the Spark Connect server: set DELTASINK_DELTA_JARS "
            "or put them in ../shared/delta-spark/"
        )
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_conf(warehouse: str) -> dict[str, str]:
    """The server's Spark confs (besides the port and the jars)."""
    return {
        "spark.master": "local[2]",
        "spark.app.name": "deltasink-connect-tests",
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.warehouse.dir": warehouse,
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        # small tables, 2 shared cores: as the classic suite's session
        "spark.default.parallelism": "2",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # the Python workers of a Connect foreachBatch: this interpreter
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        **support.CHEAP_SPARK_CONF,
    }


class ConnectServer:
    """A Spark Connect server with Delta in a child process (see the module docstring).

    Args:
        workdir: Where the warehouse and the server's log go (a new temporary directory
            when ``None``).
    """

    def __init__(self, workdir: str | os.PathLike[str] | None = None) -> None:
        reason = unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="deltasink-sc-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log = self.workdir / "connect-server.log"
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        conf = server_conf(str(self.workdir / "warehouse"))
        conf["spark.connect.grpc.binding.port"] = str(self.port)
        command = [
            str(_pyspark_home() / "bin" / "spark-submit"),
            "--class",
            SERVER_CLASS,
            "--jars",
            ",".join(delta_jars()),
            "--driver-java-options",
            f"-Djava.io.tmpdir={self.workdir} -Dlog4j2.level=WARN",
        ]
        for key, value in conf.items():
            command += ["--conf", f"{key}={value}"]
        command.append("spark-internal")
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
        }
        env["SPARK_HOME"] = str(_pyspark_home())
        # The server's Python workers (foreachBatch) import deltasink from this tree.
        paths = [str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        env["PYSPARK_PYTHON"] = sys.executable
        with self.log.open("w") as log:
            self._proc = subprocess.Popen(
                command,
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: the JVM and its Python workers
            )
        self._wait()

    def _wait(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"the Spark Connect server exited with {self._proc.returncode}:\n"
                    + self.log_tail()
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(
            f"the Spark Connect server did not listen on {self.port} within "
            f"{START_TIMEOUT_S:.0f} s:\n" + self.log_tail()
        )

    def log_tail(self, chars: int = 6000) -> str:
        """The end of the server's log (stdout and stderr)."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def session(self) -> Any:
        """A new Spark Connect session on the server (``builder.remote(...).create()``:
        it replaces no other session of this process, e.g. the embedded engine's)."""
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(self.url).create()

    def stop(self) -> None:
        """Stop the server (SIGTERM to its process group, SIGKILL after 20 s)."""
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGTERM)
                self._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
            except ProcessLookupError:
                pass

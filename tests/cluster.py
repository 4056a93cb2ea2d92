"""A Spark standalone cluster on 127.0.0.1 for ``make test-cluster``: a master and two
workers, each its own JVM started with PySpark's ``bin/spark-class``
(``org.apache.spark.deploy.master.Master``, ``org.apache.spark.deploy.worker.Worker``),
no download. By default (the tests') each worker has 2 cores and 1 GiB: an application
gets one executor JVM (1 core, 512 MiB) on each worker, with its own Python workers, and
a second application (the CLI's, a racing writer) fits beside it. A benchmark passes
bigger workers and executors (``bench/size.py``).

The executors' Python cannot import deltasink: the workers' ``PYTHONPATH`` starts with
a folder whose ``deltasink`` package raises ``ImportError`` (:data:`BLOCKED`), ahead of
the editable install of the environment. A function shipped to an executor that needs
deltasink (a UDF, ``mapInArrow``, a closure over a sink) fails the job; docs/deploy.md
says executors run no deltasink code, and ``tests/test_cluster.py`` holds it to that.

The drivers (the tests' jobs, the CLI with ``--spark``) find the cluster and Delta's jars
in ``spark-defaults.conf`` under :attr:`StandaloneCluster.conf_dir` (``SPARK_CONF_DIR``),
as a driver on a real cluster finds them. :meth:`StandaloneCluster.stop` kills each
JVM's process group (the executors and their Python workers are in the worker's); the
master and the workers also get SIGKILL when the process that started them dies
(``PR_SET_PDEATHSIG``), and an executor exits when its worker is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["BLOCKED", "StandaloneCluster", "app_conf", "die_with_parent", "unavailable"]

ROOT = Path(__file__).resolve().parent.parent
#: What ``import deltasink`` raises on an executor.
BLOCKED = "deltasink imported on a Spark executor"
#: How long the master and the workers may take to come up (cold JVMs, 2 busy cores).
START_TIMEOUT_S = 120.0
WORKERS = 2
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def unavailable() -> str | None:
    """Why a standalone cluster with Delta cannot start here, or ``None``."""
    from tests.test_contract_spark import REASON

    if REASON is not None:
        return REASON
    if not (_pyspark_home() / "bin" / "spark-class").exists():
        return f"this PySpark ({_pyspark_home()}) ships no bin/spark-class"
    if not sys.platform.startswith("linux"):
        return "the cluster's teardown on the parent's death needs Linux (PR_SET_PDEATHSIG)"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """``preexec_fn``: SIGKILL when the process that started this one dies."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def app_conf(
    master: str, jars: list[str], overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The ``spark-defaults.conf`` of the cluster's drivers: the tests' (small, cheap
    JVMs), with ``overrides`` on top (a benchmark's sizes and optimizer settings)."""
    from tests import support

    conf = {
        "spark.master": master,
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": "1g",
        # two executors, one per worker (spark.deploy.spreadOut), 1 core each
        "spark.executor.instances": str(WORKERS),
        "spark.executor.cores": "1",
        "spark.cores.max": str(WORKERS),
        "spark.executor.memory": "512m",
        # short-lived JVMs on 2 shared cores: the C1 JIT only, one GC thread
        "spark.executor.extraJavaOptions": JVM_OPTIONS,
        "spark.driver.extraJavaOptions": JVM_OPTIONS,
        # the first job waits until both executors are there
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
        **support.CHEAP_SPARK_CONF,
        "spark.sql.shuffle.partitions": "2",  # both executors get tasks
    }
    conf.update(overrides or {})
    return conf


class StandaloneCluster:
    """A master and :data:`WORKERS` workers under ``workdir`` (see the module docstring).

    Use as a context manager, or call :meth:`stop` in a ``finally``.

    Args:
        workdir: Where the daemons' logs, work folders and the drivers' conf go.
        worker_cores: Cores each worker offers.
        worker_memory: Memory each worker offers its executors (``spark-class``'s
            ``--memory`` spelling: ``1g``, ``3500m``).
        conf: Settings over the drivers' defaults (:func:`app_conf`), e.g.
            ``spark.executor.memory``; the defaults fit the tests.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        worker_cores: int = 2,
        worker_memory: str = "1g",
        conf: Mapping[str, str] | None = None,
    ) -> None:
        from tests.test_contract_spark import delta_jars

        reason = unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port, self.ui_port = free_port(), free_port()
        self.master = f"spark://127.0.0.1:{self.port}"
        self.conf_dir = workdir / "conf"
        self.conf_dir.mkdir(exist_ok=True)
        self.worker_cores, self.worker_memory = worker_cores, worker_memory
        self.conf = app_conf(self.master, delta_jars(), conf)
        (self.conf_dir / "spark-defaults.conf").write_text(
            "".join(f"{k} {v}\n" for k, v in self.conf.items())
        )
        blocked = workdir / "executor-path" / "deltasink"
        blocked.mkdir(parents=True, exist_ok=True)
        (blocked / "__init__.py").write_text(f"raise ImportError({BLOCKED!r})\n")
        self.executor_path = str(blocked.parent)
        self._procs: list[subprocess.Popen[bytes]] = []
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _daemon_env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SPARK_", "PYSPARK_", "DELTASINK_")) and k != "PYTHONPATH"
        }
        empty = self.workdir / "daemon-conf"  # the drivers' defaults are not theirs
        empty.mkdir(exist_ok=True)
        env.update(
            SPARK_HOME=str(_pyspark_home()),
            SPARK_CONF_DIR=str(empty),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY="256m",
            PYTHONPATH=self.executor_path,  # executors: no deltasink (module docstring)
            PYSPARK_PYTHON=sys.executable,
        )
        return env

    def _spawn(self, name: str, *args: str) -> None:
        command = [str(_pyspark_home() / "bin" / "spark-class"), *args]
        with (self.workdir / f"{name}.log").open("wb") as log:
            self._procs.append(
                subprocess.Popen(
                    command,
                    cwd=self.workdir,
                    env=self._daemon_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its group: its executors and Python workers
                    preexec_fn=die_with_parent,
                )
            )

    def _start(self) -> None:
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        self._wait(lambda state: True)
        for number in range(WORKERS):
            work = self.workdir / f"worker-{number}"
            self._spawn(
                f"worker-{number}",
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--webui-port",
                "0",
                "--cores",
                str(self.worker_cores),
                "--memory",
                self.worker_memory,
                "--work-dir",
                str(work),
                self.master,
            )
        self._wait(lambda state: len(self.alive_workers(state)) == WORKERS)

    def state(self) -> dict[str, Any]:
        """The master's state (its web UI's ``/json/``)."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as answer:
            state: dict[str, Any] = json.load(answer)
        return state

    @staticmethod
    def alive_workers(state: dict[str, Any]) -> list[dict[str, Any]]:
        return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def _wait(self, ready: Any) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for proc in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a cluster JVM exited ({proc.args!r}):\n{self.logs()}")
            try:
                if ready(self.state()):
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(
            f"the cluster did not come up in {START_TIMEOUT_S:.0f} s:\n{self.logs()}"
        )

    def logs(self, chars: int = 3000) -> str:
        """The end of each daemon's log."""
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-chars:]}"
            for path in sorted(self.workdir.glob("*.log"))
        )

    def driver_env(self) -> dict[str, str]:
        """The environment of a driver process on this cluster: ``SPARK_CONF_DIR``
        names it, ``PYTHONPATH`` has the repository (the driver runs deltasink)."""
        from tools.stream_soak import job_env

        env = job_env("spark")
        env["SPARK_CONF_DIR"] = str(self.conf_dir)
        env["SPARK_HOME"] = str(_pyspark_home())
        env["DELTASINK_SPARK_MASTER"] = self.master
        return env

    def stop(self) -> None:
        """Kill every JVM of the cluster (SIGTERM to each process group, SIGKILL after
        15 s), the executors and their Python workers included, and any driver still
        running on it (a process whose ``SPARK_CONF_DIR`` is :attr:`conf_dir`)."""
        for pid in self.drivers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in reversed(self._procs):  # workers first, then the master
            _kill_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        for proc in self._procs:
            _kill_group(proc.pid, signal.SIGKILL)  # what SIGTERM left (executors too)
            proc.wait()
        self._procs.clear()

    def drivers(self) -> list[int]:
        """The processes (drivers, their JVMs) whose environment names this cluster."""
        mark = f"SPARK_CONF_DIR={self.conf_dir}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if mark in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:  # gone, or not ours
                continue
        return found

    def __enter__(self) -> StandaloneCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)

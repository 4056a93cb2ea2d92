"""Shared fixtures: one embedded Spark session for the whole run, table locations."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deltasink import embedded_spark
from tests import generated

# Writers take turns in /dev/shm (deltasink.backends.deltalog.turns); on a machine
# without it the queue would sit in the temporary directory, which the job tests check
# is left as they found it: give it a directory of its own there.
if not (os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)):
    os.environ.setdefault("DELTASINK_TURNS_DIR", tempfile.mkdtemp(prefix="deltasink-tests-"))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The embedded Spark Connect session (Sail), started once per test run."""
    return embedded_spark()


@pytest.fixture
def target(tmp_path: Path) -> str:
    """A location for a target table that does not exist yet."""
    return str(tmp_path / "lake" / "orders")


RUNNER = "test_delta_spark_suite_in_its_own_process"
_RUNNER_ITEMS = pytest.StashKey[list[pytest.Item]]()


class _KeepRunner:
    """Notes the runner test before ``-m`` selects: ``make test-generated`` selects only
    ``generated`` tests, and the runner (not one) must still collect the child's."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        config.stash[_RUNNER_ITEMS] = [i for i in items if i.name == RUNNER]


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_KeepRunner(), "deltasink-keep-runner")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a process that hosts the embedded engine's Spark Connect session, the
    delta-spark module's tests (and those sharing its session: ``CHILD_MODULES``) run
    in a child process of their own, started here and
    collected by ``test_delta_spark_suite_in_its_own_process`` (run last, it echoes
    their results): deselect them here rather than report them as skipped.

    Runs after ``-m`` has selected (``trylast``): the child runs the same selection, and
    is started only when some of its tests are selected; the runner joins them even
    when ``-m`` left it out."""
    import os

    connect = "SPARK_CONNECT_MODE_ENABLED" in os.environ or "SPARK_REMOTE" in os.environ
    if os.environ.get("DELTASINK_SPARK_CONTRACT_CHILD"):  # the child: not itself again
        runner = [i for i in items if i.name == RUNNER]
        config.hook.pytest_deselected(items=runner)
        items[:] = [item for item in items if item not in runner]
        return
    from tests import test_contract_spark

    child_modules = tuple(f"{m}::" for m in test_contract_spark.CHILD_MODULES)
    gated = [
        item for item in items if item.nodeid.startswith(child_modules) and item.name != RUNNER
    ]

    if (
        gated
        and test_contract_spark.REASON is None
        and (connect or _embedded_session_requested(items))
    ):
        config.hook.pytest_deselected(items=gated)
        items[:] = [item for item in items if item not in gated]
        test_contract_spark.RUN_IN_CHILD = True
        # Start that child now and collect it last: the JVM suite then runs beside the
        # rest of the suite instead of after it.
        runner = config.stash.get(_RUNNER_ITEMS, [])
        if runner and not config.option.collectonly:
            items[:] = [item for item in items if item not in runner] + runner
            test_contract_spark.start_child(config.option.markexpr or None)


def _embedded_session_requested(items: list[pytest.Item]) -> bool:
    """Whether this run starts the embedded engine (some test uses its session)."""
    return any("spark" in getattr(item, "fixturenames", ()) for item in items)


def pytest_report_header(config: pytest.Config) -> str:
    """The generated suites' seed, first thing in the output."""
    return generated.banner()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The seed again at the end, where a failure is read."""
    terminalreporter.write_line(generated.banner())

"""Shared fixtures: one embedded Spark session for the whole run, table locations."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deltasink import embedded_spark


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The embedded Spark Connect session (Sail), started once per test run."""
    return embedded_spark()


@pytest.fixture
def target(tmp_path: Path) -> str:
    """A location for a target table that does not exist yet."""
    return str(tmp_path / "lake" / "orders")

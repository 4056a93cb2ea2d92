"""Any writer, any order, on the writers that need no JVM (issue 35): the embedded engine
(direct and coalesced), plain delta-rs (``MERGE``, append, ``OPTIMIZE``) and auto
compaction from two apps at once, in generated sequences checked against the oracle
after every step (:mod:`tests.writers_model`). ``make test`` runs a fixed-seed sample;
``make test-generated`` many more sequences. The same model with the JVM writers
(the spark engine, plain delta-spark) is ``tests/test_any_writer.py``'s.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given

from tests import generated
from tests.writers_model import (
    EMBEDDED_WRITERS,
    Shape,
    Step,
    World,
    compaction_from,
    run_sequence,
    strategies,
)

pytestmark = pytest.mark.generated


@pytest.fixture(autouse=True, scope="module")
def _compact_early() -> Iterator[None]:
    with compaction_from(2):
        yield


@pytest.mark.timeout(1800)  # the CI count; make test's sample takes seconds
@generated.hypothesis_run(sample=12, ci=400)
@given(strategies(EMBEDDED_WRITERS, ("rs",), max_steps=6))
def test_any_writer_any_order_leaves_the_table_the_rules_give(
    sequence: tuple[Shape, str, list[Step]],
) -> None:
    shape, creator, steps = sequence
    with tempfile.TemporaryDirectory(prefix="deltasink-writers-") as root:
        run_sequence(World(shape, str(Path(root) / "t")), creator, steps)

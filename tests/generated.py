"""One seed and one size for every generated suite (grammars, state machines).

Generated suites (the differential predicate grammar, the writer model, the stream
lifecycle machine) draw their inputs from Hypothesis or from a ``random.Random`` seeded
here, so a run is reproduced from one printed number:

* ``make test`` (``DELTASINK_GENERATED`` unset, the ``sample`` run): the fixed
  :data:`SAMPLE_SEED` and each suite's small sample count;
* ``make test-generated`` (CI, ``DELTASINK_GENERATED=ci``): a fresh seed each run, or
  ``DELTASINK_SEED`` to repeat one, and each suite's large count.

The seed is printed in the pytest header and summary (``conftest.py``), with the command
that repeats the run. Tests of a generated suite carry the ``generated`` marker, so
``pytest -m generated`` selects them all.
"""

from __future__ import annotations

import os
import random
import zlib
from collections.abc import Callable
from typing import Any, Literal, TypeVar

#: The seed of ``make test``'s sample: fixed, so a failure there is a failure every time.
SAMPLE_SEED = 20261126

Mode = Literal["sample", "ci"]
F = TypeVar("F", bound=Callable[..., Any])


def mode() -> Mode:
    """``"ci"`` under ``DELTASINK_GENERATED=ci`` (``make test-generated``), else ``"sample"``."""
    value = os.environ.get("DELTASINK_GENERATED", "sample").strip().lower()
    if value not in ("sample", "ci"):
        raise ValueError(f"DELTASINK_GENERATED={value!r}: expected 'sample' or 'ci'")
    return "ci" if value == "ci" else "sample"


def _choose_seed() -> int:
    given = os.environ.get("DELTASINK_SEED")
    if given:
        return int(given)
    if mode() == "sample":
        return SAMPLE_SEED
    # A fresh seed, fixed for the run: exported so child processes (the delta-spark
    # suite's own process) draw from the same one.
    fresh = random.SystemRandom().randrange(1, 2**31)
    os.environ["DELTASINK_SEED"] = str(fresh)
    return fresh


#: This run's seed (``DELTASINK_SEED`` when given).
SEED = _choose_seed()


def count(sample: int, ci: int) -> int:
    """How many cases a suite generates in this run: ``sample`` in ``make test``, ``ci``
    in ``make test-generated``. ``DELTASINK_GENERATED_SCALE`` (a float) scales both,
    for a quick local look or a long soak."""
    scale = float(os.environ.get("DELTASINK_GENERATED_SCALE", "1"))
    return max(1, round((ci if mode() == "ci" else sample) * scale))


def rng(name: str) -> random.Random:
    """A ``random.Random`` for the suite ``name``, seeded from :data:`SEED` (suites do
    not shift each other's draws)."""
    return random.Random(SEED ^ zlib.crc32(name.encode()))


def hypothesis_run(sample: int, ci: int, **settings: Any) -> Callable[[F], F]:
    """Decorate a ``@given`` test (or a state machine's ``TestCase``) with this run's
    seed and example count: ``@hypothesis_run(sample=20, ci=500)``. Extra keyword
    arguments go to ``hypothesis.settings`` (``stateful_step_count=...``)."""
    from hypothesis import HealthCheck, seed
    from hypothesis import settings as hsettings

    chosen = hsettings(
        max_examples=count(sample, ci),
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.function_scoped_fixture,
        ],
        **settings,
    )

    def apply(test: F) -> F:
        return seed(SEED)(chosen(test))  # type: ignore[no-any-return]

    return apply


def reproduce() -> str:
    """The command that repeats this run's generated cases."""
    if mode() == "ci":
        return f"DELTASINK_SEED={SEED} make test-generated"
    return "make test (fixed seed)"


def banner() -> str:
    """The line the pytest header and summary print."""
    return f"deltasink generated suites: {mode()} run, seed {SEED} (repeat: {reproduce()})"

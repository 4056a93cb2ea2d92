"""The long run of the property suite: ``python tools/property_run.py --examples 2000``.

Runs ``tests/test_property.py`` with the ``long`` hypothesis profile (random seeds,
``--examples`` spread over the eight MergeSpec shapes) and prints one summary line:
examples, failures, elapsed time. The figures go into docs/reliability.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPES = 8


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="in all (default 2000)")
    args = parser.parse_args(argv)
    per_shape = max(1, args.examples // SHAPES)
    env = {
        **os.environ,
        "DELTASINK_HYPOTHESIS_PROFILE": "long",
        "DELTASINK_PROPERTY_EXAMPLES": str(per_shape),
    }
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_property.py",
            "-k",
            "oracle",
        ],
        cwd=ROOT,
        env=env,
        check=False,
    )
    elapsed = time.monotonic() - started
    status = "no failure" if result.returncode == 0 else "FAILURES (see above)"
    print(
        f"property long run: {per_shape * SHAPES} examples ({per_shape} per shape, two "
        f"cadences each), {status}, {elapsed:.0f} s"
    )
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())

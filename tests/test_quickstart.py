"""The README's first command runs jobs/quickstart.py: it must work and be right."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from deltasink import DeltaSink
from tests import support

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_job(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "quickstart.py"), "--lake", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "pre-committed version 2: 3 rows staged" in out
    assert "recovered versions [1, 2]: committed, +2 ~2 -1 rows -> target table version 1" in out
    assert "history: versions [1, 2] -> target table version 1 (MERGE)" in out
    assert "replayed version 2: nothing to do (already committed)" in out
    target = str(tmp_path / "silver" / "orders_quickstart")
    assert [r["order_id"] for r in support.rows(target, sort_by="order_id")] == [
        1,
        2,
        3,
        5,
        6,
        7,
        8,
    ]
    statuses = {r["order_id"]: r["status"] for r in support.rows(target, sort_by="order_id")}
    assert statuses[2] == "shipped"  # the stale update in batch 2 was ignored
    assert statuses[7] == "shipped"
    assert support.marker(target, "orders-quickstart") == 2
    assert DeltaSink(target, "orders-quickstart").status().pending_versions == []

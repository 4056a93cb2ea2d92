"""Every ```python example of README.md runs, in order, against tables in tmp_path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"
DOC_LAKE = "/tmp/deltasink-readme"


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples() -> None:
    assert len(examples()) >= 1


def test_readme_examples_run(tmp_path: Path, spark: Any) -> None:
    namespace: dict[str, Any] = {"__name__": "readme"}
    for code in examples():
        exec(compile(code.replace(DOC_LAKE, str(tmp_path)), "README.md", "exec"), namespace)
    sink = namespace["sink"]
    status = sink.status()
    assert status.committed_version == 8
    assert status.pending_versions == []
    rows = spark.sql(f"SELECT * FROM delta.`{tmp_path}/silver/orders` ORDER BY order_id").collect()
    assert [(r.order_id, r.status, r.amount) for r in rows] == [
        (1, "created", 10.0),
        (2, "created", 20.0),
    ]
    history = spark.sql(
        f"SELECT id, city, valid_from, valid_to, is_current FROM delta.`{tmp_path}/silver/customers`"
        " ORDER BY id, valid_from"
    ).collect()
    assert [tuple(r) for r in history] == [  # the table README.md prints
        (1, "Oslo", 10, 20, False),
        (1, "Paris", 20, 30, False),
        (1, "Bergen", 30, None, True),
        (2, "Rome", 10, 20, False),
    ]

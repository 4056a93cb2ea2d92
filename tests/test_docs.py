"""Every code block of README.md, CHANGELOG.md and docs/*.md runs as written, on the
session it names, or is marked as what cannot run here; and the user docs speak the
user's language.

A block's kind comes from an HTML comment on the line before its fence,
``<!-- snippet: KIND key=value ... -->``, else from its info string (``python``: run
on the embedded session; ``console``: a recorded run; ``text``: a diagram; a ``bash``
block of docs/runbook.md: its commands run in tests/test_runbook.py). The kinds:

* ``embedded``: Python, run in order (one namespace per file) on the embedded session,
  its paths moved into ``tmp_path``; ``setup=NAME`` first builds the situation it is
  for (:data:`SETUPS`).
* ``classic`` then ``stream``: the streaming example. ``classic`` makes a classic local
  session, ``stream`` uses it: both run in a Python process of their own with a JVM
  (tests/test_docs_jvm.py, beside the delta-spark suite); ``stream`` runs on a Spark
  Connect server in ``make test-connect`` (tests/test_connect.py), and here it is
  refused by name on the embedded session, as the README says.
* ``cli situation=NAME``: ``deltasink`` commands run against that situation here.
* ``shell situation=NAME``: shell commands run by the test named in :data:`SHELL`.
* ``runbook``: docs/runbook.md's commands, run by tests/test_runbook.py, section by
  section.
* ``make``: ``make`` targets, checked with ``make -n``.
* ``record``: a long run's recorded output; its command's options are checked
  against the tool's ``--help``.
* ``databricks``: runs on Databricks only; YAML is parsed, bundle commands are checked
  against databricks.yml.
* ``maven``: needs Maven Central (``--packages``); Python is compiled, the Delta
  version checked against the tested one.
* ``otel``: the Prometheus set-up of docs/deploy.md, "Metrics and traces": its Python
  runs in a process of its own and is scraped, its YAML parsed
  (tests/test_telemetry.py).
* ``text``: nothing to run.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import logging
import re
import shlex
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from typer.testing import CliRunner

from deltasink import CommitError, ConfigurationError, DeltaSink, MergeSpec

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The pages written for users (the rest of docs/ is for contributors).
USER_DOCS = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    *(
        ROOT / "docs" / name
        for name in (
            "usage.md",
            "concepts.md",
            "guarantees.md",
            "deploy.md",
            "runbook.md",
            "migrating.md",
            "stopping.md",
            "spark-backend.md",
        )
    ),
]
KINDS = {
    "embedded",
    "classic",
    "stream",
    "cli",
    "shell",
    "runbook",
    "make",
    "record",
    "databricks",
    "maven",
    "otel",
    "text",
}
#: The shell blocks, by situation: the test that runs them.
SHELL = {
    "retire": "tests/test_runbook.py::test_retiring_an_app_id",
    "resume": "tests/test_jobs.py::test_databricks_streaming_template_on_classic_pyspark",
}
#: The locations the docs use, and where the tests put them.
DOC_PATHS = ("/tmp/deltasink-readme", "/tmp/deltasink-guide", "/tmp/deltasink-stream", "/lake")
#: The Delta release the spark engine is tested with (../shared/delta-spark).
TESTED_DELTA = "4.4.0"

_MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(.*?)\s*-->\s*$")
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown file."""

    path: Path
    line: int
    info: str
    code: str
    marker: dict[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        if "kind" in self.marker:
            return self.marker["kind"]
        if self.info == "text":
            return "text"
        if self.info == "console":
            return "record"
        if self.info == "python":
            return "embedded"
        if self.info == "bash" and self.path.name == "runbook.md":
            return "runbook"
        return "unmarked"

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def moved(self, places: dict[str, str]) -> str:
        """The code with the documented locations replaced (longest first)."""
        code = self.code
        for old in sorted(places, key=len, reverse=True):
            code = code.replace(old, places[old])
        return code

    def run_shell(self, places: dict[str, str]) -> None:
        """Run a shell block with ``bash -e``, its locations replaced."""
        subprocess.run(["bash", "-e", "-c", self.moved(places)], check=True, timeout=60)


def blocks(paths: list[Path] | None = None) -> list[Block]:
    """Every fenced block of ``paths`` (default :data:`DOCS`), in file order."""
    found: list[Block] = []
    for path in paths or DOCS:
        if not path.exists():
            continue
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            opened = _FENCE.match(lines[i])
            if not opened:
                i += 1
                continue
            indent, info = opened.group(1), opened.group(2)
            marker: dict[str, str] = {}
            hint = _MARKER.match(lines[i - 1]) if i else None
            if hint:
                words = hint.group(1).split()
                marker = {"kind": words[0], **dict(w.split("=", 1) for w in words[1:])}
            body = []
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                line = lines[j]
                body.append(line[len(indent) :] if line.startswith(indent) else line)
                j += 1
            found.append(Block(path, i + 1, info, "\n".join(body) + "\n", marker))
            i = j + 1
    return found


def of_kind(kind: str, path: Path | None = None) -> list[Block]:
    return [b for b in blocks() if b.kind == kind and (path is None or b.path == path)]


def counts() -> Counter[str]:
    return Counter(b.kind for b in blocks())


# -- every block is classified --------------------------------------------------------------


def test_every_block_has_a_kind_and_the_extractor_finds_them_all() -> None:
    unmarked = [b.where for b in blocks() if b.kind not in KINDS]
    assert unmarked == [], (
        f"blocks without a snippet kind (see this module's docstring): {unmarked}"
    )
    fences = sum(
        1 for p in DOCS if p.exists() for line in p.read_text().splitlines() if _FENCE.match(line)
    )
    assert 2 * len(blocks()) == fences  # every fence opens or closes a block found
    found = counts()
    print("docs code blocks by kind:", dict(sorted(found.items())), "total", sum(found.values()))
    assert found["embedded"] >= 5
    assert found["stream"] == found["classic"] == 1


# -- embedded: run on the embedded session --------------------------------------------------


def _orders_table(places: dict[str, str], namespace: dict[str, Any]) -> None:
    """A target at ``/lake/silver/orders`` (an earlier section's, when it made one)."""
    target = places["/lake"] + "/silver/orders"
    if not Path(target).exists():
        DeltaSink(target, "orders-ingest", MergeSpec(keys=["id"])).write(
            pa.table({"id": [1], "value": ["a"]}), 0
        )


def _staged_version_does_not_fit(places: dict[str, str], namespace: dict[str, Any]) -> None:
    """Version 7 staged by an older release: its column ``a`` is a string, the
    target's an int64 (docs/runbook.md, "A staged version does not fit the target")."""
    from tests.contract import stage_as_an_old_release

    sink = DeltaSink(places["/lake"] + "/silver/orders", "orders-ingest", MergeSpec(keys=["id"]))
    sink.pre_commit(pa.table({"id": [1], "seq": [1], "a": pa.array([10], pa.int64())}), 6)
    stage_as_an_old_release(sink, pa.table({"id": [2], "seq": [2], "a": ["20"]}), 7)
    assert sink.commit(6).committed_versions == [6]
    with pytest.raises(CommitError):
        sink.commit(7)  # what the runbook's section starts from
    namespace["sink"] = sink


#: What a block marked ``setup=NAME`` needs first.
SETUPS: dict[str, Callable[[dict[str, str], dict[str, Any]], None]] = {
    "orders_table": _orders_table,
    "staged_version_does_not_fit": _staged_version_does_not_fit,
}


@contextlib.contextmanager
def _logging_kept() -> Iterator[None]:
    """A snippet configures logging: put the test run's configuration back after it."""
    logger = logging.getLogger("deltasink")
    level, handlers = logger.level, list(logging.getLogger().handlers)
    try:
        yield
    finally:
        logger.setLevel(level)
        for handler in logging.getLogger().handlers:
            if handler not in handlers:
                logging.getLogger().removeHandler(handler)


def places_in(tmp_path: Path) -> dict[str, str]:
    return {doc: str(tmp_path / doc.strip("/").replace("/", "-")) for doc in DOC_PATHS}


def run_embedded(path: Path, tmp_path: Path) -> dict[str, Any]:
    """Run the embedded blocks of ``path`` in order; the README's namespace."""
    places = places_in(tmp_path)
    shared: dict[str, Any] = {"__name__": "docs"}
    for block in of_kind("embedded", path):
        namespace = shared
        if "setup" in block.marker:
            namespace = {"__name__": "docs"}
            SETUPS[block.marker["setup"]](places, namespace)
        with _logging_kept():
            exec(compile(block.moved(places), block.where, "exec"), namespace)
    return shared


def test_readme_examples_run(tmp_path: Path, spark: Any) -> None:
    namespace = run_embedded(ROOT / "README.md", tmp_path)
    lake = places_in(tmp_path)["/tmp/deltasink-readme"]
    sink = namespace["sink"]
    status = sink.status()
    assert (status.committed_version, status.pending_versions) == (8, [])
    rows = spark.sql(f"SELECT * FROM delta.`{lake}/silver/orders` ORDER BY order_id").collect()
    assert [(r.order_id, r.status, r.amount) for r in rows] == [
        (1, "created", 10.0),
        (2, "created", 20.0),
    ]


def test_usage_guide_examples_run(tmp_path: Path, spark: Any) -> None:
    run_embedded(ROOT / "docs" / "usage.md", tmp_path)
    lake = places_in(tmp_path)["/tmp/deltasink-guide"]
    history = spark.sql(
        f"SELECT id, city, valid_from, valid_to, is_current FROM delta.`{lake}/silver/customers`"
        " ORDER BY id, valid_from"
    ).collect()
    assert [tuple(r) for r in history] == [  # the table docs/usage.md prints
        (1, "Oslo", 10, 20, False),
        (1, "Paris", 20, 30, False),
        (1, "Bergen", 30, None, True),
        (2, "Rome", 10, 20, False),
    ]
    events = spark.sql(f"SELECT event_id, day FROM delta.`{lake}/silver/events`").collect()
    assert [tuple(r) for r in events] == [(1, "2026-11-24")]


def test_runbook_examples_run(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    run_embedded(ROOT / "docs" / "runbook.md", tmp_path)
    target = places_in(tmp_path)["/lake"] + "/silver/orders"
    table = DeltaTable(target)
    assert table.metadata().configuration["delta.autoOptimize.autoCompact"] == "true"
    rows = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": 1, "seq": 1, "a": 10}, {"id": 2, "seq": 2, "a": 20}]


def test_every_embedded_block_runs_in_a_test() -> None:
    runs = {ROOT / "README.md", ROOT / "docs" / "runbook.md", ROOT / "docs" / "usage.md"}
    assert {b.path for b in of_kind("embedded")} <= runs


# -- the streaming example ------------------------------------------------------------------


def streaming_example() -> tuple[Block, Block]:
    (classic,) = of_kind("classic")
    (stream,) = of_kind("stream")
    assert classic.path == stream.path
    assert classic.line < stream.line
    return classic, stream


def test_the_streaming_example_is_refused_by_name_on_the_embedded_session(
    tmp_path: Path, spark: Any
) -> None:
    """What the README says of the embedded session: a ConfigurationError naming the
    sessions to use, before anything is written (not Sail's raw foreachBatch error)."""
    _, stream = streaming_example()
    places = places_in(tmp_path)
    with pytest.raises(ConfigurationError, match=r"has no foreachBatch.*classic Spark session"):
        exec(compile(stream.moved(places), stream.where, "exec"), {"spark": spark})
    lake = Path(places["/tmp/deltasink-stream"])
    assert not (lake / "silver").exists()
    assert not (lake / "checkpoints").exists()


# -- cli: deltasink commands against a situation ---------------------------------------------


def test_readme_cli_commands_run(target: str) -> None:
    from deltasink.cli import app

    (block,) = [b for b in of_kind("cli") if b.marker.get("situation") == "readme"]
    job = DeltaSink(target, "orders-ingest", MergeSpec(keys=["id"]))
    job.write(pa.table({"id": [1], "value": ["a"]}), 7)
    job.pre_commit(pa.table({"id": [2], "value": ["b"]}), 8)
    job.pre_commit(pa.table({"id": [3], "value": ["c"]}), 9)
    outputs = []
    for line in block.moved({"/lake/silver/orders": target}).splitlines():
        args = shlex.split(line, comments=True)
        assert args[0] == "deltasink", line
        result = CliRunner().invoke(app, args[1:])
        assert result.exit_code == 0, (line, result.output)
        outputs.append(result.output)
    assert "[8, 9]" in outputs[0]  # status: the pending versions
    assert "version 9: aborted" in outputs[1]
    assert "committed version is now 8" in outputs[2]
    assert DeltaSink(target, "orders-ingest").status().committed_version == 8
    assert outputs[-1].startswith("deltasink ")


def test_every_cli_block_has_a_situation_here() -> None:
    assert {b.marker.get("situation") for b in of_kind("cli")} == {"readme"}


def test_shell_blocks_run_in_their_tests() -> None:
    for block in of_kind("shell"):
        test = SHELL[block.marker["situation"]]
        path, name = test.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), test


def test_runbook_commands_run_in_test_runbook() -> None:
    from tests.test_runbook import sections

    covered = {line for lines in sections().values() for line in lines}
    for block in of_kind("runbook"):
        for line in block.code.splitlines():
            assert line in covered, (block.where, line)


# -- make, record, databricks, maven: checked without running here --------------------------


def test_make_commands_name_real_targets() -> None:
    for block in of_kind("make"):
        for line in block.code.splitlines():
            args = shlex.split(line, comments=True)
            assert args[0] == "make", line
            done = subprocess.run(
                ["make", "-n", *args[1:]], cwd=ROOT, capture_output=True, text=True, check=False
            )
            assert done.returncode == 0, (block.where, line, done.stderr)


def _tool_help(tool: str) -> str:
    import importlib

    module = importlib.import_module(f"tools.{Path(tool).stem}")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        module.main(["--help"])
    return out.getvalue()


def test_recorded_runs_use_options_their_tools_have() -> None:
    commands = [
        line[2:]
        for block in of_kind("record")
        for line in block.code.splitlines()
        if line.startswith("$ ")
    ]
    assert commands
    for command in commands:
        args = shlex.split(command, comments=True)
        assert args[0] == "python", command
        assert args[1].startswith("tools/"), command
        assert (ROOT / args[1]).exists(), command
        usage = _tool_help(args[1])
        for option in (a.split("=")[0] for a in args[2:] if a.startswith("--")):
            assert option in usage, (command, option)


def test_databricks_blocks_match_the_bundle() -> None:
    bundle = yaml.safe_load((ROOT / "databricks.yml").read_text())
    jobs, targets = set(bundle["resources"]["jobs"]), set(bundle["targets"])
    variables = set(bundle["variables"])
    for block in of_kind("databricks"):
        if block.info == "yaml":
            assert isinstance(yaml.safe_load(block.code), dict), block.where
            continue
        text = block.code.replace("\\\n", " ")
        for line in text.splitlines():
            args = shlex.split(line, comments=True)
            assert args[:2] == ["databricks", "bundle"], line
            if args[2] == "run":
                assert args[3] in jobs, line
            for flag, value in itertools.pairwise(args):
                if flag == "-t":
                    assert value in targets, line
                if flag == "--var":
                    assert value.split("=")[0] in variables, line


def test_maven_blocks_compile_and_pin_the_tested_delta() -> None:
    found = of_kind("maven")
    assert found
    for block in found:
        if block.info == "python":
            compile(block.code, block.where, "exec")
            continue
        packages = re.findall(r"io\.delta:delta-spark_2\.13:([\d.]+)", block.code)
        assert packages == [TESTED_DELTA], block.where
        script = next(w for w in shlex.split(block.code.replace("\\\n", " ")) if w.endswith(".py"))
        assert (ROOT / script).exists(), script


def test_the_tested_delta_is_the_shared_one() -> None:
    shared = sorted((ROOT.parent / "shared" / "delta-spark").glob("delta-spark_2.13-*.jar"))
    if not shared:
        pytest.skip("Delta's jars are not beside the repository here")
    assert shared[0].name == f"delta-spark_2.13-{TESTED_DELTA}.jar"


#: The PySpark and Delta pairs the spark engine is tested with (docs/deploy.md, "Tested
#: PySpark and Delta versions"): PySpark -> (Delta, Scala of the jars).
TESTED_PAIRS = {"4.2.0": (TESTED_DELTA, "2.13"), "3.5.9": ("3.3.3", "2.12")}
#: Where a Delta version may be named: the user pages and the templates (the design
#: notes, the benchmark history and the CHANGELOG record earlier versions).
VERSIONED = [
    p
    for p in [*DOCS, *sorted((ROOT / "jobs").glob("*.py")), ROOT / "databricks.yml"]
    if p.name not in ("design-notes.md", "benchmark-history.md", "CHANGELOG.md")
]


def test_every_page_names_a_tested_delta_and_deploy_lists_the_pairs() -> None:
    """One set of versions: every ``--packages`` coordinate and ``delta-spark==`` pin on
    a page or in a template is a tested pair's (a template said ``:4.0.0`` while
    docs/deploy.md said 4.4.0), and docs/deploy.md's table lists exactly the pairs."""
    tested = {delta for delta, _ in TESTED_PAIRS.values()}
    coordinates = {(scala, delta) for delta, scala in TESTED_PAIRS.values()}
    wrong = []
    for path in VERSIONED:
        if not path.exists():
            continue
        text = path.read_text()
        for scala, version in re.findall(r"io\.delta:delta-spark_([\d._]+):([\d.]+)", text):
            if (scala, version) not in coordinates:
                wrong.append(f"{path.relative_to(ROOT)}: delta-spark_{scala}:{version}")
        for version in re.findall(r"delta-spark==([\d.]+)", text):
            if version not in tested:
                wrong.append(f"{path.relative_to(ROOT)}: delta-spark=={version}")
    assert wrong == []
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    section = deploy.split("### Tested PySpark and Delta versions", 1)[1].split("\n#", 1)[0]
    rows = re.findall(
        r"^\| ([\d.]+) \| ([\d.]+) \| `io\.delta:delta-spark_([\d.]+):([\d.]+)`", section, re.M
    )
    assert {r[0]: (r[1], r[2]) for r in rows} == TESTED_PAIRS
    assert all(delta == coordinate for _, delta, _, coordinate in rows)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^PYSPARK35 := ([\d.]+)$", makefile, re.M)[1] in TESTED_PAIRS  # type: ignore[index]


def test_the_tested_delta_35_is_the_shared_one() -> None:
    shared = sorted((ROOT.parent / "shared" / "delta-spark-3.5").glob("delta-spark_*.jar"))
    if not shared:
        pytest.skip("Delta's jars are not beside the repository here")
    delta, scala = TESTED_PAIRS["3.5.9"]
    assert shared[0].name == f"delta-spark_{scala}-{delta}.jar"


# -- the user's language ---------------------------------------------------------------------

#: Words that are the project's, not the user's: issue numbers, benchmark codes, the
#: source posts, internal names (and what they stand for, said instead in the docs).
INTERNAL = {
    r"\bissues? #?\d+": "an issue number",
    r"\(P\d+\)|\bP\d+\b": "a benchmark code (say what was measured)",
    r"\bseed \d{3}\b|\bseed posts?\b|\bseeds/": "the source posts",
    r"\bSPEC\b|SPEC\.md|DESIGN\.md": "the project's own specification",
    r"\bscenarios? \d+": "a scenario number",
    r"Sail Connect": "Sail's Spark Connect session (say: the embedded session)",
    r"\bwriter epoch\b": "the fencing counter (say: the writer role or claim)",
    r"\bleftover_versions\b": "an attribute name",
    # (Flink's own interface names, such as SupportsPreCommitTopology, are the user's.)
    r"\bParticipant\b|\bSupports(?:Fencing|Coalescing|Quarantine|DirectPublish)\b": (
        "an internal port name (say what the engine does)"
    ),
    r"compile_merge|\bMergePlan\b|\bapply_to\b": "an internal function (say what it does)",
    r"\bdeltasink[./](?:core|ops|backends|shapes|input|_\w+)\b": "a module path",
}
#: Pages for contributors whose headings users still meet (linked from user pages and
#: the README): their headings carry no internal words either.
HEADINGS_CHECKED = [ROOT / "docs" / "benchmarks.md", ROOT / "docs" / "reliability.md"]


def test_user_docs_speak_the_users_language() -> None:
    found = []
    for path in USER_DOCS:
        if not path.exists():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for pattern, what in INTERNAL.items():
                if re.search(pattern, line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()}")
    assert found == []


def test_headings_of_the_result_pages_speak_the_users_language() -> None:
    found = []
    for path in HEADINGS_CHECKED:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.startswith("#"):
                continue
            found += [
                f"{path.relative_to(ROOT)}:{number}: {what}: {line}"
                for pattern, what in INTERNAL.items()
                if re.search(pattern, line)
            ]
    assert found == []


def test_the_templates_speak_the_users_language() -> None:
    """The job templates' docstrings and comments are read by users too (both
    streaming templates said "seed 001")."""
    import ast

    found = []
    for path in sorted((ROOT / "jobs").glob("*.py")):
        source = path.read_text()
        text = (ast.get_docstring(ast.parse(source)) or "").splitlines()
        text += [line.split("#", 1)[1] for line in source.splitlines() if "#" in line]
        found += [
            f"{path.relative_to(ROOT)}: {what}: {line.strip()}"
            for line in text
            for pattern, what in INTERNAL.items()
            if re.search(pattern, line)
        ]
    assert found == []


def test_the_rule_catches_each_word() -> None:
    for sample in (
        "after issue 29",
        "(P6)",
        "seed 001",
        "the SPEC contract",
        "scenarios 11, 12",
        "4.2 (Sail Connect, classic)",
        "the writer epoch",
        "`leftover_versions`",
        "(`Participant`, `SupportsFencing`)",
        "from `compile_merge(...).to_sql(...)`",
        "`deltasink.backends.spark.conf.session_conf`",
        "(`deltasink/shapes/computed.py`)",
        "### Lost checkpoints (issue 24)",
        "## P1: overhead",
    ):
        assert any(re.search(p, sample) for p in INTERNAL), sample


#: ``make test``'s time as the README states it: the quiet figure and its machine
#: (docs/reliability.md, "The test suite's time"), not a loaded machine's.
SUITE_TIME = "7 min 46 s on a 2-core machine, measured alone"


def test_the_readme_states_the_quiet_suite_time_and_its_machine() -> None:
    text = " ".join((ROOT / "README.md").read_text().split())
    assert SUITE_TIME in text
    times = re.findall(r"(\d+(?:\.\d+)?) (?:minutes|min)\b[^.]*?(?:suite|make test)", text)
    times += re.findall(r"(?:suite|make test)[^.]*?(\d+(?:\.\d+)?) (?:minutes|min)\b", text)
    assert set(times) == {"7"}, times  # one figure, no rounded or loaded one beside it
    develop = " ".join((ROOT / "docs" / "develop.md").read_text().split())
    assert "7 min 46 s" in develop


# -- the API reference ---------------------------------------------------------------------


def test_the_api_reference_covers_every_public_name() -> None:
    """docs/reference/api.rst documents every name ``deltasink`` exports (it left out
    ``checks``, ``hooks``, ``SinkGroup`` and ``embedded_spark``, which the docs use) and
    every check the ``checks`` module offers; the errors come with ``deltasink.errors``."""
    import deltasink
    from deltasink import errors

    text = (ROOT / "docs" / "reference" / "api.rst").read_text()
    documented = set(re.findall(r"^\.\. auto\w+:: deltasink\.([\w.]+)", text, re.M))
    assert "errors" in documented
    missing = [
        name
        for name in deltasink.__all__
        if name != "__version__"
        and not hasattr(errors, name)
        and name not in documented
        and not any(d.startswith(f"{name}.") for d in documented)
    ]
    assert missing == []
    offered = ("no_nulls", "unique", "row_count_between", "row_count_within", "expect", "sql")
    assert {f"checks.{name}" for name in offered} <= documented
    assert {"hooks.optimize_every", "hooks.gc_every"} <= documented


# -- links -----------------------------------------------------------------------------------


def _slug(heading: str) -> str:
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {
        _slug(line.lstrip("#"))
        for line in path.read_text().splitlines()
        if re.match(r"^#{1,6} ", line)
    }


def test_relative_links_and_anchors_resolve() -> None:
    broken = []
    for path in DOCS:
        if not path.exists():
            continue
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        text = re.sub(r"`[^`\n]+`", "", text)  # code (a regular expression) is no link
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", link):
                continue
            file, _, anchor = link.partition("#")
            where = (path.parent / file).resolve() if file else path
            if not where.exists():
                broken.append(f"{path.relative_to(ROOT)}: {link}")
            elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
                broken.append(f"{path.relative_to(ROOT)}: {link} (no such heading)")
    assert broken == []


def test_the_counts_are_printed_for_the_record(capsys: pytest.CaptureFixture[str]) -> None:
    found = counts()
    with capsys.disabled():
        print(f"\n[docs code blocks] {json.dumps(dict(sorted(found.items())))}")
    assert sum(found.values()) == len(blocks())

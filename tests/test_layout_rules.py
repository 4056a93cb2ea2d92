"""The package's layout rules (issue 27), read from the source with ``ast``: the two engines
never import each other, the modules' imports form no cycle (every import counts: at module
level, under ``if TYPE_CHECKING:``, inside a function, and ``from package import name``,
which runs the package's ``__init__``), and no module grows past :data:`MAX_LINES` lines."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "deltasink"
MAX_LINES = 400
ENGINES = ("deltasink.backends.embedded", "deltasink.backends.spark")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(name: str, path: Path, *, top_level: bool) -> set[str]:
    """The ``deltasink`` modules ``name`` imports: all of them, or only those imported when it
    is imported (module level, not under ``if TYPE_CHECKING:``, not inside a function)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    known = modules()
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("deltasink"))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                if not target.startswith("deltasink"):
                    continue
                # ``from package import module`` imports the module; any other name
                # needs the package's own ``__init__``
                submodules = {f"{target}.{a.name}" for a in node.names} & known.keys()
                found.update(submodules)
                if len(submodules) < len(node.names):
                    found.add(target)
            elif isinstance(node, ast.If) and _type_checking(node):
                if not top_level:
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not top_level or isinstance(node, ast.ClassDef):
                    visit(node.body)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    children = getattr(node, field, None)
                    if isinstance(children, list):
                        visit([c for c in children if isinstance(c, ast.stmt)])
                        for handler in children:
                            if isinstance(handler, ast.ExceptHandler):
                                visit(handler.body)
                if not top_level:
                    for child in ast.walk(node):
                        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            visit(child.body)

    visit(tree.body)
    found.discard(name)
    return {m for m in found if m in known}


def engine_of(name: str) -> str | None:
    return next((e for e in ENGINES if name == e or name.startswith(e + ".")), None)


def engine_crossings(graph: dict[str, set[str]]) -> list[str]:
    crossings = []
    for name, targets in sorted(graph.items()):
        mine = engine_of(name)
        for target in sorted(targets):
            theirs = engine_of(target)
            if mine and theirs and mine != theirs:
                crossings.append(f"{name} imports {target}")
    return crossings


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_engines_never_import_each_other() -> None:
    graph = {name: imports(name, path, top_level=False) for name, path in modules().items()}
    assert engine_crossings(graph) == []


def test_no_import_cycle_between_modules() -> None:
    """No cycle even counting the imports that run later or never (a function's, a
    ``TYPE_CHECKING`` one): each is a dependency a reader must follow, and a cycle among
    them is one module that has to be understood as two."""
    graph = {name: imports(name, path, top_level=False) for name, path in modules().items()}
    assert cycles(graph) == []


def test_no_import_cycle_when_imported() -> None:
    graph = {name: imports(name, path, top_level=True) for name, path in modules().items()}
    assert cycles(graph) == []


def test_every_kind_of_import_is_counted(tmp_path: Path) -> None:
    """A ``TYPE_CHECKING`` import, a function's import and ``from package import name``
    (the package's ``__init__``) are edges of the graph the cycle rule reads."""
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from deltasink.backends import select_engine\n"
        "from deltasink import _faults\n"
        "if TYPE_CHECKING:\n"
        "    from deltasink.sink import DeltaSink\n"
        "def later():\n"
        "    from deltasink.backends import spark\n"
    )
    assert imports("deltasink.probe", source, top_level=False) == {
        "deltasink.backends",
        "deltasink._faults",
        "deltasink.sink",
        "deltasink.backends.spark",
    }
    assert imports("deltasink.probe", source, top_level=True) == {
        "deltasink.backends",
        "deltasink._faults",
    }


def line_count(name: str) -> int:
    return len(modules()[name].read_text().splitlines())


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_over_the_line_limit(name: str) -> None:
    lines = line_count(name)
    assert lines <= MAX_LINES, f"{name} has {lines} lines (at most {MAX_LINES}): split it by job"


def test_the_rules_can_fail() -> None:
    """The checks above find what they look for, on a made-up graph."""
    graph = {
        "deltasink.backends.spark.logs": {"deltasink.backends.embedded.publish"},
        "deltasink.a": {"deltasink.b"},
        "deltasink.b": {"deltasink.a"},
    }
    assert engine_crossings(graph) == [
        "deltasink.backends.spark.logs imports deltasink.backends.embedded.publish"
    ]
    assert cycles(graph) == [["deltasink.a", "deltasink.b"]]


def reserved_spellings(path: Path) -> list[str]:
    """The string constants of ``path`` (docstrings aside) that spell the reserved
    ``_deltasink_`` prefix themselves."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        f"{path.name}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and "_deltasink_" in node.value
        and id(node) not in docstrings
    ]


def test_reserved_names_are_spelled_in_one_module() -> None:
    """Every ``_deltasink_`` name (a column, the staging suffix, a cached attribute) comes
    from :mod:`deltasink.reserved`; no other module spells the prefix."""
    found = [
        spelling
        for name, path in modules().items()
        if name != "deltasink.reserved"
        for spelling in reserved_spellings(path)
    ]
    assert found == []


def test_the_reserved_rule_can_fail(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        '"""Writes ``_deltasink_x``."""\nX = "_deltasink_x"\nY = f"a _deltasink_{X}"\n'
    )
    assert reserved_spellings(source) == [
        "probe.py:2: '_deltasink_x'",
        "probe.py:3: 'a _deltasink_'",
    ]


ENGINE_NAMES = {"embedded", "spark"}


def _engine_value(node: ast.expr) -> bool:
    """Whether ``node`` names an engine choice (``engine``, ``chosen``, ``self.engine``)."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
    return isinstance(name, str) and ("engine" in name or name == "chosen")


def engine_branches(path: Path) -> list[str]:
    """The comparisons of an engine choice with an engine's name in ``path``
    (``engine == "spark"``, ``chosen in ("embedded", ...)``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        constants = [
            c
            for o in operands
            for c in (o.elts if isinstance(o, (ast.Tuple, ast.List, ast.Set)) else [o])
            if isinstance(c, ast.Constant)
        ]
        if any(c.value in ENGINE_NAMES for c in constants) and any(
            _engine_value(o) for o in operands
        ):
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_engines_are_registered_not_branched_on() -> None:
    """What differs between engines is an entry of ``deltasink.backends.ENGINES``; no
    module compares an engine choice with an engine's name (the SQL dialect named
    ``spark`` is another thing)."""
    found = [branch for path in modules().values() for branch in engine_branches(path)]
    assert found == []


def test_the_engine_rule_can_fail(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        'a = engine == "spark"\nb = self.chosen_engine in ("embedded", "z")\n'
        'c = engine == "auto"\nd = dialect == "spark"\ne = chosen != "embedded"\n'
    )
    assert engine_branches(source) == ["probe.py:1", "probe.py:2", "probe.py:5"]


def test_an_engine_is_opened_through_its_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """``connect`` and ``select_engine`` read :data:`deltasink.backends.ENGINES`: an entry
    replaced there is the engine the facade opens and asks."""
    from deltasink.backends import ENGINES, EngineEntry, connect, select_engine
    from deltasink.backends.ports import EngineParts, SinkConfig

    opened: list[SinkConfig] = []
    parts = EngineParts(commit=None, maintenance=None)  # type: ignore[arg-type]
    refused: list[object] = []

    def open_fake(config: SinkConfig) -> EngineParts:
        opened.append(config)
        return parts

    entry = EngineEntry(
        open_fake,
        writes_catalog_tables=True,
        commits_through_storage_options=False,
        refuse_session=refused.append,
    )
    monkeypatch.setitem(ENGINES, "spark", entry)  # type: ignore[index]
    config = SinkConfig(target="/t", staging="/s", app_id="a", merge=None)
    assert connect("spark", config) is parts
    assert opened == [config]
    assert select_engine("spark", "session", "/t") == ("spark", "engine='spark' was given")
    assert refused == ["session"]


DESIGN_NOTES = PACKAGE.parent / "docs" / "design-notes.md"
#: Imports that go up a floor, each named in the map's exceptions (docs/design-notes.md).
UPWARD = {
    ("deltasink.input.rows", "deltasink.backends.embedded.sail"),
    ("deltasink.ops.checkpoint", "deltasink.stream.checkpoint"),
    ("deltasink.ops.placing", "deltasink.stream.placing"),
}


def house_map(text: str) -> list[tuple[str, list[str]]]:
    """The floors of the map in ``text`` (highest first): ``(floor, [module, ...])``
    with every name made absolute (``__init__`` is ``deltasink`` itself)."""
    block = text.split("<!-- house-map", 1)[1].split("<!-- /house-map -->", 1)[0]
    lines = block.split("```text", 1)[1].split("```", 1)[0].strip().splitlines()
    return [
        (floor, ["deltasink" if n == "__init__" else f"deltasink.{n}" for n in names])
        for floor, *names in (line.split() for line in lines)
    ]


def floor_of(name: str, floors: list[tuple[str, list[str]]]) -> int | None:
    """The index of the floor holding module ``name`` (the longest name that is it or a
    package of it), or ``None``."""
    best: tuple[int, int] | None = None
    for index, (_, names) in enumerate(floors):
        for listed in names:
            if (name == listed or name.startswith(listed + ".")) and (
                best is None or len(listed) > best[1]
            ):
                best = (index, len(listed))
    return None if best is None else best[0]


def upward_imports(graph: dict[str, set[str]], floors: list[tuple[str, list[str]]]) -> list[str]:
    """The imports of ``graph`` that go to a higher floor (a lower index)."""
    found = []
    for name, targets in sorted(graph.items()):
        mine = floor_of(name, floors)
        for target in sorted(targets):
            theirs = floor_of(target, floors)
            upward = mine is not None and theirs is not None and theirs < mine
            if upward and (name, target) not in UPWARD:
                assert mine is not None
                assert theirs is not None
                found.append(f"{name} ({floors[mine][0]}) imports {target} ({floors[theirs][0]})")
    return found


def test_the_map_of_the_house_matches_the_code() -> None:
    """docs/design-notes.md opens with the map of the house: every name on it is a module
    or package, every module is on one floor, every import goes down or sideways."""
    text = DESIGN_NOTES.read_text()
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[0] == "## The house: a map"  # it opens the notes
    floors = house_map(text)
    known = modules()
    listed = [name for _, names in floors for name in names]
    assert [n for n in listed if n not in known] == []
    assert len(listed) == len(set(listed))
    assert [m for m in known if floor_of(m, floors) is None] == []
    graph = {name: imports(name, path, top_level=False) for name, path in known.items()}
    assert upward_imports(graph, floors) == []
    for name, target in UPWARD:
        assert target in graph[name], f"{name} no longer imports {target}: drop the exception"
        assert f"`{name.removeprefix('deltasink.')}`" in text


def test_the_map_rule_can_fail() -> None:
    floors = house_map(
        "<!-- house-map -->\n```text\ntop  sink\nlow  core errors\n```\n<!-- /house-map -->"
    )
    assert floors == [("top", ["deltasink.sink"]), ("low", ["deltasink.core", "deltasink.errors"])]
    assert floor_of("deltasink.core.protocol", floors) == 1
    assert floor_of("deltasink.stream", floors) is None
    graph = {"deltasink.core.protocol": {"deltasink.sink", "deltasink.errors"}}
    assert upward_imports(graph, floors) == [
        "deltasink.core.protocol (low) imports deltasink.sink (top)"
    ]


def borrowed_attributes(path: Path) -> list[str]:
    """The classes of ``path`` that declare attributes (``name: Type`` in the class body)
    they never assign: a mixin using its host's attributes (dataclasses, protocols and
    named tuples declare fields, which is another thing)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [ast.unparse(b) for b in node.bases]
        decorators = {ast.unparse(d).split("(")[0] for d in node.decorator_list}
        if decorators & {"dataclass", "dataclasses.dataclass"} or any(
            "Protocol" in b or b in ("NamedTuple", "TypedDict") for b in bases
        ):
            continue
        declared = [
            s.target.id
            for s in node.body
            if isinstance(s, ast.AnnAssign) and s.value is None and isinstance(s.target, ast.Name)
        ]
        assigned = {
            e.attr
            for sub in ast.walk(node)
            if isinstance(sub, (ast.Assign, ast.AnnAssign))
            for target in (sub.targets if isinstance(sub, ast.Assign) else [sub.target])
            for e in ast.walk(target)
            if isinstance(e, ast.Attribute)
            and isinstance(e.value, ast.Name)
            and e.value.id == "self"
        }
        missing = [d for d in declared if d not in assigned]
        if missing:
            found.append(f"{path.name}:{node.name} {missing}")
    return found


def test_no_class_uses_attributes_it_does_not_define() -> None:
    """Parts, not mixins (issue 45): a class uses what it defines or receives, so a
    reader can tell from its body what it may touch."""
    found = [b for path in modules().values() for b in borrowed_attributes(path)]
    assert found == []


def test_the_mixin_rule_can_fail(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "class Mixin:\n    app_id: str\n    _core: object\n"
        "    def f(self):\n        self._core = 1\n        return self.app_id\n"
        "class Part:\n    app_id: str\n    def __init__(self):\n        self.app_id = 'a'\n"
    )
    assert borrowed_attributes(source) == ["probe.py:Mixin ['app_id']"]

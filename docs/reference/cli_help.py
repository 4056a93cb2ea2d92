"""A Sphinx directive for the ``deltasink`` command's reference: ``.. deltasink-help::``
inserts, for the command and each subcommand, its ``--help`` text as the command
itself prints it, so the page cannot drift from the code."""

from __future__ import annotations

import os
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

WIDTH = "88"


def help_text(*args: str) -> str:
    """``deltasink ARGS --help`` as printed on an 88-column terminal."""
    from typer.testing import CliRunner

    from deltasink.cli import app

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        result = CliRunner().invoke(app, [*args, "--help"], prog_name="deltasink")
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before
    if result.exit_code != 0:
        raise RuntimeError(f"deltasink {' '.join(args)} --help failed: {result.output}")
    return result.output.rstrip()


def commands() -> list[str]:
    """The subcommands, in the order ``deltasink --help`` lists them."""
    from deltasink.cli import app

    return [c.name or c.callback.__name__ for c in app.registered_commands if c.callback]


class DeltasinkHelp(SphinxDirective):
    """One section per command: its name, then its ``--help``."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        found: list[nodes.Node] = [nodes.literal_block(text=help_text())]
        for name in commands():
            section = nodes.section(ids=[f"command-{name}"])
            section += nodes.title(text=f"deltasink {name}")
            section += nodes.literal_block(text=help_text(name))
            found.append(section)
        return found


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("deltasink-help", DeltasinkHelp)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

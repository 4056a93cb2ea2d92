"""Sphinx configuration of the reference site (``make docs``): the public API and the
``deltasink`` command, generated from the docstrings. Built with warnings as
errors, without a network (no intersphinx)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

from deltasink import __version__  # noqa: E402

project = "deltasink"
author = "deltasink developers"
copyright = "deltasink developers, Apache License 2.0"
release = version = __version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "cli_help",
]
root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_class_signature = "separated"
autodoc_default_options = {"members": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_attr_annotations = True

# Cross-references are not checked (nitpicky): the docstrings name errors both as
# ``deltasink.errors.X`` and as ``X``, and other libraries have no inventory offline.

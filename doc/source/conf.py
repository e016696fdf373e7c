"""Sphinx configuration of Fornace's documentation.

Build it from the checkout's root (``tests/doc/test_docs.py`` does, warnings
as errors)::

    .venv/bin/python -m sphinx -W -b html doc/source doc/build/html

The references are generated from the code: the configuration options by
oslo.config's extension, the access rules by oslo.policy's, the command line
from the ``fornace`` command's parsers and the REST API from the app's
OpenAPI schema (the two extensions of ``_ext/``).
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

project = "Fornace"
copyright = "Fornace contributors"  # noqa: A001 (Sphinx's name)
author = "Fornace contributors"
try:
    from importlib.metadata import version as _version

    release = _version("fornace")
except Exception:  # a checkout that is not installed
    release = "0.1.0"
version = release

extensions = [
    "oslo_config.sphinxext",     # .. show-options:: (reference/config)
    "oslo_policy.sphinxext",     # .. show-policy:: (reference/policy)
    "fornace_cli",               # .. fornace-cli:: (reference/cli)
    "fornace_api",               # .. fornace-api:: (reference/api)
    "fornace_options",           # .. fornace-options:: (reference/config)
]

exclude_patterns: list[str] = []
templates_path: list[str] = []
html_theme = "alabaster"
html_theme_options = {
    "description": "Environments of services, deployed by Murano 0.2 style workflows",
    "fixed_sidebar": True,
}
html_static_path: list[str] = []
html_title = "Fornace documentation"
pygments_style = "sphinx"
# the literal blocks are shell sessions, configuration files and JSON: no
# language guessed for them (a block that does not parse as the guess is a
# warning, hence an error)
highlight_language = "none"

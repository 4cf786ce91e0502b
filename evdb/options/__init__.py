"""The node's options: one declarative table from which every form comes.

Each option of :data:`OPTIONS` has a PascalCase name (the YAML key), a ``--kebab-case`` command-line
flag and a ``SERVICE_UPPER_SNAKE`` environment variable; :class:`Options` has one snake_case
attribute per option. Precedence: command line > environment > YAML file (``--config FILE``) > default.
Unknown names, wrong types and out-of-range values raise :class:`~evdb.errors.InvalidOption` naming
the option and what it accepts. docs/options.md is generated: ``python -m evdb.options --markdown``.

Modules: ``values`` (reading raw values), ``spec`` (one option), ``table`` (all options: add new
ones there), ``model`` (``Options``), ``sources`` (YAML file, environment), ``arguments`` (command
line), ``loading`` (precedence, load and reload), ``markdown`` (the docs).
"""

from __future__ import annotations

from evdb.options.arguments import add_arguments
from evdb.options.loading import load_options, options_from_namespace, reload_options
from evdb.options.markdown import render_markdown
from evdb.options.model import Options, deprecation_warnings, derived_index, effective_configuration
from evdb.options.spec import ENV_PREFIX, OptionSpec
from evdb.options.table import LOG_LEVELS, OPTIONS

__all__ = [
    "ENV_PREFIX",
    "LOG_LEVELS",
    "OPTIONS",
    "OptionSpec",
    "Options",
    "add_arguments",
    "deprecation_warnings",
    "derived_index",
    "effective_configuration",
    "load_options",
    "options_from_namespace",
    "reload_options",
    "render_markdown",
]

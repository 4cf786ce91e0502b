"""Every option of the table, with wrong types and out-of-range values, from each of its three
sources (command line, environment, YAML file): refused with InvalidOption naming the option and
the source, never accepted and never an unhandled exception.

The cases are derived from evdb/options/table.py, so a new option is tried without a new test.
"""

from __future__ import annotations

import json

import pytest

from evdb.errors import InvalidOption
from evdb.options import load_options
from evdb.options.table import OPTIONS

#: a value of the wrong type, per option type (strings and paths accept any text: only YAML lists)
WRONG_TYPE = {
    "bool": ["maybe", "2"],
    "int": ["abc", "1.5", "0x10"],
    "float": ["abc", "1,5"],
    "size": ["12 parsecs", "-3", "1.5.2KiB"],
    "ip": ["999.1.1.1", "localhost", "1.2.3"],
    "host": ["-leading-dash", "under_score.example", "a..b", "x" * 64],
    "enum": ["NoSuchChoice"],
    "str": [],
    "path": [],
}


def bad_values(spec) -> list[str]:
    values = list(WRONG_TYPE[spec.type])
    if spec.minimum is not None:
        values.append(str(int(spec.minimum) - 1) if spec.type != "float" else str(spec.minimum - 1))
    if spec.maximum is not None:
        values.append(str(int(spec.maximum) + 1) if spec.type != "float" else str(spec.maximum * 2 + 1))
    if spec.choices and spec.type != "enum":  # e.g. a page size that must be a power of two
        values.append("3" if 3 not in spec.choices else "5")
    return values


def _yaml(spec, value) -> str:
    encoded = json.dumps(value)  # JSON is YAML: the value keeps its type (a list, a string ...)
    if spec.yaml_section:
        return f"{spec.yaml_section}:\n  {spec.name[len(spec.yaml_section) :]}: {encoded}\n"
    return f"{spec.name}: {encoded}\n"


def _sources(spec, value: str, tmp_path):
    yield "command line", [f"{spec.flag}={value}"], {}
    yield "environment variable", [], {spec.env: value}
    if spec.name != "Config":
        path = tmp_path / "node.yaml"
        path.write_text(_yaml(spec, value))
        yield "YAML file", ["--config", str(path)], {}


def _refused(argv, env) -> str | None:
    try:
        load_options(argv, env)
    except InvalidOption as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("spec", OPTIONS, ids=[o.name for o in OPTIONS])
def test_wrong_types_and_out_of_range_values_are_refused_from_every_source(spec, tmp_path):
    tried = 0
    for value in bad_values(spec):
        for source, argv, env in _sources(spec, value, tmp_path):
            message = _refused(argv, env)
            assert message is not None, f"{spec.name}={value!r} from the {source} was accepted"
            assert spec.name in message and source.split()[0] in message, message
            tried += 1
    # a YAML list or mapping is never a valid scalar value
    if spec.name != "Config":
        for value in ([1, 2], {"a": 1}):
            path = tmp_path / "node.yaml"
            path.write_text(_yaml(spec, value))
            message = _refused(["--config", str(path)], {})
            assert message is not None and spec.name in message, f"{spec.name}: {value!r} accepted from YAML"
            tried += 1
    assert tried > 0 or spec.name == "Config"

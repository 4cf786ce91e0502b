"""Test modules are imported by their base name (the test folders have no __init__.py), so two test
files with one name in different folders break the collection of the whole suite; say which."""

from collections import defaultdict
from pathlib import Path


def test_every_test_module_has_its_own_name():
    names: dict[str, list[str]] = defaultdict(list)
    tests = Path(__file__).parent
    for path in tests.rglob("*.py"):
        if path.name != "conftest.py" and "__pycache__" not in path.parts:
            names[path.name].append(str(path.relative_to(tests)))
    assert {name: where for name, where in names.items() if len(where) > 1} == {}

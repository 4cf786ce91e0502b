"""Reading a scenario file: compose the YAML (keeping every node's line), check it against the schema
and build a :class:`Scenario`. Every problem is reported with its line, before anything runs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evdb.scenario.schema import (
    CLUSTER_FIELDS,
    COMMON_STEP_FIELDS,
    DASHBOARD_FIELDS,
    EVDB_PROGRAMS,
    JSON_OPERATORS,
    STEP_KINDS,
    TOP_LEVEL_FIELDS,
    Field,
)

__all__ = ["Scenario", "ScenarioInvalid", "Step", "load_scenario", "parse_scenario"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*$")


class ScenarioInvalid(Exception):
    """The file does not follow the schema; ``problems`` are ``(line, message)`` pairs."""

    def __init__(self, path: str, problems: list[tuple[int, str]]) -> None:
        self.path = path
        self.problems = sorted(problems)
        super().__init__("\n".join(f"{path}:{line}: {message}" for line, message in self.problems))


@dataclass(frozen=True)
class Step:
    index: int  # 1-based
    line: int
    kind: str
    args: dict[str, Any]

    def describe(self) -> str:
        return f"step {self.index} (line {self.line}) {self.kind}"


@dataclass
class Scenario:
    path: str
    name: str
    description: str
    cluster: dict[str, Any]
    dashboard: dict[str, Any]
    steps: list[Step] = field(default_factory=list)


def load_scenario(path: str | Path) -> Scenario:
    text = Path(path).read_text(encoding="utf-8")
    return parse_scenario(text, str(path))


def parse_scenario(text: str, path: str = "<scenario>") -> Scenario:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise ScenarioInvalid(path, [(line, f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from None
    checker = _Checker()
    scenario = checker.scenario(root, path)
    if checker.problems:
        raise ScenarioInvalid(path, checker.problems)
    assert scenario is not None
    return scenario


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


_constructor = yaml.SafeLoader("")


def _value(node: yaml.Node) -> Any:
    return _constructor.construct_object(node, deep=True)


class _Checker:
    def __init__(self) -> None:
        self.problems: list[tuple[int, str]] = []

    def problem(self, node: yaml.Node | int, message: str) -> None:
        self.problems.append((node if isinstance(node, int) else _line(node), message))

    def mapping(
        self, node: yaml.Node | None, fields: tuple[Field, ...], where: str, line: int
    ) -> dict[str, Any] | None:
        """Check a mapping against its fields; the values with defaults filled in."""
        if node is None or (isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null")):
            pairs: list[tuple[yaml.Node, yaml.Node]] = []
        elif not isinstance(node, yaml.MappingNode):
            self.problem(node, f"{where} must be a mapping")
            return None
        else:
            pairs = node.value
            line = _line(node)
        known = {f.name: f for f in fields}
        out: dict[str, Any] = {}
        present: set[str] = set()
        for key_node, value_node in pairs:
            key = _value(key_node)
            spec = known.get(key) if isinstance(key, str) else None
            if spec is None:
                names = ", ".join(known)
                self.problem(key_node, f"unknown field {key!r} in {where} (fields: {names})")
                continue
            if key in out:
                self.problem(key_node, f"field {key!r} given twice in {where}")
                continue
            present.add(key)
            value = self.value(value_node, spec, where)
            if value is not _BAD:
                out[key] = value
        for spec in fields:
            if spec.name in present:
                continue
            if spec.required:
                self.problem(line, f"missing field {spec.name!r} in {where}")
            elif spec.default is not None:
                out[spec.name] = spec.default
        return out

    def value(self, node: yaml.Node, spec: Field, where: str) -> Any:
        value = _value(node)
        label = f"{spec.name!r} in {where}"
        ok = {
            "str": isinstance(value, str),
            "int": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, int | float) and not isinstance(value, bool),
            "bool": isinstance(value, bool),
            "map": isinstance(value, dict),
            "list": isinstance(value, list),
            "keys": isinstance(value, str)
            or (isinstance(value, list) and all(isinstance(v, str) for v in value)),
            "status": (isinstance(value, int) and not isinstance(value, bool))
            or (isinstance(value, list) and value and all(isinstance(v, int) for v in value)),
            "any": True,
        }[spec.kind]
        if spec.kind == "str" and isinstance(value, int | float) and not isinstance(value, bool):
            value, ok = str(value), True  # `press: 2`, `value: 5`: a number typed as text
        if not ok:
            expected = {
                "str": "a string",
                "int": "an integer",
                "number": "a number",
                "bool": "true or false",
                "map": "a mapping",
                "list": "a list",
                "keys": "a string or a list of strings",
                "status": "a status code or a list of them",
            }[spec.kind]
            self.problem(node, f"{label} must be {expected}, not {value!r}")
            return _BAD
        if spec.choices and value not in spec.choices:
            self.problem(node, f"{label} must be one of {', '.join(map(str, spec.choices))}, not {value!r}")
            return _BAD
        if spec.minimum is not None and isinstance(value, int | float) and value < spec.minimum:
            self.problem(node, f"{label} must be at least {spec.minimum:g}, not {value!r}")
            return _BAD
        if spec.maximum is not None and isinstance(value, int | float) and value > spec.maximum:
            self.problem(node, f"{label} must be at most {spec.maximum:g}, not {value!r}")
            return _BAD
        return value

    def scenario(self, root: yaml.Node | None, path: str) -> Scenario | None:
        if root is None:
            self.problem(1, "the file is empty")
            return None
        top = self.mapping(root, TOP_LEVEL_FIELDS, "the scenario", 1)
        if top is None:
            return None
        nodes = {_value(k): v for k, v in root.value}
        name = top.get("name", "")
        if name and not _NAME.match(name):
            self.problem(nodes["name"], f"'name' must be letters, digits and '-', not {name!r}")
        cluster = self.mapping(nodes.get("cluster"), CLUSTER_FIELDS, "cluster", _line(root)) or {}
        if "cluster" in nodes and cluster.get("nodes", 1) + cluster.get("replicas", 0) > 9:
            self.problem(nodes["cluster"], "a scenario's cluster has at most 9 nodes and replicas in all")
        if cluster.get("archive") and cluster.get("replicas", 0) < 1:
            self.problem(
                nodes["cluster"], "an archive needs a read-only replica to be its archiver (replicas: 1)"
            )
        dashboard = self.mapping(nodes.get("dashboard"), DASHBOARD_FIELDS, "dashboard", _line(root)) or {}
        size = dashboard.get("size")
        if size is not None and not (
            len(size) == 2 and all(isinstance(v, int) and 20 <= v <= 400 for v in size)
        ):
            self.problem(
                nodes.get("dashboard", root), "'size' in dashboard must be [columns, rows], each 20 to 400"
            )
        steps: list[Step] = []
        steps_node = nodes.get("steps")
        if isinstance(steps_node, yaml.SequenceNode):
            if not steps_node.value:
                self.problem(steps_node, "'steps' is empty")
            for index, item in enumerate(steps_node.value, start=1):
                step = self.step(index, item, cluster)
                if step is not None:
                    steps.append(step)
        self._check_screenshot_names(steps)
        return Scenario(path, name, top.get("description", ""), cluster, dashboard, steps)

    def step(self, index: int, node: yaml.Node, cluster: dict[str, Any]) -> Step | None:
        where = f"step {index}"
        if not isinstance(node, yaml.MappingNode) or len(node.value) != 1:
            self.problem(node, f"{where} must be a mapping with one key, the step's kind (e.g. `- press: s`)")
            return None
        key_node, value_node = node.value[0]
        kind_name = _value(key_node)
        kind = STEP_KINDS.get(kind_name) if isinstance(kind_name, str) else None
        if kind is None:
            self.problem(key_node, f"unknown step {kind_name!r} in {where} (steps: {', '.join(STEP_KINDS)})")
            return None
        where = f"step {index} ({kind.name})"
        fields = (*kind.fields, *COMMON_STEP_FIELDS)
        if kind.shorthand and not isinstance(value_node, yaml.MappingNode):
            spec = kind.field(kind.shorthand)
            assert spec is not None
            value = self.value(value_node, spec, where)
            if value is _BAD:
                return None
            args = self.mapping(None, tuple(f for f in fields if f.name != spec.name), where, _line(node))
            if args is None:
                return None
            args[spec.name] = value
        else:
            args = self.mapping(value_node, fields, where, _line(node))
            if args is None:
                return None
        self._check_step(kind.name, args, value_node, where, cluster)
        return Step(index, _line(node), kind.name, args)

    def _check_step(self, kind: str, args: dict, node: yaml.Node, where: str, cluster: dict) -> None:
        if kind in ("expect_http", "wait_http"):
            json_node = _child(node, "json") or node
            for path, expected in (args.get("json") or {}).items():
                if isinstance(expected, dict):
                    unknown = set(expected) - set(JSON_OPERATORS)
                    if len(expected) != 1 or unknown:
                        self.problem(
                            _child(json_node, path) or json_node,
                            f"{where}: expectation of {path!r} must be a value or one operator of "
                            f"{', '.join(JSON_OPERATORS)}",
                        )
            if not (args.get("json") or args.get("contains") or "status" in args):
                self.problem(node, f"{where} checks nothing: give status, json or contains")
        if kind in ("expect_screen", "wait_screen"):
            if not (args.get("contains") or args.get("not_contains") or args.get("matches")):
                self.problem(node, f"{where} checks nothing: give contains, not_contains or matches")
            if args.get("matches"):
                try:
                    re.compile(args["matches"])
                except re.error as exc:
                    self.problem(node, f"{where}: 'matches' is not a regular expression: {exc}")
        if kind == "run":
            argv = args.get("argv") or []
            if not argv or not all(isinstance(a, str | int | float) for a in argv):
                self.problem(node, f"{where}: 'argv' must be a non-empty list of strings")
            elif argv[0] not in EVDB_PROGRAMS:
                self.problem(node, f"{where}: 'argv' must start with one of {', '.join(EVDB_PROGRAMS)}")
        if kind == "screenshot" and not _NAME.match(args.get("name", "") or "-"):
            self.problem(node, f"{where}: 'name' must be letters, digits and '-'")
        if kind == "http" and "save" in args:
            for var, path in args["save"].items():
                if not isinstance(var, str) or not isinstance(path, str):
                    self.problem(node, f"{where}: 'save' maps variable names to JSON paths (strings)")
        if kind == "consume" and "expect" in args:
            expect = args["expect"]
            if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in expect):
                self.problem(
                    _child(node, "expect") or node, f"{where}: 'expect' must list event numbers (0 or more)"
                )
            elif len(expect) != args.get("count"):
                self.problem(
                    _child(node, "expect") or node,
                    f"{where}: 'expect' lists {len(expect)} event numbers for a count of {args.get('count')}",
                )
        if kind in ("create_subscription", "consume"):
            for name in ("stream", "group"):
                if args.get(name) == "":
                    self.problem(node, f"{where}: '{name}' must not be empty")
            if args.get("stream") == "$all" and kind == "create_subscription":
                self.problem(node, f"{where}: groups to $all are created over gRPC only (as KurrentDB)")
        if kind == "restart" and args.get("node") in ("leader", "follower", "replica"):
            self.problem(node, f"{where}: restart names a node (node1, …, or killed), not a role")

    def _check_screenshot_names(self, steps: list[Step]) -> None:
        seen: dict[str | None, Step] = {}  # by name (a screenshot may have none)
        for step in steps:
            if step.kind == "screenshot":
                name = step.args.get("name")
                if name in seen:
                    self.problem(
                        step.line, f"screenshot name {name!r} is already used at line {seen[name].line}"
                    )
                seen[name] = step


_BAD = object()


def _child(node: yaml.Node, key: str) -> yaml.Node | None:
    """The value node under ``key`` of a mapping node (for the line of a problem inside it)."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                return value_node
    return None

"""Expectations on JSON answers: a dotted path (``chunks[0].executed``) and a value or an operator."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MISSING", "check_json", "describe_expected", "lookup"]

MISSING = object()
_PART = re.compile(r"([^.\[\]]+)|\[(-?\d+)\]")


def lookup(document: Any, path: str) -> Any:
    """The value at ``path`` (``a.b[0].c``; a key may be a number, as chunk weights' are), or MISSING."""
    current = document
    for match in _PART.finditer(path):
        key, index = match.groups()
        if index is not None:
            if not isinstance(current, list):
                return MISSING
            try:
                current = current[int(index)]
            except IndexError:
                return MISSING
        elif isinstance(current, dict) and key in current:
            current = current[key]
        elif isinstance(current, list) and key.lstrip("-").isdigit():
            try:
                current = current[int(key)]
            except IndexError:
                return MISSING
        else:
            return MISSING
    return current


def _holds(actual: Any, operator: str, expected: Any) -> bool:
    if operator == "exists":
        return (actual is not MISSING) == bool(expected)
    if actual is MISSING:
        return False
    try:
        if operator == "eq":
            return actual == expected
        if operator == "ne":
            return actual != expected
        if operator == "gt":
            return actual > expected
        if operator == "gte":
            return actual >= expected
        if operator == "lt":
            return actual < expected
        if operator == "lte":
            return actual <= expected
        if operator == "contains":
            return expected in actual
        if operator == "len":
            return len(actual) == expected
        if operator == "in":
            return actual in expected
    except TypeError:
        return False
    raise ValueError(f"unknown operator {operator}")


def describe_expected(expected: Any) -> str:
    if isinstance(expected, dict) and len(expected) == 1:
        ((operator, value),) = expected.items()
        words = {"eq": "=", "ne": "≠", "gt": ">", "gte": "≥", "lt": "<", "lte": "≤"}
        if operator in words:
            return f"{words[operator]} {json.dumps(value)}"
        if operator == "exists":
            return "present" if value else "absent"
        return f"{operator} {json.dumps(value)}"
    return f"= {json.dumps(expected)}"


def check_json(document: Any, expectations: dict[str, Any]) -> list[str]:
    """Each failed expectation as ``path: expected …, saw …``; empty when all hold."""
    failures = []
    for path, expected in expectations.items():
        actual = lookup(document, path)
        if isinstance(expected, dict) and len(expected) == 1:
            ((operator, value),) = expected.items()
        else:
            operator, value = "eq", expected
        if not _holds(actual, operator, value):
            seen = "nothing (the path is absent)" if actual is MISSING else json.dumps(actual)[:300]
            failures.append(f"{path}: expected {describe_expected(expected)}, saw {seen}")
    return failures

"""The persistent subscription steps of a scenario (create_subscription, consume) are validated with
their line before anything runs, and get their defaults."""

from __future__ import annotations

import pytest

from evdb.scenario import ScenarioInvalid, parse_scenario

TEXT = """\
name: subs
cluster: {nodes: 3}
steps:
  - create_subscription: {stream: orders-1, group: workers, settings: {minCheckPointCount: 1}}
  - consume: {stream: orders-1, group: workers, count: 2, action: park, expect: [3, 4]}
"""


def problems(text: str) -> list[tuple[int, str]]:
    with pytest.raises(ScenarioInvalid) as info:
        parse_scenario(text, "t.yaml")
    return info.value.problems


def test_the_steps_and_their_defaults():
    create, consume = parse_scenario(TEXT, "t.yaml").steps
    assert create.args == {
        "stream": "orders-1",
        "group": "workers",
        "settings": {"minCheckPointCount": 1},
        "node": "leader",
    }
    assert consume.args == {
        "stream": "orders-1",
        "group": "workers",
        "count": 2,
        "action": "park",
        "expect": [3, 4],
        "node": "leader",
        "timeout": 30,
    }
    bare = parse_scenario(TEXT.replace(", action: park, expect: [3, 4]", ""), "t.yaml").steps[1]
    assert bare.args["action"] == "ack" and "expect" not in bare.args


@pytest.mark.parametrize(
    ("change", "line", "message"),
    [
        (
            "action: park",
            5,
            "'action' in step 2 (consume) must be one of ack, park, retry, skip, stop, not 'keep'",
        ),
        ("expect: [3, 4]", 5, "step 2 (consume): 'expect' lists 3 event numbers for a count of 2"),
        ("expect: [3, 4]", 5, "step 2 (consume): 'expect' must list event numbers (0 or more)"),
        ("count: 2", 5, "'count' in step 2 (consume) must be at most 100, not 101"),
        ("stream: orders-1, group: workers, settings", 4, "groups to $all are created over gRPC only"),
        ("group: workers, settings", 4, "missing field 'group' in step 1 (create_subscription)"),
    ],
)
def test_bad_fields_are_reported_with_their_line(change, line, message):
    replacement = {
        "action: park": "action: keep",
        "expect: [3, 4]": "expect: [3, 4, 5]" if "3 event" in message else "expect: [3, x]",
        "count: 2": "count: 101",
        "stream: orders-1, group: workers, settings": "stream: $all, group: workers, settings",
        "group: workers, settings": "settings",
    }[change]
    found = problems(TEXT.replace(change, replacement, 1))
    assert any(at == line and message in text for at, text in found), found

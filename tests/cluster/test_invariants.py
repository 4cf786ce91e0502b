"""The fault soak's invariant checker (invariants.py) on hand-made histories: in-process, fast."""

from __future__ import annotations

from invariants import (
    ACKED,
    REFUSED,
    UNKNOWN,
    AppendRecord,
    LogEntry,
    ReadSample,
    Violation,
    check,
    reference_log,
    summarize,
)

E = LogEntry


def history() -> list[LogEntry]:
    """$users, then s-a 0..2 and s-b 0..1 interleaved (positions 100 apart)."""
    return [
        E(0, "u0", "$users", 0),
        E(100, "a0", "s-a", 0),
        E(200, "b0", "s-b", 0),
        E(300, "a1", "s-a", 1),
        E(400, "a2", "s-a", 2),
        E(500, "b1", "s-b", 1),
    ]


def appends() -> list[AppendRecord]:
    return [
        AppendRecord("s-a", ("a0",), ACKED, 0, 100, "node1", 1.0),
        AppendRecord("s-b", ("b0",), ACKED, 0, 200, "node2", 1.5),
        AppendRecord("s-a", ("a1", "a2"), ACKED, 1, 400, "node1", 2.0),  # a batch: position of the last
        AppendRecord("s-b", ("b1",), UNKNOWN, detail="node3: ReadTimeout"),  # unknown, written after all
        AppendRecord("s-a", ("lost",), UNKNOWN, detail="node1: ConnectError"),  # unknown, never written
    ]


def three(log=None, **changed) -> dict[str, list[LogEntry]]:
    logs = {name: list(log or history()) for name in ("node1", "node2", "node3")}
    logs.update(changed)
    return logs


def invariants(violations: list[Violation]) -> set[str]:
    return {v.invariant for v in violations}


def test_a_clean_run_has_no_violation():
    reads = [
        ReadSample("node2", 1.1, "s-a", 0, "a0", 100, "$all"),
        ReadSample("node3", 2.5, "s-a", 2, "a2", None, "stream"),
        ReadSample("node1", 2.6, "s-b", 1, "b1", 500, "stream"),  # unknown to its client, yet kept: fine
    ]
    streams = {n: {"s-a": [e for e in history() if e.stream == "s-a"]} for n in ("node1", "node2")}
    assert check(appends(), three(), reads=reads, streams=streams) == []


def test_an_acknowledged_event_missing_on_one_node():
    short = history()[:3]  # node3 lost a1, a2 (and b1, unknown to its client)
    violations = check(appends(), three(node3=short))
    missing = [v for v in violations if v.invariant == "acknowledged-missing"]
    assert [(v.node, v.stream, v.number, v.expected) for v in missing] == [
        ("node3", "s-a", 1, "a1"),
        ("node3", "s-a", 2, "a2 @400"),
    ]
    assert "acknowledged by node1 at 2.00s" in missing[0].detail
    # and node3's $all is not the others'
    assert [v.node for v in violations if v.invariant == "logs-differ"] == ["node3"]


def test_another_event_at_an_acknowledged_number():
    """The issue's symptom: same stream and number, another event id (a rejoining node's tail)."""
    other = history()
    other[3] = E(300, "x1", "s-a", 1)
    violations = check(appends(), three(node2=other))
    (wrong,) = [v for v in violations if v.invariant.startswith("acknowledged")]
    assert (wrong.invariant, wrong.node, wrong.stream, wrong.number) == (
        "acknowledged-missing",
        "node2",
        "s-a",
        1,
    )
    assert (wrong.expected, wrong.got) == ("a1", "x1 (s-a/1 @300)")
    (differ,) = [v for v in violations if v.invariant == "logs-differ"]
    assert (differ.node, differ.position, differ.expected, differ.got) == (
        "node2",
        300,
        "a1 (s-a/1 @300)",
        "x1 (s-a/1 @300)",
    )


def test_an_acknowledged_event_at_another_number_or_position():
    moved = [E(0, "u0", "$users", 0), E(100, "x0", "s-a", 0), E(150, "a0", "s-a", 1), *history()[2:]]
    violations = check(appends()[:1], {"node1": history()[:2], "node2": moved[:3]}, healed=False)
    assert any(
        v.invariant == "acknowledged-moved" and v.node == "node2" and "s-a/1 @150" in v.detail
        for v in violations
    )
    shifted = AppendRecord("s-a", ("a0",), ACKED, 0, 120, "node1", 1.0)  # answered with another position
    (wrong,) = check([shifted], {"node1": history()})
    assert (wrong.invariant, wrong.expected, wrong.position) == ("acknowledged-position", "a0 @120", 100)


def test_prefixes_are_fine_until_healed():
    logs = three(node2=history()[:4], node3=history()[:2])
    known = [a for a in appends() if a.event_ids != ("a1", "a2")]  # so only the prefix rule speaks
    assert check(known[:1], logs, healed=False) == []
    healed = check(known[:1], logs, healed=True)
    assert sorted((v.invariant, v.node) for v in healed) == [
        ("logs-differ", "node2"),
        ("logs-differ", "node3"),
    ]
    diverged = [*history()[:4], E(400, "z", "s-b", 1)]
    (v,) = check([], three(node3=diverged), healed=False)
    assert (v.invariant, v.node, v.position, v.got) == ("not-a-prefix", "node3", 400, "z (s-b/1 @400)")


def test_reference_is_the_longest_then_the_most_held():
    a, b = history(), [*history()[:5], E(500, "other", "s-b", 1)]
    assert reference_log({"node1": a[:3], "node2": a[:4], "node3": a[:5]})[0] == "node3"  # the longest
    assert reference_log({"node1": a[:3], "node2": b, "node3": a})[0] == "node2"  # tie: first by name
    assert reference_log({"node1": b, "node2": a, "node3": a})[0] == "node2"  # most held
    assert reference_log({}) == ("", [])


def test_an_event_twice_in_a_stream_is_a_duplicate():
    twice = [*history(), E(600, "a1", "s-a", 3)]
    violations = check(appends(), three(twice))
    dupes = [v for v in violations if v.invariant == "duplicate"]
    assert [(v.node, v.stream, v.number) for v in dupes] == [
        ("node1", "s-a", 3),
        ("node2", "s-a", 3),
        ("node3", "s-a", 3),
    ]
    assert dupes[0].expected == "a1 (s-a/1 @300)"


def test_a_number_twice_or_positions_going_back_break_the_log_order():
    repeated = [*history(), E(600, "a9", "s-a", 2)]
    assert invariants(check([], {"node1": repeated})) == {"log-order"}
    backwards = [*history()[:3], E(150, "a1", "s-a", 1)]
    (v,) = check([], {"node1": backwards})
    assert (v.invariant, v.position) == ("log-order", 150)


def test_a_refused_append_must_not_be_written():
    refused = AppendRecord(
        "s-b", ("b1",), REFUSED, node="node2", at=3.0, detail="node2: 400 Wrong expected version"
    )
    violations = check([refused], three())
    assert [(v.invariant, v.node, v.number) for v in violations] == [
        ("refused-but-written", n, 1) for n in ("node1", "node2", "node3")
    ]
    assert check([refused], three(history()[:5])) == []


def test_a_stream_read_must_match_all():
    good = [e for e in history() if e.stream == "s-a"]
    assert check([], three(), streams={"node1": {"s-a": good}}) == []
    (v,) = check([], three(), streams={"node2": {"s-a": good[:2]}})
    assert (v.invariant, v.node, v.stream) == ("stream-read-differs", "node2", "s-a")
    (v,) = check([], three(), streams={"node3": {"s-a": [good[0], E(300, "x1", "s-a", 1), good[2]]}})
    assert (v.invariant, v.number, v.expected, v.got) == (
        "stream-read-differs",
        1,
        "a1 (s-a/1 @300)",
        "x1 (s-a/1 @300)",
    )


def test_reads_during_the_run_are_checked_against_the_final_history():
    reads = [
        # an acknowledged event served at another number than its final one
        ReadSample("node2", 4.0, "s-a", 2, "a1", None, "stream"),
        # an event nobody acknowledged and no node holds any more: served uncommitted data
        ReadSample("node1", 5.0, "s-a", 3, "ghost", 700, "$all"),
        # an unacknowledged event that did survive, at another position than served
        ReadSample("node3", 6.0, "s-b", 1, "b1", 450, "$all"),
    ]
    violations = check(appends(), three(), reads=reads)
    assert [(v.invariant, v.node, v.stream, v.number, v.at) for v in violations] == [
        ("read-differs", "node2", "s-a", 2, 4.0),
        ("served-uncommitted", "node1", "s-a", 3, 5.0),
        ("read-differs", "node3", "s-b", 1, 6.0),
    ]
    assert (
        violations[0].expected == "a2 (s-a/2 @400)" and "finally at a1 (s-a/1 @300)" in violations[0].detail
    )
    assert violations[1].expected == "nothing" and violations[1].got == "ghost @700"
    assert summarize(violations) == {"read-differs": 2, "served-uncommitted": 1}


def test_a_violation_reads_well():
    v = Violation(
        "acknowledged-missing", "node3", "acknowledged by node1 at 2.00s", "s-a", 1, "a1", "x1", 300, 9.5
    )
    assert (
        str(v)
        == "[acknowledged-missing] node3 s-a/1 @300 at 9.50s: expected a1 got x1 acknowledged by node1 at 2.00s"
    )

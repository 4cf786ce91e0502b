"""The invariant checker of the cluster fault soak (tests/cluster/fault_soak.py, bench/soak_cluster.py).

Pure data in, violations out, so it is unit-tested on hand-made histories (test_invariants.py):

- ``appends``: every append the clients sent, with its answer: acknowledged (the first event number
  and the log position of its last event, as the server answered them), refused (a definitive 4xx at
  the first attempt), or unknown (a timeout, a connection error, a 5xx, or retries that ran out);
- ``logs``: each node's full ``$all`` after the run, oldest first (position, event id, stream, number);
- ``streams`` (optional): each node's per-stream reads of the clients' streams after the run;
- ``reads`` (optional): what nodes served while the faults ran (sampled by a reader thread).

Invariants (each violation names its invariant, the node, the stream and number, expected and got):

``acknowledged-missing`` / ``acknowledged-moved`` / ``acknowledged-position``
    every acknowledged event is on every node, at the stream and number (and for the last event of
    the append, the log position) it was acknowledged with;
``refused-but-written``
    an append refused at its first attempt is on no node;
``logs-differ`` / ``not-a-prefix``
    healed, every node's ``$all`` is the reference log (same event ids in the same order at the same
    positions); not healed, each is a prefix of the longest;
``log-order``
    positions grow along each node's ``$all`` and a stream's numbers grow along it; no two events
    share a stream and number;
``duplicate``
    no event id appears twice in a stream (the clients retry an append with the same ids, which the
    server must answer idempotently, so any repeat is a violation);
``stream-read-differs``
    a node's per-stream read holds exactly that stream's events of its own ``$all``;
``read-differs`` / ``served-uncommitted``
    an event served during the run at stream S number N (or at position P) is the final history's
    event there; one that was never acknowledged and is in no final log is counted apart as
    ``served-uncommitted``, a violation too.

The reference log is the longest node log (ties: the one most nodes hold, then the first by name).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "ACKED",
    "REFUSED",
    "UNKNOWN",
    "AppendRecord",
    "LogEntry",
    "ReadSample",
    "Violation",
    "check",
    "reference_log",
    "summarize",
]

ACKED, REFUSED, UNKNOWN = "acked", "refused", "unknown"


@dataclass(frozen=True, slots=True)
class AppendRecord:
    """One append a client sent (perhaps several attempts with the same event ids) and its answer."""

    stream: str
    event_ids: tuple[str, ...]
    outcome: str  # ACKED, REFUSED or UNKNOWN
    first_number: int | None = None  # acknowledged: the number of event_ids[0]
    position: int | None = None  # acknowledged: the log position of event_ids[-1]
    node: str = ""  # the node that gave the final answer
    at: float = 0.0  # seconds into the run when the final answer came
    detail: str = ""  # the attempts (node: status or error), for the report


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One event of a node's ``$all`` (or of a stream read: the same fields)."""

    position: int
    event_id: str
    stream: str
    number: int


@dataclass(frozen=True, slots=True)
class ReadSample:
    """One event a node served during the run."""

    node: str
    at: float  # seconds into the run
    stream: str
    number: int
    event_id: str
    position: int | None = None
    source: str = ""  # what was read: "stream" or "$all"


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    node: str
    detail: str
    stream: str | None = None
    number: int | None = None
    expected: str | None = None
    got: str | None = None
    position: int | None = None
    at: float | None = None

    def __str__(self) -> str:
        where = f" {self.stream}/{self.number}" if self.stream is not None else ""
        pos = f" @{self.position}" if self.position is not None else ""
        when = f" at {self.at:.2f}s" if self.at is not None else ""
        values = f" expected {self.expected} got {self.got}" if (self.expected or self.got) else ""
        return f"[{self.invariant}] {self.node}{where}{pos}{when}:{values} {self.detail}".rstrip()


def _describe(entry: LogEntry | None) -> str:
    if entry is None:
        return "nothing"
    return f"{entry.event_id} ({entry.stream}/{entry.number} @{entry.position})"


def reference_log(logs: Mapping[str, Sequence[LogEntry]]) -> tuple[str, list[LogEntry]]:
    """The node whose log is the reference and that log: the longest; among equally long ones the
    one most nodes hold; then the first by name."""
    if not logs:
        return "", []
    held = Counter(tuple(log) for log in logs.values())
    name = min(logs, key=lambda n: (-len(logs[n]), -held[tuple(logs[n])], n))
    return name, list(logs[name])


class _History:
    """One log indexed by (stream, number), by event id and by position."""

    def __init__(self, log: Sequence[LogEntry]) -> None:
        self.slots: dict[tuple[str, int], LogEntry] = {}
        self.ids: dict[str, list[LogEntry]] = {}
        self.positions: dict[int, LogEntry] = {}
        for entry in log:
            self.slots.setdefault((entry.stream, entry.number), entry)
            self.ids.setdefault(entry.event_id, []).append(entry)
            self.positions.setdefault(entry.position, entry)


def _log_shape(node: str, log: Sequence[LogEntry]) -> Iterable[Violation]:
    """Positions grow, a stream's numbers grow, no stream/number twice, no event id twice in a stream."""
    last_position = None
    last_number: dict[str, LogEntry] = {}
    seen: dict[tuple[str, str], LogEntry] = {}
    for entry in log:
        if last_position is not None and entry.position <= last_position:
            yield Violation(
                "log-order",
                node,
                f"position {entry.position} after {last_position}",
                entry.stream,
                entry.number,
                position=entry.position,
            )
        last_position = entry.position
        before = last_number.get(entry.stream)
        if before is not None and entry.number <= before.number:
            yield Violation(
                "log-order",
                node,
                "a stream number repeated or going back in $all",
                entry.stream,
                entry.number,
                _describe(before),
                _describe(entry),
                entry.position,
            )
        last_number[entry.stream] = entry
        twin = seen.get((entry.stream, entry.event_id))
        if twin is not None:
            yield Violation(
                "duplicate",
                node,
                f"event id {entry.event_id} twice in the stream",
                entry.stream,
                entry.number,
                _describe(twin),
                _describe(entry),
                entry.position,
            )
        else:
            seen[(entry.stream, entry.event_id)] = entry


def _compare_logs(
    node: str, log: Sequence[LogEntry], ref_node: str, ref: Sequence[LogEntry], healed: bool
) -> Iterable[Violation]:
    for i, (ours, theirs) in enumerate(zip(log, ref, strict=False)):
        if ours != theirs:
            yield Violation(
                "logs-differ" if healed else "not-a-prefix",
                node,
                f"$all differs from {ref_node}'s at entry {i} ({len(log)} vs {len(ref)} events)",
                ours.stream,
                ours.number,
                _describe(theirs),
                _describe(ours),
                ours.position,
            )
            return
    if healed and len(log) != len(ref):
        nxt = ref[len(log)] if len(log) < len(ref) else log[len(ref)]
        yield Violation(
            "logs-differ",
            node,
            f"$all has {len(log)} events, {ref_node}'s {len(ref)} (the first extra one is named)",
            nxt.stream,
            nxt.number,
            position=nxt.position,
            expected=_describe(ref[len(log)]) if len(log) < len(ref) else "nothing",
            got=_describe(log[len(ref)]) if len(log) > len(ref) else "nothing",
        )


def _check_appends(appends: Sequence[AppendRecord], histories: Mapping[str, _History]) -> Iterable[Violation]:
    for append in appends:
        if append.outcome == REFUSED:
            for node, history in histories.items():
                for event_id in append.event_ids:
                    for entry in history.ids.get(event_id, ()):
                        yield Violation(
                            "refused-but-written",
                            node,
                            f"refused by {append.node} at {append.at:.2f}s ({append.detail})",
                            entry.stream,
                            entry.number,
                            "nothing",
                            _describe(entry),
                            entry.position,
                            append.at,
                        )
            continue
        if append.outcome != ACKED or append.first_number is None:
            continue
        last = len(append.event_ids) - 1
        for node, history in histories.items():
            for i, event_id in enumerate(append.event_ids):
                number = append.first_number + i
                slot = history.slots.get((append.stream, number))
                why = f"acknowledged by {append.node} at {append.at:.2f}s"
                if slot is not None and slot.event_id == event_id:
                    if i == last and append.position is not None and slot.position != append.position:
                        yield Violation(
                            "acknowledged-position",
                            node,
                            why,
                            append.stream,
                            number,
                            f"{event_id} @{append.position}",
                            _describe(slot),
                            slot.position,
                            append.at,
                        )
                    continue
                elsewhere = history.ids.get(event_id)
                yield Violation(
                    "acknowledged-moved" if elsewhere else "acknowledged-missing",
                    node,
                    why + (f"; the event is at {_describe(elsewhere[0])}" if elsewhere else ""),
                    append.stream,
                    number,
                    event_id + (f" @{append.position}" if i == last and append.position is not None else ""),
                    _describe(slot),
                    slot.position if slot else None,
                    append.at,
                )


def _check_reads(
    reads: Sequence[ReadSample], ref: _History, acknowledged: set[str], ref_node: str
) -> Iterable[Violation]:
    for read in reads:
        final = ref.slots.get((read.stream, read.number))
        at_position = ref.positions.get(read.position) if read.position is not None else None
        same_slot = final is not None and final.event_id == read.event_id
        same_position = read.position is None or (
            at_position is not None and at_position.event_id == read.event_id
        )
        if same_slot and same_position:
            continue
        got = f"{read.event_id}" + (f" @{read.position}" if read.position is not None else "")
        expected = _describe(final) if not same_slot else f"{final.event_id} @{final.position}"
        if read.event_id not in acknowledged and read.event_id not in ref.ids:
            invariant, why = "served-uncommitted", "never acknowledged and in no final log"
        else:
            where = ref.ids.get(read.event_id)
            invariant = "read-differs"
            why = f"served event is finally at {_describe(where[0])}" if where else "served event is gone"
        yield Violation(
            invariant,
            read.node,
            f"{why} (read of {read.source or 'a stream'}; final log: {ref_node})",
            read.stream,
            read.number,
            expected,
            got,
            read.position,
            read.at,
        )


def _check_stream_reads(
    node: str, streams: Mapping[str, Sequence[LogEntry]], log: Sequence[LogEntry]
) -> Iterable[Violation]:
    for stream, events in streams.items():
        expected = [e for e in log if e.stream == stream]
        for i, (ours, theirs) in enumerate(zip(events, expected, strict=False)):
            if ours != theirs:
                yield Violation(
                    "stream-read-differs",
                    node,
                    f"entry {i} of the stream read differs from $all",
                    stream,
                    ours.number,
                    _describe(theirs),
                    _describe(ours),
                    ours.position,
                )
                break
        else:
            if len(events) != len(expected):
                yield Violation(
                    "stream-read-differs",
                    node,
                    f"the stream read has {len(events)} events, $all {len(expected)}",
                    stream,
                    min(len(events), len(expected)),
                )


def check(
    appends: Sequence[AppendRecord],
    logs: Mapping[str, Sequence[LogEntry]],
    *,
    reads: Sequence[ReadSample] = (),
    streams: Mapping[str, Mapping[str, Sequence[LogEntry]]] | None = None,
    healed: bool = True,
) -> list[Violation]:
    """Every violation of the invariants (module docstring) by the given histories; [] when none."""
    violations: list[Violation] = []
    for node in sorted(logs):
        violations += _log_shape(node, logs[node])
    ref_node, ref = reference_log(logs)
    for node in sorted(logs):
        if node != ref_node:
            violations += _compare_logs(node, logs[node], ref_node, ref, healed)
    histories = {node: _History(logs[node]) for node in sorted(logs)}
    violations += _check_appends(appends, histories)
    for node in sorted(streams or {}):
        violations += _check_stream_reads(node, streams[node], logs.get(node, ()))
    acknowledged = {i for a in appends if a.outcome == ACKED for i in a.event_ids}
    if reads:
        violations += _check_reads(reads, histories.get(ref_node) or _History([]), acknowledged, ref_node)
    return violations


def summarize(violations: Iterable[Violation]) -> dict[str, int]:
    """How many violations of each invariant."""
    return dict(Counter(v.invariant for v in violations))

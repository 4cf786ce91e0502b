"""The scenario file format, in one place: the top-level sections, the cluster and dashboard settings and
every step kind with its fields. The loader validates against these tables and ``docs/scenarios.md``
documents them (a test checks that every step kind and field is named there)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "CLUSTER_FIELDS",
    "COMMON_STEP_FIELDS",
    "CONSUME_ACTIONS",
    "DASHBOARD_FIELDS",
    "EVDB_PROGRAMS",
    "JSON_OPERATORS",
    "STEP_KINDS",
    "TOP_LEVEL_FIELDS",
    "Field",
    "StepKind",
]


@dataclass(frozen=True)
class Field:
    """One field of a mapping. ``kind``: str, int, number, bool, map, list, keys (a string or a list of
    strings), status (an int or a list of ints), any (JSON-like value)."""

    name: str
    kind: str
    doc: str
    required: bool = False
    default: Any = None
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None


@dataclass(frozen=True)
class StepKind:
    """A step: ``- kind: {fields}``, or ``- kind: value`` for the field named ``shorthand``."""

    name: str
    group: str
    doc: str
    fields: tuple[Field, ...]
    shorthand: str | None = None

    def field(self, name: str) -> Field | None:
        return next((f for f in (*self.fields, *COMMON_STEP_FIELDS) if f.name == name), None)


NODE_DOC = (
    "which node: a node's name (node1, replica1, a restored node's name, a `name_node` name), `leader`, "
    "`follower` (the first follower; `follower2` the second, ...), `replica` (the first read-only "
    "replica; `replica2`, ...) or `killed` (the node the last `kill` step killed)"
)
#: Programs a ``run`` step may start: evdb's own commands, run with the interpreter that runs the scenario.
EVDB_PROGRAMS = {"evdb": ("evdb.cli", "main"), "evdb-redact": ("evdb.redaction.tool", "main")}
#: Operators a JSON expectation may use instead of a plain value (which means "equals").
JSON_OPERATORS = {
    "eq": "equals",
    "ne": "differs from",
    "gt": "greater than",
    "gte": "greater than or equal to",
    "lt": "less than",
    "lte": "less than or equal to",
    "contains": "a string or list that contains the value",
    "len": "a string, list or object of this length",
    "in": "one of the listed values",
    "exists": "the path is present (true) or absent (false)",
}

#: What a ``consume`` step answers for the messages it took: ``ack``, or a nack's action (KurrentDB's).
CONSUME_ACTIONS = ("ack", "park", "retry", "skip", "stop")

TOP_LEVEL_FIELDS = (
    Field(
        "name", "str", "the scenario's name; screenshots are saved as `scenario-<name>-<step name>.svg`", True
    ),
    Field("description", "str", "what the scenario shows (printed before it runs)"),
    Field("cluster", "map", "the cluster to launch (see below)", True),
    Field("dashboard", "map", "how the dashboard runs (see below)"),
    Field("steps", "list", "the steps, run in order; the first failure stops the run", True),
)

CLUSTER_FIELDS = (
    Field("nodes", "int", "cluster nodes (`node1`…)", default=1, minimum=1, maximum=9),
    Field("replicas", "int", "read-only replicas (`replica1`…)", default=0, minimum=0, maximum=8),
    Field(
        "chunk_size", "str", "the nodes' `ChunkSize` (e.g. `64KiB`; the minimum is 64 KiB)", default="64KiB"
    ),
    Field("insecure", "bool", "plain HTTP without certificates (faster to start)", default=False),
    Field(
        "options", "map", "more node options, as in `node.yaml` (e.g. `EnableUnixSocket: true`)", default={}
    ),
    Field("timeout", "number", "seconds to wait for a leader after starting", default=60, minimum=1),
    Field(
        "archive",
        "map",
        "an archive (docs/operations/archive.md): `Archive` options for every node as in `node.yaml` "
        "(e.g. `{RetainAtLeast: {Days: 0, LogicalBytes: 65536}}`) over `Enabled: true` and a file-system "
        "archive in the run's folder (`${workdir}/archive`); the first read-only replica is the archiver "
        "(`Archiver: true`), so it needs `replicas` of 1 or more",
        default={},
    ),
)

DASHBOARD_FIELDS = (
    Field("interval", "number", "seconds between polls of a node", default=0.5, minimum=0.2, maximum=60),
    Field("readonly", "bool", "start the dashboard read-only", default=False),
    Field(
        "size",
        "list",
        "terminal size `[columns, rows]` of a headless run and its screenshots",
        default=[120, 36],
    ),
)

COMMON_STEP_FIELDS = (
    Field(
        "after",
        "number",
        "seconds to wait before this step, counted from the end of the previous one (what `--record` "
        "writes to keep the operator's timing)",
        minimum=0,
    ),
)

_node = Field("node", "str", NODE_DOC, default="leader")
_timeout = Field("timeout", "number", "seconds before the step fails", default=30, minimum=0)


def _check_fields(what: str) -> tuple[Field, ...]:
    return (
        Field("node", "str", NODE_DOC, default="leader"),
        Field("path", "str", "the HTTP path with its query (`${…}` placeholders are filled in)", True),
        Field("method", "str", "the HTTP method", default="GET", choices=("GET", "POST", "PUT", "DELETE")),
        Field("status", "status", "the expected status code (or a list of them)"),
        Field(
            "json",
            "map",
            "expected values in the JSON answer by path (`a.b[0].c`): a value (equals) or one operator "
            "`{gt: 0}` (`" + "`, `".join(JSON_OPERATORS) + "`)",
        ),
        Field("contains", "str", "text the answer's body must contain"),
        *((Field("timeout", "number", what, default=30, minimum=0),) if what else ()),
    )


def _screen_fields(what: str) -> tuple[Field, ...]:
    return (
        Field(
            "widget",
            "str",
            "a CSS selector of the widget whose text is checked (`#cluster`, `#scavenge-panel`, "
            "`#chunks-panel`, `#backup-panel`, `#logs-panel`, `#activity-panel`, `#request` in a "
            "confirmation); `screen` for everything visible",
            default="screen",
        ),
        Field("contains", "keys", "text (or texts) the widget must show"),
        Field("not_contains", "keys", "text (or texts) the widget must not show"),
        Field("matches", "str", "a regular expression the widget's text must match"),
        *((Field("timeout", "number", what, default=30, minimum=0),) if what else ()),
    )


STEP_KINDS: dict[str, StepKind] = {
    kind.name: kind
    for kind in (
        # -- client actions --------------------------------------------------------------------------------
        StepKind(
            "write",
            "client",
            "append events to a stream (in batches of 50) through the HTTP API",
            (
                Field("stream", "str", "the stream", True),
                Field("count", "int", "how many events", default=1, minimum=1, maximum=100_000),
                Field("event_type", "str", "their event type", default="ScenarioEvent"),
                Field(
                    "size",
                    "int",
                    "bytes of padding in each event's data (fills chunks)",
                    default=0,
                    minimum=0,
                ),
                _node,
                Field(
                    "background",
                    "bool",
                    "write while the next steps run (a `join` step waits for it)",
                    default=False,
                ),
            ),
        ),
        StepKind(
            "metadata",
            "client",
            "set a stream's metadata (`$maxCount`, `$maxAge`, `$tb`, `$acl`, custom keys)",
            (Field("stream", "str", "the stream", True), Field("metadata", "map", "the object", True), _node),
        ),
        StepKind(
            "delete",
            "client",
            "delete a stream: soft (its events become removable) or hard (a tombstone)",
            (
                Field("stream", "str", "the stream", True),
                Field("hard", "bool", "write a tombstone (`Kurrent-HardDelete: true`)", default=False),
                _node,
            ),
        ),
        StepKind(
            "http",
            "client",
            "any HTTP call to a node as admin (start a scavenge, a backup, resign, pause auto-scavenge…)",
            (
                _node,
                Field("path", "str", "the path with its query", True),
                Field(
                    "method",
                    "str",
                    "the HTTP method",
                    default="POST",
                    choices=("GET", "POST", "PUT", "DELETE"),
                ),
                Field("body", "any", "a JSON body"),
                Field("status", "status", "the expected status code(s); default any 2xx"),
                Field(
                    "save", "map", "variables to keep from the JSON answer: `{name: path}`, used as `${name}`"
                ),
            ),
        ),
        StepKind(
            "create_subscription",
            "client",
            "create a persistent subscription group on a stream (`PUT /subscriptions/{stream}/{group}`)",
            (
                Field("stream", "str", "the stream the group reads", True),
                Field("group", "str", "the group's name", True),
                Field(
                    "settings",
                    "map",
                    "the group's settings by KurrentDB's HTTP names (`namedConsumerStrategy`, "
                    "`minCheckPointCount`, `checkPointAfterMilliseconds`, `messageTimeoutMilliseconds`, "
                    "`maxRetryCount`, …); the node checks them",
                    default={},
                ),
                _node,
            ),
        ),
        StepKind(
            "consume",
            "client",
            "be a consumer of a persistent subscription group over HTTP: take `count` messages (asking "
            "until they come, at most `timeout`), then acknowledge them all or refuse them with `action`",
            (
                Field("stream", "str", "the group's stream", True),
                Field("group", "str", "the group", True),
                Field("count", "int", "how many messages to take", True, minimum=1, maximum=100),
                Field(
                    "action",
                    "str",
                    "what to answer for them: `ack`, or a nack: `park` (into the parked stream), "
                    "`retry`, `skip`, `stop`",
                    default="ack",
                    choices=CONSUME_ACTIONS,
                ),
                Field("expect", "list", "the event numbers the messages must have (in any order)"),
                _node,
                _timeout,
            ),
        ),
        StepKind(
            "kill",
            "client",
            "kill a node's process with SIGKILL (kill -9)",
            (Field("node", "str", NODE_DOC, True),),
            shorthand="node",
        ),
        StepKind(
            "name_node",
            "client",
            "give the node a role points to now a name that later steps use, so it stays the same node "
            "when roles move (e.g. the leader before a rolling update)",
            (
                Field("node", "str", NODE_DOC, True),
                Field("as", "str", "the new name (letters, digits, '-'; not a node's own name)", True),
            ),
        ),
        StepKind(
            "restart",
            "client",
            "start a stopped or killed node again and wait until it answers `/gossip`",
            (
                Field(
                    "node", "str", "the node's name, or `killed`: the node the last `kill` step killed", True
                ),
                _timeout,
            ),
            shorthand="node",
        ),
        StepKind(
            "restore_node",
            "client",
            "create a new single-node cluster named `name`, `evdb restore` the backup into it, start it",
            (
                Field("name", "str", "the new node's name (used as `node:` afterwards)", True),
                Field("backup", "str", "the backup folder", True),
                Field("timeout", "number", "seconds to wait for it to lead", default=60, minimum=1),
            ),
        ),
        StepKind(
            "run",
            "client",
            "run one of evdb's commands (`" + "`, `".join(EVDB_PROGRAMS) + "`) and check its exit code",
            (
                Field(
                    "argv", "list", "the command and its arguments; `${…}` placeholders are filled in", True
                ),
                Field("exit_code", "int", "the expected exit code", default=0),
                Field(
                    "timeout", "number", "seconds before the command is killed and the step fails", default=60
                ),
                Field("output_contains", "str", "text its standard output or error must contain"),
            ),
        ),
        StepKind(
            "join",
            "client",
            "wait until the background writes have finished (and fail if one failed)",
            (_timeout,),
            shorthand="timeout",
        ),
        StepKind(
            "advance_clock",
            "client",
            "move the dashboard's injected clock forward (countdowns, certificate expiry); node processes "
            "run on the system clock",
            (Field("seconds", "number", "how far", True, minimum=0),),
            shorthand="seconds",
        ),
        # -- dashboard -------------------------------------------------------------------------------------
        StepKind(
            "press",
            "dashboard",
            "press keys in the dashboard (Textual key names: `s`, `2`, `enter`, `tab`, `escape`, `ctrl+c`…)",
            (Field("keys", "keys", "a key or a list of keys", True),),
            shorthand="keys",
        ),
        StepKind(
            "fill",
            "dashboard",
            "focus an input of the open dialog and replace its text",
            (
                Field(
                    "field",
                    "str",
                    "the input's selector: `#threads`, `#threshold`, `#throttle_percent`, "
                    "`#destination`, `#schedule`, `#filter`",
                    True,
                ),
                Field("value", "str", "the text", True),
            ),
        ),
        StepKind(
            "click",
            "dashboard",
            "click a widget (a button such as `#send`, a checkbox such as `#differential`)",
            (Field("target", "str", "the widget's selector", True),),
            shorthand="target",
        ),
        StepKind(
            "select_node",
            "dashboard",
            "select a node in the dashboard (what `:` → Jump to node does)",
            (Field("node", "str", NODE_DOC, True),),
            shorthand="node",
        ),
        # -- checks ----------------------------------------------------------------------------------------
        StepKind("expect_http", "check", "check a node's answer now", _check_fields("")),
        StepKind(
            "wait_http",
            "check",
            "poll a node until its answer matches",
            _check_fields("seconds to wait for the answer to match"),
        ),
        StepKind("expect_screen", "check", "check what the dashboard shows now", _screen_fields("")),
        StepKind(
            "wait_screen",
            "check",
            "wait until the dashboard shows it",
            _screen_fields("seconds to wait for the dashboard to show it"),
        ),
        StepKind(
            "screenshot",
            "check",
            "save an SVG screenshot named `scenario-<scenario>-<name>.svg` (with `--screenshots` or "
            "`--update-screenshots`)",
            (Field("name", "str", "its name (letters, digits, `-`)", True),),
            shorthand="name",
        ),
    )
}

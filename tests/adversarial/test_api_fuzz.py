"""Generated requests over every HTTP operation of ``/openapi.json``, as every kind of caller, against the
leader and a follower of a real cluster (tests/adversarial/conftest.py: three members and a read-only
replica, TLS, separate processes).

schemathesis's engine (the one ``st run`` drives) runs against each target node in turn: its examples,
fuzzing and stateful phases on both, its coverage phase (every boundary and invalid value of every
parameter, and one method the path does not have) on the follower. The stateful phase follows the
document's links (evdb/http/openapi.py): a user created, then read, updated, disabled, deleted; a
stream appended to, then read, its metadata written, a persistent subscription group created on it,
then read, acknowledged, deleted; a scavenge started, then stopped. Each generated request is sent as
one of five callers, in turn (the admin twice a round): anonymous, a plain user, a member of ``$ops``,
a member of ``$admins``, and a member of ``$admins`` disabled on the leader just before the run, after
it had signed in on the target (its cached sign-in is what a node must not keep using).

Checks, on every response:

- ``no_server_error_but_not_ready``: no 5xx but 503 (a node not ready: a new leader taking office,
  persistent subscriptions restarting), which clients retry;
- ``status_code_conformance``: only the statuses the document lists for that operation;
- ``no_traceback_in_the_body``: no Python traceback in any answer;
- ``a_revoked_caller_is_refused``: the disabled caller gets 401 (or 405 for a method the path does not
  have), on every operation, on every node;
- ``a_refused_request_changed_nothing``: after a 4xx answer to a request that could change state
  (any method but GET), the leader's log has no new event but those the node writes on its own
  (tests/adversarial/state.py): users, groups, subscriptions, streams, metadata are all events.

And after each run: no record of a request the node could not answer, and no traceback, in the logs
of the target node and the leader.

Deterministic: a fixed seed, the callers taken in turn, one worker, no example database; a failure
reports a curl command (with the caller's header) that replays it. The examples per operation, the
budget and the measured duration are in docs/reliability.md.
"""

from __future__ import annotations

import base64
import itertools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import schemathesis
from schemathesis.engine import Status, events
from waiting import wait_until

from tests.adversarial.conftest import ClusterUnderTest
from tests.adversarial.state import Leader, LeaderChanged

SEED = 20261205
MAX_EXAMPLES = 2  # per operation in the fuzzing phase (the coverage phase adds its own boundary cases)
MAX_STEPS = 6  # per scenario of the stateful phase
STATEFUL_SCENARIOS = 40
#: the coverage phase (every boundary and invalid value of every parameter, one unexpected method) runs
#: against the follower only, within the budget: a follower's path (forwarding to the leader, its own
#: caches) holds more than the leader's, which tests/node/test_contract_schemathesis.py covers alone
COVERAGE_TARGETS = ("follower",)
DEADLINE = 150.0  # seconds per target; past it the run is stopped and the test fails
PASSWORD = "fuzz-password"
EXCLUDED = (
    ("POST", "/admin/shutdown"),  # it stops the node
    ("POST", "/admin/node/resign"),  # the cluster would be electing for the calls after it
    ("POST", "/admin/node/priority/{priority}"),  # would change the next elections
)
#: operations answered before the work they start is done, and the leader's GET that answers 503 until
#: it is: a restart of the persistent subscriptions reloads (and may rewrite) every group's configuration
SETTLES_LATER = {"POST /subscriptions/restart": "/subscriptions"}
#: how much earlier than the client's clock says a request may have been written (event times are the
#: node's; both clocks are this machine's)
CLOCK_MARGIN = 0.05
CHECKS = ("status_code_conformance",)
OWN_CHECKS = (
    "no_server_error_but_not_ready",
    "no_traceback_in_the_body",
    "a_revoked_caller_is_refused",
    "a_refused_request_changed_nothing",
)
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\.py\", line \d+")
#: a record of a request the node could not answer (an unexpected error: 500), or of any fatal error
LOG_ERROR = re.compile(r",FTL\]|,ERR\] (Request .* failed|Error handling request|Unhandled)")


def _basic(login: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{login}:{password}".encode()).decode()


CALLERS: dict[str, str | None] = {
    "anonymous": None,
    "user": _basic("fz-user", PASSWORD),
    "ops": _basic("fz-ops", PASSWORD),
    "admin": _basic("fz-admin", PASSWORD),
    "revoked": _basic("fz-revoked", PASSWORD),
}
TURNS = ("anonymous", "admin", "user", "ops", "admin", "revoked")
CALLER_OF_HEADER = {header: kind for kind, header in CALLERS.items() if header is not None}


@dataclass
class Tracker:
    """What the own checks remember between responses (one run: one worker, one request at a time)."""

    leader: Leader
    last: int  # the leader's log end after the last request that could change state
    recent: list[str] = field(default_factory=list)  # the last few requests, for a finding's report
    #: the current leader's address (called when the one read stops leading), and the elections seen
    find_leader: Callable[[], httpx.URL] | None = None
    elections: int = 0
    election_notes: list[str] = field(default_factory=list)

    def _follow_leader(self) -> int | None:
        """The new leader's log end once the node the cluster names as leader answers as one (a leader
        that is resigning, or the old one still named, is "not yet")."""
        assert self.find_leader is not None
        self.leader.client.base_url = self.find_leader()
        try:
            return self.leader.position() + 1  # + 1: a log end of 0 is an answer too
        except LeaderChanged:
            return None

    def _election(self, label: str, status: int) -> None:
        """The node read as the leader stopped leading (an election, at any of the reads): the new
        leader's log is read from now on."""
        assert self.find_leader is not None
        self.elections += 1
        self.election_notes.append(f"{_clock(time.time())} after {self.recent[-3:]} then {label}: {status}")
        self.last = (
            wait_until(
                self._follow_leader, 60, "a leader that stays after the election", tolerate=(httpx.HTTPError,)
            )
            - 1
        )

    def after(
        self, method: str, status: int, label: str, started: float = 0.0, caller: str = ""
    ) -> str | None:
        """Called after every response (``started``: when its request was sent, seconds since the
        epoch): the reason a refused request changed something, or None."""
        if method == "GET":
            return None
        settle = SETTLES_LATER.get(label)
        if settle is not None and 200 <= status < 300:
            self.leader.answer(settle)  # what the request set off is done (503 until then, waited out)
        before = self.last
        try:
            now = self.leader.position()
            self.last = now
            self.recent = [*self.recent[-3:], f"{_clock(started)} {label} as {caller}: {status}"]
            if not 400 <= status < 500 or now == before:
                return None
            written = self.leader.written_since(before, started)  # (reads the leader's position again)
            if not written:
                return None
        except LeaderChanged:
            self._election(label, status)  # this request is not judged
            return None
        events = [
            f"{e['streamId']} {e['eventType']} at {e['updated'][11:23]}"
            for e in self.leader.events_written_since(before, started)
            if e["streamId"] in written
        ]
        return (
            f"{label} answered {status} but wrote to {written}: {events}; the requests before (start time, "
            f"operation, caller, answer): {self.recent}"
        )


def _clock(seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 1000):03d}"


#: the tracker of the run in progress (schemathesis's checks are registered once per process, by name)
_TRACKER: Tracker | None = None


def _caller(case) -> str:
    header = (case.headers or {}).get("Authorization")
    return "anonymous" if header is None else CALLER_OF_HEADER.get(header, "other")


@schemathesis.check
def no_server_error_but_not_ready(ctx, response, case):
    """schemathesis's not_a_server_error, but for 503: the answer of a node not ready (starting, its
    persistent subscriptions restarting or a new leader taking office, out of connections), which a
    client retries; documented on every operation."""
    if response.status_code >= 500 and response.status_code != 503:
        raise AssertionError(f"server error {response.status_code}: {response.text[:200]!r}")


@schemathesis.check
def no_traceback_in_the_body(ctx, response, case):
    if TRACEBACK.search(response.text or ""):
        raise AssertionError(f"a traceback in the body of a {response.status_code}: {response.text[:300]!r}")


@schemathesis.check
def a_revoked_caller_is_refused(ctx, response, case):
    # 405: a method the path does not have is refused before anyone is signed in (nothing let through)
    if _caller(case) == "revoked" and response.status_code not in (401, 405):
        raise AssertionError(f"a disabled user's cached credentials got {response.status_code}, not 401")


@schemathesis.check
def a_refused_request_changed_nothing(ctx, response, case):
    assert _TRACKER is not None
    started = time.time() - response.elapsed - CLOCK_MARGIN
    problem = _TRACKER.after(
        case.method.upper(), response.status_code, case.operation.label, started, _caller(case)
    )
    if problem:
        raise AssertionError(problem)


class RotatingCallers:
    """schemathesis auth provider: each generated request is sent as the next caller kind in turn."""

    def __init__(self) -> None:
        # the admin twice a round: creating users, groups and scavenges needs one, and the stateful
        # phase can follow a link only from a created resource
        self._turn = itertools.cycle([(kind, CALLERS[kind]) for kind in TURNS])

    def get(self, case, ctx):
        return next(self._turn)

    def set(self, case, data, ctx):
        _kind, header = data
        case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
        if header is not None:
            case.headers["Authorization"] = header


@dataclass
class Run:
    target: str
    findings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    operations: set[str] = field(default_factory=set)
    responses: int = 0
    stateful_steps: int = 0
    #: stateful steps made by following a link of the document (a created resource used), by link name
    links_followed: dict[str, int] = field(default_factory=dict)
    elections: int = 0  # leader changes during the run (its refusals then judged on the new leader)
    election_notes: list[str] = field(default_factory=list)  # the requests before each
    callers: set[str] = field(default_factory=set)
    stop_reason: str | None = None
    elapsed: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    label_seconds: dict[str, float] = field(default_factory=dict)
    log_errors: list[str] = field(default_factory=list)


def _config(base_url: str, ca: str | None, coverage: bool) -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "base-url": base_url,
            "tls-verify": ca or True,
            "workers": 1,
            "output": {"sanitization": {"enabled": False}},  # the replay commands name the caller's header
            "request-timeout": 10,
            "max-stream-events": 1,  # subscriptions are endless event streams: the first event is enough
            "generation": {"max-examples": MAX_EXAMPLES, "database": "none", "no-shrink": True},
            "phases": {
                # one unexpected method per operation (a 405 must not depend on the caller): the coverage
                # phase's other boundary cases are all kept
                "coverage": {"enabled": coverage, "unexpected-methods": ["PATCH"]},
                "stateful": {
                    "enabled": True,
                    "max-steps": MAX_STEPS,
                    "generation": {"max-examples": STATEFUL_SCENARIOS},
                },
            },
            "checks": {"enabled": False, **{name: {"enabled": True} for name in (*CHECKS, *OWN_CHECKS)}},
        }
    )


def _fuzz(target: str, base_url: str, ca: str | None) -> Run:
    config = _config(base_url, ca, coverage=target in COVERAGE_TARGETS)
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json", config=config)
    for method, path in EXCLUDED:
        schema = schema.exclude(method=method, path=path)
    schema.auth(refresh_interval=None)(RotatingCallers)
    run = Run(target)
    seen: set[tuple] = set()
    started = time.monotonic()
    stream = schemathesis.engine.from_schema(schema).execute()
    for event in stream:
        if time.monotonic() - started > DEADLINE:
            stream.stop()
        if isinstance(event, events.ScenarioFinished):
            recorder = event.recorder
            phase = str(event.phase)
            run.phase_seconds[phase] = run.phase_seconds.get(phase, 0.0) + event.elapsed_time
            key = f"{phase} {recorder.label}"
            run.label_seconds[key] = run.label_seconds.get(key, 0.0) + event.elapsed_time
            if event.status != Status.SKIP:
                run.operations.add(recorder.label)
            for case_id, interaction in recorder.interactions.items():
                if interaction.response is None:
                    continue
                run.responses += 1
                if "stateful" in str(event.phase).lower():
                    run.stateful_steps += 1
                node = recorder.cases.get(case_id)
                if node is not None:
                    run.callers.add(_caller(node.value))
                    if node.transition is not None and node.is_transition_applied:
                        name = str(node.transition.id) + (
                            " (inferred)" if node.transition.is_inferred else ""
                        )
                        run.links_followed[name] = run.links_followed.get(name, 0) + 1
            for case_id, checks in recorder.checks.items():
                for check in checks:
                    if check.status != Status.FAILURE or check.failure_info is None:
                        continue
                    failure = check.failure_info.failure
                    key = (recorder.label, check.name, failure.title)
                    if key in seen:
                        continue
                    seen.add(key)
                    node = recorder.cases.get(case_id)
                    caller = _caller(node.value) if node is not None else "?"
                    interaction = recorder.interactions.get(case_id)
                    answer = interaction.response if interaction is not None else None
                    status = (
                        f"{answer.status_code} {answer.text[:200]!r}" if answer is not None else "no answer"
                    )
                    run.findings.append(
                        f"{target} {recorder.label} as {caller}: {check.name}: {failure.title} ({status})\n"
                        f"    {(failure.message or '')[:400]}\n    {check.failure_info.code_sample[:600]}"
                    )
        elif isinstance(event, events.NonFatalError):
            run.errors.append(f"{event.label}: {event.info.title}: {event.info.message}"[:500])
        elif isinstance(event, events.FatalError):
            run.errors.append(f"fatal: {event.exception!r}")
        elif isinstance(event, events.EngineFinished):
            run.stop_reason = str(event.stop_reason)
    run.elapsed = time.monotonic() - started
    return run


def _errors_logged(name: str, text: str) -> list[str]:
    """Each error record of a node's log (or a traceback printed on its own), with the lines that follow
    it until the next record (which starts with '[')."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if LOG_ERROR.search(lines[i]) or lines[i].startswith("Traceback"):
            block = [lines[i]]
            i += 1
            while i < len(lines) and not lines[i].startswith("[") and len(block) < 40:
                block.append(lines[i])
                i += 1
            out.append(f"{name}: " + "\n    ".join(block))
        else:
            i += 1
    return out[:20]


def _log_size(cluster: ClusterUnderTest, name: str) -> int:
    return _log_path(cluster, name).stat().st_size


def _log_path(cluster: ClusterUnderTest, name: str) -> Path:
    node = next(n for n in cluster.local.info()["nodes"] if n["name"] == name)
    return Path(node["config"]).parent / "stdout.log"


def _prepare_callers(cluster: ClusterUnderTest, leader: str, targets: list[str]) -> None:
    """The callers' users on the leader; each signs in on every target; then fz-revoked is disabled."""
    with cluster.client(leader, cluster.admin) as admin:
        for login, groups in (("fz-user", []), ("fz-ops", ["$ops"]), ("fz-admin", ["$admins"])):
            r = admin.post("/users", json={"loginName": login, "password": PASSWORD, "groups": groups})
            assert r.status_code in (201, 409), r.text
        r = admin.post(
            "/users", json={"loginName": "fz-revoked", "password": PASSWORD, "groups": ["$admins"]}
        )
        assert r.status_code == 201, r.text  # a fresh cluster per session: never revoked before
        seeded = admin.post(
            "/streams/fz-stream",
            json={"n": 1},
            headers={"Kurrent-EventType": "Seed", "Kurrent-EventId": "7b3f7f0c-9a2e-4a57-9d8e-2d2f0b9a1c01"},
        )
        assert seeded.status_code == 201, seeded.text
        group = admin.put("/subscriptions/fz-stream/fz-group", json={})
        assert group.status_code in (201, 409), group.text

    def signed_in_everywhere() -> bool:
        for node in targets:
            with cluster.client(node, None) as c:
                for kind in ("user", "ops", "admin", "revoked"):
                    if (
                        c.get(
                            "/streams/fz-stream", headers={"Authorization": CALLERS[kind] or ""}
                        ).status_code
                        != 200
                    ):
                        return False
        return True

    wait_until(signed_in_everywhere, 30, "every caller signed in on every target")
    with cluster.client(leader, cluster.admin) as admin:
        assert admin.post("/users/fz-revoked/command/disable").status_code == 200

    def disabled_everywhere() -> bool:
        for node in targets:
            with cluster.client(node, cluster.admin) as c:
                user = c.get("/users/fz-revoked", headers={"Accept": "application/json"})
                if user.status_code != 200 or not user.json()["data"].get("disabled"):
                    return False
        return True

    wait_until(disabled_everywhere, 30, "every target to hold fz-revoked's disabling")


@pytest.fixture(scope="module")
def runs(cluster: ClusterUnderTest) -> dict[str, Run]:
    global _TRACKER
    roles = cluster.by_role()
    leader, follower = roles["leader"], roles["follower"]
    _prepare_callers(cluster, leader, [leader, follower])
    ca = cluster.local.info().get("ca")
    out: dict[str, Run] = {}
    with cluster.client(leader, cluster.admin) as admin:
        for target, node in (("leader", leader), ("follower", follower)):
            watched = {name: _log_size(cluster, name) for name in {leader, node}}
            state = Leader(admin)
            _TRACKER = Tracker(
                state,
                state.position(),
                find_leader=lambda: httpx.URL(cluster.url(cluster.by_role()["leader"])),
            )
            try:
                run = _fuzz(target, cluster.url(node), ca)
                run.elections = _TRACKER.elections
                run.election_notes = _TRACKER.election_notes
            finally:
                _TRACKER = None
            for name, offset in watched.items():
                with open(_log_path(cluster, name), "rb") as log:
                    log.seek(offset)
                    run.log_errors += [
                        f"{name}: {line}"
                        for line in log.read().decode(errors="replace").splitlines()
                        if LOG_ERROR.search(line)
                    ][:40]
            out[target] = run
            print(  # the figures docs/reliability.md quotes (pytest -s shows them)
                f"\nfuzz {target}: {run.elapsed:.1f} s, {run.responses} responses, {run.stateful_steps} stateful,"
                f" {len(run.operations)} operations, phases {run.phase_seconds}, links followed {run.links_followed},"
                f" elections {run.elections} {run.election_notes}, slowest {sorted(run.label_seconds.items(), key=lambda kv: -kv[1])[:5]}"
            )
    return out


TARGETS = ("leader", "follower")


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_every_operation_was_reached_by_every_caller_in_time(runs, target):
    run = runs[target]
    assert run.stop_reason == "completed", (run.stop_reason, run.elapsed)
    assert run.elapsed < DEADLINE
    assert run.responses >= MAX_EXAMPLES * 60, f"the run hardly reached the node ({run.responses} responses)"
    assert run.stateful_steps > 20, f"the stateful phase hardly ran ({run.stateful_steps} steps)"
    assert set(CALLERS) <= run.callers, run.callers
    expected = {"POST /streams/{stream}", "POST /users", "PUT /subscriptions/{stream}/{group}", "GET /web/"}
    assert expected <= run.operations, sorted(run.operations)


@pytest.mark.slow
def test_the_stateful_phase_used_what_it_created(runs):
    """Steps along the document's links (or links schemathesis inferred from Location headers): how many
    depends on what the nodes answered the generated creations, so the two runs are counted together."""
    followed = {f"{t}: {link}": n for t in TARGETS for link, n in runs[t].links_followed.items()}
    assert sum(followed.values()) >= 5, f"the stateful phase hardly followed any link: {followed}"
    assert any("(inferred)" not in link for link in followed), (
        f"no link of the document was followed: {followed}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_no_server_error_no_traceback_no_revoked_access_and_no_change_from_a_refusal(runs, target):
    run = runs[target]
    report = "\n".join([*run.errors, *run.findings])
    assert not run.errors and not run.findings, f"{len(run.findings)} findings on the {target}:\n{report}"


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_the_nodes_logged_no_error_while_fuzzed(runs, target):
    assert not runs[target].log_errors, "\n".join(runs[target].log_errors)


def test_a_refusal_that_wrote_is_caught():
    """The check itself: a refused request after which a client stream grew is reported, one after which
    only a node-written stream grew is not, and a GET is not looked at."""

    class FakeLeader(Leader):
        def __init__(self, streams: list[str]) -> None:
            self.streams, self.end = streams, 0

        def position(self) -> int:
            return self.end

        def events_written_since(self, position: int, not_before: float = 0.0) -> list[dict]:
            return [
                {"streamId": s, "eventType": "T", "updated": "2026-12-05T14:00:00.000000Z"}
                for s in self.streams
            ]

    quiet = FakeLeader(["$scavenges-1", "$persistentsubscription-s::g-checkpoint", "$epochs"])
    tracker = Tracker(quiet, quiet.position())
    quiet.end = 10
    assert tracker.after("POST", 403, "POST /x") is None
    loud = FakeLeader(["orders", "$users", "$epochs"])
    tracker = Tracker(loud, loud.position())
    loud.end = 10
    assert "['$users', 'orders']" in (tracker.after("POST", 403, "POST /x") or "")
    loud.end = 20
    assert tracker.after("GET", 403, "GET /x") is None
    assert tracker.after("POST", 201, "POST /x") is None


def test_a_leader_that_resigns_between_the_checks_reads_is_an_election_not_an_error():
    """The log end moved after a refusal, and the leader stopped leading before the check read it
    again (a resign in the follower's fuzz run: 'Runtime Error: … is ResigningLeader'): the request is
    not judged, and the new leader's log is read from then on."""

    class Resigning(Leader):
        def __init__(self) -> None:
            self.reads = 0
            self.client = httpx.Client(base_url="https://127.0.0.1:2113")

        def position(self) -> int:
            self.reads += 1
            if self.reads == 3:  # after()'s first read saw it leading; written_since's finds it resigning
                raise LeaderChanged("https://127.0.0.1:2113 is ResigningLeader")
            return 10 * self.reads

    leader = Resigning()
    tracker = Tracker(leader, leader.position(), find_leader=lambda: httpx.URL("https://127.0.0.1:2114"))
    assert tracker.after("POST", 403, "POST /x") is None
    assert tracker.elections == 1 and tracker.last == 40  # the new leader's log end (its read: the 4th)
    assert leader.client.base_url == httpx.URL("https://127.0.0.1:2114")


@pytest.mark.parametrize(
    ("status", "fails"), [(500, True), (502, True), (503, False), (404, False), (200, False)]
)
def test_a_server_error_but_not_ready_is_caught(status, fails):
    @dataclass
    class Answer:
        status_code: int
        text: str = "body"

    if fails:
        with pytest.raises(AssertionError):
            no_server_error_but_not_ready(None, Answer(status), None)
    else:
        no_server_error_but_not_ready(None, Answer(status), None)

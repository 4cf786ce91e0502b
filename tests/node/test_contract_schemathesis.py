"""schemathesis (Python API) against /openapi.json of a live node: no server error, nothing undocumented.

One bounded run is shared by the tests of this module: a node is started in-process (insecure, port 0,
real clock) in its own event loop, and schemathesis's engine — the one ``st run`` drives — runs every
phase but the stateful one against it as ``admin``, with a fixed seed and a few examples per operation.
The node's own log is watched too: a request the server cannot answer (a dropped connection) is
invisible to schemathesis when a retry succeeds, but not to the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import httpx
import pytest
import schemathesis
from aiohttp.http_exceptions import BadHttpMessage
from schemathesis.engine import Status, events

from evdb.node import Node
from tests.node.conftest import node_options

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
)
EXCLUDED = (
    ("POST", "/admin/shutdown"),  # it stops the node
    ("POST", "/admin/node/resign"),  # the node would be without a leader for the calls after it
)
SEED = 20261122
MAX_EXAMPLES = 8
#: CPU seconds of this process (the node and the engine both run in it) for the engine run; past it the
#: run is stopped and the test fails. CPU, not wall-clock time: a loaded machine slows the run, it does
#: not make it do more (a run under `nice -n 10` beside a simulation took 51 s of wall-clock time)
DEADLINE = 50.0
#: wall-clock seconds after which a run that is stuck (waiting, not working) is stopped
STUCK_AFTER = 600.0


@dataclass(frozen=True)
class Finding:
    operation: str
    check: str
    title: str
    message: str
    status: int | None
    reproduce: str

    def __str__(self) -> str:
        return f"{self.operation}: {self.check}: {self.title} (status {self.status})\n  {self.message}\n  {self.reproduce}"


@dataclass
class Run:
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    operations: set[str] = field(default_factory=set)
    responses: int = 0
    stop_reason: str | None = None
    elapsed: float = 0.0
    server_errors: list[str] = field(default_factory=list)


class _Collect(logging.Handler):
    """Keeps the node's and aiohttp's error records (unhandled exceptions in handlers or responses)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            if isinstance(record.exc_info[1], BadHttpMessage):
                return  # a malformed request (e.g. a NUL in a header), rightly answered 400 by aiohttp
            text += f": {record.exc_info[1]!r}"
        self.records.append(f"{record.name}: {text}")


def _config(base_url: str) -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "base-url": base_url,
            "auth": {"basic": {"username": "admin", "password": "changeit"}},
            "workers": 1,
            "request-timeout": 5,
            "max-stream-events": 1,  # subscriptions are endless event streams: the first event is enough
            "generation": {"max-examples": MAX_EXAMPLES, "database": "none", "no-shrink": True},
            "phases": {"stateful": {"enabled": False}},
            "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
        }
    )


def load_schema(base_url: str):
    """Blocking: the node's own document, as schemathesis loads it, without the excluded operations."""
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json", config=_config(base_url))
    for method, path in EXCLUDED:
        schema = schema.exclude(method=method, path=path)
    return schema


def run_schemathesis(schema) -> Run:
    """Blocking: run the examples, coverage and fuzzing phases once."""
    run = Run()
    seen: set[tuple[str, str, str, int | None]] = set()
    started, cpu_started = time.monotonic(), time.process_time()
    stream = schemathesis.engine.from_schema(schema).execute()
    for event in stream:
        if time.process_time() - cpu_started > DEADLINE or time.monotonic() - started > STUCK_AFTER:
            stream.stop()
        if isinstance(event, events.ScenarioFinished):
            recorder = event.recorder
            if event.status != Status.SKIP:
                run.operations.add(recorder.label)
            run.responses += sum(1 for i in recorder.interactions.values() if i.response is not None)
            for case_id, checks in recorder.checks.items():
                for check in checks:
                    if check.status != Status.FAILURE or check.failure_info is None:
                        continue
                    interaction = recorder.interactions.get(case_id)
                    status = (
                        interaction.response.status_code if interaction and interaction.response else None
                    )
                    failure = check.failure_info.failure
                    key = (recorder.label, check.name, failure.title, status)
                    if key not in seen:
                        seen.add(key)
                        run.findings.append(
                            Finding(
                                recorder.label,
                                check.name,
                                failure.title,
                                (failure.message or "")[:400],
                                status,
                                check.failure_info.code_sample[:400],
                            )
                        )
        elif isinstance(event, events.NonFatalError):
            run.errors.append(f"{event.label}: {event.info.title}: {event.info.message}"[:500])
        elif isinstance(event, events.FatalError):
            run.errors.append(f"fatal: {event.exception!r}")
        elif isinstance(event, events.EngineFinished):
            run.stop_reason = str(event.stop_reason)
    run.elapsed = time.process_time() - cpu_started
    return run


async def _run_against_a_live_node(tmp_path) -> Run:
    node = Node(node_options(tmp_path, "--max-mem-table-size", "1000000"), name="schemathesis")
    await node.start()
    collect = _Collect()
    watched = [logging.getLogger("aiohttp.server"), logging.getLogger("aiohttp.web"), node.logger]
    for logger in watched:
        logger.addHandler(collect)
    try:
        async with httpx.AsyncClient(base_url=node.http_url, auth=("admin", "changeit")) as admin:
            seeded = await admin.post(  # something to read, so reads of an existing stream run too
                "/streams/contract",
                json={"n": 1},
                headers={
                    "Kurrent-EventType": "Seed",
                    "Kurrent-EventId": "3f0b7f1e-59a4-4bd6-9d52-1c3a27a4c1f5",
                    "Content-Type": "application/json",
                },
            )
            assert seeded.status_code == 201, seeded.text
        schema = await asyncio.to_thread(load_schema, node.http_url)
        run = await asyncio.to_thread(run_schemathesis, schema)
    finally:
        for logger in watched:
            logger.removeHandler(collect)
        await node.stop()
    run.server_errors = collect.records
    return run


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    return asyncio.run(_run_against_a_live_node(tmp_path_factory.mktemp("schemathesis")))


def test_schemathesis_reached_every_operation_in_time(run):
    assert run.stop_reason == "completed", run.stop_reason
    assert run.elapsed < DEADLINE, f"{run.elapsed:.1f} CPU s"
    assert run.responses > 100, f"schemathesis hardly reached the node ({run.responses} responses)"
    assert not any("/admin/shutdown" in op for op in run.operations)
    expected = {"GET /info", "GET /metrics", "POST /streams/{stream}", "POST /admin/scavenge", "POST /users"}
    assert expected <= run.operations, sorted(run.operations)


def test_no_server_error_and_no_contract_violation(run):
    """not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance."""
    report = "\n".join(str(item) for item in [*run.errors, *run.findings])
    assert not run.errors, report
    assert not run.findings, f"{len(run.findings)} contract violations:\n{report}"


def test_the_node_answered_every_request_without_an_unhandled_error(run):
    """The node's log shows no unhandled error: no 500, and no response aiohttp refused to send (such
    as a header with a control character, which drops the connection: schemathesis retries it unseen)."""
    assert not run.server_errors, "\n".join(run.server_errors)


async def test_the_checks_do_catch_a_response_the_document_does_not_describe(node):
    """The same configuration against a document that lies about /info: the run must report it."""
    async with httpx.AsyncClient(base_url=node.http_url) as anonymous:
        document = (await anonymous.get("/openapi.json")).json()
    document["paths"] = {"/info": document["paths"]["/info"]}
    document["paths"]["/info"]["get"]["responses"] = {
        "200": {"description": "claims HTML", "content": {"text/html": {"schema": {"type": "string"}}}}
    }
    schema = schemathesis.openapi.from_dict(document, config=_config(node.http_url))
    lying = await asyncio.to_thread(run_schemathesis, schema)
    assert {f.check for f in lying.findings} == {"content_type_conformance"}, lying.findings


async def test_creating_a_user_with_a_control_character_in_the_login_gets_an_answer(client):
    """Found by this module's run: the login was accepted and 'Location: /users/<login>' dropped the connection."""
    login = "bell\x07"
    try:
        response = await client.post("/users", json={"loginName": login, "password": "pw"})
    except httpx.RemoteProtocolError as exc:
        created = login in [u["loginName"] for u in (await client.get("/users")).json()["data"]]
        pytest.fail(f"no answer ({exc}); the user was created anyway: {created}")
    assert response.status_code in (201, 400), response.status_code
    if response.status_code == 201:
        assert response.headers["Location"].isascii()


@pytest.mark.parametrize(("login", "location"), [("x y", "/users/x%20y"), ("zoë", "/users/zo%C3%AB")])
async def test_the_location_of_a_new_user_is_percent_encoded(client, login, location):
    response = await client.post("/users", json={"loginName": login, "password": "pw"})
    assert response.status_code == 201, response.text
    assert response.headers["Location"] == location
    assert (await client.get(location)).json()["data"]["loginName"] == login

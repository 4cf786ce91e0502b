"""The runner of KurrentDB's client test suites (tests/clients/run_kurrentdbclient_suite.py).

Its own rules are checked here on small checkouts made in the test: which tests need a user-defined
projection, the versions taken from a suite's poetry.lock, and how pytest's reports are counted (a
test failing only on evdb's "no user-defined projections" answer is counted apart).

The suites themselves need their repositories (GitHub; their sdists on PyPI have no tests) and the
ports they expect (2110-2114), so running them is opt-in: set ``EVDB_KURRENTDBCLIENT_SOURCE`` (and
``EVDB_EVENTSOURCING_KURRENTDB_SOURCE``) to checkouts at the tags docs/grpc.md names, and
``test_suite_passes`` runs the representative subset (``--quick``, about 2 minutes) or the whole
eventsourcing-kurrentdb suite (under 1 minute) against evdb nodes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evdb.errors import UserProjectionsNotSupported
from tests.clients import run_kurrentdbclient_suite as runner

ROOT = Path(__file__).resolve().parents[2]


def _checkout(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_user_defined_projection_tests_are_found_by_their_bodies(tmp_path: Path) -> None:
    source = _checkout(
        tmp_path,
        {
            "tests/test_client.py": """
                class TestKurrentDBClient:
                    def test_append(self):
                        self.client.append_events("s", [])

                    def test_create_projection(self):
                        self.client.create_projection(query="", name="p")

                    def test_projection_example(self):
                        self.client.update_projection(name="p", query="")

                    def test_restart_projections_subsystem(self):
                        self.client.restart_projections_subsystem()

                class TestGrpcOptions:
                    def test_options(self):
                        pass

                class Helper:
                    pass
            """,
            "tests/test_client_async.py": """
                class TestAsync:
                    async def test_enable_projection(self):
                        await self.client.create_projection(query="", name="p")
            """,
        },
    )
    assert runner.user_projection_tests(source) == [
        "test_create_projection",
        "test_enable_projection",
        "test_projection_example",
    ]
    groups = {g.name: g for g in runner.groups(runner.SUITES["kurrentdbclient"], source)}
    assert groups["connection"].ids == ("tests/test_client.py::TestGrpcOptions",)
    assert groups["cluster"].nodes == ("cluster",)


def test_locked_versions_come_from_the_suites_poetry_lock(tmp_path: Path) -> None:
    source = _checkout(
        tmp_path,
        {
            "poetry.lock": """
                [[package]]
                name = "grpcio"
                version = "1.71.0"

                [[package]]
                name = "black"
                version = "25.1.0"

                [[package]]
                name = "opentelemetry-sdk"
                version = "1.34.0"
            """
        },
    )
    suite = runner.SUITES["kurrentdbclient"]
    assert runner.locked_versions(suite, source) == ["grpcio==1.71.0", "opentelemetry-sdk==1.34.0"]
    assert runner.locked_versions(suite, tmp_path / "elsewhere") == []


def test_reports_are_counted_and_user_defined_projections_apart(tmp_path: Path) -> None:
    message = str(UserProjectionsNotSupported("p"))
    assert message.startswith(runner.USER_PROJECTIONS)  # the runner knows evdb's answer
    source = _checkout(
        tmp_path,
        {
            "tests/test_some.py": f"""
                import sys
                import pytest

                def test_passes():
                    pass

                def test_fails():
                    assert 1 == 2

                @pytest.mark.skip(reason="not here")
                def test_skipped():
                    pass

                def test_readme():
                    print("File samples/projections.py ERROR: {message}", file=sys.stderr)
                    raise AssertionError("1 samples failed")
            """
        },
    )
    group = runner.Group("some", "a few tests", (), ("tests/test_some.py",))
    results = tmp_path / "results"
    results.mkdir()
    counts = runner.run_group(Path(sys.executable), source, group, "", results, timeout=None)
    assert (counts.passed, counts.failed, counts.errors, counts.skipped) == (1, 1, 0, 1)
    assert counts.failures == ("test_some::test_fails",)
    assert counts.projections == ("test_some::test_readme",)


_SOURCES = {
    "kurrentdbclient": "EVDB_KURRENTDBCLIENT_SOURCE",
    "eventsourcing-kurrentdb": "EVDB_EVENTSOURCING_KURRENTDB_SOURCE",
}


@pytest.mark.parametrize("suite", sorted(_SOURCES))
def test_suite_passes(suite: str, tmp_path: Path) -> None:
    source = os.environ.get(_SOURCES[suite])
    if not source:
        pytest.skip(
            f"set {_SOURCES[suite]} to a checkout of {runner.SUITES[suite].repository} at "
            f"{runner.SUITES[suite].default_ref} to run its tests against evdb (docs/grpc.md)"
        )
    done = subprocess.run(
        [
            sys.executable,
            str(Path(runner.__file__)),
            "--suite",
            suite,
            "--source",
            source,
            "--quick",
            "--results",
            str(tmp_path / "results"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

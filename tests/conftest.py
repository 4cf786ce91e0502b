from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping

import pytest

import evdb.options.loading
import evdb.options.sources
from evdb.clock import ManualClock
from evdb.database import Database
from evdb.options.spec import env_name
from tests.hash_cost import SUITE_COST

#: Bytecode of the processes the suite starts (node processes, the CLI, xdist's workers): with
#: PYTHONDONTWRITEBYTECODE set (and no PYTHONPYCACHEPREFIX), each one compiled evdb and its tests from
#: source again, 0.25 s of CPU a node process (0.73 -> 0.48 s for `import evdb.node, evdb.cli`). They
#: cache it under the temp folder instead, outside the tree (a source's changed mtime or size makes
#: Python compile it again).
if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(
        tempfile.gettempdir(), f"evdb-tests-pycache-{os.getuid()}"
    )

#: The suite's nodes hash passwords at tests/hash_cost.py's cost: every node start hashes admin's and
#: ops' passwords, and every sign-in that is not cached (a wrong password, an unknown login, a new
#: client) hashes once more.
SUITE_HASH_COST = str(SUITE_COST.log2_n)
_HASH_COST_VARIABLE = env_name("PasswordHashCost")
# node processes the tests start inherit it (a test's own environment for a node may still set another)
os.environ.setdefault(_HASH_COST_VARIABLE, SUITE_HASH_COST)


@pytest.fixture(autouse=True, scope="session")
def _suite_hash_cost() -> Iterator[None]:
    """In-process nodes too: their options are loaded with an environment of the test's own (mostly
    empty, so the developer's variables do not leak in); the suite's cost is added to it unless the
    test's environment names one."""
    read_environment = evdb.options.loading.read_environment

    def with_suite_cost(environ: Mapping[str, str], problems: list[str]):
        return read_environment({_HASH_COST_VARIABLE: SUITE_HASH_COST, **environ}, problems)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(evdb.options.loading, "read_environment", with_suite_cost)
        yield


@pytest.fixture
def production_environment(monkeypatch) -> None:
    """Options read from a test's environment exactly as a node reads them (without the suite's
    hash cost): for tests about where each option's value comes from (tests/test_options.py)."""
    monkeypatch.setattr(evdb.options.loading, "read_environment", evdb.options.sources.read_environment)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["disk", "memory"])
def db(request, tmp_path, clock):
    """A small-chunk database, on disk and in memory (MemDb): the same semantics either way."""
    directory = str(tmp_path / "db") if request.param == "disk" else None
    database = Database.open(
        directory,
        clock=clock,
        chunk_size=64 * 1024,
        existence_filter_capacity=10_000,
        max_memtable_entries=64,
    )
    yield database
    database.close()


#: The slowest test files of the whole suite, with their seconds (the sum of their tests' durations,
#: ``.venv/bin/python -m pytest -n 3 --durations=60 -q -p no:cacheprovider`` on 2026-12-06, load about 2;
#: files not in that list keep their earlier, loaded-machine figures). They are collected first, slowest
#: first, each file's tests in their own order (its module fixtures are made once a worker), so the
#: long ones start at once and the suite does not end waiting on one of them while the other worker
#: idles; ``--dist worksteal`` (.ci/run) lets an idle worker take tests queued for the other one.
#: An ordering hint only: a file missing here runs after these, in collection order.
SLOWEST_FILES = {
    "tests/scenarios/test_replay.py": 221,
    "tests/sim/test_simulation.py": 177,
    "tests/cluster/test_rolling_certificates.py": 110,
    "tests/scavenge/test_disk_speed.py": 62,
    "tests/node/test_contract_schemathesis.py": 50,
    "tests/webui/test_admin_page.py": 47,
    "tests/cluster/test_fault_schedule.py": 41,
    "tests/tui/test_truth.py": 41,
    "tests/node/test_roles.py": 40,
    "tests/test_readme.py": 39,
    "tests/node/test_auth_matrix.py": 39,
    "tests/mirror/test_mirror_processes.py": 37,
    "tests/adversarial/test_api_fuzz.py": 33,
    "tests/test_stream_model.py": 32,
    "tests/index/test_table_index.py": 30,
    "tests/mirror/test_mirror_parallel_kill.py": 29,
    "tests/tui/test_snapshots.py": 27,
    "tests/cluster/test_operations_day.py": 26,
    "tests/autoscavenge/test_cluster.py": 26,
    "tests/reliability/test_crash_matrix.py": 22,
    "tests/archive/test_follower_archive_process.py": 22,
    "tests/test_demo_follows_leader.py": 21,
    "tests/cluster/test_cluster_processes.py": 13,
    "tests/cluster/test_sign_in_lease_processes.py": 13,
    "tests/crash/test_kill9.py": 11,
    "tests/tui/test_local_cluster.py": 10,
}


def pytest_collection_modifyitems(session, config, items) -> None:
    """The slowest files first (SLOWEST_FILES); a stable sort, so every other test keeps its place."""
    root = config.rootpath

    def seconds(item) -> int:
        try:
            path = item.path.relative_to(root).as_posix()
        except ValueError:
            return 0
        return SLOWEST_FILES.get(path, 0)

    items.sort(key=lambda item: -seconds(item))

"""A pytest plugin that runs the in-process async tests on uvloop, the loop ``evdb node`` runs on
(pytest-asyncio's ``pytest_asyncio_loop_factories`` hook): the suite's own run stays on asyncio's loop,
and any set of in-process tests can be run again on uvloop::

    PYTHONPATH=tests .venv/bin/pytest -p no:cacheprovider -p uvloop_loops tests/tls/test_reload.py

Tests that make their own loop (tests/clients' NodeThread) keep it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import uvloop


def pytest_asyncio_loop_factories(config: Any, item: Any) -> Mapping[str, Callable[[], Any]]:
    return {"uvloop": uvloop.new_event_loop}

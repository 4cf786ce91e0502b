"""The hint printed when the dashboard leaves its local cluster running."""

from __future__ import annotations


def test_the_stop_hint_names_an_evdb_that_runs_from_any_shell():
    """The dashboard's hint on leaving a local cluster running works without an active virtual
    environment: it names the evdb script beside the interpreter."""
    import os
    import sys

    from evdb.dashboard_cli import evdb_command

    command = evdb_command()
    assert command == "evdb" or (
        os.path.isabs(command) and os.path.dirname(command) == os.path.dirname(sys.executable)
    )

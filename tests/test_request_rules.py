"""The rules of the auto-scavenge schedule and of the backup target live once, in their feature's
package; the dashboard's dialogs apply the node's own rules (before, each had its own copy, and they
disagreed: the dashboard accepted ``@daily`` and ``0 0 L * *``, which the node refuses)."""

from __future__ import annotations

import pytest

from evdb.autoscavenge.schedule import InvalidSchedule, parse_schedule
from evdb.backup.errors import InvalidBackupFolder
from evdb.backup.layout import backup_target
from tui.calls import BackupForm, FormError, configure_auto_scavenge, next_cron_runs

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize(
    "schedule", ["@daily", "0 0 L * *", "H * * * *", "61 * * * *", "* * * *", "0 0 * * * *", "", "0 0 31 2 *"]
)
def test_the_dashboard_refuses_every_schedule_the_node_refuses(schedule):
    with pytest.raises(InvalidSchedule):
        parse_schedule(schedule)
    with pytest.raises(FormError) as refused:
        configure_auto_scavenge("http://127.0.0.1:2113", schedule, NOW)
    assert refused.value.field_name == "schedule" and "Invalid CRON expression" in str(refused.value)


def test_the_dashboard_previews_the_runs_the_node_would_make():
    runs = next_cron_runs("30 3 * * *", NOW)
    expected = parse_schedule("30 3 * * *")
    assert [r.timestamp() for r in runs][:1] == [expected.next_after(NOW)]
    assert [r.isoformat() for r in runs] == [
        "2026-01-01T03:30:00+00:00",
        "2026-01-02T03:30:00+00:00",
        "2026-01-03T03:30:00+00:00",
    ]


@pytest.mark.parametrize("folder", ["", "   ", "backups/today", "/backups/\x00today"])
def test_the_dashboard_refuses_every_backup_target_the_node_refuses(folder):
    with pytest.raises(InvalidBackupFolder) as node_says:
        backup_target(folder)
    with pytest.raises(FormError) as dialog_says:
        BackupForm(folder).call("http://127.0.0.1:2113")
    assert str(dialog_says.value) == str(node_says.value)


def test_a_backup_target_is_normalised_the_same_way_everywhere():
    assert backup_target("/backups//today/") == "/backups/today"
    assert BackupForm("/backups//today/").call("http://n").json_body["to"] == "/backups/today"

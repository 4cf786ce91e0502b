"""Auto-scavenge configure refuses a CRON expression that never fires and a body nested too deep
(issue 20, item 7); one rule, evdb.autoscavenge.schedule.parse_schedule."""

from __future__ import annotations

import pytest

from evdb.autoscavenge.schedule import InvalidSchedule, parse_schedule
from evdb.autoscavenge.state import CONFIGURATION_UPDATED, AutoScavengeState

NEVER = ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *", "*/5 * 31 2 *"]


@pytest.mark.parametrize("expression", NEVER)
def test_a_schedule_that_never_fires_is_refused(expression):
    with pytest.raises(InvalidSchedule, match="never fires"):
        parse_schedule(expression)


def test_a_six_field_schedule_that_never_fires_is_refused():
    with pytest.raises(InvalidSchedule, match="never fires"):
        parse_schedule("0 0 0 31 2 *", allow_seconds=True)


@pytest.mark.parametrize(
    ("expression", "normal"),
    [("0 0 29 2 *", "0 0 29 2 *"), ("0 0 31 * *", "0 0 31 * *"), ("0 0 29 2 mon", "0 0 29 2 1")],
)
def test_rare_schedules_that_do_fire_are_accepted(expression, normal):
    assert parse_schedule(expression).expression == normal


def test_a_day_of_month_and_a_day_of_week_must_both_match_as_in_kurrentdb():
    """NCrontab's rule: 31 February is never a Monday, so it never fires (croniter's default would fire
    on every Monday of February)."""
    with pytest.raises(InvalidSchedule, match="never fires"):
        parse_schedule("0 0 31 2 mon")


def test_a_stored_schedule_that_never_fires_still_loads():
    """An older version accepted it: its configuration event must not break the state's replay."""
    state = AutoScavengeState()
    state.apply(CONFIGURATION_UPDATED, {"schedule": "0 0 31 2 *", "updatedAt": "2026-01-01T00:00:00Z"})
    assert state.schedule is not None and state.next_due == float("inf")


async def test_configure_with_a_schedule_that_never_fires_is_400(clients):
    r = await clients["ops"].post("/auto-scavenge/configure", json={"schedule": "0 0 31 2 *"})
    assert r.status_code == 400
    assert "never fires" in r.json()
    assert (await clients["ops"].get("/auto-scavenge/status")).json()["state"] == "NotConfigured"


async def test_configure_with_a_body_nested_3000_deep_is_400(clients):
    for body in (b"[" * 3000 + b"]" * 3000, b'{"schedule":' * 3000 + b'"* * * * *"' + b"}" * 3000):
        r = await clients["ops"].post(
            "/auto-scavenge/configure", content=body, headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 400
        assert r.json() == "Invalid payload"
    assert (await clients["ops"].get("/auto-scavenge/status")).json()["state"] == "NotConfigured"

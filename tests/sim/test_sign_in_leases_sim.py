"""Sign-in leases in the simulator (evdb/cluster/lease.py, Simulation.check_sign_ins): one client write in
five changes a user, and at every acknowledged change (and every 0.05 simulated s) no node's sign-in
decision admits credentials while it shows less than that change. The seeds of
tests/sim/test_simulation.py run with the check on; here: the checker is not blind."""

from __future__ import annotations

from evdb.cluster import lease, sim

SECONDS = 4.0


def _sign_in_violations(count: int) -> list[str]:
    return [
        v
        for seed in range(count)
        for v in sim.run_seed(seed, seconds=SECONDS).violations
        if "sign callers in" in v
    ]


def test_the_checker_sees_a_user_change_answered_before_the_leases_allow(monkeypatch):
    monkeypatch.setattr(lease.LeaseGrantor, "releases", lambda self, end, acked, now: True)
    assert _sign_in_violations(12)


def test_the_checker_sees_a_member_signing_in_without_a_running_lease(monkeypatch):
    monkeypatch.setattr(
        lease.LeaseHolder,
        "admits",
        lambda self, now, readable, unseen: readable >= self.security_end and not unseen,
    )
    assert _sign_in_violations(20)


def test_seeds_keep_the_sign_in_rule():
    assert not _sign_in_violations(12)

"""An ``eventsourcing`` application on evdb through ``eventsourcing-kurrentdb``, unchanged: aggregates
through the repository, the notification log (``$all``), and a projection that follows ``$all``."""

from __future__ import annotations

import threading
from functools import singledispatchmethod
from uuid import UUID

import pytest
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import IntegrityError, Tracking
from eventsourcing.popo import POPOTrackingRecorder
from eventsourcing.projection import Projection, ProjectionRunner


class Account(Aggregate):
    INITIAL_VERSION = 0  # eventsourcing-kurrentdb maps versions to stream revisions (from 0)

    @event("Opened")
    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.balance = 0

    @event("Credited")
    def credit(self, amount: int) -> None:
        self.balance += amount


class Bank(Application[UUID]):
    snapshotting_intervals = {Account: 3}  # exercises the snapshot stream too

    def open(self, owner: str) -> UUID:
        account = Account(owner)
        self.save(account)
        return account.id

    def credit(self, account_id: UUID, amount: int) -> None:
        account: Account = self.repository.get(account_id)
        account.credit(amount)
        self.save(account)

    def balance(self, account_id: UUID) -> int:
        return self.repository.get(account_id).balance


class TotalsView(POPOTrackingRecorder):
    """A materialised view: total credited, tracked by notification id (the $all commit position)."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.opened = 0
        self._lock = threading.Lock()

    def add(self, amount: int, opened: int, tracking: Tracking) -> None:
        with self._lock:
            self.insert_tracking(tracking)
            self.total += amount
            self.opened += opened


class Totals(Projection[TotalsView]):
    @singledispatchmethod
    def process_event(self, domain_event, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    @process_event.register
    def _(self, domain_event: Account.Opened, tracking: Tracking) -> None:
        self.view.add(0, 1, tracking)

    @process_event.register
    def _(self, domain_event: Account.Credited, tracking: Tracking) -> None:
        self.view.add(domain_event.amount, 0, tracking)


def env_for(target) -> dict[str, str]:
    return {
        "PERSISTENCE_MODULE": "eventsourcing_kurrentdb",
        "KURRENTDB_URI": target.uri,
        "TOTALS_PERSISTENCE_MODULE": "eventsourcing.popo",
    }


def test_application_repository_notification_log_and_projection(target):
    env = env_for(target)
    with ProjectionRunner(
        application_class=Bank, projection_class=Totals, view_class=TotalsView, env=env
    ) as runner:
        bank: Bank = runner.app
        alice = bank.open("alice")
        bob = bank.open("bob")
        for amount in (10, 20, 30, 40):
            bank.credit(alice, amount)
        bank.credit(bob, 5)
        assert bank.balance(alice) == 100 and bank.balance(bob) == 5
        assert bank.repository.get(alice, version=1).balance == 10  # an older version

        # the notification log reads $all: every domain event once, in order, snapshots left out
        notifications = bank.notification_log.select(start=None, limit=10)
        assert [n.topic.rsplit(".", 1)[-1] for n in notifications].count("Credited") == 5
        ids = [n.id for n in notifications]
        assert ids == sorted(ids) and len(notifications) == 7
        page = bank.notification_log.select(start=ids[2], limit=2)
        assert [n.id for n in page] == ids[2:4]
        after = bank.notification_log.select(start=ids[2], limit=2, inclusive_of_start=False)
        assert [n.id for n in after] == ids[3:5]
        assert bank.recorder.max_notification_id() == ids[-1]

        # the projection follows $all (a catch-up subscription) and catches up with every event
        runner.wait(ids[-1], timeout=20)
        assert runner.view.total == 105 and runner.view.opened == 2
        bank.credit(bob, 1)
        runner.wait(bank.recorder.max_notification_id(), timeout=20)
        assert runner.view.total == 106

    # another application instance sees the same state; optimistic concurrency holds
    other = Bank(env=env)
    try:
        account: Account = other.repository.get(alice)
        assert account.balance == 100 and account.owner == "alice"
        stale: Account = other.repository.get(bob, version=0)
        stale.credit(1)
        with pytest.raises(IntegrityError):
            other.save(stale)
    finally:
        other.close()

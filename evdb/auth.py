"""Users, roles and HTTP Basic authentication.

Users live in the database itself: the current state of user ``alice`` is the last event of stream
``$user-alice``; ``$users`` lists creations and deletions. Passwords are stored as scrypt hashes
with a per-user salt; each record names the scrypt cost its hash was made with (``"scrypt": {"n", "r",
"p"}``; a record without it was made with the original cost, n = 2^14, r = 8, p = 1), so a record made at
one cost still verifies after the cost of new hashes changes (option ``PasswordHashCost``). Two users exist from the first start: ``admin`` (group ``$admins``) and
``ops`` (group ``$ops``), both with the password ``changeit``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import builtins
import hashlib
import hmac
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from evdb.database import Database
from evdb.errors import (
    DatabaseReopening,
    EvdbError,
    InvalidInput,
    StreamDeleted,
    StreamNotFound,
    UsersNotReady,
)
from evdb.streams import NewEvent, is_metastream, original_stream_of

__all__ = [
    "ADMINS",
    "ANONYMOUS",
    "DEFAULT_HASH_COST",
    "MAX_HASH_COST",
    "MIN_HASH_COST",
    "OPS",
    "HashCost",
    "Principal",
    "UserAlreadyExists",
    "UserInfo",
    "UserNotFound",
    "UserStore",
    "hash_password",
    "parse_basic_authorization",
    "stream_access",
    "verify_password",
]

ADMINS = "$admins"
OPS = "$ops"
#: log2 of scrypt's n for new hashes unless the node's PasswordHashCost says otherwise (n = 2^14, r = 8,
#: p = 1: about 40 ms and 16 MiB a hash); the cost of every record written before costs were recorded
DEFAULT_HASH_COST = 14
#: the PasswordHashCost range; a record naming an n outside it is treated as damaged (never computed: a
#: record naming n = 2^40 must not make a sign-in allocate terabytes)
MIN_HASH_COST, MAX_HASH_COST = 10, 17
_SCRYPT_R, _SCRYPT_P, _SCRYPT_DKLEN = 8, 1, 32
DEFAULT_USERS = (("admin", "KurrentDB Administrator", (ADMINS,)), ("ops", "KurrentDB Operations", (OPS,)))
DEFAULT_PASSWORD = "changeit"
#: (salt, hash) compared against when a login does not exist: a random password no one knows (hashed at
#: the store's own cost for new hashes: as long as a wrong password for a user made at that cost)
_DUMMY_CREDENTIALS = (base64.b64encode(os.urandom(16)).decode(), base64.b64encode(os.urandom(32)).decode())


class UserNotFound(EvdbError):
    def __init__(self, login: str) -> None:
        super().__init__(f"User '{login}' does not exist.")


class UserAlreadyExists(EvdbError):
    def __init__(self, login: str) -> None:
        super().__init__(f"User '{login}' already exists.")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking: a user name and its roles (its groups plus its own name)."""

    name: str
    roles: frozenset[str] = field(default_factory=frozenset)

    @property
    def is_authenticated(self) -> bool:
        return bool(self.name)

    @property
    def is_admin(self) -> bool:
        return ADMINS in self.roles

    @property
    def is_ops(self) -> bool:
        return OPS in self.roles or ADMINS in self.roles

    def has_any(self, roles: set[str] | frozenset[str]) -> bool:
        return bool(self.roles & roles)


ANONYMOUS = Principal("")


@dataclass(frozen=True, slots=True)
class UserInfo:
    login_name: str
    full_name: str
    groups: tuple[str, ...]
    disabled: bool = False

    def to_json(self) -> dict:
        return {
            "loginName": self.login_name,
            "fullName": self.full_name,
            "groups": list(self.groups),
            "disabled": self.disabled,
        }


@dataclass(frozen=True, slots=True)
class HashCost:
    """scrypt's parameters of one password hash: n = 2^``log2_n``, r, p (stored with the hash)."""

    log2_n: int = DEFAULT_HASH_COST
    r: int = _SCRYPT_R
    p: int = _SCRYPT_P

    def __post_init__(self) -> None:
        if not MIN_HASH_COST <= self.log2_n <= MAX_HASH_COST or self.r != _SCRYPT_R or self.p != _SCRYPT_P:
            raise ValueError(
                f"scrypt n=2^{self.log2_n}, r={self.r}, p={self.p} is outside the supported costs "
                f"(n from 2^{MIN_HASH_COST} to 2^{MAX_HASH_COST}, r={_SCRYPT_R}, p={_SCRYPT_P})"
            )

    def to_record(self) -> dict[str, int]:
        return {"n": 2**self.log2_n, "r": self.r, "p": self.p}

    @staticmethod
    def of_record(record: dict) -> HashCost:
        """The cost a user record names (the original cost when it names none); ValueError when the
        record names one this node does not compute."""
        if "scrypt" not in record:
            return HashCost()
        named = record["scrypt"]
        if not isinstance(named, dict) or not all(isinstance(named.get(k), int) for k in ("n", "r", "p")):
            raise ValueError(f"unreadable scrypt parameters {named!r}")
        n = named["n"]
        if n < 2 or n & (n - 1):
            raise ValueError(f"scrypt n={n} is not a power of two")
        return HashCost(n.bit_length() - 1, named["r"], named["p"])


def hash_password(password: str, salt: bytes | None = None, cost: HashCost | None = None) -> tuple[str, str]:
    """(salt, hash) as base64 strings, at ``cost`` (default: n = 2^14, r = 8, p = 1)."""
    cost = cost or HashCost()
    salt = salt or os.urandom(16)
    n = 2**cost.log2_n
    digest = hashlib.scrypt(
        password.encode(),
        salt=salt,
        n=n,
        r=cost.r,
        p=cost.p,
        dklen=_SCRYPT_DKLEN,
        maxmem=132 * cost.r * n * cost.p + 2**20,  # scrypt's 128·r·n bytes and room (OpenSSL: 32 MiB default)
    )
    return base64.b64encode(salt).decode(), base64.b64encode(digest).decode()


def verify_password(password: str, salt: str, expected_hash: str, cost: HashCost | None = None) -> bool:
    _, digest = hash_password(password, base64.b64decode(salt), cost)
    return hmac.compare_digest(digest, expected_hash)


def parse_basic_authorization(header: str) -> tuple[str, str] | None:
    """(login, password) from an ``Authorization: Basic ...`` header; None when malformed."""
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic" or not value:
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    login, sep, password = decoded.partition(":")
    if not sep or not login:
        return None
    return login, password


def _check_login(login: object) -> str:
    if (
        not isinstance(login, str)
        or not login
        or len(login) > 256
        or any(c in login for c in "/\\:")
        or any(ord(c) < 32 or ord(c) == 127 for c in login)
    ):
        raise InvalidInput(
            "A login name must be 1 to 256 characters, without '/', '\\', ':' or control characters."
        )
    return login


def _check_password(password: object) -> str:
    if not isinstance(password, str) or not password:
        raise InvalidInput("A password must be a non-empty string.")
    return password


def _login_of(stream: str) -> str | None:
    """The login whose sign-ins a record of ``stream`` decides (``$user-<login>`` or its metastream,
    whose ``$tb``/``$maxCount``/``$maxAge`` hide records), else None."""
    if stream.startswith("$$"):
        stream = stream[2:]
    return stream[6:] if stream.startswith("$user-") else None


class SignInAdmission(Protocol):
    """Whether a cluster member may judge credentials now (evdb/cluster/lease.py: ClusterService)."""

    def admits_sign_in(self, unseen_user_records: bool) -> bool: ...

    async def wait_sign_in(self, ready: Callable[[], bool]) -> bool: ...


_NOT_ADMITTED = (
    "This node cannot judge credentials now (it holds no current sign-in lease from the cluster's "
    "leader, or it has not caught up with the leader's last user change); try again in a moment."
)


class UserStore:
    """Reads and writes users in the database; caches successful logins (blocking: call off the loop).

    The caches hold what the user records said: every committed record of a user stream, written here,
    replicated from a leader or installed with a chunk file, empties them of that login before readers
    can see it (the store is the database's :class:`~evdb.database.VisibilityWatch`), and nothing is
    cached again until readers see it."""

    def __init__(self, db: Database, *, cache_size: int = 1024, hash_cost: HashCost | None = None) -> None:
        self._db = db
        #: the scrypt cost of the hashes written here (PasswordHashCost); each record keeps its own
        self.hash_cost = hash_cost or HashCost()
        self._cache: OrderedDict[tuple[str, str], Principal] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        #: bumped by every change of a user (as it becomes visible, and again once it is): a sign-in
        #: that read the record before a change does not cache what it read
        self._changes = 0
        #: changes committed that readers may not see yet: while any is, nothing is cached (a sign-in
        #: may still read the record before it)
        self._changing = 0
        #: signed-in ``Authorization`` header values (as received) and their principals: one dict
        #: lookup for a caller that sends the same header again; emptied by every change of a user
        self._headers: dict[str, Principal] = {}
        #: a cluster member's sign-in lease (None: a single node judges credentials whenever asked)
        self._admission: SignInAdmission | None = None
        db.add_visibility_watch(self)

    def admit_with(self, admission: SignInAdmission) -> None:
        """Judge credentials only when ``admission`` allows (a cluster member: see evdb/cluster/lease.py);
        else sign-ins wait for it (bounded) and answer UsersNotReady (503)."""
        self._admission = admission

    def may_judge_now(self) -> bool:
        """Whether this node may judge credentials at this moment (a cluster member: while it holds a
        sign-in lease, evdb/cluster/lease.py; a single node: always). Never once this store's database
        is closed: a follower that cuts its diverged log reopens the database with a new store, and
        only that one hears of the user records that come next (this one's caches would outlive a
        change of a user)."""
        if self._db.is_closed:
            return False
        admission = self._admission
        return admission is None or admission.admits_sign_in(self._changing > 0)

    def _check_open(self) -> None:
        """DatabaseReopening (HTTP 503, gRPC UNAVAILABLE: try again) once this store's database is
        closed: a request that began before a follower's reopen is not judged on what it held."""
        if self._db.is_closed:
            raise DatabaseReopening()

    async def _until_admitted(self) -> None:
        if self.may_judge_now():
            return
        self._check_open()
        admission = self._admission
        assert admission is not None  # a single node's open store always may judge
        admitted = await admission.wait_sign_in(lambda: self.may_judge_now() or self._db.is_closed)
        self._check_open()  # closed while it waited (a follower's reopen)
        if not admitted:
            raise UsersNotReady(_NOT_ADMITTED)

    # -- the database's visibility watch --------------------------------------------------------------
    #: ``$user-<login>``, ``$users`` and their metastreams
    prefixes: tuple[str, ...] = ("$user", "$$$user")

    def changing(self, streams: frozenset[str]) -> None:
        with self._lock:
            self._changing += 1
        self._forget(streams)

    def changed(self, streams: frozenset[str]) -> None:
        with self._lock:
            self._changing -= 1
        self._forget(streams)

    # -- records --------------------------------------------------------------------------------------
    def _record(self, login: str) -> dict | None:
        try:
            events = self._db.read_stream_backward(f"$user-{login}", None, 1).events
        except (StreamNotFound, StreamDeleted):
            return None
        if not events:
            return None
        try:
            record = json.loads(events[0].data)
        except (ValueError, UnicodeDecodeError):
            record = None
        try:  # a salt, a hash, and a cost this node computes (HashCost.of_record)
            readable = (
                isinstance(record, dict)
                and isinstance(record.get("salt"), str)
                and "hash" in record
                and HashCost.of_record(record) is not None
            )
        except ValueError:
            readable = False
        if not readable:
            # a user record that cannot be read (redacted or damaged): that login cannot sign in, and
            # nothing else breaks
            logging.getLogger("evdb").error(
                "The user record $user-%s at event %d cannot be read (redacted or damaged): that login is "
                "refused until the user is updated or recreated",
                login,
                events[0].event_number,
            )
            return None
        return record

    def _forget(self, streams: frozenset[str]) -> None:
        """Forget the sign-ins of the logins whose user streams are in ``streams`` (every remembered
        header: one may be such a login's)."""
        logins = {login for login in map(_login_of, streams) if login is not None}
        with self._lock:
            self._changes += 1
            self._headers = {}
            if logins:
                for key in [k for k in self._cache if k[0] in logins]:
                    del self._cache[key]

    # -- public ---------------------------------------------------------------------------------------
    def ensure_defaults(self) -> None:
        """Create ``admin`` and ``ops`` on a fresh database: both records first, then their ``$users``
        events in one append, so a node that shows ``$users`` (ready to judge credentials, see
        :meth:`authenticate`) shows both users."""
        made = [
            login
            for login, full_name, groups in DEFAULT_USERS
            if self._record(login) is None
            and not self._was_deleted(login)
            and not self._exists(login)
            and self._write_created(login, full_name, list(groups), DEFAULT_PASSWORD)
        ]
        if made:
            self._list_created(made)

    def _exists(self, login: str) -> bool:
        """A user stream with events (readable or not: an unreadable record is not overwritten)."""
        return self._db.stream_state(f"$user-{login}").last_event_number >= 0

    def _users_written(self) -> bool:
        """Whether any user was ever written here (``$users`` has an event or a tombstone): until
        then a login without a record is not unknown, only not here yet (a fresh cluster's follower
        before the leader's default users reach it)."""
        state = self._db.stream_state("$users")
        return state.last_event_number >= 0 or state.tombstoned

    def _was_deleted(self, login: str) -> bool:
        return self._db.stream_state(f"$user-{login}").tombstoned

    @staticmethod
    def _cache_key(login: str, password: str) -> tuple[str, str]:
        return login, hashlib.sha256(password.encode()).hexdigest()

    def cached(self, login: str, password: str) -> Principal | None:
        """The principal of credentials that signed in before and are still cached, else None. Never
        blocks (no read, no password hashing; the lock guards only the cache's own operations): safe
        on the event loop. None once this store's database is closed (:meth:`may_judge_now`)."""
        if self._db.is_closed:
            return None
        key = self._cache_key(login, password)
        with self._lock:
            principal = self._cache.get(key)
            if principal is not None:
                self._cache.move_to_end(key)
            return principal

    async def sign_in(self, login: str, password: str, *, leased: bool = True) -> Principal | None:
        """:meth:`authenticate` from the event loop: cached credentials are answered on the loop, and
        only a miss (a read of the user record and a scrypt hash) goes to a worker thread. The one way
        the node's APIs authenticate a caller's Basic credentials. A cluster member first waits
        (bounded) until it may judge credentials (:meth:`admit_with`); ``leased=False``: it judges them
        on its own records (only for ``POST /admin/reloadconfig``: see evdb/http/app.py)."""
        if leased:
            await self._until_admitted()
            principal = self.cached(login, password)
            if principal is not None:
                return principal
        return await asyncio.to_thread(self.authenticate, login, password, leased=leased)

    def by_header(self, header: str) -> Principal | None:
        """The principal of an ``Authorization`` header value that :meth:`sign_in_header` or
        :meth:`principal_now` accepted before, with no user changed since; else None. One dict lookup:
        safe on the event loop. None while this node may not judge credentials (:meth:`admit_with`)."""
        if not self.may_judge_now():
            return None
        return self._headers.get(header)

    def principal_now(self, header: str) -> Principal | None:
        """The principal of a Basic ``Authorization`` header known without waiting: the header signed
        in before (:meth:`by_header`), or its credentials still cached (:meth:`cached`), then
        remembered under the header. None: malformed, or a sign-in is needed (:meth:`sign_in_header`).
        The one way the node's APIs (HTTP, its lean append path, gRPC) look a caller up on the loop.
        None while this node may not judge credentials (:meth:`admit_with`)."""
        if not self.may_judge_now():
            return None
        principal = self._headers.get(header)
        if principal is not None:
            return principal
        parsed = parse_basic_authorization(header)
        if parsed is None:
            return None
        changes = self._changes
        principal = self.cached(*parsed)
        if principal is not None:
            self._remember_header(header, principal, changes)
        return principal

    async def sign_in_header(
        self, header: str, login: str, password: str, *, leased: bool = True
    ) -> Principal | None:
        """:meth:`sign_in` of the credentials parsed from ``header``; a success is remembered under the
        header's value for :meth:`by_header` (unless a user changed meanwhile, or it was judged without a
        lease)."""
        changes = self._changes
        principal = await self.sign_in(login, password, leased=leased)
        if principal is not None and leased:
            self._remember_header(header, principal, changes)
        return principal

    def _remember_header(self, header: str, principal: Principal, changes: int) -> None:
        """Keep ``principal`` under ``header`` unless a user changed since ``changes`` was read."""
        with self._lock:
            if self._changes == changes and not self._changing:
                headers = self._headers
                if len(headers) >= self._cache_size:
                    del headers[next(iter(headers))]
                headers[header] = principal

    def authenticate(self, login: str, password: str, *, leased: bool = True) -> Principal | None:
        """The principal of these credentials, or None (unknown login, disabled, wrong password);
        UsersNotReady while no user was ever written here (the credentials cannot be judged yet).
        Blocking on a cache miss (reads the user's record, hashes the password): call off the loop,
        or through :meth:`sign_in`. UsersNotReady too while this node may not judge credentials
        (:meth:`admit_with`), unless ``leased`` is False (then the cache is not used either)."""
        self._check_open()
        if leased:
            if not self.may_judge_now():
                raise UsersNotReady(_NOT_ADMITTED)
            principal = self.cached(login, password)
            if principal is not None:
                return principal
        key = self._cache_key(login, password)
        with self._lock:
            changes = self._changes
        record = self._record(login)
        if record is None and not self._users_written():
            raise UsersNotReady()
        # the password is hashed whatever the record: an unknown or disabled login takes as long to
        # refuse as a wrong password (no timing answer to "does this user exist?")
        if record is not None:
            salt, expected, cost = record["salt"], record["hash"], HashCost.of_record(record)
        else:
            (salt, expected), cost = _DUMMY_CREDENTIALS, self.hash_cost
        matches = verify_password(password, salt, expected, cost)
        if record is None or record.get("disabled") or not matches:
            return None
        principal = Principal(login, frozenset([login, *record.get("groups", [])]))
        if self._db.stream_state(f"$user-{login}").metadata.max_age is not None:
            return principal  # the record expires with time alone, no record telling: never cached
        with self._lock:
            if self._changes != changes or self._changing or not leased:
                return principal  # a user changed meanwhile, or judged without a lease: not cached
            self._cache[key] = principal
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return principal

    def principal_of_certificate(self, login: str) -> Principal | None:
        """The principal of a user a verified client certificate names (evdb.tls.user_certificates):
        the user must exist and be enabled; no password is involved. Blocking (reads the record)."""
        try:
            record = self._record(_check_login(login))
        except InvalidInput:
            return None
        if record is None or record.get("disabled"):
            return None
        return Principal(login, frozenset([login, *record.get("groups", [])]))

    def get(self, login: str) -> UserInfo:
        record = self._record(_check_login(login))
        if record is None:
            raise UserNotFound(login)
        return UserInfo(
            record["loginName"],
            record.get("fullName", ""),
            tuple(record.get("groups", [])),
            bool(record.get("disabled")),
        )

    def list(self) -> list[UserInfo]:
        try:
            events = self._db.read_stream_forward("$users", 0, 100_000).events
        except StreamNotFound:
            return []
        logins: dict[str, None] = {}
        for e in events:
            try:
                login = json.loads(e.data)["loginName"]
            except (ValueError, UnicodeDecodeError, KeyError, TypeError):
                continue  # an unreadable $users event (redacted): that entry is skipped
            if e.event_type == "$UserCreated":
                logins[login] = None
            elif e.event_type == "$UserDeleted":
                logins.pop(login, None)
        out = []
        for login in logins:
            try:
                out.append(self.get(login))
            except UserNotFound:
                continue
        return out

    # `builtins.list` below: in this class, `list` is the method above
    def create(self, login: str, full_name: str, groups: builtins.list[str], password: str) -> UserInfo:
        _check_login(login)
        _check_password(password)
        if (
            not isinstance(full_name, str)
            or not isinstance(groups, list)
            or not all(isinstance(g, str) for g in groups)
        ):
            raise InvalidInput("fullName must be a string and groups a list of strings.")
        if self._record(login) is not None:
            raise UserAlreadyExists(login)
        self._write_created(login, full_name, groups, password)
        self._list_created([login])
        return UserInfo(login, full_name, tuple(groups))

    def _write_created(self, login: str, full_name: str, groups: builtins.list[str], password: str) -> bool:
        salt, digest = hash_password(password, cost=self.hash_cost)
        data = {
            "loginName": login,
            "fullName": full_name,
            "groups": groups,
            "salt": salt,
            "hash": digest,
            "scrypt": self.hash_cost.to_record(),
            "disabled": False,
        }
        try:
            self._db.append(
                f"$user-{login}", [NewEvent("$UserCreated", json.dumps(data).encode(), is_json=True)]
            )
        except StreamDeleted:
            raise InvalidInput(
                f"The login name '{login}' belonged to a deleted user and cannot be reused."
            ) from None
        return True

    def _list_created(self, logins: builtins.list[str]) -> None:
        events = [
            NewEvent("$UserCreated", json.dumps({"loginName": login}).encode(), is_json=True)
            for login in logins
        ]
        self._db.append("$users", events)

    def _update(self, login: str, event_type: str, **changes: object) -> None:
        record = self._record(_check_login(login))
        if record is None:
            raise UserNotFound(login)
        record.update(changes)
        event = NewEvent(event_type, json.dumps(record).encode(), is_json=True)
        self._db.append(f"$user-{login}", [event])

    def update(self, login: str, full_name: str, groups: builtins.list[str]) -> None:
        if (
            not isinstance(full_name, str)
            or not isinstance(groups, list)
            or not all(isinstance(g, str) for g in groups)
        ):
            raise InvalidInput("fullName must be a string and groups a list of strings.")
        self._update(login, "$UserUpdated", fullName=full_name, groups=groups)

    def set_disabled(self, login: str, disabled: bool) -> None:
        self._update(login, "$UserUpdated", disabled=disabled)

    def reset_password(self, login: str, new_password: str) -> None:
        salt, digest = hash_password(_check_password(new_password), cost=self.hash_cost)
        self._update(login, "$PasswordChanged", salt=salt, hash=digest, scrypt=self.hash_cost.to_record())

    def change_password(self, login: str, current_password: str, new_password: str) -> bool:
        if self.authenticate(login, current_password) is None:
            return False
        self.reset_password(login, new_password)
        return True

    def delete(self, login: str) -> None:
        if self._record(_check_login(login)) is None:
            raise UserNotFound(login)
        self._db.delete_stream(f"$user-{login}", hard=True)
        self._db.append(
            "$users", [NewEvent("$UserDeleted", json.dumps({"loginName": login}).encode(), is_json=True)]
        )


_ACL_KEYS = {"read": "$r", "write": "$w", "delete": "$d", "metaread": "$mr", "metawrite": "$mw"}


def _acl_roles(value: object) -> set[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return {v for v in value if isinstance(v, str)}
    return set()


def stream_access(db: Database, principal: Principal, stream: str, action: str) -> str:
    """Whether ``principal`` may ``action`` (read, write, delete, metaread, metawrite) ``stream``, for
    the HTTP and the gRPC API alike: ``"allowed"``, ``"unauthenticated"`` or ``"denied"``.

    ``$acl`` in the stream's metadata decides when it names the action; else system streams (and a
    metastream's events) are for admins and user streams for any authenticated user. ``$all`` as a
    role lets anyone in, even anonymous callers. Blocking: it reads the stream's metadata."""
    if principal.is_admin:
        return "allowed"
    target = original_stream_of(stream) if is_metastream(stream) else stream
    roles: set[str] | None = None
    if target != "$all":
        try:
            metadata, _ = db.get_stream_metadata(target)
            if metadata.acl is not None:
                roles = _acl_roles(metadata.acl.get(_ACL_KEYS[action]))
        except (StreamDeleted, InvalidInput):
            roles = None
    if roles is None:
        system = target.startswith("$") or (is_metastream(stream) and action not in ("metaread", "metawrite"))
        roles = {ADMINS} if system else None
    if roles is None:  # the default user-stream rule
        if principal.is_authenticated:
            return "allowed"
    elif "$all" in roles or principal.has_any(roles):
        return "allowed"
    return "denied" if principal.is_authenticated else "unauthenticated"

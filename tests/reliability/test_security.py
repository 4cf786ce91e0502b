"""No one in where they don't belong: credential checks, request bounds, secrets in logs, the
redaction socket, file modes of keys and temporary files, licence forgery.

The endpoint × caller matrix itself is tests/node/test_auth_matrix.py (derived from /openapi.json,
a new route without a rule fails it); node-to-node certificate checks are in test_node_to_node.py.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import uuid

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from evdb.auth import UserStore
from evdb.database import Database
from evdb.licensing.issuers import demo_private_key, demo_public_key
from evdb.licensing.token import LicenseError, issue_license, key_id, verify_license
from evdb.node import Node
from evdb.options import load_options

ADMIN = ("admin", "changeit")
NOW = 1_750_000_000


def options(root, *extra: str):
    return load_options(
        [
            "--db", str(root / "db"), "--log", str(root / "log"), "--insecure", "--http-port", "0",
            "--chunk-size", "65536", "--max-mem-table-size", "64", "--stats-period-sec", "0", *extra,
        ],
        {},
    )  # fmt: skip


# -- credentials -------------------------------------------------------------------------------------
@pytest.fixture
def users():
    db = Database.open(None)
    store = UserStore(db)
    store.ensure_defaults()
    store.create("alice", "Alice", [], "alice-password")
    store.create("bob", "Bob", [], "bob-password")
    store.set_disabled("bob", True)
    yield store
    db.close()


@pytest.mark.parametrize(
    ("login", "password"),
    [("alice", "not-alices"), ("no-such-user", "whatever"), ("bob", "bob-password"), ("alice", "")],
    ids=["wrong password", "unknown user", "disabled user", "empty password"],
)
def test_every_refusal_hashes_once_and_compares_in_constant_time(users, monkeypatch, login, password):
    """An unknown or disabled login costs the same scrypt and constant-time comparison as a wrong
    password: the time taken does not tell whether a user exists."""
    hashed, compared = [], []
    scrypt, compare = hashlib.scrypt, hmac.compare_digest
    monkeypatch.setattr(hashlib, "scrypt", lambda *a, **k: hashed.append(1) or scrypt(*a, **k))
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append(1) or compare(a, b))
    assert users.authenticate(login, password) is None
    assert (len(hashed), len(compared)) == (1, 1)


def test_the_right_password_gets_in_and_is_cached_by_digest_only(users):
    principal = users.authenticate("alice", "alice-password")
    assert principal is not None and principal.name == "alice"
    assert all("alice-password" not in str(key) for key in users._cache)


# -- request bounds ----------------------------------------------------------------------------------
async def test_a_body_over_the_bound_is_refused_with_413_and_nothing_is_written(tmp_path):
    async with (
        Node(options(tmp_path, "--http-max-request-body-size", "8KiB"), name="bounds") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as c,
    ):
        headers = {"Kurrent-EventType": "T", "Content-Type": "application/json"}
        big = json.dumps({"pad": "x" * 20_000})
        r = await c.post(
            "/streams/bounded", content=big, headers={**headers, "Kurrent-EventId": str(uuid.uuid4())}
        )
        assert r.status_code == 413
        assert "x" * 100 not in r.text
        small = json.dumps({"pad": "x" * 1_000})
        r = await c.post(
            "/streams/bounded", content=small, headers={**headers, "Kurrent-EventId": str(uuid.uuid4())}
        )
        assert r.status_code == 201
        assert node.db.read_stream_forward("bounded", 0, 10).events.__len__() == 1


async def test_concurrent_requests_per_client_are_bounded_with_429(tmp_path):
    async with (
        Node(options(tmp_path, "--http-max-concurrent-requests-per-client", "2"), name="conns") as node,
        httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as c,
    ):
        r = await c.post(
            "/streams/poll",
            json={"a": 1},
            headers={"Kurrent-EventType": "T", "Kurrent-EventId": str(uuid.uuid4())},
        )
        assert r.status_code == 201
        # two long polls wait for an event after #0: they hold the client's two places
        polls = [
            asyncio.create_task(
                c.get(
                    "/streams/poll/1/forward/10",
                    headers={"Accept": "application/json", "Kurrent-LongPoll": "20"},
                )
            )
            for _ in range(2)
        ]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while len(node.notifier._waiters) < 2:  # both polls are in the node, waiting for an event
            assert loop.time() < deadline and not any(p.done() for p in polls), [
                p.result().status_code for p in polls if p.done()
            ]
            await asyncio.sleep(0.01)
        refused = None
        while loop.time() < deadline:
            r = await c.get("/streams/poll", headers={"Accept": "application/json"})
            if r.status_code == 429:
                refused = r
                break
            await asyncio.sleep(0.02)
        assert refused is not None, "a third request was never refused"
        assert refused.content == b"" and refused.headers["Retry-After"] == "1"
        # an event ends the long polls; the client's places are free again
        await asyncio.to_thread(
            node.db.append, "poll", [__import__("evdb.streams", fromlist=["NewEvent"]).NewEvent("T", b"{}")]
        )
        answers = await asyncio.gather(*polls)
        assert [a.status_code for a in answers] == [200, 200]
        r = await c.get("/streams/poll", headers={"Accept": "application/json"})
        assert r.status_code == 200


# -- secrets never logged ----------------------------------------------------------------------------
async def test_passwords_never_reach_the_log(tmp_path, caplog):
    secrets = ["Create-pw-4711", "Reset-pw-0815", "Changed-pw-1234", "Wrong-pw-9999"]
    caplog.set_level("DEBUG")
    async with Node(options(tmp_path, "--log-level", "Verbose"), name="secrets") as node:
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as c:
            r = await c.post(
                "/users/",
                json={"loginName": "carol", "fullName": "Carol", "groups": [], "password": secrets[0]},
            )
            assert r.status_code == 201
            r = await c.post("/users/carol/command/reset-password", json={"newPassword": secrets[1]})
            assert r.status_code == 200
        async with httpx.AsyncClient(base_url=node.http_url, auth=("carol", secrets[1]), timeout=30) as c:
            r = await c.post(
                "/users/carol/command/change-password",
                json={"currentPassword": secrets[1], "newPassword": secrets[2]},
            )
            assert r.status_code == 200
        async with httpx.AsyncClient(base_url=node.http_url, auth=("carol", secrets[3]), timeout=30) as c:
            assert (await c.get("/streams/$all", headers={"Accept": "application/json"})).status_code == 401
    logged = caplog.text
    for root, _dirs, names in os.walk(tmp_path / "log"):
        for name in names:
            with open(os.path.join(root, name), errors="replace") as f:
                logged += f.read()
    assert len(logged.splitlines()) > 5, "the node logged nothing: the check below would prove nothing"
    for secret in [*secrets, "changeit"]:
        assert secret not in logged, f"{secret} was logged"
        assert base64.b64encode(f"carol:{secret}".encode()).decode() not in logged


# -- the redaction socket ----------------------------------------------------------------------------
def _connect_as_nobody(path: str) -> str:
    """Connect to a unix socket from a process running as user nobody; 'connected' or the errno name."""
    code = (
        "import errno, os, socket, sys\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.connect(sys.argv[1]); print('connected')\n"
        "except OSError as e:\n    print(errno.errorcode[e.errno])\n"
    )
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")
async def test_the_redaction_socket_refuses_other_users(monkeypatch):
    from evdb.licensing.issuers import issue_demo_license
    from evdb.redaction import start_redaction_service
    from evdb.redaction.protocol import socket_path

    root = tempfile.mkdtemp(prefix="evdb-sock-", dir="/tmp")
    try:
        os.chmod(root, 0o711)  # other users may pass through the folders, so only the socket's mode decides
        from pathlib import Path

        opts = options(
            Path(root), "--enable-unix-socket", "true", "--license-key", issue_demo_license(NOW, days=36500),
            "--license-trusted-issuers", "demo",
        )  # fmt: skip
        async with Node(opts, name="sock") as node:
            os.chmod(os.path.join(root, "db"), 0o711)
            service = None
            if not getattr(node, "redaction", None) or not node.redaction.is_serving:
                service = await start_redaction_service(
                    node.options, logger=node.logger, clock=node.clock, db=lambda: node.db
                )
            try:
                path = socket_path(os.path.abspath(os.path.join(root, "db")))
                st = os.lstat(path)
                assert stat.S_ISSOCK(st.st_mode)
                assert stat.S_IMODE(st.st_mode) & 0o077 == 0, oct(st.st_mode)
                assert st.st_uid == os.geteuid()
                assert await asyncio.to_thread(_connect_as_nobody, path) == "EACCES"
                # the control: with the mode opened up, the same process does get in
                os.chmod(path, 0o666)
                assert await asyncio.to_thread(_connect_as_nobody, path) == "connected"
                os.chmod(path, 0o600)
                # the service only ever listens on a unix socket: no TCP way in
                server = (service or node.redaction)._server
                assert {s.family for s in server.sockets} == {socket.AF_UNIX}
            finally:
                if service is not None:
                    await service.close()
    finally:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


# -- file modes --------------------------------------------------------------------------------------
def test_key_files_are_private_and_temporary_files_no_more_open_than_their_final_files(tmp_path):
    old = os.umask(0)  # the modes the code asks for, not the ones a umask would leave
    try:
        out = subprocess.run(
            [sys.executable, "-m", "evdb.cli", "certs", "create-ca", "--out", str(tmp_path / "ca")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        out = subprocess.run(
            [sys.executable, "-m", "evdb.cli", "license", "keygen", "--out", str(tmp_path / "issuer")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr + out.stdout
        keys = [
            os.path.join(d, n)
            for d, _s, names in os.walk(tmp_path)
            for n in names
            if n.endswith(".key") or "private" in n
        ]
        assert keys, list(os.walk(tmp_path))
        for key in keys:
            mode = stat.S_IMODE(os.stat(key).st_mode)
            assert mode & 0o077 == 0, f"{key} is {oct(mode)}"
        # temporary chunk, index table, redaction and backup copies are 0644 like the final files,
        # never writable by others
        from evdb.storage.chunk import ChunkBuilder  # noqa: F401  (the writers below create them)

        with Database.open(str(tmp_path / "db"), chunk_size=65536, max_memtable_entries=8) as db:
            from evdb.streams import NewEvent

            for i in range(40):
                db.append(f"s-{i % 3}", [NewEvent("T", b"x" * 100)])
            db.index.wait_idle()
        for d, _s, names in os.walk(tmp_path / "db"):
            for n in names:
                mode = stat.S_IMODE(os.stat(os.path.join(d, n)).st_mode)
                assert mode & 0o022 == 0, f"{n} is {oct(mode)}"
    finally:
        os.umask(old)


# -- licence forgery ---------------------------------------------------------------------------------
def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _fields(token: str) -> tuple[str, dict, str]:
    prefix, payload, sig = token.split(".")
    return prefix, json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))), sig


GOOD = issue_license(
    demo_private_key(), licensee="Acme", issued_at=NOW, expires_at=NOW + 86400, entitlements=["REDACTION"]
)
CHANGES = {
    "v": [2, 0, "1"],
    "id": ["b93e5e76-9308-4249-8a3e-1f9d2c7b5a10"],  # fixed: test ids must be the same in every worker
    "licensee": ["Evil Corp", "Acme "],
    "issuedAt": [NOW - 1, NOW + 1],
    "expiresAt": [NOW + 10**9, NOW + 86401],
    "entitlements": [["REDACTION", "AUTO_SCAVENGE"], []],
    "issuer": ["0000000000000000"],
}


@pytest.mark.parametrize(
    ("name", "value"), [(k, v) for k, vs in CHANGES.items() for v in vs], ids=lambda x: str(x)[:20]
)
def test_no_field_of_a_licence_can_be_changed(name, value):
    prefix, payload, sig = _fields(GOOD)
    assert name in payload
    payload[name] = value
    forged = f"{prefix}.{_b64(json.dumps(payload, separators=(',', ':')).encode())}.{sig}"
    with pytest.raises(LicenseError):
        verify_license(forged, [demo_public_key()], NOW + 10)


def test_the_prefix_and_every_byte_of_the_signature_are_checked():
    prefix, payload, sig = GOOD.split(".")
    assert verify_license(GOOD, [demo_public_key()], NOW + 10).licensee == "Acme"
    with pytest.raises(LicenseError):
        verify_license(f"evdb2.{payload}.{sig}", [demo_public_key()], NOW + 10)
    raw = base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))
    for i in range(len(raw)):
        bad = bytearray(raw)
        bad[i] ^= 0x01
        with pytest.raises(LicenseError):
            verify_license(f"{prefix}.{payload}.{_b64(bytes(bad))}", [demo_public_key()], NOW + 10)


def test_a_licence_signed_by_another_key_claiming_the_trusted_issuer_is_refused():
    attacker = Ed25519PrivateKey.generate()
    forged = issue_license(
        attacker, licensee="Acme", issued_at=NOW, expires_at=NOW + 86400, entitlements=["REDACTION"]
    )
    prefix, payload, _ = _fields(forged)
    payload["issuer"] = key_id(demo_public_key())
    body = f"{prefix}.{_b64(json.dumps(payload, separators=(',', ':')).encode())}"
    signature = _b64(attacker.sign(body.encode()))
    with pytest.raises(LicenseError):
        verify_license(f"{body}.{signature}", [demo_public_key()], NOW + 10)

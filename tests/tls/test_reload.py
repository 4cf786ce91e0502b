"""Configuration reload (``POST /admin/reloadconfig``) on an in-process TLS node: all or nothing.

The node reads its certificates through symlinks (``live/ca``, ``live/node.crt``, ``live/node.key``), as
the spec's rolling update has them; each test repoints them (or breaks them) and reloads. What the node
presents is read from real handshakes on its HTTP port and on its node-to-node port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
from pathlib import Path

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from evdb.logs import node_log_files, read_log_lines
from evdb.node import Node
from evdb.options import load_options
from evdb.tls import create_ca, create_node_certificate, repoint_link
from evdb.tls.reload import RELOAD_REQUESTED, RELOAD_SUCCEEDED

ADMIN = ("admin", "changeit")
OPS = ("ops", "changeit")


class Setup:
    """Two generations of certificates, the live symlinks, the YAML file and a client trusting both CAs."""

    def __init__(self, base: Path, material: dict[str, dict[str, Path]]) -> None:
        self.base = base
        self.gen = material
        self.live = base / "live"
        self.live.mkdir()
        self.point("gen1")
        self.config_path = base / "node.yaml"
        self.config: dict = {
            "Db": str(base / "db"),
            "Log": str(base / "log"),
            "HttpIp": "127.0.0.1",
            "HttpPort": 0,
            "ChunkSize": 65536,
            "StatsPeriodSec": 0,
            "CertificateFile": str(self.live / "node.crt"),
            "CertificatePrivateKeyFile": str(self.live / "node.key"),
            "TrustedRootCertificatesPath": str(self.live / "ca"),
        }
        self.write_config()

    def point(
        self, gen: str, *, ca: str | None = None, crt: str | None = None, key: str | None = None
    ) -> None:
        repoint_link(self.live / "ca", self.gen[ca or gen]["ca"])
        repoint_link(self.live / "node.crt", self.gen[crt or gen]["crt"])
        repoint_link(self.live / "node.key", self.gen[key or gen]["key"])

    def write_config(self, **changes) -> None:
        self.config.update(changes)
        self.config_path.write_text(yaml.safe_dump(self.config))

    def der(self, gen: str) -> bytes:
        return x509.load_pem_x509_certificate(self.gen[gen]["crt"].read_bytes()).public_bytes(Encoding.DER)

    def trust_both(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.gen["gen1"]["ca_cert"]))
        context.load_verify_locations(cafile=str(self.gen["gen2"]["ca_cert"]))
        return context


async def presented(port: int, context: ssl.SSLContext) -> bytes:
    """The certificate a fresh TLS connection to ``port`` is shown (DER); the node runs on this loop."""
    return await asyncio.to_thread(_presented, port, context)


def _presented(port: int, context: ssl.SSLContext) -> bytes:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return tls.getpeercert(binary_form=True)


def node_to_node_client(setup: Setup, gen: str) -> ssl.SSLContext:
    """What another node uses: its own certificate as client certificate, both CAs trusted."""
    context = setup.trust_both()
    context.check_hostname = False
    context.load_cert_chain(str(setup.gen[gen]["crt"]), str(setup.gen[gen]["key"]))
    return context


@pytest.fixture(scope="module")
def material(tmp_path_factory) -> dict[str, dict[str, Path]]:
    """Two CAs, each with a node certificate for 127.0.0.1 (made once: RSA keys take a while)."""
    base = tmp_path_factory.mktemp("certificates")
    out = {}
    for gen in ("gen1", "gen2"):
        ca_cert, ca_key = create_ca(base / gen / "ca")
        cert, key = create_node_certificate(ca_cert, ca_key, base / gen / "node", ip_addresses=["127.0.0.1"])
        out[gen] = {"ca": base / gen / "ca", "ca_cert": ca_cert, "ca_key": ca_key, "crt": cert, "key": key}
    return out


@pytest.fixture
def setup(tmp_path, material) -> Setup:
    return Setup(tmp_path, material)


@pytest.fixture
async def node(setup):
    options = load_options(["--config", str(setup.config_path)], {})
    async with Node(options, name="reload") as n:
        yield n


@pytest.fixture
async def admin(node, setup):
    async with httpx.AsyncClient(
        base_url=node.http_url, auth=ADMIN, verify=setup.trust_both(), timeout=30
    ) as c:
        yield c


def log_messages(node: Node) -> list[str]:
    return [
        line["@m"] for path in node_log_files(node.options.log, node.name) for line in read_log_lines(path)
    ]


async def reload(client: httpx.AsyncClient) -> httpx.Response:
    return await client.post("/admin/reloadconfig")


async def failed_reload(client: httpx.AsyncClient) -> str:
    """A reload that fails: answered 200 with an empty body, as KurrentDB answers; the reason is in the
    node's lastReload (GET /admin/certificates). Returns it."""
    response = await reload(client)
    assert response.status_code == 200 and response.text == ""
    last = (await client.get("/admin/certificates")).json()["lastReload"]
    assert last["result"] == "Failed", last
    return last["error"]


# -- success -------------------------------------------------------------------------------------
async def test_a_reload_after_repointing_the_links_serves_the_new_certificate_on_both_ports(
    node, admin, setup
):
    context = setup.trust_both()
    assert await presented(node.port, context) == setup.der("gen1")
    before = (await admin.get("/admin/certificates")).json()
    assert before["lastReload"] is None
    setup.point("gen2")

    response = await reload(admin)

    assert response.status_code == 200 and response.text == ""
    assert await presented(node.port, context) == setup.der("gen2")
    assert await presented(node.cluster.replication_port, node_to_node_client(setup, "gen2")) == setup.der(
        "gen2"
    )
    state = (await admin.get("/admin/certificates")).json()
    new_cert = x509.load_der_x509_certificate(setup.der("gen2"))
    assert state["secure"] is True
    assert (
        state["certificate"]["fingerprintSha256"]
        == new_cert.fingerprint(new_cert.signature_hash_algorithm).hex()
    )
    assert state["certificate"]["ipAddresses"] == ["127.0.0.1"]
    assert state["certificate"]["notAfter"] == new_cert.not_valid_after_utc.isoformat()
    ca2 = x509.load_pem_x509_certificate(setup.gen["gen2"]["ca_cert"].read_bytes())
    assert state["ca"]["subject"] == ca2.subject.rfc4514_string()
    assert state["ca"]["fingerprintSha256"] == ca2.fingerprint(ca2.signature_hash_algorithm).hex()
    assert state["ca"]["fingerprintSha256"] != before["ca"]["fingerprintSha256"]
    assert state["lastReload"]["result"] == "Success"
    assert state["lastReload"]["trigger"] == "/admin/reloadconfig"
    assert state["lastReload"]["certificateChanged"] is True
    assert state["loadedAt"] >= before["loadedAt"]
    messages = log_messages(node)
    assert RELOAD_REQUESTED["http"] in messages
    assert messages[-1] == RELOAD_SUCCEEDED or RELOAD_SUCCEEDED in messages


async def test_the_node_to_node_listener_refuses_the_old_ca_after_a_reload(node, admin, setup):
    assert await presented(node.cluster.replication_port, node_to_node_client(setup, "gen1")) == setup.der(
        "gen1"
    )
    setup.point("gen2")
    assert (await reload(admin)).status_code == 200
    # a peer still on the old CA: the handshake (or the first read, in TLS 1.3) fails
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await asyncio.to_thread(
            _talk_as_peer, node.cluster.replication_port, node_to_node_client(setup, "gen1")
        )
    assert await asyncio.to_thread(
        _talk_as_peer, node.cluster.replication_port, node_to_node_client(setup, "gen2")
    )


@contextlib.asynccontextmanager
async def peer_presenting(setup: Setup, gen: str):
    """Another node's HTTP port, presenting the node certificate of ``gen``: its port."""
    from aiohttp import web

    async def info(request: web.Request) -> web.Response:
        return web.json_response({"esVersion": "peer"})

    app = web.Application()
    app.router.add_get("/info", info)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(setup.gen[gen]["crt"]), str(setup.gen[gen]["key"]))
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_a_peer_refused_on_its_certificate_is_named_in_the_log_and_in_peer_errors(node, admin, setup):
    from evdb.cluster.peers import PeerError

    async with peer_presenting(setup, "gen2") as port:
        peer = f"127.0.0.1:{port}"
        with pytest.raises(PeerError) as failure:
            await node.peer_client.request("GET", ("127.0.0.1", port), "/info", timeout=10)
        assert failure.value.certificate and peer in str(failure.value)
        state = (await admin.get("/admin/certificates")).json()
        (error,) = state["peerErrors"]
        assert error["peer"] == peer and error["certificate"] is True
        assert "certificate chain validation failed" in error["reason"]
        lines = [line for line in log_messages(node) if peer in line]
        assert any("certificate chain validation failed" in line for line in lines), lines

        # after a reload to the CA the peer's certificate chains to, the next call succeeds: no error left
        setup.point("gen2")
        assert (await reload(admin)).status_code == 200
        answer = await node.peer_client.request("GET", ("127.0.0.1", port), "/info", timeout=10)
        assert answer.status == 200
        assert (await admin.get("/admin/certificates")).json()["peerErrors"] == []


def _talk_as_peer(port: int, context: ssl.SSLContext) -> bytes:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw) as tls,
    ):
        tls.sendall(b"GET /internal/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = tls.recv(100)
        if not answer:
            raise ConnectionResetError("closed by the node")
        return answer


async def test_log_level_and_connection_reset_interval_take_effect_on_reload(node, admin, setup):
    logger = node.logger
    assert logger.getEffectiveLevel() == logging.INFO
    setup.write_config(LogLevel="Debug", ConnectionResetInterval=5)
    response = await reload(admin)
    assert response.status_code == 200
    assert logger.getEffectiveLevel() == logging.DEBUG
    assert node.options.log_level == "Debug" and node.cluster.reset_interval == 5.0
    # the one peer client (auto-scavenge forwarding, node scavenges, gossip) takes it too
    assert node.peer_client.reset_interval == 5.0
    state = (await admin.get("/admin/certificates")).json()
    assert set(state["lastReload"]["changedOptions"]) == {"LogLevel", "ConnectionResetInterval"}
    assert state["lastReload"]["certificateChanged"] is False
    assert state["connectionResetIntervalSeconds"] == 5


async def test_a_changed_common_name_is_accepted_with_a_matching_reserved_common_name(node, admin, setup):
    renamed = create_node_certificate(
        setup.gen["gen2"]["ca_cert"],
        setup.gen["gen2"]["ca_key"],
        setup.base / "renamed",
        ip_addresses=["127.0.0.1"],
        common_name="node.example.com",
    )
    setup.point("gen2")
    repoint_link(setup.live / "node.crt", renamed[0])
    repoint_link(setup.live / "node.key", renamed[1])

    refused = await failed_reload(admin)  # the reserved name still says eventstoredb-node
    assert "node.example.com" in refused and "CertificateReservedNodeCommonName" in refused
    assert await presented(node.port, setup.trust_both()) == setup.der("gen1")

    setup.write_config(CertificateReservedNodeCommonName="*.example.com")
    accepted = await reload(admin)
    assert accepted.status_code == 200, accepted.text
    assert node.options.certificate_reserved_node_common_name == "*.example.com"
    assert node.tls.common_name == "node.example.com"

    # the node-to-node listener checks peers against the reloaded name at once: a peer with the new
    # name gets past the check (404: no such route), one with the old name is refused (403)
    def as_peer(cert: Path, key: Path) -> ssl.SSLContext:
        context = setup.trust_both()
        context.check_hostname = False
        context.load_cert_chain(str(cert), str(key))
        return context

    port = node.cluster.replication_port
    answer = await asyncio.to_thread(_talk_as_peer, port, as_peer(*renamed))
    assert answer.startswith(b"HTTP/1.1 404"), answer
    old_name = as_peer(setup.gen["gen2"]["crt"], setup.gen["gen2"]["key"])
    assert (await asyncio.to_thread(_talk_as_peer, port, old_name)).startswith(b"HTTP/1.1 403")


async def test_a_reserved_common_name_the_own_certificate_does_not_match_is_refused(node, admin, setup):
    setup.write_config(CertificateReservedNodeCommonName="other-name")
    assert "other-name" in await failed_reload(admin)
    assert node.options.certificate_reserved_node_common_name == "eventstoredb-node"


# -- failures: nothing changes -------------------------------------------------------------------
def _missing_key(setup: Setup) -> str:
    os.unlink(setup.live / "node.key")
    os.symlink(setup.base / "gone" / "node.key", setup.live / "node.key")
    return "does not exist"


def _mismatched_key(setup: Setup) -> str:
    setup.point("gen1", key="gen2")
    return "does not match"


def _unreadable_ca(setup: Setup) -> str:
    bad = setup.base / "bad-ca"
    bad.mkdir()
    (bad / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    setup.point("gen2")
    repoint_link(setup.live / "ca", bad)
    return "no valid PEM certificate"


def _untrusted_chain(setup: Setup) -> str:
    setup.point("gen2", ca="gen1")
    return "chain could not be built"


def _bad_yaml(setup: Setup) -> str:
    setup.point("gen2")  # good certificates, but the file is broken: nothing may change
    setup.config_path.write_text("LogLevel: [Debug\nHttpPort: 0\n")
    return "not valid YAML"


def _non_reloadable_option(setup: Setup) -> str:
    setup.point("gen2")
    setup.write_config(ChunkSize=131072, LogLevel="Debug")
    return "ChunkSize changed, which needs a restart"


FAILURES = [
    _missing_key,
    _mismatched_key,
    _unreadable_ca,
    _untrusted_chain,
    _bad_yaml,
    _non_reloadable_option,
]


async def test_a_failed_reload_keeps_the_whole_old_configuration(node, admin, setup):
    """Each way of breaking the configuration in turn, on one node (restored to gen1 in between)."""
    options_before, tls_before = node.options, node.tls
    good_config = dict(setup.config)
    for break_it in FAILURES:
        expected = break_it(setup)

        error = await failed_reload(admin)

        assert expected in error, (break_it.__name__, error)
        assert node.options is options_before and node.tls is tls_before
        assert node.logger.getEffectiveLevel() == logging.INFO
        # a fresh handshake still shows the old certificate, on both listeners
        assert await presented(node.port, setup.trust_both()) == setup.der("gen1")
        peer = node_to_node_client(setup, "gen1")
        assert await presented(node.cluster.replication_port, peer) == setup.der("gen1")
        state = (await admin.get("/admin/certificates")).json()
        assert state["lastReload"]["result"] == "Failed" and expected in state["lastReload"]["error"]
        assert state["certificate"]["fingerprintSha256"] == tls_before.fingerprint_sha256
        errors = [m for m in log_messages(node) if m.startswith("An error has occurred while reloading")]
        assert errors and expected in errors[-1] and "keeps its current configuration" in errors[-1]
        setup.point("gen1")
        setup.config = dict(good_config)
        setup.write_config()
    assert RELOAD_SUCCEEDED not in log_messages(node)
    assert len(errors) == len(FAILURES)


async def test_a_failed_reload_then_a_fixed_one_succeeds(node, admin, setup):
    _missing_key(setup)
    assert "does not exist" in await failed_reload(admin)
    setup.point("gen2")
    assert (await reload(admin)).status_code == 200
    assert await presented(node.port, setup.trust_both()) == setup.der("gen2")


# -- roles ---------------------------------------------------------------------------------------
async def test_reload_and_certificates_need_the_ops_or_admins_role(node, admin, setup):
    verify = setup.trust_both()
    created = await admin.post(
        "/users", json={"loginName": "plain", "fullName": "Plain", "groups": [], "password": "pw"}
    )
    assert created.status_code == 201
    callers = {
        "anonymous": None,
        "wrong": ("admin", "nope"),
        "user": ("plain", "pw"),
        "ops": OPS,
        "admin": ADMIN,
    }
    answers = {}
    for caller, auth in callers.items():
        async with httpx.AsyncClient(base_url=node.http_url, auth=auth, verify=verify, timeout=30) as c:
            answers[caller] = (
                (await c.post("/admin/reloadconfig")).status_code,
                (await c.get("/admin/certificates")).status_code,
            )
    # legacy admin endpoints answer 401 (never 403) without the role, as KurrentDB does
    assert answers == {
        "anonymous": (401, 401),
        "wrong": (401, 401),
        "user": (401, 401),
        "ops": (200, 200),
        "admin": (200, 200),
    }


async def test_insecure_node_reports_no_certificate_and_reloads_options(tmp_path):
    config = tmp_path / "node.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "Insecure": True,
                "Db": str(tmp_path / "db"),
                "Log": str(tmp_path / "log"),
                "HttpPort": 0,
                "StatsPeriodSec": 0,
            }
        )
    )
    async with Node(load_options(["--config", str(config)], {}), name="plain") as node:
        async with httpx.AsyncClient(base_url=node.http_url, auth=ADMIN, timeout=30) as c:
            config.write_text(config.read_text() + "LogLevel: Warning\n")
            assert (await c.post("/admin/reloadconfig")).status_code == 200
            state = (await c.get("/admin/certificates")).json()
        assert state["secure"] is False and state["certificate"] is None and state["ca"] is None
        assert state["lastReload"]["changedOptions"] == ["LogLevel"]
        assert node.logger.getEffectiveLevel() == logging.WARNING


# -- special files: a FIFO or a device answers at once, and nothing changes ---------------------------
@pytest.mark.parametrize(
    ("special", "which"), [("fifo", "node.key"), ("/dev/zero", "node.crt"), ("fifo", "ca")]
)
async def test_a_special_file_fails_the_reload_promptly(node, admin, setup, special, which):
    tls_before, options_before = node.tls, node.options
    path = setup.base / "special.pem" if special == "fifo" else Path(special)
    if special == "fifo":
        os.mkfifo(path)
    repoint_link(setup.live / which, path)
    try:
        error = await asyncio.wait_for(failed_reload(admin), 10)
    finally:
        if special == "fifo":  # a reader blocked on it (before the fix) gets end-of-file
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    assert str(path) in error and "not a regular file" in error, error
    assert node.tls is tls_before and node.options is options_before
    assert await presented(node.port, setup.trust_both()) == setup.der("gen1")
    errors = [m for m in log_messages(node) if m.startswith("An error has occurred while reloading")]
    assert errors and str(path) in errors[-1]
    setup.point("gen2")  # a good reload afterwards works (nothing is left blocked)
    assert (await asyncio.wait_for(reload(admin), 10)).status_code == 200
    assert await presented(node.port, setup.trust_both()) == setup.der("gen2")

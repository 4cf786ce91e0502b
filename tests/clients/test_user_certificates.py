"""KurrentDB's X.509 user certificates on a real TLS node (issue 35 point 10): with
UserCertificatesEnabled and a licence granting USER_CERTIFICATES, a client certificate signed by the
trusted CA, with the client-authentication usage and its subject's common name naming a user,
authenticates that user over HTTP (as ``curl --cert``) and gRPC; a node certificate, an unknown user,
no licence or the option off do not. The certificate rules themselves are checked without a node."""

from __future__ import annotations

import base64
import datetime
import ssl
from pathlib import Path

import grpc
import httpx
import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID
from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2, streams_pb2_grpc

from evdb.licensing.issuers import issue_demo_license
from evdb.tls.certs import generate_dev_certificates
from evdb.tls.user_certificates import certificate_user
from tests.clients.conftest import NodeThread, tls_options
from tests.clients.user_certificates import CLIENT_USAGE, make_user_certificate

NOW = datetime.datetime.now(datetime.UTC)


CLIENT = CLIENT_USAGE
SERVER = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]


def test_which_certificates_name_a_user(tmp_path):
    certs = generate_dev_certificates(tmp_path / "certs")
    ca = certs.ca_path.parent
    now = NOW.timestamp()
    assert certificate_user(make_user_certificate(ca, tmp_path, "alice", CLIENT)[2], now) == "alice"
    assert certificate_user(make_user_certificate(ca, tmp_path, "node", SERVER)[2], now) is None  # a node's
    assert (
        certificate_user(make_user_certificate(ca, tmp_path, "bare", None)[2], now) is None
    )  # no EKU: a node's
    late = make_user_certificate(ca, tmp_path, "late", CLIENT, not_after=NOW + datetime.timedelta(minutes=1))[
        2
    ]
    assert certificate_user(late, now + 3600) is None  # expired
    assert certificate_user(b"not a certificate", now) is None


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    base = tmp_path_factory.mktemp("usercerts")
    certs = generate_dev_certificates(base / "certs")
    licence = issue_demo_license(NOW.timestamp(), entitlements=("USER_CERTIFICATES",))
    options = tls_options(
        base,
        certs,
        "--user-certificates-enabled",
        "true",
        "--license-key",
        licence,
        "--license-trusted-issuers",
        "demo",
    )
    thread = NodeThread(options, name="usercerts").start()
    try:
        yield thread, certs, base
    finally:
        thread.stop()


def test_a_user_certificate_authenticates_over_http_and_grpc(node):
    thread, certs, base = node
    ca = certs.ca_path.parent
    admin_cert, admin_key, _ = make_user_certificate(ca, base / "users", "admin", CLIENT)
    url = f"https://localhost:{thread.port}"

    def client(cert: tuple[Path, Path] | None) -> httpx.Client:
        context = ssl.create_default_context(cafile=str(certs.ca_path))
        if cert is not None:
            context.load_cert_chain(*cert)
        return httpx.Client(base_url=url, verify=context, timeout=30)

    with client((admin_cert, admin_key)) as http:
        assert http.get("/users/").status_code == 200  # admin by its certificate alone
    with client(None) as http:
        assert http.get("/users/").status_code == 401
    unknown = make_user_certificate(ca, base / "users", "nobody", CLIENT)[:2]
    with client(unknown) as http:
        assert http.get("/users/").status_code == 401
    with client((certs.cert_path, certs.key_path)) as http:  # the node's own certificate: not a user
        assert http.get("/users/").status_code == 401
    # Basic credentials still come first when both are sent
    with client((admin_cert, admin_key)) as http:
        wrong = base64.b64encode(b"admin:wrong").decode()
        assert http.get("/users/", headers={"Authorization": f"Basic {wrong}"}).status_code == 401

    # gRPC: reading $all needs an admin (or ops); the certificate is the only credential sent
    options = streams_pb2.ReadReq.Options(read_direction=streams_pb2.ReadReq.Options.Forwards, count=1)
    options.all.start.CopyFrom(shared_pb2.Empty())
    options.no_filter.CopyFrom(shared_pb2.Empty())
    options.uuid_option.string.CopyFrom(shared_pb2.Empty())
    credentials = grpc.ssl_channel_credentials(
        certs.ca_path.read_bytes(), admin_key.read_bytes(), admin_cert.read_bytes()
    )
    with grpc.secure_channel(f"localhost:{thread.port}", credentials) as channel:
        answers = list(
            streams_pb2_grpc.StreamsStub(channel).Read(streams_pb2.ReadReq(options=options), timeout=20)
        )
        assert any(a.WhichOneof("content") == "event" for a in answers)
    anonymous = grpc.ssl_channel_credentials(certs.ca_path.read_bytes())
    with (
        grpc.secure_channel(f"localhost:{thread.port}", anonymous) as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        list(streams_pb2_grpc.StreamsStub(channel).Read(streams_pb2.ReadReq(options=options), timeout=20))
    assert refused.value.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)


def test_without_the_option_or_the_licence_a_certificate_is_not_a_user(tmp_path):
    certs = generate_dev_certificates(tmp_path / "certs")
    cert, key, _ = make_user_certificate(certs.ca_path.parent, tmp_path / "users", "admin", CLIENT)
    for extra in (
        ("--user-certificates-enabled", "true"),  # no licence
        ("--license-key", issue_demo_license(NOW.timestamp()), "--license-trusted-issuers", "demo"),  # off
    ):
        thread = NodeThread(tls_options(tmp_path / extra[0].strip("-"), certs, *extra), name="plain").start()
        try:
            context = ssl.create_default_context(cafile=str(certs.ca_path))
            context.load_cert_chain(cert, key)
            with httpx.Client(
                base_url=f"https://localhost:{thread.port}", verify=context, timeout=30
            ) as http:
                assert http.get("/users/").status_code == 401, extra
        finally:
            thread.stop()

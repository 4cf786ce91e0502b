"""Certificate generation: es-gencert-cli's layout, what OpenSSL thinks of it, and how files are written."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from evdb.errors import EvdbError
from evdb.tls import (
    CertificateError,
    NodeCertRequest,
    create_ca,
    create_cluster_certificates,
    create_node_certificate,
    generate_dev_certificates,
    load_node_tls,
    read_certificates,
)

OPENSSL = shutil.which("openssl")
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="the openssl command is not on PATH")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    base = tmp_path_factory.mktemp("pki")
    ca_cert, ca_key = create_ca(base / "ca")
    cert, key = create_node_certificate(
        ca_cert, ca_key, base / "node1", ip_addresses=["127.0.0.1", "10.0.0.1"], dns_names=["localhost"]
    )
    return ca_cert, ca_key, cert, key


def openssl(*args: str) -> subprocess.CompletedProcess[str]:
    assert OPENSSL is not None
    return subprocess.run([OPENSSL, *args], capture_output=True, text=True, timeout=30)


@needs_openssl
@pytest.mark.parametrize("purpose", ["sslserver", "sslclient"])
def test_openssl_verifies_the_node_certificate_for_server_and_client_use(pki, purpose):
    ca_cert, _, cert, _ = pki
    result = openssl("verify", "-CAfile", str(ca_cert), "-purpose", purpose, str(cert))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{cert}: OK"


@needs_openssl
def test_openssl_reads_the_keys(pki):
    _, ca_key, _, key = pki
    for path in (ca_key, key):
        result = openssl("rsa", "-check", "-noout", "-in", str(path))
        assert result.returncode == 0, result.stderr


def test_the_layout_and_contents_are_es_gencert_clis(pki):
    ca_cert, ca_key, cert, key = pki
    assert (ca_cert.name, ca_key.name, cert.name, key.name) == ("ca.crt", "ca.key", "node.crt", "node.key")
    assert key.read_bytes().startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    (ca,) = read_certificates(ca_cert)
    (node,) = read_certificates(cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.subject.rfc4514_string().startswith("CN=evdb CA ")
    assert isinstance(node.public_key(), rsa.RSAPublicKey) and node.public_key().key_size == 2048
    assert node.subject.rfc4514_string() == "CN=eventstoredb-node"
    assert node.issuer == ca.subject
    assert not node.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usage = node.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and usage.key_encipherment
    extended = node.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(extended) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    sans = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "10.0.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    node.verify_directly_issued_by(ca)


def test_private_keys_are_created_0600_whatever_the_umask(tmp_path):
    previous = os.umask(0)
    try:
        ca_cert, ca_key = create_ca(tmp_path / "ca")
        cert, key = create_node_certificate(ca_cert, ca_key, tmp_path / "node1")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(ca_key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(cert).st_mode) == 0o644
    assert sorted(os.listdir(tmp_path / "node1")) == ["node.crt", "node.key"]  # no temporary files left


def test_existing_files_are_never_overwritten_without_force(tmp_path, pki):
    ca_cert, ca_key, _, _ = pki
    cert, key = create_node_certificate(ca_cert, ca_key, tmp_path / "node1")
    before = cert.read_bytes(), key.read_bytes()
    with pytest.raises(CertificateError, match="already exists") as error:
        create_node_certificate(ca_cert, ca_key, tmp_path / "node1")
    assert str(tmp_path / "node1") in str(error.value)
    assert (cert.read_bytes(), key.read_bytes()) == before

    key.unlink()  # one of the two exists: nothing at all is written
    with pytest.raises(CertificateError, match="already exists"):
        create_node_certificate(ca_cert, ca_key, tmp_path / "node1")
    assert not key.exists() and cert.read_bytes() == before[0]

    create_node_certificate(ca_cert, ca_key, tmp_path / "node1", force=True)
    assert cert.read_bytes() != before[0] and stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path / "node1")) == ["node.crt", "node.key"]


@needs_openssl
def test_an_intermediate_ca_signs_node_certificates_that_carry_it(tmp_path):
    root_cert, root_key = create_ca(tmp_path / "root")
    inter_cert, inter_key = create_ca(
        tmp_path / "intermediate", issuer_certificate=root_cert, issuer_key=root_key
    )
    cert, key = create_node_certificate(inter_cert, inter_key, tmp_path / "node1")
    _, carried = read_certificates(cert)
    assert carried == read_certificates(inter_cert)[0]
    assert "Intermediate" in carried.subject.rfc4514_string()
    result = openssl("verify", "-CAfile", str(root_cert), "-untrusted", str(inter_cert), str(cert))
    assert result.returncode == 0, result.stderr
    assert load_node_tls(cert, key, root_cert).intermediates == (carried,)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ip_addresses": ["300.1.2.3"]}, "'300.1.2.3' is not a valid IP address"),
        ({"ip_addresses": [], "dns_names": []}, "at least one IP address or DNS name"),
        ({"dns_names": ["bad name"]}, "not a valid DNS name"),
        ({"days": 0}, "positive number of days"),
        ({"common_name": " "}, "needs a common name"),
    ],
)
def test_bad_requests_are_refused_before_anything_is_written(tmp_path, pki, kwargs, message):
    ca_cert, ca_key, _, _ = pki
    with pytest.raises(CertificateError, match=message):
        create_node_certificate(ca_cert, ca_key, tmp_path / "node", **kwargs)
    assert not (tmp_path / "node").exists()


def test_the_ca_must_be_a_ca_with_its_own_key(tmp_path, pki):
    ca_cert, ca_key, cert, key = pki
    with pytest.raises(CertificateError, match="not a CA certificate") as error:
        create_node_certificate(cert, key, tmp_path / "node")
    assert str(cert) in str(error.value)
    with pytest.raises(CertificateError, match="does not belong to the CA certificate"):
        create_node_certificate(ca_cert, key, tmp_path / "node")
    with pytest.raises(CertificateError, match="does not exist") as error:
        create_node_certificate(tmp_path / "missing.crt", ca_key, tmp_path / "node")
    assert str(tmp_path / "missing.crt") in str(error.value)
    assert isinstance(error.value, EvdbError)


def test_cluster_certificates_use_one_ca_and_a_folder_per_node(tmp_path):
    written = create_cluster_certificates(
        tmp_path,
        [
            NodeCertRequest("node1", ("127.0.0.1",)),
            NodeCertRequest("node2", ("127.0.0.2",), ("node2.local",)),
        ],
    )
    assert sorted(os.listdir(tmp_path)) == ["ca", "node1", "node2"]
    assert written.ca_path == tmp_path / "ca" / "ca.crt"
    assert written.nodes["node2"].cert_path == tmp_path / "node2" / "node.crt"
    second = load_node_tls(written.nodes["node2"].cert_path, written.nodes["node2"].key_path, tmp_path / "ca")
    assert second.san_ip_addresses == ["127.0.0.2"] and second.san_dns_names == ["node2.local"]
    with pytest.raises(CertificateError, match="cannot be a node certificate folder"):
        create_cluster_certificates(tmp_path / "other", [NodeCertRequest("ca")])


def test_dev_certificates_are_reused_while_they_fit(tmp_path):
    first = generate_dev_certificates(tmp_path, ip_addresses=["127.0.0.1"], dns_names=["localhost"])
    fingerprint = load_node_tls(first.cert_path, first.key_path, first.ca_path).fingerprint_sha256
    again = generate_dev_certificates(tmp_path, ip_addresses=["127.0.0.1"], dns_names=["localhost"])
    assert again == first
    assert load_node_tls(again.cert_path, again.key_path, again.ca_path).fingerprint_sha256 == fingerprint
    renamed = generate_dev_certificates(
        tmp_path, ip_addresses=["127.0.0.1"], dns_names=["localhost"], common_name="dev-node"
    )
    tls = load_node_tls(renamed.cert_path, renamed.key_path, renamed.ca_path)
    assert tls.common_name == "dev-node" and tls.fingerprint_sha256 != fingerprint

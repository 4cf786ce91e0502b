"""Matching a node certificate's common name against CertificateReservedNodeCommonName.

The cases are KurrentDB's own (its ``client_name_matching`` tests), so evdb nodes and KurrentDB nodes
accept the same certificates.
"""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from evdb.tls import (
    CertificateError,
    check_peer_common_name,
    check_peer_node_certificate,
    common_name_matches,
)


@pytest.mark.parametrize(
    ("common_name", "reserved"),
    [
        ("10.123.45.6", "10.123.45.6"),
        ("abc.test.com", "abc.test.com"),
        ("abc.test.com", "abC.tEst.cOm"),
        ("eventstoredb-node", "eventstoredb-node"),
        ("eventstoredb-node", "EventstoreDB-Node"),
        ("abc.test.com", "*.test.com"),
        ("abc.test.com", "*.tEst.cOm"),
        ("*.test.com", "*.test.com"),
        ("*.test.com", "*.teSt.cOm"),
    ],
)
def test_matches(common_name, reserved):
    assert common_name_matches(common_name, reserved)


@pytest.mark.parametrize(
    ("common_name", "reserved"),
    [
        ("abc.test.com", "*.com"),
        ("abc.test.com", "cde.test.com"),
        ("abc.test.com", "abc.test1.com"),
        ("abc.def.test.com", "abc.ghi.test.com"),
        ("*.test.com", "*.test1.com"),
        ("*.test.com", "abc.test.com"),
        ("*.test.com", "abc.d.test.com"),
        ("*.*.test.com", "*.*.test.com"),
        ("*", "*"),
        ("abc.d.test.com", "*.test.com"),  # a wildcard stands for one label
        ("", "eventstoredb-node"),
    ],
)
def test_does_not_match(common_name, reserved):
    assert not common_name_matches(common_name, reserved)


def _certificate_der(common_name: str | None, sans: list[x509.GeneralName]) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)] if common_name else [])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def test_check_peer_common_name_explains_a_mismatch():
    der = _certificate_der("node1.cluster.local", [x509.DNSName("node1.cluster.local")])
    check_peer_common_name(der, "*.cluster.local")
    with pytest.raises(CertificateError) as error:
        check_peer_common_name(der, "eventstoredb-node")
    assert "'node1.cluster.local'" in str(error.value) and "'eventstoredb-node'" in str(error.value)
    assert "CertificateReservedNodeCommonName" in str(error.value)
    with pytest.raises(CertificateError, match="common name ''"):
        check_peer_common_name(_certificate_der(None, []), "eventstoredb-node")
    with pytest.raises(CertificateError, match="cannot be parsed"):
        check_peer_common_name(b"not der", "eventstoredb-node")


def test_a_peer_node_certificate_needs_an_ip_or_dns_name():
    check_peer_node_certificate(
        _certificate_der("eventstoredb-node", [x509.DNSName("n1")]), "eventstoredb-node"
    )
    with pytest.raises(CertificateError, match="Subject Alternative Names"):
        check_peer_node_certificate(_certificate_der("eventstoredb-node", []), "eventstoredb-node")

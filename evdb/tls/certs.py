"""Certificate generation with ``cryptography``, in the layout KurrentDB's certificate tool makes::

    ca/ca.crt  ca/ca.key  node1/node.crt  node1/node.key  ...

Keys are ECDSA P-256 (accepted by OpenSSL, Python's ssl and gRPC alike), written with mode 0600 and
atomically. Node certificates carry serverAuth and clientAuth (nodes use them as client
certificates towards each other) and the node common name the cluster reserves.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from evdb.errors import EvdbError

__all__ = [
    "DEFAULT_NODE_COMMON_NAME",
    "DevCertificates",
    "NodeCertRequest",
    "create_ca",
    "create_cluster_certificates",
    "create_node_certificate",
    "generate_dev_certificates",
]

DEFAULT_NODE_COMMON_NAME = "eventstoredb-node"


@dataclass(frozen=True)
class NodeCertRequest:
    folder: str  # e.g. "node1"
    ip_addresses: tuple[str, ...] = ("127.0.0.1",)
    dns_names: tuple[str, ...] = ("localhost",)
    common_name: str = DEFAULT_NODE_COMMON_NAME


@dataclass(frozen=True)
class DevCertificates:
    ca_path: Path
    cert_path: Path
    key_path: Path


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write(path: Path, data: bytes, mode: int, force: bool) -> None:
    if path.exists() and not force:
        raise EvdbError(f"{path} already exists; use --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def create_ca(
    out: str | os.PathLike, *, common_name: str = "evdb CA", days: int = 3650, force: bool = False
) -> tuple[Path, Path]:
    """Write ``ca.crt`` and ``ca.key`` in ``out``; returns their paths."""
    out = Path(out)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "evdb"),
        ]
    )
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = out / "ca.crt", out / "ca.key"
    _write(key_path, _key_pem(key), 0o600, force)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644, force)
    return cert_path, key_path


def create_node_certificate(
    ca_certificate: str | os.PathLike,
    ca_key: str | os.PathLike,
    out: str | os.PathLike,
    *,
    ip_addresses: list[str] | tuple[str, ...] = ("127.0.0.1",),
    dns_names: list[str] | tuple[str, ...] = ("localhost",),
    common_name: str = DEFAULT_NODE_COMMON_NAME,
    days: int = 730,
    force: bool = False,
) -> tuple[Path, Path]:
    """Write ``node.crt`` and ``node.key`` in ``out``, signed by the CA; returns their paths."""
    try:
        ca_cert = x509.load_pem_x509_certificate(Path(ca_certificate).read_bytes())
        ca_private = serialization.load_pem_private_key(Path(ca_key).read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise EvdbError(f"{exc.filename}: no such file") from None
    except ValueError as exc:
        raise EvdbError(f"cannot read the CA certificate or key: {exc}") from None
    try:
        ips = [ipaddress.ip_address(ip) for ip in ip_addresses if ip]
    except ValueError as exc:
        raise EvdbError(f"invalid IP address: {exc}") from None
    sans: list[x509.GeneralName] = [x509.IPAddress(ip) for ip in ips]
    sans += [x509.DNSName(d) for d in dns_names if d]
    if not sans:
        raise EvdbError("a node certificate needs at least one IP address or DNS name")
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False
        )
        .sign(ca_private, hashes.SHA256())
    )
    out = Path(out)
    cert_path, key_path = out / "node.crt", out / "node.key"
    _write(key_path, _key_pem(key), 0o600, force)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644, force)
    return cert_path, key_path


def create_cluster_certificates(
    directory: str | os.PathLike, nodes: list[NodeCertRequest], *, force: bool = False
) -> dict[str, tuple[Path, Path]]:
    """One CA (``ca/``) and one folder per node; returns folder -> (certificate, key)."""
    directory = Path(directory)
    ca_cert, ca_key = create_ca(directory / "ca", force=force)
    return {
        n.folder: create_node_certificate(
            ca_cert,
            ca_key,
            directory / n.folder,
            ip_addresses=n.ip_addresses,
            dns_names=n.dns_names,
            common_name=n.common_name,
            force=force,
        )
        for n in nodes
    }


def generate_dev_certificates(
    directory: str | os.PathLike,
    *,
    ip_addresses: list[str] | tuple[str, ...] = ("127.0.0.1", "::1"),
    dns_names: list[str] | tuple[str, ...] = ("localhost",),
    common_name: str = DEFAULT_NODE_COMMON_NAME,
) -> DevCertificates:
    """Throw-away certificates for dev mode; made once and reused while they stay valid."""
    directory = Path(directory)
    ca, cert, key = (
        directory / "ca" / "ca.crt",
        directory / "node" / "node.crt",
        directory / "node" / "node.key",
    )
    if ca.exists() and cert.exists() and key.exists():
        try:
            existing = x509.load_pem_x509_certificate(cert.read_bytes())
            if existing.not_valid_after_utc > _now() + datetime.timedelta(days=1):
                return DevCertificates(ca, cert, key)
        except ValueError:
            pass
    ca_cert, ca_key = create_ca(directory / "ca", common_name="evdb dev CA", days=365, force=True)
    create_node_certificate(
        ca_cert,
        ca_key,
        directory / "node",
        ip_addresses=ip_addresses,
        dns_names=dns_names,
        common_name=common_name,
        days=365,
        force=True,
    )
    return DevCertificates(ca, cert, key)

"""``evdb certs``: create a CA and node certificates; inspect a certificate."""

from __future__ import annotations

import argparse
import json
import sys

from cryptography import x509

from evdb.errors import EvdbError

__all__ = ["register_cli"]


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("certs", help="create and inspect TLS certificates")
    sub = parser.add_subparsers(dest="certs_command", metavar="COMMAND", required=True)
    ca = sub.add_parser("create-ca", help="create a certificate authority (ca.crt, ca.key)")
    ca.add_argument(
        "--out", default="./certs/ca", help="folder to write ca.crt and ca.key to (default ./certs/ca)"
    )
    ca.add_argument("--name", default="evdb CA", help="the CA's common name")
    ca.add_argument("--days", type=int, default=3650, help="validity in days (default 3650)")
    ca.add_argument("--force", action="store_true", help="overwrite existing files")
    ca.set_defaults(func=_create_ca)
    node = sub.add_parser(
        "create-node", help="create a node certificate (node.crt, node.key) signed by the CA"
    )
    node.add_argument(
        "--ca-certificate", default="./certs/ca/ca.crt", help="the CA certificate (default ./certs/ca/ca.crt)"
    )
    node.add_argument("--ca-key", default="./certs/ca/ca.key", help="the CA key (default ./certs/ca/ca.key)")
    node.add_argument("--out", default="./certs/node1", help="folder to write node.crt and node.key to")
    node.add_argument("--ip-addresses", default="127.0.0.1", help="comma-separated IP addresses (SANs)")
    node.add_argument("--dns-names", default="localhost", help="comma-separated DNS names (SANs)")
    node.add_argument(
        "--common-name", default="eventstoredb-node", help="must match CertificateReservedNodeCommonName"
    )
    node.add_argument("--days", type=int, default=730, help="validity in days (default 730)")
    node.add_argument("--force", action="store_true", help="overwrite existing files")
    node.set_defaults(func=_create_node)
    inspect = sub.add_parser("inspect", help="show a certificate's subject, issuer, validity and names")
    inspect.add_argument("file")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.set_defaults(func=_inspect)


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _create_ca(args: argparse.Namespace) -> int:
    from evdb.tls.certs import create_ca

    try:
        cert, key = create_ca(args.out, common_name=args.name, days=args.days, force=args.force)
    except EvdbError as exc:
        print(f"evdb certs: {exc}", file=sys.stderr)
        return 1
    print(f"Wrote {cert} and {key}")
    return 0


def _create_node(args: argparse.Namespace) -> int:
    from evdb.tls.certs import create_node_certificate

    try:
        cert, key = create_node_certificate(
            args.ca_certificate,
            args.ca_key,
            args.out,
            ip_addresses=_split(args.ip_addresses),
            dns_names=_split(args.dns_names),
            common_name=args.common_name,
            days=args.days,
            force=args.force,
        )
    except EvdbError as exc:
        print(f"evdb certs: {exc}", file=sys.stderr)
        return 1
    print(f"Wrote {cert} and {key}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    try:
        with open(args.file, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
    except (OSError, ValueError) as exc:
        print(f"evdb certs: {args.file}: {exc}", file=sys.stderr)
        return 1
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        ips = [str(i) for i in sans.get_values_for_type(x509.IPAddress)]
        dns = list(sans.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        ips, dns = [], []
    from cryptography.hazmat.primitives import hashes

    info = {
        "subject": cert.subject.rfc4514_string(),
        "issuer": cert.issuer.rfc4514_string(),
        "notBefore": cert.not_valid_before_utc.isoformat(),
        "notAfter": cert.not_valid_after_utc.isoformat(),
        "ipAddresses": ips,
        "dnsNames": dns,
        "fingerprintSha256": cert.fingerprint(hashes.SHA256()).hex(),
    }
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for k, v in info.items():
            print(f"{k}: {', '.join(v) if isinstance(v, list) else v}")
    return 0

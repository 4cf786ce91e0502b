"""``evdb certs``: create a CA and node certificates, inspect a certificate, verify a node's set.

The options of ``create-ca`` and ``create-node`` are es-gencert-cli's, and its single-dash spellings
(``-ca-certificate``, ``-out``, ...) are accepted too, so its documented command lines work unchanged.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from evdb.errors import EvdbError

__all__ = ["register_cli"]

#: The sub-commands, for ``evdb certs --help`` and the documentation test.
COMMANDS = ("create-ca", "create-node", "inspect", "verify", "renew-ca", "renew-node", "rotate")


def register_cli(subparsers: Any) -> None:
    """Add ``evdb certs`` and its sub-commands to the ``evdb`` parser."""
    parser = subparsers.add_parser(
        "certs",
        help="create, inspect and verify TLS certificates",
        description="Create a CA and node certificates (es-gencert-cli's layout), inspect a certificate, "
        "or verify a node's certificate set the way the node loads it. See docs/certificates.md.",
    )
    sub = parser.add_subparsers(dest="certs_command", metavar="COMMAND", required=True)

    ca = sub.add_parser(
        "create-ca",
        help="create a certificate authority: ca.crt and ca.key",
        description="Create a root CA, or an intermediate CA when --ca-certificate and --ca-key name the "
        "issuing CA. Writes ca.crt and ca.key (mode 0600) in --out.",
    )
    _option(ca, "--out", default="./certs/ca", metavar="DIR", help="output folder (default ./certs/ca)")
    _option(ca, "--days", type=int, default=None, metavar="N", help="validity in days (default 5 years)")
    _option(
        ca, "--name", default=None, metavar="CN", help="the CA's common name (default 'evdb CA <serial>')"
    )
    _option(
        ca,
        "--ca-certificate",
        default=None,
        metavar="FILE",
        help="issuing CA certificate, for an intermediate CA",
    )
    _option(ca, "--ca-key", default=None, metavar="FILE", help="issuing CA key, for an intermediate CA")
    _option(ca, "--force", action="store_true", help="replace existing files")
    ca.set_defaults(func=_create_ca)

    node = sub.add_parser(
        "create-node",
        help="create a node certificate signed by the CA: node.crt and node.key",
        description="Create a node certificate (server and client authentication) signed by the CA. "
        "Writes node.crt and node.key (mode 0600) in --out. Without --ip-addresses and --dns-names the "
        "certificate names 127.0.0.1 and localhost.",
    )
    _option(
        node,
        "--ca-certificate",
        default="./certs/ca/ca.crt",
        metavar="FILE",
        help="CA certificate (default ./certs/ca/ca.crt)",
    )
    _option(
        node,
        "--ca-key",
        default="./certs/ca/ca.key",
        metavar="FILE",
        help="CA key (default ./certs/ca/ca.key)",
    )
    _option(
        node, "--out", default="./certs/node1", metavar="DIR", help="output folder (default ./certs/node1)"
    )
    _option(
        node, "--ip-addresses", default=None, metavar="LIST", help="comma-separated IP addresses of the node"
    )
    _option(node, "--dns-names", default=None, metavar="LIST", help="comma-separated DNS names of the node")
    _option(
        node,
        "--common-name",
        default="eventstoredb-node",
        metavar="CN",
        help="subject common name; must match CertificateReservedNodeCommonName (default eventstoredb-node)",
    )
    _option(node, "--days", type=int, default=None, metavar="N", help="validity in days (default 1 year)")
    _option(node, "--force", action="store_true", help="replace existing files")
    node.set_defaults(func=_create_node)

    inspect = sub.add_parser(
        "inspect",
        help="show a certificate's subject, issuer, validity, names and fingerprint",
        description="Show every certificate in a PEM (or DER) file.",
    )
    inspect.add_argument("file", metavar="FILE")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.set_defaults(func=_inspect)

    verify = sub.add_parser(
        "verify",
        help="check a node's certificate, key and trusted roots exactly as the node loads them",
        description="Run the node's certificate loader: files readable, key matches the certificate, chain "
        "to a trusted root, validity, key usages; optionally the reserved node common name. Exit code 0 "
        "when the node would accept the set, 1 (with the reason) when it would keep its old one.",
    )
    verify.add_argument("--certificate-file", required=True, metavar="FILE")
    verify.add_argument("--certificate-private-key-file", required=True, metavar="FILE")
    verify.add_argument("--trusted-root-certificates-path", required=True, metavar="PATH")
    verify.add_argument("--certificate-reserved-node-common-name", default=None, metavar="CN")
    verify.add_argument("--json", action="store_true", help="print JSON")
    verify.set_defaults(func=_verify)

    renew_ca = sub.add_parser(
        "renew-ca",
        help="create a new root CA made like an existing one (same validity)",
        description="Step 1 of a rolling update: a new CA with a fresh key and the validity of --like. "
        "Writes ca.crt and ca.key (mode 0600) in --out.",
    )
    renew_ca.add_argument("--like", required=True, metavar="FILE", help="the current CA certificate")
    renew_ca.add_argument("--out", required=True, metavar="DIR", help="output folder")
    renew_ca.add_argument(
        "--name", default=None, metavar="CN", help="common name (default 'evdb CA <serial>')"
    )
    renew_ca.add_argument("--force", action="store_true", help="replace existing files")
    renew_ca.set_defaults(func=_renew_ca)

    renew_node = sub.add_parser(
        "renew-node",
        help="create a node certificate with the names of an existing one, signed by a (new) CA",
        description="Step 1 of a rolling update: a node certificate with the common name, IP addresses, "
        "DNS names and validity of --like, signed by --ca-certificate/--ca-key. "
        "Writes node.crt and node.key.",
    )
    renew_node.add_argument("--like", required=True, metavar="FILE", help="the node's current certificate")
    renew_node.add_argument(
        "--ca-certificate", required=True, metavar="FILE", help="the signing CA certificate"
    )
    renew_node.add_argument("--ca-key", required=True, metavar="FILE", help="the signing CA key")
    renew_node.add_argument("--out", required=True, metavar="DIR", help="output folder")
    renew_node.add_argument(
        "--common-name", default=None, metavar="CN", help="a new common name (default: the current one)"
    )
    renew_node.add_argument("--force", action="store_true", help="replace existing files")
    renew_node.set_defaults(func=_renew_node)

    rotate = sub.add_parser(
        "rotate",
        help="rolling certificate update of a local cluster (evdb cluster up): new CA, relink, reload",
        description="Check that every node can take a reload, make a new CA and node certificates like the "
        "current ones (certs/gen-N), then node by node (followers first) repoint the ca, node.crt and node.key "
        "links and POST /admin/reloadconfig; done once every node talks to every other again and the leader "
        "acknowledged a write held by a majority. See docs/operations/certificates.md.",
    )
    rotate.add_argument("--cluster", required=True, metavar="DIR", help="the cluster's data folder")
    rotate.add_argument(
        "--common-name",
        default=None,
        metavar="CN",
        help="give the new certificates this common name (CertificateReservedNodeCommonName follows)",
    )
    rotate.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds to wait for the nodes (default 120)",
    )
    rotate.add_argument(
        "--prepare",
        action="store_true",
        help="only check every node, write the new certificates and repoint every node's links; reload "
        "no node: reload each yourself, followers first (dashboard l key, POST /admin/reloadconfig, SIGHUP), "
        "then run rotate again without --prepare to finish (clients trust both CAs until then)",
    )
    rotate.set_defaults(func=_rotate)


def _option(parser: argparse.ArgumentParser, name: str, **kwargs: Any) -> None:
    """An option under its ``--name`` and es-gencert-cli's ``-name`` spelling."""
    parser.add_argument(name, name[1:], dest=name[2:].replace("-", "_"), **kwargs)


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _fail(error: Exception) -> int:
    print(f"evdb certs: {error}", file=sys.stderr)
    return 1


def _create_ca(args: argparse.Namespace) -> int:
    from evdb.tls.certs import CA_DAYS, create_ca

    try:
        cert, key = create_ca(
            args.out,
            common_name=args.name,
            days=args.days or CA_DAYS,
            issuer_certificate=args.ca_certificate,
            issuer_key=args.ca_key,
            force=args.force,
        )
        return _wrote(cert, key, with_names=False)
    except EvdbError as exc:
        return _fail(exc)


def _create_node(args: argparse.Namespace) -> int:
    from evdb.tls.certs import NODE_DAYS, create_node_certificate

    ips, dns = _split(args.ip_addresses), _split(args.dns_names)
    if args.ip_addresses is None and args.dns_names is None:
        ips, dns = ["127.0.0.1"], ["localhost"]
    try:
        cert, key = create_node_certificate(
            args.ca_certificate,
            args.ca_key,
            args.out,
            ip_addresses=ips,
            dns_names=dns,
            common_name=args.common_name,
            days=args.days or NODE_DAYS,
            force=args.force,
        )
        return _wrote(cert, key, with_names=True)
    except EvdbError as exc:
        return _fail(exc)


def _inspect(args: argparse.Namespace) -> int:
    from evdb.tls.loading import describe_certificate, read_certificates

    try:
        infos = [describe_certificate(c) for c in read_certificates(args.file)]
    except EvdbError as exc:
        return _fail(exc)
    if args.json:
        first, *rest = infos
        print(
            json.dumps(
                {"file": args.file, **first.to_json(), "additionalCertificates": [i.to_json() for i in rest]},
                indent=2,
            )
        )
        return 0
    for n, info in enumerate(infos, start=1):
        if len(infos) > 1:
            if n > 1:
                print()
            print(f"Certificate {n} of {len(infos)} in {args.file}")
        _print_fields(info.to_json())
    return 0


def _verify(args: argparse.Namespace) -> int:
    from evdb.tls.loading import check_peer_node_certificate, load_node_tls

    try:
        tls = load_node_tls(
            args.certificate_file, args.certificate_private_key_file, args.trusted_root_certificates_path
        )
        if args.certificate_reserved_node_common_name is not None:
            from cryptography.hazmat.primitives import serialization

            der = tls.certificate.public_bytes(serialization.Encoding.DER)
            check_peer_node_certificate(der, args.certificate_reserved_node_common_name)
    except EvdbError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps({"ok": True, **tls.describe()}, indent=2))
    else:
        print("OK: the node would load this certificate set.")
        _print_fields(tls.describe())
    return 0


def _renew_ca(args: argparse.Namespace) -> int:
    from evdb.tls.rotate import renew_ca

    try:
        cert, key = renew_ca(args.like, args.out, common_name=args.name, force=args.force)
        return _wrote(cert, key, with_names=False)
    except EvdbError as exc:
        return _fail(exc)


def _renew_node(args: argparse.Namespace) -> int:
    from evdb.tls.rotate import renew_node

    try:
        cert, key = renew_node(
            args.like,
            args.ca_certificate,
            args.ca_key,
            args.out,
            common_name=args.common_name,
            force=args.force,
        )
        return _wrote(cert, key, with_names=True)
    except EvdbError as exc:
        return _fail(exc)


def _rotate(args: argparse.Namespace) -> int:
    from evdb.tls.rotate import rotate_cluster

    try:
        report = rotate_cluster(
            args.cluster, common_name=args.common_name, timeout=args.timeout, prepare_only=args.prepare
        )
    except EvdbError as exc:
        return _fail(exc)
    if args.prepare:
        print(
            f"Prepared: every node's links point to {report.generation} (CA {report.ca_subject}); "
            f"reload {', '.join(report.order)} in that order, then run `evdb certs rotate --cluster "
            f"{args.cluster}` to finish."
        )
        return 0
    print(
        f"Done: every node uses {report.generation} "
        f"(CA {report.ca_subject}, SHA-256 {report.ca_fingerprint_sha256}) and the cluster acknowledged "
        "a write over the new certificates."
    )
    return 0


def _wrote(cert: Path, key: Path, *, with_names: bool) -> int:
    """Report a certificate and key just written (a node certificate with the names it carries)."""
    from evdb.tls.loading import describe_certificate, read_certificates

    info = describe_certificate(read_certificates(cert)[0])
    names = f" for {', '.join([*info.san_ip_addresses, *info.san_dns_names])}" if with_names else ""
    print(f"Wrote {cert} and {key}: {info.subject}{names}, valid until {info.not_after:%Y-%m-%d}.")
    return 0


def _print_fields(fields: dict[str, object]) -> None:
    for name, value in fields.items():
        shown = ", ".join(str(v) for v in value) if isinstance(value, list) else value
        print(f"  {name}: {shown}")

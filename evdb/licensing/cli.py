"""``evdb license``: make issuer keys, issue licence keys, and inspect them.

- ``evdb license keygen --out DIR``: a new issuer key pair (``issuer.key``, mode 0600, and
  ``issuer.pub``); prints the public key to put in the nodes' ``LicenseTrustedIssuers``.
- ``evdb license issue --licensee NAME (--demo | --issuer-key FILE) [--days N | --expires DATE]
  [--entitlements LIST] [--out FILE]``: prints (or writes) a licence key.
- ``evdb license inspect [KEY | --file FILE] [--trust KEYS]``: shows what a key says and whether a
  node trusting ``--trust`` would accept it (default: what a node trusts on defaults, i.e. no issuer;
  ``--trust demo`` for demo licences); exit code 1 when it would not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from evdb.clock import SystemClock
from evdb.errors import InvalidOption
from evdb.licensing.issuers import demo_private_key, trusted_issuer_keys
from evdb.licensing.loading import explain_wrong_issuer
from evdb.licensing.token import (
    Entitlement,
    LicenseError,
    LicenseTampered,
    LicenseWrongIssuer,
    encode_public_key,
    issue_license,
    key_id,
    read_unverified,
    verify_license,
)

__all__ = ["COMMANDS", "register_cli"]

COMMANDS = ("keygen", "issue", "inspect")


def register_cli(subparsers: Any) -> None:
    """Add ``evdb license`` and its sub-commands to the ``evdb`` parser."""
    parser = subparsers.add_parser(
        "license",
        help="make issuer keys, issue and inspect licence keys",
        description="Licence keys enable auto-scavenge and redaction. A node accepts keys signed by the "
        "issuers in its LicenseTrustedIssuers option (default: none). evdb's demo issuer is trusted only "
        "where asked for: LicenseTrustedIssuers: demo, dev mode, the local cluster (evdb cluster up).",
    )
    sub = parser.add_subparsers(dest="license_command", metavar="COMMAND", required=True)

    keygen = sub.add_parser(
        "keygen",
        help="create an issuer key pair",
        description="Create an Ed25519 issuer key pair: issuer.key (PEM, mode 0600) and issuer.pub "
        "(the base64 public key for LicenseTrustedIssuers) in --out.",
    )
    keygen.add_argument("--out", required=True, metavar="DIR", help="folder to write the key pair to")
    keygen.add_argument("--force", action="store_true", help="replace existing files")
    keygen.set_defaults(func=_keygen)

    issue = sub.add_parser(
        "issue",
        help="issue a licence key",
        description="Sign a licence key with an issuer's private key (--issuer-key) or with evdb's demo "
        "issuer (--demo, trusted only by nodes with `demo` in LicenseTrustedIssuers or in dev mode).",
    )
    issue.add_argument("--licensee", required=True, help="who the licence is for")
    signer = issue.add_mutually_exclusive_group(required=True)
    signer.add_argument("--demo", action="store_true", help="sign with evdb's demo issuer")
    signer.add_argument("--issuer-key", metavar="FILE", help="the issuer's private key (PEM)")
    expiry = issue.add_mutually_exclusive_group()
    expiry.add_argument("--days", type=int, default=None, metavar="N", help="valid for N days (default 365)")
    expiry.add_argument("--expires", metavar="DATE", help="expiry as an ISO date or date-time (UTC)")
    issue.add_argument(
        "--entitlements",
        default=",".join(e.value for e in Entitlement),
        metavar="LIST",
        help="comma-separated entitlements (default all: " + ", ".join(e.value for e in Entitlement) + ")",
    )
    issue.add_argument(
        "--out", metavar="FILE", help="write the key to FILE (mode 0600) instead of printing it"
    )
    issue.set_defaults(func=_issue)

    inspect = sub.add_parser(
        "inspect",
        help="show what a licence key says and whether it would be accepted",
        description="Decode a licence key and verify it as a node would. Exit code 0 when it would be "
        "accepted, 1 when not (the reason is printed).",
    )
    inspect.add_argument("key", nargs="?", help="the licence key (or use --file)")
    inspect.add_argument("--file", metavar="FILE", help="read the key from FILE")
    inspect.add_argument(
        "--trust",
        default=_node_default_trust(),
        metavar="KEYS",
        help="trusted issuers, as LicenseTrustedIssuers takes them (default: a node's default, no "
        "issuer; give demo for evdb's demo issuer)",
    )
    inspect.set_defaults(func=_inspect)


def _node_default_trust() -> str:
    """LicenseTrustedIssuers' default, from the option table (so inspect judges as a default node)."""
    from evdb.options import OPTIONS

    return str(next(o.default for o in OPTIONS if o.name == "LicenseTrustedIssuers"))


def _err(message: str) -> int:
    print(f"evdb license: {message}", file=sys.stderr)
    return 2


def _write_private(path: str, data: bytes, force: bool) -> None:
    """Write a file readable by its owner only: temp name, fsync, rename."""
    if os.path.exists(path) and not force:
        raise FileExistsError(f"{path} exists (use --force to replace it)")
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _keygen(args: argparse.Namespace) -> int:
    os.makedirs(args.out, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = encode_public_key(key.public_key())
    try:
        _write_private(os.path.join(args.out, "issuer.key"), pem, args.force)
        _write_private(os.path.join(args.out, "issuer.pub"), (public + "\n").encode(), args.force)
    except FileExistsError as exc:
        return _err(str(exc))
    print(f"Issuer key id {key_id(key.public_key())}; public key (for LicenseTrustedIssuers):")
    print(public)
    return 0


def _load_private(path: str) -> Ed25519PrivateKey:
    try:
        with open(path, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
    except FileNotFoundError:
        raise ValueError(f"issuer key {path} does not exist") from None
    except (ValueError, TypeError) as exc:
        raise ValueError(f"issuer key {path} is not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"issuer key {path} is not an Ed25519 key")
    return key


def _parse_expiry(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--expires {text!r} is not an ISO date (2026-12-31) or date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp())


def _issue(args: argparse.Namespace) -> int:
    now = int(SystemClock().time())
    try:
        key = demo_private_key() if args.demo else _load_private(args.issuer_key)
        if args.expires:
            expires = _parse_expiry(args.expires)
        else:
            days = 365 if args.days is None else args.days
            if days <= 0:
                raise ValueError("--days must be at least 1")
            expires = now + days * 86400
        if expires <= now:
            raise ValueError("the expiry is in the past")
        entitlements = [e.strip().upper() for e in args.entitlements.split(",") if e.strip()]
        token = issue_license(
            key, licensee=args.licensee, issued_at=now, expires_at=expires, entitlements=entitlements
        )
    except (ValueError, LicenseError) as exc:
        return _err(str(exc))
    if args.out:
        try:
            _write_private(args.out, (token + "\n").encode(), True)
        except OSError as exc:
            return _err(f"cannot write {args.out}: {exc}")
        print(f"Licence key written to {args.out}", file=sys.stderr)
    else:
        print(token)
    return 0


def _inspect(args: argparse.Namespace) -> int:
    if (args.key is None) == (args.file is None):
        return _err("give the licence key or --file FILE (one of them)")
    if args.file:
        try:
            with open(args.file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            return _err(f"cannot read {args.file}: {exc.strerror}")
    else:
        token = args.key.strip()
    try:
        trusted = trusted_issuer_keys(args.trust)
    except InvalidOption as exc:
        return _err(str(exc))
    try:
        claimed = read_unverified(token).describe()
    except LicenseTampered:
        claimed = None
    except LicenseError as exc:
        print(json.dumps({"valid": False, "reason": exc.reason, "message": str(exc)}, indent=2))
        return 1
    try:
        lic = verify_license(token, trusted, SystemClock().time())
    except LicenseError as error:
        shown = explain_wrong_issuer(token, error) if isinstance(error, LicenseWrongIssuer) else error
        out = {"valid": False, "reason": shown.reason, "message": str(shown)}
        if claimed is not None:
            out["claims"] = claimed
        print(json.dumps(out, indent=2))
        return 1
    print(json.dumps({"valid": True, **lic.describe()}, indent=2))
    return 0

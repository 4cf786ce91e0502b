"""The S3 endpoint and credentials, from the standard AWS providers.

obstore (the Rust object_store crate) reads web identity tokens, container credentials and the
instance metadata service itself, but not the shared files. This module reads the keys of the
environment it is given (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``)
and of the shared files and hands them to obstore, in the order
the AWS SDKs use: the environment first, then the profile (``AWS_PROFILE``, else ``default``) of
the shared credentials file (``AWS_SHARED_CREDENTIALS_FILE``, else ``~/.aws/credentials``), then of
the config file (``AWS_CONFIG_FILE``, else ``~/.aws/config``, where a profile's section is
``[profile NAME]``, ``[default]`` for the default one); nothing found leaves obstore's own chain.
The endpoint: ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``, else the profile's
``endpoint_url``, else AWS's endpoint of the region.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass

from evdb.errors import InvalidOption

__all__ = ["S3Access", "s3_access"]


@dataclass(frozen=True)
class S3Access:
    """Where the archive's bucket is reached and with which keys (None: obstore's own chain)."""

    endpoint: str | None
    access_key_id: str | None
    secret_access_key: str | None
    session_token: str | None
    #: where the keys came from, for the start-up log ("environment", "profile dev of FILE", ...)
    source: str


def _read(path: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise InvalidOption(f"The AWS shared file {path} cannot be read: {exc}") from None
    return parser


def _section(parser: configparser.ConfigParser, names: tuple[str, ...]) -> Mapping[str, str] | None:
    for name in names:
        if parser.has_section(name):
            return parser[name]
    return None


def s3_access(environ: Mapping[str, str]) -> S3Access:
    """The endpoint and keys ``environ`` and the shared files it names give (see the module)."""
    home = environ.get("HOME") or os.path.expanduser("~")
    profile = environ.get("AWS_PROFILE") or "default"
    credentials_file = environ.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(home, ".aws", "credentials")
    config_file = environ.get("AWS_CONFIG_FILE") or os.path.join(home, ".aws", "config")
    config_names = ("default",) if profile == "default" else (f"profile {profile}",)
    config = _section(_read(config_file), config_names) if os.path.isfile(config_file) else None
    endpoint = (
        environ.get("AWS_ENDPOINT_URL_S3")
        or environ.get("AWS_ENDPOINT_URL")
        or (config.get("endpoint_url") if config is not None else None)
        or None
    )
    if environ.get("AWS_ACCESS_KEY_ID"):
        if not environ.get("AWS_SECRET_ACCESS_KEY"):
            raise InvalidOption(
                "AWS_ACCESS_KEY_ID is set in the environment but AWS_SECRET_ACCESS_KEY is not"
            )
        return S3Access(
            endpoint,
            environ["AWS_ACCESS_KEY_ID"],
            environ["AWS_SECRET_ACCESS_KEY"],
            environ.get("AWS_SESSION_TOKEN") or None,
            "the environment (AWS_ACCESS_KEY_ID)",
        )
    for path, section in (
        (credentials_file, (profile,)),
        (config_file, config_names),
    ):
        if not os.path.isfile(path):
            continue
        found = _section(_read(path), section)
        if found is None or not found.get("aws_access_key_id"):
            continue
        secret = found.get("aws_secret_access_key")
        if not secret:
            raise InvalidOption(
                f"The AWS profile {profile} in {path} has aws_access_key_id but no aws_secret_access_key"
            )
        return S3Access(
            endpoint,
            found["aws_access_key_id"],
            secret,
            found.get("aws_session_token") or None,
            f"profile {profile} of {path}",
        )
    if profile != "default" and environ.get("AWS_PROFILE"):
        raise InvalidOption(
            f"AWS_PROFILE names the profile {profile}, which neither {credentials_file} nor {config_file} "
            "holds keys for"
        )
    return S3Access(endpoint, None, None, None, "the AWS default chain (web identity, container, instance)")

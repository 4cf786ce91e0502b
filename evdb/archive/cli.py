"""``evdb archive verify``: every archived chunk checked against its checksum and the archive checkpoint.

The archive is the one a node's configuration names (``--config node.yaml``, the environment, or the
``--archive-*`` options themselves). Each chunk before the checkpoint is downloaded to a temporary
folder (one at a time: ``ArchiveCache`` with room for one) and checked as a node checks a chunk it
reads: its header must name that chunk and the checkpoint's chunk size, its footer's xxh3-128 checksum
must match every byte. Objects after the checkpoint (an upload not yet recorded) are listed.

Exit status: 0 every chunk verified; 1 a chunk missing or damaged (each is named); 2 a bad
configuration; 3 the archive unavailable.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from typing import Any

from evdb.errors import ArchiveError, ArchiveUnavailable, EvdbError

__all__ = ["register_cli", "verify_archive"]


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    from evdb.options import add_arguments

    parser = subparsers.add_parser(
        "archive",
        help="check the archive in object storage (verify)",
        description="Check the archive (object storage) a node's configuration names.",
    )
    actions = parser.add_subparsers(dest="archive_command", metavar="ACTION", required=True)
    verify = actions.add_parser(
        "verify",
        help="check every archived chunk against its checksum and the archive checkpoint",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    add_arguments(verify)
    verify.set_defaults(func=_verify_main)


def verify_archive(store: Any, logger: logging.Logger) -> dict[str, Any]:
    """The verification's findings: checkpoint, chunk size, verified chunks, problems, pending objects."""
    from evdb.archive.archive_rewrite import LEASE, MARKERS
    from evdb.archive.archiver import CHECKPOINT, CLAIM, chunk_object_name, read_checkpoint
    from evdb.archive.cache import ArchiveCache

    checkpoint = read_checkpoint(store)
    found: dict[str, Any] = {"archive": store.description, "checkpoint": checkpoint.position}
    problems: list[str] = []
    verified = 0
    if checkpoint.etag is None:
        found.update(chunkSize=None, verified=0, problems=[], pending=[o.name for o in store.list()])
        return found
    chunk_size = int(json.loads(store.get_bytes(CHECKPOINT))["chunkSize"])
    count = checkpoint.position // chunk_size
    with tempfile.TemporaryDirectory(prefix="evdb-archive-verify-") as folder:
        cache = ArchiveCache(store, folder, chunk_size=chunk_size, max_bytes=0, logger=logger)
        for number in range(count):
            try:
                cache.chunk(number)
                verified += 1
            except ArchiveUnavailable:
                raise
            except ArchiveError as exc:
                problems.append(f"chunk {number}: {exc}")
        cache.close()
    archived = {chunk_object_name(n) for n in range(count)} | {CHECKPOINT, CLAIM}
    found.update(
        chunkSize=chunk_size,
        verified=verified,
        problems=problems,
        pending=[
            o.name
            for o in store.list()
            if o.name not in archived and o.name != LEASE and not o.name.startswith(MARKERS + "/")
        ],
    )
    return found


def _verify_main(args: argparse.Namespace) -> int:
    import os

    from evdb.archive.settings import archive_settings
    from evdb.options import options_from_namespace

    try:
        settings = archive_settings(options_from_namespace(args, os.environ))
        if not settings.enabled:
            raise EvdbError("The configuration does not enable the archive (Archive: Enabled: true)")
        store = settings.open_store()
    except EvdbError as exc:
        print(f"evdb archive verify: {exc}", file=sys.stderr)
        return 2
    logger = logging.getLogger("evdb.archive.verify")
    try:
        found = verify_archive(store, logger)
    except ArchiveUnavailable as exc:
        print(f"evdb archive verify: {exc}", file=sys.stderr)
        return 3
    except ArchiveError as exc:
        print(f"evdb archive verify: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(found))
    else:
        print(
            f"{found['archive']}: checkpoint {found['checkpoint']}, {found['verified']} chunk(s) verified"
            + (f" (chunk size {found['chunkSize']})" if found["chunkSize"] else "")
        )
        for problem in found["problems"]:
            print(f"PROBLEM {problem}")
        for name in found["pending"]:
            print(f"after the checkpoint: {name}")
    return 1 if found["problems"] else 0

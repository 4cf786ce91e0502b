"""``evdb scavenge`` and ``evdb user``: scripts' way to the node's HTTP admin API."""

from __future__ import annotations

import argparse
import json
import sys
import time

import httpx

__all__ = ["register_cli"]


def _connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node", default="https://127.0.0.1:2113", help="the node's base URL")
    parser.add_argument("--user", default="admin", help="user name (default admin)")
    parser.add_argument("--password", default="changeit", help="password (default changeit)")
    parser.add_argument("--ca", default=None, help="CA certificate to verify the node's certificate with")


def _client(args: argparse.Namespace) -> httpx.Client:
    verify: bool | str = args.ca if args.ca else True
    return httpx.Client(
        base_url=args.node,
        auth=(args.user, args.password),
        verify=verify,
        timeout=60,
        headers={"Accept": "application/json"},
    )


def _fail(response: httpx.Response) -> int:
    print(
        f"evdb: {response.request.method} {response.request.url.path} -> {response.status_code} {response.text}",
        file=sys.stderr,
    )
    return 1


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    scavenge = subparsers.add_parser("scavenge", help="start, stop and watch scavenges on a node")
    sub = scavenge.add_subparsers(dest="scavenge_command", metavar="COMMAND", required=True)
    start = sub.add_parser("start", help="POST /admin/scavenge")
    _connection_args(start)
    start.add_argument("--threads", type=int, default=1)
    start.add_argument("--threshold", type=int, default=0)
    start.add_argument("--throttle-percent", type=int, default=100)
    start.add_argument("--sync-only", action="store_true")
    start.add_argument("--wait", action="store_true", help="wait until it finishes and print the result")
    start.set_defaults(func=_scavenge_start)
    stop = sub.add_parser("stop", help="DELETE /admin/scavenge/{id|current}")
    _connection_args(stop)
    stop.add_argument("scavenge_id", nargs="?", default="current")
    stop.set_defaults(func=_scavenge_stop)
    status = sub.add_parser("status", help="the running scavenge's progress, or the last result")
    _connection_args(status)
    status.set_defaults(func=_scavenge_status)

    user = subparsers.add_parser("user", help="manage users on a node")
    usub = user.add_subparsers(dest="user_command", metavar="COMMAND", required=True)
    for name, helptext in (
        ("list", "list users"),
        ("create", "create a user"),
        ("delete", "delete a user"),
        ("reset-password", "set a user's password"),
        ("enable", "enable a user"),
        ("disable", "disable a user"),
    ):
        p = usub.add_parser(name, help=helptext)
        _connection_args(p)
        if name != "list":
            p.add_argument("login")
        if name == "create":
            p.add_argument("--full-name", default="")
            p.add_argument("--groups", default="", help="comma-separated groups, e.g. $ops")
            p.add_argument("--new-password", required=True)
        if name == "reset-password":
            p.add_argument("--new-password", required=True)
        p.set_defaults(func=_user, user_verb=name)


def _scavenge_start(args: argparse.Namespace) -> int:
    from evdb.errors import InvalidInput
    from evdb.scavenge.params import parse_scavenge_request

    try:  # the node's own rules, checked before anything is sent
        request = parse_scavenge_request(
            threads=args.threads,
            threshold=args.threshold,
            throttle_percent=args.throttle_percent,
            sync_only=args.sync_only,
        )
    except InvalidInput as exc:
        print(f"evdb scavenge start: {exc}", file=sys.stderr)
        return 2
    params: dict[str, int | str] = {
        "threads": request.threads,
        "threshold": request.threshold,
        "throttlePercent": request.throttle_percent,
        "syncOnly": str(request.sync_only).lower(),
    }
    with _client(args) as c:
        r = c.post("/admin/scavenge", params=params)
        if r.status_code != 200:
            return _fail(r)
        scavenge_id = r.json()["scavengeId"]
        print(scavenge_id)
        if not args.wait:
            return 0
        while c.get("/admin/scavenge/current").json()["scavengeId"] == scavenge_id:
            time.sleep(0.5)
        last = c.get("/admin/scavenge/last").json()
        print(last["scavengeResult"])
        return 0 if last["scavengeResult"] == "Success" else 1


def _scavenge_stop(args: argparse.Namespace) -> int:
    with _client(args) as c:
        r = c.delete(f"/admin/scavenge/{args.scavenge_id}")
        if r.status_code != 200:
            return _fail(r)
        print(f"stopped {r.json()}")
        return 0


def _scavenge_status(args: argparse.Namespace) -> int:
    with _client(args) as c:
        r = c.get("/admin/scavenge/progress")
        if r.status_code != 200:
            return _fail(r)
        print(json.dumps(r.json(), indent=2))
        return 0


def _user(args: argparse.Namespace) -> int:
    verb = args.user_verb
    with _client(args) as c:
        if verb == "list":
            r = c.get("/users")
            if r.status_code != 200:
                return _fail(r)
            for u in r.json()["data"]:
                print(
                    f"{u['loginName']}\t{','.join(u['groups'])}\t{'disabled' if u['disabled'] else 'enabled'}"
                )
            return 0
        if verb == "create":
            groups = [g for g in args.groups.split(",") if g]
            body = {
                "loginName": args.login,
                "fullName": args.full_name,
                "groups": groups,
                "password": args.new_password,
            }
            r = c.post("/users", json=body)
        elif verb == "delete":
            r = c.delete(f"/users/{args.login}")
        elif verb == "reset-password":
            r = c.post(f"/users/{args.login}/command/reset-password", json={"newPassword": args.new_password})
        else:
            r = c.post(f"/users/{args.login}/command/{verb}")
        if r.status_code not in (200, 201):
            return _fail(r)
        print(f"{verb}: {args.login}")
        return 0

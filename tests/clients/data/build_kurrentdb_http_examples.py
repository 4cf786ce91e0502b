"""Builds tests/clients/data/kurrentdb_http_examples.json from KurrentDB's samples/http-api (run once; its three arguments are below)."""

import glob
import json
import os
import re
import subprocess
import sys
from pathlib import Path

MIRROR = sys.argv[1]  # a git directory of KurrentDB (e.g. from the fetch tool)
SAMPLES = sys.argv[2]  # its samples/http-api, extracted (git archive HEAD samples/http-api | tar -x)
ORDER = sys.argv[3]  # lines "page @samples/http-api/x.sh", in the order the pages show them
commit = subprocess.check_output(["git", "--git-dir", MIRROR, "rev-parse", "HEAD"], text=True).strip()
root = SAMPLES
order = []
for line in Path(ORDER).read_text().splitlines():
    doc, ref = line.split()
    ref = ref.replace("@samples/http-api/", "")
    if ref.endswith(".sh"):
        order.append((doc, ref))
seen = {r for _, r in order}
for path in sorted(glob.glob(root + "/**/*.sh", recursive=True)):
    rel = os.path.relpath(path, root)
    if rel not in seen:
        order.append(("(samples only)", rel))
# the run's order: the pages' order, except that the sample data the pages read (add-sample-data.sh) is
# written first and the deletes of newstream come last (the pages after them still read newstream)
order.sort(
    key=lambda item: (
        0 if item[1] == "add-sample-data.sh" else 2 if item[1].startswith("delete-stream/") else 1
    )
)
RESPONSES = {
    "delete-stream/delete-stream.sh": "delete-stream/delete-stream-response.http",
    "delete-stream/get-deleted-stream.sh": "delete-stream/get-deleted-stream-response.http",
}
examples, files = [], {}
for doc, rel in order:
    text = Path(root, rel).read_text()
    m = re.search(r"#region curl\n(.*?)#endregion curl", text, re.S)
    curl = (m.group(1) if m else text).strip()
    r = re.search(r"#region response\n(.*?)#endregion response", text, re.S)
    resp = r.group(1) if r else None
    other = RESPONSES.get(rel, rel[:-3] + ".http")
    if resp is None and os.path.exists(os.path.join(root, other)):
        resp = Path(root, other).read_text()
    statuses = [s for s in re.findall(r"^HTTP/1\.1 (\d{3})", resp or "", re.M) if s != "100"]
    commands = [c.strip() for c in re.split(r"\n\s*\n(?=curl )", curl) if c.strip().startswith("curl")]
    for i, command in enumerate(commands):
        # only the host and port change (the credentials are evdb's defaults too: admin:changeit)
        command = command.replace("127.0.0.1:2113", "{host}").replace("localhost:2113", "{host}")
        # and the credentials: KurrentDB refuses anonymous stream access by default now
        # (AllowAnonymousStreamAccess=false), so examples written without any sign in as admin; those
        # about missing or wrong credentials keep theirs
        if not re.search(r"(-u|--user)\s", command) and rel not in (
            "missing-credentials.sh",
            "incorrect-user.sh",
        ):
            command = command.replace("curl ", 'curl -u "admin:changeit" ', 1)
        for name in re.findall(r'-d\s+"?@([^"\s]+)"?', command):
            for candidate in (
                os.path.join(root, os.path.dirname(rel), name),
                os.path.join(root, name),
                os.path.join(root, "data", name),
                os.path.join(root, "projections", name),
            ):
                if os.path.exists(candidate):
                    files[name] = Path(candidate).read_text()
                    break
            else:
                raise SystemExit(f"{rel}: no {name}")
        for name in re.findall(r'--data-binary\s+"?@([^"\s]+)"?', command):
            for candidate in (os.path.join(root, os.path.dirname(rel), name), os.path.join(root, name)):
                if os.path.exists(candidate):
                    files[name] = Path(candidate).read_text()
                    break
        examples.append(
            {
                "name": rel if len(commands) == 1 else f"{rel} #{i + 1}",
                "page": doc,
                "curl": command,
                "status": int(statuses[-1]) if statuses and len(commands) == 1 else None,
            }
        )
data = {
    "source": f"https://github.com/kurrent-io/KurrentDB/tree/{commit}/samples/http-api",
    "note": "KurrentDB's documented HTTP examples (curl), in the order of the documentation pages that show them; only the host and port are replaced by {host}. status: the documented answer's status (null: the documentation shows none). files: the bodies the examples post (-d @file).",
    "examples": examples,
    "files": files,
}
Path(__file__).with_name("kurrentdb_http_examples.json").write_text(json.dumps(data, indent=1))
print(len(examples), sum(1 for e in examples if e["status"]), len(files))

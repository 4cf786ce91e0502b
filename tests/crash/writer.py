"""A writer process for the crash tests: appends batches forever and reports each acknowledgement.

Usage: python writer.py DB_DIR SEED. Each batch is announced on stdout before it is sent
(``send``) and reported once acknowledged (``ack``), one JSON object a line, flushed at once, so the
parent knows exactly what was acknowledged when it kills this process with SIGKILL.
"""

from __future__ import annotations

import json
import random
import sys
import uuid

from evdb.database import Database
from evdb.streams import NewEvent


def main() -> None:
    directory, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    db = Database.open(
        directory, chunk_size=16 * 1024, existence_filter_capacity=10_000, max_memtable_entries=40
    )
    out = sys.stdout
    batch = 0
    while True:
        stream = f"s-{rng.randrange(6)}"
        size = rng.randrange(1, 6)
        ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(size)]
        events = [NewEvent("E", rng.randbytes(rng.randrange(10, 600)), event_id=uuid.UUID(i)) for i in ids]
        out.write(json.dumps({"send": f"{seed}-{batch}", "stream": stream, "ids": ids}) + "\n")
        out.flush()
        result = db.append(stream, events)
        out.write(json.dumps({"ack": f"{seed}-{batch}", "first": result.first_event_number}) + "\n")
        out.flush()
        batch += 1


if __name__ == "__main__":
    main()

"""``python -m evdb.options --markdown`` prints docs/options.md."""

from __future__ import annotations

import sys

from evdb.options.markdown import main

if __name__ == "__main__":
    sys.exit(main())

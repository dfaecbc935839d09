"""Makes the example's `inferapp` package importable however pytest is started.

Both `pytest example_project` (from the repository root) and `cd example_project && pytest`
load this file first, whatever the rootdir, ini file or `--import-mode`, so putting its
folder on sys.path here is the one place that works for every invocation.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

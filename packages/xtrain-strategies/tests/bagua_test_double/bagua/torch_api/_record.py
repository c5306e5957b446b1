"""TEST DOUBLE helper: appends each call the glue makes to ``$BAGUA_TEST_DOUBLE_LOG.rank<RANK>.json``."""

import json
import os
from typing import Any


def record(call: str, **details: Any) -> None:
    base = os.environ.get("BAGUA_TEST_DOUBLE_LOG")
    if not base:
        return
    path = f"{base}.rank{os.environ.get('RANK', '?')}.json"
    calls = []
    if os.path.exists(path):
        with open(path) as f:
            calls = json.load(f)
    calls.append({"call": call, **details})
    with open(path, "w") as f:
        json.dump(calls, f)

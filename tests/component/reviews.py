"""What tests read of review answers; the reviews themselves are built by attacks.foos."""

from __future__ import annotations

import base64
import json
from typing import Any


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    return json.loads(base64.b64decode(response["patch"]))

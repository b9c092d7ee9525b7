"""Whether this machine can build the product image (root, buildah, mmdebstrap), for the tests that do."""

from __future__ import annotations

import os
import shutil


def cannot_build_images(what: str) -> str | None:
    """Why ``what`` cannot be built here, or None."""
    if os.geteuid() != 0:
        return f"building {what} here needs root (mmdebstrap into a directory, buildah)"
    for tool in ("buildah", "mmdebstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (hack/install-node-deps.sh installs it)"
    return None

"""Writing certificates to a directory: the files' names, each written atomically, private keys
readable by the owner only."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .authority import KeyPair  # cryptography: imported by those that make a pair, not by its readers

# The names of a serving pair and its CA: the data keys of a kubernetes.io/tls Secret, so the files
# a mounted Secret gives, what `foo-operator-certs generate` and the rotator write, and what every
# server reads (serving.lifecycle's --cert-dir, --cert-name, --key-name).
CA_CERT, TLS_CERT, TLS_KEY = "ca.crt", "tls.crt", "tls.key"


class AlreadyExists(FileExistsError):
    pass


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` in one rename, so a watcher never reads half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_serving_files(
    out: Path, ca: KeyPair, serving: KeyPair, *, force: bool = False, cert_name: str = TLS_CERT, key_name: str = TLS_KEY
) -> list[Path]:
    """Write ca.crt, tls.crt and tls.key (0600) into ``out``; refuse to overwrite unless ``force``."""
    targets = [out / CA_CERT, out / cert_name, out / key_name]
    existing = [p for p in targets if p.exists()]
    if existing and not force:
        raise AlreadyExists(f"{existing[0]} already exists (use --force to overwrite)")
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / CA_CERT, ca.cert_pem)
    # Key before certificate: a watcher that sees the new certificate then finds its key.
    write_atomic(out / key_name, serving.key_pem, 0o600)
    write_atomic(out / cert_name, serving.cert_pem)
    return targets


def write_self_signed(directory: Path, host: str = "localhost") -> tuple[Path, Path]:
    """A self-signed pair for ``host`` (``authority.self_signed``) in ``directory``: its certificate
    and key (0600) files."""
    from .authority import self_signed

    pair = self_signed(host)
    cert_file, key_file = directory / TLS_CERT, directory / TLS_KEY
    write_atomic(key_file, pair.key_pem, 0o600)
    write_atomic(cert_file, pair.cert_pem)
    return cert_file, key_file

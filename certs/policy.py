"""How long certificates live and when they are renewed: plain values, no cryptography.

Apart from ``certs.rotation`` so that a webhook started without ``--cert-rotation`` can take the
flags without importing cryptography, a noticeable part of every start.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass


@dataclass(frozen=True)
class RotationPolicy:
    ca_validity: datetime.timedelta = datetime.timedelta(days=3650)
    serving_validity: datetime.timedelta = datetime.timedelta(days=365)
    # Renew once less than this fraction of a certificate's lifetime is left.
    renew_fraction: float = 1 / 3
    # How long each step of a CA change waits for every apiserver and replica to catch up.
    overlap: datetime.timedelta = datetime.timedelta(minutes=5)

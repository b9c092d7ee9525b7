"""Which TLS versions and cipher suites a server accepts, named as Kubernetes components name them.

`--tls-min-version` takes Go's constant names (`VersionTLS12`, `VersionTLS13`) and
`--tls-cipher-suites` takes IANA names, comma-separated — the words kube-apiserver and the
kubelet take. Only the secure part of that vocabulary is allowed: for TLS 1.2 an ECDHE key
exchange with an AEAD cipher (no CBC, no RSA key exchange, no RC4/3DES; Go — and so Kubernetes —
has no DHE at all). TLS 1.3 suites are always on and not configurable, in Go as in OpenSSL.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

MIN_VERSIONS: dict[str, ssl.TLSVersion] = {
    "VersionTLS12": ssl.TLSVersion.TLSv1_2,
    "VersionTLS13": ssl.TLSVersion.TLSv1_3,
}
# Names Kubernetes knows but that this server refuses to be configured with.
INSECURE_MIN_VERSIONS = ("VersionTLS10", "VersionTLS11")

# IANA name -> OpenSSL name, TLS 1.2: ECDHE key exchange, AEAD ciphers. In Go's preference order.
SECURE_TLS12_SUITES: dict[str, str] = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}
# component-base also accepts the pre-RFC-7905 spellings of the ChaCha20 suites.
ALIASES = {
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
}
# Always enabled under TLS 1.3; accepted in the list (as Kubernetes does) and otherwise ignored.
TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
# Every other suite component-base's flag knows: CBC, RSA key exchange, RC4, 3DES.
INSECURE_SUITES = frozenset({
    "TLS_RSA_WITH_AES_128_CBC_SHA", "TLS_RSA_WITH_AES_256_CBC_SHA", "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384", "TLS_RSA_WITH_AES_128_CBC_SHA256", "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA", "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", "TLS_ECDHE_RSA_WITH_RC4_128_SHA", "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
})  # fmt: skip


@dataclass(frozen=True)
class TLSPolicy:
    """The versions and TLS 1.2 suites a server context allows; the default is Kubernetes' secure set."""

    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    tls12_suites: tuple[str, ...] = tuple(SECURE_TLS12_SUITES)

    def apply(self, context: ssl.SSLContext) -> None:
        context.minimum_version = self.min_version
        # set_ciphers governs TLS 1.2 and below only; OpenSSL keeps the TLS 1.3 suites as they are.
        context.set_ciphers(":".join(SECURE_TLS12_SUITES[name] for name in self.tls12_suites))


def parse_tls_policy(min_version: str, cipher_suites: str) -> TLSPolicy:
    """The policy for the two flags' values, or ValueError with one line saying what is wrong."""
    if min_version in INSECURE_MIN_VERSIONS:
        raise ValueError(f"--tls-min-version {min_version} is insecure; use one of {', '.join(MIN_VERSIONS)}")
    if min_version not in MIN_VERSIONS:
        raise ValueError(f"--tls-min-version {min_version!r} is unknown; use one of {', '.join(MIN_VERSIONS)}")
    version = MIN_VERSIONS[min_version]
    names = [name.strip() for name in cipher_suites.split(",") if name.strip()]
    if not names:
        return TLSPolicy(min_version=version)
    chosen: list[str] = []
    for name in names:
        canonical = ALIASES.get(name, name)
        if canonical in INSECURE_SUITES:
            raise ValueError(
                f"--tls-cipher-suites: {name} is insecure (CBC mode or RSA key exchange); "
                f"allowed: {', '.join((*SECURE_TLS12_SUITES, *TLS13_SUITES))}"
            )
        if canonical in TLS13_SUITES:
            continue
        if canonical not in SECURE_TLS12_SUITES:
            raise ValueError(
                f"--tls-cipher-suites: {name!r} is not a cipher suite this server knows; "
                f"allowed: {', '.join((*SECURE_TLS12_SUITES, *TLS13_SUITES))}"
            )
        if canonical not in chosen:
            chosen.append(canonical)
    if not chosen and version < ssl.TLSVersion.TLSv1_3:
        raise ValueError("--tls-cipher-suites names no TLS 1.2 suite; add one, or set --tls-min-version VersionTLS13")
    return TLSPolicy(min_version=version, tls12_suites=tuple(chosen) or tuple(SECURE_TLS12_SUITES))

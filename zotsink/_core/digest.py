"""BLAKE2b, the row digest of collect's de-duplication and verify's duplicate check, from
the module hashlib itself takes it from.

``import hashlib`` also loads OpenSSL's libcrypto for its other algorithms, a start-up cost
every collect or verify would pay though they need BLAKE2b only.
"""

from __future__ import annotations

try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - a Python whose hashlib has it elsewhere
    from hashlib import blake2b

__all__ = ["blake2b"]

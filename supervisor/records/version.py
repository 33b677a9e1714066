"""rlsup's version, in one place (the package metadata, ``rlsup --version`` and the protocol hello read it)."""

from __future__ import annotations

VERSION = "0.3.0"

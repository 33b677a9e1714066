"""The ``rlsup`` command line (a front end: it imports the core, never the other way round)."""

from __future__ import annotations

from .main import build_parser, main

__all__ = ["build_parser", "main"]

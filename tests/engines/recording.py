"""Record HTTP exchanges with a live engine as contract fixtures (tests/contract/fixtures/).

Each exchange keeps what rlsup's code reads: method, path, request body, status, content-type and body
(JSON parsed where it is JSON). Values that change from run to run (ids, timestamps, temp paths, generated
text) are normalised by :func:`normalise` so a fixture compares across runs.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[1] / "contract" / "fixtures"


def exchange(base: str, method: str, path: str, body: dict | None = None, timeout: float = 300.0) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, headers, raw = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        status, headers, raw = exc.code, exc.headers, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
        return {"method": method, "path": path, "request": body, "status": None,
                "error": type(getattr(exc, "reason", exc)).__name__}
    text = raw.decode("utf-8", "replace")
    try:
        parsed: Any = json.loads(text) if text.strip() else None
        kind = "json" if text.strip() else "empty"
    except ValueError:
        parsed, kind = text[:500], "text"
    return {"method": method, "path": path, "request": body, "status": status,
            "content_type": (headers.get("content-type") or "").split(";")[0] or None, "body_kind": kind,
            "body": parsed}


def normalise(x: Any, paths: dict[str, str]) -> Any:
    """Replace run-specific values: temp paths by their placeholder, ids and times by a fixed token."""
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            if k in ("id", "created", "system_fingerprint") and isinstance(v, (str, int)):
                out[k] = f"<{k}>"
            else:
                out[k] = normalise(v, paths)
        return out
    if isinstance(x, list):
        return [normalise(v, paths) for v in x]
    if isinstance(x, str):
        for real, name in sorted(paths.items(), key=lambda kv: -len(kv[0])):
            x = x.replace(real, name)
        return re.sub(r"(cmpl|modelperm|chatcmpl)-[0-9a-f]{8,}", r"\1-<id>", x)
    return x


def save(name: str, engine: str, version: str, exchanges: list[dict], paths: dict[str, str], note: str,
         **extra: Any) -> None:
    """``extra``: more facts kept with the exchanges (normalised too), e.g. the server's log lines and exit."""
    FIXTURES.mkdir(parents=True, exist_ok=True)
    (FIXTURES / f"{name}.json").write_text(json.dumps(
        {"engine": engine, "version": version, "note": note, "exchanges": normalise(exchanges, paths),
         **normalise(extra, paths)}, indent=1, ensure_ascii=False) + "\n")


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())

"""Telling an inference server about new weights, and knowing whether it loaded them.

    python -m rlsup.trainer.sync version URL              # what engine and version answers at URL
    python -m rlsup.trainer.sync close-communicator URL   # TRL vllm-serve: drop a dead trainer's NCCL group

:class:`WeightSync` is what the trainer calls after publishing ``OUT/weights/step_N``. It detects the
engine's version once (``GET /version``; SGLang also ``/get_server_info``) and uses what that version
supports, never raising for a reply it did not expect (an empty 200 body, ``{"success": false}`` while
busy, a 404 for a route the version lacks, a refused connection). It records what the server actually
loaded in ``OUT/weights/latest.json`` -- written only when the server did load the weights -- and when
the server stays behind the published weights for more than ``stale_after`` steps it prints ONE line

    rlsup-flag: weights_stale: <message>

to stdout, which the supervisor turns into a ``weights_stale`` flag (printed again only after the server
caught up and fell behind anew).

What each engine answers (the contract servers in tests/contract/ answer exactly so, citing the source):

* **SGLang 0.4.6-0.5.x** ``POST /update_weights_from_disk {"model_path"}``: 200 ``{"success": true,
  "message", "num_paused_requests"}`` or 400 with ``"success": false`` (python/sglang/srt/entrypoints/
  http_server.py update_weights_from_disk). It waits for running requests (model_update_lock writer
  lock, tokenizer_manager.update_weights_from_disk), and on success sets ``server_args.model_path``,
  which ``GET /get_model_info`` reports: the check of what was loaded.
* **vLLM < 0.16** (0.10.2-0.15.x, ``VLLM_SERVER_DEV_MODE=1``): ``Worker.reload_weights()`` takes no
  argument and re-reads ``model_config.model`` (vllm/v1/worker/gpu_worker.py); ``Worker.update_config``
  accepts ``{"model_config": {...}}`` overrides (gpu_model_runner.py update_config: allowed configs
  load_config, model_config). So: ``/collective_rpc update_config`` pointing ``model`` at the published
  dir, then ``/collective_rpc reload_weights``, then ``/reset_prefix_cache``.
* **vLLM 0.16-0.25**: ``reload_weights(weights_path=...)``; ``/reset_prefix_cache`` answers 200 with an
  EMPTY body (vllm/entrypoints/serve/cache/api_router.py: ``return Response(status_code=200)``).
* **vLLM >= 0.26**: ``/reset_prefix_cache`` answers ``{"success": bool}``, false while blocks are held by
  running requests (vllm/frontend/entrypoints/serve/dev/cache/api_router.py: "callers may retry").
* **vLLM with the RL router** (vllm/entrypoints/rl/online/api_router.py; present when ``GET /is_paused``
  answers): ``POST /pause?mode=wait`` (in-flight requests finish, caches cleared), reload, ``POST
  /resume`` -- no prefix-cache race at all.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlsup.trainer import steplog

FLAG_PREFIX = "rlsup-flag:"


def flag_line(kind: str, message: str) -> str:
    """The one-line form the supervisor reads: ``rlsup-flag: TYPE: MESSAGE`` (no newlines inside)."""
    return f"{FLAG_PREFIX} {kind}: {' '.join(message.split())}"


# ---------------------------------------------------------------------------------------------- HTTP


@dataclass(frozen=True)
class Reply:
    """One HTTP exchange. ``status`` None: no answer at all (refused, timed out); ``data`` is the parsed
    JSON body, or None for an empty or non-JSON body (``text`` keeps it)."""

    status: int | None
    data: Any
    text: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def request(method: str, url: str, body: dict | None = None, timeout: float = 600.0) -> Reply:
    """``method`` ``url`` with a JSON body; never raises for anything the server or network does."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status = exc.code
        try:
            raw = exc.read()
        except OSError:
            raw = b""
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError) as exc:
        return Reply(None, None, "", f"{url}: {getattr(exc, 'reason', exc)}")
    text = raw.decode("utf-8", "replace")
    try:
        parsed = json.loads(text) if text.strip() else None
    except ValueError:
        parsed = None
    return Reply(status, parsed, text)


def _why(r: Reply) -> str:
    if r.status is None:
        return r.error or "no answer"
    detail = r.data if r.data is not None else r.text.strip()[:200]
    return f"HTTP {r.status}" + (f": {detail}" if detail not in (None, "") else " (empty body)")


# ------------------------------------------------------------------------------------------- engines


@dataclass(frozen=True)
class Engine:
    """What answers at a base URL: ``kind`` sglang | vllm | rlsup | unknown, and its version."""

    kind: str
    version: tuple[int, ...] | None
    raw: str | None
    rl_router: bool = False  # vLLM's /pause, /resume, /is_paused are there

    def __str__(self) -> str:
        return f"{self.kind} {self.raw or '(version unknown)'}" + (" with RL router" if self.rl_router else "")


def parse_version(text: str | None) -> tuple[int, ...] | None:
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def detect(base: str, hint: str = "auto", timeout: float = 10.0) -> Engine:
    """The engine at ``base``. ``hint`` (the trainer's --weight-sync) names the API family when the
    server cannot tell: sglang and vllm both answer ``GET /version`` with ``{"version": "X.Y.Z"}``."""
    base = base.rstrip("/")
    v = request("GET", f"{base}/version", timeout=timeout)
    raw = v.data.get("version") if v.ok and isinstance(v.data, dict) else None
    if isinstance(raw, str) and raw.startswith("rlsup"):
        return Engine("rlsup", parse_version(raw.removeprefix("rlsup-")), raw)
    kind = hint if hint in ("sglang", "vllm") else "unknown"
    if kind != "vllm":
        info = request("GET", f"{base}/get_server_info", timeout=timeout)
        if info.ok and isinstance(info.data, dict):
            kind = "sglang"
            raw = raw or info.data.get("version")
    if kind == "vllm" or (kind == "unknown" and raw):
        kind = "vllm"
    router = False
    if kind == "vllm":
        p = request("GET", f"{base}/is_paused", timeout=timeout)
        router = p.ok and isinstance(p.data, dict) and "is_paused" in p.data
    return Engine(kind, parse_version(raw if isinstance(raw, str) else None),
                  raw if isinstance(raw, str) else None, router)


# ---------------------------------------------------------------------------------------- the client


@dataclass
class SyncResult:
    """One publish: did the server load it (``loaded``), what it reports serving (``server_model``),
    and the exchange in words (``detail``) for the log."""

    loaded: bool
    detail: str
    server_model: str | None = None
    steps: list[str] = field(default_factory=list)


class WeightSync:
    """Push published weights to a server and track what it serves (see the module docstring)."""

    def __init__(self, server: str | None, mode: str, weights_dir: Path, *, stale_after: int = 3,
                 tries: int = 3, busy_tries: int = 5, retry_s: float = 0.5, timeout: float = 600.0,
                 out: Any = None) -> None:
        self.base = server.rstrip("/") if server else None
        self.mode = mode
        self.weights_dir = Path(weights_dir)
        self.stale_after = stale_after
        self.tries, self.busy_tries, self.retry_s, self.timeout = tries, busy_tries, retry_s, timeout
        self.engine: Engine | None = None
        self.loaded_step: int | None = None
        self.published_step: int | None = None
        self.flagged = False
        self._warned: set[str] = set()
        self._out = out or sys.stdout

    # -- public

    def publish(self, step: int, path: Path) -> SyncResult:
        """Tell the server about ``path`` (weights of ``step``); write latest.json only if it loaded."""
        from rlsup.trainer import weights as weights_mod

        self.published_step = step
        if not self.base or self.mode == "none":
            result = SyncResult(False, "no weight sync (--weight-sync none or no --server)")
        else:
            if self.engine is None or self.engine.kind == "unknown":
                self.engine = detect(self.base, self.mode)
                steplog.log(f"Inference server at {self.base}: {self.engine}")
            result = self._push(path)
        if result.loaded:
            self.loaded_step = step
            weights_mod.mark_latest(self.weights_dir, step, path, engine=str(self.engine),
                                    server_model=result.server_model)
            if self.flagged:
                steplog.log(f"Inference server caught up: serving weights step {step}")
            self.flagged = False
        elif self.base and self.mode != "none":
            self._warn_once(result.detail)
        self._check_stale(step)
        return result

    # -- per engine

    def _push(self, path: Path) -> SyncResult:
        assert self.engine is not None and self.base is not None
        kind = self.engine.kind if self.engine.kind != "unknown" else self.mode
        for attempt in range(1, self.tries + 1):
            result = self._push_vllm(path) if kind == "vllm" else self._push_sglang(path)
            if result.loaded or result.detail.startswith("unsupported"):
                return result
            if attempt < self.tries:
                time.sleep(self.retry_s * attempt)
        return result

    def _push_sglang(self, path: Path) -> SyncResult:
        """SGLang (and rlsup's server): /update_weights_from_disk, then /get_model_info says what it serves."""
        r = request("POST", f"{self.base}/update_weights_from_disk", {"model_path": str(path)}, self.timeout)
        if r.status == 404:
            return SyncResult(False, f"unsupported: {self.base} has no /update_weights_from_disk ({_why(r)})")
        if not (r.ok and isinstance(r.data, dict) and r.data.get("success") is True):
            return SyncResult(False, f"/update_weights_from_disk did not load {path}: {_why(r)}")
        info = request("GET", f"{self.base}/get_model_info", timeout=30.0)
        served = info.data.get("model_path") if info.ok and isinstance(info.data, dict) else None
        if served is not None and Path(str(served)) != Path(path):
            return SyncResult(False, f"/update_weights_from_disk answered success but the server reports "
                                     f"model_path {served}, not {path}", str(served))
        return SyncResult(True, str(r.data.get("message") or "loaded"), str(served) if served else str(path))

    def _push_vllm(self, path: Path) -> SyncResult:
        assert self.engine is not None
        v = self.engine.version
        steps: list[str] = []
        paused = False
        if self.engine.rl_router:
            p = request("POST", f"{self.base}/pause?mode=wait&clear_cache=true", timeout=self.timeout)
            if not p.ok:
                return SyncResult(False, f"/pause failed: {_why(p)}")
            paused = True
            steps.append("paused (in-flight requests finished)")
        try:
            if v is not None and v < (0, 16):
                calls = [("update_config", {"overrides": {"model_config": {"model": str(path)}}}),
                         ("reload_weights", {})]
            else:
                calls = [("reload_weights", {"weights_path": str(path)})]
            for method, kwargs in calls:
                r = request("POST", f"{self.base}/collective_rpc", {"method": method, "kwargs": kwargs},
                            self.timeout)
                if r.status == 404:
                    return SyncResult(False, "unsupported: /collective_rpc is missing: start vLLM with "
                                             "VLLM_SERVER_DEV_MODE=1", steps=steps)
                if not r.ok:
                    return SyncResult(False, f"/collective_rpc {method} failed: {_why(r)}", steps=steps)
                steps.append(f"{method}: {_why(r)}")
            if not paused:  # a paused server had its caches cleared by /pause
                steps.append(self._reset_prefix_cache())
        finally:
            if paused:
                r = request("POST", f"{self.base}/resume", timeout=60.0)
                steps.append("resumed" if r.ok else f"/resume failed: {_why(r)}")
        return SyncResult(True, "; ".join(steps), str(path), steps)

    def _reset_prefix_cache(self) -> str:
        """200 with an empty body (vLLM 0.16-0.25) or ``{"success": true}`` (0.26+) is done; ``{"success":
        false}`` means blocks are still held by running requests: retried, then reported once."""
        for attempt in range(1, self.busy_tries + 1):
            r = request("POST", f"{self.base}/reset_prefix_cache", timeout=60.0)
            if r.ok and not (isinstance(r.data, dict) and r.data.get("success") is False):
                return "prefix cache reset"
            if not r.ok:
                return f"prefix cache not reset ({_why(r)})"
            time.sleep(self.retry_s * attempt)
        self._warn_once("vLLM kept answering {\"success\": false} to /reset_prefix_cache (requests running): "
                        "prefixes cached before the reload may be reused until they are evicted")
        return "prefix cache busy (not reset)"

    # -- staleness

    def _check_stale(self, step: int) -> None:
        behind = step - (self.loaded_step if self.loaded_step is not None else -1)
        if self.mode == "none" or not self.base or behind <= self.stale_after or self.flagged:
            return
        self.flagged = True
        served = f"weights step {self.loaded_step}" if self.loaded_step is not None else "no weights published by this run"
        print(flag_line("weights_stale",
                        f"the inference server ({self.engine or self.base}) still serves {served} while step "
                        f"{step} is published ({behind} steps behind, more than {self.stale_after}); rollouts "
                        "are off-policy: check the server's log, or restart it to load the newest weights"),
              file=self._out, flush=True)

    def _warn_once(self, text: str) -> None:
        key = re.sub(r"\d+", "N", text)[:120]
        if key not in self._warned:
            self._warned.add(key)
            steplog.warn(f"inference server did not load the new weights: {text}")


# ------------------------------------------------------------------------------------------------ CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlsup.trainer.sync")
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("version", help="print the engine and version answering at URL")
    v.add_argument("url")
    v.add_argument("--hint", default="auto", choices=("auto", "sglang", "vllm"))
    c = sub.add_parser("close-communicator",
                       help="TRL vllm-serve: POST /close_communicator/ so a restarted trainer can init again")
    c.add_argument("url")
    c.add_argument("--timeout", type=float, default=10.0)
    args = ap.parse_args(argv)
    if args.cmd == "version":
        print(detect(args.url, args.hint))
        return 0
    # TRL's trainer registers close_communicator with atexit (trl/generation/vllm_client.py
    # VLLMClient.init_communicator); a trainer killed by a signal never runs it, and the server's
    # WeightSyncWorkerExtension.init_communicator then raises "Weight update group already initialized.
    # Call close_communicator first." on the next start (trl/scripts/vllm_serve.py). Closing is a no-op
    # when no group is open, so running this before every trainer start is safe.
    r = request("POST", f"{args.url.rstrip('/')}/close_communicator/", {}, args.timeout)
    print(f"close_communicator: {_why(r)}")
    return 0  # the server may not be up yet on a first start: the trainer's own start reports that


if __name__ == "__main__":
    raise SystemExit(main())

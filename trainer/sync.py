"""Telling an inference server about new weights, and knowing whether it loaded them.

    python -m rlsup.trainer.sync version URL              # what engine and version answers at URL
    python -m rlsup.trainer.sync close-communicator URL   # TRL vllm-serve: drop a dead trainer's NCCL group

:class:`WeightSync` is what the trainer calls after publishing ``OUT/weights/step_N``. It detects the
engine's version once (vLLM ``GET /version``; SGLang ``GET /server_info`` or ``/get_server_info``) and uses what that version
supports, never raising for a reply it did not expect (an empty 200 body, ``{"success": false}`` while
busy, a 404 for a route the version lacks, a refused connection). It records what the server actually
loaded in ``OUT/weights/latest.json`` -- written only when the server did load the weights -- and when
the server stays behind the published weights for more than ``stale_after`` steps it prints ONE line

    rlsup-flag: weights_stale: <message>

to stdout, which the supervisor turns into a ``weights_stale`` flag (printed again only after the server
caught up and fell behind anew).

A server that answered before and is now down when weights are pushed (connection refused), or that goes away
during the push of a checkpoint whose tensor shapes match what it served (a user's ``rlsup restart`` mid-reload),
is waited for (``restart_timeout``: rlsup restarts it) and the same step pushed again: the weights are not blamed.
A reload that breaks the engine (vLLM's failed ``reload_weights`` on a server that stays up; SGLang dying on a
checkpoint whose shapes could not be checked) marks the dir ``REJECTED`` and has the server restarted
(``restart_server``). Shapes are checked against what the server serves before anything is sent (see
:meth:`WeightSync._check_shapes`). A SIGTERM during a push is held until the push is over
(:mod:`rlsup.trainer.stopping`). Every reload is written in the reload record (:mod:`rlsup.trainer.reloads`) and
tags the engine's weight version with the step where the engine has one.

What each engine answers, read in the released wheels (the files inside ``vllm-X.whl`` /
``sglang-X.whl`` on PyPI are the tagged source; checked 2026-11-23). The contract servers in
tests/contract/servers.py answer exactly so:

* **SGLang 0.4.6-0.5.23** ``POST /update_weights_from_disk {"model_path"}``: 200 ``{"success": true,
  "message", "num_paused_requests"}`` or 400 with ``"success": false`` (python/sglang/srt/entrypoints/
  http_server.py update_weights_from_disk). It waits for running requests (tokenizer_manager.py
  update_weights_from_disk: ``model_update_lock.writer_lock``) and on success sets the manager's
  ``model_path`` (0.4.6/0.5.2 _wait_for_model_update_from_disk; 0.5.23 _update_model_path_info), which
  ``GET /model_info`` (0.5.6+) and the deprecated ``GET /get_model_info`` (all; from 0.5.6 it logs a
  deprecation warning on every call) report: the check of what was loaded. SGLang has NO ``/version``
  route in any of these versions (404): its version is ``"version"`` in ``GET /server_info`` (0.5.6+)
  or ``GET /get_server_info`` (all; deprecated from 0.5.6).
* **vLLM** (dev routes need ``VLLM_SERVER_DEV_MODE=1``; ``GET /version`` -> ``{"version"}`` always):

  - ``Worker.reload_weights`` (vllm/v1/worker/gpu_worker.py) takes no argument in 0.10.2-0.15.1 and
    re-reads ``model_config.model`` (gpu_model_runner.py GPUModelRunner.reload_weights(self));
    ``Worker.update_config(overrides)`` accepts ``{"model_config": {...}}`` (GPUModelRunner.update_config:
    allowed load_config, model_config; vllm/config/utils.py update_config -> dataclasses.replace). So:
    ``/collective_rpc update_config`` pointing ``model`` at the published dir, then ``reload_weights``.
  - From **0.16.0** ``Worker.reload_weights(self, *args, **kwargs)`` forwards to
    ``GPUModelRunner.reload_weights(weights_iterator=None, weights_path=None, is_checkpoint_format=True)``,
    which sets ``model_config.model = weights_path`` and reloads (same in 0.25.1, 0.26.0, 0.33.0, also
    vllm/v1/worker/gpu/model_runner.py, the V2 runner).
  - ``POST /reset_prefix_cache`` answers ``Response(status_code=200)``, an EMPTY body, in 0.10.2-0.25.1
    (0.10.2/0.11.0 vllm/entrypoints/openai/api_server.py; 0.14.1-0.16.0 vllm/entrypoints/serve/cache/
    api_router.py; 0.25.1 vllm/entrypoints/serve/dev/cache/api_router.py), and from **0.26.0**
    ``JSONResponse({"success": bool})`` (serve/dev/cache/api_router.py: "fails (success=false) while blocks
    are still held, e.g. by running requests ... callers may retry").
  - ``POST /pause``, ``POST /resume``, ``GET /is_paused`` exist from **0.12.0**. 0.12.0-0.15.1 (0.12.0
    openai/api_server.py, 0.14.1/0.15.1 serve/rlhf/api_router.py; attached WITHOUT dev mode) take
    ``wait_for_inflight_requests`` (default false: in-flight requests are ABORTED) and have no ``mode``; from
    0.16.0 (serve/rlhf, then serve/dev/rlhf, 0.33.0 vllm/entrypoints/rl/online/api_router.py; dev mode only)
    ``mode=abort|wait|keep`` (default abort), ``wait_for_inflight_requests`` deprecated and gone by 0.33.0.
    ``clear_cache`` (default true) resets the prefix cache once drained (AsyncLLM.pause_generation).
    The trainer pauses with the version's own "wait" spelling, reloads, resumes; where ``/pause`` fails
    (e.g. 0.16.0 with ``--api-server-count > 1``: NotImplementedError, HTTP 500) it reloads without
    pausing and resets the prefix cache itself, retrying ``{"success": false}``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsup.trainer import reloads, steplog, stopping
from rlsup.trainer import weights as weights_mod


def flag(out: Any, kind: str, message: str) -> None:
    """Print to ``out`` the line the supervisor reads: ``rlsup-flag: TYPE: MESSAGE`` (no newlines inside)."""
    print(f"rlsup-flag: {kind}: {' '.join(message.split())}", file=out, flush=True)


# ---------------------------------------------------------------------------------------------- HTTP


@dataclass(frozen=True)
class Reply:
    """One HTTP exchange. ``status`` None: no answer at all (refused, timed out); ``data`` is the parsed
    JSON body, or None for an empty or non-JSON body (``text`` keeps it)."""

    status: int | None
    data: Any
    text: str
    error: str | None = None
    # Nothing listened (connection refused): the server was down before the request, which therefore did
    # nothing. A connection that dropped mid-request (reset, closed without a reply) is not "refused".
    refused: bool = False

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
        except (OSError, http.client.HTTPException):
            raw = b""
    # URLError is an OSError, http.client.HTTPException is not: a server that dies mid-reply raises IncompleteRead
    # (a body shorter than its Content-Length) or RemoteDisconnected/BadStatusLine from resp.read() or urlopen.
    except (OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(exc, http.client.HTTPException):
            reason = f"the reply broke off ({type(exc).__name__}: {exc})"
        return Reply(None, None, "", f"{url}: {reason}", refused=isinstance(reason, ConnectionRefusedError))
    text = raw.decode("utf-8", "replace")
    try:
        parsed = json.loads(text) if text.strip() else None
    except ValueError:
        parsed = None
    return Reply(status, parsed, text)


def _engine_dead(r: Reply) -> bool:
    """vLLM's reply when its engine core is dead or shutting down (EngineDeadError: "EngineCore encountered an
    issue"), as opposed to a reload that failed in a live worker ("Worker failed with error ...")."""
    return "EngineCore encountered" in r.text or "EngineDeadError" in r.text


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
    """``(major, minor[, patch])``, or None when the text names no release. A source checkout built without
    its git tags reports setuptools-scm's fallback ``0.1.devN+g<sha>`` (vLLM's ``vllm/_version.py`` from
    ``setup.py`` ``get_vllm_version``): that is no release 0.1 but an unknown recent commit, so None (the newest
    routes are used), never "older than 0.16"."""
    raw = (text or "").strip()
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", raw)
    if not m:
        return None
    version = tuple(int(g) for g in m.groups() if g is not None)
    if version[:2] == (0, 1) and re.match(r"v?0\.1(?:\.0)?\.?dev", raw):
        return None
    return version


def _sglang_info(base: str, name: str, version: tuple[int, ...] | None, timeout: float) -> Reply:
    """SGLang's ``/<name>`` (0.5.6+) or, before it existed, the deprecated ``/get_<name>``: the old
    route still answers in 0.5.23 but logs a deprecation warning on every call (http_server.py)."""
    if version is None or version >= (0, 5, 6):
        r = request("GET", f"{base}/{name}", timeout=timeout)
        if r.status != 404:
            return r
    return request("GET", f"{base}/get_{name}", timeout=timeout)


def detect(base: str, hint: str = "auto", timeout: float = 10.0) -> Engine:
    """The engine at ``base`` (how each tells its version: the module docstring). ``hint`` (the trainer's
    --weight-sync) names the family when the server cannot tell."""
    base = base.rstrip("/")
    v = request("GET", f"{base}/version", timeout=timeout)
    raw = v.data.get("version") if v.ok and isinstance(v.data, dict) else None
    if isinstance(raw, str) and raw.startswith("rlsup"):
        return Engine("rlsup", parse_version(raw.removeprefix("rlsup-")), raw)
    kind = hint if hint in ("sglang", "vllm") else "unknown"
    if isinstance(raw, str) or (kind == "unknown" and raw):
        # Only vLLM answers GET /version (SGLang 0.4.6-0.5.23: 404). vLLM's dev mode ALSO serves
        # GET /server_info (0.32.0 vllm/entrypoints/serve/dev/server_info/api_router.py), so asking that
        # route first would take a vLLM for an SGLang (and a wrong --weight-sync hint would stick).
        kind = "vllm"
    if raw is None and v.status is not None:
        # No /version: SGLang (whatever the hint says: a wrong --weight-sync must not send vLLM's routes to it)
        info = _sglang_info(base, "server_info", None, timeout)
        if info.ok and isinstance(info.data, dict):
            kind = "sglang"
            got = info.data.get("version")
            raw = got if isinstance(got, str) else raw
    router = False
    if kind == "vllm":
        p = request("GET", f"{base}/is_paused", timeout=timeout)
        router = p.ok and isinstance(p.data, dict) and "is_paused" in p.data
    return Engine(kind, parse_version(raw if isinstance(raw, str) else None),
                  raw if isinstance(raw, str) else None, router)


def pause_query(version: tuple[int, ...] | None) -> str:
    """The query string of vLLM's ``POST /pause`` that lets in-flight requests finish (never abort them: each
    version's spelling, see the module docstring) and clears the prefix cache. Unknown version: both
    spellings, which every version reads as "wait" (unknown query parameters are ignored)."""
    if version is None:
        return "mode=wait&wait_for_inflight_requests=true&clear_cache=true"
    if version < (0, 16):
        return "wait_for_inflight_requests=true&clear_cache=true"
    return "mode=wait&clear_cache=true"


# ---------------------------------------------------------------------------------------- the client


@dataclass
class SyncResult:
    """One publish: did the server load it (``loaded``), what it reports serving (``server_model``),
    and the exchange in words (``detail``) for the log."""

    loaded: bool
    detail: str
    server_model: str | None = None
    broken: bool = False  # the engine may serve wrong weights now: it must not be used until restarted
    down: bool = False  # nothing answered (connection refused): the server is down, the weights are not to blame


def _vllm_reload_calls(version: tuple[int, ...] | None, path: Path) -> list[tuple[str, dict[str, Any]]]:
    """The ``/collective_rpc`` calls that reload ``path`` into a vLLM of ``version``: before 0.16 the
    model path is set first, then reloaded; from 0.16 ``reload_weights`` takes the path."""
    if version is not None and version < (0, 16):
        return [("update_config", {"overrides": {"model_config": {"model": str(path)}}}), ("reload_weights", {})]
    return [("reload_weights", {"weights_path": str(path)})]


_FINISH_EXCHANGE = "finishing the exchange with the inference server so it is not left paused"


class WeightSync:
    """Push published weights to a server and track what it serves (see the module docstring)."""

    def __init__(self, server: str | None, mode: str, weights_dir: Path, *, stale_after: int = 3,
                 tries: int = 3, busy_tries: int = 5, retry_s: float = 0.5, timeout: float = 600.0,
                 out: Any = None, restart_server: Callable[[], tuple[bool, str]] | None = None,
                 restart_timeout: float = 1800.0) -> None:
        self.base = server.rstrip("/") if server else None
        self.mode = mode
        self.weights_dir = Path(weights_dir)
        self.stale_after = stale_after
        self.tries, self.busy_tries, self.retry_s, self.timeout = tries, busy_tries, retry_s, timeout
        self.engine: Engine | None = None
        self.loaded_step: int | None = None
        self.flagged = False
        self._warned: set[str] = set()
        self._rpc_missing = False  # vLLM answered 404 to /collective_rpc: no dev mode (yet)
        # A push got a reply once, or the server told its version: a refused push later means it went down (died,
        # or is being restarted), so it is waited for. One never seen up (the trainer started first) is not.
        self._answered = False
        self._verified: Path | None = None  # the dir being pushed has the tensor shapes the server served
        self._version_api = True  # vLLM: /update_weight_version is there (0.32.0 has it; a 404 says it is not)
        self._record = reloads.Recorder(self.weights_dir)
        self._out = out or sys.stdout
        # Asks the supervisor to restart the server (``rlsup restart NAME``, see :func:`rlsup_restart`);
        # returns whether it was accepted and what happened in words. None: a broken server is left paused and flagged.
        self.restart_server = restart_server
        self.restart_timeout = restart_timeout

    # -- public

    def publish(self, step: int, path: Path) -> SyncResult:
        """Tell the server about ``path`` (weights of ``step``); write latest.json only if it loaded. A SIGTERM
        that arrives while the server is being paused or reloaded is held until the exchange is over (see
        :mod:`rlsup.trainer.stopping`): the trainer then exits with the server running, not paused."""
        if not self.base or self.mode == "none":
            result = SyncResult(False, "no weight sync (--weight-sync none or no --server)")
        else:
            self._detect()
            t0 = time.monotonic()
            result = self._check_shapes(path) or self._push_recorded(step, path)
            if result.loaded:  # the trainer's log says when each step reached the server, and how long it took
                steplog.log(f"Inference server loaded weights step {step} ({path}) in {time.monotonic() - t0:.1f}s")
                self._mark_loaded(step, path, result)
            else:
                self._warn_once(result.detail)
        self._check_stale(step)
        stopping.exit_if_stopped()
        return result

    def _detect(self) -> None:
        if self.engine is None or self.engine.kind == "unknown":
            self.engine = detect(str(self.base), self.mode)
            steplog.log(f"Inference server at {self.base}: {self.engine}")
            if self.engine.kind in ("sglang", "vllm") and self.mode != self.engine.kind:
                steplog.warn(f"--weight-sync {self.mode} but the server at {self.base} is {self.engine}: "
                             f"using {self.engine.kind}'s reload")

    def _push_recorded(self, step: int, path: Path) -> SyncResult:
        """The push, bracketed in the reload record (:mod:`rlsup.trainer.reloads`), then what a failure calls
        for: wait for a server that went away, restart one the reload broke."""
        self._record.begin(step)
        result: SyncResult | None = None
        try:
            with stopping.held("a weight reload", _FINISH_EXCHANGE):
                result = self._push(path, step)
            seen_up = self._answered or (self.engine is not None and self.engine.raw is not None)
            if result.down and seen_up and not stopping.stopping():  # it died or is being restarted
                result = self._push_when_back(step, path, result)
            self._answered = self._answered or not result.down
            if result.broken:
                self._recover(path, result)
            return result
        finally:
            self._record.end(step if result is not None and result.loaded else None)

    def _mark_loaded(self, step: int, path: Path, result: SyncResult) -> None:
        """latest.json: what the server serves now, with its tensor shapes (what the next publish is checked
        against, even once this dir is pruned)."""
        self.loaded_step = step
        weights_mod.mark_latest(self.weights_dir, step, path, engine=str(self.engine),
                                server_model=result.server_model, shapes=weights_mod.tensor_shapes(path))
        if self.flagged:
            steplog.log(f"Inference server caught up: serving weights step {step}")
        self.flagged = False

    # -- per engine

    def _push(self, path: Path, step: int) -> SyncResult:
        assert self.engine is not None and self.base is not None
        kind = self.engine.kind if self.engine.kind != "unknown" else self.mode
        for attempt in range(1, self.tries + 1):
            result = self._push_vllm(path, step) if kind == "vllm" else self._push_sglang(path, step)
            if result.loaded or result.broken or result.down or result.detail.startswith("unsupported"):
                return result
            if attempt < self.tries and not stopping.stopping():
                time.sleep(self.retry_s * attempt)
        return result

    def _push_sglang(self, path: Path, step: int) -> SyncResult:
        """SGLang (and rlsup's server): /update_weights_from_disk, then /model_info says what it serves.
        ``weight_version`` tags the step, which SGLang 0.5.23 returns with every completion
        (``metadata.weight_versions``); older versions ignore the field."""
        self._record.reloading(paused=True)
        body = {"model_path": str(path), "weight_version": str(step)}
        r = request("POST", f"{self.base}/update_weights_from_disk", body, self.timeout)
        if r.refused:
            return SyncResult(False, f"/update_weights_from_disk: the server is down ({_why(r)})", down=True)
        if r.status is None and self.engine is not None and self.engine.kind != "unknown":  # it answered before
            # SGLang 0.5.23 dies on a checkpoint it fails to load: its rollback reloads the NEW path again
            # (model_executor/model_runner_components/weight_updater.py WeightUpdater.update_weights_from_disk sets
            # model_config.model_path before loading; the except branch rebuilds the iterator from it), the
            # second failure escapes, the scheduler exits (scheduler.py "Scheduler hit an exception", SIGQUIT to
            # the launcher, which SIGKILLs its tree): the connection drops with no reply. Its restart must not load
            # this dir again -- unless the dir's tensors match what the server served, in which case it died of
            # something else during the reload (killed, OOM, a user's restart) and the weights are fine.
            return self._went_away("/update_weights_from_disk", path, r)
        if r.status == 404:
            return SyncResult(False, f"unsupported: {self.base} has no /update_weights_from_disk ({_why(r)})")
        if not (r.ok and isinstance(r.data, dict) and r.data.get("success") is True):
            return SyncResult(False, f"/update_weights_from_disk did not load {path}: {_why(r)}")
        served = self._sglang_model_path()
        if served is not None and Path(str(served)) != Path(path):
            return SyncResult(False, f"/update_weights_from_disk answered success but the server reports "
                                     f"model_path {served}, not {path}", str(served))
        return SyncResult(True, str(r.data.get("message") or "loaded"), str(served) if served else str(path))

    def _went_away(self, what: str, path: Path, r: Reply) -> SyncResult:
        """A reload got no reply (or failed) and the server is gone: ``down`` (wait for it, push again) when the
        checkpoint's tensor shapes match what it served, so the weights are not to blame; else ``broken``."""
        if self._verified == path:
            # the status alone, not the engine's body: "EngineCore encountered an issue" in the trainer's own log
            # would read as the trainer's engine dying (diagnosis of its exit)
            said = r.error if r.status is None else f"HTTP {r.status}"
            return SyncResult(False, f"{what} {path}: no reply, the server went away during the reload ({said}); "
                                     "the checkpoint's tensor shapes match what it served, so it is not blamed",
                              down=True)
        return SyncResult(False, f"{what} {path}: no reply, the server went away ({_why(r)})", broken=True)

    def _push_vllm(self, path: Path, step: int) -> SyncResult:
        """``/pause`` (letting running requests finish), the reload, the version tag, ``/resume``. ``/resume`` is
        sent whenever ``/pause`` was, even if the trainer is stopped half-way (SIGTERM inside the pause's drain),
        unless the reload broke the engine: a half-loaded engine must serve nothing until it is restarted."""
        assert self.engine is not None
        steps: list[str] = []
        paused = asked = False
        broken: SyncResult | None = None
        try:
            # 0.12.0-0.15.1 have /pause without dev mode: do not drain the server every step for a reload that
            # cannot happen (/collective_rpc missing); a server restarted with dev mode is reloaded unpaused once.
            if self.engine.rl_router and not self._rpc_missing:
                asked = True  # an exception inside /pause (Ctrl-C) still resumes it (the finally below)
                down, paused, asked = self._pause_vllm(steps)
                if down is not None:
                    return down
            self._record.reloading(paused)
            for method, kwargs in _vllm_reload_calls(self.engine.version, path):
                failed = self._collective_rpc(method, kwargs, steps, path)
                if failed is not None:
                    broken = failed if failed.broken else None
                    return failed
            self._tag_vllm(step, steps)
            if not paused:  # a paused server had its caches cleared by /pause
                self._record.reloaded_unpaused()
                steps.append(self._reset_prefix_cache())
        finally:
            if asked and broken is None:
                r = request("POST", f"{self.base}/resume", timeout=60.0)
                steps.append("resumed" if r.ok else f"/resume failed: {_why(r)}")
            elif asked:
                steps.append("left paused: the failed reload broke the engine")
        return SyncResult(True, "; ".join(steps), str(path))

    def _tag_vllm(self, step: int, steps: list[str]) -> None:
        """``POST /update_weight_version`` with the step, before ``/resume``: ``GET /weight_info`` then says which
        weights it serves (vLLM 0.32.0 has both routes; a 404 or 422 says this version has not)."""
        if not self._version_api:
            return
        r = request("POST", f"{self.base}/update_weight_version", {"new_version": str(step)}, timeout=60.0)
        self._version_api = r.ok or r.status not in (404, 405, 422)
        steps.append(f"weight version {step}" if r.ok else f"weight version not set ({_why(r)})")

    def _pause_vllm(self, steps: list[str]) -> tuple[SyncResult | None, bool, bool]:
        """``/pause`` before a reload: (the result when the server is down, whether it is paused, whether it
        may be: no answer). A failed pause is no reason not to reload: the prefix cache is then reset after it."""
        assert self.engine is not None
        p = request("POST", f"{self.base}/pause?{pause_query(self.engine.version)}", timeout=self.timeout)
        if p.refused:
            return SyncResult(False, f"/pause: the server is down ({_why(p)})", down=True), False, False
        if p.ok:
            steps.append("paused (in-flight requests finished, caches cleared)")
            return None, True, True
        steps.append(f"/pause failed ({_why(p)}): reloading without pausing")
        return None, False, p.status is None

    def _collective_rpc(self, method: str, kwargs: dict[str, Any], steps: list[str],
                        path: Path) -> SyncResult | None:
        """One ``/collective_rpc`` call of a reload; the failed result, or None when it worked."""
        r = request("POST", f"{self.base}/collective_rpc", {"method": method, "kwargs": kwargs}, self.timeout)
        self._rpc_missing = r.status == 404
        if r.refused:  # it went away before this call: the reload never started
            return SyncResult(False, f"/collective_rpc {method}: the server is down ({_why(r)})", down=True)
        if r.status == 404:
            return SyncResult(False, "unsupported: /collective_rpc is missing: start vLLM with "
                                     "VLLM_SERVER_DEV_MODE=1")
        if not r.ok and method == "reload_weights" and (
                r.status is None or self._health_until(False, 30.0 if _engine_dead(r) else 1.5, 0.5)):
            # No reply, or an error as the server goes away: a user's `rlsup restart` (or a crash) during the
            # reload. vLLM 0.32.0 answers the reload 500 as it shuts down ("EngineCore encountered an issue"), or
            # drops the connection, then stops answering; a reload that failed in a live worker leaves /health 200.
            return self._went_away(f"/collective_rpc {method}", path, r)
        if not r.ok and method == "reload_weights":
            # vLLM's in-place reload moves the layers to the meta device before it reads a file
            # (0.32.0 vllm/model_executor/model_loader/reload/layerwise.py): a failure leaves a model
            # that /health still calls healthy and that the next completion crashes or that serves
            # mixed weights. Never /resume it: it must be restarted.
            return SyncResult(False, f"/collective_rpc {method} failed: {_why(r)}; the engine's "
                                     "weights are undefined now", broken=True)
        if not r.ok:
            return SyncResult(False, f"/collective_rpc {method} failed: {_why(r)}")
        steps.append(f"{method}: {_why(r)}")
        return None

    def _reset_prefix_cache(self) -> str:
        """Reset vLLM's prefix cache after a reload that was not paused (no /pause before 0.12.0, or /pause
        failed). From 0.12.0 ``reset_running_requests=true`` makes the reset happen even while requests run
        (it preempts them; 0.32.0 vllm/entrypoints/serve/dev/cache/api_router.py ``reset_prefix_cache``). An
        empty 200 (before 0.26.0) may hide a failed reset: said loudly once; ``{"success": false}`` is retried."""
        v = self.engine.version if self.engine is not None else None
        query = "" if v is not None and v < (0, 12) else "?reset_running_requests=true"
        for attempt in range(1, self.busy_tries + 1):
            r = request("POST", f"{self.base}/reset_prefix_cache{query}", timeout=60.0)
            if not r.ok:
                return f"prefix cache not reset ({_why(r)})"
            if isinstance(r.data, dict) and r.data.get("success") is False:
                time.sleep(self.retry_s * attempt)
                continue
            if v is not None and v < (0, 26) and not isinstance(r.data, dict):
                self._warn_once(
                    f"vLLM {self.engine.raw if self.engine else ''} answers /reset_prefix_cache with an empty "
                    "200 whether or not it reset the cache (the reset fails while requests hold blocks"
                    + ("" if query else "; this version has no reset_running_requests") + "): prompts "
                    "sharing a prefix may be served from the OLD policy's KV cache after each reload. Use vLLM "
                    ">= 0.26 (or >= 0.12 with /pause, which clears the cache once drained)", lead="")
                return "prefix cache reset requested (unconfirmed: empty 200 before vLLM 0.26)"
            return "prefix cache reset"
        self._warn_once("vLLM kept answering {\"success\": false} to /reset_prefix_cache (requests running): "
                        "prefixes cached before the reload may be reused until they are evicted")
        return "prefix cache busy (not reset)"

    def _check_shapes(self, path: Path) -> SyncResult | None:
        """Refuse weights whose tensors differ in shape from what the server serves: neither engine survives
        them. vLLM 0.32.0 answers 200 to such a reload and serves mixed weights (later reloads then fail);
        SGLang 0.5.23 dies or serves a slice (all seen on the real engines, tests/engines/). What it serves is
        known from latest.json (its shapes are kept there, so a pruned dir still counts) or, before this run
        loaded anything, from the model the server reports it started with. The dir is marked REJECTED so no
        restarted server loads it either."""
        self._verified = None
        new = weights_mod.tensor_shapes(path)
        ref = self._served_shapes() if new is not None else None
        if new is None or ref is None or not weights_mod.comparable(new, ref[1]):
            return None  # nothing to compare: the server decides
        served, shapes = ref
        why = weights_mod.shape_difference(new, shapes, str(path), served)
        if why is None:
            self._verified = path
            return None
        weights_mod.reject(path, why)
        flag(self._out, "weights_rejected", f"not loading {path}: {why}; the server keeps serving {served}")
        return SyncResult(False, f"rejected before loading: {why}")

    def _served_shapes(self) -> tuple[str, dict[str, list[int]]] | None:
        """(what the server serves, in words; its tensor shapes), or None where they cannot be known."""
        served = weights_mod.served(self.weights_dir)
        if served is not None:
            step, where, shapes = served
            if shapes is None and Path(where).is_dir():
                shapes = weights_mod.tensor_shapes(Path(where))
            if shapes is not None:
                return f"weights step {step} ({where})", shapes
        model = self._started_with()
        found = weights_mod.model_dir(model) if model else None
        shapes = weights_mod.tensor_shapes(found) if found else None
        return (f"the model it started with ({model})", shapes) if shapes is not None else None

    def _started_with(self) -> str | None:
        """The model the server reports it was started with: vLLM's ``/v1/models`` ``root``, SGLang's
        ``/model_info`` ``model_path`` (a local dir or a hub name)."""
        if self.engine is not None and self.engine.kind == "vllm":
            r = request("GET", f"{self.base}/v1/models", timeout=30.0)
            data = r.data.get("data") if r.ok and isinstance(r.data, dict) else None
            got = data[0].get("root") if isinstance(data, list) and data and isinstance(data[0], dict) else None
        else:
            got = self._sglang_model_path()
        return got if isinstance(got, str) else None

    def _sglang_model_path(self) -> Any:
        """``model_path`` from SGLang's ``/model_info`` (``/get_model_info`` before 0.5.6)."""
        version = self.engine.version if self.engine is not None and self.engine.kind == "sglang" else None
        info = _sglang_info(str(self.base), "model_info", version, 30.0)
        return info.data.get("model_path") if info.ok and isinstance(info.data, dict) else None

    # -- a server that is down

    def _push_when_back(self, step: int, path: Path, result: SyncResult) -> SyncResult:
        """The server was down when ``path`` was pushed (it died, or rlsup is restarting it): nothing was loaded
        and the weights are not to blame, so they are neither marked REJECTED nor followed by a restart of our
        own (rlsup restarts the dead process; a second restart would only cost another start). Wait for it to
        answer again, then push once more: a restarted server loads the newest good published dir by itself,
        often this one, and reloading the same weights is harmless."""
        steplog.warn(f"{result.detail}: the inference server is down while weights step {step} are pushed; "
                     f"waiting up to {self.restart_timeout:g}s for it to come back, then pushing them again")
        self._record.reloading(paused=True)  # the server is away: waited for, then pushed to again
        if not self._health_until(True, self.restart_timeout, 1.0):
            return SyncResult(False, f"{result.detail}; it did not come back within {self.restart_timeout:g}s")
        self.engine = detect(str(self.base), self.mode)  # the restarted server may be another version
        steplog.log(f"Inference server back at {self.base}: {self.engine}; pushing weights step {step} again")
        with stopping.held("a weight reload", _FINISH_EXCHANGE):
            again = self._push(path, step)
        return again if not again.down else SyncResult(False, f"{again.detail} (down again)", down=True)

    def _health_until(self, up: bool, within: float, every: float) -> bool:
        """Ask ``/health`` every ``every`` s until it answers 200 (``up``) or stops doing so (not ``up``: shutting
        down, restarted, its engine dead): True, or False after ``within`` s (a server that stays up after a
        failed reload lives on)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if request("GET", f"{self.base}/health", timeout=5.0).ok == up:
                return True
            time.sleep(every)
        return False

    # -- a broken engine

    def _recover(self, path: Path, result: SyncResult) -> None:
        """A reload left the engine unusable (``result.broken``). Mark ``path`` rejected so no restarted
        server loads it (:func:`rlsup.trainer.weights.published`), then have the server restarted:
        it comes back with the last good weights. Without a way to restart it, it is flagged (and a
        vLLM stays paused, so nothing is generated from broken weights)."""
        weights_mod.reject(path, result.detail)
        if self.restart_server is None or stopping.stopping():
            flag(self._out, "engine_broken",
                 f"{self.engine or self.base}: {result.detail}. The server must be restarted to serve the last good "
                 "weights: `rlsup restart <inference component>` (pass the trainer --restart-server NAME to do it "
                 "automatically)")
            return
        steplog.warn(f"{result.detail}: restarting the inference server (it loads the last good weights; "
                     f"{path.name} is marked {weights_mod.REJECTED})")
        ok, said = self.restart_server()
        steplog.log(f"restart of the inference server: {said}")
        if not ok:  # nothing will come back on its own: say so where rlsup shows it
            flag(self._out, "engine_broken", f"{self.engine or self.base}: {result.detail}; asking rlsup to restart "
                                             f"it failed ({said}): restart it by hand")
            return
        deadline = time.monotonic() + self.restart_timeout  # until the old server stopped and the new one answers
        if not (self._health_until(False, self.restart_timeout, 1.0)
                and self._health_until(True, deadline - time.monotonic(), 1.0)):
            steplog.warn(f"the inference server at {self.base} did not come back within {self.restart_timeout:g}s")
        self.engine = None  # detect again: the restarted server may be another version
        good = weights_mod.published(self.weights_dir, good=True)
        if good is not None:
            steplog.log(f"Inference server restarted; it loads {good[1]} (the newest good weights)")

    # -- staleness

    def _check_stale(self, step: int) -> None:
        behind = step - (self.loaded_step if self.loaded_step is not None else -1)
        if self.mode == "none" or not self.base or behind <= self.stale_after or self.flagged:
            return
        self.flagged = True
        served = f"weights step {self.loaded_step}" if self.loaded_step is not None else "no weights published by this run"
        flag(self._out, "weights_stale",
             f"the inference server ({self.engine or self.base}) still serves {served} while step {step} is published "
             f"({behind} steps behind, more than {self.stale_after}); rollouts are off-policy: check the server's log, "
             "or restart it to load the newest weights")

    def _warn_once(self, text: str, lead: str = "inference server did not load the new weights: ") -> None:
        """Warn ``lead + text`` once for every text that differs in more than its numbers."""
        key = lead + re.sub(r"\d+", "N", text)[:120]
        if key not in self._warned:
            self._warned.add(key)
            steplog.warn(lead + text)


def rlsup_restart(name: str, run_dir: Path | None = None) -> Callable[[], tuple[bool, str]]:
    """A ``restart_server`` for :class:`WeightSync`: ``rlsup restart NAME`` against ``run_dir``, by default the
    run this process belongs to (``$RLSUP_RUN_DIR``, set by rlsup for every component; the journal then names
    this component as the sender, with the reason)."""

    def restart() -> tuple[bool, str]:
        cmd = [sys.executable, "-m", "rlsup.supervisor.cli", "restart", name,
               *(["--run-dir", str(run_dir)] if run_dir else []),
               "--reason", "a weight reload broke the engine: it comes back with the newest good weights"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"`rlsup restart {name}` failed: {exc}"
        said = (done.stdout + done.stderr).strip().replace("\n", " ")
        return done.returncode == 0, f"`rlsup restart {name}` exit {done.returncode}" + (f": {said}" if said else "")

    return restart


def make_sync(args: Any) -> WeightSync:
    """The trainer's :class:`WeightSync` from its parsed arguments."""
    name = getattr(args, "restart_server", None)
    return WeightSync(args.server, args.weight_sync, Path(args.out) / "weights", stale_after=args.stale_after,
                      restart_server=rlsup_restart(name) if name else None)


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

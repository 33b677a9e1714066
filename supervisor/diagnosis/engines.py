"""Inference engines (vLLM, SGLang) as rlsup knows them: which one a component's command runs, and the line
with which a vLLM API server says that its engine core died.

vLLM runs its engine core in a child process; when that child dies, the API server logs it and normally exits
(0, within its 5 s watchdog: vllm/entrypoints/launchers/launcher.py ``terminate_if_errored``) -- but not with
``VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1``, nor when its shutdown hangs: it then stays up, answering ``/health`` 503
or nothing, and serves no completion. A component whose own output shows that, and that is still running
:data:`LINGER_S` seconds later, is ended and restarted as a failure (``run/component.py``), with or without an
``alive`` probe. SGLang's launcher kills its own process tree when its scheduler dies (``kill_process_tree``),
so it never lingers.
"""

from __future__ import annotations

import re

# `vllm serve ...`, `python -m vllm.entrypoints.cli.main serve`, `python -m vllm.entrypoints.openai.api_server`,
# `python -m sglang.launch_server`, `sglang serve` (what the presets and configs run; an exec/env prefix or a
# venv path before the program does not matter).
_ENGINES = (
    ("vllm", re.compile(r"(?:^|[\s/])vllm\s+serve\b|\bvllm\.entrypoints\.(?:cli\.main\s+serve|openai\.api_server)\b")),
    ("sglang", re.compile(r"\bsglang\.launch_server\b|(?:^|[\s/])sglang\s+serve\b")),
)

# vLLM's API server about its own engine core (never a client's reading of a 500 reply): 0.32.0
# v1/engine/core_client.py "[shutdown] MPClient: engine core exited unexpectedly" and async_llm.py "AsyncLLM
# output_handler failed."; up to 0.2x core_client.py's monitor "Engine core proc EngineCore_0 died unexpectedly,
# shutting down client."
CORE_DIED = re.compile(r"engine core exited unexpectedly|Engine core proc \S+ died unexpectedly"
                       r"|AsyncLLM output_handler failed")

LINGER_S = 15.0  # after that line, longer than vLLM's own 5 s watchdog takes to end a server whose core died


def engine_of(command: str) -> str | None:
    """``vllm`` or ``sglang`` when ``command`` (a component's command line) starts that engine's server."""
    return next((name for name, pat in _ENGINES if pat.search(command)), None)


def core_died(text: str) -> str | None:
    """The line of ``text`` (one or more lines) in which a vLLM API server says its engine core died, or None."""
    if CORE_DIED.search(text) is None:  # (one scan of the whole text; lines only where it holds one)
        return None
    return next(line.strip() for line in text.split("\n") if CORE_DIED.search(line))

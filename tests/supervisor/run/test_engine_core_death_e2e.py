"""Issue 42: a vLLM whose API server outlives its engine core (vLLM 0.32.0 with VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1, or
a shutdown that hangs) is restarted without an `alive` probe, and its exit is diagnosed from its log (the engine core
died), not as a kill from outside with an OOM-killer hint. A stand-in prints the real server's lines
(tests/supervisor/diagnosis/test_engines.py); tests/engines/test_vllm.py does it to the real vLLM."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import write_config
from tests.supervisor.diagnosis.test_engines import VLLM_CORE_DIED

SERVER = '''
import os, sys, time
first = not os.path.exists(sys.argv[1])
open(sys.argv[1], "a").close()
print("INFO Application startup complete.", flush=True)
if first:
    time.sleep(1)
    for line in LINES:
        print(line, flush=True)
while True:  # the API server lingers: nothing exits
    time.sleep(1)
'''


def _stand_in(tmp: Path) -> Path:
    """A `vllm` package whose `python -m vllm.entrypoints.openai.api_server` is the stand-in."""
    pkg = tmp / "fake" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(f"LINES = {VLLM_CORE_DIED!r}\n" + SERVER)
    return tmp / "fake"


def test_an_api_server_that_outlives_its_engine_core_is_restarted_without_alive(tmp_path, headless) -> None:
    fake = _stand_in(tmp_path)
    cfg = write_config(tmp_path, f"""
        components:
          inference:
            command: ["{{py}}", "-m", "vllm.entrypoints.openai.api_server", "{tmp_path / 'died-once'}"]
            env: {{PYTHONPATH: "{fake}"}}
            ready: {{log: "Application startup complete", timeout: 30}}
            restart: {{policy: on-failure, backoff: {{initial: 0.2, max: 0.5}}}}
            stop: {{timeout: 3}}
    """)
    h = headless(cfg)
    flag = h.wait_event(lambda e: e["kind"] == "flag" and e["type"] == "liveness_failed", timeout=90,
                        what="the lingering server flagged")
    assert "engine core died" in flag["message"] and "engine core exited unexpectedly" in flag["evidence"][0]
    exited = h.wait_event(lambda e: e["kind"] == "exited", timeout=60, what="its exit")
    d = exited["diagnosis"]
    assert d["category"] == "inference_engine_dead", d
    assert "rlsup ended it: its engine core died" in d["summary"] and "OOM" not in d["hint"], d
    again = h.wait_event(lambda e: e["kind"] == "started" and e["attempt"] == 2, timeout=60, what="a second attempt")
    assert again["cause"]["by"] == "probe"  # a failure rlsup found, restarted by the policy (not a user's restart)
    h.wait_event(lambda e: e["kind"] == "ready" and e["seq"] > again["seq"], timeout=60, what="it ready again")

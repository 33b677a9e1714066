"""HTTP servers that answer the weight-reload routes exactly as each engine version does.

Every reply below is taken from the upstream route it stands for (status code, body or empty body):

SGLang 0.5.x -- python/sglang/srt/entrypoints/http_server.py:
  POST /update_weights_from_disk -> 200 {"success": true, "message", "num_paused_requests"} or 400 with
  "success": false (ORJSONResponse, HTTPStatus.BAD_REQUEST); tokenizer_manager._wait_for_model_update_from_disk
  sets server_args.model_path on success, which GET /get_model_info returns as "model_path". While requests run
  it waits on model_update_lock.writer_lock (no busy reply). GET /get_server_info carries "version".
vLLM (VLLM_SERVER_DEV_MODE=1) -- GET /version -> {"version": VLLM_VERSION} (api_router show_version);
  POST /collective_rpc -> {"results": [...]} (results of every worker; a worker exception -> 500);
  0.14.x: vllm/v1/worker/gpu_worker.py Worker.reload_weights(self) takes no argument (re-reads
  model_config.model), Worker.update_config(overrides) takes {"model_config": {...}};
  0.16-0.25: reload_weights(weights_path=...); POST /reset_prefix_cache -> Response(status_code=200), an EMPTY
  body (vllm/entrypoints/serve/cache/api_router.py);
  0.26+: POST /reset_prefix_cache -> {"success": bool}, false while running requests hold blocks
  (vllm/frontend/entrypoints/serve/dev/cache/api_router.py);
  RL router (vllm/entrypoints/rl/online/api_router.py): POST /pause -> {"status": "paused"}, POST /resume ->
  {"status": "resumed"}, GET /is_paused -> {"is_paused": bool}.
Unknown routes answer FastAPI's 404 {"detail": "Not Found"}.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class EngineServer:
    """One fake engine on 127.0.0.1:<free port>. ``kind``: sglang | vllm; ``version`` as the engine
    reports it; ``busy_resets``: how many /reset_prefix_cache calls answer {"success": false};
    ``fail_loads``: /update_weights_from_disk answers 400; ``dev_mode``: vLLM's dev routes exist."""

    def __init__(self, kind: str, version: str, *, busy_resets: int = 0, fail_loads: bool = False,
                 dev_mode: bool = True, rl_router: bool = False, base_model: str = "base-model") -> None:
        self.kind, self.version = kind, version
        self.v = tuple(int(x) for x in version.split(".")[:2])
        self.busy_resets, self.fail_loads, self.dev_mode, self.rl_router = busy_resets, fail_loads, dev_mode, rl_router
        self.config_model = base_model  # vLLM model_config.model / SGLang server_args.model_path
        self.serving = base_model  # the weights actually loaded
        self.paused = False
        self.calls: list[tuple[str, object]] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- routes

    def route(self, method: str, path: str, body: dict) -> tuple[int, object | None]:
        self.calls.append((f"{method} {path}", body))
        route = urlsplit(path).path
        not_found = (404, {"detail": "Not Found"})
        if self.kind == "sglang":
            if (method, route) == ("POST", "/update_weights_from_disk"):
                if self.fail_loads:
                    return 400, {"success": False, "message": f"Failed to get weights iterator: {body.get('model_path')}"
                                 " (repo id or local path) is invalid.", "num_paused_requests": 0}
                self.config_model = self.serving = body["model_path"]
                return 200, {"success": True, "message": "Succeeded to update model weights.",
                             "num_paused_requests": 0}
            if (method, route) == ("GET", "/get_model_info"):
                return 200, {"model_path": self.config_model, "tokenizer_path": self.config_model,
                             "is_generation": True}
            if (method, route) == ("GET", "/get_server_info"):
                return 200, {"version": self.version, "model_path": self.config_model}
            return not_found
        # vLLM
        if (method, route) == ("GET", "/version"):
            return 200, {"version": self.version}
        if not self.dev_mode:
            return not_found
        if self.rl_router and (method, route) == ("POST", "/pause"):
            self.paused = True
            return 200, {"status": "paused"}
        if self.rl_router and (method, route) == ("POST", "/resume"):
            self.paused = False
            return 200, {"status": "resumed"}
        if self.rl_router and (method, route) == ("GET", "/is_paused"):
            return 200, {"is_paused": self.paused}
        if (method, route) == ("POST", "/collective_rpc"):
            m, kw = body.get("method"), body.get("kwargs") or {}
            if m == "update_config":
                mc = (kw.get("overrides") or {}).get("model_config") or {}
                self.config_model = mc.get("model", self.config_model)
                return 200, {"results": [None]}
            if m == "reload_weights":
                if self.v < (0, 16) and kw:
                    # Worker.reload_weights(self) got an unexpected keyword: the worker raises, the route 500s
                    return 500, None
                self.serving = kw.get("weights_path", self.config_model)
                return 200, {"results": [None]}
            return 500, None
        if (method, route) == ("POST", "/reset_prefix_cache"):
            if self.v < (0, 26):
                return 200, None  # Response(status_code=200): empty body
            if self.busy_resets > 0:
                self.busy_resets -= 1
                return 200, {"success": False}
            return 200, {"success": True}
        return not_found

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
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._do("GET")

            def do_POST(self) -> None:
                self._do("POST")

        return H

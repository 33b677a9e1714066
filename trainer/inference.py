"""Inference server: an OpenAI-compatible HTTP subset serving the tiny policy.

    python -m rlsup.trainer.inference --port 8731 --weights-dir OUT/weights

Endpoints: ``POST /v1/completions`` (``prompt`` str or list, ``n``, ``max_tokens``, ``temperature``,
``logprobs``; choices ordered prompt-major, ``index = prompt_i * n + j``, as OpenAI and vLLM do),
``GET /v1/models``, ``GET /health`` (200 once weights are loaded, 503 before), ``POST
/update_weights_from_disk`` with ``{"model_path": DIR}`` (SGLang's path) to swap in published
weights without a restart, and SGLang's ``GET /get_model_info`` (``model_path``: what is loaded) and a
``GET /version`` of ``rlsup-X.Y.Z``. ``return_token_ids`` (vLLM's field) adds ``prompt_token_ids`` and
``token_ids`` to each choice (EOS left out, where vLLM and SGLang keep the stop token; ``finish_reason`` says
whether it stopped and the trainer appends the EOS).  Handler threads enqueue requests; one worker thread drains the queue
and generates for everything pending in one batch.  Responses carry an extra ``weights_step``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from rlsup.trainer import steplog
from rlsup.trainer import weights as weights_mod
from rlsup.trainer.chaos import Chaos
from rlsup.trainer.policy import VOCAB, Policy, PolicyConfig, decode, encode, generate, load_weights


class _Job(Future):
    def __init__(self, prompts: list[list[int]], n: int, max_tokens: int, temperature: float) -> None:
        super().__init__()
        self.prompts, self.n, self.max_tokens, self.temperature = prompts, n, max_tokens, temperature


class Tiny:
    """The tiny policy behind :class:`rlsup.trainer.hf.HFGenerator`'s interface (one token per character)."""

    encode = staticmethod(encode)
    decode = staticmethod(decode)
    token = staticmethod(VOCAB.__getitem__)

    def __init__(self, policy: Policy) -> None:
        self.policy = policy.eval()

    def load(self, path: Path) -> None:
        self.policy = load_weights(path).eval()

    def generate(self, rows: list[list[int]], max_tokens: int, temps: list[float], generator: torch.Generator):
        return (*generate(self.policy, rows, max_tokens, temps, generator), ["length"] * len(rows))


class Engine:
    """Holds the model and batches generation for concurrent requests on one worker thread."""

    def __init__(self, seed: int, total: int, model: Any) -> None:
        self.model = model  # a Tiny or an HFGenerator: text <-> token ids, generate, load
        self.ready = False  # weights loaded: /health and completions answer
        self.step = 0
        self.path: str | None = None  # the published dir loaded, None for the initial policy
        self.total = total
        self.lock = threading.Lock()  # policy swap vs. generation
        self.jobs: queue.Queue[_Job] = queue.Queue()
        self.generator = torch.Generator().manual_seed(seed)
        self.stats = collections.Counter(requests=0, completions=0, tokens=0, batches=0)
        self.reported = dict(self.stats)
        threading.Thread(target=self._worker, name="batcher", daemon=True).start()

    def _worker(self) -> None:
        while True:
            batch = [self.jobs.get()]
            while True:  # take everything already waiting: that is the batch
                try:
                    batch.append(self.jobs.get_nowait())
                except queue.Empty:
                    break
            try:
                self._run(batch)
            except Exception as exc:  # report to every waiting request, keep serving
                for job in batch:
                    if not job.done():
                        job.set_exception(exc)

    def _run(self, batch: list[_Job]) -> None:
        rows = [p for job in batch for p in job.prompts for _ in range(job.n)]
        temps = [job.temperature for job in batch for _ in range(len(job.prompts) * job.n)]
        max_tokens = max(job.max_tokens for job in batch)
        with self.lock:
            ids, lps, tops, finish = self.model.generate(rows, max_tokens, temps, self.generator)
            step = self.step
        at = 0
        for job in batch:
            mine, at = slice(at, at + len(job.prompts) * job.n), at + len(job.prompts) * job.n
            job.set_result((*([r[: job.max_tokens] for r in rows[mine]] for rows in (ids, lps, tops)), step,
                            [f if len(r) <= job.max_tokens else "length"
                             for f, r in zip(finish[mine], ids[mine], strict=True)]))
        self.stats.update(batches=1, requests=len(batch), completions=len(rows), tokens=len(rows) * max_tokens)


def _completion_response(engine: Engine, model: str, body: dict) -> dict:
    prompt = body.get("prompt", "")
    prompts = [prompt] if isinstance(prompt, str) else list(prompt)
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompt must be a string or a non-empty list of strings")
    n = int(body.get("n") or 1)
    max_tokens = int(body.get("max_tokens") or 16)
    temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
    top_k = body.get("logprobs")
    want_ids = bool(body.get("return_token_ids"))
    if n < 1 or max_tokens < 1 or temperature < 0:
        raise ValueError("n and max_tokens must be >= 1 and temperature >= 0")
    encoded = [engine.model.encode(p) for p in prompts]
    job = _Job(encoded, n, max_tokens, temperature)
    engine.jobs.put(job)  # the worker thread batches it with what else is waiting
    ids, lps, tops, step, finish = job.result()
    choices = []
    for index, (row_ids, row_lps, row_top) in enumerate(zip(ids, lps, tops, strict=True)):
        extra = {"prompt_token_ids": list(encoded[index // n]), "token_ids": list(row_ids)} if want_ids else {}
        text = engine.model.decode(row_ids)
        logprobs = None
        if top_k is not None:
            tokens = [engine.model.token(i) for i in row_ids]
            offsets = [sum(len(t) for t in tokens[:k]) for k in range(len(tokens))]
            logprobs = {
                "tokens": tokens,
                "token_logprobs": row_lps,
                "top_logprobs": [{engine.model.token(i): lp for i, lp in alts[: int(top_k)]} for alts in row_top]
                if int(top_k) > 0 else None,
                "text_offset": offsets,
            }
        choices.append({"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish[index],
                        "stop_reason": None, **extra})
    prompt_tokens, completion_tokens = sum(len(p) for p in encoded), sum(len(r) for r in ids)
    return {
        "id": f"cmpl-{uuid.uuid4().hex[:16]}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
        "weights_step": step,
    }


class Handler(BaseHTTPRequestHandler):
    """One request (http.server makes an instance per request); ``main`` binds the engine in a subclass.
    One method per route, found in :attr:`GET` / :attr:`POST` by path."""

    protocol_version = "HTTP/1.1"
    engine: Engine
    model: str
    started: int  # when the server started: /v1/models' ``created``

    def log_message(self, format: str, *args) -> None:  # per-request access logs would drown the step lines
        pass

    def _send(self, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, message: str) -> None:
        self._send(code, {"error": {"message": message, "type": "invalid_request_error", "code": code}})

    def _no_route(self, body: dict | None = None) -> None:
        self._error(404, f"no route {self.path}")

    def do_GET(self) -> None:
        self.GET.get(self.path, Handler._no_route)(self)

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError as exc:  # json.JSONDecodeError too
            self._error(400, f"bad JSON body: {exc}")
            return
        self.POST.get(self.path, Handler._no_route)(self, body)

    # GET routes -----------------------------------------------------------------------------------
    def get_health(self) -> None:
        if not self.engine.ready:
            self._error(503, "weights not loaded yet")
        else:
            self._send(200, {"status": "ok", "weights_step": self.engine.step, **self.engine.stats})

    def get_version(self) -> None:
        try:
            v = version("rlsup")
        except PackageNotFoundError:
            v = "0"
        self._send(200, {"version": f"rlsup-{v}"})

    def get_model_info(self) -> None:
        self._send(200, {"model_path": self.engine.path or self.model, "weights_step": self.engine.step,
                         "is_generation": True})

    def get_models(self) -> None:
        self._send(200, {"object": "list", "data": [
            {"id": self.model, "object": "model", "created": self.started, "owned_by": "rlsup"}]})

    # POST routes --------------------------------------------------------------------------------
    def post_completions(self, body: dict) -> None:
        if not self.engine.ready:
            self._error(503, "weights not loaded yet")
            return
        try:
            self._send(200, _completion_response(self.engine, self.model, body))
        except ValueError as exc:
            self._error(400, str(exc))

    def post_update_weights(self, body: dict) -> None:
        path = body.get("model_path")
        try:
            message = update_from_disk(self.engine, Path(path))
        except Exception as exc:
            self._send(400, {"success": False, "message": f"failed to load {path}: {exc}"})
            return
        self._send(200, {"success": True, "message": message})

    GET: dict[str, Callable[[Handler], None]] = {
        "/health": get_health, "/version": get_version, "/get_model_info": get_model_info, "/v1/models": get_models}
    POST: dict[str, Callable[[Handler, dict], None]] = {
        "/v1/completions": post_completions, "/update_weights_from_disk": post_update_weights}


def update_from_disk(engine: Engine, path: Path) -> str:
    """Load a published weights dir into ``engine`` and log the ``Step N/T`` line for it."""
    t0 = time.perf_counter()
    meta = json.loads((path / "meta.json").read_text())
    with engine.lock:  # no generation while the model is swapped
        engine.model.load(path)
        engine.step = int(meta["step"])
        engine.path = str(path)
        engine.ready = True
        engine.total = int(meta.get("total") or 0) or engine.total
    load_ms = (time.perf_counter() - t0) * 1000
    # Request stats since the previous update: what the server did with the weights it replaced.
    s, prev = dict(engine.stats), engine.reported
    engine.reported = s
    d = {k: s[k] - prev[k] for k in ("requests", "completions", "batches")}
    steplog.log_step(engine.step, engine.total, {
        **d, "requests_per_batch": d["requests"] / d["batches"] if d["batches"] else 0.0, "load_ms": load_ms,
    })
    return f"loaded weights step {engine.step} from {path}"


class Server(ThreadingHTTPServer):
    """One thread per request. The listen backlog is sized for an orchestrator's burst of concurrent
    requests (socketserver's default of 5 makes a 16-request burst wait on SYN retries)."""

    daemon_threads = True
    request_queue_size = 128


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8731)
    ap.add_argument("--weights-dir", type=Path, required=True,
                    help="where the trainer publishes weights; the latest there is loaded at start")
    ap.add_argument("--model-name", default=None, help="name in /v1/models (default: rlsup-tiny, or --model)")
    ap.add_argument("--model", default=None,
                    help="serve this Hugging Face causal LM (name or path) instead of the tiny policy; "
                         "the newest published weights in --weights-dir win over it")
    ap.add_argument("--device", default=None, help="with --model: default cuda if available, else cpu")
    ap.add_argument("--seed", type=int, default=0, help="init seed when nothing is published yet; sampling seed")
    ap.add_argument("--total-steps", type=int, default=0, help="T in the Step N/T lines until weights say it")
    ap.add_argument("--chaos", default=None, help="die@30s: die 30 s after start")
    ap.add_argument("--chaos-dir", type=Path, default=None, help="default: WEIGHTS_DIR/../chaos")
    args = ap.parse_args(argv)
    if args.model_name is None:
        args.model_name = args.model or "rlsup-tiny"
    if not (args.model and torch.cuda.is_available()):
        torch.set_num_threads(1)

    try:
        chaos = Chaos(args.chaos, args.chaos_dir or args.weights_dir.parent / "chaos", "inference")
    except ValueError as exc:
        ap.error(str(exc))
    if args.model:
        from rlsup.trainer.hf import HFGenerator, latest_model_path

        source = latest_model_path(args.weights_dir, args.model)
        steplog.log(f"Loading {source}")
        model: Any = HFGenerator(source, args.device)
    else:
        torch.manual_seed(args.seed)  # the trainer initialises with the same seed: same step-0 policy
        model = Tiny(Policy(PolicyConfig()))
    engine = Engine(args.seed, args.total_steps, model)
    bound = {"engine": engine, "model": args.model_name, "started": int(time.time())}
    server = Server((args.host, args.port), type("Bound", (Handler,), bound))
    steplog.log(f"Listening on http://{args.host}:{args.port} (model {args.model_name})")
    chaos.start_timers()

    found = weights_mod.published(args.weights_dir)  # the newest published, not what was loaded last
    if found is not None:
        steplog.log(update_from_disk(engine, found[1]))
    else:
        engine.ready = True
        steplog.log(f"No published weights in {args.weights_dir}; serving "
                    f"{args.model or f'the initial policy (seed {args.seed})'}")
    steplog.log("Ready")
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

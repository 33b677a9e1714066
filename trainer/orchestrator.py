"""Orchestrator: samples the task through the inference server, scores, writes rollouts.

    python -m rlsup.trainer.orchestrator --server http://127.0.0.1:8731 --out OUT --steps 200

Talks to the server only through the OpenAI completions API (so it works against vLLM or SGLang
too), computes group-relative advantages and publishes ``OUT/rollouts/step_{N}/`` atomically.
Async level K: rollouts for step N are generated only once the trainer has published weights
step >= N - 1 - K (``OUT/weights/step_M`` with ``STABLE``) and, while the server keeps up, once the
server has loaded them too (``--server-wait``, :func:`wait_for_server`); K = 0 is fully on-policy
when the server keeps up. Every sample is labelled with the weights that made it (:func:`complete`): the reply's
own word where the server gives one (rlsup's ``weights_step``, SGLang's ``metadata.weight_versions``), else the
reload record the trainer writes around every reload (:mod:`rlsup.trainer.reloads`), read before each request
and after its reply; ``off_policy`` and its companions count the step's samples by those labels
(:func:`rlsup.trainer.rollouts.staleness`), so a stale server shows as a growing ``off_policy``, not as 0-1. While
requests wait, :class:`~rlsup.trainer.pausewatch.PauseWatch` flags a vLLM left paused.

Token ids: requests ask for them with ``return_token_ids`` (vLLM 0.10.2+, SGLang 0.5.17+, rlsup's server:
each choice then has ``token_ids`` and ``prompt_token_ids``); the trainer trains on the sampled ids and on
what stopped the completion (:func:`choice_fields`), not on re-tokenised text. SGLang before 0.5.17 ignores
the field (its request model drops unknown fields): the trainer then re-tokenises the text, and this
process says so once.

Restarts and trainer resumes: it continues after the newest published rollout step and never
rewrites one.  A trainer resumed from checkpoint R re-reads the kept rollouts R+1.., and since the
trainer is deterministic given its rollouts it recomputes the very weights those rollouts were
sampled from, so they stay as on-policy as they were.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from rlsup.trainer import grpo, reloads, rollouts, steplog, task, waiting
from rlsup.trainer import weights as weights_mod
from rlsup.trainer.chaos import Chaos
from rlsup.trainer.pausewatch import PauseWatch
from rlsup.trainer.sync import _why, request


class ServerDown(Exception):
    pass


def http_json(url: str, payload: dict | None = None, timeout: float = 60.0) -> dict:
    """GET (``payload`` None) or POST JSON; raises ``ServerDown`` when the server can't be reached or fails
    (5xx, or a reply that broke off), ``ValueError`` for any other reply that is not a JSON object."""
    r = request("GET" if payload is None else "POST", url, payload, timeout)
    if r.status is None:
        raise ServerDown(r.error)
    if r.status >= 500:
        raise ServerDown(f"HTTP {r.status} from {url}")
    if not (r.ok and isinstance(r.data, dict)):
        raise ValueError(f"{url}: {_why(r)}")
    return r.data


def neutral_sampling(temperature: float) -> dict:
    """Sampling parameters for plain temperature sampling, all sent explicitly. vLLM fills every parameter a
    request leaves out from the model's ``generation_config.json`` (0.10.2-0.33.0: vllm/config/model.py
    ``get_diff_sampling_param``, entrypoints/openai completion protocol ``to_sampling_params`` with
    ``default_sampling_params``): Qwen2.5-Instruct's file sets top_p 0.8, top_k 20, repetition_penalty 1.1,
    so leaving them out samples from another distribution than the one the GRPO loss assumes (off-policy
    from the first step). SGLang reads ``top_k=-1`` as "no limit" too."""
    return {"temperature": temperature, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0}


def call_with_retry(url: str, payload: dict | None, what: str, give_up_after: float,
                    timeout: float = 60.0) -> dict:
    """Retry while the server is unreachable, logging each failure; raise after ``give_up_after`` s."""
    start = time.monotonic()
    delay = 0.5
    for attempt in itertools.count(1):
        try:
            return http_json(url, payload, timeout=timeout)
        except ServerDown as exc:
            waited = time.monotonic() - start
            if waited > give_up_after:
                raise ServerDown(f"{what}: inference server unreachable for {waited:.0f}s: {exc}") from exc
            steplog.log(f"{what}: inference server not reachable (attempt {attempt}): {exc}; retrying in {delay:.1f}s")
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def served_step(weights_dir: Path) -> int:
    """The weights step the server has loaded (``latest.json``), 0 before it loaded any of this run's."""
    return (weights_mod.latest(weights_dir) or (0,))[0]


def published_step(weights_dir: Path) -> int:
    """The newest complete (``STABLE``) published weights step, 0 before any."""
    return (weights_mod.published(weights_dir) or (0,))[0]


def reported_step(base: str) -> int | None:
    """The weights step the server says it serves: rlsup's server has ``weights_step`` in ``/health``
    (and loads the newest published weights when it restarts, which latest.json does not know);
    vLLM and SGLang report none (None)."""
    r = request("GET", f"{base}/health", timeout=2)
    step = r.data.get("weights_step") if r.ok and isinstance(r.data, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def wait_for_server(weights_dir: Path, needed: int, patience: float,
                    reported: Callable[[], int | None] = lambda: None) -> bool:
    """Once weights ``needed`` are published, wait at most ``patience`` s for the server to serve them
    (latest.json, or what the server itself reports); whether it did. The trainer publishes a step,
    then tells the server, then writes in latest.json what the server loaded: without this wait an
    orchestrator at async level 0 could sample step N+1 with step N-1's weights while the server was
    still loading step N."""
    # asks the server only when latest.json is behind
    return waiting.poll(lambda: served_step(weights_dir) >= needed or (reported() or 0) >= needed or None,
                        patience=patience) is not None


def _ids(value: object) -> list[int] | None:
    """A list of token ids from a response field, or None when the server sent none."""
    if isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        return list(value)
    return None


def choice_fields(c: dict) -> dict:
    """How one completion choice was sampled, the same for every server: ``prompt_ids`` and
    ``completion_ids`` (None where the server sent none), ``finish_reason``, and ``stop_reason``: what
    ended a ``stop`` finish -- a stop string (str), a stop token id (int), or None for the EOS token.
    vLLM calls it ``stop_reason`` (None for EOS; entrypoints/openai CompletionResponseChoice); SGLang
    ``matched_stop`` (the EOS or stop token id, or the stop string; serving_completions.py from
    finish_reason["matched"]) and has no ``stop_reason``."""
    stop = c["stop_reason"] if "stop_reason" in c else c.get("matched_stop")
    if isinstance(stop, bool) or not isinstance(stop, (str, int)):
        stop = None
    return {"prompt_ids": _ids(c.get("prompt_token_ids")), "completion_ids": _ids(c.get("token_ids")),
            "finish_reason": c.get("finish_reason"), "stop_reason": stop}


def response_label(r: dict) -> reloads.Label | None:
    """Which weights made a completion, as the server's reply says: rlsup's server ``weights_step``, SGLang's
    ``metadata.weight_versions`` (0.5.23: spans over the output tokens; versions are the steps the trainer
    tagged) or ``metadata.weight_version``; None where it says nothing (vLLM's ``/v1/completions``)."""
    step = r.get("weights_step")
    if isinstance(step, int) and not isinstance(step, bool):
        return reloads.Label(step)
    meta = r.get("metadata")
    if isinstance(meta, dict):
        return reloads.from_versions(meta.get("weight_versions") or meta.get("weight_version"))
    return None


def reload_record(weights_dir: Path | None) -> reloads.Record:
    """The reload record as a request is sent or answered; before any trainer wrote one, what latest.json says
    the server loaded (else step 0, the weights it started with)."""
    if weights_dir is None:
        return reloads.Record()
    rec = reloads.read(weights_dir)
    return rec if rec.step is not None else replace(rec, step=served_step(weights_dir))


def complete(url: str, body: dict, prompts: list[str], concurrency: int, what: str, give_up_after: float,
             timeout: float, weights_dir: Path | None = None) -> dict:
    """Completions for every prompt (``body["n"]`` each), choices ordered prompt-major.

    ``concurrency`` 0 sends one request with the list of prompts; K > 0 sends one request per prompt
    with at most K in flight (bounded load on a real engine, and SGLang/vLLM batch them anyway).
    Each choice gets ``weights``, the :class:`~rlsup.trainer.reloads.Label` of the weights that made it: the
    reply's own where it names them (:func:`response_label`), else the reload record of ``weights_dir`` read
    before the request and after its reply. Returns ``choices`` and ``usage.completion_tokens``, summed.
    """
    def one(payload: dict) -> dict:
        before = reload_record(weights_dir)
        r = call_with_retry(url, payload, what, give_up_after, timeout)
        after = reload_record(weights_dir)
        label = response_label(r) or reloads.label(before, after)
        for c in r["choices"]:
            c["weights"] = label
            c.setdefault("prompt_token_ids", r.get("prompt_token_ids"))  # vLLM: on each choice already
        return r

    payloads = [{**body, "prompt": prompts}] if concurrency <= 0 else [{**body, "prompt": p} for p in prompts]
    with ThreadPoolExecutor(max_workers=max(concurrency, 1)) as pool:
        replies = list(pool.map(one, payloads))
    return {"choices": [c for r in replies for c in sorted(r["choices"], key=lambda c: c["index"])],
            "usage": {"completion_tokens": sum(r.get("usage", {}).get("completion_tokens", 0) for r in replies)}}


def load_task(args: argparse.Namespace) -> tuple[list[task.Problem], Callable[[str, str], float]]:
    """(the GSM8K problems, or none for the digit task; the reward of a completion given the answer).
    Raises ``ValueError`` for data that cannot be read."""
    if args.task != "gsm8k":
        return [], task.reward
    from rlsup.trainer import hf

    problems = hf.load_problems(args.data, args.split)
    if args.tokenizer:
        tok = hf.load_tokenizer(args.tokenizer)
        problems = [task.Problem(hf.chat_prompt(tok, p.prompt), p.answer) for p in problems]
    steplog.log(f"GSM8K task: {len(problems)} problems from {args.data}")
    return problems, hf.reward


@dataclass
class Orchestrator:
    """The rollout loop's state across steps: the run's settings and what it has said so far."""

    args: argparse.Namespace
    base: str  # the server's URL, without a trailing slash
    model: str
    chaos: Chaos
    gsm8k: list[task.Problem]  # empty for the digit task
    score: Callable[[str, str], float]  # the reward of a completion given the answer
    server_lags: bool = False  # the server missed --server-wait once and has not caught up since
    warned_no_ids: bool = False

    def __post_init__(self) -> None:
        self.watch = PauseWatch(self.base, self.weights_dir)  # flags a server left paused (vLLM)

    @property
    def weights_dir(self) -> Path:
        return self.args.out / "weights"

    def await_weights(self, step: int) -> None:
        """Wait for the weights ``step`` may sample with (async level), and for the server to load them
        while it keeps up."""
        needed = step - 1 - self.args.async_level
        # Paced by what is published, not by what the server loaded: one that cannot load must not stop the run.
        waiting.poll(lambda: published_step(self.weights_dir) >= needed or None, say=lambda: steplog.log(
            f"Waiting for trainer weights step {needed} (published: {published_step(self.weights_dir)})"))
        if weights_mod.latest(self.weights_dir) is None:  # the server loads what is published
            return
        caught_up = wait_for_server(self.weights_dir, needed, 0.0 if self.server_lags else self.args.server_wait,
                                    lambda: reported_step(self.base))
        if not caught_up and not self.server_lags:
            steplog.warn(f"the server has not loaded weights step {needed} within {self.args.server_wait:g}s of "
                         f"their publication (serving step {served_step(self.weights_dir)}): sampling with "
                         "what it serves, without waiting for it again until it catches up (off_policy shows "
                         "by how much)")
        self.server_lags = not caught_up

    def request_body(self) -> dict:
        args = self.args
        body = {"model": self.model, "n": args.group_size, "max_tokens": args.max_tokens,
                **neutral_sampling(args.temperature), "return_token_ids": True}
        if not self.gsm8k:
            body["logprobs"] = 0  # the tiny trainer uses the server's log-probs; the HF one recomputes them
        if args.stop:
            body["stop"] = args.stop
        return body

    def samples(self, problems: list[task.Problem], choices: list[dict]) -> list[rollouts.Sample]:
        """The scored choices with their group-relative advantages (choices ordered prompt-major)."""
        g = self.args.group_size
        groups = [(p, choices[i * g:(i + 1) * g]) for i, p in enumerate(problems)]
        rewards = [[self.score(c["text"], p.answer) for c in group] for p, group in groups]
        advantages = grpo.group_advantages(rewards)
        out = []
        for i, (p, group) in enumerate(groups):
            for j, c in enumerate(group):
                lp = c["logprobs"] or {}
                w: reloads.Label = c.get("weights") or reloads.Label(served_step(self.weights_dir))
                out.append(rollouts.Sample(
                    prompt=p.prompt, completion=c["text"], tokens=lp.get("tokens", []),
                    logprobs=lp.get("token_logprobs", []), reward=rewards[i][j],
                    advantage=advantages[i][j], group=i, **choice_fields(c), weights_step=w.step,
                    weights_straddled=w.straddled, weights_mixed=w.mixed))
        if not self.warned_no_ids and any(s.completion_ids is None for s in out):
            self.warned_no_ids = True
            steplog.warn(f"{self.base} returned no token_ids for return_token_ids (SGLang before 0.5.17 ignores the "
                         "field): the trainer re-tokenises the completion text, which can give other ids than "
                         "were sampled; SGLang >= 0.5.17 or vLLM return them")
        return out

    def step(self, step: int) -> None:
        """Sample, score and publish the rollouts of ``step``, and log its ``Step N/T`` line."""
        args = self.args
        self.chaos.step(step)
        t0 = time.monotonic()
        self.await_weights(step)
        wait_s = time.monotonic() - t0
        problems = task.problems_for_step(args.seed, step, args.batch_size, self.gsm8k)
        t1 = time.monotonic()
        with self.watch:
            resp = complete(f"{self.base}/v1/completions", self.request_body(), [p.prompt for p in problems],
                            args.concurrency, f"step {step}", args.give_up_after, args.request_timeout,
                            self.weights_dir)
        gen_s = time.monotonic() - t1
        samples = self.samples(problems, resp["choices"])
        sampled_with = min(s.weights_step or 0 for s in samples)
        rollouts.write_step(args.out, step, samples, {
            "temperature": args.temperature, "weights_step": sampled_with, "model": self.model})
        tokens = resp.get("usage", {}).get("completion_tokens", 0)
        steplog.log_step(step, args.steps, {
            "reward": sum(s.reward for s in samples) / len(samples),
            "solved_groups": len({s.group for s in samples if s.reward > 0}) / len(problems),
            "weights_step": sampled_with,
            **rollouts.staleness(samples, step, sampled_with),
            "wait_s": wait_s,
            "gen_s": gen_s,
            "tokens_per_s": tokens / gen_s if gen_s > 0 else 0.0,
        })


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True, help="base URL of an OpenAI-compatible server")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=64, help="prompts per step")
    ap.add_argument("--group-size", type=int, default=16, help="completions per prompt")
    ap.add_argument("--max-tokens", type=int, default=1)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--async-level", type=int, default=1)
    ap.add_argument("--server-wait", type=float, default=60.0,
                    help="seconds to wait, after the weights a step needs are published, for the server to load "
                         "them (only while it has kept up: one that lags is not waited for again until it catches "
                         "up, and one that never loaded any is never waited for)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=None, help="model name; default: the first from /v1/models")
    ap.add_argument("--give-up-after", type=float, default=300.0,
                    help="seconds the server may stay unreachable before this process fails")
    ap.add_argument("--chaos", default=None, help="crash@N,hang@N,oom@N,exit0@N,slow@N")
    ap.add_argument("--task", choices=("add", "gsm8k"), default="add",
                    help="add: the synthetic digit task; gsm8k: problems from --data, final-number reward")
    ap.add_argument("--data", default=None, help="gsm8k: JSONL file (question/answer) or a datasets name")
    ap.add_argument("--split", default="train", help="gsm8k: datasets split")
    ap.add_argument("--tokenizer", default=None,
                    help="gsm8k: wrap prompts in this tokenizer's chat template (needs transformers)")
    ap.add_argument("--stop", action="append", default=None, help="stop string sent with requests (repeatable)")
    ap.add_argument("--concurrency", type=int, default=0,
                    help="0: one request per step with every prompt; K: one request per prompt, K in flight")
    ap.add_argument("--request-timeout", type=float, default=60.0,
                    help="seconds one completion request may take (long generations need more)")
    args = ap.parse_args(argv)
    if args.task == "gsm8k" and not args.data:
        ap.error("--task gsm8k needs --data")
    base = args.server.rstrip("/")
    try:
        chaos = Chaos(args.chaos, args.out / "chaos", "orchestrator")
        gsm8k, score = load_task(args)
    except ValueError as exc:
        ap.error(str(exc))
    models = call_with_retry(f"{base}/v1/models", None, "startup", args.give_up_after)
    model = args.model or models["data"][0]["id"]
    done = rollouts.published_steps(args.out)
    first = (done[-1] + 1) if done else 1
    steplog.log(f"Orchestrator: model {model} at {base}; starting at step {first}/{args.steps}, "
                f"async level {args.async_level}")
    run = Orchestrator(args, base, model, chaos, gsm8k, score)
    for step in range(first, args.steps + 1):
        run.step(step)
    steplog.log(f"Orchestrator finished: {args.steps} steps of rollouts written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

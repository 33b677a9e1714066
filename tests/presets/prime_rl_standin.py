"""Stand-ins for prime-rl's processes, run with the preset's own argv after the role:

    python prime_rl_standin.py ROLE <the preset's command, e.g. uv run orchestrator @ DIR/configs/orchestrator.json>

They do what rlsup's restart and resume decisions depend on, on the paths prime-rl uses
(src/prime_rl/utils/pathing.py at 559b447): `configs` writes <output_dir>/<run.name>/configs/*.json as
`rl --dry-run` does; the others read the config after `@` (and fail if it is missing, as prime-rl's
`cli()` does), write what their real counterpart writes (the orchestrator rollouts/step_N and
checkpoints/step_N/orchestrator/progress.pt, the trainer broadcasts/step_N and
checkpoints/step_N/trainer/.metadata) and append one JSON line per start to <run_dir>/starts.jsonl.
They are not prime-rl: the preset's real commands are run by .ci/presets.sh where prime-rl is installed.
"""

from __future__ import annotations

import http.server
import json
import os
import sys
import threading
import time
from pathlib import Path


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def load(argv: list[str]) -> tuple[dict, Path]:
    path = Path(argv[argv.index("@") + 1])
    if not path.is_file():
        print(f"FileNotFoundError: config file {path} does not exist", flush=True)
        sys.exit(2)
    return json.loads(path.read_text()), path


def note(run_dir: Path, **fields: object) -> None:
    with open(run_dir / "starts.jsonl", "a") as f:
        f.write(json.dumps({"t": time.time(), **fields}) + "\n")


def step_dirs(d: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in d.glob("step_*")) if d.is_dir() else []


def configs(argv: list[str]) -> None:
    run_dir = Path(flag(argv, "--output-dir") or "outputs") / (flag(argv, "--run.name") or "auto-name")
    cfg = run_dir / "configs"
    (cfg / "envs" / "train").mkdir(parents=True, exist_ok=True)
    port = int(flag(argv, "--inference.server.port") or 8000)
    for name in ("inference", "orchestrator", "trainer"):
        (cfg / f"{name}.json").write_text(json.dumps({"output_dir": str(run_dir), "port": port}))
    (cfg / "envs" / "train" / "reverse-text.json").write_text(json.dumps({"output_dir": str(run_dir)}))
    note(run_dir, role="configs", resume=flag(argv, "--resume.step"), argv=argv)
    print("Dry run complete.", flush=True)


def inference(argv: list[str]) -> None:
    conf, _ = load(argv)

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", conf["port"]), Health)
    note(Path(conf["output_dir"]), role="inference")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    while True:
        time.sleep(3600)


def env_server(argv: list[str]) -> None:
    conf, _ = load(argv)
    note(Path(conf["output_dir"]), role="env-server")
    while True:
        time.sleep(3600)


def orchestrator(argv: list[str]) -> None:
    conf, _ = load(argv)
    run_dir = Path(conf["output_dir"])
    resume = flag(argv, "--resume.step")
    step = int(resume) if resume else 0
    attempt = os.environ.get("RLSUP_ATTEMPT", "?")
    note(run_dir, role="orchestrator", resume=resume, attempt=attempt,
         broadcasts=step_dirs(run_dir / "broadcasts"), rollouts=step_dirs(run_dir / "rollouts"))
    while True:  # one rollout batch ahead of the trainer, at once: the next step's batch is written first
        step += 1
        d = run_dir / "rollouts" / f"step_{step}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "writer").write_text(f"orchestrator attempt {attempt}\n")
        if step % 2 == 0:
            ck = run_dir / "checkpoints" / f"step_{step}" / "orchestrator"
            ck.mkdir(parents=True, exist_ok=True)
            (ck / "progress.pt").write_text("x")
        print(f"Step {step} | Reward 0.5", flush=True)
        time.sleep(0.5 if step < 6 else 3600)


def trainer(argv: list[str]) -> None:
    conf, _ = load(argv)
    run_dir = Path(conf["output_dir"])
    resume = flag(argv, "--resume.step")
    step = int(resume) if resume else 0
    attempt = os.environ.get("RLSUP_ATTEMPT", "?")
    note(run_dir, role="trainer", resume=resume, attempt=attempt,
         broadcasts=step_dirs(run_dir / "broadcasts"), rollouts=step_dirs(run_dir / "rollouts"))
    while True:
        step += 1
        while not (run_dir / "rollouts" / f"step_{step}").exists():  # its batch, as the real trainer waits
            time.sleep(0.05)
        b = run_dir / "broadcasts" / f"step_{step}"
        b.mkdir(parents=True, exist_ok=True)
        if step % 2 == 0:
            ck = run_dir / "checkpoints" / f"step_{step}" / "trainer"
            ck.mkdir(parents=True, exist_ok=True)
            (ck / ".metadata").write_text("x")
        print(f"Step {step} | Loss 0.1", flush=True)
        if step == 5 and attempt == "1":
            print("RuntimeError: CUDA error: an illegal memory access was encountered", flush=True)
            sys.exit(1)
        time.sleep(0.5 if step < 6 else 3600)


if __name__ == "__main__":
    role, rest = sys.argv[1], sys.argv[2:]
    {"configs": configs, "inference": inference, "env-server": env_server, "orchestrator": orchestrator,
     "trainer": trainer}[role](rest)

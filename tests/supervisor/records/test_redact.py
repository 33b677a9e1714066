"""Secrets redaction: env values, token arguments, bearer headers; no false masking of ordinary text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsup.supervisor.records.redact import (
    MASK,
    Redactor,
    _env_value_is_secret,
    argv_secrets,
    is_secret_name,
    looks_like_credential,
    redact_text,
    secret_values,
)

ENV = {"HF_TOKEN": "hf_abcdefgh123", "WANDB_API_KEY": "wk_123456", "DB_PASSWORD": "hunter22",
       "TOKENIZERS_PARALLELISM": "false", "MAX_NEW_TOKENS": "512", "SHORT_KEY": "ab", "HOME": "/root",
       "AWS_SECRET_ACCESS_KEY": "aws/secret+value", "GIT_AUTHOR_NAME": "someone"}


def redact_env(red: Redactor, env: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``env`` as ``red`` would show it: secret values become ``***``, other values are
    text-redacted (the rule for an environment; rlsup itself masks one inside redact_obj)."""
    return {k: (MASK if isinstance(v, str) and v and _env_value_is_secret(str(k), v) else
                red.redact_text(v) if isinstance(v, str) else v)
            for k, v in env.items()}


def test_secret_names() -> None:
    assert is_secret_name("HF_TOKEN") and is_secret_name("wandb_api_key") and is_secret_name("PGPASSWORD")
    assert is_secret_name("OPENAI_API_KEY") and is_secret_name("GOOGLE_APPLICATION_CREDENTIALS_JSON")
    for name in ("TOKENIZERS_PARALLELISM", "MAX_NEW_TOKENS", "HOME", "PATH", "GIT_AUTHOR_NAME", "HF_TOKEN_PATH"):
        assert not is_secret_name(name), name


def test_secret_values_skip_short_and_non_secret() -> None:
    assert secret_values(ENV) == {"hf_abcdefgh123", "wk_123456", "hunter22", "aws/secret+value"}


def test_redact_text_masks_known_values_longest_first() -> None:
    r = Redactor(["abcd1234", "abcd1234XYZ"])
    assert r.redact_text("x abcd1234XYZ y abcd1234 z") == "x *** y *** z"
    r = Redactor(secret_values(ENV))
    assert r.redact_text("login hf_abcdefgh123 failed; key=aws/secret+value") == "login *** failed; key=***"
    assert r.redact_text("") == ""


def test_patterns_without_known_values() -> None:
    cases = {
        "python x.py --api-key sk-12345 --max-tokens 512": "python x.py --api-key *** --max-tokens 512",
        "--hf-token=xyz123 --n 3": "--hf-token=*** --n 3",
        'curl -H "Authorization: Bearer abc.def.ghi"': 'curl -H "Authorization: Bearer ***"',
        "Authorization: Basic dXNlcjpwYXNz": "Authorization: Basic ***",
        "https://user:pw1234@host/x": "https://user:***@host/x",
        'api_key="sk-live-999" other': 'api_key="***" other',
        "HF_TOKEN=hf_zzzzzzzz python train.py": "HF_TOKEN=*** python train.py",
    }
    for text, want in cases.items():
        assert redact_text(text) == want, text


def test_ordinary_text_is_left_alone() -> None:
    for text in ("Step 12/100 | loss 0.31 | tokens/s 5123", "Generated token embeddings for 512 tokens",
                 "max_tokens=512 tokenizer=Qwen", "--tokenizer foo --max-tokens 256", "keyboard interrupt",
                 "KeyError: 'rewards'", "python -m sglang.launch_server --port 30000"):
        assert redact_text(text) == text, text


def test_redact_argv() -> None:
    r = Redactor(secret_values(ENV))
    argv = ["train", "--api-key", "sk-1", "--token=abc", "--flag", "--password", "--next", "hf_abcdefgh123"]
    assert r.redact_argv(argv) == ["train", "--api-key", "***", "--token=***", "--flag", "--password", "--next", "***"]


def test_redact_env() -> None:
    r = Redactor(secret_values(ENV))
    out = redact_env(r, {**ENV, "NOTE": "uses hf_abcdefgh123", "EMPTY_TOKEN": ""})
    assert out["HF_TOKEN"] == out["DB_PASSWORD"] == out["SHORT_KEY"] == "***"
    assert out["TOKENIZERS_PARALLELISM"] == "false" and out["HOME"] == "/root"
    assert out["NOTE"] == "uses ***" and out["EMPTY_TOKEN"] == ""


def test_redact_obj_on_events() -> None:
    r = Redactor(secret_values(ENV))
    started = {"kind": "started", "seq": 2, "pid": 12, "resume": None,
               "command": ["python", "train.py", "--api-key", "sk-live", "--steps", "100"]}
    assert r.redact_obj(started)["command"] == ["python", "train.py", "--api-key", "***", "--steps", "100"]
    exited = {"kind": "exited", "exit_code": 1, "diagnosis": {"evidence": ["401: token hf_abcdefgh123 invalid"],
                                                             "step": 3}, "api_key": "abcdefg"}
    out = r.redact_obj(exited)
    assert out["diagnosis"] == {"evidence": ["401: token *** invalid"], "step": 3}
    assert out["api_key"] == "***" and out["exit_code"] == 1
    assert exited["diagnosis"]["evidence"] == ["401: token hf_abcdefgh123 invalid"]  # a copy, input untouched
    assert r.redact_obj(("a", 1, None)) == ("a", 1, None)


# ------------------------------------------------------------------------------- by value (issue 16, item 6)

# Shaped like the real thing (random bodies, not real credentials).
GH = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
RANDOM = "Xk9fT2mQ8rL4vB7nZ1cW6yH3"  # no prefix, mixed case and digits: looks like a credential
TOKENS = [
    GH, HF, "gho_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV",
    "glpat-AbCdEfGh12345678IjKl", "sk-proj-AbCdEfGhIjKlMnOp1234567890", "sk-ant-api03-AbCdEfGhIjKl_MnOp1234567890-xyz",
    "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "xoxp-1234567890-1234567890123-AbCdEfGhIjKl",
    "AKIAIOSFODNN7EXAMPLE", "ASIAIOSFODNN7EXAMPLE", "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "ya29.a0AfH6SMBx1234567890abcdefghij", "npm_" + "a1B2" * 9,
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
]
ORDINARY = [
    "Step 12/100 | loss 0.31 | reward 0.5 | tokens/s 5123", "#token: 1234, token usage: 0.43",
    "loading Qwen/Qwen2.5-0.5B-Instruct", "-m meta-llama/Llama-3.1-8B-Instruct", "-m Qwen2.5-0.5B-Instruct-GPTQ-Int4",
    "commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39", "git log -c 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "run 123e4567-e89b-12d3-a456-426614174000",
    "hf_hub_download failed; hf_transfer enabled", "pip install sk-learn scikit-learn",
    "--max-tokens 512 --tokenizer Qwen/Qwen2.5 --key-file /etc/ssl/key.pem --token $HF_TOKEN --auth-type basic",
    "ssh -p 22 host", "torchrun -n 4 --nproc-per-node 8", "INFO 11-23 16:01:02 [engine.py:123] throughput: 1.0 tokens/s",
    "/workspace/outputs/checkpoints/step_100/model.safetensors", "--token 5", "api_key=None", "use_auth_token=True",
    "AKIAFOO", "s3://bucket/path/model-00001-of-00002.safetensors", "epoch=3 step=120 lr=1e-05 seed=1234567",
    "WANDB_RUN_ID=3kf9x2ab", "run_name: grpo-qwen-0.5b-lr1e-6", "-o outputs/run_2024_11_23_abcdefgh",
    "tensor([[0.1, 0.2]], device='cuda:0')", "sk-my-model-v2-checkpoint-final", "session: main",
]


@pytest.mark.parametrize("token", TOKENS)
def test_token_formats_are_masked_anywhere(token: str) -> None:
    for text, want in [(token, MASK), (f"echo {token} done", f"echo {MASK} done"),
                       (f'{{"value": "{token}"}}', f'{{"value": "{MASK}"}}'), (f"x={token}", f"x={MASK}")]:
        assert redact_text(text) == want, text
    assert looks_like_credential(token)
    assert secret_values({"INNOCENT_NAME": token}) == {token}  # by value, whatever the variable is called


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_values_are_never_masked(text: str) -> None:
    assert redact_text(text) == text
    assert Redactor.for_run([ENV], []).redact_lines([text]) == [text]


def test_github_pat_and_session_cookie_by_name() -> None:
    env = {"GITHUB_PAT": "abc123def456", "SESSION_COOKIE": "sid=abc123", "GH_PAT_TOKEN": "pppp1111",
           "PATH": "/usr/bin", "PATTERN": "x+y", "COMPAT_MODE": "legacy", "GITHUB_PAT_FILE": "/run/secrets/pat"}
    assert is_secret_name("GITHUB_PAT") and is_secret_name("SESSION_COOKIE") and is_secret_name("GH_PAT_TOKEN")
    for name in ("PATH", "PATTERN", "COMPAT_MODE", "GITHUB_PAT_FILE", "XPAT"):
        assert not is_secret_name(name), name
    assert secret_values(env) == {"abc123def456", "sid=abc123", "pppp1111"}
    red = Redactor.for_run([env], [])
    out = red.redact_lines(["export GITHUB_PAT=abc123def456", "curl -b sid=abc123 https://x", "PATH=/usr/bin"])
    assert out == ["export GITHUB_PAT=***", "curl -b *** https://x", "PATH=/usr/bin"]
    assert redact_env(red, env)["GITHUB_PAT"] == MASK and redact_env(red, env)["PATTERN"] == "x+y"


def test_session_named_variables_only_when_they_look_like_credentials() -> None:
    env = {"SESSION": "main", "TMUX_SESSION": "train-3", "SESSION_ID": RANDOM, "WANDB_SESSION_NAME": "grpo"}
    assert secret_values(env) == {RANDOM}
    out = redact_env(Redactor.for_run([env], []), env)
    assert out == {"SESSION": "main", "TMUX_SESSION": "train-3", "SESSION_ID": MASK, "WANDB_SESSION_NAME": "grpo"}


def test_settings_and_paths_under_secret_names_are_not_secrets(tmp_path) -> None:
    creds = tmp_path / "creds.json"
    creds.write_text("{}")
    env = {"USE_AUTH_TOKEN": "true", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1", "API_KEY_REQUIRED": "false",
           "GOOGLE_APPLICATION_CREDENTIALS": str(creds), "NUM_TOKEN_SLOTS": "4096", "DB_PASSWORD": "hunter22"}
    # A setting masked "wherever it appears" would mask every `true` and `4096` in the logs.
    assert secret_values(env) == {"hunter22"}


@pytest.mark.parametrize("text, want", [
    ("run --github-pat abc123def456 --steps 5", "run --github-pat *** --steps 5"),
    ("run --github-pat=abc123def456", "run --github-pat=***"),
    ('run --token "two words"', 'run --token "***"'),
    (f"curl -k {RANDOM} https://x", f"curl -k {MASK} https://x"),
    ("curl -k https://x", "curl -k https://x"),
    ("tar -f model.tar -C /tmp", "tar -f model.tar -C /tmp"),
    ("export SESSION_COOKIE=abc123", "export SESSION_COOKIE=***"),
    ("Cookie: session=abc; theme=dark", "Cookie: ***"),
    ("Set-Cookie: sid=31d4d96e407aad42; Path=/", "Set-Cookie: ***"),
    ('headers={"Authorization": "Bearer abc.def.ghi"}', 'headers={"Authorization": "Bearer ***"}'),
    ("Proxy-Authorization: Basic dXNlcjpwYXNz", "Proxy-Authorization: Basic ***"),
    ("X-Api-Key: abcd1234efgh", "X-Api-Key: ***"),
    ('{"password": "hunter22", "user": "bob"}', '{"password": "***", "user": "bob"}'),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key = ***"),
    ("MY_SERVICE_KEY=zzzz9999", "MY_SERVICE_KEY=***"),
    ("\x1b[32mHF_TOKEN=abcdef\x1b[0m ok", "\x1b[32mHF_TOKEN=***\x1b[0m ok"),
])
def test_credentials_by_context(text: str, want: str) -> None:
    assert redact_text(text) == want


def test_argv_secrets_by_position() -> None:
    argv = ["tool", "--github-pat", "abc123def456", "-k", RANDOM, "-k", "plain", GH, "--token=main", "--auth", "basic",
            "-H", "Authorization: Bearer abcdef12345678", "--key", "/etc/ssl/key.pem", "--api-key", "$OPENAI_API_KEY"]
    red = Redactor()
    assert red.redact_argv(argv) == [
        "tool", "--github-pat", MASK, "-k", MASK, "-k", "plain", MASK, "--token=***", "--auth", "basic",
        "-H", "Authorization: Bearer ***", "--key", "/etc/ssl/key.pem", "--api-key", "$OPENAI_API_KEY"]
    # What is distinctive is masked wherever it shows up later; "main" would hide ordinary text.
    assert argv_secrets(argv) == {"abc123def456", RANDOM, GH, "abcdef12345678"}


def test_for_run_masks_command_line_secrets_in_later_output() -> None:
    red = Redactor.for_run([{"HOME": "/root"}], [["tool", "--github-pat", "abc123def456"], ["x", "-k", RANDOM]])
    lines = ["starting", "using pat abc123def456 for clone", f"key={RANDOM[:8]} (prefix only)", f"k {RANDOM}"]
    assert red.redact_lines(lines) == ["starting", "using pat *** for clone", f"key={RANDOM[:8]} (prefix only)",
                                       f"k {MASK}"]


def test_events_with_env_and_argv() -> None:
    env = {"GITHUB_PAT": "abc123def456", "SESSION_COOKIE": "sid=zz99", "HOME": "/root"}
    red = Redactor.for_run([env], [])
    started = {"kind": "started", "seq": 2, "pid": 12, "resume": None,
               "command": ["python", "train.py", "--github-pat", "abc123def456", "-k", RANDOM, "--steps", "100"],
               "env": env, "message": "clone with abc123def456"}
    out = red.redact_obj(started)
    assert out["command"] == ["python", "train.py", "--github-pat", MASK, "-k", MASK, "--steps", "100"]
    assert out["env"] == {"GITHUB_PAT": MASK, "SESSION_COOKIE": MASK, "HOME": "/root"}
    assert out["message"] == "clone with ***" and out["pid"] == 12
    assert red.redact_obj(started) == out
    assert "abc123def456" not in repr(out) and RANDOM not in repr(out)


def test_known_values_that_overlap_are_masked_whole() -> None:
    r = Redactor(["abcd1234", "1234XYZW", "zzzzQQQQ"])
    assert r.redact_text("x abcd1234XYZW y") == "x *** y"
    assert r.redact_text("zzzzQQQQzzzzQQQQ") == "***"


def test_multi_line_secret_is_masked_line_by_line() -> None:
    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----"
    red = Redactor.for_run([{"SSH_PRIVATE_KEY": pem}], [])
    assert red.redact_lines(["read MIIEvQIBADANBgkqhkiG9w0BAQEFAASC ok"]) == ["read *** ok"]
    assert "MIIEv" not in red.redact_text(f"key was {pem}")


def test_redact_lines_returns_the_same_list_when_nothing_matches() -> None:
    red = Redactor.for_run([ENV], [])
    lines = [f"Step {i}/100 | loss 0.{i} | #token: {i * 7}" for i in range(1000)]
    assert red.redact_lines(lines) is lines
    assert red.redact_lines([]) == []
    lines[500] = "login hf_abcdefgh123 failed"
    out = red.redact_lines(lines)
    assert out is not lines and len(out) == 1000 and out[500] == "login *** failed" and out[499] == lines[499]
    assert lines[500] == "login hf_abcdefgh123 failed"  # the input is not modified
    # A line holding "\n" itself (not from the log path) still comes back one for one.
    assert red.redact_lines(["a\nHF_TOKEN=abcdef", "b"]) == ["a\nHF_TOKEN=***", "b"]


_PIECES = st.sampled_from(TOKENS + ORDINARY + [
    "HF_TOKEN=", "--api-key ", "-k ", RANDOM, " ", "=", ":", '"', "'", "-", "_", "hf_", "ghp_", "Bearer ",
    "Authorization: ", "Cookie: ", "https://u:", "@h", "\x1b[0m", "password", "***", "hunter22", "abcd1234"])
_LINES = st.lists(st.lists(_PIECES, max_size=6).map("".join), max_size=8)


@settings(max_examples=300, deadline=None, database=None)
@given(lines=_LINES)
def test_batched_redaction_equals_line_by_line(lines: list[str]) -> None:
    red = Redactor(["hunter22", "abcd1234", RANDOM])
    out = red.redact_lines(lines)
    assert out == [red.redact_text(x) for x in lines]
    assert len(out) == len(lines)
    assert (out is lines) == (out == lines) or not lines
    for line in out:
        assert "hunter22" not in line and RANDOM not in line


def test_the_pattern_is_compiled_when_text_is_first_searched(monkeypatch) -> None:
    """A compile costs about 0.2 s of CPU: the processes that import the redactor and never mask (the
    foreground of `rlsup up`, most CLI commands) must not pay it; one that masks pays it once."""
    import subprocess
    import sys

    from rlsup.supervisor.records import redact

    built: list[tuple[str, ...]] = []
    real = redact._build
    monkeypatch.setattr(redact, "_build", lambda known: built.append(tuple(known)) or real(known))
    r = redact.Redactor(["s3cr3t-value-for-the-test"])
    assert built == []
    assert "s3cr3t-value" not in r.redact_text("x s3cr3t-value-for-the-test y")  # by the parts it needs
    assert built == []
    assert "s3cr3t-value" not in r.redact_lines(["x s3cr3t-value-for-the-test y"])[0]  # the log path: the whole
    assert r.redact_lines(["again, nothing to mask"]) == ["again, nothing to mask"]
    assert r.redact_text("again, nothing to mask") == "again, nothing to mask"
    assert len(built) == 1

    code = ("import rlsup.supervisor.cli.main, rlsup.supervisor.cli.run_cmds, rlsup.supervisor.rundir.archive\n"
            "from rlsup.supervisor.records import redact\nprint(redact._pattern_only.cache_info().currsize)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "0", out.stdout + out.stderr

"""Secrets redaction: env values, token arguments, bearer headers; no false masking of ordinary text."""

from __future__ import annotations

from rlsup.supervisor.redact import Redactor, is_secret_name, redact_text, secret_values

ENV = {"HF_TOKEN": "hf_abcdefgh123", "WANDB_API_KEY": "wk_123456", "DB_PASSWORD": "hunter22",
       "TOKENIZERS_PARALLELISM": "false", "MAX_NEW_TOKENS": "512", "SHORT_KEY": "ab", "HOME": "/root",
       "AWS_SECRET_ACCESS_KEY": "aws/secret+value", "GIT_AUTHOR_NAME": "someone"}


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
    out = r.redact_env({**ENV, "NOTE": "uses hf_abcdefgh123", "EMPTY_TOKEN": ""})
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

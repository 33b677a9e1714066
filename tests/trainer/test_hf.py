"""The Hugging Face path (rlsup.trainer.hf) on CPU with a tiny random GPT-2 built here: no download."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from safetensors.torch import load_file  # noqa: E402

from rlsup.supervisor.rundir.checkpoints import discover  # noqa: E402
from rlsup.trainer import hf, rollouts, task, train  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "gsm8k_tiny.jsonl"
EOS = "<|endoftext|>"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 1-layer GPT-2 and a byte-level BPE tokenizer trained on the fixture."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [json.loads(line)["question"] + " " + json.loads(line)["answer"]
              for line in FIXTURE.read_text().splitlines()] + [hf.PROMPT_TEMPLATE]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=320, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(fast), n_positions=256, n_embd=32, n_layer=1, n_head=2,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=fast.eos_token_id, eos_token_id=fast.eos_token_id)
    path = tmp_path_factory.mktemp("tiny-gpt2")
    GPT2LMHeadModel(config).save_pretrained(path, safe_serialization=True)
    fast.save_pretrained(path)
    return path


# ------------------------------------------------------------------------------------------ data


@pytest.mark.parametrize(("text", "want"), [
    ("so 3 + 4 = 7.\n#### 7", "7"),
    ("#### 1,200", "1200"),
    ("The answer is $18.00", "18"),
    ("#### -3.50 and then 99", "-3.5"),
    ("no number here", None),
    ("#### 5\nQuestion: a new one with 42", "5"),
])
def test_final_number(text: str, want: str | None) -> None:
    assert hf.final_number(text) == want


def test_reward_is_exact_final_number_match() -> None:
    answer = "2 * 12 = <<2*12=24>>24 pens.\n#### 24"
    assert hf.reward("2 boxes of 12 make 24 #### 24", answer) == 1.0
    assert hf.reward("The answer is 24.", answer) == 1.0
    assert hf.reward("#### 25", answer) == 0.0
    assert hf.reward("", answer) == 0.0


def test_load_problems_from_jsonl(tmp_path: Path) -> None:
    problems = hf.load_problems(str(FIXTURE))
    assert len(problems) == 4
    assert problems[0].prompt.endswith("Answer:") and "Ana has 3 apples" in problems[0].prompt
    assert hf.final_number(problems[2].answer) == "300"
    assert task.problems_for_step(0, 5, 3, problems) == task.problems_for_step(0, 5, 3, problems)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "no final number"}\n')
    with pytest.raises(ValueError, match="no final number"):
        hf.load_problems(str(bad))


# ------------------------------------------------------------------------------------ generation


def test_generator_samples_and_stops(tiny_model: Path) -> None:
    gen = hf.HFGenerator(str(tiny_model), "cpu")
    prompts = [gen.encode("Question: Ana has 3 apples"), gen.encode("#### 7")]
    g = torch.Generator().manual_seed(0)
    ids, lps, tops, finish = gen.generate(prompts, 6, [1.0, 0.0], g)
    for row_ids, row_lps, row_top, fin in zip(ids, lps, tops, finish, strict=True):
        assert len(row_ids) == len(row_lps) == len(row_top) <= 6
        assert fin == ("length" if len(row_ids) == 6 else "stop")
        assert all(lp <= 0.0 for lp in row_lps)
        assert gen.tokenizer.eos_token_id not in row_ids
    # greedy (temperature 0) is deterministic
    again = gen.generate([prompts[1]], 6, [0.0], torch.Generator().manual_seed(1))
    assert again[0][0] == ids[1]


# -------------------------------------------------------------------------------------- training


def _write_rollouts(out: Path, steps: int) -> None:
    problems = hf.load_problems(str(FIXTURE))
    for step in range(1, steps + 1):
        samples = []
        for gi, p in enumerate(task.problems_for_step(0, step, 2, problems)):
            want = hf.final_number(p.answer)
            texts = [f" so #### {want}", " #### 0", f" it is {want}", " I do not know"]
            rewards = [hf.reward(t, p.answer) for t in texts]
            mean = sum(rewards) / len(rewards)
            samples += [rollouts.Sample(prompt=p.prompt, completion=t, tokens=[], logprobs=[], reward=r,
                                        advantage=r - mean, group=gi) for t, r in zip(texts, rewards, strict=True)]
        rollouts.write_step(out, step, samples, {"temperature": 1.0, "weights_step": step - 1})


def _tensors(d: Path) -> dict[str, torch.Tensor]:
    return load_file(str(d / "model.safetensors"))


def test_train_publishes_safetensors_checkpoints_and_resumes_exactly(
        tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    _write_rollouts(out, 3)
    common = ["--out", str(out), "--steps", "3", "--model", str(tiny_model), "--ckpt-every", "2",
              "--micro-batch", "3", "--max-seq-len", "128", "--lr", "1e-2", "--device", "cpu"]
    assert train.main(common) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("Step ")]
    assert [ln.split(" | ")[0] for ln in lines] == ["Step 1/3", "Step 2/3", "Step 3/3"]
    assert all("| trained 8 |" in ln for ln in lines)  # every sample has a non-zero advantage

    published = out / "weights" / "step_3"
    for name in ("model.safetensors", "config.json", "tokenizer.json", "meta.json", "STABLE"):
        assert (published / name).exists(), name
    # No server: nothing loaded the weights, so latest.json (what the server serves) is not written;
    # a (re)started server still finds the newest published directory.
    assert not (out / "weights" / "latest.json").exists()
    assert hf.latest_model_path(out / "weights", "fallback") == str(published)
    start, end = _tensors(out / "weights" / "step_1"), _tensors(published)
    assert any(not torch.equal(start[k], end[k]) for k in start), "training did not change the weights"
    assert not list((out / "weights").glob(".*")), "temp dirs left behind"

    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_2", "step_3"]
    found = discover(out / "checkpoints", "prime-rl")  # what `resume: {layout: prime-rl}` in a40.yaml reads
    assert found.latest is not None and found.latest.step == 3, found
    for name in ("model/model.safetensors", "optimizer.pt", "trainer_state.pt", "STABLE"):
        assert (out / "checkpoints" / "step_2" / name).exists(), name

    # Resume from step 2: step 3 is recomputed bit-identically on CPU.
    first = {k: v.clone() for k, v in end.items()}
    shutil.rmtree(out / "checkpoints" / "step_3")
    assert train.main([*common, "--resume-step", "2"]) == 0
    text = capsys.readouterr().out
    assert "Resumed from" in text and "Step 3/3" in text and "Step 1/3" not in text
    resumed = _tensors(out / "weights" / "step_3")
    assert all(torch.equal(first[k], resumed[k]) for k in first)


def test_resume_from_incomplete_checkpoint_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    (tmp_path / "checkpoints" / "step_2" / "model").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="STABLE"):
        train.main(["--out", str(tmp_path), "--model", str(tiny_model), "--resume-step", "2", "--device", "cpu"])


def test_latest_cli_falls_back_to_default(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "rlsup.trainer.hf", "latest", str(tmp_path / "weights"),
                        "--default", "Qwen/Qwen2.5-0.5B-Instruct"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Qwen/Qwen2.5-0.5B-Instruct"


# ----------------------------------------------------------------------------------- whole stack


@pytest.mark.slow
def test_stack_on_a_tiny_hf_model(tiny_model: Path, tmp_path: Path) -> None:
    """Server, orchestrator (gsm8k task, per-prompt requests) and trainer as real processes."""
    from test_trainer_stack import _free_port, _module, _wait_healthy

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    out = tmp_path / "out"
    server = _module("inference", "--port", str(port), "--weights-dir", str(out / "weights"),
                     "--model", str(tiny_model), "--device", "cpu", "--total-steps", "2",
                     log=tmp_path / "server.log")
    try:
        _wait_healthy(base, server, timeout=90)
        orch = _module("orchestrator", "--server", base, "--out", str(out), "--steps", "2", "--task", "gsm8k",
                       "--data", str(FIXTURE), "--batch-size", "2", "--group-size", "4", "--max-tokens", "8",
                       "--concurrency", "2", "--async-level", "0", log=tmp_path / "orch.log")
        trainer = _module("train", "--server", base, "--out", str(out), "--steps", "2", "--model", str(tiny_model),
                          "--device", "cpu", "--micro-batch", "4", "--max-seq-len", "160", "--ckpt-every", "1",
                          log=tmp_path / "trainer.log")
        assert trainer.wait(timeout=120) == 0, (tmp_path / "trainer.log").read_text()
        assert orch.wait(timeout=30) == 0, (tmp_path / "orch.log").read_text()
    finally:
        server.terminate()
        server.wait(timeout=10)
    samples, meta = rollouts.read_step(out, 2)
    assert len(samples) == 8 and meta["weights_step"] == 1  # async level 0: sampled with step-1 weights
    # the sampled ids came back with the rollouts (return_token_ids) and are what the trainer trains
    assert all(s.completion_ids is not None and s.prompt_ids for s in samples)
    assert all(s.finish_reason in ("stop", "length") for s in samples)
    latest = json.loads((out / "weights" / "latest.json").read_text())
    assert latest["step"] == 2 and latest["server_model"] == str(out / "weights" / "step_2")
    assert latest["engine"].startswith("rlsup rlsup-")
    server_log = (tmp_path / "server.log").read_text()
    assert "Step 2/2" in server_log, server_log  # the server loaded the trainer's step-2 safetensors
    assert (out / "checkpoints" / "step_2" / "STABLE").exists()


# ------------------------------------------------------------------------------- issue 17: HF path


def test_published_config_says_bf16_on_every_device(tiny_model: Path, tmp_path: Path) -> None:
    """`--dtype auto` reads config.json's dtype: a published dir must not say float32. SGLang serves float32
    configs in float16 (python/sglang/srt/configs/model_config.py _get_and_verify_dtype, read in 0.4.6, 0.5.2,
    0.5.12 and 0.5.23), reading the config's `torch_dtype` (0.4.6) or `dtype` (0.5.23): both must say bf16."""
    out = tmp_path / "out"
    _write_rollouts(out, 1)
    assert train.main(["--out", str(out), "--steps", "1", "--model", str(tiny_model), "--device", "cpu",
                       "--micro-batch", "4", "--max-seq-len", "128"]) == 0
    for step in (0, 1):
        d = out / "weights" / f"step_{step}"
        cfg = json.loads((d / "config.json").read_text())
        assert cfg.get("dtype") == cfg.get("torch_dtype") == "bfloat16", cfg
        assert {t.dtype for t in _tensors(d).values()} == {torch.bfloat16}
    # the checkpoint keeps the fp32 master weights (exact resume) and says so
    ck = json.loads((out / "checkpoints" / "step_1" / "model" / "config.json").read_text())
    assert ck.get("dtype", ck.get("torch_dtype")) == "float32"
    assert {t.dtype for t in load_file(str(out / "checkpoints" / "step_1" / "model" / "model.safetensors")).values()} \
        == {torch.float32}


def test_trained_ids_are_the_sampled_ids_plus_eos_on_stop(tiny_model: Path) -> None:
    tok = hf.load_tokenizer(str(tiny_model))
    eos = tok.eos_token_id
    prompt_ids = tok("Question: Ana has 3 apples", add_special_tokens=False)["input_ids"]
    text = " #### 7"
    retok = tok(text, add_special_tokens=False)["input_ids"]
    # A server may sample a different segmentation of the same text: the sampled ids are the truth.
    sampled = [i for t in text for i in tok(t, add_special_tokens=False)["input_ids"]]
    assert sampled != retok and tok.decode(sampled) == tok.decode(retok)
    base = dict(prompt="Question: Ana has 3 apples", completion=text, tokens=[], logprobs=[], reward=1.0,
                advantage=0.5, group=0, prompt_ids=prompt_ids, completion_ids=sampled)
    stop = rollouts.Sample(**base, finish_reason="stop", stop_reason=None)  # stopped on EOS
    length = rollouts.Sample(**base, finish_reason="length")  # cut off: no EOS was sampled
    stop_string = rollouts.Sample(**base, finish_reason="stop", stop_reason="\n\n")  # the request's stop string
    old = rollouts.Sample(**{k: v for k, v in base.items() if k not in ("prompt_ids", "completion_ids")})
    b = hf.tokenize_samples(tok, [stop, length, stop_string, old], 128)
    got = [seq[start:] for seq, start in zip(b.input_ids, b.starts, strict=True)]
    assert got[0] == sampled + [eos]
    assert got[1] == sampled and got[2] == sampled
    assert got[3] == retok  # rollouts without server ids: re-tokenised as before
    assert b.input_ids[0][: b.starts[0]] == prompt_ids
    # rollouts written and read back keep the fields
    assert rollouts.Sample(**json.loads(json.dumps(stop.__dict__))) == stop

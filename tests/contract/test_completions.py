"""Completions as each engine version returns them (servers.py cites the upstream fields) -> the ids the
trainer trains: what the server sampled, ending with the token that stopped it, never a token it did not
sample."""

from __future__ import annotations

import pytest
from servers import EngineServer

from rlsup.trainer import hf, orchestrator, rollouts

CH_S, CH_T, CH_O, CH_P = (ord(c) for c in "stop")


class CodePointTokenizer:
    """Re-tokenises text one code point per id (what the trainer falls back to without server ids)."""

    eos_token_id = 0

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [ord(c) for c in text]}


# (engine, version, the id the server ends a completion with): vLLM's EOS is the tokenizer's (stop_reason
# None); SGLang's is 2 here, an EOS of the generation config that is not the tokenizer's eos_token_id (Qwen2.5
# Instruct: <|endoftext|> next to <|im_end|>), reported as matched_stop 2.
ENGINES = [("vllm", "0.10.2", 0), ("vllm", "0.33.0", 0), ("sglang", "0.5.16", 2), ("sglang", "0.5.17", 2),
           ("sglang", "0.5.23", 2)]


def _trained(kind: str, version: str, eos: int, **body: object) -> tuple[list[list[int]], list[dict]]:
    s = EngineServer(kind, version, eos=eos)
    try:
        resp = orchestrator.complete(f"{s.url}/v1/completions",
                                     {"model": "policy", "n": 2, "return_token_ids": True, **body},
                                     ["ab", "cd"], concurrency=2, what="test", give_up_after=5, timeout=5)
    finally:
        s.close()
    fields = [orchestrator.choice_fields(c) for c in resp["choices"]]
    samples = [rollouts.Sample(prompt="p", completion=c["text"], tokens=[], logprobs=[], reward=0.0,
                               advantage=0.0, group=0, **f) for c, f in zip(resp["choices"], fields, strict=True)]
    return [hf.completion_ids(CodePointTokenizer(), x) for x in samples], fields


@pytest.mark.parametrize(("kind", "version", "eos"), ENGINES, ids=lambda v: str(v))
def test_stop_on_eos_trains_the_sampled_eos_once(kind: str, version: str, eos: int) -> None:
    trained, fields = _trained(kind, version, eos, max_tokens=16)
    assert trained == [[CH_S, CH_T, CH_O, CH_P, eos]] * 4
    has_ids = not (kind == "sglang" and version == "0.5.16")  # return_token_ids is a field from 0.5.17
    assert all((f["completion_ids"] is not None) == has_ids for f in fields)
    if has_ids:
        assert [f["prompt_ids"] for f in fields] == [[ord("a"), ord("b")]] * 2 + [[ord("c"), ord("d")]] * 2


@pytest.mark.parametrize(("kind", "version", "eos"), ENGINES, ids=lambda v: str(v))
def test_stop_string_and_length_add_no_token(kind: str, version: str, eos: int) -> None:
    trained, fields = _trained(kind, version, eos, max_tokens=16, stop=["p"])
    assert {f["stop_reason"] for f in fields} == {"p"} and {f["finish_reason"] for f in fields} == {"stop"}
    # the server's ids run through the stop string; the text (and so its re-tokenisation) stops before it
    assert trained == [[CH_S, CH_T, CH_O] if fields[0]["completion_ids"] is None else [CH_S, CH_T, CH_O, CH_P]] * 4
    trained, fields = _trained(kind, version, eos, max_tokens=3)
    assert {f["finish_reason"] for f in fields} == {"length"} and trained == [[CH_S, CH_T, CH_O]] * 4

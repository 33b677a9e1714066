"""The redactor searches a short text with the parts of its pattern the text needs (issue 44 item 3: the
whole pattern's compile, 70-80 ms, was most of the supervisor's start-up CPU after its imports). These
tests hold the parts to the whole pattern: the same spans over every corpus the redaction tests use, with
and without known secrets; and ordinary events are redacted without compiling the whole."""

from __future__ import annotations

import random
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from rlsup.supervisor.records import redact
from rlsup.supervisor.records.redact import Redactor
from tests.supervisor.records import test_redact_adversarial as adv
from tests.tier import examples

KNOWN = ["hunter22-secret", "s3cr3t:value=x", "abcd1234", "Bearer-ish_KEY", "AbC9xYz-Token_77"]


def _pair(secrets: list[str]) -> tuple[Redactor, Redactor]:
    return Redactor(secrets), Redactor(secrets)


def _texts() -> list[str]:
    rng = random.Random(44)
    out = list(adv.BENIGN) + [line for line, _ in adv.LEAKS]
    out += [" ".join(argv) for argv, _ in adv.ARGV_LEAKS] + [" ".join(a) for a in adv.BENIGN_ARGV]
    # other alphabets: re's case folding matches "pa\u017f\u017fword" (long s) and "api_\u212aey" (Kelvin sign)
    out += ["pa\u017f\u017fword: abcdefgh12", "api_\u212aey=abcdefgh12", "\u00e9t\u00e9 token: abcdefgh12", "caf\u00e9: 1"]
    for template in adv.TEMPLATES:
        for s in ["hunter22-secret", "ghp_" + "aB3" * 10, "x" * 12, "s3cr3t:value=x", "tok:en=Val-9"]:
            out.append(adv._line(template, s))
    # glued pieces: separators and names in every order, where anchors of different parts interleave
    for _ in range(2000):
        out.append("".join(rng.choice(["TOKEN=", "api_key: ", "https://u:", "@h ", "-k ", "--token ", "_", ":",
                                       "=", "-", "Bearer ", "hf_", "A", "J", "y", "eyJ", "AKIA", "abcd1234",
                                       "hunter22-secret", rng.choice(string.ascii_letters) * rng.randrange(1, 25),
                                       "ghp_aB3dE5gH7jK9mN1pQ3sT5vX7z", " ", "\t", "\n"])
                           for _ in range(rng.randrange(1, 12))))
    return out


def test_the_parts_find_what_the_whole_pattern_finds() -> None:
    texts = _texts()
    for secrets in ([], KNOWN):
        parts, whole = _pair(secrets)
        for text in texts:
            for edges in (False, True):
                assert parts._spans(text, edges) == whole._spans(text, edges, whole=True), (secrets, text)
        assert "_compiled" not in parts.__dict__  # the parts were searched, not the whole pattern


@settings(max_examples=examples(500), deadline=None)
@given(text=st.text(alphabet=string.ascii_letters[:8] + "AJByKEY_-:=/@ \t\"'tokenpassw\u017f\u212a", max_size=60))
def test_the_parts_find_what_the_whole_pattern_finds_property(text: str) -> None:
    for secrets in ([], KNOWN):
        parts, whole = _pair(secrets)
        assert parts._spans(text) == whole._spans(text, whole=True), (secrets, text)


def test_ordinary_events_are_redacted_without_the_whole_pattern(monkeypatch) -> None:
    built: list[tuple[str, ...]] = []
    real = redact._build
    monkeypatch.setattr(redact, "_build", lambda known: built.append(tuple(known)) or real(known))
    red = Redactor()
    event = {"kind": "started", "component": "c0", "command": ["sleep", "600"], "attempt": 1,
             "cause": {"by": "run", "reason": "started with the run (no dependencies)", "seq": None},
             "message": "SIGINT received: the platform is taking the machine (preemption)",
             "cgroup": "cgroup v2 (/sys/fs/cgroup/unified/rlsup-dde1305f5e8b)", "config": "/tmp/rf/s.yaml"}
    assert red.redact_obj(event) == event
    assert built == [] and "_compiled" not in red.__dict__
    # a text with a name before ":" needs the ":" part, and masks as before
    assert red.redact_text("HF_TOKEN: abcdefgh12") == "HF_TOKEN: ***"
    assert red.redact_text("see https://user:pw12345@host/x") == "see https://user:***@host/x"
    assert built == []
    # the log path searches with the whole pattern (compiled once per process for a redactor without
    # known values, so perhaps before this test)
    assert red.redact_lines(["token=abcdefgh12", "x"]) == ["token=***", "x"]
    assert "_compiled" in red.__dict__

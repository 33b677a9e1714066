"""Issue 26 item 7 / issue 27 item 10: every configured secret is masked wherever it appears and
however the line is cut.

A random secret, given to the run as the value of a secret-named variable, is written into
adversarial contexts (a URL's user part, glued to a ``NAME=`` assignment or an option name, twice in
a row, percent-encoded...), then the line goes through what the run does to it: redaction of a batch
of log lines, of an event's strings, after the log path capped the line at any length, and after an
event field was cut to any slice. Thousands of examples at fixed seeds, and more at a random seed
(each run of the suite explores new ones).
"""

from __future__ import annotations

import json
import random
import string
from urllib.parse import quote

import pytest
from hypothesis import assume, given, note, seed, settings
from hypothesis import strategies as st

from rlsup.supervisor.records.redact import MIN_FRAGMENT, Redactor, secret_values
from rlsup.supervisor.rundir.logs import TRUNC_MARK, LineNormaliser
from tests.tier import examples

TRUNC_AT = TRUNC_MARK.split("{")[0]  # " …[truncated ": where the log path caps a long line

# Everything a secret may hold but whitespace and "*" (the mask itself).
_ALPHABET = string.ascii_letters + string.digits + "-_.+/=~!#%&()$:;,?@[]^{}|<>'\"\\"
SECRETS = st.text(alphabet=_ALPHABET, min_size=8, max_size=40)

TEMPLATES = [
    "https://{S}:x@huggingface.co/repo", "https://{S}@github.com/org/repo.git", "https://user:{S}@host:443/",
    "git clone https://{S}:x-oauth-basic@github.com/o/r", "https://x:{Q}@host", "url=https%3A%2F%2F{Q}%40h",
    "NAME={S}", "MY_VAR={S} next", "XHF_TOKEN={S}", "export TOKEN={S}", "{S}NAME=x", "NAME={S}NAME=x",
    "-{S}api_key=x", "-{S}password=x", "--{S}", "--token={S}", "--api-key {S}", "-k {S}", "--{S}-token=abc",
    '"token": "{S}"', "{{\"password\":\"{S}\"}}", "Authorization: Bearer {S}", "Cookie: session={S}; b=c",
    "{S}{S}", "x{S}y", "({S})", "[{S}]", "'{S}'", "{S},{S};{S}", "password={S}", "api_key: {S}",
    "TOKEN={S}api_key={S}", "https://{S}:{S}@h", "{J}", "log line {J} end", "{S}\t{S}", "a=b&token={S}&c=d",
]
PIECES = st.sampled_from(["", " ", "=", ":", "-", "_", "--", "TOKEN=", "api_key=", "https://", "@h", "x", "'",
                          '"', "Bearer ", "\t", "word", "https://u:", "/", "%"])


def _line(template: str, s: str) -> str:
    return template.format(S=s, Q=quote(s, safe=""), J=json.dumps(s)[1:-1])


def _redactor(s: str) -> Redactor:
    env = {"MY_API_TOKEN": s, "HOME": "/root"}
    assume(s in secret_values(env))  # a value rlsup calls a secret (not a setting, not a path)
    return Redactor.for_run([env])


def _check_line(red: Redactor, s: str, line: str) -> None:
    for out in (red.redact_text(line), red.redact_lines([line, "ordinary"])[0],
                red.redact_obj({"message": line})["message"]):
        assert s not in out, (line, out)
        assert quote(s, safe="") not in out and json.dumps(s)[1:-1] not in out, (line, out)


def _check_cap(red: Redactor, s: str, line: str, cap: int) -> None:
    lines, _ = LineNormaliser(line_cap=cap).feed((line + "\n").encode())
    for out in red.redact_lines(lines):
        assert s not in out, (line, cap, out)
        if TRUNC_AT in out:
            before = out[:out.index(TRUNC_AT)]
            leaked = [s[:k] for k in range(MIN_FRAGMENT, len(s)) if before.endswith(s[:k])]
            assert not leaked, (line, cap, out)


def _check_slice(red: Redactor, s: str, line: str, a: int, b: int) -> None:
    cut = line[a:b]
    out = red.redact_obj({"message": cut})["message"]  # an event's field, cut to a length before
    assert s not in out, (cut, out)
    assert not [s[:k] for k in range(MIN_FRAGMENT, len(s)) if out.endswith(s[:k])], (cut, out)
    assert not [s[-k:] for k in range(MIN_FRAGMENT, len(s)) if out.startswith(s[-k:])], (cut, out)
    if len(cut) >= MIN_FRAGMENT and cut in s:
        assert cut not in out, (cut, out)


def _pool(rng: random.Random, n: int) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        s = "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(8, 40)))
        if s in secret_values({"MY_API_TOKEN": s}):
            out.append(s)
    return out


# A run's secrets, all in one redactor (building one compiles its pattern: tens of milliseconds):
# a fixed pool, the same every run, and one drawn afresh each run (its seed is printed on failure).
RANDOM_SEED = random.SystemRandom().randrange(1 << 32)
FIXED = _pool(random.Random(20261125), 200)
FRESH = _pool(random.Random(RANDOM_SEED), 200)
RED_FIXED = Redactor.for_run([{f"SECRET_{i}": s for i, s in enumerate(FIXED)}])
RED_FRESH = Redactor.for_run([{f"SECRET_{i}": s for i, s in enumerate(FRESH)}])


def _case(data, pool: list[str]) -> tuple[str, str]:
    s = data.draw(st.sampled_from(pool))
    return s, data.draw(PIECES) + _line(data.draw(st.sampled_from(TEMPLATES)), s) + data.draw(PIECES)


def _prop(check):
    def run(data, fixed: bool) -> None:
        pool, red = (FIXED, RED_FIXED) if fixed else (FRESH, RED_FRESH)
        s, line = _case(data, pool)
        note(f"pool seed {20261125 if fixed else RANDOM_SEED}")
        check(data, red, s, line)

    fixed = seed(20261125)(settings(max_examples=examples(1500), deadline=None, database=None)(
        given(data=st.data())(lambda data: run(data, True))))
    fresh = settings(max_examples=examples(1000), deadline=None, database=None)(given(data=st.data())(lambda data: run(data, False)))
    return fixed, fresh


def _line_prop(data, red, s, line):
    _check_line(red, s, line)


def _cap_prop(data, red, s, line):
    _check_cap(red, s, line, data.draw(st.integers(1, len(line) + 1)))


def _slice_prop(data, red, s, line):
    a = data.draw(st.integers(0, len(line)))
    _check_slice(red, s, line, a, data.draw(st.integers(a, len(line))))


test_masked_in_any_context, test_masked_in_any_context_random_seed = _prop(_line_prop)
test_masked_however_the_log_caps_the_line, test_masked_however_the_log_caps_the_line_random_seed = _prop(_cap_prop)
test_masked_however_an_event_field_is_cut, test_masked_however_an_event_field_is_cut_random_seed = _prop(_slice_prop)


@settings(max_examples=25, deadline=None, database=None)
@given(s=SECRETS, template=st.sampled_from(TEMPLATES), cap=st.integers(1, 120))
def test_any_generated_secret_alone(s: str, template: str, cap: int) -> None:
    """Secrets Hypothesis makes up (and shrinks on failure), each the only secret of its run."""
    red = _redactor(s)
    line = _line(template, s)
    _check_line(red, s, line)
    _check_cap(red, s, line, cap)


@pytest.mark.parametrize("template", TEMPLATES)
def test_each_adversarial_context_with_a_realistic_token(template: str) -> None:
    token = "hf_" + "AbCdEfGh1234567890XyZ"
    red = Redactor.for_run([{"HF_TOKEN": token}])
    _check_line(red, token, _line(template, token))
    plain = "s3cr3t-Pass.word"  # no known shape: masked only because the environment holds it
    red = Redactor.for_run([{"DB_PASSWORD": plain}])
    _check_line(red, plain, _line(template, plain))


def test_the_cases_the_issues_name() -> None:
    token = "tok_9f8e7d6c5b4a"
    red = Redactor.for_run([{"SERVICE_TOKEN": token}])
    assert red.redact_text(f"https://{token}:x@host/a") == "https://***:***@host/a"
    assert red.redact_text(f"-{token}api_key=x") == "-***api_key=***"
    assert red.redact_text(f"NAME={token}") == "NAME=***"
    lines, _ = LineNormaliser(line_cap=20).feed(f"0123456789 {token}\n".encode())
    assert red.redact_lines(lines)[0].startswith("0123456789 ***" + TRUNC_AT)
    assert red.redact_obj([token[3:12]]) == ["***"]  # a slice from the middle of it, in an event


def test_a_secret_cut_by_an_excerpt_marker_is_masked_on_both_sides() -> None:
    token = "tok_9f8e7d6c5b4a3"
    red = Redactor.for_run([{"SERVICE_TOKEN": token}])
    line = f"evidence: …{token[6:]} then {token[:9]}… and {token[:9]} …[truncated 40 chars]"
    out = red.redact_text(line)
    assert token[6:] not in out and token[:9] not in out, out
    assert out == "evidence: …*** then ***… and *** …[truncated 40 chars]", out


# ---------------------------------------------------------------------- issue 43 item 3: by shape as well as by name
#
# Each case: a line (or a command line) and the secret that must not survive it. KNOWN holds a run's
# environment (what rlsup knows); UNKNOWN_* are secrets it does not know, found by shape or by context
# alone. docs/secrets.md says what is and is not covered.

WANDB = "0123456789abcdef0123456789abcdef01234567"  # a W&B key: 40 hex characters
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"
DB = "s3cr3t-Pass.word"
OPENAI = "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34"
KNOWN = {"WANDB_API_KEY": WANDB, "HF_TOKEN": HF, "DB_PASSWORD": DB, "OPENAI_API_KEY": OPENAI}
UNKNOWN_TOKEN = "Zx9Qw8Er7Ty6Ui5Op4As3Df2"  # random-looking, no known prefix
UNKNOWN_PW = "hunter2-Corr3ct"  # no shape at all: only its context says it is a password
UNKNOWN_HEX = "9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c"  # an old-style 40-hex GitHub token as a URL user


def _b64(s: str) -> str:
    import base64

    return base64.b64encode(s.encode()).decode()


def _b64u(s: str) -> str:
    import base64

    return base64.urlsafe_b64encode(s.encode()).decode().rstrip("=")


def _core(prefix: str, secret: str, url: bool = False) -> str:
    """The characters of base64(prefix + secret) that depend on the secret alone: what must not survive."""
    k, raw = len(prefix.encode()), (prefix + secret).encode()
    enc = (_b64u if url else _b64)(prefix + secret)
    return enc[-(-8 * k // 6):(8 * len(raw)) // 6]


CFG_JSON = '{"password": "' + DB + '"}'


LEAKS: list[tuple[str, str]] = [
    # URL user and password parts, any scheme
    (f"https://{UNKNOWN_TOKEN}@github.com/org/repo.git", UNKNOWN_TOKEN),
    (f"https://{UNKNOWN_TOKEN}:x-oauth-basic@github.com/o/r", UNKNOWN_TOKEN),
    (f"git clone https://{UNKNOWN_HEX}@github.com/o/r.git", UNKNOWN_HEX),
    (f"remote: https://x-access-token:{UNKNOWN_TOKEN}@github.com/o/r", UNKNOWN_TOKEN),
    (f"git clone https://oauth2:{UNKNOWN_PW}@gitlab.com/x/y.git", UNKNOWN_PW),
    (f"redis://:{UNKNOWN_PW}@cache:6379/0", UNKNOWN_PW),
    (f"rediss://default:{UNKNOWN_PW}@cache.example.com:6380", UNKNOWN_PW),
    (f"postgresql://admin:{UNKNOWN_PW}@db.internal:5432/app", UNKNOWN_PW),
    (f"mysql+pymysql://root:{UNKNOWN_PW}@127.0.0.1/optuna", UNKNOWN_PW),
    (f"amqp://guest:{UNKNOWN_PW}@rabbit//", UNKNOWN_PW),
    (f"mongodb+srv://user:{UNKNOWN_PW}@cluster0.mongodb.net/?retryWrites=true", UNKNOWN_PW),
    (f"ftp://anonymous:{UNKNOWN_PW}@ftp.example.org/pub", UNKNOWN_PW),
    (f"HTTP_PROXY=http://proxyuser:{UNKNOWN_PW}@proxy:3128", UNKNOWN_PW),
    (f"connecting to nats://{UNKNOWN_TOKEN}@nats:4222", UNKNOWN_TOKEN),
    (f"sqlalchemy.exc.OperationalError: (psycopg2) postgresql://app:{UNKNOWN_PW}@db/app refused", UNKNOWN_PW),
    (f"url='https://user:{UNKNOWN_PW}@host/x'", UNKNOWN_PW),
    (f'{{"url": "https://u:{UNKNOWN_PW}@h/"}}', UNKNOWN_PW),
    # key=value names for passwords and tokens
    (f"db_pass={UNKNOWN_PW}", UNKNOWN_PW),
    (f"DB_PASS={UNKNOWN_PW}", UNKNOWN_PW),
    (f"pwd={UNKNOWN_PW}", UNKNOWN_PW),
    (f"PWD: {UNKNOWN_PW}", UNKNOWN_PW),
    (f"pass: {UNKNOWN_PW}", UNKNOWN_PW),
    (f"passwd={UNKNOWN_PW}", UNKNOWN_PW),
    (f"admin_password = {UNKNOWN_PW}", UNKNOWN_PW),
    (f'{{"db_password": "{UNKNOWN_PW}"}}', UNKNOWN_PW),
    (f"client_secret={UNKNOWN_PW}", UNKNOWN_PW),
    (f"access_token={UNKNOWN_TOKEN}&expires=3600", UNKNOWN_TOKEN),
    (f"refresh_token: {UNKNOWN_TOKEN}", UNKNOWN_TOKEN),
    (f"aws_secret_access_key = {UNKNOWN_TOKEN}", UNKNOWN_TOKEN),
    (f"X-Amz-Signature={UNKNOWN_HEX}", UNKNOWN_HEX),
    (f"auth={_b64(UNKNOWN_PW)}", _b64(UNKNOWN_PW)),
    (f"smtp passphrase: {UNKNOWN_PW}", UNKNOWN_PW),
    (f"ENCRYPTION_KEY={UNKNOWN_PW}", UNKNOWN_PW),
    (f"'api_key': '{UNKNOWN_PW}'", UNKNOWN_PW),
    # bearer and basic auth headers
    (f"Authorization: Bearer {UNKNOWN_TOKEN}", UNKNOWN_TOKEN),
    (f"authorization: basic {_b64('admin:' + UNKNOWN_PW)}", _b64("admin:" + UNKNOWN_PW)),
    (f"Proxy-Authorization: Basic {_b64('u:' + UNKNOWN_PW)}", _b64("u:" + UNKNOWN_PW)),
    (f"curl -H 'Authorization: token {UNKNOWN_TOKEN}' https://api.github.com", UNKNOWN_TOKEN),
    (f"headers={{'Authorization': 'Bearer {UNKNOWN_TOKEN}'}}", UNKNOWN_TOKEN),
    (f"X-Api-Key: {UNKNOWN_TOKEN}", UNKNOWN_TOKEN),
    (f"Cookie: session={UNKNOWN_TOKEN}; theme=dark", UNKNOWN_TOKEN),
    (f"retrying with Bearer {UNKNOWN_TOKEN}", UNKNOWN_TOKEN),
    (f"BEARER {UNKNOWN_TOKEN}", UNKNOWN_TOKEN),
    # provider token shapes, unknown to the run
    ("hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm123456", "hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm123456"),
    ("using api_org_" + "QwErTyUiOpAsDfGhJkLzXcVbNm123456", "api_org_" + "QwErTyUiOpAsDfGhJkLzXcVbNm123456"),
    ("OPENAI key sk-" + "AbCdEf0123456789GhIjKl0123456789MnOpQr", "sk-" + "AbCdEf0123456789GhIjKl0123456789MnOpQr"),
    ("sk-proj-" + "Zz99Yy88Xx77Ww66Vv55Uu44", "sk-proj-" + "Zz99Yy88Xx77Ww66Vv55Uu44"),
    ("sk-ant-api03-" + "Aa11Bb22Cc33Dd44Ee55Ff66Gg77", "sk-ant-api03-" + "Aa11Bb22Cc33Dd44Ee55Ff66Gg77"),
    ("AWS AKIAIOSFODNN7EXAMPLE in use", "AKIAIOSFODNN7EXAMPLE"),
    ("temporary ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A"),
    ("ghp_" + "ZyXwVuTsRqPoNmLkJiHgFeDcBa0987654321", "ghp_" + "ZyXwVuTsRqPoNmLkJiHgFeDcBa0987654321"),
    ("gho_" + "ZyXwVuTsRqPoNmLkJiHgFeDcBa0987654321", "gho_" + "ZyXwVuTsRqPoNmLkJiHgFeDcBa0987654321"),
    ("github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
     "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"),
    ("glpat-" + "Ab12Cd34Ef56Gh78Ij90", "glpat-" + "Ab12Cd34Ef56Gh78Ij90"),
    ("xoxb-" + "1234567890-Ab12Cd34Ef56", "xoxb-" + "1234567890-Ab12Cd34Ef56"),
    ("AIzaSyA" + "1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW", "AIzaSyA" + "1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW"),
    ("r8_" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr", "r8_" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr"),
    ("gsk_" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90Uv", "gsk_" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90Uv"),
    ("nvapi-" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90Uv12", "nvapi-" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90Uv12"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
    # known secrets, disguised: upper/lower case, base64 (standard, URL-safe, inside user:password)
    (f"key {WANDB.upper()} in use", WANDB.upper()),
    (f"WANDB_API_KEY={WANDB.upper()}", WANDB.upper()),
    (f"token {HF.lower()}", HF.lower()),
    (f"token {HF.upper()}", HF.upper()),
    (f"DB {DB.upper()}", DB.upper()),
    (f"auth={_b64(WANDB)}", _core("", WANDB)),
    (f"cfg {_b64(CFG_JSON)}", _core('{"password": "', DB)),
    (f"Authorization: Basic {_b64('api:' + WANDB)}", _b64("api:" + WANDB)),
    (f"blob={_b64u('x' + HF)}", _core("x", HF, url=True)),
    (f"k={_b64(OPENAI)} ok", _core("", OPENAI)),
    (f"basic {_b64('user:' + DB)}", _core("user:", DB)),
    (f"login {_b64('ab:' + WANDB)} done", _core("ab:", WANDB)),
    (f"{_b64(DB)}", _core("", DB)),
    (f"wandb login {WANDB}", WANDB),
    (f"export WANDB_API_KEY={WANDB}", WANDB),
    (f"Using {HF} to download", HF),
    (f"json {json.dumps({'k': DB})}", DB),
    (f"https://user:{quote(DB, safe='')}@host", quote(DB, safe="")),
    # command-line forms (as a log line shows a command)
    (f"--token {UNKNOWN_PW}", UNKNOWN_PW),
    (f"--token={UNKNOWN_PW}", UNKNOWN_PW),
    (f"--api-key {UNKNOWN_PW}", UNKNOWN_PW),
    (f"--hf-token={UNKNOWN_TOKEN}", UNKNOWN_TOKEN),
    (f"--password '{UNKNOWN_PW}'", UNKNOWN_PW),
    (f"--db-pass {UNKNOWN_PW}", UNKNOWN_PW),
    (f"--pwd {UNKNOWN_PW}", UNKNOWN_PW),
    (f"--secret-key {UNKNOWN_PW}", UNKNOWN_PW),
    (f"mysql --password={UNKNOWN_PW} -h db", UNKNOWN_PW),
    (f"curl -u admin:{UNKNOWN_PW} https://x", UNKNOWN_PW),
    (f"curl --user admin:{UNKNOWN_PW} https://x", UNKNOWN_PW),
    (f"curl -k {UNKNOWN_TOKEN} https://x", UNKNOWN_TOKEN),
    (f"tool -t {UNKNOWN_TOKEN}", UNKNOWN_TOKEN),
    (f"Running: python upload.py --auth {UNKNOWN_PW}", UNKNOWN_PW),
    (f"vllm serve m --api-key {UNKNOWN_PW} --port 8000", UNKNOWN_PW),
    (f"huggingface-cli login --token {HF}", HF),
    # glued and repeated
    (f"TOKEN={UNKNOWN_PW}api_key={UNKNOWN_PW}", UNKNOWN_PW),
    (f"password={UNKNOWN_PW}, password={UNKNOWN_PW}", UNKNOWN_PW),
    (f"[db] pass = {UNKNOWN_PW}", UNKNOWN_PW),
    (f"\x1b[32mpassword={UNKNOWN_PW}\x1b[0m", UNKNOWN_PW),
    (f"2026-11-28 12:00:00 INFO db_password='{UNKNOWN_PW}' loaded", UNKNOWN_PW),
    (f"env: DB_PASS={UNKNOWN_PW} HF_TOKEN={HF}", UNKNOWN_PW),
    (f"env: DB_PASS={UNKNOWN_PW} HF_TOKEN={HF}", HF),
    (f"{{'passwd': '{UNKNOWN_PW}'}}", UNKNOWN_PW),
    (f"Set-Cookie: sid={UNKNOWN_TOKEN}; HttpOnly", UNKNOWN_TOKEN),
    (f"auth: {UNKNOWN_TOKEN}", UNKNOWN_TOKEN),
]

# argv as rlsup journals a component's command: the secret must not survive redact_argv
ARGV_LEAKS: list[tuple[list[str], str]] = [
    (["curl", "-k", UNKNOWN_TOKEN, "https://x"], UNKNOWN_TOKEN),
    (["python", "upload.py", UNKNOWN_TOKEN, "--repo", "x"], UNKNOWN_TOKEN),  # a positional random token
    (["python", "upload.py", "hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm123456"], "hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm123456"),
    (["serve", "--api-key", UNKNOWN_PW], UNKNOWN_PW),
    (["serve", f"--api-key={UNKNOWN_PW}"], UNKNOWN_PW),
    (["git", "clone", f"https://{UNKNOWN_TOKEN}@github.com/o/r"], UNKNOWN_TOKEN),
    (["psql", f"postgresql://app:{UNKNOWN_PW}@db/app"], UNKNOWN_PW),
    (["wandb", "login", WANDB], WANDB),
    (["curl", "-u", f"admin:{UNKNOWN_PW}", "https://x"], UNKNOWN_PW),
    (["app", "--db-pass", UNKNOWN_PW], UNKNOWN_PW),
]

# Ordinary log lines: nothing in them may be masked.
BENIGN = [
    "Step 120/1869 loss=0.4312 reward=0.81 lr=3e-05 grad_norm=0.93",
    "saving checkpoint to /scratch/ckpt/global_step_120/actor/model_world_size_8_rank_0.pt",
    "commit 3f2a9c1e5b7d8f0a1b2c3d4e5f60718293a4b5c6",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "tokens/s=18234 max_tokens=2048 tokenizer=Qwen2TokenizerFast key_file=/etc/ssl/k.pem",
    "password_file=/run/secrets/db_password",
    "ssh://git@github.com/org/repo.git",
    "postgres://app@db:5432/x",
    "http://localhost:8000/v1/completions",
    "http://127.0.0.1:30000/health",
    "INFO:     127.0.0.1:5555 - \"POST /generate HTTP/1.1\" 200 OK",
    "bypass=1 compass=north surpass=yes",
    "pass@1: 0.42 pass@8: 0.77",
    "Using pwd /home/user/project",
    "PWD=/home/user/project",
    "auth=enabled",
    "oauth=google",
    "Loading Qwen/Qwen2.5-0.5B-Instruct from https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/resolve/main/config.json",
    "wandb: View run at https://wandb.ai/team/proj/runs/a1b2c3d4",
    "[rank0]: NCCL INFO Channel 00/02 : 0 1",
    "kl=0.0012 entropy=1.23 clip_frac=0.05",
    "request_id=req_8sKd92 latency_ms=123",
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970",
    "The secret to good training is patience",
    "passed 12/12 tests",
    "2026-11-28 20:01:02,123 - INFO - epoch 3 done",
    "Authorization header missing",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "git rev-parse HEAD: 8f14e45fceea167a5a36dedd4bea2543",
    "s3://my-bucket/data/shard-00042.parquet",
    "model path: /models/llama-3-8b/tokenizer.json",
    "mongodb://mongo:27017/db",
    "File \"/app/auth.py\", line 12, in login",
    "http://localhost:8000/@scope/pkg",
    "https://registry.npmjs.org/@types/node",
    "email from john.doe@example.com",
    "hf_hub_download(repo_id='Qwen/Qwen2.5-0.5B')",
    "sk-learn is not a package, scikit-learn is",
    "token_count=512 num_tokens: 2048 tokens_per_second=90.5",
    "--max-tokens 512 --tokenizer Qwen/Qwen2.5 --key-file /etc/k.pem",
    "-n 5 -m model -p 8080",
    "curl -u admin https://x",
    "[wandb] run id 3k2j1h0g",
    "checkpoint global_step_42 saved (sha1 2fd4e1c67a2d28fced849ee1bb76e7391b93eb12)",
]
BENIGN_ARGV = [
    ["python", "-m", "rlsup.trainer.train", "--steps", "200", "--out", "/tmp/run/work"],
    ["torchrun", "--nproc-per-node", "8", "train.py", "--model", "Qwen/Qwen2.5-7B-Instruct"],
    ["git", "checkout", "3f2a9c1e5b7d8f0a1b2c3d4e5f60718293a4b5c6"],
    ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"],
]


def test_at_least_100_adversarial_inputs_and_none_leaks() -> None:
    assert len(LEAKS) + len(ARGV_LEAKS) >= 100
    red = Redactor.for_run([KNOWN])
    leaked = [(line, red.redact_text(line)) for line, secret in LEAKS
              if secret in red.redact_text(line) or secret in red.redact_lines([line])[0]
              or secret in json.dumps(red.redact_obj({"m": line}))]
    leaked += [(" ".join(argv), " ".join(red.redact_argv(argv))) for argv, secret in ARGV_LEAKS
               if secret in " ".join(red.redact_argv(argv)) or secret in json.dumps(red.redact_obj({"command": argv}))]
    assert not leaked, f"{len(leaked)} of {len(LEAKS) + len(ARGV_LEAKS)} leak:\n" + "\n".join(f"{a!r}\n  -> {b!r}"
                                                                                          for a, b in leaked)


def test_ordinary_lines_and_commands_are_left_alone() -> None:
    red = Redactor.for_run([KNOWN])
    changed = [(line, red.redact_text(line)) for line in BENIGN if red.redact_text(line) != line]
    changed += [(" ".join(a), " ".join(red.redact_argv(a))) for a in BENIGN_ARGV if red.redact_argv(a) != a]
    assert not changed, "\n".join(f"{a!r}\n  -> {b!r}" for a, b in changed)
    assert red.redact_lines(BENIGN) is BENIGN  # the log path's fast answer: nothing to mask


@settings(max_examples=examples(300), deadline=None)
@given(data=st.data())
def test_known_secrets_in_disguise_property(data) -> None:
    """Any known secret, upper- or lower-cased, or base64-encoded (standard or URL-safe) after any prefix
    (user:password, JSON around it): the disguise is masked; nothing of 8 or more characters of the
    encoding that depends on the secret alone survives."""
    import base64

    s = data.draw(st.sampled_from(FIXED))
    red = RED_FIXED
    how = data.draw(st.sampled_from(["upper", "lower", "b64", "b64url"]))
    prefix = data.draw(st.text(alphabet=string.ascii_letters + ":{\"", max_size=6))
    if how in ("upper", "lower"):
        shown = s.upper() if how == "upper" else s.lower()
        assume(shown != s and shown not in FIXED and len(shown) >= 8 and any(c.isalpha() for c in shown))
        out = red.redact_text(f"{prefix} {shown} end")
        assert shown not in out, (shown, out)
        return
    raw = (prefix + s).encode()
    enc = base64.b64encode(raw).decode() if how == "b64" else base64.urlsafe_b64encode(raw).decode()
    out = red.redact_text(f"x {enc} y")
    k = len(prefix.encode())
    core = enc[-(-8 * k // 6):(8 * len(raw)) // 6]
    assert core not in out, (s, enc, out)

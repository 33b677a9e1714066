"""Secrets redaction: no credential from the environment, the command line or the output leaves rlsup in clear.

What counts as a secret:

* **by name**: the value of an environment variable named like a credential (:func:`is_secret_name`:
  ``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``*PASSWD*``, ``*CREDENTIAL*``, ``*AUTH*``,
  ``*COOKIE*``, a ``PAT`` word as in ``GITHUB_PAT``), and a high-entropy value of one named like a
  session (``SESSION_ID``);
* **by value**: anything with a known token prefix (:data:`_TOKEN_FORMATS`: ``hf_``, ``ghp_``, ``sk-``,
  ``AKIA``, JWTs ``eyJ...`` and more), wherever it appears;
* **by context**: what follows a credential-named option or assignment (``--api-key X``,
  ``--github-pat=X``, ``HF_TOKEN=X``, ``"password": "X"``), an ``Authorization``/``Cookie`` header,
  ``Bearer X``, URL userinfo (``https://user:X@host``), and after a one-letter option (``-k X``)
  a value that itself looks like a credential (:func:`looks_like_credential`).

What is never masked by shape alone: paths, model names (``Qwen/Qwen2.5-0.5B``), numbers, words, and
hexadecimal strings (git commits, checksums, trace ids) -- a hex credential (a W&B key) is masked when
it is known (from the environment or the command line) or follows a credential-named option.

:class:`Redactor` holds the known values of a run and masks all of the above with ``***`` in
strings, argv lists, env dicts and JSON-able objects (events). Every pattern lives in one compiled
regular expression, so a batch of log lines costs one scan (:meth:`Redactor.redact_lines`). It never
raises on odd input; non-strings pass through.
"""

from __future__ import annotations

import base64
import functools
import heapq
import json
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

MASK = "***"
CUT = "…"  # where text was cut (the cap's marker, an excerpt cut to a width)
# The shortest piece of a known secret masked where text was cut through the secret.
MIN_FRAGMENT = 3
# Values shorter than this are not treated as secrets: "1", "no", "cpu" would mask half the log.
MIN_SECRET_LEN = 4
# A known value this short must also look unlike a word to be masked wherever it appears (see
# _worth_masking_everywhere): "hunter22" yes, "main" no.
_MIN_PLAIN_LEN = 8

SECRET_NAME_RE = re.compile(
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS(?:PHRASE)?(?![A-Z])|CREDENTIAL|AUTH(?!OR)|COOKIE"
    r"|(?:^|[_-])PAT(?:$|[_-])",
    re.IGNORECASE)
# Names that match the pattern above but hold no secret (paths, counts, public identifiers).
_NOT_SECRET_NAMES = re.compile(
    r"^(?:.*_(?:PATH|FILE|DIR|LEN|LENGTH|COUNT|SIZE|REGION)|.*TOKENIZERS?.*|.*TOKENS(?:_.*)?"
    r"|KEYBOARD.*|.*_KEYS)$",
    re.IGNORECASE)
# Names whose values are secret only when they look like credentials: SESSION=main is a tmux session.
_WEAK_SECRET_NAME_RE = re.compile(r"SESSION|(?:^|[_-])SID(?:$|[_-])", re.IGNORECASE)

# Values a credential-named variable or option often holds that are settings, not secrets.
_NOT_SECRET_VALUES = frozenset({"true", "false", "none", "null", "yes", "no", "on", "off", "auto", "0", "1",
                                "enabled", "disabled", "required", "optional", "basic", "bearer", MASK})

# ------------------------------------------------------------------------------------ token shapes

# Known credential formats as (text before the anchor, anchor, the rest): the pattern below finds
# each at its anchor, a character rarer in logs than the first one (see "the one pattern"). The
# random part must mix character classes (checked in _is_token), so names that happen to start like
# one (hf_hub_download, sk-learn, sk-my-model-v2) stay readable.
_TOKEN_FORMATS = [
    ("hf", "_", "[A-Za-z0-9]{20,}"), ("gh[pousr]", "_", "[A-Za-z0-9]{20,}"),
    ("github", "_", "pat_[A-Za-z0-9_]{30,}"), ("npm", "_", "[A-Za-z0-9]{36}"),
    ("[rs]k", "_", "(?:live|test)_[A-Za-z0-9]{16,}"),
    ("glpat", "-", "[A-Za-z0-9_-]{20,}"), ("sk", "-", "(?:ant-|proj-|live-|test-)?[A-Za-z0-9_-]{20,}"),
    ("xox[abposr]", "-", "[A-Za-z0-9-]{10,}"), ("pypi", "-", "AgE[A-Za-z0-9_-]{50,}"),
    ("ey", "J", r"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),  # a JWT: header.payload.signature
    ("", "A", "(?:KIA|SIA)[A-Z0-9]{16}(?![A-Za-z0-9])"), ("", "A", "Iza[0-9A-Za-z_-]{35}"),
    ("", "y", r"a29\.[0-9A-Za-z_-]{20,}"),
    # Hugging Face organisation tokens, Replicate, Groq, NVIDIA NGC/NIM, xAI
    ("api_org", "_", "[A-Za-z0-9]{30,}"), ("r8", "_", "[A-Za-z0-9]{30,}"), ("gsk", "_", "[A-Za-z0-9]{40,}"),
    ("nvapi", "-", "[A-Za-z0-9_-]{40,}"), ("xai", "-", "[A-Za-z0-9]{40,}"),
]
_TOKEN_RE = re.compile("^(?:" + "|".join(f"{b}{re.escape(a)}{r}" for b, a, r in _TOKEN_FORMATS) + ")$")
_CRED_CHARS = re.compile(r"^[A-Za-z0-9+/=_.~-]+$")
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]+")
_HEXISH = re.compile(r"^[0-9a-fA-F-]+$")  # commits, checksums, UUIDs
_PREFIX_LEN = re.compile(r"^(?:github_pat_|sk-(?:ant-|proj-|live-|test-)?|[rs]k_(?:live|test)_|pypi-|api_org_|r8_|[a-z]+[_-]"
                         r"|ya29\.)")


def _classes(s: str) -> int:
    return (any(c.islower() for c in s)) + (any(c.isupper() for c in s)) + (any(c.isdigit() for c in s))


def _is_token(s: str) -> bool:
    """A known token prefix followed by a random-looking body (not a snake_case or kebab-case name)."""
    if not _TOKEN_RE.match(s):
        return False
    if s.startswith(("AKIA", "ASIA", "eyJ")):
        return True
    m = _PREFIX_LEN.match(s)
    body = s[m.end():] if m else s
    # Mixed case and digits, or two of them in a long unbroken run: sk-my-model-v2-final is a name.
    return _classes(body) == 3 or (_classes(body) >= 2 and max(map(len, _ALNUM_RUN.findall(body)), default=0) >= 16)


def looks_like_credential(value: str) -> bool:
    """Whether ``value`` looks like a secret by itself: a known token format, or a random string.

    Random means: at least 20 characters of ``[A-Za-z0-9+/=_.~-]``, one unbroken run of at least 16
    letters and digits with upper and lower case and a digit, and high entropy. Paths, model names
    (``Llama-3-8B-Instruct``: short runs), words, numbers and hex strings (commits, checksums, UUIDs)
    are not.
    """
    if not isinstance(value, str) or len(value) < 16:
        return False
    if _is_token(value):
        return True
    if len(value) < 20 or not _CRED_CHARS.match(value) or _HEXISH.match(value):
        return False
    run = max(_ALNUM_RUN.findall(value), key=len, default="")
    n = len(run)
    return n >= 16 and _classes(run) == 3 and -sum(c / n * math.log2(c / n) for c in Counter(run).values()) >= 3.5


# ------------------------------------------------------------------------------------ names


def is_secret_name(name: str) -> bool:
    """Whether an environment variable of this name holds a secret (HF_TOKEN, GITHUB_PAT and SESSION_COOKIE
    yes; TOKENIZERS_PARALLELISM, PATH and HF_TOKEN_PATH no)."""
    return bool(SECRET_NAME_RE.search(name)) and not _NOT_SECRET_NAMES.match(name)


def _is_setting(value: str) -> bool:
    """A value that is a setting or a number, not a secret, even under a credential-like name."""
    v = value.strip().strip("\"'")
    if v.lower() in _NOT_SECRET_VALUES or v.startswith(("$", "***")):
        return True  # booleans, modes, `$HF_TOKEN` (a reference, not the value)
    return bool(re.fullmatch(r"-?\d{1,7}(?:\.\d+)?", v))  # a count, a port, a step; not a PIN worth it


def _is_secret_value(name: str, value: str) -> bool:
    if len(value) < MIN_SECRET_LEN or _is_setting(value):
        return False
    if is_secret_name(name):
        # GOOGLE_APPLICATION_CREDENTIALS=/path/creds.json names where a secret is, not the secret.
        # (os.path.exists answers False for a path it cannot check, a NUL byte included: it never raises)
        return not (_is_pathlike(value) and not any(c.isspace() for c in value)
                    and os.path.exists(os.path.expanduser(value)))
    if _WEAK_SECRET_NAME_RE.search(name) and not _NOT_SECRET_NAMES.match(name):
        return looks_like_credential(value)
    return _is_token(value)


def secret_values(env: Mapping[str, str]) -> set[str]:
    """The secret values of ``env``: values of credential-named variables (at least
    :data:`MIN_SECRET_LEN` long, not a boolean, small number or existing path), credential-shaped
    values of session-named ones, and any value with a known token prefix."""
    return {str(v) for k, v in env.items() if v is not None and _is_secret_value(str(k), str(v))}


# ------------------------------------------------------------------------------------ patterns

# Option names whose value is secret: --api-key, --hf-token, --github-pat, --password, --cookie; the
# credential word is the option's last part, so --max-tokens, --tokenizer and --key-file are not.
_OPT_WORD = (r"(?:api[-_]?key|apikey|access[-_]?key|private[-_]?key|secret[-_]?key|key|token|secret|password"
             r"|passwd|passphrase|pass|pwd|pat|credentials?|cookie|auth)")
_OPT_NAME = rf"--?(?:[A-Za-z0-9]+[-_])*{_OPT_WORD}"
_OPT_ONLY_RE = re.compile(rf"(?i)^{_OPT_NAME}$")
_OPT_EQ_ARG_RE = re.compile(rf"(?i)^({_OPT_NAME}=)(.+)$")
_SHORT_OPT_RE = re.compile(r"^-[A-Za-z]$")
_USER_OPTS = ("-u", "--user", "--proxy-user")  # curl's USER:PASSWORD
_USER_OPTS_EQ = ("--user=", "--proxy-user=")

# ----------------------------------------------------------------- the one pattern
#
# Speed is the point of this section. Python's regex engine, searching for a pattern whose every
# branch starts with a plain character, skips in C over every character that no branch starts with;
# at a character some branch starts with it tries the branches. A branch that starts with a class, a
# group, a lookbehind or (?i) turns that off. Measured on 10 MB of training and inference logs: the
# same patterns written plainly ran at 2.6 MB/s, built as below at about 95 MB/s.
# Common letters are the worst anchors (a branch for "token" stops at every "t"), so each branch is
# anchored on a rare character of what it looks for, and lookbehinds check what comes before it:
#
#   token formats   hf_X ghp_X npm_X github_pat_X at "_", sk-X glpat-X xoxb-X pypi-X at "-",
#                   eyJX at "J", AKIA/ASIA/AIza at "A", ya29.X at "y"
#   options         --api-key X, -k X at "-"
#   assignments     TOKEN=X, "password": "X", Authorization: Basic X, Cookie: X at ":" or "="
#   URL userinfo    scheme://user:X@host at ":"
#   Bearer X        at "B" (in a header, at its ":")
#   known values    at their rarest character
#
# The match therefore often starts inside the secret or after its name; each branch ends with a
# named (often empty) group whose name says which branch matched, and _GROUPS says how far before
# the match the secret starts ("back"). [ \t] rather than \s: redact_lines scans lines joined by
# "\n" and no match may cross a line.

_GROUPS: dict[str, tuple[str, int]] = {}  # group name -> (kind, chars of the secret before the match)


def _group(kind: str, back: int = 0) -> str:
    name = f"{kind}{len(_GROUPS)}"
    _GROUPS[name] = (kind, back)
    return name


def _name_tree(leaves: list[tuple[str, bool, str, str]], sep: str) -> str:
    """Lookbehinds that find which name (written NAME, NAME", NAME' or NAME followed by a space) ends
    right before ``sep``, each followed by its value pattern (a template for the group's name and
    kind); tested from the nearest character back."""
    s = re.escape(sep)
    by_conn: list[str] = []
    for conn in ["", '"', "'", " "]:
        c = re.escape(conn)
        by_letter: dict[str, list[str]] = {}
        for word, cased, kind, then in leaves:
            # "^word": the whole word only (db_pass=, pass=, not bypass= or compass=)
            bare = word.lstrip("^")
            name = (("(?<![A-Za-z0-9])" if word.startswith("^") else "")
                    + (re.escape(bare) if cased else f"(?i:{re.escape(bare)})"))
            letter = word[-1] if cased else f"{word[-1].lower()}{word[-1].upper()}"
            by_letter.setdefault(letter, []).append(f"(?<={name}{c}{s}){then.format(_group(kind))}")
        letters = "".join(sorted(by_letter))
        inner = "|".join(f"(?<=[{letter}]{c}{s})(?:{'|'.join(alts)})" for letter, alts in sorted(by_letter.items()))
        by_conn.append(f"(?<=[{letters}]{c}{s})(?:{inner})")
    return "(?:" + "|".join(by_conn) + ")"


# Names whose value, after ":" or "=", is a secret ("^": the whole word only: db_pass=, PWD=, auth=, not
# bypass=, compass=, oauth=).
_ASSIGN_NAMES = ["api_key", "api-key", "apikey", "access_key", "access-key", "private_key", "private-key",
                 "secret_key", "secret-key", "secret", "token", "password", "passwd", "passphrase",
                 "credentials", "credential", "cookie", "_pat", "-pat", "^pass", "^pwd", "^auth", "^signature"]


def _branches() -> dict[str, list[str]]:
    """Branches of the pattern by anchor character: {anchor: [what follows the anchor, ...]}."""
    out: dict[str, list[str]] = {}

    def add(anchor: str, rest: str) -> None:
        out.setdefault(anchor, []).append(rest)

    # Token formats; lookbehinds check the text before the anchor and that no letter or digit
    # precedes the token. Those of one anchor that have a prefix sit behind one test of the prefix's
    # last character ("_" is common in logs: grad_norm, max_tokens; few follow an f, a k or an 8).
    prefixed: dict[str, tuple[set[str], list[str]]] = {}
    for before, anchor, rest in _TOKEN_FORMATS:
        width = len(re.sub(r"\[[^]]*\]", "x", before))  # each class is one character
        a = re.escape(anchor)
        branch = f"(?<![A-Za-z0-9]{before}{a}){rest}(?P<{_group('tok', width)}>)"
        if not before:
            add(anchor, branch)
            continue
        last = before[before.rindex("[") + 1:-1] if before.endswith("]") else before[-1]
        lasts, alts = prefixed.setdefault(anchor, (set(), []))
        lasts.update(last)
        alts.append(f"(?<={before}{a}){branch}")
    for anchor, (lasts, alts) in prefixed.items():
        add(anchor, f"(?<=[{''.join(sorted(lasts))}]{re.escape(anchor)})(?:{'|'.join(alts)})")
    # --api-key X, --token=X, -token "X": the credential word is the option's last part.
    value = r"""(?:"[^"\n]*"|'[^'\n]*'|[^\s"'\x1b-][^\s"'\x1b]*)"""  # \x1b: an ANSI colour ends it
    add("-", rf"(?<![\w-]-)-?(?:[A-Za-z0-9]+[-_])*(?i:{_OPT_WORD})(?:=|[ \t]+)(?P<{_group('optv')}>{value})")
    # curl -u USER:X, --user USER:X, --proxy-user USER:X: X
    add("-", rf"(?<![\w-]-)(?:u[ \t]+|-(?:proxy-)?user(?:[ \t]+|=))[^\s:'\"]+:(?P<{_group('sv')}>[^\s'\"\x1b]{{4,}})")
    # -k X, where X itself looks like a credential (decided in _span)
    add("-", rf"(?<![\w-]-)[A-Za-z][ \t]+(?P<{_group('shv')}>[A-Za-z0-9+/=_.~][A-Za-z0-9+/=_.~-]{{19,}})")
    # Bearer X on its own (in a header, "Authorization: Bearer X" is found at its ":")
    add("B", rf"(?<![A-Za-z0-9_]B)(?i:earer)[ \t]+(?P<{_group('bv')}>[A-Za-z0-9._~+/=-]{{4,}})")
    # At ":" and "=": the name before it. Lookbehinds must be fixed-width, so each name and each way
    # of writing it (NAME=, NAME"=, NAME'=, NAME =) gets its own, behind a small tree of one-character
    # tests (is the character before the separator one a name can end with; which connector; which
    # last letter), so that the common ":" of a timestamp or "INFO:" costs one test.
    names = _ASSIGN_NAMES
    # A number after the name is a setting ("#token: 1234", "max_token=512"): ruled out here, where it
    # costs nothing, rather than in _span after a match.
    assign = r"""[ \t]*["']?(?!-?[0-9]+(?:\.[0-9]+)?(?:[\s"',;]|$))(?P<{}>[^\s"',;\x1b]{{4,}})"""
    auth = r"""[ \t]*["']?(?:(?i:basic|bearer|token|digest)[ \t]+)?(?P<{}>[^\s"',\x1b]+)"""
    for sep in ":=":
        # (name, matched in any case, group kind, what follows the separator); first match wins.
        leaves: list[tuple[str, bool, str, str]] = [("authorization", False, "av", auth)]
        if sep == ":":  # Cookie: a=b; c=d, Set-Cookie: ... (the whole value); SESSION_COOKIE: is below
            leaves.append(("cookie", False, "cv", r"(?<![A-Za-z0-9_](?i:cookie):)[ \t]*(?P<{}>[^\r\n\x1b]+)"))
        leaves += [(w, False, "sv", assign) for w in names]
        leaves.append(("_KEY", True, "sv", assign))
        add(sep, _name_tree(leaves, sep))
    # scheme://USER:X@host, scheme://:X@host, scheme://TOKEN@host, from the "://" on: the user part and
    # the password (_span decides what of it is a secret)
    add(":", rf"(?<=[A-Za-z0-9]:)//(?P<{_group('ui')}>[^\s/@\x1b]+)(?=@)")
    return out


_BRANCHES = _branches()
# Every match of the pattern starts at one of these characters: a word without any cannot hold a secret
# by pattern, and is passed over without compiling the pattern (about 0.15 s of CPU).
_ANCHORS = frozenset(a[0] for a in _BRANCHES)

# How often a character shows up in logs, roughly: lowercase letters by English frequency, then
# digits, spaces and common punctuation. A known value is anchored on its least common character.
_COMMON = {c: 20 - i * 0.5 for i, c in enumerate("etaoinshrdlcumwfgypbvkjxqz")}
_COMMON.update({d: 12.0 for d in "0123456789"}, **{" ": 30.0, ".": 10.0, "/": 8.0, ":": 8.0, "-": 8.0,
                                                  "_": 6.0, "=": 5.0, ",": 5.0})
# Capitals by how often logs show them (INFO, WARNING, ERROR, GPU, HTTP, POST, CUDA, NCCL...): an
# upper-cased or base64 disguise of a secret is anchored on a rare one.
_COMMON.update({c: 4.0 - i * 0.12 for i, c in enumerate("EIONRTASLGPUCDHKWFMBVYXJQZ")})


def _known_branch(value: str, index: int, groups: dict[str, tuple[str, int]]) -> tuple[str, str]:
    """(anchor, rest) matching ``value``, anchored on its least common character."""
    k = min(range(len(value)), key=lambda i: (_COMMON.get(value[i], 0.5), i))
    name = f"known{index}"
    groups[name] = ("known", k)
    look = f"(?<={re.escape(value[:k + 1])})" if k else ""
    return value[k], f"{look}{re.escape(value[k + 1:])}(?P<{name}>)"


def _sources(known: Sequence[str]) -> tuple[dict[str, str], dict[str, tuple[str, int]], frozenset[str]]:
    """The pattern's parts, one per anchor character ({anchor: source}), the groups, and the anchors that
    carry a known value's branch."""
    groups = dict(_GROUPS)
    branches: dict[str, list[str]] = {}
    # Known values first and longest first (a secret containing another is masked whole).
    for i, v in enumerate(known):
        anchor, rest = _known_branch(v, i, groups)
        branches.setdefault(anchor, []).append(rest)
    known_anchors = frozenset(branches)
    for anchor, rests in _BRANCHES.items():
        branches.setdefault(anchor, []).extend(rests)
    return {a: f"{re.escape(a)}(?:{'|'.join(r)})" for a, r in branches.items()}, groups, known_anchors


def _build(known: Sequence[str]) -> re.Pattern[str]:
    # One branch per anchor character: the engine tests each character once, then what follows.
    return re.compile("|".join(_sources(known)[0].values()))


@functools.cache
def _pattern_only() -> re.Pattern[str]:
    return _build(())


# The pattern in parts. Every branch of the pattern starts with its anchor character, so at any place in a
# text only the part of the anchor found there can match, and it matches there exactly as the whole pattern
# does (the same span, the same named groups): searching with the parts of the anchors a text holds, in
# order of where they match, finds the same matches as searching with the whole. A short text (an event's
# field, an argv word) then costs the compile of the parts it needs, about 3 ms for "-" or "_", not the
# whole pattern's 70-80 ms (most of it the name trees of ":" and "="; see _may_hold_name).
#
# The ":" and "=" parts (without a known value's branch) can only match after one of the names below (each
# of their branches looks behind for one, case-insensitively) or at a URL's "://": a text with neither, such
# as "SIGINT received: the platform is taking the machine", is passed over without compiling them.
_NAMES = [w.lstrip("^") for w in ["authorization", "_key", *_ASSIGN_NAMES]]
_NEEDS_NAME_SOURCE = "(?i:" + "|".join(re.escape(w) for w in _NAMES) + ")|://"
# The same test for ASCII text, where re's case-insensitive match is plain lower-casing: substrings (each
# name that holds another left out: "secret" finds "secret_key"), about 1 us against the pattern's 20-60 us.
_NAME_WORDS = tuple(sorted({w for w in _NAMES if not any(o != w and o in w for o in _NAMES)}))


def _may_hold_name(text: str) -> bool:
    """Whether a name the ":" and "=" parts look behind for (or a URL's "://") is in ``text``."""
    if text.isascii():
        low = text.lower()
        return "://" in text or any(w in low for w in _NAME_WORDS)
    return _compile_part(_NEEDS_NAME_SOURCE).search(text) is not None  # other alphabets: re's own case folding (K, ſ)


@functools.cache
def _compile_part(source: str) -> re.Pattern[str]:
    """A pattern the same for every redactor (a part without a known value's branch), compiled once per process."""
    return re.compile(source)


def _disguises(s: str) -> set[str]:
    """What a known secret ``s`` also shows up as: upper- and lower-cased (a hex W&B key printed in
    capitals), and inside base64 (``Authorization: Basic base64(user:s)``, ``auth=base64(s)``, a
    config dumped as base64). A value inside base64 is encoded three ways depending on where it starts
    (its offset modulo 3); of each, the characters that depend on ``s`` alone (not on what is around
    it) are what is masked, in the standard and the URL-safe alphabet. Only for secrets long enough that
    these pieces are distinctive (:data:`_MIN_PLAIN_LEN`)."""
    if len(s) < _MIN_PLAIN_LEN:
        return set()
    out = {v for v in (s.upper(), s.lower()) if v != s and _worth_masking_everywhere(v)}
    raw = s.encode()
    for k in range(3):
        enc = base64.b64encode(bytes(k) + raw).decode()
        core = enc[-(-8 * k // 6):(8 * (k + len(raw))) // 6]
        if len(core) >= _MIN_PLAIN_LEN:
            out.update({core, core.replace("+", "-").replace("/", "_")})
    return out


class Redactor:
    """Masks known secret values and credential-looking text (see the module's docstring).

    Build it once per run (:meth:`for_run`); every method is cheap when there is nothing to mask
    and safe to call from any thread (nothing changes after construction but the pattern, compiled once
    when first needed).
    """

    def __init__(self, secrets: Iterable[str] = ()):
        vals: set[str] = set()
        for s in secrets:
            if not isinstance(s, str) or len(s) < MIN_SECRET_LEN:
                continue
            # As it is, and as it shows up in a URL (percent-encoded) or in JSON output (escaped).
            vals.update((s, quote(s, safe=""), json.dumps(s, ensure_ascii=False)[1:-1]))
            if "\n" in s:  # a PEM key in a variable: log lines show it one line at a time
                vals.update(line.strip() for line in s.splitlines() if len(line.strip()) >= _MIN_PLAIN_LEN)
            vals.update(_disguises(s))
        # Longest first: where two known values start at the same place, the longer one is masked.
        self.secrets: tuple[str, ...] = tuple(sorted(vals, key=len, reverse=True))
        self._by_first: dict[str, list[str]] = {}
        self._by_last: dict[str, list[str]] = {}
        for v in self.secrets:
            self._by_first.setdefault(v[0], []).append(v)
            self._by_last.setdefault(v[-1], []).append(v)
        self._longest = max(map(len, self.secrets), default=0)
        self._own_parts: dict[str, re.Pattern[str]] = {}

    @functools.cached_property
    def _compiled(self) -> re.Pattern[str]:
        """The pattern, compiled the first time text is searched: a compile costs about
        0.2 s of CPU, which a process that imports the redactor and masks nothing (``rlsup up`` before it
        starts the supervisor, ``rlsup logs`` of a run without secrets on a terminal...) does not pay."""
        return _build(self.secrets) if self.secrets else _pattern_only()

    @functools.cached_property
    def _parts(self) -> tuple[dict[str, str], dict[str, tuple[str, int]], frozenset[str]]:
        return _sources(self.secrets)

    def _searches(self, text: str, whole: bool) -> list[Callable[[str, int], re.Match[str] | None]]:
        """The compiled searches that can find a match in ``text``: the whole pattern, or the parts of the
        anchors ``text`` holds (see _may_hold_name)."""
        if whole or "_compiled" in self.__dict__:
            return [self._compiled.search]
        sources, _, known_anchors = self._parts
        own = self._own_parts  # the parts with this redactor's own known values: compiled for it alone
        return [(own.get(a) or own.setdefault(a, re.compile(s)) if a in known_anchors else _compile_part(s)).search
                for a, s in sources.items()
                if a in text and (a not in ":=" or a in known_anchors or _may_hold_name(text))]

    def _matches(self, text: str, whole: bool = False) -> Iterator[re.Match[str]]:
        """Every match in ``text``, by where it starts, each searched for from the character after the
        last one's start: the same sequence whether searched with the whole pattern or with its parts."""
        searches = self._searches(text, whole)
        # The next match of each search, earliest first. Two parts never match at one place (their first
        # characters differ), so only the search just used has to search again.
        heap = [(m.start(), i, m) for i, search in enumerate(searches) if (m := search(text, 0)) is not None]
        heapq.heapify(heap)
        while heap:
            start, i, m = heap[0]
            yield m
            nxt = searches[i](text, start + 1)
            if nxt is None:
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, (nxt.start(), i, nxt))

    @classmethod
    def for_run(cls, envs: Iterable[Mapping[str, str]] = (), argvs: Iterable[Sequence[str]] = ()) -> Redactor:
        """A redactor for a run: the secrets of every environment (:func:`secret_values`) and every
        command line (:func:`argv_secrets`), so a token given as ``--github-pat X`` is masked also when
        the program later prints X on its own."""
        return cls(set().union(*map(secret_values, envs), *map(argv_secrets, argvs)))

    # -------------------------------------------------------------------------- text

    def _span(self, m: re.Match[str]) -> tuple[int, int] | None:
        """Where the secret of this match is in the searched text, or None if it is not one."""
        name = m.lastgroup
        kind, back = self._parts[1][name] if name else ("", 0)
        if kind == "known":
            return m.start() - back, m.end()
        if kind == "tok":
            start = m.start() - back
            return (start, m.end()) if _is_token(m.string[start:m.end()]) else None
        assert name is not None
        v = m.group(name)
        start, end = m.span(name)
        if kind == "optv":
            if _flag_value_is_plain(v):  # --key /etc/ssl/key.pem, --token 5: not the credential
                return None
            return (start + 1, end - 1) if v[:1] in ("'", '"') and len(v) > 1 else (start, end)
        if kind == "shv":
            return (start, end) if looks_like_credential(v) else None
        if kind == "sv" and (_is_setting(v) or _is_pathlike(v)):
            return None
        if kind == "ui":
            return _userinfo_secret(v, start)
        return start, end  # sv, bv, av, cv

    def _spans(self, text: str, edges: bool = False, whole: bool = False) -> list[tuple[int, int]]:
        """The secrets in ``text`` as (start, end), sorted, overlaps merged.

        The search goes on from the character after each match's anchor, not from the end of what it
        masked: a branch's match starts at its anchor, which can lie inside or after another secret
        (``https://TOKEN:x@h`` matches at the ":" before TOKEN and masks only ``x``; in
        ``-TOKENapi_key=x`` the option branch swallows TOKEN as part of an option name), and that
        other secret must be found too. ``edges``: also mask what is left of a known secret at either
        end of ``text`` (a string cut to a length elsewhere), see :meth:`_cut_spans`. ``whole``: search
        with the whole pattern, as the log path does (see :meth:`_searches`); the spans are the same.
        """
        found = [span for m in self._matches(text, whole) if (span := self._span(m)) is not None]
        if self.secrets and CUT in text:
            found += self._cut_spans(text)
        if edges and self.secrets:
            if MIN_FRAGMENT <= len(text) < self._longest and any(text in v for v in self.secrets):
                return [(0, len(text))]  # a cut that kept only the middle of a secret
            found += self._edge_spans(text, 0, len(text))
        if len(found) < 2:
            return found
        spans: list[tuple[int, int]] = []
        for start, end in sorted(found):
            if spans and start <= spans[-1][1]:  # overlapping secrets: mask their union once
                spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
            else:
                spans.append((start, end))
        return spans

    def _cut_spans(self, text: str) -> list[tuple[int, int]]:
        """Around each "…" (the log cap's ``…[truncated N chars]``, an excerpt cut to a width in a
        report or an event): the beginning of a known secret right before it, and the end of one right
        after it. The cut split the secret, so its whole value is not there to be found."""
        out: list[tuple[int, int]] = []
        i = text.find(CUT)
        while i >= 0:
            line_start = text.rfind("\n", 0, i) + 1
            line_end = text.find("\n", i)
            line_end = len(text) if line_end < 0 else line_end
            end = i - 1 if i > line_start and text[i - 1] == " " else i
            out += self._edge_spans(text, line_start, end, start=False)
            out += self._edge_spans(text, i + 1, line_end, end=False)
            i = text.find(CUT, i + 1)
        return out

    def _edge_spans(self, text: str, lo: int, hi: int, start: bool = True, end: bool = True) -> list[tuple[int, int]]:
        """Within ``text[lo:hi]``: the longest beginning of a known secret that ends it at ``hi``, and
        (``start``) the longest ending of one that begins it at ``lo``; :data:`MIN_FRAGMENT` characters
        or more. Cut text (a cap, a slice to a length) keeps such a piece of a secret in clear.
        Secrets are indexed by first and last character, so this costs a look at each of the last (and
        first) characters of the window, not one per secret."""
        out: list[tuple[int, int]] = []
        longest = self._longest
        for p in range(max(lo, hi - longest + 1), hi - MIN_FRAGMENT + 1) if end else ():  # longest piece first
            if any(len(v) > hi - p and text.startswith(v[:hi - p], p) for v in self._by_first.get(text[p], ())):
                out.append((p, hi))
                break
        for q in range(min(hi, lo + longest - 1) - 1, lo + MIN_FRAGMENT - 2, -1) if start else ():
            k = q + 1 - lo
            if any(len(v) > k and text.startswith(v[-k:], lo) for v in self._by_last.get(text[q], ())):
                out.append((lo, q + 1))
                break
        return out

    @staticmethod
    def _apply(text: str, spans: list[tuple[int, int]]) -> str:
        bounds = [0, *(i for span in spans for i in span), len(text)]  # the kept pieces: bounds[k]..bounds[k + 1]
        return MASK.join(text[bounds[k]:bounds[k + 1]] for k in range(0, len(bounds), 2))

    def redact_text(self, s: str, edges: bool = False) -> str:
        """``s`` with every known secret value and credential-looking part replaced by ``***``;
        ``edges``: ``s`` may have been cut to a length, so a piece of a known secret at either end is
        masked too."""
        if not isinstance(s, str) or not s:
            return s
        spans = self._spans(s, edges)
        return self._apply(s, spans) if spans else s

    def redact_lines(self, lines: list[str]) -> list[str]:
        """Redact a batch of log lines with one scan of their joined text.

        Returns ``lines`` itself (the same object) when nothing in them needs masking, so the log
        path pays one regex scan per batch and allocates only the joined text; otherwise a new list
        of the same length. Lines should not contain ``\\n`` (the log path splits on it); a batch
        where one does is redacted line by line.
        """
        if not lines:
            return lines
        joined = "\n".join(lines)
        spans = self._spans(joined, whole=True)  # the log path: one scan with the whole pattern
        if not spans:
            return lines
        parts = self._apply(joined, spans).split("\n")
        if len(parts) != len(lines):  # a line held "\n" itself
            parts = [self.redact_text(x) for x in lines]
        return lines if parts == lines else parts  # "token: ***" masked again is unchanged

    # -------------------------------------------------------------------------- structures

    def redact_argv(self, argv: Iterable[str]) -> list[str]:
        """A copy of ``argv`` with secrets masked: the word after ``--api-key``/``--token``/``--github-pat``,
        ``--token=X``, a credential-looking word after a one-letter option, and known values and
        token formats anywhere."""
        return [self.redact_text(a) if secret is None else MASK if secret == a else a[: len(a) - len(secret)] + MASK
                for a, secret in _argv_marks([str(x) for x in argv])]  # the last: --token=X

    def redact_obj(self, obj: Any) -> Any:
        """A redacted copy of a JSON-able value (dict/list/tuple/str; other scalars as they are).

        A list of strings with options in it is masked as an argv; values under keys named like
        secrets (``api_key``, ``env`` entries such as ``GITHUB_PAT``) become ``***``.
        """
        if isinstance(obj, str):
            return self.redact_text(obj, edges=True)  # an event's text may be cut to a length
        if isinstance(obj, Mapping):
            return {k: MASK if isinstance(v, str) and isinstance(k, str) and _env_value_is_secret(k, v)
                    else self.redact_obj(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            if obj and all(isinstance(x, str) for x in obj) and any(x.startswith("-") for x in obj):
                red: list[Any] = self.redact_argv(obj)
            else:
                red = [self.redact_obj(x) for x in obj]
            return red if isinstance(obj, list) else tuple(red)
        return obj


def _env_value_is_secret(name: str, value: str) -> bool:
    """Whether ``value`` under ``name`` (a variable or a JSON key) is masked whole: also a short one
    under a credential name (SHORT_KEY=ab), which is too short to mask wherever it appears."""
    if len(value) < MIN_SECRET_LEN:
        return is_secret_name(name) and bool(value) and not _is_setting(value)
    return _is_secret_value(name, value)


def _userinfo_secret(info: str, start: int) -> tuple[int, int] | None:
    """The secret in a URL's ``user:password`` (at ``start``): the password, and the user part too where
    it is a token (``https://TOKEN:x-oauth-basic@github.com``, ``https://TOKEN@host``); a plain user
    name (``git@``, ``admin:``) is not one, nor a port (``host:8080@``... is no userinfo)."""
    user, colon, password = info.partition(":")
    # a token user: a known token shape, or 20 or more characters of token alphabet with a digit (user names are
    # short words: git, postgres, oauth2)
    token_user = _is_token(user) or (len(user) >= 20 and bool(_CRED_CHARS.match(user)) and any(map(str.isdigit, user)))
    if colon and password and not (password.isdigit() and len(password) <= 5):
        return (start if token_user else start + len(user) + 1), start + len(info)
    return (start, start + len(user)) if token_user else None


def _is_pathlike(v: str) -> bool:
    return v.startswith(("/", "./", "../", "~/"))


def _flag_value_is_plain(v: str) -> bool:
    """A value after a credential-named option that is not the credential: a number, a boolean, a
    ``$VAR`` reference, a path (``--key /etc/ssl/key.pem``), or another option."""
    bare = v.strip("\"'")
    return not bare or _is_setting(bare) or _is_pathlike(bare) or bare.startswith("-")


def _argv_marks(argv: list[str]) -> list[tuple[str, str | None]]:
    """Each word of ``argv`` with the part of it that is a secret (None for none), by position:
    after a credential-named option, ``--opt=X``, or a credential-looking word after ``-k``."""
    out: list[tuple[str, str | None]] = []
    after_opt = after_short = after_user = False
    for a in argv:
        if after_opt and not a.startswith("-") and not _flag_value_is_plain(a):
            out.append((a, a))
        elif (after_user or a.startswith(_USER_OPTS_EQ)) and ":" in a:  # curl -u USER:X, --user=USER:X
            out.append((a, a.split(":", 1)[1] or None))
        elif after_short and looks_like_credential(a):
            out.append((a, a))
        elif (m := _OPT_EQ_ARG_RE.match(a)) and not _flag_value_is_plain(m.group(2)):
            out.append((a, m.group(2)))
        elif _is_token(a) or (not a.startswith("-") and looks_like_credential(a)):  # a positional token
            out.append((a, a))
        else:
            out.append((a, None))
        after_opt = bool(_OPT_ONLY_RE.match(a))
        after_short = bool(_SHORT_OPT_RE.match(a))
        after_user = a in _USER_OPTS
    return out


def _worth_masking_everywhere(value: str) -> bool:
    """A secret seen in one place (an argv) is also masked wherever it shows up later, unless it is
    so plain (``main``, ``basic``) that masking it everywhere would hide ordinary text."""
    if len(value) < MIN_SECRET_LEN or _is_setting(value):
        return False
    if len(value) >= _MIN_PLAIN_LEN and not value.isalpha():
        return True
    return looks_like_credential(value)


def argv_secrets(argv: Sequence[str]) -> set[str]:
    """Secrets given on a command line, by position (what :meth:`Redactor.redact_argv` masks) or by
    pattern inside a word (``Authorization: Bearer X``), that are distinctive enough to be masked
    wherever they show up later (see :func:`_worth_masking_everywhere`)."""
    return {v for a, secret in _argv_marks([str(x) for x in argv])
            # a word without an anchor holds nothing the pattern can find (its every match starts at one)
            if secret is not None or (len(a) >= MIN_SECRET_LEN and not _ANCHORS.isdisjoint(a))
            for v in ([secret] if secret is not None else (a[x:y] for x, y in _DEFAULT._spans(a))) if _worth_masking_everywhere(v)}


_DEFAULT = Redactor()


def redact_text(s: str) -> str:
    """Pattern-only redaction (no known values), for callers without the run's env."""
    return _DEFAULT.redact_text(s)

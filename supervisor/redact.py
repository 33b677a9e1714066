"""Secrets redaction: no env secret, token argument or bearer header leaves rlsup in clear.

A secret is (a) the value of an environment variable whose *name* looks secret
(:data:`SECRET_NAME_RE`), and (b) whatever follows a secret-looking option or header in text
(``--api-key X``, ``--token=X``, ``Authorization: Bearer X``, ``HF_TOKEN=X``). The
:class:`Redactor` replaces both with ``***`` in strings, argv lists, env dicts and nested
JSON-able objects (events). It never raises on odd input; non-strings pass through.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
# Values shorter than this are not treated as secrets: "1", "no", "cpu" would mask half the log.
MIN_SECRET_LEN = 4

SECRET_NAME_RE = re.compile(
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS(?:PHRASE)?(?![A-Z])|CREDENTIAL|AUTH(?!OR)", re.IGNORECASE)
# Names that match the pattern above but hold no secret (paths, counts, public identifiers).
_NOT_SECRET_NAMES = re.compile(
    r"^(?:.*_(?:PATH|FILE|DIR|LEN|LENGTH|COUNT|SIZE|REGION)|.*TOKENIZERS?.*|.*TOKENS(?:_.*)?"
    r"|KEYBOARD.*|.*_KEYS)$",
    re.IGNORECASE)

# An option whose value is secret: --api-key X, --api_key=X, --token X, --hf-token=X, --password X.
_OPT_NAME = r"--?[\w-]*(?:key|token|secret|password|passwd|credentials?)"
_OPT_EQ_RE = re.compile(rf"(?i)({_OPT_NAME}=)(\S+)")
_OPT_SPACE_RE = re.compile(rf"(?i)(?<![\w-])({_OPT_NAME})(\s+)(?!-)(\S+)")
_OPT_ONLY_RE = re.compile(rf"(?i)^{_OPT_NAME}$")
_OPT_EQ_ARG_RE = re.compile(rf"(?i)^({_OPT_NAME}=)(.+)$")
# Headers and assignments in text: "Authorization: Bearer X", "api_key=X", "HF_TOKEN: X".
_BEARER_RE = re.compile(r"(?i)\b(bearer)(\s+)([A-Za-z0-9._~+/=-]{4,})")
_AUTH_HDR_RE = re.compile(
    r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:basic\s+|token\s+|digest\s+)?)(?!bearer\b)([^\s\"',]+)")
_ASSIGN_RE = re.compile(
    r"(?i)\b([\w.-]*(?:api[_-]?key|access[_-]?key|secret|token|password|passwd)[\"']?\s*[:=]\s*[\"']?)"
    r"(?![\"']?\s*(?:\*\*\*|None|null|true|false)\b)([^\s\"',;]{4,})")
# URL userinfo: https://user:PASSWORD@host
_URL_PASS_RE = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s:/@]+:)([^\s@/]+)(@)")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable of this name holds a secret (HF_TOKEN yes, TOKENIZERS_PARALLELISM no)."""
    return bool(SECRET_NAME_RE.search(name)) and not _NOT_SECRET_NAMES.match(name)


def secret_values(env: Mapping[str, str]) -> set[str]:
    """Values (at least :data:`MIN_SECRET_LEN` long) of the secret-named variables of ``env``."""
    return {str(v) for k, v in env.items()
            if v is not None and len(str(v)) >= MIN_SECRET_LEN and is_secret_name(str(k))}


class Redactor:
    """Masks known secret values and secret-looking arguments/headers.

    Build it once per run (``Redactor(secret_values(env))``); every method is cheap when there
    is nothing to mask and safe to call from any thread (no mutable state after construction).
    """

    def __init__(self, secrets: Iterable[str] = ()):
        vals = sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LEN}, key=len, reverse=True)
        self.secrets: tuple[str, ...] = tuple(vals)
        # Longest first so a secret that contains another is masked whole.
        self._re = re.compile("|".join(re.escape(s) for s in vals)) if vals else None

    def redact_text(self, s: str) -> str:
        """``s`` with every known secret value and secret-looking argument replaced by ``***``."""
        if not isinstance(s, str) or not s:
            return s
        if self._re is not None:
            s = self._re.sub(MASK, s)
        if not _might_hold_secret(s):
            return s
        s = _OPT_EQ_RE.sub(lambda m: m.group(1) + MASK, s)
        s = _OPT_SPACE_RE.sub(lambda m: m.group(1) + m.group(2) + MASK, s)
        s = _BEARER_RE.sub(lambda m: m.group(1) + m.group(2) + MASK, s)
        s = _AUTH_HDR_RE.sub(lambda m: m.group(1) + MASK, s)
        s = _ASSIGN_RE.sub(lambda m: m.group(1) + MASK, s)
        s = _URL_PASS_RE.sub(lambda m: m.group(1) + MASK + m.group(3), s)
        return s

    def redact_argv(self, argv: Iterable[str]) -> list[str]:
        """A copy of ``argv`` with secret values masked, also the word after ``--api-key``/``--token``."""
        out: list[str] = []
        mask_next = False
        for a in argv:
            a = str(a)
            if mask_next and not a.startswith("-"):
                out.append(MASK)
                mask_next = False
                continue
            mask_next = False
            if _OPT_ONLY_RE.match(a):
                out.append(a)
                mask_next = True
                continue
            m = _OPT_EQ_ARG_RE.match(a)
            if m:
                out.append(m.group(1) + MASK)
                continue
            out.append(self.redact_text(a))
        return out

    def redact_env(self, env: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``env``: secret-named values become ``***``, other values are text-redacted."""
        return {k: (MASK if is_secret_name(str(k)) and v not in (None, "") else
                    self.redact_text(v) if isinstance(v, str) else v)
                for k, v in env.items()}

    def redact_obj(self, obj: Any) -> Any:
        """A redacted copy of a JSON-able value (dict/list/tuple/str; other scalars as they are).

        A list of strings that looks like an argv (an ``--api-key`` word followed by its value)
        is masked as one; keys named like secrets (``api_key``, ``env`` entries) get ``***``.
        """
        if isinstance(obj, str):
            return self.redact_text(obj)
        if isinstance(obj, Mapping):
            out = {}
            for k, v in obj.items():
                if isinstance(v, str) and isinstance(k, str) and is_secret_name(k) and len(v) >= MIN_SECRET_LEN:
                    out[k] = MASK
                else:
                    out[k] = self.redact_obj(v)
            return out
        if isinstance(obj, (list, tuple)):
            if obj and all(isinstance(x, str) for x in obj) and any(_OPT_ONLY_RE.match(x) for x in obj):
                red: list[Any] = self.redact_argv(obj)
            else:
                red = [self.redact_obj(x) for x in obj]
            return red if isinstance(obj, list) else tuple(red)
        return obj


_HINT_RE = re.compile(r"(?i)key|token|secret|passw|credential|bearer|basic|authoriz|://[^\s/]*:")


def _might_hold_secret(s: str) -> bool:
    # Cheap pre-check: most log lines and events mention none of these words.
    return _HINT_RE.search(s) is not None


_DEFAULT = Redactor()


def redact_text(s: str) -> str:
    """Pattern-only redaction (no known values), for callers without the run's env."""
    return _DEFAULT.redact_text(s)

"""Progress presets: how the common RL stacks print their training step, total and metrics.

Each preset is data (regexes) so the supervisor can compile and batch them in its hot path
(:mod:`~rlsup.supervisor.records.progress`); the tests pin the semantics below down with a per-line reference
parser (tests/supervisor/records/preset_reference.py). Lines are *normalised* log lines (ANSI stripped, ``\\r``
progress folded to its last state), one at a time.

Extractor semantics, applied in order; every matching extractor contributes (first ``step`` and
``total`` win, metrics merge):

* ``kind="regex"``: ``re.search(pattern, line)``. Group ``step`` and ``total`` (ints); every other
  named group whose text is a number becomes a metric.
* ``kind="pydict"``: the match's group ``dict`` is a Python or JSON dict literal (bare ``nan``/``inf``
  tolerated); numeric values, and strings that parse as numbers, become metrics; an integer
  ``step`` or ``global_step`` key gives the step.
* ``keys``: a second regex with groups ``key`` and ``value``, applied with ``re.finditer`` to the
  rest of the line after the match; each hit is one metric.

Metric names are made safe with :func:`safe_name` (``actor/pg_loss`` -> ``actor_pg_loss``,
``Grad. Norm`` -> ``grad_norm``).

Known ambiguity (``trl``/``hf``): the Trainer's evaluation bar is the same description-less tqdm bar
as its training bar, so a line such as `` 40%|####      | 10/25 [00:03<00:04,  3.1it/s]`` during an
evaluation matches too. The preset excludes every bar that carries a description (``Map:``,
``Loading checkpoint shards:``, vLLM's ``Processed prompts:``, ...) and every unit other than it/s or
s/it, but cannot tell the two description-less bars apart from one line; a consumer that sees the
total change away from the first total seen should treat that bar as an evaluation bar.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

# A number as the stacks print it: 12, -0.0213, 4.1234e-01, 1e-06, .5, nan, inf.
NUM = r"[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"


@dataclass(frozen=True)
class Extractor:
    """One way a line can carry progress. See the module docstring for the semantics."""

    pattern: str
    kind: str = "regex"
    keys: str | None = None


@dataclass(frozen=True)
class Preset:
    """A named set of extractors plus where their format comes from."""

    name: str
    extractors: tuple[Extractor, ...]
    versions: str
    source: str


def safe_name(name: str) -> str:
    """Lower-case metric name with every run of characters outside [A-Za-z0-9_] turned into one ``_``."""
    out = re.sub(r"[^A-Za-z0-9_]+", "_", name.strip()).strip("_").lower()
    if not out:
        return "value"
    return "m_" + out if out[0].isdigit() else out


def number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


# --- the stacks ----------------------------------------------------------------------------------

# rlsup reference stack: "Step 12/200 | reward 0.412 | loss -0.0213 | kl 0.01"
_RLSUP = Preset(
    name="rlsup",
    extractors=(
        Extractor(
            pattern=r"(?<!Micro )\bStep (?P<step>\d+)/(?P<total>\d+)(?=\s*(?:\||$))",
            keys=rf"\|\s*(?P<key>[a-z_]+)\s+(?P<value>{NUM})(?=\s*(?:\||$))",
        ),
    ),
    versions="rlsup reference stack (trainer/ in this repository)",
    source="rlsup trainer/ step line contract: 'Step {step}/{total} | name value | ...'",
)

# prime-rl trainer and orchestrator, both styles seen upstream:
#   trainer      "Step 5 | Time: 12.34s | Loss: 0.0123 | Entropy: 0.45 | Mismatch KL: 0.001 | Grad. Norm: ..."
#   trainer      "Step 1 | 18m 23s | Loss -0.0003 | Entropy 0.3717 | Mismatch KL 0.0249 | Grad. Norm 0.0560 ..."
#   orchestrator "Step 0 | Time: 98.02s | Reward: 0.4353 | Seq. Length: 2069.9 tokens/sample | ..."
# after loguru's "HH:MM:SS SUCCESS " prefix. The debug-level "Micro Step 3/8 | Loss: ..." lines and
# "Evaluated ... (Step 5)" are not step lines.
_PRIME = Preset(
    name="prime-rl",
    extractors=(
        Extractor(
            pattern=r"(?<!Micro )\bStep (?P<step>\d+)(?= \|)",
            keys=rf"\|\s*(?P<key>[A-Za-z][A-Za-z .\-]*?)(?::\s*|\s+)(?P<value>{NUM})",
        ),
    ),
    versions="prime-rl main, 2025-09 ('Loss: x' style) to 2026 ('Loss x' style, format_time column); "
             "checked against main 559b447 (v0.8.1.dev67, 2026-08-21) on 2026-11-23",
    source=(
        "PrimeIntellect-ai/prime-rl src/prime_rl/trainer/rl/train.py and sft/train.py "
        "(step_message, logger.success), src/prime_rl/orchestrator/orchestrator.py (step_message), "
        "src/prime_rl/utils/logger.py (format '{time:HH:mm:ss} {level: >7} {message}')"
    ),
)

# AReaL (areal/ and the legacy realhf/ launcher): StatsLogger.commit logs
#   "Epoch 1/10 Step 5/40 Train step 5/400 done."   (1-based; step_info.json's global_step is 0-based)
# then the stats as a tabulate fancy_grid table, four key/value pairs per row:
#   "│ ppo_actor/new_logp/avg │ -2.8348e-01 │ ppo_actor/behave_imp_weight/max │ 1.1531e+00 │ ..."
_AREAL = Preset(
    name="areal",
    extractors=(
        Extractor(pattern=r"\bTrain step (?P<step>\d+)/(?P<total>\d+) done\b"),
        Extractor(
            # zero-width: the keys pattern then reads every pair of the table row
            pattern=rf"(?=│\s*[A-Za-z_][^│]*?\s*│\s*{NUM}\s*│)",
            keys=rf"│\s*(?P<key>[A-Za-z_][^│]*?)\s*│\s*(?P<value>{NUM})\s*(?=│)",
        ),
    ),
    versions="AReaL v0.3-v1.0.4 (areal/utils/stats_logger.py StatsLogger.commit: 'Train step {g+1}/{T} "
             "done.'); checked against v1.0.4 (37d6c64) on 2026-11-23",
    source=(
        "inclusionAI/AReaL areal/utils/stats_logger.py (StatsLogger.commit, print_stats -> "
        "tabulate_stats fancy_grid), areal/utils/logging.py ('[AReaL] %Y%m%d-%H:%M:%S.ms name LEVEL: msg'); "
        "table row as pasted in https://github.com/areal-project/AReaL/issues/110"
    ),
)

# verl: LocalLogger prints "step:5 - actor/pg_loss:0.026 - critic/score/mean:0.41 - ..." (from the Ray
# TaskRunner actor, so usually prefixed "(TaskRunner pid=1234) "), and RayPPOTrainer.fit draws
# tqdm(total=total_training_steps, desc="Training Progress").
_VERL = Preset(
    name="verl",
    extractors=(
        Extractor(
            pattern=r"(?:^|[\s)])step:(?P<step>\d+)(?=\s+-\s|\s*$)",
            # numpy >= 2 reprs numpy scalars as np.float64(0.026): pprint.pformat in concat_dict_to_str
            keys=rf"\s-\s(?P<key>[^\s:]+):(?:np\.[a-z]+\d*\()?(?P<value>{NUM})\)?(?=\s+-\s|\s*$)",
        ),
        Extractor(pattern=r"\bTraining Progress:\s*\d{1,3}%\|[^|]*\|\s*(?P<step>\d+)/(?P<total>\d+)\b"),
    ),
    versions="verl 0.3-0.7.0 (LocalLogger concat_dict_to_str; '{v:.3f}', full-precision and numpy-2 "
             "'np.float64(x)' variants); checked against v0.7.0 (f9c855f) on 2026-11-23",
    source=(
        "volcengine/verl verl/utils/logger/aggregate_logger.py (concat_dict_to_str: "
        "f'{k}:{pprint.pformat(v)}', which numpy 2 prints as np.float64(x)), "
        "verl/trainer/ppo/ray_trainer.py (tqdm desc='Training Progress'); log as pasted in "
        "https://github.com/PRIME-RL/Entropy-Mechanism-of-RL/issues/21"
    ),
)

# Transformers Trainer / TRL: ProgressCallback draws tqdm(total=max_steps) with no description and
# writes each on_log dict with str(): "{'loss': 0.0133, 'grad_norm': 2.66, ..., 'epoch': 0.92}".
_TQDM_TRAIN = (
    r"^\s*\d{1,3}%\|[^|]*\|\s*(?P<step>\d+)/(?P<total>\d+)\s*"
    r"\[[^\]]*?(?:s/it|it/s)(?:,[^\]]*)?\]"
)
_TRL = Preset(
    name="trl",
    extractors=(
        Extractor(pattern=_TQDM_TRAIN),
        Extractor(kind="pydict", pattern=r"(?P<dict>\{'(?=.*'epoch':).*\})"),
    ),
    versions="transformers 4.4x-5.x ProgressCallback; TRL 0.14-1.9.0 (GRPOTrainer/PPO/SFT metric keys); "
             "checked against TRL v1.9.0 (35def3e) on 2026-11-23",
    source=(
        "huggingface/transformers src/transformers/trainer_callback.py (ProgressCallback.on_train_begin "
        "tqdm(total=state.max_steps), on_log training_bar.write(str(logs))); logs as pasted in "
        "https://github.com/huggingface/trl/issues/4086 and /issues/3857"
    ),
)

PRESETS: dict[str, Preset] = {p.name: p for p in (_RLSUP, _PRIME, _AREAL, _VERL, _TRL)} | {"hf": _TRL}


# --- reference parser ------------------------------------------------------------------------------
# number, parse_dict and dict_number are shared by the supervisor's chunk-level matcher
# (rlsup.supervisor.records.progress), so that both readers of these formats parse numbers and dict lines
# the same way.

_BARE_SPECIAL = re.compile(r"(:\s*)(-?(?:nan|inf))(?=\s*[,}])")


def parse_dict(text: str) -> dict | None:
    text = _BARE_SPECIAL.sub(r"\1'\2'", text)  # str({'loss': nan}) is not a literal
    for parse in (ast.literal_eval, json.loads):
        try:
            value = parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        return value if isinstance(value, dict) else None
    return None


def dict_number(v: object) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        return number(v.strip())
    return None

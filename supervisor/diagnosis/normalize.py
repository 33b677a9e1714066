"""Strip the prefixes launchers and loggers put in front of a line.

torchrun ranks (``[rank3]:``, ``[default0]:``), Ray/vLLM process tags (``(pid=123)``,
``(EngineCore_DP0 pid=42)``, ``(RayWorkerWrapper pid=7, ip=10.0.0.1)``), vLLM/SGLang/glog/logging
timestamps and levels, docker-compose service columns. The prefix also names the *stream* the line
came from, which lets interleaved tracebacks of several ranks be read one rank at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Each pattern matches one prefix at the start of a line; group "stream" (when present) names the
# process/rank the line came from. A single separating space is consumed so that the indentation
# of traceback lines underneath survives.
_STREAM_PREFIXES = [
    # [rank3]: / [rank3]:[E321 ...] / [default0]: / [Rank 0]:
    re.compile(r"^\[(?P<stream>(?:rank|Rank |default)\s?\d+)\]:[ ]?"),
    # (pid=123) (RayWorker pid=5) (EngineCore_DP0 pid=697344) (RayWorkerWrapper pid=1, ip=10.1.2.3)
    re.compile(r"^\s?\((?P<stream>(?:[\w.\-]+(?: [\w.\-]+)* )?pid=\d+(?:, ip=[\w.:\-]+)?)\)[ ]?"),
    # docker compose: "vllm-1  | " ; buildkite "  | "
    re.compile(r"^(?P<stream>[\w.\-]+)?\s*\|[ ]"),
]

_PLAIN_PREFIXES = [
    # vLLM: "ERROR 04-28 02:37:03 [core.py:398] " and older "ERROR 11-18 18:07:28 engine.py:366] "
    re.compile(
        r"^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
        r"(?:\[[^\]]*\]|[\w.]+:\d+\])[ ]?"
    ),
    # glog / c10: "[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] "
    re.compile(r"^\[[IWEF]\d{4} \d\d:\d\d:\d\d(?:\.\d+)? [^\]]*\][ ]?"),
    # glog unbracketed: "E0325 20:57:27.620000 2606 site-packages/torch/.../api.py:869] "
    re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+\S+:\d+\][ ]?"),
    # SGLang "[2025-04-23 21:31:41 TP2] ", "[2024-05-08 08:47:31,261] ", CI "[2026-01-31T04:40:19Z] "
    re.compile(r"^\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?(?: [^\]]*)?\][ ]?"),
    # ISO timestamp (+ optional level): "2025-12-01 22:58:18 ", "2024-08-09 07:19:19.929 | ERROR    | "
    re.compile(
        r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
        r"(?:\s*\|?\s*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL|SUCCESS)\s*\|?)?[ ]?"
    ),
    # loguru / prime-rl "16:41:43 WARNING ", "06-09 00:01:18 [INFER] [DEBUG] "
    re.compile(
        r"^(?:\d\d-\d\d )?\d\d:\d\d:\d\d(?:\.\d+)?\s+"
        r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL|SUCCESS|TRACE)\s+"
    ),
    # python logging default "ERROR:torch.distributed.elastic.multiprocessing.api:"
    re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:"),
    # numbered lines pasted from a log viewer "[1743] ", "[E ProcessGroupNCCL.cpp:458] ",
    # metaflow "[177/train/578 (pid 28936)] ": any short bracketed tag followed by a space.
    re.compile(r"^\[[^\]]{1,80}\] "),
]

_MAX_PASSES = 6
_RANK_TAG = re.compile(r"\bRank (\d+)\]")


@dataclass(frozen=True)
class Line:
    """One log line after prefix stripping: the text, the stream it came from, its index."""

    index: int
    stream: str
    text: str


def strip_prefixes(raw: str) -> tuple[str, str]:
    """Return (stream, text) for one raw line: every known prefix removed, nested ones included."""
    text = raw.rstrip()
    stream = ""
    for _ in range(_MAX_PASSES):
        changed = False
        for pat in _STREAM_PREFIXES:
            m = pat.match(text)
            if m and m.end() > 0:
                s = m.groupdict().get("stream")
                if s:
                    stream = s if not stream else f"{stream}/{s}"
                text = text[m.end():]
                changed = True
        for pat in _PLAIN_PREFIXES:
            m = pat.match(text)
            if m and m.end() > 0:
                rank = _RANK_TAG.search(m.group(0))
                if rank and not stream:
                    stream = f"rank{rank.group(1)}"
                text = text[m.end():]
                changed = True
        if not changed:
            break
    return stream, text


def normalize(lines: list[str] | tuple[str, ...]) -> list[Line]:
    """Strip prefixes from every line, keeping the original order and index."""
    out: list[Line] = []
    for i, raw in enumerate(lines):
        stream, text = strip_prefixes(raw)
        out.append(Line(i, stream, text))
    return out

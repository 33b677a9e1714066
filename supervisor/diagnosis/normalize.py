"""Strip the prefixes launchers and loggers put in front of a line.

torchrun ranks (``[rank3]:``, ``[default0]:``), Ray/vLLM process tags (``(pid=123)``,
``(EngineCore_DP0 pid=42)``, ``(RayWorkerWrapper pid=7, ip=10.0.0.1)``), vLLM/SGLang/glog/logging
timestamps and levels, docker-compose service columns. The prefix also names the *stream* the line
came from, which lets interleaved tracebacks of several ranks be read one rank at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

# Each pattern matches one prefix at the start of a line; group "stream" (when present) names the
# process/rank the line came from. A single separating space is consumed so that the indentation
# of traceback lines underneath survives.
_STREAM_PREFIXES = [
    # [rank3]: / [rank3]:[E321 ...] / [default0]: / [Rank 0]: / a log collector's "[VllmSidecar kooEr8C]: "
    re.compile(r"^\[(?P<stream>(?:rank|Rank |default)\s?\d+|[A-Za-z][\w.\-]*(?: [\w.\-]+)?)\]:[ ]?"),
    # (pid=123) (RayWorker pid=5) (EngineCore_DP0 pid=697344) (RayWorkerWrapper pid=1, ip=10.1.2.3)
    # (VllmWorker rank=4 pid=907)
    re.compile(r"^\s?\((?P<stream>[^()]{0,80}?\bpid=\d+(?:, ip=[\w.:\-]+)?)\)[ ]?"),
    # Ray's own daemons: "(raylet) ", "(gcs_server) "
    re.compile(r"^\((?P<stream>raylet|gcs_server|autoscaler|monitor|dashboard(?:_agent)?)\)[ ]?"),
    # mpirun --tag-output: "[1,0]<stdout>:"
    re.compile(r"^\[(?P<stream>\d+,\d+)\]<(?:stdout|stderr)>:"),
    # srun -l: each task's line labelled with its task id, "1: Traceback (most recent call last):" (srun's own
    # messages come unlabelled); the id names the stream, so interleaved tasks are read apart
    re.compile(r"^(?P<stream>\d{1,5}): (?=\S| )"),
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
    # logging "%(asctime)s - %(name)s - %(levelname)s - " after its timestamp
    re.compile(r"^-\s+[\w.]+\s+-\s+(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+-\s"),
    # Transformers' logger "[INFO|trainer.py:746] 2025-03-26 05:53:13,046 >> " (after the other two)
    re.compile(r"^>> "),
    # container runtimes: "2024-11-13T03:15:08.672Z 1 stdout: ", CRI "... stdout F "
    re.compile(r"^(?:\d+\s+)?(?:stdout|stderr)(?::\s|\s+[FP]\s)"),
    # syslog: "May 15 23:09:30 host kernel: " (the dmesg "[  518.050606] " after it is a bracket tag)
    re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w.\-/]+(?:\[\d+\])?: "),
    # a shell prompt pasted with the output: "(venv) user@host:~/dir$ "
    re.compile(r"^(?:\([\w.\-]+\) )?[\w.\-]+@[\w.\-]+:[^\s$#]*[$#] "),
    # pytest's failure lines "E       ray.exceptions.OutOfMemoryError: ..."
    re.compile(r"^E {2,}(?=\S)"),
    # a wrapper that tags its child's output: "SUBPROCESS: "
    re.compile(r"^[A-Z][A-Z_]{2,19}: (?=\S)"),
    # a paste decorated with an emoji per line (a blog's "🚫 ValueError: ...", "❌ ", "⚠️ ")
    re.compile("^[\U0001F300-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF]\uFE0F? +(?=\\S)"),
    # numbered lines pasted from a log viewer "[1743] ", "[E ProcessGroupNCCL.cpp:458] ",
    # metaflow "[177/train/578 (pid 28936)] ": any short bracketed tag followed by a space.
    re.compile(r"^\[[^\]]{1,80}\] "),
]

_PREFIXES = _STREAM_PREFIXES + _PLAIN_PREFIXES
_RANK_TAG = re.compile(r"\bRank (\d+)\]")
# SGR colour codes whose ESC byte was lost on the way into an issue ("[36m(WorkerDict pid=1)[0m");
# with the ESC they are removed before diagnosis (clean_line, logs).
_BARE_SGR = re.compile(r"(?<![\w\]])\[(?:\d{1,3}(?:;\d{1,3})*)?m(?![\w\[])")
# Ray's log deduplication suffix: "... [repeated 3x across cluster]"
_RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
# A tqdm bar redrawn without a newline and glued to the next record: "| 65/204 [39:24<1:23:19,
# 35.97s/it]W0526 16:36:23 ... Sending process 101092 closing signal SIGTERM".
_GLUED_AFTER_BAR = re.compile(r"(\|\s*\d+/\d+\s*\[[^\]\n]{0,80}?(?:it/s|s/it)[^\]\n]{0,80}\])(?=\S)")


@dataclass(frozen=True)
class Line:
    """One log line after prefix stripping: the text, the stream it came from, its index."""

    index: int
    stream: str
    text: str
    # a prefix (a timestamp, a level, a process tag) was stripped: the line starts a new record,
    # so it does not continue the one above that a terminal wrapped
    prefixed: bool = False


def strip_prefixes(raw: str) -> tuple[str, str]:
    """Return (stream, text) for one raw line: every known prefix removed, nested ones included."""
    text = raw.rstrip()
    if "m" in text and "[" in text:
        text = _BARE_SGR.sub("", text)
    if text.endswith("cluster]"):
        text = _RAY_REPEATED.sub("", text)
    stream = ""
    for _ in range(8):  # (nested prefixes: a few passes at most)
        # each pass: the prefixes that name a stream (a Ray worker, a rank), then the plain ones (timestamps,
        # log levels), where a rank tag names the stream when nothing else did
        changed = False
        for pat in _PREFIXES:
            m = pat.match(text)
            if m and m.end() > 0:
                s = m.groupdict().get("stream")  # (only the stream prefixes have one)
                if s:
                    stream = s if not stream else f"{stream}/{s}"
                elif not stream and (rank := _RANK_TAG.search(m.group(0))):
                    stream = f"rank{rank.group(1)}"
                text = text[m.end():]
                changed = True
        if not changed:
            break
    return stream, text


# A record another thread or stream wrote into the middle of a line, right after a number: two
# writers sharing one pipe ("... | load_ms 1.7644" + "ERROR Engine core proc ... died" + "\n": the
# demo's step line and its chaos death, printed by two threads).
_GLUED_LEVEL = re.compile(r"(?<=\d)(?=(?:ERROR|CRITICAL|FATAL)[ :])")


def split_glued(raw: str) -> list[str]:
    """A physical line holding a progress bar (or a number) and, right after it, another record:
    both records."""
    if ("ERROR" in raw or "CRITICAL" in raw or "FATAL" in raw) and _GLUED_LEVEL.search(raw):
        head, *rest = _GLUED_LEVEL.split(raw)
        return [*split_glued(head), *rest]
    if "|" not in raw or "/" not in raw:
        return [raw]
    parts = _GLUED_AFTER_BAR.split(raw)
    # split() with one group returns [before, bar, after, bar, after...]: keep each bar with its text
    out = [text + bar for text, bar in zip(parts[0::2], parts[1::2], strict=False)]
    return out + [parts[-1]] if parts[-1] else out


# rich's box-drawn traceback (rich.traceback, typer, accelerate's CLI): a frame is "│ PATH:LINE in FUNC │"
# inside a box whose top border names it ("╭──── Traceback (most recent call last) ────╮"). Read as
# Python's own format, so the frames say where it failed like any traceback's.
_RICH_TOP = re.compile(r"^[╭┌]─+ Traceback \(most recent call last\) ─+")
_RICH_FRAME = re.compile(r"^│ (?P<file>\S.*?\.pyx?):(?P<line>\d+) in (?P<func>\S+)\s*│?$")
_RICH_BOTTOM = re.compile(r"^[╰└]─+")


def rich_box(text: str) -> str:
    """A line of rich's box-drawn traceback in Python's own traceback format; other lines unchanged."""
    if not text or text[0] not in "│╭┌╰└":
        return text
    if _RICH_TOP.match(text):
        return "Traceback (most recent call last):"
    m = _RICH_FRAME.match(text)
    if m:
        return f'  File "{m.group("file")}", line {m.group("line")}, in {m.group("func")}'
    if _RICH_BOTTOM.match(text):
        return ""
    if text[0] == "│":
        inner = text[1:].rstrip().removesuffix("│").strip()
        if inner.startswith('File "'):
            return f"  {inner}"  # Python's own traceback drawn inside a box (a log panel): its frame lines
        return f"    {inner}" if inner else ""
    return text


# a box's right edge on a line whose left edge a paste cut off ("[TP7] Scheduler hit an exception:
# Traceback (most recent call last):      │")
_BOX_RIGHT_EDGE = re.compile(r"\s+│$")

# IPython's and Colab's traceback frames: "/usr/lib/python3/dist-packages/vllm/utils.py in inner(*args)"
# (Colab links the path: "[/usr/.../utils.py](https://localhost:8080/#) in inner(*args)"), the frame's line
# marked in the source lines below it ("-> 1161     return fn()", "----> 2 model = f("). Read as Python's own
# frame lines.
_IPYTHON_FRAME = re.compile(
    r"^\[?(?P<file>/[^\s\]]+\.pyx?|<ipython-input-[\w-]+>)\]?(?:\([^)\s]*\))? in (?P<func><[^>]+>|[\w.]+)\(")
# Colab folds library frames: "8 frames" where they were
_COLAB_FOLDED = re.compile(r"^\d+ frames$")
_IPYTHON_MARK = re.compile(r"^-+> ?(?P<line>\d+)\b")
_IPYTHON_SOURCE_LINES = 15  # how far below its frame line a frame's marked line may come


def _ipython_frames(out: list[Line]) -> list[Line]:
    """IPython's traceback frames rewritten as Python's ("  File PATH, line N, in FUNC", the marked
    source line indented under it), so that they read as a traceback's frames; other lines unchanged."""
    if not any(ln.text[:1] in "/[<" and " in " in ln.text for ln in out):
        return out
    res = list(out)
    for k, ln in enumerate(out):
        if _COLAB_FOLDED.match(ln.text):
            res[k] = replace(ln, text="")
            continue
        m = _IPYTHON_FRAME.match(ln.text)
        if not m:
            continue
        for j in range(k + 1, min(k + 1 + _IPYTHON_SOURCE_LINES, len(out))):
            if _IPYTHON_FRAME.match(out[j].text):
                break
            mark = _IPYTHON_MARK.match(out[j].text)
            if mark:
                res[k] = replace(ln, text=f'  File "{m.group("file")}", line {mark.group("line")}, in {m.group("func")}')
                res[j] = replace(out[j], text="    " + out[j].text)
                break
    return res


def normalize(lines: list[str] | tuple[str, ...]) -> list[Line]:
    """Strip prefixes from every line, keeping the original order; records glued onto a progress
    bar become lines of their own. ``index`` numbers the resulting lines."""
    out: list[Line] = []
    for raw in lines:
        for piece in split_glued(raw):
            stream, text = strip_prefixes(piece)
            prefixed = len(text) != len(piece.rstrip())
            if text[:1] in "│╭┌╰└":
                text = rich_box(text)
            elif text.endswith("│"):
                text = _BOX_RIGHT_EDGE.sub("", text)
            out.append(Line(len(out), stream, text, prefixed))
    return _ipython_frames(out)


_CLEAN_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*(?:\x07|\x1b\\)")


def clean_line(raw: str) -> str:
    """ANSI escapes removed and ``\\r`` progress redraws folded to the last one."""
    line = _CLEAN_ANSI.sub("", raw.rstrip("\n"))
    if "\r" in line:
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    return line


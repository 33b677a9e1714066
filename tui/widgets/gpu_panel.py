"""GPU gauges (utilisation, memory, temperature, power, owners) and host CPU/RAM bars; without
GPUs, the sampler's reason. With up to :data:`PROCESS_LINES_MAX_GPUS` GPUs each gets a line of its
processes; with more, ``p`` lists them. A bar's level (ok/warn/crit/na) picks a component class.
"""

from __future__ import annotations

from typing import Any

from rich.style import Style
from rich.text import Text

from rlsup.supervisor.render.bars import bar, bar_line, fmt_mem, level, pct_line
from rlsup.tui.format import clip, separated
from rlsup.tui.widgets import TextPanel

PROCESS_LINES_MAX_GPUS = 4


def processes_text(gpu: dict[str, Any]) -> str:
    """``1101 trainer 20.0G · 9000 outside the run 512M``, biggest first; "no processes" when idle."""
    procs = sorted(gpu.get("processes") or [], key=lambda p: -(p.get("used_mb") or 0))
    if not procs:
        return "no processes"
    return " · ".join(f"{p.get('pid')} {p.get('component') or 'outside the run'} {fmt_mem(p.get('used_mb'))}"
                      for p in procs)


def owners(gpu: dict[str, Any]) -> str:
    """``"trainer 12.1G, +1 other"``: run components using this GPU, then anything else."""
    procs = gpu.get("processes") or []
    mem: dict[str, float] = {}
    for p in procs:
        if p.get("component"):
            mem[p["component"]] = mem.get(p["component"], 0) + (p.get("used_mb") or 0)
    others = sum(not p.get("component") for p in procs)
    return ", ".join([f"{c} {fmt_mem(m)}" for c, m in mem.items()] + ([f"+{others} other"] if others else [])) or "idle"


class GpuPanel(TextPanel):
    MIN_WIDTH = 30
    COMPONENT_CLASSES = {"bar--ok", "bar--warn", "bar--crit", "bar--na", "gpu--reason", "gpu--label"}
    DEFAULT_CSS = """
    GpuPanel { height: auto; }
    GpuPanel > .bar--ok { color: $success; }
    GpuPanel > .bar--warn { color: $warning; }
    GpuPanel > .bar--crit { color: $error; text-style: bold; }
    GpuPanel > .bar--na { color: $text-muted; }
    GpuPanel > .gpu--reason { color: $warning; }
    GpuPanel > .gpu--label { color: $text-muted; }
    """

    state: dict[str, Any] = {}  # the run's state: its gpus, host, gpu_backend and gpu_reason

    def set_data(self, state: dict[str, Any]) -> None:
        self.state = state
        self.show()

    def _bar(self, out: Text, text: str, pct: float | None) -> None:
        out.append(text, style=self.get_component_rich_style(f"bar--{level(pct)}"))

    def build(self, width: int) -> Text:
        out = Text(no_wrap=True, overflow="ellipsis", end="")
        label = self.get_component_rich_style("gpu--label")
        gpus = self.state.get("gpus") or []
        # Not for a multi-node run's GPUs: a line per node heads them instead (their pids are other hosts').
        process_lines = len(gpus) <= PROCESS_LINES_MAX_GPUS and not any(g.get("node") for g in gpus)
        node = None
        for g in separated(out, gpus, "\n"):
            if g.get("node") and g.get("node") != node:  # a multi-node run: the GPUs grouped by node
                node = g["node"]
                out.append(f"── {node}\n", style=label)
            self._gpu_line(out, g, width, label)
            if process_lines:
                out.append("\n  └ " + processes_text(g), style=label)
        if not gpus:
            why = self.state.get("gpu_reason") or (
                "waiting for the first GPU sample" if self.state.get("gpu_backend") is None else "no GPUs")
            out.append(f"GPU: none — {why}", style=self.get_component_rich_style("gpu--reason"))
        if host := self.state.get("host"):
            out.append("\n")
            half = (width - 1) // 2
            cpu = host.get("cpu_pct")
            cores = f" ×{host['cpu_count']}" if host.get("cpu_count") else ""
            self._bar(out, pct_line(f"CPU{cores}", cpu, half), cpu)
            out.append(" ")
            used, total = host.get("mem_used_mb"), host.get("mem_total_mb")
            mem_pct = 100.0 * used / total if used is not None and total else None
            self._bar(out, bar_line("RAM", used, total, width - half - 1), mem_pct)
        return out

    def _gpu_line(self, out: Text, g: dict[str, Any], width: int, label: Style) -> None:
        name = (g.get("name") or "GPU").replace("NVIDIA ", "")
        head = f"{g.get('index', '?')} {name[:14]:<14} "
        temp = f"{g['temp_c']:.0f}°C" if g.get("temp_c") is not None else "--°C"
        power = f"{g['power_w']:.0f}W" if g.get("power_w") is not None else "--W"
        who = owners(g)
        tail = f" {temp:>5} {power:>5} "
        room = width - len(head) - len(tail) - min(len(who), 24)
        who_w = max(0, width - len(head) - len(tail) - max(room, 0))
        util = g.get("util_pct")
        used, total = g.get("mem_used_mb"), g.get("mem_total_mb")
        mem_pct = 100.0 * used / total if used is not None and total else None
        out.append(head, style=label)
        if room >= 30:
            util_w = room * 2 // 5
            self._bar(out, pct_line("UTL", util, util_w), util)
            out.append(" ")
            self._bar(out, bar_line("MEM", used, total, room - util_w - 1), mem_pct)
        else:  # narrow: numbers first, one short bar
            text = f"{'N/A' if util is None else f'{util:.0f}%':>4} {fmt_mem(used)}/{fmt_mem(total)} "
            out.append(text)
            who_w = min(len(who), 16)
            self._bar(out, bar(mem_pct, max(0, width - len(head) - len(text) - len(tail) - who_w)), mem_pct)
        out.append(tail).append(clip(who, who_w), style=label)

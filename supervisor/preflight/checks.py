"""Preflight: everything that would make a run fail early, found before anything starts.

:func:`run_checks` looks at a loaded :class:`~rlsup.supervisor.config.model.Config` and returns every
problem at once as :class:`Finding` objects (``error`` stops a run, ``warning`` does not, ``info``
only reports, e.g. a GPU's free memory). ``fast=True`` is the set ``rlsup up`` runs before starting:
no subprocesses and no NVML, only the file system, sockets and ``$PATH``. The full set adds the GPU
checks (through a :mod:`~rlsup.supervisor.gpu.nvml` sampler, injectable for tests) and spawns each
component's interpreter to see whether ``python -m MODULE`` can import MODULE; ``smoke=True`` also
runs every component's ``smoke:`` command with a timeout.

Promises: checks never raise for anything they inspect (a failed check is a finding); nothing is left
behind (probe files are removed, smoke process groups are killed); relative paths resolve the way
the supervisor resolves them (component ``cwd`` against the current directory, executables with a
``/`` against the component's ``cwd``, bare names on the component's ``PATH``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
import re
import shlex
import shutil
import signal as signal_mod
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple
from urllib.parse import urlsplit

import psutil

from ..config.loader import env_file_path, load_yaml
from ..config.model import Component, Config, Path_, parse_hostport
from ..monitor.process import ENV_COMPONENT, ENV_RUN_DIR, signal_name
from ..records.extras import install_hint, top_module

if TYPE_CHECKING:
    from ..gpu.nvml import GpuInfo

Severity = Literal["error", "warning", "info"]
GB = 1e9
SMOKE_TAIL_LINES = 200  # what the diagnosis engine reads
SMOKE_SHOW_LINES = 8  # what the finding shows
MODULE_CHECK_TIMEOUT_S = 30.0

@dataclass(frozen=True)
class Finding:
    """One problem (or, for ``info``, one fact worth showing) found by a check.

    ``check`` is a short id (command, cwd, writable, disk, port, gpu, env, env_file, smoke);
    ``component`` is None for run-wide findings; ``where`` is ``FILE:LINE`` of the config key
    the finding is about when the YAML has it.
    """

    severity: Severity
    check: str
    component: str | None
    message: str
    fix: str
    where: str | None = None


def exit_code(findings: Iterable[Finding]) -> int:
    """0 when nothing is an error (warnings allowed), else 1 (the CLI's EXIT_FAILED)."""
    return 1 if any(f.severity == "error" for f in findings) else 0


def format_findings(findings: Sequence[Finding], *, config_path: str, source: str | None = None) -> str:
    """A human listing: errors, then warnings, then info; each problem with its fix; last line
    ``N errors, M warnings``. ``where`` paths in ``source`` (the config's resolved path, by default
    ``config_path`` resolved) are shown as ``config_path``, the name the user typed."""
    source = str(Path(config_path).resolve()) if source is None else source
    lines: list[str] = []
    for f in sorted(findings, key=_sort_key):
        where = f.where
        if where and source and where.startswith(source + ":"):
            where = config_path + where[len(source):]
        head = f"{where}: " if where else ""
        who = f"{f.component}: " if f.component else ""
        msg_lines = f.message.splitlines() or [""]
        lines.append(f"{head}{f.severity} [{f.check}] {who}{msg_lines[0]}")
        lines.extend(f"    {m}" for m in msg_lines[1:])
        if f.fix and f.severity != "info":
            lines.append(f"    fix: {f.fix}")
    n_err, n_warn = (sum(f.severity == s for f in findings) for s in ("error", "warning"))
    lines.append(f"{n_err} error{'s' if n_err != 1 else ''}, {n_warn} warning{'s' if n_warn != 1 else ''}")
    return "\n".join(lines)


def _sort_key(f: Finding) -> tuple[int, int]:
    """Errors, warnings, info; within each, in config order (run-wide findings last)."""
    line = f.where.rsplit(":", 1)[-1] if f.where else ""
    return ("error", "warning", "info", f.severity).index(f.severity), int(line) if line.isdigit() else 1 << 30


# --------------------------------------------------------------------------------------------- driver


def run_checks(cfg: Config, *, smoke: bool = False, fast: bool = False, gpu_sampler: Any = None,
               min_free_gb: float = 5.0, smoke_timeout: float = 60.0,
               on_progress: Callable[[str], object] | None = None) -> list[Finding]:
    """Every check that applies to ``cfg``; see the module docstring for fast/full/smoke.

    ``gpu_sampler``: anything with ``sample()`` (``rlsup check``'s ``make_sampler()``, a
    :class:`~rlsup.supervisor.gpu.nvml.FakeSampler` in tests); without one the GPUs are not checked.
    """
    ctx = _Ctx(cfg, on_progress or (lambda _msg: None))
    ctx.progress("checking commands, directories, ports and environment")
    _check_env_file(ctx)
    for name, comp in cfg.components.items():
        _check_cwd(ctx, name, comp)
        _check_command(ctx, name, comp)
        _check_shell_vars(ctx, name, comp)
        _check_liveness(ctx, name, comp)
    _check_outputs(ctx, min_free_gb)
    _check_ports(ctx)
    _check_slurm(ctx)
    _check_modules(ctx, QUICK_MODULES_S if fast else MODULE_CHECK_TIMEOUT_S, full=not fast)
    if not fast and gpu_sampler is not None:
        _check_gpus(ctx, gpu_sampler)
    for name, comp in cfg.components.items() if smoke else ():
        if comp.smoke is not None:
            _run_smoke(ctx, name, comp, smoke_timeout)
    return ctx.findings


def _check_slurm(ctx: _Ctx) -> None:
    """With a `slurm:` block: the run dir must be on a filesystem every node of the allocation sees."""
    slurm = ctx.cfg.slurm
    if slurm is None:
        return
    from ..slurm import cluster, shared

    found = shared.problem(ctx.cfg.run_dir, slurm.partition)
    if found is not None:
        ctx.add("error", "slurm", None, found[0], found[1], ("run_dir",))
    known = cluster.ask()  # what the cluster has (nothing is said where Slurm does not answer)
    for path, message, fix in cluster.problems(slurm, known) if known is not None else ():
        ctx.add("error", "slurm", None, message, fix, path)


class _Ctx:
    def __init__(self, cfg: Config, progress: Callable[[str], object]):
        self.cfg = cfg
        self.progress = progress
        self.findings: list[Finding] = []
        # (component, interpreter, module, cwd, why it is needed beyond the command itself)
        self.modules: list[tuple[str, str, str, str | None, str]] = []
        self._run_env: dict[str, str] | None = None

    @functools.cached_property
    def _yaml(self) -> Any:
        """The config's YAML with its positions, parsed the first time a finding needs a line: a config
        with nothing to say is parsed once, by the loader (10,000 components: seconds each parse)."""
        if not self.cfg.source:
            return None
        try:
            return load_yaml(Path(self.cfg.source).read_text(encoding="utf-8"), self.cfg.source)
        except Exception:  # positions are a nicety; the config was already validated
            return None

    def where(self, path: Path_) -> str | None:
        """``FILE:LINE`` of the deepest key of ``path`` the YAML has (None for keys it lacks)."""
        doc, p = self._yaml, tuple(path)
        while doc is not None and p:
            if (pos := doc.key_marks.get(p) or doc.marks.get(p)) is not None:
                return f"{self.cfg.source}:{pos[0]}"
            p = p[:-1]
        return None

    def add(self, severity: Severity, check: str, component: str | None, message: str, fix: str,
            path: Path_ | None = None) -> None:
        self.findings.append(Finding(severity, check, component, message, fix,
                                     self.where(path) if path is not None else None))

    def env_for(self, name: str, comp: Component) -> dict[str, str]:
        """The environment the supervisor gives ``name`` (component.py ``_env``), minus the attempt."""
        if self._run_env is None:  # the run's part once: os.environ decodes every variable at each copy
            self._run_env = {**os.environ, **self.cfg.file_env, **self.cfg.env}
            self._run_env.setdefault("PYTHONUNBUFFERED", "1")
        env = {**self._run_env, **comp.env}
        if comp.gpus is not None:
            env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in comp.gpus)
        env[ENV_RUN_DIR] = self.cfg.run_dir
        env[ENV_COMPONENT] = name
        env["RLSUP_NAME"] = self.cfg.name
        return env


# ------------------------------------------------------------------------------------------ env_file


def _check_env_file(ctx: _Ctx) -> None:
    ef = ctx.cfg.env_file
    if not ef:
        return
    p = Path(ef)
    try:
        p = env_file_path(ef, Path(ctx.cfg.source))
        with open(p, "rb") as fh:
            fh.read(1)
    except OSError as e:
        ctx.add("error", "env_file", None, f"env_file {str(p)!r} is not readable: {e.strerror or e}",
                "create it, fix its path (relative paths are looked up next to the config), or make it "
                "readable by this user", ("env_file",))


# ------------------------------------------------------------------------------------------ liveness

_DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000}


def _check_liveness(ctx: _Ctx, name: str, comp: Component) -> None:
    """An inference engine without ``alive``: a server that stops answering while its process lives (vLLM's API
    server outliving its engine core, a hung engine) is never restarted. rlsup ends a vLLM whose log says its
    engine core died (diagnosis.engines), but only a probe catches one that hangs without a word."""
    from ..diagnosis.engines import engine_of

    cmd = comp.command if isinstance(comp.command, str) else " ".join(comp.command)
    engine = engine_of(cmd)
    if engine is None or comp.alive is not None:
        return
    url = comp.ready.http if comp.ready is not None and comp.ready.http else None
    if url is None:
        port = re.search(r"--port[=\s]+(\d+)", cmd)
        url = f"http://127.0.0.1:{port.group(1) if port else _DEFAULT_PORTS[engine]}/health"
    ctx.add("warning", "alive", name,
            f"{engine} server without a liveness probe (`alive`): if it stops answering while its process lives "
            "(an API server that outlived its engine core, a hung engine), nothing restarts it",
            f"add under components.{name}: alive: {{http: \"{url}\", interval: 15, failures: 4, timeout: 30}}",
            ("components", name))


# ----------------------------------------------------------------------------------------------- cwd


def _cwd_ok(comp: Component) -> bool:
    return comp.cwd is None or os.path.isdir(comp.cwd)


def _check_cwd(ctx: _Ctx, name: str, comp: Component) -> None:
    if comp.cwd is None:
        return
    absolute = os.path.abspath(comp.cwd)
    why, fix = (("does not exist", f"create it (mkdir -p {shlex.quote(absolute)}) or fix `cwd:` (relative paths are "
                 f"relative to where rlsup runs: {os.getcwd()})") if not os.path.exists(comp.cwd) else
                ("is not a directory", "point `cwd:` at a directory") if not os.path.isdir(comp.cwd) else
                ("cannot be entered (no search permission)", f"chmod u+x {shlex.quote(absolute)}, or run as its owner")
                if not os.access(comp.cwd, os.X_OK) else ("", ""))
    if why:
        ctx.add("error", "cwd", name, f"working directory {absolute} {why}", fix, ("components", name, "cwd"))


# ------------------------------------------------------------------------------------------ commands

_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PY_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")


def _resolve_executable(exe: str, env: dict[str, str], cwd: str | None) -> tuple[str | None, str]:
    """(absolute path or None, why not). Mirrors execvpe under subprocess: a name with ``/`` is a
    path (relative to ``cwd``), a bare name is searched on the child's PATH."""
    if "/" in exe:
        p = os.path.abspath(exe if os.path.isabs(exe) else os.path.join(cwd or os.getcwd(), exe))
        why = ("does not exist" if not os.path.exists(p) else "is a directory" if os.path.isdir(p)
               else "is not executable" if not os.access(p, os.X_OK) else "")
        return (None, f"{p} {why}") if why else (p, "")
    path = env.get("PATH", os.defpath)
    found = shutil.which(exe, path=path)
    if found is None:
        return None, f"{exe!r} is not on PATH ({path})"
    return found, ""


_CONTROL = {";", "&&", "||", "|", "&", ";;", "|&"}
_COMPOUND = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
             "{", "}", "(", ")", "function", "select", "!", "[[", "]]"}
_PREFIX_WORDS = {"exec", "command", "nohup", "time", "builtin"}
_BUILTINS = {"cd", "export", "set", "unset", "source", ".", "eval", "if", "for", "while", "until", "case", "{", "(",
             "!", "true", "false", "echo", "printf", "test", "[", "[[", "trap", "wait", "ulimit", "umask", "sleep",
             "read", "exit", "return"}


class _Argv(list[str]):
    """An argv read from a shell line; ``after_cd``: a ``cd`` ran before it, so relative paths in it
    are relative to a directory only the shell knows."""

    after_cd = False


def shell_commands(cmd: str) -> list[list[str]]:
    """The plain simple commands of an ``sh -c`` line, as argv lists with ``exec``/``env``/``nohup``
    prefixes and leading ``VAR=value`` words removed: ``cd x && exec python -m m --a "$(y)"`` ->
    ``[["python", "-m", "m", "--a", "$(y)"]]``. Builtins (``cd``, ``export`` ...) are left out; a
    command whose program word is itself computed (``$PY -m x``) or a compound (if/for/while, subshell,
    braces) is left out too, since only running it can tell what it runs. Unsplittable -> []."""
    try:
        lex = shlex.shlex(cmd, posix=True, punctuation_chars=";&|<>()")
        lex.whitespace_split = True
        lex.commenters = "#"
        tokens = list(lex)
    except ValueError:
        return []
    out: list[list[str]] = []
    after_cd = False
    # the simple commands: the tokens between control operators (``;``, ``&&``, ``|`` ...)
    for words in (list(g) for is_control, g in itertools.groupby(tokens, _CONTROL.__contains__) if not is_control):
        if words[0] in _COMPOUND or "(" in words or ")" in words:
            continue
        if words[0] in ("cd", "pushd", "popd"):
            after_cd = True
            continue
        argv = _without_prefixes(_without_redirections(words))
        if not _names_its_program(argv, after_cd):
            continue
        a = _Argv(argv)
        a.after_cd = after_cd
        out.append(a)
    return out


def _without_redirections(words: list[str]) -> list[str]:
    """``words`` less its redirections and their targets (``2>&1`` has none)."""
    argv: list[str] = []
    rest = iter(words)
    for w in rest:
        if w in ("<", ">", ">>", "<<", "<>", ">&", "<&") or re.fullmatch(r"\d*[<>]+&?\d*", w):
            if not re.fullmatch(r"\d*[<>]&\d+", w):
                next(rest, None)  # its target
            continue
        argv.append(w)
    return argv


def _without_prefixes(argv: list[str]) -> list[str]:
    """``argv`` from its program word on: leading ``VAR=value`` words, ``exec``/``nohup``/``time`` ... and
    ``env`` (with their options) removed."""
    while argv and (_ASSIGN.match(argv[0]) or argv[0] in _PREFIX_WORDS or argv[0] == "env"):
        word, argv = argv[0], argv[1:]
        while word in _PREFIX_WORDS and argv and argv[0].startswith("-"):  # exec -a NAME / time -p
            argv = argv[2:] if argv[0] == "-a" else argv[1:]
        while word == "env" and argv and (_ASSIGN.match(argv[0]) or argv[0].startswith("-")):
            argv = argv[2:] if argv[0] in ("-u", "--unset", "-C", "--chdir") else argv[1:]
    return argv


def _names_its_program(argv: list[str], after_cd: bool) -> bool:
    """Whether ``argv``'s program can be known without running the line: not a builtin, not computed
    (``$PY``, globs), not a relative path after a ``cd`` (relative to a directory only the shell knows)."""
    if not argv or argv[0] in _BUILTINS or any(ch in argv[0] for ch in "$`*?[]{}~"):
        return False
    return not (after_cd and "/" in argv[0] and not os.path.isabs(argv[0]))


def command_argvs(comp: Component) -> list[list[str]]:
    """The argv lists ``comp`` runs that can be read without running it: its argv as the supervisor
    spawns it, or, for ``shell: true`` and a ``sh -c`` line, every plain simple command in it."""
    try:
        argv = comp.argv()
    except ValueError:
        return []
    if comp.shell:
        return shell_commands(argv[-1])
    if len(argv) >= 3 and os.path.basename(argv[0]) in ("sh", "bash", "dash", "zsh") and argv[1] in ("-c", "-lc"):
        return shell_commands(argv[2])
    return [argv]


def _python_target(argv: list[str]) -> tuple[str, str] | None:
    """For ``python [opts] -m MOD`` -> ("module", MOD); ``python [opts] FILE`` -> ("script", FILE)."""
    if not argv or not _PY_NAME.match(os.path.basename(argv[0])):
        return None
    rest = iter(argv[1:])
    for a in rest:
        if a.startswith("-m"):
            mod = a[2:] if len(a) > 2 else next(rest, None)
            return ("module", mod) if mod is not None else None
        if a.startswith("-c") or a == "-":
            return None
        if a in ("-W", "-X", "-Q"):
            next(rest, None)  # its argument
        elif not a.startswith("-"):
            return ("script", a)
    return None


# Console scripts whose interpreter (their shebang) must be able to import these modules (most: their own
# package), and the subcommands that need more: `trl vllm-serve` runs vLLM inside TRL's process.
_SCRIPT_MODULES: dict[str, tuple[str, ...]] = {
    **{script: (script,) for script in ("vllm", "sglang", "trl", "accelerate")}, "torchrun": ("torch",)}
_SUBCOMMAND_MODULES: dict[tuple[str, str], tuple[str, ...]] = {("trl", "vllm-serve"): ("trl", "vllm")}


def _shebang_interpreter(path: str) -> str | None:
    """The python a console script runs under (its ``#!`` line), when it is one."""
    first = ""
    with contextlib.suppress(OSError), open(path, "rb") as fh:
        first = fh.readline(512).decode("utf-8", "replace").strip()
    if not first.startswith("#!"):
        return None
    parts = first[2:].split()
    if parts and os.path.basename(parts[0]) == "env" and len(parts) > 1:
        return shutil.which(parts[1])
    return parts[0] if parts and _PY_NAME.match(os.path.basename(parts[0])) else None


def _needs(argv: list[str], module: str, cwd: str | None) -> list[tuple[str, str]]:
    """(module, why) that a ``python -m MODULE ARGS`` of rlsup's own stack needs beyond MODULE itself."""
    out: list[tuple[str, str]] = []
    args = argv[argv.index(module) + 1:] if module in argv else []
    opt = functools.partial(_opt, args)
    if module == "rlsup.trainer.orchestrator" and opt("--task") == "gsm8k":
        data = opt("--data")
        if data and not os.path.isfile(data if os.path.isabs(data) else os.path.join(cwd or os.getcwd(), data)):
            out.append(("datasets", f"--data {data} is not a file, so it is loaded by name with `datasets`"))
        if opt("--tokenizer"):
            out.append(("transformers", "--tokenizer wraps prompts in a chat template"))
    if module in ("rlsup.trainer.train", "rlsup.trainer.inference") and opt("--model"):
        out += [("transformers", "--model trains/serves a Hugging Face model"),
                ("safetensors", "--model publishes safetensors weights")]
    return out


def _check_command(ctx: _Ctx, name: str, comp: Component) -> None:
    path = ("components", name, "command")
    env = ctx.env_for(name, comp)
    for argv in command_argvs(comp):
        exe, base = argv[0], os.path.basename(argv[0])
        if not _cwd_ok(comp) and "/" in exe:
            return  # already an error; resolving a relative path against it would only repeat it
        found, why = _resolve_executable(exe, env, comp.cwd)
        if found is None:
            hint = install_hint(base) if base in _SCRIPT_MODULES else None
            ctx.add("error", "command", name, f"command cannot be run: {why}",
                    "install it (or activate the environment that has it before rlsup), fix the spelling, "
                    "or give its full path; component env may set PATH" + (f"; {hint}" if hint else ""), path)
        elif base in _SCRIPT_MODULES:  # a known package's console script: its modules, under its shebang's python
            interp = _shebang_interpreter(found)
            mods = _SUBCOMMAND_MODULES.get((base, argv[1] if len(argv) > 1 else ""), _SCRIPT_MODULES[base])
            ctx.modules += [(name, interp, mod, comp.cwd, f"`{base}` runs under {interp}") for mod in mods if interp]
        else:
            _check_python_target(ctx, name, comp, argv, found)


def _check_python_target(ctx: _Ctx, name: str, comp: Component, argv: list[str], found: str) -> None:
    """``python SCRIPT`` must name a file; ``python -m MOD`` (and what its options need) is looked up later."""
    target = _python_target(argv)
    if target is None:
        return
    kind, what = target
    if kind != "script":
        ctx.modules += [(name, found, mod, comp.cwd, why) for mod, why in [(what, ""), *_needs(argv, what, comp.cwd)]]
        return
    if (not _cwd_ok(comp) or getattr(argv, "after_cd", False)) and not os.path.isabs(what):
        return
    p = what if os.path.isabs(what) else os.path.join(comp.cwd or os.getcwd(), what)
    if not os.path.isfile(p):
        ctx.add("error", "command", name, f"python script {os.path.abspath(p)} does not exist",
                "fix the script path (relative to the component's cwd) or set `cwd:`",
                ("components", name, "command"))


# The module check: one interpreter per (interpreter, cwd, Python path settings)
# looks up every module given on its argv and prints one line each as it goes ("ok M", "missing M
# TOP-FOUND", "error M TEXT"). A package's submodule is first looked up in the package's folders
# without importing the package (fast, no side effects); only where that finds nothing is the
# package imported (its __init__ may extend its path) to be sure.
_FIND_SPECS = (
    "import importlib.machinery as m, importlib.util as u, sys\n"
    "for mod in sys.argv[1:]:\n"
    "    top = mod.split('.')[0]\n"
    "    try:\n"
    "        s = u.find_spec(top)\n"
    "        sub = s is not None and mod != top\n"
    "        if sub:\n"
    "            parts, q = mod.split('.'), s\n"
    "            for i in range(2, len(parts) + 1):\n"
    "                loc = q.submodule_search_locations\n"
    "                q = m.PathFinder.find_spec('.'.join(parts[:i]), list(loc)) if loc is not None else None\n"
    "                if q is None:\n"
    "                    break\n"
    "            s = q or u.find_spec(mod)\n"
    "        print('ok' if s is not None else 'missing', mod, int(sub), flush=True)\n"
    "    except ModuleNotFoundError:\n"
    "        print('missing', mod, 1, flush=True)\n"
    "    except BaseException as e:\n"
    "        print('error', mod, (type(e).__name__ + ': ' + str(e)).replace('\\n', ' ')[:300], flush=True)\n"
)
QUICK_MODULES_S = 5.0  # `up` waits at most this long; what is not known by then is left to the run
_PY_PATH_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "VIRTUAL_ENV")


def _check_modules(ctx: _Ctx, wait_s: float, *, full: bool) -> None:
    """Whether each ``python -m MOD`` (and each console script's package) is importable by the component's own
    interpreter, in its cwd and environment: the wrong virtualenv is an error before anything starts, rather
    than a run that says it is supervising and is fatal a second later. ``full`` (``rlsup check``) also reports
    what could not be told (an interpreter that cannot start or crashes, no answer within ``wait_s``); ``up``
    leaves that to the run."""
    if full and ctx.modules:
        ctx.progress(f"checking {len(ctx.modules)} python module(s) in their interpreters")
    procs = []
    for (interp, cwd, *_), (_, env, wanted) in _lookup_groups(ctx).items():
        mods = list(dict.fromkeys(m for _, m, _ in wanted))
        try:
            proc = subprocess.Popen([interp, "-c", _FIND_SPECS, *mods], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:  # (`up`: the command check already said why the interpreter cannot run)
            for name in dict.fromkeys(n for n, _, _ in wanted) if full else ():
                ctx.add("error", "command", name, f"cannot start {interp}: {e.strerror or e}", "fix the interpreter",
                        ("components", name, "command"))
            continue
        procs.append((interp, proc, wanted))
    deadline = time.monotonic() + wait_s
    for interp, proc, wanted in procs:
        found, timed_out, stderr = _lookup_verdicts(proc, deadline)
        for name, mod, why in wanted:
            verdict, detail = found.get(mod, ("", ""))
            if verdict == "missing":
                _module_missing(ctx, name, interp, mod, why, top_found=detail == "1")
            elif verdict == "error" or (full and not verdict and not timed_out):
                ctx.add("error", "command", name, f"looking up module {mod!r} in {interp} failed: "
                        f"{detail or stderr or f'exit code {proc.returncode}'}",
                        f"importing its parent package raises; run `{interp} -c 'import {mod}'` to see the traceback",
                        ("components", name, "command"))
            elif full and not verdict:
                ctx.add("warning", "command", name,
                        f"could not tell within {wait_s:g}s whether {interp} can import {mod!r} "
                        "(importing its parent package is slow)",
                        f"run `{interp} -c 'import {mod}'` by hand, or use `rlsup check --smoke`",
                        ("components", name, "command"))


def _lookup_groups(ctx: _Ctx) -> dict[tuple[Any, ...], tuple[str, dict[str, str], list[tuple[str, str, str]]]]:
    """One lookup process per interpreter, cwd and Python variables: (interpreter, its env, [(component, module,
    why)])."""
    groups: dict[tuple[Any, ...], tuple[str, dict[str, str], list[tuple[str, str, str]]]] = {}
    for name, interp, mod, cwd, why in ctx.modules:
        env = ctx.env_for(name, ctx.cfg.components[name])
        group = groups.setdefault((interp, cwd, *(env.get(k) for k in _PY_PATH_VARS)), (interp, env, []))[2]
        if (name, mod) not in ((n, m) for n, m, _ in group):
            group.append((name, mod, why))
    return groups


def _lookup_verdicts(proc: subprocess.Popen[bytes], deadline: float) -> tuple[dict[str, tuple[str, str]], bool, str]:
    """module -> (verdict, detail) as the lookup process printed them by ``deadline`` (then it is killed), whether
    it was, and the last line of its stderr."""
    out, err, timed_out = _output(proc, max(0.1, deadline - time.monotonic()))
    said = (line.partition(" ") for line in out.decode("utf-8", "replace").splitlines())
    tail = [x for x in err.decode("utf-8", "replace").splitlines() if x.strip()]
    verdicts = {mod: (verdict, detail) for verdict, _, rest in said for mod, _, detail in [rest.partition(" ")]}
    return verdicts, timed_out, tail[-1] if tail else ""


def _module_missing(ctx: _Ctx, name: str, interp: str, mod: str, why: str, *, top_found: bool) -> None:
    top, hint = top_module(mod), install_hint(mod)
    fix = (f"check the module's name, or install the version of {top!r} that has it into that environment "
           f"({interp} -m pip install ...)" if top_found else
           (f"{hint} (into that environment: {interp} -m {hint})" if hint.startswith("pip ") else hint) if hint else
           f"install it into that environment ({interp} -m pip install ...), put the component's cwd or PYTHONPATH "
           "where the package is, or run rlsup from the right virtualenv")
    what = f"{top!r} is installed there, but has no {mod!r}" if top_found else f"package {top!r} is not installed there"
    ctx.add("error", "command", name, f"module {mod!r} is not importable by {interp}: {what}"
            + (f" ({why})" if why else ""), fix, ("components", name, "command"))


# -------------------------------------------------------------------------------------- shell vars

_SHVAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_SQUOTED = re.compile(r"'[^']*'")
_ASSIGNED = re.compile(r"(?:^|[\s;&|(])(?:export\s+|local\s+|readonly\s+)?([A-Za-z_][A-Za-z0-9_]*)=")
_LOOPVAR = re.compile(r"\b(?:for|read|select)\s+(?:-\w+\s+)*([A-Za-z_][A-Za-z0-9_]*)")


def _unset_shell_vars(cmd: str, env: dict[str, str]) -> list[str]:
    """Variables a ``sh -c`` line expands without a default, that neither env nor the line sets."""
    text = _SQUOTED.sub("", cmd)  # single quotes do not expand
    assigned = set(_ASSIGNED.findall(text)) | set(_LOOPVAR.findall(text))
    out: list[str] = []
    for m in _SHVAR.finditer(text):
        var, mod = m.group(1) or m.group(3), m.group(2) or ""
        # A default (or an explicit error message of its own) is enough.
        has_default = mod[:1] in ("-", "=", "+", "?") or mod[:2] in (":-", ":=", ":+", ":?")
        if not has_default and var not in env and var not in assigned and var not in out:
            out.append(var)
    return out


def _check_shell_vars(ctx: _Ctx, name: str, comp: Component) -> None:
    env = ctx.env_for(name, comp)
    for key, value in (("command", comp.command), ("smoke", comp.smoke)):
        if value is None:
            continue
        path = ("components", name, key)
        if comp.shell:
            cmd = value if isinstance(value, str) else shlex.join(value)
            for var in _unset_shell_vars(cmd, env):
                ctx.add("warning", "env", name,
                        f"`{key}` uses ${var} (run by sh -c) but {var} is not set in its environment",
                        f"export {var} before rlsup, add it to `env:`/env_file, or write ${{{var}:-default}}", path)
        else:
            try:
                words = shlex.split(value) if isinstance(value, str) else list(value)
            except ValueError:
                continue  # an unsplittable smoke command is reported when it is run
            for var in sorted({m.group(1) or m.group(3) for w in words for m in _SHVAR.finditer(w)}):
                ctx.add("warning", "env", name,
                        f"`{key}` contains ${var}, which is passed literally: it runs without a shell",
                        f"write ${{{var}}} (rlsup expands it when loading the config) or set `shell: true`", path)


# ------------------------------------------------------------------------------ writable dirs, disk


def _output_dirs(cfg: Config) -> list[tuple[str, str, Path_, str | None]]:
    """(label, path, yaml path, component) of every directory the run writes to."""
    outs: list[tuple[str, str, Path_, str | None]] = [("run dir", cfg.run_dir, ("run_dir",), None)]
    for name, comp in cfg.components.items():
        if comp.resume is not None:
            outs.append(("checkpoint dir", comp.resume.checkpoints, ("components", name, "resume", "checkpoints"), name))
        for i, w in enumerate(comp.watch):
            p = w.path
            glob_at = min((p.find(ch) for ch in "*?[" if ch in p), default=-1)
            if glob_at >= 0:
                p = os.path.dirname(p[:glob_at]) or "."
            outs.append(("watched path", p, ("components", name, "watch", i, "path"), name))
    return outs


def _round_trip(directory: str) -> str | None:
    """Create, write, fsync, re-read and delete a probe file in ``directory``; None, or what failed."""
    probe = os.path.join(directory, f".rlsup-check-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    data = b"rlsup preflight " + uuid.uuid4().hex.encode()
    step = "create a file"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            step = "write"
            os.write(fd, data)
            step = "fsync"
            os.fsync(fd)
        finally:
            os.close(fd)
        step = "read back"
        with open(probe, "rb") as fh:
            back = fh.read()
        if back != data:
            return f"read back {len(back)} bytes that differ from the {len(data)} written"
        return None
    except OSError as e:
        return f"cannot {step} in {directory}: {e.strerror or e}" + (
            " (read-only file system)" if e.errno == errno.EROFS else "")
    finally:
        with contextlib.suppress(OSError):
            os.unlink(probe)


def _check_outputs(ctx: _Ctx, min_free_gb: float) -> None:
    by_fs: dict[int, tuple[str, list[str]]] = {}
    round_trip = functools.cache(_round_trip)  # once per directory
    for label, out_path, yaml_path, component in _output_dirs(ctx.cfg):
        target = os.path.abspath(out_path)
        anchor = str(next((p for p in (Path(target), *Path(target).parents) if os.path.lexists(p)), "/"))
        not_dir = (f"{label} {target} exists and is not a directory"
                   if anchor == target and os.path.exists(target) and not os.path.isdir(target) else
                   f"{label} {target} cannot be created: {anchor} is a file, not a directory"
                   if not os.path.isdir(anchor) else None)
        if not_dir:
            ctx.add("error", "writable", component, not_dir, "move the file away or point the config elsewhere",
                    yaml_path)
            continue
        failed = round_trip(anchor)
        later = "" if anchor == target else f" (it does not exist yet; it will be created under {anchor})"
        if failed:
            ctx.add("error", "writable", component, f"{label} {target} is not writable{later}: {failed}",
                    f"make {anchor} writable for this user (uid {os.geteuid()}), mount it read-write, "
                    "or point the config elsewhere", yaml_path)
            continue
        try:
            dev = os.stat(anchor).st_dev
        except OSError:
            continue
        by_fs.setdefault(dev, (anchor, []))[1].append(label + (f" of {component}" if component else ""))
    for anchor, users in by_fs.values():
        try:
            free = shutil.disk_usage(anchor).free
        except OSError as e:
            ctx.add("warning", "disk", None, f"cannot read free space of {anchor}: {e.strerror or e}", "check the mount")
            continue
        if free < min_free_gb * GB:
            ctx.add("error", "disk", None,
                    f"only {free / GB:.1f} GB free on the file system of {anchor} "
                    f"(needs {min_free_gb:g} GB; holds the {', '.join(users)})",
                    "free space (old checkpoints, caches), or point the run dir/checkpoints at a larger volume")


# --------------------------------------------------------------------------------------------- ports


def _probe_ports(cfg: Config) -> dict[tuple[str, int], list[tuple[str, Path_]]]:
    """(host, port) of every local http/tcp probe -> [(component, yaml path)]."""
    out: dict[tuple[str, int], list[tuple[str, Path_]]] = {}
    for name, comp in cfg.components.items():
        for kind, probe in (("ready", comp.ready), ("alive", comp.alive)):
            if probe is None or probe.kind() not in ("http", "tcp"):
                continue
            if probe.http is not None:
                u = urlsplit(probe.http)
                host = u.hostname or "127.0.0.1"
                try:
                    port = u.port or (443 if u.scheme == "https" else 80)
                except ValueError:
                    continue
            else:
                host, port = parse_hostport(probe.target())
            path: Path_ = ("components", name, kind, probe.kind())
            if host not in ("localhost", "127.0.0.1", "0.0.0.0", "::1", "::", "", socket.gethostname()):
                continue  # another machine's port is not ours to test
            key = ("::1" if host in ("::1", "::") else "127.0.0.1", port)
            if not any(n == name for n, _ in out.get(key, [])):
                out.setdefault(key, []).append((name, path))
    return out


def port_holder_pid(port: int) -> int | None:
    """The pid of a process listening on ``port`` when psutil can see it."""
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.Error, OSError):
        return None
    return next((int(c.pid) for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                 and c.pid), None)


def adoptable_owner(pid: int, run_dir: str | Path) -> str | None:
    """The component of ``run_dir`` whose attempt ``pid`` belongs to, under a live monitor of that
    run (what the next supervisor adopts); None otherwise. The proof is the monitor's record, its
    identity (:func:`process.is_monitor_of` guards against pid reuse) and its process tree, never
    the holder's word alone."""
    from ..monitor.process import attempt_from_record, children_map, is_monitor_of, records

    root = Path(run_dir)
    children = children_map(max_age=0.0)
    return next((str(rec["component"]) for path, rec in records(root / "monitors")
                 if is_monitor_of(rec, root) and pid in attempt_from_record(rec, path).members(children)), None)


def port_holder(pid: int, run_dir: str) -> tuple[str, str | None]:
    """``(pid N (name: cmdline), other)`` for the process ``pid`` that listens on a port. The text says when
    it is a component of an rlsup run (its marker env): of ``run_dir``, or of another run, whose run dir is
    then ``other`` (for a hint that names it)."""
    try:
        p = psutil.Process(pid)
        text = f"pid {pid} ({p.name()}: {' '.join(p.cmdline())[:120]})"
    except psutil.Error:
        return f"pid {pid}", None
    env: dict[str, str] = {}
    with contextlib.suppress(psutil.Error, OSError):
        env = p.environ()
    theirs, component = env.get(ENV_RUN_DIR), env.get(ENV_COMPONENT)
    if theirs and component:
        if theirs == run_dir:
            return f"{text}, component {component} of this run", None
        return f"{text}, component {component} of the run in {theirs}", theirs
    return text, None


def _bind_error(host: str, port: int) -> OSError | None:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        s = socket.socket(fam, socket.SOCK_STREAM)
    except OSError:
        return None  # no IPv6 here: nothing can hold it either
    try:
        # Servers set SO_REUSEADDR, so a TIME_WAIT leftover does not stop them; only a listener does.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        return None
    except OSError as e:
        return e
    finally:
        s.close()


def _check_ports(ctx: _Ctx) -> None:
    """Each local port a probe names, then `metrics: {port}` (the supervisor serves Prometheus there): in use now?"""
    targets: list[tuple[str, int, str, str, str | None, Path_]] = [
        (host, port, f"port {port} on {host} (probed by {', '.join(n for n, _ in users)})", "port", *users[0])
        for (host, port), users in _probe_ports(ctx.cfg).items()]
    if (m := ctx.cfg.metrics) is not None:
        targets.append((m.host, m.port, f"metrics port {m.port} on {m.host}", "metrics", None, ("metrics", "port")))
    for host, port, what, check, component, path in targets:
        if (err := _bind_error(host, port)) is None:
            continue
        if err.errno != errno.EADDRINUSE:
            ctx.add("warning", check, component, f"cannot test {what}: {err.strerror or err}",
                    "ports below 1024 need root; use a higher port", path)
            continue
        pid = port_holder_pid(port)
        if pid and check == "port" and (owner := adoptable_owner(pid, ctx.cfg.run_dir)) is not None:
            # A run whose supervisor died: its components run on under their monitors, and
            # holding their ports is what they should be doing. `up` takes them over.
            ctx.add("info", check, component, f"{what} is held by pid {pid}, component {owner} of this run, still "
                    "running under its monitor", "`rlsup up` takes it over (same pid); `rlsup down` ends it", path)
            continue
        holder = port_holder(pid, ctx.cfg.run_dir) if pid else None
        other = holder[1] if holder and check == "port" else None
        fix = ("choose another `metrics: port:` (or stop what holds it)" if check == "metrics" else
               f"that run uses it: stop it (`rlsup down --run-dir {shlex.quote(other)}`), or change the port in "
               "the command and the probe" if other else
               "stop that process (a leftover of an earlier run? `rlsup down`), or change the port "
               "in the command and the probe")
        ctx.add("error", check, component, f"{what} is already in use: "
                f"{'held by ' + holder[0] if holder else 'held by a process this user cannot see'}", fix, path)


# ---------------------------------------------------------------------------------------------- GPUs


def _check_gpus(ctx: _Ctx, sampler: Any) -> None:
    wanted = {n: c.gpus for n, c in ctx.cfg.components.items() if c.gpus}
    if not wanted:
        return
    ctx.progress("checking GPUs")
    try:
        sample, reason = sampler.sample(), ""
    except Exception as e:  # the sampler promises not to raise; a third-party one might
        sample, reason = None, f"sampling GPUs failed: {e}"
    if sample is None or (sample.backend == "none" and not sample.gpus):
        reason = reason if sample is None else (sample.reason or "no GPU backend")
        for name in wanted:
            ctx.add("warning", "gpu", name, f"names GPUs {wanted[name]} but no GPU can be seen here: {reason}",
                    "run this check on the GPU machine; if it is one, install the NVIDIA driver / start the "
                    "container with GPUs (--gpus all)", ("components", name, "gpus"))
        return
    gpus = {g.index: g for g in sample.gpus}
    for name, indices in wanted.items():
        for i in indices:
            _check_gpu(ctx, name, i, gpus)
    for a, b in itertools.combinations(wanted, 2):  # two components assigned the same GPU
        if shared := sorted(set(wanted[a]) & set(wanted[b])):
            ctx.add("warning", "gpu", b, f"shares GPU {', '.join(map(str, shared))} with {a}",
                    "make sure both fit in its memory (e.g. lower the inference server's memory fraction), "
                    "or give each component its own GPUs", ("components", b, "gpus"))


def _check_gpu(ctx: _Ctx, name: str, i: int, gpus: dict[int, GpuInfo]) -> None:
    """GPU ``i`` of component ``name``: it exists, its memory suits the engine's fraction, it is free."""
    path = ("components", name, "gpus")
    g = gpus.get(i)
    if g is None:
        have = ", ".join(str(k) for k in sorted(gpus)) or "none"
        ctx.add("error", "gpu", name,
                f"GPU {i} does not exist: this machine has {len(gpus)} GPU(s) (indices {have})",
                "fix `gpus:` (NVML indices, PCI bus order as in nvidia-smi)", path)
        return
    free_txt = ("free memory unknown (NVML did not report it)" if g.mem_total_mb is None or g.mem_used_mb is None
                else f"{(g.mem_total_mb - g.mem_used_mb) / 1024:.1f} of {g.mem_total_mb / 1024:.1f} GiB free")
    ctx.add("info", "gpu", name, f"GPU {i} {g.name}: {free_txt}", "", path)
    _check_memory_fraction(ctx, name, g, path)
    holders, used = list(g.processes), g.mem_used_mb or 0.0
    if holders or (g.mem_total_mb and used > 0.1 * g.mem_total_mb):
        who = ", ".join(_pid_text(p.pid, p.used_mb) for p in holders) or "processes NVML does not list"
        ctx.add("warning", "gpu", name,
                f"GPU {i} is already in use ({used / 1024:.1f} GiB used) by {who}",
                "stop those processes (leftovers of an earlier attempt?) or pick another GPU", path)


# The memory-fraction flags of the engines rlsup knows, and what the fraction is a fraction of.
#  SGLang --mem-fraction-static: of the memory FREE when the server starts. sglang@v0.5.x
#    python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py profile_max_num_token:
#    rest_memory = available_gpu_memory - total_gpu_memory * (1 - mem_fraction_static), where
#    total_gpu_memory is get_available_gpu_memory() (torch.cuda.mem_get_info free) taken before the
#    weights are loaded; "Not enough memory. Please try to increase --mem-fraction-static." when <= 0.
#    Memory held by others lowers what it takes; it never refuses to start because of it.
#  vLLM --gpu-memory-utilization: of TOTAL memory. vllm/v1/worker/gpu_worker.py Worker.init_device:
#    requested_memory = total_memory * gpu_memory_utilization, and ValueError("Free memory on device ...
#    on startup is less than desired GPU memory utilization ...") when free < requested
#    (0.10.x-0.16.x and current main alike). TRL's `trl vllm-serve --gpu_memory_utilization` passes it on.
ENGINE_FRACTIONS: dict[str, tuple[str, str]] = {  # each flag spelled with - and with _
    f: v for flag, v in (("--mem-fraction-static", ("sglang", "free")), ("--gpu-memory-utilization", ("vllm", "total")))
    for f in (flag, "--" + flag[2:].replace("-", "_"))}


class MemoryAsk(NamedTuple):
    """An inference server's memory fraction: its flag, value, engine, and whether it is a fraction of
    the ``total`` memory (vLLM) or of the memory ``free`` at start (SGLang)."""

    flag: str
    fraction: float
    engine: str
    of: str


def memory_ask(comp: Component) -> MemoryAsk | None:
    """The memory fraction an inference server's command asks for, read from every argv it runs
    (list, string, ``exec ...`` or ``shell: true``); None when it names none (or an invalid one)."""
    for argv in command_argvs(comp):  # (never raises: a command shlex cannot split has no argv)
        for flag, (engine, of) in ENGINE_FRACTIONS.items():
            if (value := _opt(argv, flag)) is None:
                continue
            try:
                f = float(value)
            except ValueError:
                return None
            return MemoryAsk(flag, f, engine, of) if 0 < f <= 1 else None
    return None


def _opt(argv: list[str], flag: str) -> str | None:
    """The value of the option ``flag`` in ``argv`` (``--flag VALUE`` or ``--flag=VALUE``), None without one."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1:]
    return None


def _check_memory_fraction(ctx: _Ctx, name: str, g: Any, path: Path_) -> None:
    ask = memory_ask(ctx.cfg.components[name])
    if ask is None or not g.mem_total_mb or g.mem_used_mb is None:
        return
    total, free = g.mem_total_mb, g.mem_total_mb - g.mem_used_mb
    gib = 1024.0
    if ask.of == "total":
        need = ask.fraction * total
        if free < need:
            ctx.add("error", "gpu", name,
                    f"{ask.flag} {ask.fraction:g} asks {ask.engine} for {need / gib:.1f} GiB of GPU {g.index} "
                    f"({ask.fraction:g} x {total / gib:.1f} GiB total), but only {free / gib:.1f} GiB is free: "
                    "vLLM refuses to start ('Free memory on device ... is less than desired GPU memory "
                    "utilization')",
                    f"free the GPU (see the processes holding it) or lower {ask.flag} to at most "
                    f"{max(0.0, free / total - 0.01):.2f}", path)
        return
    takes = ask.fraction * free
    ctx.add("info", "gpu", name,
            f"{ask.flag} {ask.fraction:g}: SGLang takes {ask.fraction:g} of the memory free when it starts "
            f"(now {free / gib:.1f} GiB -> ~{takes / gib:.1f} GiB for weights and KV cache), leaving "
            f"~{(free - takes) / gib:.1f} GiB of GPU {g.index} to whatever starts after it", "", path)
    if g.mem_used_mb > 0.1 * total:
        ctx.add("warning", "gpu", name,
                f"GPU {g.index} already has {g.mem_used_mb / gib:.1f} GiB in use: SGLang's {ask.flag} "
                f"{ask.fraction:g} is a fraction of the free memory, so it will get ~{takes / gib:.1f} GiB "
                f"instead of the {ask.fraction * total / gib:.1f} GiB it would get on an empty GPU",
                "free the GPU first if the KV cache it would get is too small, or raise the fraction", path)


def _pid_text(pid: int, used_mb: float | None) -> str:
    name = "?"
    with contextlib.suppress(psutil.Error):
        name = psutil.Process(pid).name()
    mem = f", {used_mb / 1024:.1f} GiB" if used_mb else ""
    return f"pid {pid} ({name}{mem})"


# --------------------------------------------------------------------------------------------- smoke


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # Whether or not the leader is gone after the SIGTERM, members that ignored it still get the SIGKILL.
    for sig, wait_s in ((signal_mod.SIGTERM, 2.0), (signal_mod.SIGKILL, 5.0)):
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait_s)


def _run_smoke(ctx: _Ctx, name: str, comp: Component, timeout: float) -> None:
    """Run ``comp``'s smoke command as the component would run (same cwd and env, ``RLSUP_SMOKE=1``)
    and judge it: it must exit 0 within ``timeout``."""
    from ..diagnosis import clean_line

    path = ("components", name, "smoke")
    if not _cwd_ok(comp):
        ctx.add("error", "smoke", name, "smoke command not run: its working directory does not exist",
                "fix `cwd:` first", path)
        return
    try:
        argv = comp.model_copy(update={"command": comp.smoke}).argv()  # built exactly like its command
    except ValueError as e:
        ctx.add("error", "smoke", name, f"smoke command cannot be split like a shell would: {e}",
                "fix its quoting, or give it as a list", path)
        return
    shown = comp.smoke if isinstance(comp.smoke, str) else shlex.join(comp.smoke or [])
    ctx.progress(f"smoke {name}: {shown} (timeout {timeout:g}s)")
    env = {**ctx.env_for(name, comp), "RLSUP_SMOKE": "1"}
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(argv, cwd=comp.cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        ctx.add("error", "smoke", name, f"smoke command cannot start: {argv[0]!r}: {e.strerror or e}",
                "fix the smoke command (same PATH and cwd as the component)", path)
        return
    out, _, timed_out = _output(proc, timeout)
    dt = time.monotonic() - t0
    lines = [clean_line(x) for x in out.decode("utf-8", "replace").splitlines()][-SMOKE_TAIL_LINES:]
    shown_lines = [x for x in lines if x.strip()][-SMOKE_SHOW_LINES:]
    tail = "\n".join(f"| {x[:300]}" for x in shown_lines)
    if timed_out:
        ctx.progress(f"smoke {name}: timed out after {timeout:g}s")
        ctx.add("error", "smoke", name,
                f"smoke command did not finish within {timeout:g}s (its process group was killed)"
                + (f"; last lines:\n{tail}" if tail else "; it printed nothing"),
                "a smoke command must exit by itself (e.g. --max-steps 1 --dry-run); if it is just slow, "
                "raise the timeout", path)
        return
    rc = proc.returncode
    if rc == 0:
        ctx.progress(f"smoke {name}: ok ({dt:.1f}s)")
        return
    ctx.progress(f"smoke {name}: failed (exit {rc})")
    _smoke_failed(ctx, name, rc, lines, tail, dt)


def _output(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes, bool]:
    """What ``proc`` printed (stdout, stderr), and whether it ran past ``timeout`` (then its group is killed)."""
    try:
        out, err = proc.communicate(timeout=timeout)
        return out, err or b"", False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
    try:
        out, err = proc.communicate(timeout=5.0)
    except subprocess.TimeoutExpired:
        # A descendant left the group and still holds the pipe; give up on the rest of its output.
        proc.kill()
        out, err = b"", b""
    return out, err or b"", True


def _smoke_failed(ctx: _Ctx, name: str, rc: int, lines: list[str], tail: str, dt: float) -> None:
    """A smoke command that exited non-zero (or was killed): the diagnosis of its output, and where to look."""
    from ..diagnosis import diagnose

    code, sig = (None, signal_name(-rc)) if rc < 0 else (rc, None)  # Popen's "killed by signal -rc"
    d = diagnose(lines, exit_code=code, signal=sig)
    parts = [f"smoke command failed ({'signal ' + sig if sig else f'exit code {rc}'}, after {dt:.1f}s): "
             f"{d.summary}"]
    parts += [p for p in (d.exception and f"exception: {d.exception[:300]}", d.location and f"location: {d.location}",
                          tail and f"last lines:\n{tail}") if p]
    fix = (f"fix {d.location} and run `rlsup check --smoke` again" if d.location
           else "run the smoke command by hand in the component's cwd to see the whole output")
    ctx.add("error", "smoke", name, "\n".join(parts), fix, ("components", name, "smoke"))

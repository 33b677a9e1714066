"""Tab completion in real bash, zsh and fish, sourced from `rlsup completion SHELL` as docs/commands.md says:
commands, options, config files, and the component names of the runs under ./runs (from their state.json,
no supervisor needed). Under CI a missing shell fails (.ci/run installs zsh and fish)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.fixture
def here(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "demo"
    run.mkdir(parents=True)
    (run / "state.json").write_text(json.dumps({"components": {"trainer": {}, "inference": {}, "orchestrator": {}}}))
    (tmp_path / "grpo.yaml").write_text("components: {}\n")
    (tmp_path / "notes.txt").write_text("")
    return tmp_path


def _shell(name: str, script: str, cwd: Path) -> list[str]:
    exe = shutil.which(name)
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed: .ci/run installs it (apt-get install {name})")
        pytest.skip(f"{name} is not installed (apt-get install {name})")
    if not (BIN / "rlsup").exists():
        pytest.skip("the rlsup console script is not installed (pip install -e .)")
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8"}
    r = subprocess.run([exe, *(["-f"] if name == "zsh" else []), "-c", script], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


BASH = """
eval "$(rlsup completion bash)"
complete -p rlsup >/dev/null || exit 3
comp() {
  COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; read -ra COMP_WORDS <<< "$1"
  [[ "$1" == *" " ]] && COMP_WORDS+=("")
  COMP_CWORD=$((${#COMP_WORDS[@]}-1))
  _python_argcomplete rlsup "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
  echo "${COMPREPLY[*]}"
}
"""


def test_bash(here: Path) -> None:
    out = _shell("bash", BASH + 'comp "rlsup lo"\ncomp "rlsup logs "\ncomp "rlsup why tr"\ncomp "rlsup up "\n'
                 'comp "rlsup up grpo.yaml --se"\n', here)
    assert out[0].split() == ["logs"]
    assert {"inference", "orchestrator", "trainer", "--follow", "--attempt"} <= set(out[1].split())
    assert out[2].split() == ["trainer"]
    assert "grpo.yaml" in out[3].split() and "notes.txt" not in out[3].split()
    assert out[4].split() == ["--set"]


def test_bash_names_come_from_the_run_dir_given(here: Path) -> None:
    other = here / "elsewhere"
    other.mkdir()
    (other / "state.json").write_text(json.dumps({"components": {"sglang": {}, "learner": {}}}))
    out = _shell("bash", BASH + f'comp "rlsup restart --run-dir {other} "\n', here)
    assert {"sglang", "learner"} <= set(out[0].split()) and "trainer" not in out[0].split()


def test_zsh(here: Path) -> None:
    # Real zsh with its completion system; only _describe, which draws the menu, prints instead.
    script = """autoload -U compinit && compinit -u -D
eval "$(rlsup completion zsh)"
print "registered: $_comps[rlsup]"
_describe() { print -rl -- "${(@P)2}" }
for line in "rlsup logs tr" "rlsup comp"; do
  BUFFER=$line; CURSOR=${#BUFFER}; words=(${=line}); _python_argcomplete
done
"""
    out = _shell("zsh", script, here)
    assert out[0] == "registered: _python_argcomplete"
    assert out[1] == "trainer:"
    assert out[2].startswith("completion:print the shell code")


def test_fish(here: Path) -> None:
    out = _shell("fish", 'rlsup completion fish | source; complete -C "rlsup lo"; echo SEP; '
                 'complete -C "rlsup stack "', here)
    i = out.index("SEP")
    assert [x.split("\t")[0] for x in out[:i]] == ["logs"]
    assert {"inference", "orchestrator", "trainer"} <= {x.split("\t")[0] for x in out[i + 1:]}

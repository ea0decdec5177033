"""The commands of the other scripts (reproduce.py, pair.py, duel.py, load_serve.py, ...) that the README and docs/
show in their bash blocks, run as a user would: each file's in the order it shows them, in a fresh folder
(configs/, docs/ and tests/ beside it, as in a checkout), shortened by the overrides of ``SHORTER``. main.py's are
run by tests/test_readme.py and serve.py's by tests/serve/test_serve_script.py."""

import contextlib
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.helpers.ray_lock import one_ray_cluster
from tests.test_readme import DOCS, ROOT

ELSEWHERE = ("main.py", "serve.py")  # run by their own tests
# a flag's value replaced (or the flag added) to keep each run to seconds: {script: {flag: values}}
SHORTER = {
    "reproduce.py": {"--rounds": ["6"], "--seeds": ["2"]},
    "pair.py": {"--rounds": ["6"]},
    "duel.py": {"--questions": ["4"]},
    "load_serve.py": {"--seconds": ["1"], "--max-answers": ["30"]},
}


def script_commands(path: str) -> list[list[str]]:
    """The ``python scripts/X.py ...`` commands (X not in ELSEWHERE) of ``path``'s bash blocks, as argv, in order."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", open(os.path.join(ROOT, path)).read(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                argv = shlex.split(part, comments=True)
                if argv[:1] == ["python"] and len(argv) > 1 and argv[1].startswith("scripts/"):
                    if os.path.basename(argv[1]) not in ELSEWHERE:
                        out.append(argv[1:])
    return out


def shortened(argv: list[str]) -> list[str]:
    """``argv`` with the values of SHORTER's flags replaced (a flag's values run to the next flag), or added (before
    a ``--``)."""
    out, i = list(argv), 0
    for flag, values in SHORTER.get(os.path.basename(argv[0]), {}).items():
        if flag in out:
            i = out.index(flag) + 1
            j = i
            while j < len(out) and not out[j].startswith("--"):
                j += 1
            out[i:j] = values
        else:  # before a ``--`` (what follows it is another program's)
            end = out.index("--") if "--" in out else len(out)
            out[end:end] = [flag, *values]
    return out


FILES = [f for f in DOCS if script_commands(f)]


def test_the_docs_show_commands_of_other_scripts():
    shown = {os.path.basename(a[0]) for f in FILES for a in script_commands(f)}
    assert {"reproduce.py", "pair.py", "duel.py", "load_serve.py"} <= shown, shown
    assert shown <= set(SHORTER), f"a script without a shortening here: {sorted(shown - set(SHORTER))}"


@pytest.mark.parametrize("path", FILES)
def test_the_script_commands_of_a_doc_run_in_its_order_in_a_fresh_folder(path, tmp_path):
    for name in ("configs", "docs", "tests"):
        (tmp_path / name).symlink_to(os.path.join(ROOT, name))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "XDG_DATA_HOME": str(tmp_path / "data")}
    for argv in script_commands(path):
        run = shortened(argv)
        with one_ray_cluster() if "--ray" in run else contextlib.nullcontext():  # --ray local starts one
            res = subprocess.run(
                [sys.executable, os.path.join(ROOT, run[0]), *run[1:]],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=600,
                env=env,
            )
        assert res.returncode == 0, f"{path}: {shlex.join(argv)}\n{res.stdout[-1500:]}\n{res.stderr[-3000:]}"
        if "--out" in run and "--cell" not in run:  # reproduce.py: its report (a share writes none), where it says
            assert (tmp_path / run[run.index("--out") + 1] / "report.md").is_file()
        if run[0].endswith("pair.py"):  # the runs of the reproduce.py command before it, paired
            assert "difference over 2 seeds" in res.stdout, res.stdout[-1500:]

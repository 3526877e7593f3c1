"""A regular (non-editable) install of this tree for the start-up benchmark: what a user's ``pip install`` runs.

    python bench/installed.py        # builds (or reuses) it and prints its kvlogdiag console script

The tree's own venv runs kvlogdiag through an editable install, whose import finder (a ``.pth`` hook)
imports ``pathlib``, ``urllib.parse``, ``importlib.util`` and more at every interpreter start; an installed
wheel has none of it. `kvlogdiag_script` builds a wheel of a copy of the tree once (``pip wheel --no-deps``), installs
it into a private venv under ``bench/out`` (``pip install --no-deps``, which also writes the ``.pyc``
files), and gives that venv the running interpreter's site-packages for the dependencies (click, regex,
...) through one ``.pth`` line: a path line only extends ``sys.path``, so the editable finder's own
``.pth`` there is not run. The build is redone when any file of the package or ``pyproject.toml`` changes
(a content hash).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import site
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV = os.path.join(HERE, "out", "installed-venv")


def tree_hash(root: str = ROOT) -> str:
    """BLAKE2b of the package's files (paths and contents) and pyproject.toml."""
    h = hashlib.blake2b(digest_size=16)
    files = [os.path.join(root, "pyproject.toml")]
    for d, dirs, names in os.walk(os.path.join(root, "kvlogdiag")):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        files += [os.path.join(d, n) for n in sorted(names) if not n.endswith((".pyc", ".pyo"))]
    for f in files:
        h.update(os.path.relpath(f, root).encode() + b"\0")
        with open(f, "rb") as fh:
            h.update(fh.read())
        h.update(b"\0")
    return h.hexdigest()


def _bin(venv: str, name: str) -> str:
    return os.path.join(venv, "Scripts" if os.name == "nt" else "bin", name)


def kvlogdiag_script(root: str = ROOT, venv: str = VENV) -> str:
    """The ``kvlogdiag`` console script of an installed copy of the tree ``root`` in ``venv``, built first when
    missing or out of date."""
    stamp = os.path.join(venv, "kvlogdiag-tree-hash")
    want = tree_hash(root)
    script = _bin(venv, "kvlogdiag")
    if os.path.exists(script) and os.path.exists(stamp):
        with open(stamp, encoding="utf-8") as fh:
            if fh.read() == want:
                return script
    shutil.rmtree(venv, ignore_errors=True)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # pip writes the .pyc files a user's install has
    with tempfile.TemporaryDirectory(prefix="kvlogdiag-wheel-") as wheels:
        # from a copy: an in-tree build leaves build/ behind, whose stale modules a later wheel would pick up
        src = os.path.join(wheels, "src")
        shutil.copytree(root, src, ignore=shutil.ignore_patterns(".git", ".venv", "bench", "tests", "build", "*.egg-info",
                                                                 "__pycache__", ".*_cache", ".hypothesis"))
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", wheels, src],
                       check=True, env=env, cwd=wheels)
        (wheel,) = [os.path.join(wheels, n) for n in os.listdir(wheels) if n.endswith(".whl")]
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, env=env)
        subprocess.run([sys.executable, "-m", "pip", "--python", _bin(venv, "python"), "install", "--quiet", "--no-deps",
                        "--no-index", wheel], check=True, env=env)
    out = subprocess.run([_bin(venv, "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(out, "kvlogdiag-bench-deps.pth"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(site.getsitepackages()) + "\n")
    with open(stamp, "w", encoding="utf-8") as fh:
        fh.write(want)
    return script


if __name__ == "__main__":
    print(kvlogdiag_script())

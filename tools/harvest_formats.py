"""Harvest vLLM / vLLM-Ascend log format strings from released sdists (issue 13, item 1).

Every ``logger.<level>(...)`` call (``debug/info/warning/error/exception/critical`` and the
``*_once`` variants, plus ``print_warning_once``/``print_info_once`` of older releases), every
``raise X("...")`` and every ``assert cond, "..."`` of the ``vllm/`` and ``vllm_ascend/`` packages is
read with :mod:`ast` (never with a regex over source). Its message becomes a *template*: a list
whose items are literal text (``str``) or placeholders ``[hint, spec]`` — ``hint`` is the source of
the formatted expression (``ast.unparse``), ``spec`` is ``"%.2f"`` for %-style arguments or
``"!r:,"``-style (conversion and format spec) for f-strings and ``str.format``.

Only *fact-bearing* templates are kept: those whose literal text contains one of ``FACT_KEYWORDS``
(the things kvlogdiag reports). Identical templates are merged across files and releases; each keeps
the releases it occurs in (as index ranges into ``versions``).

Usage (see docs/coverage.md for the download loop)::

    python tools/harvest_formats.py SDIST_DIR [-o kvlogdiag/catalogue/harvested_formats.json]

From each minor release the highest patch release found in SDIST_DIR is used (``--all`` keeps every
file); a release published without an sdist (vllm 0.15.x) is read from its wheel, which holds the
same modules. Run it with Python >= 3.12: newer vLLM uses PEP 701 f-strings that older parsers reject
(files that do not parse are counted in the output's ``unparsed`` list, never skipped silently).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import string
import sys
import tarfile
import warnings
import zipfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "kvlogdiag" / "catalogue" / "harvested_formats.json"

LOG_LEVELS = {
    "debug": "DEBUG", "info": "INFO", "warning": "WARNING", "warn": "WARNING", "error": "ERROR",
    "exception": "ERROR", "critical": "CRITICAL", "fatal": "CRITICAL",
    "debug_once": "DEBUG", "info_once": "INFO", "warning_once": "WARNING", "error_once": "ERROR",
}
ONCE_FUNCS = {"print_warning_once": "WARNING", "print_info_once": "INFO", "print_logger_once": "INFO"}

# What kvlogdiag reports, as case-insensitive substrings of a message's literal text. A template is
# kept when one of them occurs in it; the key is the category recorded with the template.
FACT_KEYWORDS: dict[str, tuple[str, ...]] = {
    "version": ("server version",),
    "engine_config": ("llm engine with config", "llm engine (v"),
    "args": ("non-default args",),
    "kv_memory": ("available kv cache memory", "kv cache is needed", "reserved for kv cache", "for kv cache on node",
                  "memory for the cache blocks", "kvcache_space", "as specified by kv_cache_memory_bytes",
                  "available memory: "),
    "kv_size": ("kv cache size:",),
    "concurrency": ("maximum concurrency for",),
    "blocks": ("# gpu blocks", "# cpu blocks", "num_gpu_blocks", "free blocks", "blocks from the pool"),
    "profiling": ("memory profiling", "profiling results", "total_gpu_memory", "non kv cache memory",
                  "free memory on device", "model weights take", "model loading took", "loading model weights took",
                  "graph capturing finished", "cuda graph memory", "init engine (profile",
                  "equivalent to --gpu-memory-utilization", "--gpu-memory-utilization from"),
    "hybrid_manager": ("hybrid kv cache manager", "kv cache specs to one unified type",
                       "local kv cache specs to one unified type"),
    "block_size": ("kv cache block size", "attention block size to", "block size is set to",
                   "block size must be set to", "setting block size to", "kv cache group sizes", "lcm block sizes"),
    "kv_connector": ("recomputecpuoffloadconnector", "cpu_bytes_to_use", "recompute_scheduler_enable"),
    "stats": ("avg prompt throughput", "kv cache usage", "prefix cache hit rate"),
    "preemption": ("preempted by", "is preempted", "[recomputescheduler]", "cumulative_preemption"),
    "max_model_len": ("max model len", "max seq len", "maximum model length", "auto-fit max_model_len",
                      "capacity of block_manager"),
    "scheduler": ("chunked prefill is enabled", "partial prefills", "max_num_partial_prefills",
                  "long_prefill_token_threshold (", "exceeds max_num_seqs * max_model_len",
                  "is smaller than max_model_len", "must be greater than or equal to max_num_seqs",
                  "api_server_count to data_parallel_size", "not supported by the v1 engine"),
    "prefix_cache": ("retention_interval", "retention interval"),
    "platform": ("detected platform", "platform plugin", "from additional_config",
                 "optimized for incompatible platform"),
    "kv_dtype": ("fp8 data type to store kv", "kv cache format"),
    "startup_error": ("enginecore failed to start", "engine core initialization failed",
                      "desired gpu memory utilization", "auto-fit max_model_len",
                      "gpu kv cache size by the cp_world_size"),
}

_PCT = re.compile(r"%(?:\((?P<key>\w+)\))?(?P<flags>[-#0 +]*)(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d+))?[hlL]?(?P<type>[diouxXeEfFgGcrsa%])")
_VERSION_FILE = re.compile(r"^(?P<pkg>vllm|vllm[_-]ascend)-(?P<ver>\d[\w.+]*?)(?:\.(?P<sdist>tar\.gz|zip)|-[\w.]+-[\w.]+-[\w.]+\.whl)$", re.I)


def _vkey(ver: str) -> tuple:
    """Sort key of a release string (0.10.1.1 > 0.10.1, 0.6.6.post1 > 0.6.6, rc < final)."""
    parts = []
    for tok in re.findall(r"\d+|[a-z]+", ver.lower()):
        if tok.isdigit():
            parts.append((1, int(tok)))
        else:
            parts.append((0 if tok in ("rc", "a", "b", "dev") else 2, tok))
    # a final release ends here, which sorts above its pre-releases' "rc…" and below its ".1" / ".post1"
    parts.append((0.5, 0))
    return tuple(parts)


def _minor(ver: str) -> str:
    return ".".join(ver.split(".")[:2])


# --- templates ---------------------------------------------------------------------------------

def _merge(items: list) -> list:
    out: list = []
    for it in items:
        if isinstance(it, str):
            if not it:
                continue
            if out and isinstance(out[-1], str):
                out[-1] += it
                continue
        out.append(it)
    return out


def _src(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # a node ast cannot print back is still a placeholder
        return "?"


def _percent(text: str, args: list[ast.AST] | None, mapping: ast.Dict | None = None) -> list:
    """A %-format string with its arguments (positional list or a dict literal) → template."""
    out: list = []
    pos, i = 0, 0
    keys = {}
    if mapping is not None:
        keys = {k.value: v for k, v in zip(mapping.keys, mapping.values) if isinstance(k, ast.Constant)}
    for m in _PCT.finditer(text):
        out.append(text[pos:m.start()])
        pos = m.end()
        if m.group("type") == "%":
            out.append("%")
            continue
        spec = "%" + m.group("flags") + (m.group("width") or "") + ("." + m.group("prec") if m.group("prec") else "") + m.group("type")
        if m.group("key"):
            hint = _src(keys[m.group("key")]) if m.group("key") in keys else m.group("key")
        else:
            hint = _src(args[i]) if args is not None and i < len(args) else "?"
            i += 1
        out.append([hint, spec])
    out.append(text[pos:])
    return _merge(out)


def _brace(text: str, args: list[ast.AST], kwargs: dict[str, ast.AST]) -> list:
    """A ``str.format`` template with its arguments → template."""
    out: list = []
    auto = 0
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError:
        return [text]
    for lit, field, spec, conv in parsed:
        out.append(lit)
        if field is None:
            continue
        base = re.split(r"[.\[]", field, maxsplit=1)[0]
        if base == "":
            node = args[auto] if auto < len(args) else None
            auto += 1
        elif base.isdigit():
            node = args[int(base)] if int(base) < len(args) else None
        else:
            node = kwargs.get(base)
        hint = (_src(node) if node is not None else base) + field[len(base):]
        out.append([hint, ("!" + conv if conv else "") + (":" + spec if spec else "")])
    return _merge(out)


def template(node: ast.AST, extra_args: list[ast.AST] | None = None) -> list | None:
    """The message expression of a call → template, or None when it has no literal text at all.

    ``extra_args`` are the logger's positional arguments after the message (%-style)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _percent(node.value, extra_args) if extra_args else [node.value]
    if isinstance(node, ast.JoinedStr):
        out: list = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                conv = "" if v.conversion in (-1, None) else "!" + chr(v.conversion)
                spec = ""
                if v.format_spec is not None:
                    spec = ":" + "".join(str(x.value) if isinstance(x, ast.Constant) else "{" + _src(getattr(x, "value", x)) + "}"
                                         for x in getattr(v.format_spec, "values", []))
                out.append([_src(v.value), conv + spec])
        return _merge(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = template(node.left), template(node.right)
        left = left if left is not None else [[_src(node.left), ""]]
        right = right if right is not None else [[_src(node.right), ""]]
        return _merge(left + right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) \
            and isinstance(node.left.value, str):
        r = node.right
        if isinstance(r, ast.Dict):
            return _percent(node.left.value, None, r)
        return _percent(node.left.value, list(r.elts) if isinstance(r, ast.Tuple) else [r])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format" \
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str):
        kwargs = {k.arg: k.value for k in node.keywords if k.arg}
        return _brace(node.func.value.value, list(node.args), kwargs)
    return None


def literal_text(tpl: list) -> str:
    return "".join(x for x in tpl if isinstance(x, str))


def category(tpl: list) -> str | None:
    low = literal_text(tpl).lower()
    for cat, kws in FACT_KEYWORDS.items():
        if any(k in low for k in kws):
            return cat
    return None


# --- source walking ------------------------------------------------------------------------------

def _is_logger(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return "log" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return "log" in node.attr.lower()
    if isinstance(node, ast.Call):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        return name in ("init_logger", "getLogger")
    return False


def _exc_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


class _Messages(ast.NodeVisitor):
    """Collects (line, level, template) in source order; a message passed as a local variable
    (``msg = f"..."; msg += "..."; logger.info(msg)``) is resolved from the assignments before it in
    the same function."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, list[tuple[str, ast.AST]]]] = [{}]
        self.out: list[tuple[int, str, list]] = []

    def visit_FunctionDef(self, node) -> None:
        self.scopes.append({})
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _record(self, target: ast.AST, how: str, value: ast.AST | None) -> None:
        if isinstance(target, ast.Name) and value is not None:
            self.scopes[-1].setdefault(target.id, []).append((how, value))

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        if len(node.targets) == 1:
            self._record(node.targets[0], "set", node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.generic_visit(node)
        self._record(node.target, "set", node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.generic_visit(node)
        if isinstance(node.op, ast.Add):
            self._record(node.target, "add", node.value)

    def _template(self, node: ast.AST, extra: list[ast.AST] | None = None) -> list | None:
        if isinstance(node, ast.Name):
            hist = self.scopes[-1].get(node.id, [])
            last = max((i for i, (how, _) in enumerate(hist) if how == "set"), default=None)
            if last is None:
                return None
            parts = [template(v) for _, v in hist[last:]]
            if any(p is None for p in parts):
                return None
            tpl = _merge([x for p in parts for x in p])
            return _percent(literal_text(tpl), extra) if extra and all(isinstance(x, str) for x in tpl) else tpl
        return template(node, extra)

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        f = node.func
        level = None
        if isinstance(f, ast.Attribute) and f.attr in LOG_LEVELS and _is_logger(f.value):
            level = LOG_LEVELS[f.attr]
        elif isinstance(f, ast.Name) and f.id in ONCE_FUNCS:
            level = ONCE_FUNCS[f.id]
        if level and node.args:
            tpl = self._template(node.args[0], list(node.args[1:]))
            if tpl:
                self.out.append((node.lineno, level, tpl))

    def visit_Raise(self, node: ast.Raise) -> None:
        self.generic_visit(node)
        if isinstance(node.exc, ast.Call) and node.exc.args:
            tpl = self._template(node.exc.args[0])
            if tpl:
                self.out.append((node.lineno, "raise:" + (_exc_name(node.exc) or "Exception"), tpl))

    def visit_Assert(self, node: ast.Assert) -> None:
        self.generic_visit(node)
        if node.msg is not None:
            tpl = self._template(node.msg)
            if tpl:
                self.out.append((node.lineno, "raise:AssertionError", tpl))


def messages(tree: ast.AST):
    """(line, level, template) for every log call, raise and assert message in a module."""
    v = _Messages()
    v.visit(tree)
    return v.out


def _members(path: Path):
    """(relative path inside the package, source bytes) of every package .py file of an sdist (or of
    the wheel of a release published without one)."""
    want = re.compile(r"^[^/]+/((?:vllm|vllm_ascend)/.+\.py)$")
    if path.name.endswith(".whl"):
        # a wheel holds the package at its root (and never the tests): the same modules as the sdist
        want = re.compile(r"^((?:vllm|vllm_ascend)/.+\.py)$")
    if path.name.endswith((".zip", ".whl")):
        with zipfile.ZipFile(path) as zf:
            for name in zf.namelist():
                m = want.match(name)
                if m and "/tests/" not in name:
                    yield m.group(1), zf.read(name)
        return
    with tarfile.open(path, "r:gz") as tf:
        for ti in tf:
            m = want.match(ti.name)
            if m and ti.isfile() and "/tests/" not in ti.name:
                fh = tf.extractfile(ti)
                if fh is not None:
                    yield m.group(1), fh.read()


_PRERELEASE = re.compile(r"(rc|dev|a|b)\d*$")


def _newest_rc(pkg: str, versions: list[str]) -> str | None:
    """vLLM-Ascend's newest release candidate when it is newer than all its final releases: since 0.23.0 the project
    has published release candidates only (0.24.0rc1, 0.25.1rc1, 0.26.0rc1 on the index, 2026-12-04), and those are
    what its users run. None for vllm, whose releases are final."""
    if pkg != "vllm-ascend":
        return None
    finals = [v for v in versions if not _PRERELEASE.search(v)]
    rcs = [v for v in versions if re.search(r"rc\d*$", v)]
    top = max(rcs, key=_vkey, default=None)
    return top if top is not None and (not finals or _vkey(top) > max(_vkey(v) for v in finals)) else None


def select_sdists(folder: Path, every: bool = False) -> list[tuple[str, str, Path]]:
    """(package, version, file): the highest patch release of every minor, per package, and vLLM-Ascend's newest
    release candidate when no final release is newer (``_newest_rc``)."""
    found: dict[tuple[str, str], tuple[str, Path]] = {}
    names = {pkg: [m.group("ver") for m in (_VERSION_FILE.match(p.name) for p in folder.iterdir()) if m
                   and ("ascend" in m.group("pkg").lower()) == (pkg == "vllm-ascend")] for pkg in ("vllm", "vllm-ascend")}
    rc_ok = {pkg: _newest_rc(pkg, vs) for pkg, vs in names.items()}
    for p in sorted(folder.iterdir()):
        m = _VERSION_FILE.match(p.name)
        if not m:
            continue
        if _PRERELEASE.search(m.group("ver")) and m.group("ver") not in rc_ok.values():
            continue
        pkg = "vllm-ascend" if "ascend" in m.group("pkg").lower() else "vllm"
        ver = m.group("ver")
        key = (pkg, ver if every else _minor(ver))
        # the sdist of a release wins over its wheel; a wheel stands in only for a release without sdist
        rank = (_vkey(ver), m.group("sdist") is not None)
        if key not in found or rank > (_vkey(found[key][0]), _VERSION_FILE.match(found[key][1].name).group("sdist") is not None):
            found[key] = (ver, p)
    out = [(pkg, ver, p) for (pkg, _), (ver, p) in found.items()]
    return sorted(out, key=lambda t: (t[0], _vkey(t[1])))


def tid(tpl: list) -> str:
    """Stable id of a template (its JSON text), used by the not-covered list."""
    return hashlib.sha1(json.dumps(tpl, ensure_ascii=False).encode()).hexdigest()[:12]


def _ranges(idx: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for i in sorted(set(idx)):
        if out and out[-1][1] == i - 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def scan_sdist(path: Path) -> tuple[int, int, list[str], list[tuple[str, int, str, list, str]]]:
    """One release: files read, messages seen, files that did not parse, fact-bearing messages."""
    n_files = n_msgs = 0
    unparsed: list[str] = []
    found: list[tuple[str, int, str, list, str]] = []
    for rel, data in _members(path):
        n_files += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escapes etc. in vLLM's own sources
                tree = ast.parse(data, filename=rel)
        except (SyntaxError, ValueError):
            unparsed.append(rel)
            continue
        for lineno, level, tpl in messages(tree):
            n_msgs += 1
            cat = category(tpl)
            if cat is not None:
                found.append((rel, lineno, level, tpl, cat))
    return n_files, n_msgs, unparsed, found


def harvest(sdists: list[tuple[str, str, Path]], log=print, jobs: int = 1) -> dict:
    versions = [f"{pkg} {ver}" for pkg, ver, _ in sdists]
    table: dict[str, dict] = {}
    unparsed: list[str] = []
    scanned = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = pool.map(scan_sdist, [p for _, _, p in sdists])
        for vi, (n_files, n_msgs, bad, found) in enumerate(results):
            unparsed += [f"{versions[vi]}: {rel}" for rel in bad]
            for rel, lineno, level, tpl, cat in found:
                key = tid(tpl)
                e = table.setdefault(key, {"id": key, "t": tpl, "cat": cat, "levels": set(), "files": {}, "vi": set()})
                e["levels"].add(level)
                f = e["files"].setdefault(rel, [vi, vi, lineno])
                f[1], f[2] = vi, lineno  # last release seen in this file, and its line there
                e["vi"].add(vi)
            scanned[versions[vi]] = {"files": n_files, "messages": n_msgs}
            log(f"{versions[vi]}: {n_files} files, {n_msgs} messages, {len(found)} fact-bearing")
    entries = []
    for e in sorted(table.values(), key=lambda e: (min(e["vi"]), literal_text(e["t"]))):
        files = sorted(e["files"].items(), key=lambda kv: (-kv[1][1], kv[0]))
        entries.append({
            "id": e["id"], "cat": e["cat"], "levels": sorted(e["levels"]), "t": e["t"],
            "in": _ranges(sorted(e["vi"])),
            # the file (and its line) in the newest release that has it; other files only by name
            "file": f"{files[0][0]}:{files[0][1][2]}", "other_files": [f for f, _ in files[1:]][:5],
        })
    return {
        "about": "vLLM / vLLM-Ascend log and error format strings that carry facts kvlogdiag reports; "
                 "harvested by tools/harvest_formats.py (docs/coverage.md). t: literal text and "
                 "[expression, spec] placeholders; in: index ranges into versions.",
        "python": "%d.%d" % sys.version_info[:2],
        "keywords": FACT_KEYWORDS,
        "versions": versions,
        "scanned": scanned,
        "unparsed": unparsed,
        "entries": entries,
    }


# pip prepares an sdist's metadata before it keeps the file, and vLLM's setup.py needs torch and a CUDA
# toolkit for that. These two modules, put on PYTHONPATH for the pip child processes, make pip's PEP 517
# metadata hook read the sdist's own PKG-INFO instead: the download is still pip's, from the index.
_PKGINFO_BACKEND = '''
import os
def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    with open("PKG-INFO", encoding="utf-8") as fh:
        fields = dict(l.split(": ", 1) for l in fh.read().splitlines() if ": " in l and not l.startswith(" "))
    d = os.path.join(metadata_directory, "%s-%s.dist-info" % (fields["Name"].replace("-", "_"), fields["Version"]))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w", encoding="utf-8") as fh:
        fh.write("Metadata-Version: 2.1\\nName: %s\\nVersion: %s\\n" % (fields["Name"], fields["Version"]))
    return os.path.basename(d)
def get_requires_for_build_wheel(config_settings=None):
    return []
'''
_SITECUSTOMIZE = '''
import os
for var, path_var in (("_PYPROJECT_HOOKS_BUILD_BACKEND", "_PYPROJECT_HOOKS_BACKEND_PATH"), ("PEP517_BUILD_BACKEND", "PEP517_BACKEND_PATH")):
    if var in os.environ:
        os.environ[var] = "kvlogdiag_pkginfo_backend"
        os.environ.pop(path_var, None)
'''


def _index_versions(pkg: str) -> list[str]:
    import subprocess

    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "--pre", pkg], capture_output=True, text=True).stdout
    m = re.search(r"Available versions: (.*)", out)
    return [v.strip() for v in m.group(1).split(",")] if m else []


def download(folder: Path, jobs: int = 3, log=print) -> None:
    """Every minor release's last patch of vllm (from 0.2) and vllm-ascend into ``folder`` with pip
    (files already there are kept and reused)."""
    import os
    import subprocess
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    folder.mkdir(parents=True, exist_ok=True)
    want = []
    for pkg in ("vllm", "vllm-ascend"):
        last: dict[str, str] = {}
        versions = _index_versions(pkg)
        for v in versions:
            if _PRERELEASE.search(v) or (pkg == "vllm" and _vkey(v) < _vkey("0.2")):
                continue
            if _minor(v) not in last or _vkey(v) > _vkey(last[_minor(v)]):
                last[_minor(v)] = v
        want += [(pkg, v) for v in last.values()]
        if (rc := _newest_rc(pkg, versions)) is not None:
            want.append((pkg, rc))
    have = {(("vllm-ascend" if "ascend" in m.group("pkg").lower() else "vllm"), m.group("ver"))
            for m in (_VERSION_FILE.match(p.name) for p in folder.iterdir()) if m}
    todo = [(p, v) for p, v in want if (p, v) not in have]
    with tempfile.TemporaryDirectory() as hooks:
        Path(hooks, "kvlogdiag_pkginfo_backend.py").write_text(_PKGINFO_BACKEND)
        Path(hooks, "sitecustomize.py").write_text(_SITECUSTOMIZE)
        env = dict(os.environ, PYTHONPATH=hooks + os.pathsep + os.environ.get("PYTHONPATH", ""))

        def one(item):
            pkg, ver = item
            r = subprocess.run([sys.executable, "-m", "pip", "download", f"{pkg}=={ver}", "--no-deps", "--no-binary", ":all:",
                                "--no-build-isolation", "-d", str(folder)], capture_output=True, text=True, env=env)
            how = "sdist"
            if r.returncode != 0:
                # vllm 0.15.x was published as wheels only: its wheel carries the same Python modules
                how = "wheel (no sdist on the index)"
                r = subprocess.run([sys.executable, "-m", "pip", "download", f"{pkg}=={ver}", "--no-deps", "--only-binary",
                                    ":all:", "-d", str(folder)], capture_output=True, text=True)
            tail = (r.stderr.strip().splitlines() or ["failed"])[-1]
            log(f"{pkg} {ver}: " + (f"ok, {how}" if r.returncode == 0 else "not downloaded: " + tail))

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(one, todo))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sdists", type=Path, help="folder with vllm-X.tar.gz / vllm_ascend-X.tar.gz sdists (or vllm-X-*.whl)")
    ap.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--all", action="store_true", help="every release found, not only the last patch of each minor")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="releases read in parallel")
    ap.add_argument("--download", action="store_true", help="first fetch the missing sdists with pip (a few at a time)")
    a = ap.parse_args(argv)
    if a.download:
        download(a.sdists, log=lambda s: print(s, file=sys.stderr))
    if sys.version_info < (3, 12):
        print("warning: Python < 3.12 cannot parse PEP 701 f-strings of newer vLLM; see 'unparsed'", file=sys.stderr)
    chosen = select_sdists(a.sdists, a.all)
    if not chosen:
        print(f"no vllm sdists in {a.sdists}", file=sys.stderr)
        return 2
    data = harvest(chosen, log=lambda s: print(s, file=sys.stderr), jobs=a.jobs)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    # one entry per line: reviewable diffs, still compact
    text = text.replace(',{"id":', ',\n{"id":')
    a.out.write_text(text + "\n", encoding="utf-8")
    print(f"{len(data['entries'])} fact-bearing templates from {len(chosen)} releases -> {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Harvest the start-up error messages of released vLLM / vLLM-Ascend versions.

Reads released packages — sdists (``vllm-X.tar.gz``), wheels (``vllm-X-*.whl``) or directories
already unpacked as ``<dir>/vllm-X/vllm/...`` / ``<dir>/vllm_ascend-X/vllm_ascend/...`` — and
collects every ``raise SomeError(<message>)`` whose message is a string literal, an f-string, a
concatenation of those, or ``"...".format(...)``, in the files that run while a server starts
(configuration, argument parsing, engine core, workers, executors, platforms, attention selection,
KV cache sizing, KV connectors, model loading). Each message is stored as a template: literal text
with ``{expression}`` for every interpolated value (literal braces doubled).

Output (``kvlogdiag/catalogue/failures_harvest.json``, compact, one message per line)::

    {"versions": {"vllm": [...], "vllm-ascend": [...]},
     "messages": [{"t": template, "e": exception, "f": file, "p": package,
                   "first": version, "last": version}, ...]}

``first``/``last`` are the first and last harvested version the message occurs in (it may be absent
in between). Re-harvest (see docs/failures.md)::

    pip download vllm==0.9.2 --no-deps --only-binary :all: -d /tmp/vllm-wheels   # or an sdist
    python tools/harvest_failures.py /tmp/vllm-wheels /tmp/vllm-sdists -o kvlogdiag/catalogue/failures_harvest.json
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import re
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Iterator

# Files that run during start-up. Paths are relative to the package root (vllm/ or vllm_ascend/).
_STARTUP = re.compile(
    r"^(?:vllm|vllm_ascend)/(?:"
    r"config(?:s)?(?:/|\.py)|engine/(?:arg_utils|llm_engine|async_llm_engine|multiprocessing/engine)\.py"
    r"|v1/engine/(?:core|core_client|utils|async_llm|llm_engine)\.py|v1/core/|core/(?:scheduler|block_manager)"
    r"|worker/|v1/worker/|executor/|v1/executor/|platforms/|attention/(?:selector|backends)|v1/attention/"
    r"|distributed/|model_executor/model_loader/|model_executor/models/registry\.py|transformers_utils/"
    r"|entrypoints/(?:openai/api_server|cli/serve|api_server|launchers/|utils)|utils(?:/|\.py)|envs\.py"
    r"|ascend_config\.py|platform\.py|worker/|core/|distributed/|attention/|patch/platform/"
    r")"
)
_VERSION = re.compile(r"^(?P<pkg>vllm(?:[-_]ascend)?)-(?P<ver>\d+(?:\.\d+)*(?:\.post\d+|rc\d+)?)")


def version_key(v: str) -> tuple:
    nums = re.findall(r"\d+|post|rc", v)
    out = []
    for n in nums:
        out.append((1, int(n)) if n.isdigit() else (0 if n == "rc" else 2, 0))
    out.append((0.5, 0))  # a final release ends here: above its "rc…", below its ".1" / ".post1"
    return tuple(out)


def _files_of(path: Path) -> Iterator[tuple[str, str, str, bytes]]:
    """(package, version, member path, source) of every .py of one release."""
    m = _VERSION.match(path.name)
    if not m:
        return
    pkg = "vllm-ascend" if "ascend" in m["pkg"] else "vllm"
    ver = m["ver"]
    if path.is_dir():
        for p in path.rglob("*.py"):
            rel = p.relative_to(path).as_posix()
            yield pkg, ver, rel, p.read_bytes()
    elif path.suffix == ".whl":
        with zipfile.ZipFile(path) as z:
            for n in z.namelist():
                if n.endswith(".py"):
                    yield pkg, ver, n, z.read(n)
    elif path.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(path) as t:
            for mem in t:
                if mem.isfile() and mem.name.endswith(".py"):
                    rel = mem.name.split("/", 1)[1] if "/" in mem.name else mem.name
                    f = t.extractfile(mem)
                    if f is not None:
                        yield pkg, ver, rel, f.read()


def _lit(s: str) -> str:
    return s.replace("{", "{{").replace("}", "}}")


def _template(node: ast.AST) -> str | None:
    """The message template of an expression, or None when it is not built from literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _lit(node.value)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(_lit(str(v.value)))
            elif isinstance(v, ast.FormattedValue):
                parts.append("{" + ast.unparse(v.value) + "}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _template(node.left), _template(node.right)
        if a is not None and b is not None:
            return a + b
        if a is not None:
            return a + "{" + ast.unparse(node.right) + "}"
        if b is not None:
            return "{" + ast.unparse(node.left) + "}" + b
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):  # "... %s" % x
        base = _template(node.left)
        if base is None:
            return None
        args = list(node.right.elts) if isinstance(node.right, ast.Tuple) else [node.right]
        specs = list(re.finditer(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfgi]", base))
        if len(specs) != len(args):
            return base
        it = iter(args)
        return re.sub(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfgi]", lambda _m: "{" + ast.unparse(next(it)) + "}", base)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"):
        base = _template(node.func.value)
        if base is None:
            return None
        pos = iter(node.args)
        kw = {k.arg: k.value for k in node.keywords if k.arg}

        def sub(m: re.Match) -> str:
            name = m.group(1)
            if name in ("", None):
                nxt = next(pos, None)
                return "{" + (ast.unparse(nxt) if nxt is not None else "?") + "}"
            if name.isdigit() and int(name) < len(node.args):
                return "{" + ast.unparse(node.args[int(name)]) + "}"
            return "{" + (ast.unparse(kw[name]) if name in kw else name) + "}"

        return re.sub(r"(?<!\{)\{\{(\w*)(?::[^}]*)?\}\}(?!\})", sub, base)
    return None


def _exc_name(call: ast.AST) -> str | None:
    f = call.func if isinstance(call, ast.Call) else None
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


def harvest_source(src: bytes) -> Iterator[tuple[str, str]]:
    """(exception name, template) of every literal-message raise in one file."""
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError):
        return
    # a message built into a variable first (`msg = f"..."; raise ValueError(msg)`): the last
    # assignment to that name before the raise, in the same function
    assigned: dict[int, dict[str, list[tuple[int, ast.AST]]]] = {}
    owner: dict[int, int] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            table: dict[str, list[tuple[int, ast.AST]]] = {}
            for sub in ast.walk(fn):
                if isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name):
                    table.setdefault(sub.targets[0].id, []).append((sub.lineno, sub.value))
                owner.setdefault(id(sub), id(fn))
            assigned[id(fn)] = table
    for node in ast.walk(tree):
        if not isinstance(node, ast.Raise) or not isinstance(node.exc, ast.Call):
            continue
        name = _exc_name(node.exc)
        if not name or not re.search(r"(?:Error|Exception|Exit)$", name) or not node.exc.args:
            continue
        arg = node.exc.args[0]
        if isinstance(arg, ast.Name) and id(node) in owner:
            earlier = [v for ln, v in assigned[owner[id(node)]].get(arg.id, []) if ln < node.lineno]
            if earlier:
                arg = earlier[-1]
        t = _template(arg)
        if t is None:
            continue
        t = re.sub(r"\s+", " ", t).strip()
        if len(re.sub(r"\{[^{}]*\}", "", t)) < 12:  # too little literal text to recognise a line by
            continue
        yield name, t


def add_message(msgs: dict[tuple[str, str, str], dict], pkg: str, ver: str, name: str, exc: str, t: str) -> None:
    """One harvested message of one release into ``msgs``: its first and last version, the newest file.

    When the newest release raises it in several files, the first of them by path is kept, so the table does not
    depend on the order of an archive's members (a wheel and an sdist of one release list them differently).
    """
    e = msgs.get((pkg, t, exc))
    if e is None:
        msgs[(pkg, t, exc)] = {"t": t, "e": exc, "f": name, "p": pkg, "first": ver, "last": ver}
        return
    if version_key(ver) < version_key(e["first"]):
        e["first"] = ver
    if version_key(ver) > version_key(e["last"]):
        e["last"], e["f"] = ver, name
    elif ver == e["last"] and name < e["f"]:
        e["f"] = name


def write_harvest(data: dict, path: Path) -> None:
    """``data`` to ``path`` (through a temporary file, so a failed run keeps the previous table)."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        dump(data, fh)
    os.replace(tmp, path)
    print(f"{len(data['messages'])} messages from {data['versions']}", file=sys.stderr)


def harvest(paths: list[Path]) -> dict:
    releases: list[Path] = []
    for p in paths:
        if _VERSION.match(p.name):
            releases.append(p)
        elif p.is_dir():
            releases += sorted(q for q in p.iterdir() if _VERSION.match(q.name))
    seen_release: set[tuple[str, str]] = set()
    versions: dict[str, list[str]] = {"vllm": [], "vllm-ascend": []}
    msgs: dict[tuple[str, str, str], dict] = {}
    for rel in releases:
        m = _VERSION.match(rel.name)
        pkg = "vllm-ascend" if "ascend" in m["pkg"] else "vllm"
        if (pkg, m["ver"]) in seen_release:  # the same release as wheel and sdist: read once
            continue
        seen_release.add((pkg, m["ver"]))
        versions[pkg].append(m["ver"])
        for pkg_, ver, name, src in _files_of(rel):
            if not _STARTUP.match(name) or "/tests/" in name:
                continue
            for exc, t in harvest_source(src):
                add_message(msgs, pkg_, ver, name, exc, t)
        print(f"{pkg} {m['ver']}: {len(msgs)} messages so far", file=sys.stderr)
    for k in versions:
        versions[k].sort(key=version_key)
    out = sorted(msgs.values(), key=lambda e: (e["p"], e["f"], e["t"]))
    return {"versions": versions, "messages": out}


def dump(data: dict, fh: io.TextIOBase) -> None:
    fh.write('{"versions": ' + json.dumps(data["versions"]) + ',\n "messages": [\n')
    fh.write(",\n".join(json.dumps(m, ensure_ascii=False) for m in data["messages"]))
    fh.write("\n]}\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="release files or directories holding them")
    ap.add_argument("-o", "--output", type=Path, default=Path("kvlogdiag/catalogue/failures_harvest.json"))
    a = ap.parse_args(argv)
    write_harvest(harvest(a.paths), a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())

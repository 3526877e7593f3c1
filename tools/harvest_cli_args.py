#!/usr/bin/env python3
"""Harvest vLLM's own argument list, per released version: every CLI flag and every ``EngineArgs`` field.

Reads the sdists (``vllm-X.tar.gz``) in the given directories and, per version, parses (with
``ast``, never importing vLLM) the files that define the server's arguments — ``vllm/engine/`` and
``vllm/entrypoints/`` without the benchmark scripts:

- every ``*.add_argument("--flag", "-f", ..., action=..., dest=..., nargs=...)`` call whose option
  strings are literals: the destination (``dest=`` or the first long option, as argparse does) and
  how the flag reads its value: ``value``; ``flag`` (``store_true``/``store_const``: no value, True);
  ``store_false`` (no value, False); ``bool_optional`` (``BooleanOptionalAction``: ``--x`` / ``--no-x``,
  no value); ``optional`` (``nargs="?"``, vLLM 0.5's ``StoreBoolean``: a value may follow);
- the flags vLLM generates from dataclass fields (``--{name.replace('_', '-')}`` in a class's
  ``add_cli_args``: ``FrontendArgs`` and its bases) — their kind from the field's annotation;
- for a flag whose keywords come from ``**kwargs["name"]`` (vLLM >= 0.9 builds them from the config
  dataclasses: a ``bool`` field becomes ``BooleanOptionalAction``, ``bool | str | None`` becomes
  ``nargs="?"``, see ``_compute_kwargs`` in vllm/engine/arg_utils.py), the kind from the annotation
  of the same ``EngineArgs`` field;
- the fields of ``EngineArgs`` / ``AsyncEngineArgs`` and the parameters of ``LLM.__init__``: the
  keyword arguments a Python script passes to ``LLM(...)`` / ``EngineArgs(...)``.

Output (``kvlogdiag/catalogue/cli_args.json``)::

    {"versions": [...],
     "flags": {"--max-model-len": {"dest": "max_model_len", "kind": "value", "first": "0.2.7",
               "last": "0.33.0", "missing_in": [...], "kinds": {...}}, ...},
     "kwargs": {"max_model_len": {"first": ..., "last": ..., "missing_in": [...]}, ...}}

``kinds`` (only when the kind changed between versions) maps each kind to the versions that used it.
Re-harvest::

    pip download vllm==0.33.0 --no-deps --no-binary :all: -d /tmp/vllm-sdists
    python tools/harvest_cli_args.py /tmp/vllm-sdists -o kvlogdiag/catalogue/cli_args.json
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Iterator

_FILES = re.compile(r"^vllm/(?:engine|entrypoints)/(?:.*/)?[\w]+\.py$")
_SKIP = re.compile(r"bench|/tests?/|test_")
_SDIST = re.compile(r"^vllm-(\d+\.\d+\.\d+(?:\.post\d+)?)\.tar\.gz$")
# a release published (or only available here) as a wheel: the same vllm/ modules, read when it has no sdist
_WHEEL = re.compile(r"^vllm-(\d+\.\d+\.\d+(?:\.post\d+)?)-[^-]+-[^-]+-[^-]+\.whl$")
_BOOL_ACTIONS = {"BooleanOptionalAction"}
_OPTIONAL_ACTIONS = {"StoreBoolean"}  # vLLM 0.5-0.6: nargs="?", an optional "true"/"false" after the flag


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def sdist_sources(path: Path) -> Iterator[tuple[str, str]]:
    """(path inside the package, text) of the argument-defining files of one sdist (or wheel)."""
    if path.name.endswith(".whl"):
        with zipfile.ZipFile(path) as zf:
            for name in zf.namelist():  # a wheel's paths start at the package (vllm/...), no top folder
                if _FILES.match(name) and not _SKIP.search(name):
                    yield name, zf.read(name).decode("utf-8", "replace")
        return
    with tarfile.open(path) as tf:
        for m in tf.getmembers():
            rel = m.name.split("/", 1)[1] if "/" in m.name else m.name
            if m.isfile() and _FILES.match(rel) and not _SKIP.search(rel):
                fh = tf.extractfile(m)
                if fh is not None:
                    yield rel, fh.read().decode("utf-8", "replace")


def _annotation_kind(ann: ast.expr | None) -> str:
    """How argparse reads a flag generated from a field with this annotation."""
    if ann is None:
        return "value"
    text = ast.unparse(ann).replace("Optional[", "").replace("Union[", "")
    parts = {p.strip(" []") for p in re.split(r"[|,]", text)}
    if "bool" in parts and "str" in parts:
        return "optional"
    if parts <= {"bool", "None"} and "bool" in parts:
        return "bool_optional"
    return "value"


def _call_kind(call: ast.Call) -> str | None:
    """The flag kind stated in an ``add_argument`` call's keywords (None: not stated)."""
    for kw in call.keywords:
        if kw.arg == "action":
            v = kw.value
            name = v.value if isinstance(v, ast.Constant) else (v.attr if isinstance(v, ast.Attribute) else
                                                                 v.id if isinstance(v, ast.Name) else "")
            if name in ("store_true", "store_const"):
                return "flag"
            if name == "store_false":
                return "store_false"
            if name in _BOOL_ACTIONS:
                return "bool_optional"
            if name in _OPTIONAL_ACTIONS:
                return "optional"
            return "value"
        if kw.arg == "nargs" and isinstance(kw.value, ast.Constant) and kw.value.value == "?":
            return "optional"
    return None


def _kwargs_field(call: ast.Call) -> str | None:
    """``name`` of ``**something["name"]`` in the call (vLLM >= 0.9's generated keywords)."""
    for kw in call.keywords:
        if kw.arg is not None:
            continue
        # ``**kwargs["name"]`` or ``**{**kwargs["name"], "default": None}``
        values = [v for k, v in zip(kw.value.keys, kw.value.values) if k is None] if isinstance(kw.value, ast.Dict) else [kw.value]
        for v in values:
            if isinstance(v, ast.Subscript) and isinstance(v.slice, ast.Constant) and isinstance(v.slice.value, str):
                return v.slice.value
    return None


def _dest(call: ast.Call, options: list[str]) -> str:
    for kw in call.keywords:
        if kw.arg == "dest" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return kw.value.value
    long = next((o for o in options if o.startswith("--")), options[0])
    return long.lstrip("-").replace("-", "_")


def _fields(cls: ast.ClassDef) -> dict[str, ast.expr]:
    return {n.target.id: n.annotation for n in cls.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and not n.target.id.startswith("_")}


def harvest_version(sources: list[tuple[str, str]]) -> tuple[dict[str, dict], dict[str, str]]:
    """(flag → {dest, kind}, python keyword → kind) of one version."""
    trees = []
    for rel, text in sources:
        try:
            trees.append((rel, ast.parse(text)))
        except SyntaxError:
            continue
    classes: dict[str, ast.ClassDef] = {}
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, node)
    engine_fields: dict[str, ast.expr] = {}
    for name in ("EngineArgs", "AsyncEngineArgs"):
        if name in classes:
            engine_fields.update(_fields(classes[name]))
    kwargs = {k: _annotation_kind(a) for k, a in engine_fields.items()}
    llm = classes.get("LLM")
    if llm is not None:
        init = next((n for n in llm.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is not None:
            for a in init.args.args[1:] + init.args.kwonlyargs:
                kwargs.setdefault(a.arg, _annotation_kind(a.annotation))
    flags: dict[str, dict] = {}

    def generated(cls: ast.ClassDef) -> dict[str, ast.expr]:
        out: dict[str, ast.expr] = {}
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in classes and base.id != cls.name:
                out.update(generated(classes[base.id]))
        out.update(_fields(cls))
        return out

    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for fn in node.body:
                    if isinstance(fn, ast.FunctionDef) and fn.name == "add_cli_args" and any(
                            isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "add_argument"
                            and any(isinstance(a, ast.JoinedStr) for a in c.args) for c in ast.walk(fn)):
                        for field, ann in generated(node).items():
                            flags.setdefault("--" + field.replace("_", "-"), {"dest": field, "kind": _annotation_kind(ann)})
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
                continue
            options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                       and a.value.startswith("-")]
            if not options:
                continue
            kind = _call_kind(node)
            if kind is None:
                field = _kwargs_field(node)
                kind = _annotation_kind(engine_fields.get(field)) if field else "value"
            dest = _dest(node, options)
            for opt in options:
                flags.setdefault(opt, {"dest": dest, "kind": kind})
            if kind == "bool_optional":
                for opt in options:
                    if opt.startswith("--"):
                        flags.setdefault("--no-" + opt[2:], {"dest": dest, "kind": "store_false"})
    return flags, kwargs


def _span(present: list[str], versions: list[str]) -> dict:
    first, last = present[0], present[-1]
    lo, hi = versions.index(first), versions.index(last)
    missing = [v for v in versions[lo:hi + 1] if v not in present]
    out: dict = {"first": first, "last": last}
    if missing:
        out["missing_in"] = missing
    return out


def harvest(dirs: list[Path]) -> dict:
    found: dict[str, Path] = {}
    for d in dirs:
        for p in sorted(d.iterdir()):
            m = _SDIST.match(p.name)
            if m:
                found[m.group(1)] = p  # an sdist wins over a wheel of the same release
                continue
            m = _WHEEL.match(p.name)
            if m:
                found.setdefault(m.group(1), p)
    versions = sorted(found, key=_version_key)
    per_flag: dict[str, dict[str, tuple[str, str]]] = {}
    per_kwarg: dict[str, dict[str, str]] = {}
    for v in versions:
        flags, kwargs = harvest_version(list(sdist_sources(found[v])))
        print(f"{v}: {len(flags)} flags, {len(kwargs)} keyword arguments", file=sys.stderr)
        for opt, info in flags.items():
            per_flag.setdefault(opt, {})[v] = (info["dest"], info["kind"])
        for k, kind in kwargs.items():
            per_kwarg.setdefault(k, {})[v] = kind
    out_flags: dict[str, dict] = {}
    for opt in sorted(per_flag):
        seen = per_flag[opt]
        present = [v for v in versions if v in seen]
        dest, kind = seen[present[-1]]
        entry: dict = {"dest": dest, "kind": kind, **_span(present, versions)}
        kinds: dict[str, list[str]] = {}
        for v in present:
            kinds.setdefault(seen[v][1], []).append(v)
        if len(kinds) > 1:
            entry["kinds"] = kinds
        out_flags[opt] = entry
    out_kwargs = {k: {"kind": per_kwarg[k][[v for v in versions if v in per_kwarg[k]][-1]],
                      **_span([v for v in versions if v in per_kwarg[k]], versions)} for k in sorted(per_kwarg)}
    return {"source": "vLLM sdists, harvested by tools/harvest_cli_args.py", "versions": versions,
            "flags": out_flags, "kwargs": out_kwargs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="directories holding vllm-X.tar.gz sdists (or vllm-X-*.whl wheels)")
    ap.add_argument("-o", "--output", type=Path, default=Path("kvlogdiag/catalogue/cli_args.json"))
    ns = ap.parse_args(argv)
    table = harvest(ns.dirs)
    ns.output.write_text(json.dumps(table, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"{len(table['flags'])} flags, {len(table['kwargs'])} keyword arguments over "
          f"{len(table['versions'])} versions -> {ns.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

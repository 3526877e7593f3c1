"""The loaded rule set, compiled once and cached by content hash in the user cache directory.

Loading the 19 built-in rules from the parsed-TOML and condition-tree caches still costs ~16-25 ms of CPU
per start (docs/performance.md, "Session 8"): 19 documents of JSON, ~220 condition trees rebuilt node by
node, every template, name and sample checked again. All of that depends only on the rule files and on
the code that loads them, so the finished `RuleSet` is kept as one pickle and read back with one load.

The key (BLAKE2b-256) covers everything the result depends on: the Python version, kvlogdiag's version,
the size and modification time of every module of the loader (``kvlogdiag/rules/*.py``, the built-in
providers, ``extract/commands.py`` with ``catalogue/cli_args.json`` for the flag checks, ``result.py``,
the installed ``regex`` that checked the patterns), and the name, origin (built-in or user folder) and
exact bytes of every rule file in load order — user rule folders (``--rules``, a config's ``rules``)
included. An edited rule file, another version or another loader is simply another key.

A cache file is never trusted blindly: it must be a regular file owned by this user, hold the key it is
filed under, unpickle with only the rule classes allowed (`_Unpickler.find_class` refuses every other
global, so a planted file cannot run code) and give a `RuleSet` of `Rule` objects; anything else —
corrupt, truncated, foreign, stale — is ignored, and the rules are loaded from their files and stored
again. Writing is best effort (read-only home: nothing is stored). ``KVLOGDIAG_CACHE_DIR=off`` disables it.
At most `KEEP` rule sets (the newest) are kept.
"""

from __future__ import annotations

import _pickle  # the C unpickler: the `pickle` module itself is imported only to store (~3 ms)
import gc
import io
import os
import sys
from typing import Any, Sequence

from kvlogdiag import tomlcache
from kvlogdiag.rules.condcache import _stamp  # the same size:mtime stamp the condition cache keys on

PREFIX = "ruleset-v1-"
SUFFIX = ".pickle"
KEEP = 8
MAX_BYTES = 16 << 20
_MAGIC = "kvlogdiag-ruleset-v1"

#: the only globals a stored rule set may name (module, name)
ALLOWED = frozenset({
    ("kvlogdiag.rules.engine", "RuleSet"), ("kvlogdiag.rules.engine", "Rule"), ("kvlogdiag.rules.engine", "Check"),
    ("kvlogdiag.rules.condition", "Condition"), ("kvlogdiag.rules.condition", "Literal"),
    ("kvlogdiag.rules.condition", "Name"), ("kvlogdiag.rules.condition", "ListExpr"),
    ("kvlogdiag.rules.condition", "Call"), ("kvlogdiag.rules.condition", "Unary"),
    ("kvlogdiag.rules.condition", "Binary"), ("kvlogdiag.rules.suggestion", "SuggestSpec"),
})  # sets, frozensets, tuples, lists, dicts and scalars have opcodes of their own (protocol >= 4): no global


class _Refused(Exception):
    pass


class _Unpickler(_pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED:
            raise _Refused(f"{module}.{name}")
        return super().find_class(module, name)


def _loader_files() -> list[str]:
    """The files whose code or data decides what loading a rule file gives."""
    from kvlogdiag import pkgdata

    out: list[str] = []
    for sub in (("rules",), ("rules", "builtin")):
        folder = pkgdata.path(*sub)
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            names = []
        out.extend(os.path.join(folder, n) for n in names if n.endswith(".py"))
    out += [pkgdata.path("extract", "commands.py"), pkgdata.path("catalogue", "cli_args.json"),
            pkgdata.path("result.py"), pkgdata.path("__init__.py")]
    return out


def key(files: Sequence[tuple[str, bytes, bool]]) -> str:
    """The key of the rule set ``files`` ((name, content, built-in) in load order) gives with this loader."""
    from kvlogdiag import __version__
    from kvlogdiag.rules.condcache import _regex_origin

    h = tomlcache._blake2b(digest_size=32)
    head = [_MAGIC, sys.implementation.name, sys.version, __version__, f"regex={_stamp(_regex_origin())}"]
    head += [f"{os.path.basename(p)}={_stamp(p)}" for p in _loader_files()]
    h.update("\0".join(head).encode("utf-8", "surrogatepass") + b"\0\0")
    for name, content, builtin in files:
        h.update(f"{len(name)}:{name}:{int(builtin)}:{len(content)}:".encode("utf-8", "surrogatepass"))
        h.update(content)
    return h.hexdigest()


def _path(k: str) -> str | None:
    d = tomlcache.cache_dir()
    return os.path.join(d, f"{PREFIX}{k[:40]}{SUFFIX}") if d else None


def get(k: str) -> Any:
    """The `RuleSet` stored under key ``k``, or None (none stored, or the file fails a check)."""
    path = _path(k)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO planted there never blocks
        with open(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not _trusted(st):
                return None
            raw = fh.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            return None
        was = gc.isenabled()
        gc.disable()  # ~20,000 new containers: the collections they trigger found nothing and cost ~20 % of the load
        try:
            stored = _Unpickler(io.BytesIO(raw)).load()
        finally:
            if was:
                gc.enable()
    except Exception:  # noqa: BLE001 - a corrupt or refused file of any kind is just a miss
        return None
    from kvlogdiag.rules.engine import Rule, RuleSet

    if not (isinstance(stored, tuple) and len(stored) == 3 and stored[0] == _MAGIC and stored[1] == k):
        return None
    rules = stored[2]
    if not (type(rules) is RuleSet and isinstance(rules.rules, list) and all(type(r) is Rule for r in rules.rules)):
        return None
    return rules


def _trusted(st: os.stat_result) -> bool:
    import stat

    if not stat.S_ISREG(st.st_mode):
        return False
    getuid = getattr(os, "geteuid", None)
    return getuid is None or st.st_uid == getuid()


def put(k: str, rules: Any) -> None:
    """Store ``rules`` under key ``k`` (best effort), keeping the `KEEP` newest rule sets."""
    path = _path(k)
    if path is None:
        return
    _warm(rules)
    try:
        data = _dumps((_MAGIC, k, rules))
    except Exception:  # noqa: BLE001 - something in a rule that does not pickle: loaded from files every time
        return
    try:
        from kvlogdiag.fileio import replace_atomically

        d = os.path.dirname(path)
        os.makedirs(d, mode=0o700, exist_ok=True)

        def write(fd: int, tmp: str) -> None:
            with os.fdopen(fd, "wb") as fh:  # no fsync: a file lost or cut short by a crash is only a miss
                fh.write(data)

        replace_atomically(path, ".tmp", write)
        _trim(d, keep=os.path.basename(path))
    except OSError:
        pass


def _warm(rules: Any) -> None:
    """Work the evaluation asks of every condition on its first log out now, so that it is stored too: the null
    guards of each ``[let]`` and each check (`kvlogdiag.rules.guards`, ~3 ms of a small analyze), plain tuples
    cached on the condition. A guard that cannot be worked out is left to the evaluation, as before."""
    for rule in rules.rules:
        for cond, attr in [(c, "null_guards") for _, c in rule.lets] + [(c.when, "check_guards") for c in rule.checks]:
            try:
                getattr(cond, attr)
            except Exception:  # noqa: BLE001, S112 - the evaluation raises it itself, where it did before
                continue


def _dumps(value: Any) -> bytes:
    """``pickle.dumps(value)``. A condition node pickles as a call of its class with its fields in order
    (`kvlogdiag.rules.condition._Frozen.__reduce__`): a state set back field by field made reading ~1,500
    nodes back most of a load; ``Class(*fields)`` is the same object at half the cost."""
    import pickle

    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _trim(d: str, keep: str) -> None:
    entries = []
    for e in os.scandir(d):
        if e.name.startswith(PREFIX) and e.name.endswith(SUFFIX) and e.name != keep:
            try:
                entries.append((e.stat().st_mtime_ns, e.path))
            except OSError:
                pass
    entries.sort(reverse=True)
    for _, p in entries[KEEP - 1:]:
        try:
            os.unlink(p)
        except OSError:
            pass

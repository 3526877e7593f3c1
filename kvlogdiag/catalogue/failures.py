"""The catalogue of vLLM / vLLM-Ascend start-up failures (``failures.toml``) and its matcher.

Each `FailureEntry` is one cause an operator can fix: a class, the message patterns per version
range (with named groups for the numbers the message carries), the fix, the kvlogdiag rules that
explain the same cause, and sample lines. `FailureCatalogue.match` finds the entry a line states;
`FailureCatalogue.is_echo` / `death` recognise lines that only repeat a failure or announce a
process death. ``failures_harvest.json`` next to the TOML holds the exact ``raise`` messages of
released versions (``tools/harvest_failures.py``), ``failures_harvest_libs.json`` those of the libraries a
start-up runs through (transformers, huggingface_hub, torch: ``tools/harvest_library_failures.py``); ``tests/test_failures_catalogue.py`` renders them
through the catalogue. The reader's prefilter lets every line through that holds one of
`prefilter_keywords`.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from kvlogdiag import recache
from kvlogdiag.catalogue.keywords import OverlapPartners

# paths as text, not pathlib: a small analyze never imports pathlib (with urllib.parse and ipaddress ~3 ms)
CATALOGUE_FILE = os.path.join(os.path.dirname(__file__), "failures.toml")
HARVEST_FILE = os.path.join(os.path.dirname(__file__), "failures_harvest.json")
LIBRARY_HARVEST_FILE = os.path.join(os.path.dirname(__file__), "failures_harvest_libs.json")

_UNIT_GIB = {"B": 1 / 2**30, "KiB": 1 / 2**20, "MiB": 1 / 2**10, "GiB": 1.0, "TiB": 2.0**10,
             "KB": 1 / 2**20, "MB": 1 / 2**10, "GB": 1.0, "TB": 2.0**10}
_NUMBER = recache.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")

# lines the tracker needs besides the catalogue keywords: exceptions, tracebacks, pydantic blocks,
# process deaths, the end of a successful start
# Words of plain prose ("error", "signal", "raise ") are not keywords: request-log lines quote users' prompts,
# and a prompt word would send every such line through the tracker (and the extractor's keyword scan).
# vLLM's own ERROR-level lines carry "ERROR"; exception lines "Error"/"Exception"; "CUDA error: …" "error:".
EXTRA_KEYWORDS = ("ERROR", "Error", "error:", "Exception", "Traceback", "Killed", "died", "with signal", "by signal",
                  "exit code", "exitcode", "Failed core proc", "failed to start", "[type=",
                  "validation error for", "Application startup complete", "Uvicorn running on",
                  # the API server about to serve, its engine built (extract/failures.py `_HTTP_STARTING`)
                  "Starting vLLM API server ", "Starting vLLM server on ",
                  # Ascend CANN's error-manager records close with where they were raised (extract/failures.py `_CANN_LOC`)
                  "[FUNC:",
                  # a start stopped by a signal (extract/failures.py: SIGTERM / Ctrl-C during start-up)
                  "KeyboardInterrupt",
                  "Avg prompt throughput", 'File "', "fatal signal", "See stack trace",
                  # uvicorn's own shutdown line: it was serving (extract/failures.py `_UVICORN_SHUTDOWN`)
                  "INFO:     Shutting down",
                  # the statement above a bare AssertionError says what failed
                  "assert ", "already dead", "Value error, ",
                  # a frame whose start a paste cut off (`…/chatglm.py", line 53, in __init__`)
                  "\", line ",
                  # the words of vLLM's own raise messages printed without their exception name (a relay, a
                  # message a reporter quotes whole): 3,228 of the 3,417 harvested have no keyword above
                  "not supported", "Unsupported", "unsupported", "must be", "is not", "does not", "cannot be",
                  # torch's device probe warning (why no GPU / XPU / NPU was found)
                  "UserWarning: ",
                  # a native library's glog record ("E… real_client.cpp:239] …"), the KV memory vLLM profiled
                  ".cpp:", ".cc:", "Available KV cache memory",
                  # Python's ModuleNotFoundError text printed without its name, and Python warnings (whose
                  # message, on the next line, is no error of its own)
                  "No module named '", "Warning: ",
                  # JAX / XLA status lines; vLLM resolving no platform
                  "RESOURCE_EXHAUSTED: ", "UnspecifiedPlatform",
                  # an uncaught C++ exception: Ray's terminate handler and libstdc++'s (whose "  what():  <message>"
                  # line may carry no other keyword)
                  "Unhandled exception: ", "terminate called after throwing", "what():",
                  # V0's model runner announcing a failed execution (its error is re-raised after it)
                  "of failed execution",
                  # ROCm's HIP runtime trace records (AMD_LOG_LEVEL): ":1:rocdevice.cpp            :1824: … us: [pid:9 …"
                  " us: [pid:",
                  # NIXL's record of a request's failed KV transfer: the server was up (extract/failures.py _RUNTIME_LINE)
                  "NIXL transfer failure: ",
                  # clang's count of the errors it stopped on (extract/failures.py `_CLANG_SUMMARY`); tt-metal's
                  # assertion head and CPython's fatal error carry "error:" / "ERROR" only sometimes
                  " error generated", " errors generated", "TT_FATAL @ ", "TT_THROW @ ", "Fatal Python error: ")


@dataclass(frozen=True)
class FailureEntry:
    """One start-up failure cause."""

    id: str
    cls: str
    keywords: tuple[str, ...]
    patterns: tuple[tuple[str, re.Pattern[str]], ...]  # (versions, regex)
    extra: tuple[re.Pattern[str], ...]
    fix: str
    links: tuple[str, ...] = ()
    harvest: tuple[str, ...] = ()
    harvest_numbers: dict[str, str] = field(default_factory=dict)
    samples: tuple[dict, ...] = ()
    # the whole line as vLLM logs the message at WARNING (a stated-without-head copy is read as that warning)
    warning_forms: tuple[re.Pattern[str], ...] = ()
    explains: tuple[str, ...] = ()  # entries whose lines in the same log are this failure's symptom
    # vLLM logs the message at ERROR where it recovers (it goes on without the component): like a warning form, a
    # cause only when the start is then seen failing and nothing else states one
    recovered: bool = False
    # a line vLLM (or a library) only warns with and goes on from, which states the cause of a later failure of one
    # of these entries: never a cause of its own; when one of them is the cause, this earlier line is
    precedes: tuple[str, ...] = ()


@dataclass(frozen=True)
class FailureMatch:
    """A line that states a catalogued cause."""

    entry: FailureEntry
    versions: str
    numbers: dict[str, Any]
    details: dict[str, str]
    span: tuple[int, int]
    warning: bool = False  # the line is the message in the form vLLM logs at WARNING (`warning_forms`)

    def fix(self) -> str:
        return render_fix(self.entry.fix, self.numbers | self.details)


def _num(text: str) -> int | float | None:
    """The number a captured group states; None for text and for values no real log carries (a
    400-digit figure overflows to inf as a float: it is not reported as a number)."""
    if not _NUMBER.fullmatch(text):
        return None
    t = text.replace(",", "")
    if len(t) > 30:
        return None
    v: int | float = float(t) if "." in t else int(t)
    return v if math.isfinite(v) else None


def numbers_of(groups: dict[str, str | None]) -> tuple[dict[str, Any], dict[str, str]]:
    """Split named groups into numbers (``<x>`` + ``<x>_unit`` → ``<x>_gib``) and text details."""
    numbers: dict[str, Any] = {}
    details: dict[str, str] = {}
    for k, v in groups.items():
        if v is None or k.endswith("_unit") or v == "":
            continue
        unit = groups.get(k + "_unit")
        n = _num(v)
        if n is None:
            details[k] = v
        elif unit and unit in _UNIT_GIB:
            numbers[k + "_gib"] = n * _UNIT_GIB[unit]
        else:
            numbers[k] = n
    return numbers, details


class _Missing(dict):
    def __missing__(self, key: str) -> str:
        return "the value in the message"


def render_fix(template: str, values: dict[str, Any]) -> str:
    """The fix text with the failure's numbers filled in (ints without decimals)."""
    shown = {k: (int(v) if isinstance(v, float) and v.is_integer() else v) for k, v in values.items()}
    return template.format_map(_Missing(shown))


def _match_entry(e: FailureEntry, text: str) -> FailureMatch | None:
    """``text`` against one entry's patterns (first that matches), its ``extra`` groups filling what is missing."""
    for versions, rx in e.patterns:
        m = rx.search(text)
        if m is None:
            continue
        groups = dict(m.groupdict())
        for x in e.extra:
            for xm in x.finditer(text):
                for k, v in xm.groupdict().items():
                    if v is not None and groups.get(k) is None:
                        groups[k] = v
        numbers, details = numbers_of(groups)
        return FailureMatch(e, versions, numbers, details, m.span(), any(w.search(text) for w in e.warning_forms))
    return None


class FailureCatalogue:
    """The loaded catalogue with a keyword index: `match` costs one regex search per line."""

    def __init__(self, data: dict):
        entries = []
        for e in data.get("failure", []):
            entries.append(FailureEntry(
                id=e["id"], cls=e["class"], keywords=tuple(e["keywords"]),
                patterns=tuple((p.get("versions", ""), recache.compile(p["regex"])) for p in e["patterns"]),
                extra=tuple(recache.compile(x) for x in e.get("extra", ())),
                fix=e["fix"], links=tuple(e.get("links", ())), harvest=tuple(e.get("harvest", ())),
                harvest_numbers=dict(e.get("harvest_numbers", {})), samples=tuple(e.get("samples", ())),
                warning_forms=tuple(recache.compile(x) for x in e.get("warning_forms", ())),
                explains=tuple(e.get("explains", ())), recovered=bool(e.get("recovered", False)),
                precedes=tuple(e.get("precedes", ())),
            ))
        self.entries: list[FailureEntry] = entries
        self.by_id = {e.id: e for e in entries}
        self.explained = frozenset(x for e in entries for x in e.explains)
        self.precursors: list[FailureEntry] = [e for e in entries if e.precedes]
        self.precursor_keywords: tuple[str, ...] = tuple(sorted({k for e in self.precursors for k in e.keywords}))
        kw: dict[str, list[FailureEntry]] = {}
        for e in entries:
            if e.precedes:
                continue
            for k in e.keywords:
                kw.setdefault(k, []).append(e)
        self._by_kw = kw
        # every keyword found: the search takes the longest keyword at a position, which stands for every keyword it
        # contains, and a keyword starting inside it and running past it ("KV cache is not supported" after "FP8 KV
        # cache") is looked for at its place (kvlogdiag.catalogue.keywords)
        self._kw_entries: dict[str, list[FailureEntry]] = {
            k: [e for k2, es in kw.items() if k2 in k for e in es] for k in kw}
        self._kw_partners = OverlapPartners(kw)
        self._kw_re = recache.compile("|".join(re.escape(k) for k in sorted(kw, key=len, reverse=True)))
        self.echo = [recache.compile(x["regex"]) for x in data.get("echo", [])]
        self.deaths = [recache.compile(x["regex"]) for x in data.get("death", [])]
        recovered = [x["regex"] for x in data.get("recovered", [])]
        # one alternation: every non-INFO line the tracker reads is tried against it
        self._recovered = recache.compile("|".join(f"(?:{r})" for r in recovered)) if recovered else None
        self.class_hints: list[tuple[str, re.Pattern[str] | None, re.Pattern[str] | None]] = [
            (x["class"], recache.compile(x["message"]) if "message" in x else None,
             recache.compile(x["frames"]) if "frames" in x else None)
            for x in data.get("class_hint", [])]
        # a hint's own fix, for a code path whose message names nothing an operator can act on (Python's int() parse
        # error raised while reading an environment variable); `{env_var}` in it is the variable the traceback names
        self._hint_fixes: list[str | None] = [x.get("fix") for x in data.get("class_hint", [])]
        # a message hint that holds only where one of the traceback's frames is that code (`when_frames`): a resolver
        # error is the bind address's in the socket bind, the network's elsewhere
        self._hint_when: list[re.Pattern[str] | None] = [
            recache.compile(x["when_frames"]) if "when_frames" in x else None for x in data.get("class_hint", [])]

    def keywords(self) -> tuple[str, ...]:
        return tuple(self._by_kw) + tuple(k for k in self.precursor_keywords if k not in self._by_kw)

    def match(self, text: str) -> FailureMatch | None:
        """The first catalogued cause ``text`` states (entries in catalogue order), or None."""
        cands: dict[str, FailureEntry] = {}
        for km in self._kw_re.finditer(text):
            kw = km.group(0)
            for e in self._kw_entries[kw]:
                cands.setdefault(e.id, e)
            if (pp := self._kw_partners[kw]) and (pn := pp.get(text[km.end():km.end() + 1])):
                end = km.end()
                for b, n in pn:
                    if text.startswith(b, end - n):
                        for e in self._kw_entries[b]:
                            cands.setdefault(e.id, e)
        for e in sorted(cands.values(), key=self.entries.index):
            fm = _match_entry(e, text)
            if fm is not None:
                return fm
        return None

    def precursor(self, text: str) -> FailureMatch | None:
        """The precursor entry (``precedes``) ``text`` states, or None (entries in catalogue order)."""
        for e in self.precursors:
            fm = _match_entry(e, text)
            if fm is not None:
                return fm
        return None

    def class_hint(self, message: str, frames: list[str]) -> tuple[str | None, str | None]:
        """The class an uncatalogued exception's message or traceback frames (innermost first) imply, and the
        fix of the hint that says so (None when it has none)."""
        for i, (cls, msg_rx, _) in enumerate(self.class_hints):
            if msg_rx is not None and msg_rx.search(message):
                when = self._hint_when[i]
                if when is not None and not any(when.search(f) for f in frames):
                    continue
                return cls, self._hint_fixes[i]
        for frame in frames:
            for i, (cls, _, frame_rx) in enumerate(self.class_hints):
                if frame_rx is not None and frame_rx.search(frame):
                    return cls, self._hint_fixes[i]
        return None, None

    def is_echo(self, text: str) -> bool:
        return any(rx.search(text) for rx in self.echo)

    def is_recovered(self, text: str) -> bool:
        """Whether ``text`` is a line vLLM logs for an exception it catches and goes on from (never a cause)."""
        return self._recovered is not None and self._recovered.search(text) is not None

    def death(self, text: str) -> dict[str, str] | None:
        """Named groups of a process-death line (``process``, ``signal``, ``exit_code``, ``failed``)."""
        for rx in self.deaths:
            m = rx.search(text)
            if m:
                return {k: v for k, v in m.groupdict().items() if v is not None}
        return None


@lru_cache(maxsize=1)
def catalogue() -> FailureCatalogue:
    """The built-in catalogue (parsed once)."""
    from kvlogdiag import tomlcache

    with open(CATALOGUE_FILE, "rb") as fh:
        text = fh.read().decode("utf-8")
    data = tomlcache.loads(text, remember=True)
    tomlcache.flush()
    return FailureCatalogue(data)


def prefilter_keywords() -> tuple[str, ...]:
    """Every literal a line the start-up tracker needs contains at least one of."""
    return tuple(sorted(set(catalogue().keywords()) | set(EXTRA_KEYWORDS)))


@lru_cache(maxsize=1)
def harvested() -> dict:
    """``failures_harvest.json``: the exact raise messages of released vLLM / vLLM-Ascend versions."""
    with open(HARVEST_FILE, encoding="utf-8") as fh:
        return json.load(fh)


# where a harvested message is raised → the class of an uncatalogued cause (only where the file
# says it unambiguously: a config validator is a configuration error whatever it checks)
_CLASS_BY_FILE = (
    # vllm/envs.py reads the VLLM_* environment (a raise there is a variable's value: the launch environment)
    (recache.compile(r"^vllm(?:_ascend)?/(?:config|engine/arg_utils|entrypoints/cli|ascend_config|envs\.py)"), "config"),
    (recache.compile(r"^vllm(?:_ascend)?/distributed/(?:kv_transfer|ec_transfer)/"), "connector"),
    (recache.compile(r"^vllm(?:_ascend)?/(?:model_executor/model_loader|transformers_utils)/"), "model"),
    (recache.compile(r"^vllm(?:_ascend)?/model_executor/models/registry"), "arch"),
    (recache.compile(r"^vllm(?:_ascend)?/(?:v1/)?executor/ray_"), "ray"),
    (recache.compile(r"^vllm(?:_ascend)?/model_executor/layers/quantization/"), "quant"),
    (recache.compile(r"^vllm(?:_ascend)?/distributed/device_communicators/"), "comm"),
)


# where a library's harvested message is raised → the class of an uncatalogued cause. Only modules whose
# every error is about one thing: the Hub and transformers' config/weights/remote-code loading are the
# model (its id, access, files), tokenizer modules the tokenizer, quantizers the quantization, torch's
# device modules the devices, its process groups the communication between ranks.
_LIBRARY_CLASS_BY_FILE = (
    (recache.compile(r"^huggingface_hub/"), "model"),
    (recache.compile(r"^transformers/(?:tokenization_|models/auto/tokenization_auto)"), "tokenizer"),
    (recache.compile(r"^transformers/(?:quantizers/|utils/quantization_config|integrations/(?:bitsandbytes|awq|ggml))"), "quant"),
    # the Auto classes not knowing a model type / configuration class: the catalogue's architecture_not_supported
    # (configuration_auto is left out: it raises both "does not recognize this architecture" and "Unrecognized
    # model … Should have a `model_type` key", a model directory without a config)
    (recache.compile(r"^transformers/models/auto/(?:modeling_auto|auto_factory)"), "arch"),
    (recache.compile(r"^transformers/(?:configuration_utils|modeling_utils|dynamic_module_utils|utils/hub|safetensors_conversion"
                     r"|feature_extraction_utils|image_processing_|processing_utils"
                     r"|models/auto/(?:feature_extraction_auto|image_processing_auto|processing_auto))"), "model"),
    (recache.compile(r"^torch/serialization"), "model"),
    (recache.compile(r"^torch/(?:cuda|xpu|mtia)/"), "devices"),
    (recache.compile(r"^torch/distributed/"), "comm"),
)


STRICT_LITERALS = 24  # a harvested message with less literal text than this is matched as a whole statement
# raises that copy CPython's own wording of a built-in error (vllm 0.32.0 utils/humming.py "{type(self).__name__} object
# has no attribute {name}", 0.6.6.post1-0.10.2 utils/__init__.py PlaceholderModule "No module named '{module_name}'"):
# the text says nothing about who raised it, so such a message is no sign of vLLM's own output
_PYTHON_WORDING = frozenset({"object has no attribute", "No module named"})


class _Harvest:
    """Harvested raise messages as regexes, tried only on a cause the catalogue does not know.

    A message is recognised by its longest literal part; ``min_key`` is how long that must be (a
    library's short generic messages, ``{name} has no attribute {key}``, would name any AttributeError).
    """

    def __init__(self, messages: list[dict], min_key: int = 16):
        self.items: list[tuple[str, list[str], dict]] = []
        for m in messages:
            text = m["t"]
            if "{__name__" in text:
                # a module's own name (its __getattr__'s "module {__name__} has no attribute {name}"): the value is
                # known, so "module 'torch_npu' has no attribute 'npu_rope'" is not that module's raise
                dotted = m["f"].removesuffix(".py").removesuffix("/__init__").replace("/", ".")
                text = text.replace("{__name__!r}", repr(dotted)).replace("{__name__}", dotted)
            parts = re.split(r"\{(?:[^{}]|\{[^{}]*\})*\}", text.replace("{{", "\x00").replace("}}", "\x01"))
            lits = [p.replace("\x00", "{").replace("\x01", "}") for p in parts]
            # a message quoted or retyped without its final full stop is still that message
            lits[-1] = lits[-1].rstrip(".")
            key = max(lits, key=len)
            if len(key) < min_key or " ".join(x.strip(" '\".") for x in lits if x.strip(" '\".")) in _PYTHON_WORDING:
                continue
            self.items.append((key, lits, m))

    def lookup(self, text: str) -> dict | None:
        best = None
        for key, lits, m in self.items:
            if key in text and (best is None or len(key) > len(best[0])) and re.search(self._shape(lits), text):
                best = (key, m)
        return best[1] if best else None

    @staticmethod
    def _shape(lits: list[str]) -> str:
        if sum(len(x) for x in lits) < STRICT_LITERALS:
            # little literal text ("{device_type} is not supported."): generic words that end many sentences,
            # so the message must be the whole statement — its values single tokens, from the message's start
            # a message that ends with its literal ends the statement there: "{device_type} is not supported." is
            # not "Quantization is not supported for <class …>" (a sentence that goes on is another message)
            end = r"(?=\.|\s*$)" if lits[-1] else r"(?=[\s.,;:]|$)"
            return r"(?:^|: )" + r"\S+".join(re.escape(x) for x in lits) + end
        return ".+?".join(re.escape(x) for x in lits)


@lru_cache(maxsize=1)
def _harvest_index() -> _Harvest:
    return _Harvest(harvested()["messages"])


@lru_cache(maxsize=1)
def library_harvested() -> dict:
    """``failures_harvest_libs.json``: the exact raise messages of transformers, huggingface_hub and torch."""
    with open(LIBRARY_HARVEST_FILE, encoding="utf-8") as fh:
        return json.load(fh)


@lru_cache(maxsize=1)
def _library_index() -> _Harvest:
    return _Harvest(library_harvested()["messages"], min_key=24)


def library_source(text: str) -> tuple[dict, str | None] | None:
    """The library raise that states ``text`` (library, file, versions) and the class its module implies."""
    m = _library_index().lookup(text)
    if m is None:
        return None
    for rx, cls in _LIBRARY_CLASS_BY_FILE:
        if rx.search(m["f"]):
            return m, cls
    return m, None


def harvested_source(text: str) -> tuple[dict, str | None] | None:
    """The released raise that states ``text`` (file, versions, exception) and the class its file implies."""
    m = _harvest_index().lookup(text)
    if m is None:
        return None
    for rx, cls in _CLASS_BY_FILE:
        if rx.search(m["f"]):
            return m, cls
    return m, None

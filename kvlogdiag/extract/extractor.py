"""Extracting facts from lines: the pattern catalogue applied to a stream of `Line` objects.

`Extractor.feed(line)` is called once per (candidate) line, in order, and keeps only small
state, so it works the same for a 50-line paste, a 1 GB log and a live pipe. ``finish()`` returns
the `LogFacts`. Deciding what the facts *mean* (which value wins, bytes per token) is left to
``derive.py``.
"""

from __future__ import annotations

import re
from itertools import repeat
from typing import Any, Callable

from kvlogdiag import recache
from kvlogdiag.catalogue.keywords import OverlapPartners
from kvlogdiag.catalogue.patterns import Pattern, catalogue
from kvlogdiag.extract import commands
from kvlogdiag.extract.bounded import FactColumn
from kvlogdiag.extract.facts import Fact, LogFacts
from kvlogdiag.extract.failures import StartupTracker
from kvlogdiag.extract.platform import RECORD as PLATFORM_RECORD
from kvlogdiag.extract.platform import evidence as platform_evidence
from kvlogdiag.extract.pyrepr import CLASS_KEY, parse_json_or_repr, parse_repr, scalar, split_key_values, unwrap_path
from kvlogdiag.extract.stats_batch import BATCH_LINES, _float, fold, read_run, run_raw, stats_values
from kvlogdiag.input.reader import Line, StatsRun

# config keys kvlogdiag tracks; args dicts use argparse dest names
CONFIG_KEYS = (
    "model", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "max_model_len",
    "block_size", "gpu_memory_utilization", "kv_cache_dtype", "max_num_batched_tokens", "max_num_seqs",
    "max_num_partial_prefills", "max_long_partial_prefills", "long_prefill_token_threshold",
    "enable_prefix_caching", "enforce_eager", "disable_hybrid_kv_cache_manager", "kv_transfer_config",
    "additional_config", "enable_chunked_prefill", "kv_cache_memory_bytes", "num_gpu_blocks_override",
    "prefix_cache_retention_interval", "swap_space", "cpu_offload_gb", "dtype", "quantization",
    "served_model_name", "speculative_config", "enable_expert_parallel", "data_parallel_size_local",
    "decode_context_parallel_size", "kv_offloading_size", "kv_offloading_backend", "async_scheduling",
    "max_cudagraph_capture_size", "calculate_kv_scales",
)
_ARG_ALIASES = commands.ALIASES
_USER_SOURCES = frozenset({"user_command", "command_list", "command_flags", "python_call", "prose"})

_START_MARKERS = {"engine_config", "api_server_version", "server_version", "logo_version", "non_default_args",
                  "args_namespace", "user_command"}
# printed once per server start by the API server (or the V0 entrypoint): seen again from the same kind of
# process, it is a restart even when the first start never reached KV sizing (a failed start, then a retry)
_ONCE_PER_START = {"api_server_version", "server_version", "logo_version", "non_default_args", "args_namespace"}
_PID_RE = recache.compile(r"\bpid=(\d+)")
_DP_RE = recache.compile(r"(?:_DP|EngineCore_)(\d+)")
_DEVICE_PLATFORM = {"cuda": "cuda", "npu": "npu", "cpu": "cpu", "xpu": "xpu", "tpu": "tpu", "hpu": "hpu",
                    "rocm": "rocm", "ascend": "npu", "neuron": None}


_INT_LIMIT = 1 << 63  # a longer number in a log is damage, not a figure


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    digits = text.replace(",", "").replace("_", "")
    if len(digits) > 20 or not digits.isascii():  # int() reads non-ASCII digits too (see stats_batch._float)
        return None
    try:
        v = int(digits)
    except ValueError:
        return None
    return v if -_INT_LIMIT < v < _INT_LIMIT else None


def _div(v: float | None, by: float) -> float | None:
    return None if v is None else v / by


_UNIT_GIB = {"B": 2.0**-30, "KiB": 2.0**-20, "MiB": 2.0**-10, "GiB": 1.0, "TiB": 1024.0}


def _gib_of(text: str | None) -> float | None:
    """vllm_hpu_extension's format_bytes text ("43.5 GiB", "512 MiB", "980 B") in GiB."""
    if not text:
        return None
    num, _, unit = text.partition(" ")
    v = _float(num)
    return None if v is None or unit not in _UNIT_GIB else v * _UNIT_GIB[unit]


_DP_OF: dict[str, int] = {}  # rank -> dp_of_rank (a log has a few ranks, on every line)


def dp_of_rank(rank: str | None) -> int:
    """Data-parallel group of a process prefix: ``Worker_DP1_TP3`` → 1, ``EngineCore_DP2`` → 2."""
    if not rank:
        return 0
    dp = _DP_OF.get(rank)
    if dp is None:
        if len(_DP_OF) >= 4096:
            _DP_OF.clear()
        m = _DP_RE.search(rank)
        dp = _DP_OF[rank] = int(m.group(1)) if m else 0
    return dp



def _drop_cut_entry(d: dict, line: Line) -> dict:
    """On a line the input ended inside, the last entry of a config dump may be cut: drop it."""
    if line.unterminated and d and not line.text.rstrip().endswith((")", "}")):
        d = dict(d)
        d.pop(next(reversed(d)))
    return d


# -- the stats line's search (Extractor.feed's hot path on long logs) ------------------------------
# The stats pattern starts with an optional "Engine N: " / "N Engines Aggregated: " group, so `re`
# cannot skip ahead and tries a match at every position before the keyword (~2 µs on a usual line).
# Its leftmost match can only begin at the first "Avg prompt throughput: " or at the prefix ending
# right there (a prefix cannot contain the keyword, so no match starts further left), which
# `_stats_search` computes before searching from that point: the same match, ~0.8 µs sooner a line.
# the aggregated count's look-behind (a ReDoS guard: no retry at every digit of a run) lets a match begin only
# at the first digit of the run, where the search below starts anyway
_STATS_HEAD = r"(?:(?:Engine (?P<engine>\d+)|(?<!\d)(?P<aggregated>\d+) Engines Aggregated): )?Avg prompt throughput: "
# (stats regex, its head is _STATS_HEAD (else: plain search)) of the last call, compared by identity: a
# Pattern's hash covers its compiled program (~0.5 µs for this one), a dict lookup per line would pay it
_STATS_FAST: list = [None, False]


def _stats_search(rx: re.Pattern, text: str) -> re.Match | None:
    """``rx.search(text)`` for the catalogue's stats pattern, searching from where a match can start."""
    if _STATS_FAST[0] is rx:
        fast = _STATS_FAST[1]
    else:
        fast = rx.pattern.startswith(_STATS_HEAD) and not rx.flags & (re.ASCII | re.IGNORECASE | re.VERBOSE)
        _STATS_FAST[:] = [rx, fast]
    if not fast:
        return rx.search(text)
    at = text.find("Avg prompt throughput: ")
    if at < 0:
        return None  # every match contains it
    if at >= 12 and text.startswith("Engine ", at - 12) and text.startswith(": ", at - 2) and text[at - 5: at - 2].isdecimal():
        return rx.search(text, at - 12)  # the usual "Engine 000: " (its digits follow a space)
    start = at
    if at >= 2 and text.startswith(": ", at - 2):
        end = at - 2  # end of the digits, or of " Engines Aggregated"
        aggregated = text.endswith(" Engines Aggregated", 0, end)
        if aggregated:
            end -= len(" Engines Aggregated")
        first = end
        while first > 0 and text[first - 1].isdecimal():  # \d is Unicode category Nd, as isdecimal
            first -= 1
        if first < end:
            if aggregated:
                start = first  # \d+ from the first digit of the run
            elif text.endswith("Engine ", 0, first):
                start = first - len("Engine ")
    return rx.search(text, start)


# vLLM's request logger: "Received request %s: prompt: %r, params: ..." (vllm 0.10.2
# vllm/entrypoints/logger.py:40-41), "Request %s details: prompt: %r, ..." (DEBUG, 0.13.0 logger.py:37-38, 0.19.1
# logger.py:53) and "Generated response %s%s: output: %r, ..." (0.10.2 logger.py:71-72, 0.13.0 logger.py:76-77). The
# quoted repr is text a client sent or the model wrote: a catalogue keyword in it ("Model", "must be", "CUDA") is no
# fact, and searching a 1-2 KB prompt for ~200 keywords and the launch-command forms cost ~0.3-0.5 ms a line. Only
# the extractor skips such a line: the start-up tracker (a request means the server was up) and user rules see it.
# a decimal digit other than 0-9 (Arabic-Indic ٣, fullwidth ３, Devanagari ३ …: Unicode category Nd): `re`'s \d matches it
# and int()/float() read it, but vLLM formats every number with ASCII digits, so such a line is damage (a mis-decoded
# paste, a re-encoded excerpt) whose figures would be wrong, not a line to read facts from
_FOREIGN_DIGIT = re.compile(r"(?![0-9])\d")
_REQUEST_LOG = recache.compile(
    r"(?:INFO|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w.-]+:\d+\] "
    r"(?:Received request \S+: prompt: |Request \S+ details: prompt: |Generated response \S+: output: )['\"]")

_TABLES: tuple | None = None
_CUT_CHARS = frozenset("0123456789.,")
# patterns whose meaning does not hang on a trailing number (a line that is counted, not measured),
# or that drop their own possibly-cut last entry (the config dumps)
_WHOLE_LINE_OK = frozenset({"v0_preemption", "non_default_args", "args_namespace", "engine_config",
                            "user_command", "command_continuation", "vllm_env", "stats"})


def _dispatch_tables() -> tuple[list[Pattern], dict[str, list[Pattern]], re.Pattern[str]]:
    """Patterns, keyword → patterns, and one regex over all keywords (built once per process).

    The keyword regex finds non-overlapping matches, longest first, so a keyword that lies inside a
    longer one ("max seq len" in "max seq len (") is never reported on its own: each keyword therefore
    also dispatches the patterns of every keyword it contains (and `feed` checks the keywords that start
    inside a match and run past it, `kvlogdiag.catalogue.keywords`)."""
    global _TABLES
    if _TABLES is None:
        pats = catalogue()
        own: dict[str, list[Pattern]] = {}
        for p in pats:
            for kw in p.keywords:
                own.setdefault(kw, []).append(p)
        by_name = {p.name: p for p in pats}

        def compute() -> list[list]:  # ~200 keywords, each against every other: ~2 ms, kept in the regex cache
            out = []
            for kw in own:
                lst = [p for k, ps in own.items() if k in kw for p in ps]
                out.append([kw, list({p.name: p for p in lst})])
            return out

        def valid(v: Any) -> bool:
            return (isinstance(v, list) and [e[0] for e in v] == list(own)
                    and all(isinstance(n, str) and n in by_name for e in v for n in e[1]))

        by_kw: dict[str, list[Pattern]] = {}
        if len(by_name) == len(pats):  # names are unique (tests/test_patterns.py): a name stands for its pattern
            key = "\n".join(kw + "\0" + "\0".join(p.name for p in ps) for kw, ps in own.items())
            by_kw = {kw: [by_name[n] for n in names] for kw, names in recache.derived("dispatch-table", key, compute, valid)}
        else:
            for kw in own:
                lst = [p for k, ps in own.items() if k in kw for p in ps]
                by_kw[kw] = list({p.name: p for p in lst}.values())
        kws = sorted(by_kw, key=len, reverse=True)
        _TABLES = (pats, by_kw, recache.compile(_keyword_trie(kws)))
    return _TABLES


_PARTNERS: OverlapPartners | None = None


def _partners() -> OverlapPartners:
    """The keywords that overlap each keyword's end (one table per process, filled as keywords are met)."""
    global _PARTNERS
    if _PARTNERS is None:
        _PARTNERS = OverlapPartners(_dispatch_tables()[1])
    return _PARTNERS


def _keyword_trie(words: list[str], depth: int = 2) -> str:
    """``"|".join(map(re.escape, words))`` factored by leading characters: the same matches.

    A flat alternation of ~200 literals makes `re` try every alternative at each position of a line (a
    1,500-character request line quoting a prompt: ~450 µs); grouped by their first characters only
    the keywords starting with the character at hand are tried (~6x sooner). At any position the
    groups exclude each other, and each keeps the words in their order (longest first, ``""`` — a word
    that ended — last), so the first alternative that matches is the same one."""
    if depth == 0 or len(words) < 4:
        return "|".join(re.escape(w) for w in words)
    groups: dict[str, list[str]] = {}
    for w in words:
        groups.setdefault(w[:1], []).append(w[1:])
    parts = [re.escape(c) + "(?:" + _keyword_trie(rest, depth - 1) + ")" for c, rest in groups.items() if c]
    if "" in groups:
        parts.append("")  # an ended word matches anywhere: it must stay the last alternative
    return "|".join(parts)


class _Handlers(dict):
    """pattern name → the extractor's bound ``_h_<name>``, bound at its first use: a small log dispatches a
    handful of the ~100 patterns, and binding them all was a tenth of an extractor's construction. Every
    pattern's handler is checked to exist once per process (an unknown name fails the first extractor)."""

    _checked: set[int] = set()

    def __init__(self, owner: Extractor, pats: Any) -> None:
        super().__init__()
        self.owner = owner
        if id(pats) not in _Handlers._checked:
            missing = [p.name for p in pats if not callable(getattr(type(owner), "_h_" + p.name, None))]
            if missing:
                raise AttributeError(f"Extractor has no handler for pattern(s) {', '.join(missing)}")
            _Handlers._checked.add(id(pats))

    def __missing__(self, name: str) -> Callable[[re.Match, Line, Fact], None]:
        handler = self[name] = getattr(self.owner, "_h_" + name)
        return handler


class Extractor:
    """Feed lines in order; call `finish` for the facts."""

    def __init__(self, source: str):
        self.facts = LogFacts(source=source)
        self.runs: list[LogFacts] = [self.facts]  # one LogFacts per server start, in log order
        self._run = 0
        self._run_has_kv = False
        self._kv_line = 0
        self._once_seen: dict[str, tuple[str | None, str | None]] = {}  # marker → (rank, pid) in this run
        self._last_number = 0
        self.run_listeners: list[Callable[[LogFacts, LogFacts], None]] = []  # (finished run, new run)
        pats, self._by_kw, self._kw_re = _dispatch_tables()
        self._kw_partners = _partners()
        self._handlers: dict[str, Callable[[re.Match, Line, Fact], None]] = _Handlers(self, pats)
        self._stats = next(p for p in pats if p.name == "stats")
        self.listeners: list[Callable[[str, Fact], None]] = []
        # stats lines folded into the summary a batch at a time (kvlogdiag/extract/stats_batch.py): only
        # for a reader that looks at the facts when the input ends (`Analyzer.read`), never with listeners
        self.batch_stats = False
        self._stats_batch: list[tuple[tuple, Any]] = []  # (figures, Line or (StatsRun, index))
        self.line_hook: Callable[[Line, Callable[[Line], Fact]], None] | None = None
        self._cmd_line = -1  # line of the last launch-command line
        self._cmd_cont = False  # that line ended with a backslash
        self._ikv_parts: list[tuple[int, str, Fact]] = []  # a split insufficient-KV message
        self._ikv_fact: Fact | None = None
        self._llm_line = -10  # line of the last 'LLM(' of a pasted offline script
        self._advice_line = -10  # line of the last "For example" / "you could try"
        self._cmd_need_model = False
        self._block = commands.BlockList()  # a YAML 'args:' / 'command:' block list being read
        self._py_open = -10  # line of the last kwargs of an LLM(...) / EngineArgs(...) call still open
        self._bare_flag: tuple[int, dict, Fact] | None = None  # a lone vLLM flag line (a block needs two)
        self._ikv_regex = next(p.regex for p in pats if p.name == "insufficient_kv")
        self.startup = StartupTracker()  # root cause of a failed start (kvlogdiag/extract/failures.py)
        self.run_listeners.append(self._startup_next_run)

    # -- plumbing ------------------------------------------------------------------------------

    def feed(self, line: Line) -> None:
        text = line.text
        self._last_number = line.number
        self.startup.feed(line)
        if self.line_hook is not None:
            self.line_hook(line, lambda ln: self._fact(None, ln, "line"))
        if "Avg prompt throughput" in text:  # the hot path on long logs
            m = _stats_search(self._stats.regex, text)
            if m:
                if self.batch_stats and not self.listeners:
                    vals = stats_values(m)
                    if vals is not None:
                        self._stats_batch.append((vals, line))
                        if len(self._stats_batch) >= BATCH_LINES:
                            self.flush_stats()
                    return
                if self._stats_batch:
                    self.flush_stats()  # a listener came in the middle of a read: keep the order
                self._h_stats(m, line, self._fact(None, line, "stats"))
                return
        if ("d request " in text or "Generated response " in text or "details: prompt: " in text) \
                and _REQUEST_LOG.match(text) and not self._block.open:
            return  # the rest of the line is a client's prompt or the model's output: nothing vLLM configured
        if not text.isascii() and _FOREIGN_DIGIT.search(text):
            return  # the start-up tracker and the user rules (above) still see it
        seen: set[str] = set()
        matched: set[str] = set()
        for km in self._kw_re.finditer(text):
            kw = km.group(0)
            pats = self._by_kw[kw]
            if (pp := self._kw_partners[kw]) and (pn := pp.get(text[km.end():km.end() + 1])):
                # a keyword starting inside this one and running past it ("KV cache memory (" after "Available KV
                # cache memory"): the longer match hid it from the search
                e = km.end()
                pats = pats + [p for b, n in pn if text.startswith(b, e - n) for p in self._by_kw[b]]
            for p in pats:
                if p.name in seen:
                    continue
                seen.add(p.name)
                m = p.regex.search(text)
                if m is not None and line.unterminated and m.end() == len(text) and text[-1:] in _CUT_CHARS \
                        and p.name not in _WHOLE_LINE_OK:
                    continue  # the input ends inside this value: "28048" cut after "280" is no figure
                if m is not None:
                    if self._stats_batch:
                        self.flush_stats()  # before any handler: it may start a new run, or read the engine or the summary
                    matched.add(p.name)
                    if p.name in _START_MARKERS:
                        self._maybe_new_run(p.name, line)
                    self._handlers[p.name](m, line, self._fact(None, line, p.name))
        self._harvest(line, matched)

    def feed_run(self, run: StatsRun) -> bool:
        """Feed a run of stats lines (`kvlogdiag.input.reader.StatsRun`) at once, as `feed` would feed its lines
        one by one; False (nothing fed) when the run must be fed line by line: outside `batch_stats`, with
        listeners or a line hook (they see every line), before the server is seen up (the start-up tracker reads
        that line), or when the run's lines are not in the plain form `stats_batch.read_run` reads."""
        tracker = self.startup
        if not self.batch_stats or self.listeners or self.line_hook is not None \
                or not (tracker.served_line or tracker.runtime_line):
            return False
        got = read_run(self._stats.regex, run.parts)
        if got is None:
            return False
        last = run.numbers[-1]
        # what StartupTracker.feed does with a line once the server is up
        tracker.last_line = last
        tracker.last_unterminated = False
        self._last_number = last
        # held with the lines of the batch, each as (run, index): its Line is made only if the summary keeps it
        refs = zip(repeat(run), range(len(got)))
        if None in got:  # a damaged line is no sample
            self._stats_batch.extend((v, r) for v, r in zip(got, refs) if v is not None)
        else:
            self._stats_batch.extend(zip(got, refs))
        if len(self._stats_batch) >= BATCH_LINES:
            self.flush_stats()
        return True

    def flush_stats(self) -> None:
        """Fold the stats lines held back by `batch_stats` into the current run's summary."""
        batch, self._stats_batch = self._stats_batch, []
        fold(self.facts, batch, self._stats_fact)

    def _stats_fact(self, ref: Line | tuple) -> Fact:
        # a held line: its Line, or (StatsRun, index) for a line of a run (read_run took it: run_raw is make_line's)
        if ref.__class__ is Line:
            return self._fact(None, ref, "stats")  # type: ignore[arg-type]
        run, i = ref  # type: ignore[misc]
        raw, rank = run_raw(run.parts[i])
        return Fact(None, run.numbers[i], rank, raw, "stats", self._run, dp_of_rank(rank))

    def finish(self, lines_read: int, long_lines: int = 0) -> LogFacts:
        """The facts of the last (current) run; every run's facts are in ``self.runs``."""
        if self._stats_batch:
            self.flush_stats()
        for f in self.runs:
            f.lines_read = lines_read
            f.long_lines = long_lines
            f.runs = len(self.runs)
        self.facts.last_line_of_run = max(lines_read, self._last_number, self.facts.first_line)
        self.facts.startup = self.startup.result()
        block = self._block.close()
        if block is not None:
            self._args_dict(block[0], block[1], "command_list")
        return self.facts

    def _startup_next_run(self, old: LogFacts, new: LogFacts) -> None:
        """A new server start: the finished one keeps its start-up verdict, the new one is tracked afresh."""
        old.startup = self.startup.result()
        listeners = self.startup.listeners
        self.startup = StartupTracker()
        self.startup.listeners = listeners

    def _fact(self, value: Any, line: Line, source: str) -> Fact:
        return Fact(value, line.number, line.rank, line.raw, source, self._run, dp_of_rank(line.rank))

    def _with(self, fact: Fact, value: Any, source: str | None = None) -> Fact:
        return Fact(value, fact.line, fact.rank, fact.raw, source or fact.source, fact.run, fact.dp)

    def _maybe_new_run(self, marker: str | None = None, line: Line | None = None) -> None:
        """Open a new run when ``marker`` (a start-up line) shows the server started again."""
        restart = self._run_has_kv
        who = None
        if marker in _ONCE_PER_START and line is not None:
            pid = _PID_RE.search(line.raw)
            who = (line.rank, pid.group(1) if pid else None)
            seen = self._once_seen.get(marker)
            if seen is not None and seen[0] == who[0] and (seen[1] != who[1] or who[1] is None):
                restart = True
        if restart and line is not None:
            self.new_run(marker, line.number)
        if who is not None and marker is not None:
            self._once_seen.setdefault(marker, who)

    def new_run(self, started_by: str | None, first_line: int) -> None:
        """Close the current run and start the next at ``first_line`` (also used by ``watch`` on truncation)."""
        if self._stats_batch:
            self.flush_stats()
        old = self.facts
        old.last_line_of_run = max(first_line - 1, old.first_line)
        self._run += 1
        self._run_has_kv = False
        self._once_seen = {}
        new = LogFacts(source=old.source, run_index=self._run, first_line=first_line, started_by=started_by)
        # "Automatically detected platform" is printed by each process before the version banner:
        # platform lines after the old run's KV sizing belong to the start that follows them
        moved = [f for f in old.platform if old.kv_sized and f.line > self._kv_line]
        if moved:
            old.platform = FactColumn([f for f in old.platform if f not in moved])  # type: ignore[assignment]
            new.platform = FactColumn([self._with_run(f) for f in moved])  # type: ignore[assignment]
            new.first_line = min(f.line for f in moved)
            old.last_line_of_run = max(new.first_line - 1, old.first_line)
        new.line_hits = {} if isinstance(old.line_hits, dict) else old.line_hits
        self.facts = new
        self.runs.append(new)
        for cb in self.run_listeners:
            cb(old, new)

    def _with_run(self, f: Fact) -> Fact:
        return Fact(f.value, f.line, f.rank, f.raw, f.source, self._run, f.dp)

    def _kv_seen(self) -> None:
        self._run_has_kv = True
        self.facts.kv_sized = True
        self._kv_line = self._last_number

    def _emit(self, kind: str, fact: Fact) -> None:
        for cb in self.listeners:
            cb(kind, fact)

    def _config(self, key: str, fact: Fact, value: Any, source: str) -> None:
        if value is None or (source in _USER_SOURCES and commands.is_placeholder(value)):
            return  # '<model>', '$MAX_LEN' of a docs template
        self.facts.add_config(key, self._with(fact, value, source))

    def _event(self, name: str, fact: Fact) -> None:
        self.facts.add_event(name, fact)
        self._emit(name, fact)

    # -- args / config -------------------------------------------------------------------------

    def _args_dict(self, d: dict, fact: Fact, source: str) -> None:
        every = self.facts.launch_args.setdefault(source, {})
        for k, v in d.items():
            if not isinstance(k, str):
                continue
            key = _ARG_ALIASES.get(k, k)
            if key == "model" and k == "model_tag" and "model" in d:
                continue
            if v is not None and not (source in _USER_SOURCES and commands.is_placeholder(v)):
                every[key] = self._with(fact, unwrap_path(v), source)
            if key in CONFIG_KEYS:
                v = unwrap_path(v)
                if isinstance(v, dict) and v.get(CLASS_KEY):
                    v = {kk: vv for kk, vv in v.items()}
                if key in ("kv_transfer_config", "additional_config", "speculative_config") and isinstance(v, str):
                    v = parse_json_or_repr(v)
                self._config(key, fact, v, source)
        self._emit("config", fact)

    def _h_non_default_args(self, m: re.Match, line: Line, fact: Fact) -> None:
        d = parse_repr(m.group("body"))
        if isinstance(d, dict):
            self._args_dict(_drop_cut_entry(d, line), fact, "non_default_args")

    def _h_wrapper_config_dict(self, m: re.Match, line: Line, fact: Fact) -> None:
        d = parse_repr(m.group("body"))
        if isinstance(d, dict) and any(_ARG_ALIASES.get(k, k) in CONFIG_KEYS for k in d if isinstance(k, str)):
            self._args_dict(_drop_cut_entry(d, line), fact, "wrapper_config")

    def _h_args_namespace(self, m: re.Match, line: Line, fact: Fact) -> None:
        d = parse_repr("Namespace(" + m.group("body"))
        if isinstance(d, dict):
            d.pop(CLASS_KEY, None)
            self._args_dict(_drop_cut_entry(d, line), fact, "args_namespace")

    def _h_engine_config(self, m: re.Match, line: Line, fact: Fact) -> None:
        kind = m.group("kind")
        self.facts.engine.append(self._with(fact, "v1" if kind == "a V1" else "v0", "engine_config"))
        if m.group("version"):
            self.facts.version.append(self._with(fact, m.group("version"), "engine_config"))
        kv = _drop_cut_entry(split_key_values(m.group("body")), line)
        every = self.facts.launch_args.setdefault("engine_config", {})
        for k, raw in kv.items():
            key = _ARG_ALIASES.get(k, k)
            every[key] = self._with(fact, scalar(raw), "engine_config")
            if key == "device_config":
                dev = raw.strip("'\" ")
                dm = recache.compile(r"(cuda|npu|cpu|xpu|tpu|hpu|rocm|neuron)").search(dev)
                if dm and _DEVICE_PLATFORM.get(dm.group(1)):
                    self.facts.platform.append(self._with(fact, _DEVICE_PLATFORM[dm.group(1)], "device_config"))
                continue
            if key in CONFIG_KEYS and key not in ("kv_transfer_config", "additional_config"):
                self._config(key, fact, scalar(raw), "engine_config")
        self._emit("config", fact)

    def _h_advice_lead(self, m, line, fact):
        t = line.text.strip()
        if len(t) <= 60 or t.endswith((":", ",")):  # "For example:" introducing a block, not a narrative
            self._advice_line = line.number

    def _h_command_model_line(self, m, line, fact):
        if self._cmd_need_model and line.number - self._cmd_line == 1:
            self._config("model", fact, m.group("model"), "user_command")
            self._cmd_line, self._cmd_cont = line.number, True
        self._cmd_need_model = False

    def _h_user_command(self, m: re.Match, line: Line, fact: Fact) -> None:
        if 0 <= line.number - self._advice_line <= 3:
            return  # a command suggested in a reply ("For example, ...") is not this run's
        if commands.is_advice(line.text[:m.start("cmd")]):
            return  # 'usage: vllm serve ...', 'you could try: vllm serve ...'
        cmd = commands.shell_command(m.group("cmd"), whole_line=True)
        if cmd is not None:
            self._use_command(cmd, line, fact)

    def _h_command_continuation(self, m: re.Match, line: Line, fact: Fact) -> None:
        # after a backslash the command goes on (lines without known flags in between are skipped by the
        # reader); without one, only flag lines right below it (a YAML block, a wrapped paste) belong to it
        if self._cmd_line < 0 or line.number - self._cmd_line > (60 if self._cmd_cont else 2):
            return
        self._cmd_line, self._cmd_cont = line.number, bool(m.group("cont"))
        self._args_dict(commands.parse_flags(commands.split_shell(m.group("args"))), fact, "user_command")

    def _use_command(self, cmd: commands.Command, line: Line, fact: Fact, source: str = "user_command") -> None:
        # a command continued with a trailing backslash: the next flag lines belong to it
        self._cmd_line, self._cmd_cont = line.number, cmd.continued
        self._cmd_need_model = cmd.needs_model  # 'vllm serve \' + the model on the line below
        self._args_dict(cmd.args, fact, source)

    _LIST_HINT = recache.compile(r"\[\s*[\"'\u201c]")

    def _harvest(self, line: Line, matched: set[str]) -> None:
        """What the catalogue's patterns do not read: platform evidence (extract/platform.py) and launch
        commands in the other forms (extract/commands.py): a shell command behind a wrapper or in prose,
        a JSON/YAML list, a YAML block list, bare flag lines, an LLM(...) / EngineArgs(...) call."""
        text = line.text
        record = PLATFORM_RECORD.match(text) is not None
        for ev in platform_evidence(line.raw or text, record):  # the whole line: table cells are an envelope to the reader
            if ev.platform:
                src = ev.what + ("_weak" if ev.weak else "") + ("" if ev.kind == "log" else "_in_" + ev.kind)
                self.facts.platform.append(self._fact(ev.platform, line, src))
        if record:
            return  # vLLM's own record is never the user's launch command
        if self._block.open or "args" in text or "command" in text:
            done = self._block.feed(line.number, text, self._fact(None, line, "command_list"))
            if done is not None:
                self._args_dict(done[0], done[1], "command_list")
            if self._block.open:
                return  # the head or an item of the block
        advice = 0 <= line.number - self._advice_line <= 3
        if "LLM" in text or "EngineArgs" in text:
            call = None if advice else commands.python_call(text)
            if call is not None:
                self._py_open = line.number if call[1] else -10
                if call[0]:
                    self._args_dict(call[0], self._fact(None, line, "python_call"), "python_call")
                return
        if 0 < line.number - self._py_open <= 3:  # an argument line of the call above (blank lines are not fed)
            kwargs = commands.python_kwargs(text)
            self._py_open = line.number if text.count("(") >= text.count(")") else -10
            if kwargs:
                self._args_dict(kwargs, self._fact(None, line, "python_call"), "python_call")
            return
        if advice or "user_command" in matched:
            return
        if "vllm" in text or "api_server" in text:
            cmd = commands.shell_command(text)
            if cmd is not None:
                self._use_command(cmd, line, self._fact(None, line, "user_command"))
                return
        if self._LIST_HINT.search(text) or "command" in text or "args" in text or "CMD" in text:
            cmd = commands.list_command(text)
            if cmd is not None:
                self._use_command(cmd, line, self._fact(None, line, "command_list"), "command_list")
                return
        if self._cmd_line != line.number and text.lstrip().startswith("-"):
            self._bare_flags(line, text)

    def _bare_flags(self, line: Line, text: str) -> None:
        """Flag lines with no command above: vLLM's when two of its flags stand together (on one line
        or on two lines in a row) — a single flag could belong to any tool."""
        args, known = commands.flag_line_args(text)
        if known == 0:
            return
        fact = self._fact(None, line, "command_flags")
        pending, self._bare_flag = self._bare_flag, None
        if known == 1 and not (pending and pending[0] == line.number - 1):
            self._bare_flag = (line.number, args, fact)
            return
        if pending and pending[0] == line.number - 1:
            self._args_dict(pending[1], pending[2], "command_flags")
        self._cmd_line, self._cmd_cont = line.number, text.rstrip().endswith("\\")
        self._args_dict(args, fact, "command_flags")

    def _h_vllm_env(self, m: re.Match, line: Line, fact: Fact) -> None:
        found = False
        for em in self._env_iter(line.text):
            name, value = em
            self.facts.env[name] = self._with(fact, value, "env")
            found = True
        if found:
            self._emit("env", fact)

    _ENV_ALL = recache.compile(r"(?<![\w-])(?:export\s+)?(VLLM_[A-Z0-9_]+)=(\"[^\"]*\"|'[^']*'|[^\s,;)]+)")
    # vLLM's advice names a variable with a value to set, not one that is set: "To allow overriding this maximum, set
    # the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" (vllm 0.30.0 config/model.py:2525-2530), "please run with
    # VLLM_MLA_DISABLE=1", "Please `export VLLM_ASCEND_ENABLE_DBO=1`", "… requires VLLM_USE_V2_MODEL_RUNNER=1" (the
    # words before every VLLM_X= of the harvested raise texts that asks for a value; those that state the value the
    # process has — "but envs.VLLM_USE_V1=True", "VLLM_USE_V1=1 is not supported with …" — are read); a shell's own
    # `export` (not quoted in backticks, not "by export" / "please export") is a setting; "requires Model Runner V2
    # (VLLM_USE_V2_MODEL_RUNNER=1)" names in brackets the value that gives what is required (vllm-ascend 0.30.0rc2
    # platform.py:957)
    _ENV_ADVICE = recache.compile(
        r"(?i)(?:\bset(?:ting)?(?: the env(?:ironment)?(?: var(?:iable)?)?:?)?|(?:`|\bby |\bplease )export|\brun with|\brequires(?: [^()\n]{1,40}\()?|\bor"
        r"|\bkeep|\bremove|\bwithout|\buse|\benable \w+ with)\s*[`'\"(]?$")

    def _env_iter(self, text: str):
        for em in self._ENV_ALL.finditer(text):
            start = em.start(1)
            if self._ENV_ADVICE.search(text, max(0, start - 48), start):
                continue
            value = em.group(2)
            if value[-1:] == "." and value[:1] not in "'\"":
                value = value.rstrip(".")  # the sentence's full stop ("but envs.VLLM_USE_V1=True.")
            yield em.group(1), value.strip("'\"")

    def _h_env_unknown(self, m: re.Match, line: Line, fact: Fact) -> None:
        self._event("env_unknown:" + m.group("name"), fact)

    def _h_ascend_additional_config(self, m: re.Match, line: Line, fact: Fact) -> None:
        self._config("ascend_config." + m.group("key"), fact, scalar(m.group("value")), "ascend_config")

    # -- identification ------------------------------------------------------------------------

    def _h_api_server_version(self, m, line, fact):
        self.facts.version.append(self._with(fact, m.group("version"), "api_server_version"))

    def _h_server_version(self, m, line, fact):
        self.facts.version.append(self._with(fact, m.group("version"), "server_version"))
        self._config("model", fact, m.group("model"), "server_version")

    def _h_logo_version(self, m, line, fact):
        self.facts.version.append(self._with(fact, m.group("version"), "logo"))

    def _h_logo_model(self, m, line, fact):
        self._config("model", fact, m.group("model"), "logo")

    def _h_v1_source_path(self, m, line, fact):
        if not self.facts.engine or self.facts.engine[-1].source != "v1_source_path":
            self.facts.engine.append(self._with(fact, "v1", "v1_source_path"))  # only V1 lives in vllm/v1/

    def _h_platform_detected(self, m, line, fact):
        name = (m.group("platform") or m.group("plugin") or "").lower()
        plat = _DEVICE_PLATFORM.get(name)
        if plat:
            self.facts.platform.append(self._with(fact, plat, "platform_line"))

    def _h_npu_evidence(self, m, line, fact):
        self.facts.platform.append(self._with(fact, "npu", "npu_evidence"))

    # the words right before "key=value" that make it a value asked for, not the value used: vLLM's raise texts
    # "… got 0. Example: max_model_len=2048" (vllm 0.33 config harvest), "ECMooncakeConnector producers require
    # tensor_parallel_size=1."; a user's "I set max_model_len=32768" stays a setting
    _PROSE_ADVICE = recache.compile(r"(?i)(?:\bexample:?|\brequires?|\bmust be|\bshould be|\btry)\s*[`'\"(]?$")

    def _h_prose_setting(self, m, line, fact):
        if "e.g." in line.text or "instead of" in line.text or "such as" in line.text:
            return  # advice about a value, not the value used
        if self._PROSE_ADVICE.search(line.text, max(0, m.start() - 40), m.start()):
            return
        key = m.group("key").replace("-", "_")
        val = _float(m.group("value")) if key == "gpu_memory_utilization" else _int(m.group("value"))
        if key == "gpu_memory_utilization" and val is not None and not 0 < val <= 1:
            return
        self._config(key, fact, val, "prose")

    def _h_prose_model(self, m, line, fact):
        self._config("model", fact, m.group("model"), "prose")

    def _h_llm_constructor(self, m, line, fact):
        self._llm_line = line.number
        if m.group("model"):
            self._config("model", fact, m.group("model"), "user_command")

    def _h_llm_model_kwarg(self, m, line, fact):
        if 0 < line.number - self._llm_line <= 5:  # an argument of the LLM( call just above
            self._config("model", fact, m.group("model"), "user_command")

    def _h_cpu_backend_evidence(self, m, line, fact):
        self.facts.platform.append(self._with(fact, "cpu", "cpu_backend_evidence"))

    def _h_rocm_evidence(self, m, line, fact):
        self.facts.platform.append(self._with(fact, "rocm", "rocm_evidence"))

    # -- KV sizing -----------------------------------------------------------------------------

    def _unreadable(self, fact: Fact) -> None:
        self._event("unreadable_number", fact)

    def _h_kv_available_gib(self, m, line, fact):
        gib = _float(m.group("gib"))
        if gib is None:
            self._unreadable(fact)
        if gib is not None:
            f = self._with(fact, gib)
            self.facts.available.append(f)
            self._kv_seen()
            self._emit("available", f)

    def _h_ascend_available_bytes(self, m, line, fact):
        avail = _int(m.group("avail"))
        if avail is None:
            self._unreadable(fact)
        if avail is not None:
            f = self._with(fact, ("ascend_bytes", avail / 2**30, avail, _int(m.group("total"))))
            self.facts.kv_budget.append(f)
            self.facts.platform.append(self._with(fact, "npu", "ascend_bytes"))
            self._kv_seen()
            self._emit("kv_budget", f)

    def _h_kv_cache_size(self, m, line, fact):
        tokens = _int(m.group("tokens"))
        if tokens is None:
            self._unreadable(fact)
        if tokens is not None:
            f = self._with(fact, tokens)
            self.facts.tokens.append(f)
            dev = m.group("device")
            if dev in ("NPU", "CPU", "XPU", "TPU", "HPU"):
                self.facts.platform.append(self._with(fact, dev.lower(), "kv_cache_size_device"))
            self.facts.engine.append(self._with(fact, "v1", "kv_cache_size"))
            self._kv_seen()
            self._emit("tokens", f)

    def _h_max_concurrency(self, m, line, fact):
        tokens, conc = _int(m.group("tokens")), _float(m.group("concurrency"))
        if tokens is not None and conc is not None:
            f = self._with(fact, (tokens, conc))
            self.facts.concurrency.append(f)
            if "kv_cache_utils.py" in line.text or "," in m.group("tokens"):
                # V1 prints it from kv_cache_utils, with thousands separators (>= 0.8); V0 never did
                self.facts.engine.append(self._with(fact, "v1", "max_concurrency"))
            self._emit("concurrency", f)

    def _h_gpu_blocks(self, m, line, fact):
        blocks = _int(m.group("blocks"))
        if blocks is None:
            self._unreadable(fact)
            return
        f = self._with(fact, blocks)
        self.facts.blocks.append(f)
        dev = m.group("device")
        plat = {"cuda": "cuda", "npu": "npu", "rocm": "rocm", "tpu": "tpu", "hpu": "hpu", "xpu": "xpu"}.get(dev.lower())
        if plat:
            self.facts.platform.append(self._with(fact, plat, "blocks_device"))
        # V1 prototype (0.6.6-0.7.3) printed a bare '# GPU blocks: N' from v1/core/kv_cache_utils.py;
        # V0 executors print the pair '# <dev> blocks: N, # CPU blocks: M'
        v1_proto = m.group("cpu_blocks") is None and "kv_cache_utils.py" in line.text
        self.facts.engine.append(self._with(fact, "v1" if v1_proto else "v0", "gpu_blocks"))
        self._kv_seen()
        self._emit("blocks", f)

    def _budget(self, fact: Fact, kind: str, gib: float | None) -> None:
        if gib is None:
            return
        f = self._with(fact, (kind, gib))
        self.facts.kv_budget.append(f)
        self._emit("kv_budget", f)

    def _h_v0_profile_budget(self, m, line, fact):
        self._config("gpu_memory_utilization", fact, _float(m.group("util")), "v0_profile")
        self._memory("total_gib", fact, _float(m.group("total")))
        self.facts.engine.append(self._with(fact, "v0", "v0_profile"))

    def _h_v0_profile_kv(self, m, line, fact):
        self._budget(fact, "v0_profile", _float(m.group("gib")))
        self.facts.engine.append(self._with(fact, "v0", "v0_profile"))

    def _h_v0_profile_results(self, m, line, fact):
        self._budget(fact, "v0_profile", _float(m.group("gib")))
        self._memory("total_gib", fact, _float(m.group("total")))
        self._config("gpu_memory_utilization", fact, _float(m.group("util")), "v0_profile")
        self.facts.engine.append(self._with(fact, "v0", "v0_profile"))

    def _memory(self, key: str, fact: Fact, value: float | None) -> None:
        if value is not None:
            self.facts.memory.setdefault(key, []).append(self._with(fact, value, key))

    def _h_model_loading(self, m, line, fact):
        self._memory("weights_gib", fact, _float(m.group("gib")))

    def _h_graph_capture(self, m, line, fact):
        self._memory("cuda_graph_gib", fact, _float(m.group("gib")))

    def _h_init_engine(self, m, line, fact):
        self._event("init_engine", fact)

    def _h_memory_profiling_v1(self, m, line, fact):
        for key in ("non_kv", "peak", "non_torch", "weights"):
            self._memory({"non_kv": "non_kv_gib", "peak": "activation_peak_gib", "non_torch": "non_torch_gib",
                          "weights": "weights_gib"}[key], fact, _float(m.group(key)))

    def _h_free_memory_report(self, m, line, fact):
        self._config("gpu_memory_utilization", fact, _float(m.group("util")), "free_memory_report")
        self._memory("total_gib", fact, _float(m.group("total")))
        self._memory("free_at_start_gib", fact, _float(m.group("free")))
        self._memory("budget_gib", fact, _float(m.group("budget")))
        for key, name in (("weights", "weights_gib"), ("peak", "activation_peak_gib"),
                          ("non_torch", "non_torch_gib"), ("graph", "cuda_graph_gib")):
            if m.group(key):
                self._memory(name, fact, _float(m.group(key)))

    def _h_kv_cache_memory_bytes(self, m, line, fact):
        self._budget(fact, "kv_cache_memory_bytes", _float(m.group("gib")))
        self._kv_seen()

    def _h_cuda_graph_estimate(self, m, line, fact):
        self._memory("cuda_graph_estimate_gib", fact, _float(m.group("gib")))

    def _h_cuda_graph_equivalent(self, m, line, fact):
        self._config("gpu_memory_utilization", fact, _float(m.group("util") or m.group("util2")), "cuda_graph_equivalent")
        self._memory("equivalent_utilization", fact, _float(m.group("equivalent") or m.group("equivalent2")))

    def _h_cpu_kv_budget(self, m, line, fact):
        kind = "cpu_auto" if m.group("how") == "Auto" else "cpu_explicit"
        self._budget(fact, kind, _float(m.group("gib")))
        self.facts.platform.append(self._with(fact, "cpu", "cpu_kv_budget"))
        self._kv_seen()

    def _h_cpu_kvcache_space_default(self, m, line, fact):
        self._budget(fact, "cpu_default", _float(m.group("gib")))
        self.facts.platform.append(self._with(fact, "cpu", "cpu_kv_budget"))

    def _h_kv_group_sizes(self, m, line, fact):
        sizes = [int(x) for x in re.findall(r"\d+", m.group("sizes"))]
        name = "kv_group_sizes" if m.group("what") == "cache group" else "kv_lcm_block_sizes"
        self._event(name, self._with(fact, sizes))

    def _h_num_gpu_blocks_override(self, m, line, fact):
        self._event("num_gpu_blocks_override", self._with(fact, (_int(m.group("orig")), _int(m.group("override")))))

    def _h_cp_multiply(self, m, line, fact):
        self._event("cp_multiply", self._with(fact, _int(m.group("cp"))))

    def _h_auto_fit(self, m, line, fact):
        val = _int(next((g for g in (m.group("fitted"), m.group("full"), m.group("derived"), m.group("kept")) if g is not None), None))
        self._event("auto_fit", self._with(fact, (_int(m.group("orig")), val)))

    def _h_block_size_set(self, m, line, fact):
        for g in "abcdef":
            if m.group(g):
                self._config("block_size", fact, int(m.group(g)), "block_size_line")
                return

    def _h_api_server_count_default(self, m, line, fact):
        # hybrid LB mode defaults to the node's local DP size, not the DP size (vllm/entrypoints/cli/serve.py)
        key = "data_parallel_size_local" if m.group("local") else "data_parallel_size"
        self._config(key, fact, _int(m.group("dp")), "using_max_model_len")

    def _h_using_max_model_len(self, m, line, fact):
        self._config("max_model_len", fact, _int(m.group("n")), "using_max_model_len")

    def _h_tpu_block_size(self, m, line, fact):
        self._config("block_size", fact, _int(m.group("n") or m.group("n2")), "block_size_line")

    def _h_load_model_line(self, m, line, fact):
        self._config("model", fact, m.group("model"), "load_model_line")

    def _h_offline_model_path(self, m, line, fact):
        self._config("model", fact, m.group("model_id"), "offline_model_id")

    def _h_fp8_kv_cache(self, m, line, fact):
        self._event("fp8_kv_cache", fact)
        if "fp8_ds_mla" in m.group("what"):
            self._config("kv_cache_dtype", fact, "fp8_ds_mla", "kv_format_line")

    # -- errors --------------------------------------------------------------------------------

    def _h_insufficient_kv(self, m, line, fact):
        self._record_insufficient(m, fact)

    def _record_insufficient(self, m, fact: Fact) -> Fact:
        val = {"max_seq_len": _int(m.group("max_seq_len")), "needed_gib": _float(m.group("needed")),
               "available_gib": _float(m.group("available")), "estimated_max_len": _int(m.group("estimate"))}
        f = self._with(fact, val, "insufficient_kv")
        self.facts.insufficient_kv.append(f)
        self.facts.engine.append(self._with(fact, "v1", "insufficient_kv"))  # this wording is V1's kv_cache_utils
        self._kv_seen()
        self._emit("insufficient_kv", f)
        return f

    _HEAD = recache.compile(r"^\s*(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d (?:\[[^\]]*\] |\S+\] )?)?")

    def _h_insufficient_kv_part(self, m, line, fact):
        """The insufficient-KV message split over lines (newer vLLM, wrapped pastes): join nearby parts."""
        done = self.facts.insufficient_kv[-1] if self.facts.insufficient_kv else None
        if done is not None and done.line == line.number:
            return  # the whole message was on this line
        part = (line.number, self._HEAD.sub("", line.text).strip(), fact)
        if "max seq len" in line.text and "max seq len" not in " ".join(p[1] for p in self._ikv_parts[-1:]):
            self._ikv_parts, self._ikv_fact = [part], None
        elif self._ikv_parts and line.number - self._ikv_parts[-1][0] <= 2:
            self._ikv_parts.append(part)
        else:
            return
        joined = " ".join(p[1] for p in self._ikv_parts)
        full = self._ikv_regex.search(joined)
        if full is None and len(self._ikv_parts) > 1:
            # a row break inside a word ("KV cach" + "e is needed"): join those rows without a space
            glued = self._ikv_parts[0][1]
            for _, nxt, _ in self._ikv_parts[1:]:
                glued += ("" if glued[-1:].isalnum() and nxt[:1].islower() else " ") + nxt
            full = self._ikv_regex.search(glued)
            joined = glued if full else joined
        if full is not None and line.unterminated and full.end() == len(joined) and joined[-1:] in _CUT_CHARS:
            return  # the input ends inside the message's last number
        if full is None:
            if len(self._ikv_parts) >= 5:
                self._ikv_parts = []
            return
        if self._ikv_fact is None:
            self._ikv_fact = self._record_insufficient(full, self._ikv_parts[0][2])
        elif self._ikv_fact.value["estimated_max_len"] is None and full.group("estimate"):
            self._ikv_fact.value["estimated_max_len"] = _int(full.group("estimate"))  # it came on a later line

    def _h_insufficient_kv_v0(self, m, line, fact):
        val = {"max_seq_len": _int(m.group("max_seq_len")), "needed_gib": None, "available_gib": None,
               "estimated_max_len": _int(m.group("kv_tokens"))}
        f = self._with(fact, val, "insufficient_kv_v0")
        self.facts.insufficient_kv.append(f)
        self.facts.engine.append(self._with(fact, "v0", "insufficient_kv_v0"))
        self._kv_seen()
        self._emit("insufficient_kv", f)

    def _h_no_available_memory(self, m, line, fact):
        self._event("no_available_memory", fact)
        self._kv_seen()

    def _h_util_too_high_start(self, m, line, fact):
        self._config("gpu_memory_utilization", fact, _float(m.group("util")), "util_too_high_start")
        self._event("util_too_high_start", self._with(fact, {"free_gib": _float(m.group("free")), "total_gib": _float(m.group("total")),
                                                              "util": _float(m.group("util")), "desired_gib": _float(m.group("desired"))}))

    def _h_auto_fit_failed(self, m, line, fact):
        self._event("auto_fit_failed", fact)

    def _h_memory_profiling_error(self, m, line, fact):
        self._event("memory_profiling_error", fact)

    def _h_cpu_worker_over_budget(self, m, line, fact):
        self._event("cpu_worker_over_budget", self._with(fact, {
            "used_gib": _float(m.group("used")), "reserved_gib": _float(m.group("reserved")),
            "node": _int(m.group("node")), "utilization_to_exceed": _float(m.group("util"))}))

    def _h_engine_failed(self, m, line, fact):
        self._event("engine_failed", fact)

    def _h_block_exhaustion(self, m, line, fact):
        self._event("block_exhaustion", fact)

    # -- HMA -----------------------------------------------------------------------------------

    def _h_hma_disabled_hybrid_model(self, m, line, fact):
        self._event("hma_disabled_hybrid_model", fact)

    def _h_hma_unify_failed(self, m, line, fact):
        self._event("hma_unify_failed", fact)

    def _h_hma_auto_off(self, m, line, fact):
        self._event("hma_auto_off", self._with(fact, m.group("cause")))

    def _h_hma_chunked_local(self, m, line, fact):
        self._event("hma_chunked_local", fact)

    def _h_hma_explicit_unsupported(self, m, line, fact):
        self._event("hma_explicit_unsupported", fact)

    def _h_hma_swa_full_fallback(self, m, line, fact):
        self._event("hma_swa_full_fallback", fact)

    # -- retention / scheduler / recompute -----------------------------------------------------

    def _h_retention_not_multiple(self, m, line, fact):
        self._event("retention_not_multiple", self._with(fact, (_int(m.group("value")), _int(m.group("block")))))

    def _h_retention_no_swa(self, m, line, fact):
        self._event("retention_no_swa", fact)

    def _h_retention_env_deprecated(self, m, line, fact):
        self._event("retention_env_deprecated", fact)

    def _h_chunked_prefill(self, m, line, fact):
        self._config("max_num_batched_tokens", fact, _int(m.group("tokens")), "chunked_prefill_line")

    def _h_partial_prefills(self, m, line, fact):
        self._config("max_num_partial_prefills", fact, _int(m.group("partial")), "partial_prefill_line")
        self._config("max_long_partial_prefills", fact, _int(m.group("long")), "partial_prefill_line")
        self._config("long_prefill_token_threshold", fact, _int(m.group("threshold")), "partial_prefill_line")

    def _h_partial_prefill_errors(self, m, line, fact):
        self._event("partial_prefill_error", fact)

    def _h_param_reset(self, m, line, fact):
        self._event("param_reset:" + m.group("param"), self._with(fact, m.group("action")))

    def _h_batched_tokens_checks(self, m, line, fact):
        self._event("batched_tokens_check", self._with(fact, (m.group("what"), _int(m.group("tokens")), _int(m.group("other")))))

    def _h_recompute_ignored_p_node(self, m, line, fact):
        self._event("recompute_ignored_p_node", fact)

    def _h_recompute_role_error(self, m, line, fact):
        self._event("recompute_role_error", self._with(fact, (m.group("role") or "").strip("'") or None))

    def _h_recompute_deprecated_top_level(self, m, line, fact):
        self._event("recompute_deprecated_top_level", fact)

    def _h_recompute_offload_connector(self, m, line, fact):
        self._event("recompute_offload_connector", self._with(fact, {
            "role": m.group("role"), "per_rank_gb": _float(m.group("per_rank_gb")),
            "world_size": _int(m.group("world_size")), "offload_prefix_caching": m.group("prefix") == "True"}))

    def _h_recompute_runtime(self, m, line, fact):
        what = m.group("what")
        if what == "Preempted request":
            self.facts.recompute_preemptions += 1
            if self.facts.recompute_first is None:
                self.facts.recompute_first = fact
            self._emit("recompute_preempted", fact)
        elif what.startswith("Recompute triggered"):
            self._event("recompute_triggered", fact)
        elif "falls back" in what:
            self._event("recompute_fallback", fact)
        else:
            self._event("recompute_offload", fact)

    # -- runtime -------------------------------------------------------------------------------

    def _h_v0_preemption(self, m, line, fact):
        self.facts.preemption_warning_count += 1
        if len(self.facts.preemption_warnings) < 50:
            self.facts.preemption_warnings.append(fact)
        if m.group("total") is not None:  # cumulative per engine process: the last one is the total so far
            self.facts.stats.v0_cumulative_preemptions[line.rank] = self._with(fact, int(m.group("total")))
        self.facts.engine.append(self._with(fact, "v0", "v0_preemption"))
        self._emit("preemption_warning", fact)

    def _h_stats(self, m, line, fact):
        vals = stats_values(m)
        if vals is not None:
            self._stats_sample(vals, fact)

    def _stats_sample(self, vals: tuple, fact: Fact) -> None:
        """One stats line's figures (`stats_batch.stats_values`) into the summary, with its events: the
        per-line path (``watch``, timelines), and the oracle of `stats_batch.fold`."""
        st = self.facts.stats
        engine, aggregated, v0, running, waiting, deferred, preemptions, usages, hit, prompt_tps, gen_tps = vals
        if v0:
            self.facts.engine.append(self._with(fact, "v0", "v0_stats")) if not self.facts.engine else None
        peak_rose, single = st.add_sample(running, waiting, fact, engine=engine, preemptions=preemptions,
                                          usages=usages, hit=hit, deferred=deferred)
        if preemptions:
            self._emit("stats_preemptions", self._with(fact, preemptions))
        if peak_rose:
            self._emit("kv_usage_peak", self._with(fact, st.kv_usage_max))
        usage = usages[-1] if usages else None
        if running and usage is not None and not v0 and not aggregated:
            # one engine's V1 line (an aggregated line averages the usage over engines): the workload sums
            st.workload_lines += 1
            st.prompt_tps_sum += prompt_tps or 0.0
            st.gen_tps_sum += gen_tps or 0.0
            st.running_sum += running
            st.kv_usage_running_sum += usage
            if st.workload_first is None:
                st.workload_first = fact
            st.workload_last = fact
        # distributions over active lines only: how many idle lines follow a load depends on timing
        if running or waiting or prompt_tps or gen_tps:
            st.add_samples((prompt_tps, gen_tps, running, waiting, usage, hit))
        if single:
            self._emit("single_running", fact)

    def _h_startup_complete(self, m, line, fact):
        if self.facts.startup_complete is None:
            self.facts.startup_complete = fact
        self._emit("startup_complete", fact)

    # --- handlers for KVD001-KVD009 -----------------------------------------------------------

    def _h_v1_fallback(self, m, line, fact):
        feature = m.group("feature").strip()
        self._event("v1_fallback", self._with(fact, feature))
        self._event("v1_fallback:" + feature, self._with(fact, feature))

    def _h_offload_per_rank_mismatch(self, m, line, fact):
        self._event("offload_per_rank_mismatch",
                    self._with(fact, (_float(m.group("per_rank")), _float(m.group("derived")))))

    # --- handlers for KVD010-KVD018 -----------------------------------------------------------

    def _h_block_pool_no_free(self, m, line, fact):
        self._event("block_pool_no_free", self._with(fact, _int(m.group("blocks"))))

    def _h_prompt_exceeds_kv_capacity(self, m, line, fact):
        self._event("prompt_exceeds_kv_capacity", self._with(fact, _int(m.group("tokens"))))
        self.facts.engine.append(self._with(fact, "v0", "prompt_exceeds_kv_capacity"))

    # --- handlers for wordings found by the format-string harvest ---------------------------

    def _h_cpu_kvcache_space_not_set(self, m, line, fact):
        self._budget(fact, "cpu_default", _float(m.group("gib")))
        self.facts.platform.append(self._with(fact, "cpu", "cpu_kv_budget"))

    def _h_engine_dump_version(self, m, line, fact):
        self.facts.version.append(self._with(fact, m.group("version"), "engine_dump"))
        self.facts.engine.append(self._with(fact, "v1", "engine_dump"))

    def _h_util_budget_error(self, m, line, fact):
        self._config("gpu_memory_utilization", fact, _float(m.group("util")), "util_budget_error")
        key = "free_gib" if m.group("what") == "Free memory" else "external_weights_gib"
        self._event("util_budget_error", self._with(fact, {key: _float(m.group("gib")), "total_gib": _float(m.group("total")),
                                                           "util": _float(m.group("util")), "budget_gib": _float(m.group("budget"))}))

    def _h_cpu_kv_over_available(self, m, line, fact):
        self.facts.platform.append(self._with(fact, "cpu", "cpu_kv_budget"))
        self._event("cpu_kv_over_available", self._with(fact, {"node": _int(m.group("node")), "available_gib": _float(m.group("avail")),
                                                               "total_gib": _float(m.group("total")), "requested_gib": _float(m.group("gib"))}))

    def _h_v0_profile_breakdown(self, m, line, fact):
        self._memory("weights_gib", fact, _float(m.group("weights")))
        self._memory("non_torch_gib", fact, _float(m.group("non_torch")))
        self._memory("activation_peak_gib", fact, _float(m.group("peak")))

    def _h_xpu_profile_before(self, m, line, fact):
        mib = 1024.0  # xpu_worker prints bytes / 1024**2 as "MB"
        self._memory("total_gib", fact, _div(_float(m.group("total")), mib))
        self._memory("weights_gib", fact, _div(_float(m.group("weights")), mib))

    def _h_xpu_profile_after(self, m, line, fact):
        mib = 1024.0
        self._memory("non_kv_gib", fact, _div(_float(m.group("peak")), mib))
        self._memory("non_torch_gib", fact, _div(_float(m.group("non_torch")), mib))

    def _h_hpu_memory_summary(self, m, line, fact):
        self._config("gpu_memory_utilization", fact, _float(m.group("util")), "hpu_memory_summary")
        self._budget(fact, "hpu_profile", _gib_of(m.group("kv")))
        self.facts.platform.append(self._with(fact, "hpu", "hpu_memory_summary"))

    def _h_hpu_weights_summary(self, m, line, fact):
        self._memory("weights_gib", fact, _gib_of(m.group("device")))

    def _h_prompt_longer_than_max_model_len(self, m, line, fact):
        if m.group("ptype") not in (None, "decoder"):
            return  # an encoder prompt's limit is the encoder cache size from 0.11 (v1/engine/input_processor.py)
        mml = m.group("mml") or m.group("mml0") or m.group("mml1")
        self._config("max_model_len", fact, _int(mml), "prompt_length_error")

    def _h_prefix_hit_rate_line(self, m, line, fact):
        hit = _float(m.group("gpu"))
        if hit is not None and hit >= 0:  # vLLM reports -1 (printed -100.00) when it has no figure
            self.facts.stats.prefix_hit_last = hit

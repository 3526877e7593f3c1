"""Launch commands in every form: one harvester from a line of any shape to an args dict.

A user pastes the command that started the server in many shapes: a shell line (continued with
``\\``, quoted inside ``bash -c "..."``, behind ``VAR=value`` assignments, ``srun``/``nohup``/``uv run``
wrappers, ``docker run IMAGE``), a JSON or YAML list (``["vllm", "serve", ...]``, compose
``command:``, Kubernetes ``args:`` with one ``- item`` per line), a bare block of flags, a command in
backticks or after "I ran" in prose, or a Python ``LLM(...)`` / ``EngineArgs(...)`` call. Each shape
is turned into tokens, and the tokens into an args dict keyed by argparse destination names.

The meaning of each flag — its destination, and whether a value follows it — comes from vLLM's own
argument list, harvested from the released sources by ``tools/harvest_cli_args.py`` into
``kvlogdiag/catalogue/cli_args.json`` (every ``add_argument`` and ``EngineArgs`` field of every
release). A flag that takes no value in some release (``store_true``, ``BooleanOptionalAction``) is
read as one, so the model path after ``--enforce-eager`` is never taken as its value. Sizes are read
the way vLLM's ``human_readable_int`` does (``32K`` = 32768, ``32k`` = 32000; vllm/utils/argparse_utils.py:30
in 0.33.0), only for the arguments vLLM reads that way. Placeholders of docs and templates
(``<model>``, ``$MODEL``, ``{{ model }}``, ``/path/to/model``, ``vx.x.x``) are never values.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import shlex
from typing import Any

from kvlogdiag import pkgdata, recache
from kvlogdiag.extract.pyrepr import parse_json_or_repr, scalar
from kvlogdiag.records import Record

# kvlogdiag's own spellings mapped to argparse destinations (log dumps and old releases)
ALIASES = {"model_tag": "model", "tp": "tensor_parallel_size", "pp": "pipeline_parallel_size",
           "dp": "data_parallel_size", "chunked_prefill_enabled": "enable_chunked_prefill",
           "max_seq_len": "max_model_len", "kv_cache_memory": "kv_cache_memory_bytes"}
# values that are JSON or a Python literal rather than a scalar
_STRUCTURED = {"kv_transfer_config", "additional_config", "speculative_config", "compilation_config", "kv_events_config"}
# vLLM >= 0.10 reads these with human_readable_int (max_model_len with human_readable_int_or_auto):
# vllm/engine/arg_utils.py:397-405 in 0.33.0
_HUMAN_INT = {"max_model_len", "max_num_batched_tokens", "max_num_scheduled_tokens", "kv_cache_memory_bytes",
              "max_num_queued_tokens"}
_NO_VALUE = {"flag", "bool_optional", "store_false"}
_SHELL_END = {"|", "||", "2>&1", "&&", ";", ">", ">>", "&", "1>", "2>", "<"}
_TRUE_FALSE = {"true": True, "false": False, "1": True, "0": False}

# <model>, $MODEL, ${LEN}, {{ tp }}, {max_len}, [model_tag], '...', /path/to/model, your-model, N, vx.x.x
# (a JSON value's braces are not a placeholder; '/path/to/Qwen3-8B' is a redacted path, its model name real)
_PLACEHOLDER = recache.compile(r"<[^<>]*>|\$\{?[A-Za-z_]|\{\{|\}\}|^\{[A-Za-z_]\w*\}$|^\[[^\]\"',]*\]$|\.\.\.|…"
                               r"|^/?(?:\w+/)*path/to/(?:the/)?(?:your[-_]?)?(?:model|models|model[-_]?(?:dir|path|name)|checkpoint|ckpt|weights|dir)s?/?$"
                               r"|\byour[-_ ]|\bYOUR_|^x+$|^v?x\.x(?:\.x)?$"
                               r"|^(?:N|M|K|X|NUM|INT|VALUE|MODEL(?:_NAME|_PATH|_ID)?|SIZE|LEN)$", re.I)

_CURLY = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2018": "'", "\u2019": "'", "\u00a0": " ",
                        "\u2013": "-", "\u2014": "-"})


@functools.cache
def arg_table() -> dict:
    """vLLM's harvested argument list (``kvlogdiag/catalogue/cli_args.json``)."""
    return json.loads(pkgdata.read_text("catalogue", "cli_args.json"))


@functools.cache
def _flags() -> dict[str, tuple[str, bool, Any]]:
    """flag → (dest, takes a value, value when none follows) over every harvested release."""
    out: dict[str, tuple[str, bool, Any]] = {}
    for opt, info in arg_table()["flags"].items():
        kinds = set(info.get("kinds", {})) or {info["kind"]}
        if kinds & {"store_false"}:
            out[opt] = (info["dest"], False, False)
        elif kinds & _NO_VALUE:
            out[opt] = (info["dest"], False, True)
        elif "optional" in kinds:
            out[opt] = (info["dest"], False, True)  # a value may follow: read when it is true/false
        else:
            out[opt] = (info["dest"], True, None)
    return out


@functools.cache
def known_dests() -> frozenset[str]:
    """Every argparse destination and every EngineArgs/LLM keyword of any harvested release."""
    t = arg_table()
    return frozenset({i["dest"] for i in t["flags"].values()} | set(t["kwargs"]))


def is_placeholder(value: Any) -> bool:
    """A docs/template stand-in (``<model>``, ``$MAX_LEN``, ``vx.x.x``), not a value someone ran."""
    return isinstance(value, str) and bool(_PLACEHOLDER.search(value.strip("'\"")))


def human_int(text: str) -> int | None:
    """vLLM's ``human_readable_int``: ``8192``, ``32K`` (binary, integers only), ``25.6k`` (decimal)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])?", text.strip().replace("_", ""))
    if not m:
        return None
    num, unit = m.groups()
    if unit is None:
        return int(num) if "." not in num else None
    if unit.isupper():
        return int(num) * 1024 ** ("KMGT".index(unit) + 1) if "." not in num else None
    return int(float(num) * 1000 ** ("kmgt".index(unit) + 1))


def lookup_flag(name: str) -> tuple[str, bool, Any]:
    """(dest, takes a value, value without one) of a flag as written: ``--max_model_len`` and
    ``--max-model-len`` alike; an unknown flag takes a value and keeps its own name."""
    table = _flags()
    for cand in (name, name.replace("_", "-"), "--" + name.lstrip("-").replace("_", "-")):
        if cand in table:
            return table[cand]
    return name.lstrip("-").replace("-", "_"), True, None


def convert(dest: str, value: Any) -> Any:
    """A command's value as kvlogdiag stores it (None: a placeholder or an 'auto' that says nothing)."""
    if isinstance(value, str):
        v = value.strip().strip(",").strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
            v = v[1:-1]
        if not v or is_placeholder(v):
            return None
        if dest in _STRUCTURED:
            return parse_json_or_repr(v)
        if dest in _HUMAN_INT:
            if dest == "max_model_len" and v.lower() in ("auto", "-1"):
                return None  # 'pick the longest that fits': the log's resolved length says which
            n = human_int(v)
            return n if n is not None else scalar(v)
        return scalar(v)
    return value


def parse_flags(tokens: list[str], positional: bool = False) -> dict[str, Any]:
    """vLLM command-line tokens → args dict (argparse destination names); with ``positional`` the
    first bare token (``vllm serve [flags] MODEL [flags]``) is the model."""
    args: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        t = tokens[i].translate(_CURLY)
        if t in _SHELL_END or t.startswith(("2>", "1>", ">")):
            break
        if not t.startswith("-") or t in ("-", "--") or re.fullmatch(r"-\d+(?:\.\d+)?", t):
            if positional and t not in ("-", "--"):
                if not is_placeholder(t):
                    args.setdefault("model", t)
                positional = False
            i += 1
            continue
        name, eq, val = t.partition("=")
        dest, takes, bare = lookup_flag(name)
        dest = ALIASES.get(dest, dest)
        if not takes:
            if eq:
                b = _TRUE_FALSE.get(val.lower())
                value: Any = (b if bare is True else not b) if b is not None else None
            elif i + 1 < len(tokens) and tokens[i + 1].lower() in ("true", "false") and bare is True:
                value = tokens[i + 1].lower() == "true"  # StoreBoolean (0.5): '--enable-chunked-prefill False'
                i += 1
            else:
                value = bare
            if value is not None:
                args[dest] = value
            i += 1
            continue
        if not eq and i + 1 < len(tokens):
            nxt = tokens[i + 1]
            if not nxt.startswith("-") or re.fullmatch(r"-\d+(?:\.\d+)?", nxt):
                val, eq = nxt, "="
                i += 1
        if eq:
            conv = convert(dest, val)
            if conv is not None:
                args[dest] = conv
        i += 1
    return args


_SHLEX_MAX = 1 << 16  # shlex is quadratic in a token's length: a longer "command" is a damaged line, split on spaces


def split_shell(text: str) -> list[str]:
    """Shell words of a command line; an unbalanced quote (a cut paste) falls back to whitespace."""
    text = text.translate(_CURLY)
    if len(text) > _SHLEX_MAX:
        return [w.strip("'\"") for w in text.split()]
    try:
        return shlex.split(text, comments=False)
    except ValueError:
        return [w.strip("'\"") for w in text.split()]


# -- finding the command in a line ----------------------------------------------------------------

# where vLLM's own argument list begins: 'vllm serve', the api_server module or script, an image
_ANCHOR = recache.compile(
    r"(?P<serve>(?<![\w./~-])(?:[\w./~-]*/)?vllm[\"',\s]+serve\b[\"',]?)"
    r"|(?P<module>(?<![\w.-])-m[\"',\s]+[\"']?vllm\.entrypoints\.[\w.]*api_server\b[\"',]?)"
    r"|(?P<script>(?<![\w./~-])(?:[\w./~-]*/)?api_server\.py\b)"
    r"|(?P<image>(?<![\w./-])[\w.-]*(?:/[\w.-]+)*/vllm-openai(?::[\w.-]+)?(?=[\s\"',]|$))"
    r"|(?P<bench>(?<![\w./~-])(?:[\w./~-]*/)?benchmark_\w+\.py\b)")
# a user reporting what they ran (the command after it is this run's): "I ran", "Running", "launched with"
_RAN_LEAD = recache.compile(r"(?:\bI(?:'m| am)?\s+(?:ran|run|running|launched|launch|started|start|used|use|executed)"
                            r"|\b[Rr]unning|\b(?:[Ll]aunched|[Ss]tarted|[Ss]erved|[Dd]eployed)\s+(?:it\s+)?(?:with|using|via|by)"
                            r"|\b[Cc]ommand(?:\s+(?:is|was|used))?\s*[:=]?|\b[Cc]md\s*[:=]|\busing)\W*$")
_RAN_LEAD_AT = recache.compile(_RAN_LEAD.pattern.removesuffix(r"\W*$"))
# a reply suggesting a command: not the run's
_ADVICE = recache.compile(r"\b(?:try|Try|could|should|e\.g\.|[Ee]xample|suggest|recommend|instead|consider|maybe|perhaps"
                          r"|[Pp]lease|docs?\b|documentation|[Ii]f you|you can|You can|you may|need to|must|[Uu]sage)\b")
# The words that may stand before a command in a shell line, one word at a time (a regex over the whole
# prefix would backtrack exponentially on a long hostile line): prompts, list bullets, line numbers,
# env assignments, wrappers and their options, paths, host:port, images, numbers, quoted words.
_PROMPT_WORD = recache.compile(r"\S*[#$>%\u276f\u279c\u00bb\u03bb]|\([\w.-]+\)|[-*+>]|\d+[:.)]|`+")
_SHELL_WORD = recache.compile(
    r"export|[A-Za-z_][A-Za-z0-9_]*=\S*"
    r"|nohup|exec|time|sudo|env|nice|stdbuf|numactl|taskset|srun|salloc|mpirun|mpiexec|torchrun|ray|uv|uvx|pipx"
    r"|conda|poetry|pdm|hatch|bash|sh|zsh|apptainer|singularity|docker|podman|nerdctl|kubectl|ssh|screen|tmux"
    r"|python\d?(?:\.\d+)?|\S*/python\d?(?:\.\d+)?|run|job|submit|container"
    r"|-\S*|[^\s/=:@]*[/=:@]\S*|\d\S*|[\"'`]\S*")
# launchers: after one of them (and its options, whatever they are) the command follows
_LAUNCHERS = {"docker", "podman", "nerdctl", "apptainer", "singularity", "srun", "salloc", "sbatch", "mpirun", "mpiexec",
              "kubectl", "ssh"}


def _shell_prefix(before: str) -> bool:
    """Is ``before`` (the text before the command) a shell prefix: a prompt, then shell words only, or a
    launcher whatever follows it?"""
    words = before.split()
    i = 0
    while i < len(words) and _PROMPT_WORD.fullmatch(words[i]):
        i += 1
    if i < len(words) and words[i] == "sudo":
        i += 1
    if i < len(words) and words[i] in _LAUNCHERS:
        return True
    return all(_SHELL_WORD.fullmatch(w) for w in words[i:])


class Command(Record):  # a plain record, not a dataclass: less to build per start (kvlogdiag/records.py)
    """A launch command found in a line."""

    _FIELDS = ("args", "form", "continued", "needs_model")
    args: dict[str, Any]
    form: str  # "shell", "list", "flags", "python"
    continued: bool = False  # the line ends with a backslash: flag lines below belong to it
    needs_model: bool = False  # 'vllm serve \' with the model on the next line

    def __init__(self, args: dict[str, Any], form: str, continued: bool = False, needs_model: bool = False) -> None:
        self.args = args
        self.form = form
        self.continued = continued
        self.needs_model = needs_model


def is_advice(text: str) -> bool:
    """Words of a reply or of docs suggesting a command ('you could try', 'e.g.', 'usage:')."""
    return bool(_ADVICE.search(text))


def _is_user_context(before: str) -> bool:
    """Does the text before a command make it the user's own (line start, a shell prefix, 'I ran')?"""
    if _ADVICE.search(before):
        return False
    b = before.translate(_CURLY)
    if _shell_prefix(b):
        return True
    tail = b.rstrip().rstrip("`\"'").rstrip()
    if _RAN_LEAD.search(tail + " ") or b.rstrip().endswith("`"):
        return True
    # a lead, then shell words before the command ("I ran python -m vllm…", a wrapper's log record
    # "… - INFO - Command: python -m vllm.entrypoints…")
    ends = [m.end() for m in _RAN_LEAD_AT.finditer(b)]
    return bool(ends) and _shell_prefix(b[ends[-1]:].lstrip("`\"' "))


def _cut(text: str) -> str:
    """The command part of a line: up to a closing backtick and before a trailing '# remark'."""
    if "`" in text:
        text = text.split("`", 1)[0]
    return re.split(r"\s#\s", text, maxsplit=1)[0]


def shell_command(text: str, whole_line: bool = False) -> Command | None:
    """A shell-form vLLM launch command anywhere in ``text`` (None: none, or one suggested as advice).
    ``whole_line``: the caller already knows the line is a command (the catalogue's user_command)."""
    text = text.translate(_CURLY)
    m = _ANCHOR.search(text)
    if m is None:
        return None
    before = text[:m.start()]
    if not whole_line and not _is_user_context(before):
        return None
    if "[" in before and not before.rstrip().endswith("`") and re.search(r"\[\s*[\"']?$", before):
        return None  # a list: list_command reads it
    rest = text[m.end():]
    in_ticks = before.count("`") % 2 == 1
    if in_ticks:
        rest = rest.split("`", 1)[0]
    quote = re.search(r"(?:-c|exec)\s+([\"'])$", before.rstrip(" ")) or re.search(r"([\"'])\s*$", before)
    if quote:  # bash -c "vllm serve ...": the command ends at the closing quote
        rest = rest.split(quote.group(1), 1)[0]
    rest = _cut(rest).rstrip()
    continued = rest.endswith("\\")
    toks = split_shell(rest.rstrip("\\"))
    kind = m.lastgroup
    if kind == "image" and toks[:1] in (["vllm"], ["python"], ["python3"]):
        return shell_command(" ".join(toks), whole_line=True)  # 'IMAGE vllm serve ...' overrides the entrypoint
    args = parse_flags(toks, positional=kind in ("serve", "image"))
    return Command(args, "shell", continued, needs_model=kind == "serve" and "model" not in args and continued)


def _list_items(body: str) -> list[str] | None:
    body = body.translate(_CURLY)
    for parse in (json.loads, ast.literal_eval):
        try:
            v = parse("[" + body + "]")
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(v, list) and all(isinstance(x, (str, int, float)) for x in v):
            return [str(x) for x in v]
    return None


def list_tokens_args(items: list[str], in_image: bool = False) -> dict[str, Any] | None:
    """The args of a command written as a list of words (None: not a vLLM command)."""
    words = [w.strip() for w in items]
    for k in range(len(words) - 1):
        if words[k].rsplit("/", 1)[-1] == "vllm" and words[k + 1] == "serve":
            return parse_flags(words[k + 2:], positional=True)
    for k in range(len(words) - 1):
        if words[k] == "-m" and words[k + 1].startswith("vllm.entrypoints.") and words[k + 1].endswith("api_server"):
            return parse_flags(words[k + 2:])
    for k, w in enumerate(words):
        if w.endswith("api_server.py"):
            return parse_flags(words[k + 1:])
    flags = [w for w in words if w.startswith("--")]
    known = [w for w in flags if is_vllm_flag(w)]
    if words and words[0].startswith("-") and len(known) >= 2 and len(known) * 2 >= len(flags):
        return parse_flags(words, positional=in_image)
    return None


_LIST = recache.compile(r"\[([^\[\]]*)\]")
_YAML_KEY = recache.compile(r"^\s*(?:-\s+)?(?P<key>command|args|entrypoint|cmd|CMD|ENTRYPOINT)\s*[:=]?\s*(?P<rest>.*)$")


def list_command(text: str) -> Command | None:
    """A command written as a JSON/YAML flow list: ``["vllm", "serve", ...]``, ``command: [...]``,
    ``args: ["--model", ...]`` (a Dockerfile ``CMD [...]`` too)."""
    for lm in _LIST.finditer(text):
        items = _list_items(lm.group(1))
        if not items or len(items) < 2:
            continue
        if _ADVICE.search(text[:lm.start()]):
            return None
        args = list_tokens_args(items)
        if args is not None:
            return Command(args, "list")
    km = _YAML_KEY.match(text)
    if km and km.group("rest").startswith("-") and not km.group("rest").startswith("- "):
        args = list_tokens_args(split_shell(_cut(km.group("rest"))))  # compose 'command: --model X --max-model-len N'
        if args is not None:
            return Command(args, "list")
    return None


def is_vllm_flag(token: str) -> bool:
    """A flag of vLLM's harvested argument list (``--max-model-len``, ``--max_model_len=8192``, ``-tp``)."""
    name = token.partition("=")[0]
    table = _flags()
    return name in table or name.replace("_", "-") in table


def flag_line_args(text: str) -> tuple[dict[str, Any], int]:
    """A bare line of flags (``--max-model-len 8192 --tensor-parallel-size 2``): its args and how many of
    its flags are vLLM's (the caller decides whether that is enough: one stray flag could be any tool's)."""
    t = _cut(text.translate(_CURLY)).strip().rstrip("\\").strip()
    if not t.startswith("-") or _ADVICE.search(t):
        return {}, 0
    toks = split_shell(t)
    flags = [w for w in toks if w.startswith("-") and not re.fullmatch(r"-\d+(?:\.\d+)?", w)]
    known = sum(is_vllm_flag(w) for w in flags)
    if not flags or known * 2 < len(flags) or not is_vllm_flag(flags[0]):
        return {}, 0
    return parse_flags(toks), known


# -- Python calls -----------------------------------------------------------------------------------

PY_CALL = recache.compile(r"(?<![\w.])(?:vllm\.)?(?P<fn>LLM|EngineArgs|AsyncEngineArgs)\s*\(")
_KWARG = recache.compile(r"(?<![\w.])(?P<key>[A-Za-z_][\w-]*)\s*=\s*(?P<value>\"[^\"]*\"|'[^']*'|[\w.+-]+|\{[^{}]*\}|\[[^\[\]]*\])\s*(?=[,)]|$)")


def python_kwargs(text: str) -> dict[str, Any]:
    """``key=value`` arguments of (part of) a Python call, literals only (a variable is no value);
    curly quotes, ``30_000`` and ``max-model-len=`` spellings read as Python would mean them."""
    out: dict[str, Any] = {}
    text = text.translate(_CURLY)
    for km in _KWARG.finditer(text):
        key = km.group("key").replace("-", "_")
        key = ALIASES.get(key, key)
        if key not in known_dests():
            continue
        raw = km.group("value")
        try:
            v = ast.literal_eval(raw)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue  # a name or an expression: its value is not in the text
        if isinstance(v, str) and (is_placeholder(v) or not v):
            continue
        if key in _STRUCTURED and isinstance(v, str):
            v = parse_json_or_repr(v)
        out[key] = v
    return out


def python_call(text: str) -> tuple[dict[str, Any], bool] | None:
    """The literal keyword arguments of an ``LLM(...)`` / ``EngineArgs(...)`` call starting in this line,
    and whether the call goes on below (its ``)`` is not on this line)."""
    m = PY_CALL.search(text)
    if m is None or _ADVICE.search(text[:m.start()]):
        return None
    rest = text[m.end():]
    depth, end = 1, None
    for k, ch in enumerate(rest):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0:
            end = k
            break
    return python_kwargs(rest if end is None else rest[:end]), end is None


# -- YAML block lists (Kubernetes 'args:' / compose 'command:' with one '- item' per line) ----------

_BLOCK_HEAD = recache.compile(r"^\s*(?:-\s+)?(?:command|args)\s*:\s*(?:\|-?|>-?)?\s*$")
_BLOCK_ITEM = recache.compile(r"^\s*-\s+(?P<item>\S.*)$")


class BlockList:
    """Collects a YAML block list below ``args:`` / ``command:``, one consecutive ``- item`` line at a
    time; ``feed`` returns the args once the block ends (a line that is not an item, or a gap)."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.last = -10
        self.open = False
        self.start_fact: Any = None

    def feed(self, number: int, text: str, fact: Any) -> tuple[dict[str, Any], Any] | None:
        """One line; returns (args, fact of the head line) when a block of a vLLM command just ended."""
        done = None
        if self.open:
            im = _BLOCK_ITEM.match(text) if number == self.last + 1 else None
            if im:
                item = im.group("item").strip().split(" #", 1)[0].strip()
                self.items.extend(_list_items(item) or [item.strip("'\"")] if item.startswith("[") else [item.strip("'\"")])
                self.last = number
                return None
            done = self.close()
        if _BLOCK_HEAD.match(text):
            self.open, self.items, self.last, self.start_fact = True, [], number, fact
        return done

    def close(self) -> tuple[dict[str, Any], Any] | None:
        """End the open block (also at the end of the input)."""
        if not self.open:
            return None
        self.open = False
        args = list_tokens_args(self.items) if len(self.items) >= 2 else None
        return (args, self.start_fact) if args else None


# what lines the prefilter must let through for these forms (besides the catalogue's own keywords); YAML
# items only indented: every uvicorn access line ('127.0.0.1:4000 - "POST /v1/...') has ' - "'
PREFILTER_KEYWORDS = ('  - "', "  - '", '"serve"', "'serve'", "EngineArgs(", "args:", "command:", "vllm serve",
                      "enforce_eager=", "block_size=", "max_num_seqs=", "max_num_batched_tokens=", "kv_cache_dtype=",
                      "enable_prefix_caching=", "swap_space=", "cpu_offload_gb=", "pipeline_parallel_size=",
                      "quantization=")

"""Masking of secrets and identifying details in text a report shows.

`Redactor.redact(text)` replaces, consistently (the same value always gets the same mask; masks are numbered per kind
in the order the values are found):

* host names → ``<host-N>``: after ``--host``/``host=``/``'host': ...``/``hostname``/``master_addr``
  and similar keys, in URLs (``http://gpu07:8000``), in shell prompts (``[root@gpu07 ~]#``), in
  syslog envelopes, and any dotted name ending in a common TLD or internal suffix
  (``node3.corp.example.com``, ``vllm-0.vllm.svc.cluster.local``);
* IP addresses, v4 and v6 → ``<ip-N>`` (ports are kept: ``<ip-1>:8000``);
* user names in home-directory paths → ``/home/<user-N>/…``, ``/Users/<user-N>/…``,
  ``C:\\Users\\<user-N>\\…`` (the rest of the path is kept);
* API keys → ``<api-key-N>``: ``--api-key X``, ``'api_key': 'X'`` (also lists of keys),
  ``VLLM_API_KEY=X``, ``Authorization: Bearer X``, ``sk-…``; passwords/secrets after such keys;
* Hugging Face tokens → ``<hf-token-N>``: ``hf_…``, ``HF_TOKEN=X``, ``--hf-token X``;
* e-mail addresses → ``<email-N>``; ``user:password@`` in URLs → ``<credentials-N>@``;
* credentials with a fixed shape → ``<api-key-N>``: AWS access key ids (``AKIA…``/``ASIA…``), values of
  ``AWS_SECRET_ACCESS_KEY=``/``aws_session_token``, GitHub tokens (``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``,
  ``github_pat_``), Slack tokens (``xoxb-``, ``xoxp-``, …, ``xapp-``), Google API keys (``AIza…``), bare JWTs
  (``eyJ….eyJ….sig``);
* PEM blocks (``-----BEGIN … -----`` to its END; a header whose base64 body follows in the next lines of a
  log masks those lines up to the END line) → ``<pem-N>``;
* ``~user/…`` paths → ``~<user-N>/…``; MAC addresses → ``<mac-N>``.

`escape_controls` / `SafeText` make log text safe to show on a terminal (control sequences escaped).

Kept on purpose (not secrets, and needed to read a report): loopback and unspecified addresses
(``127.0.0.1``, ``0.0.0.0``, ``::1``, ``::``), ``localhost``, model repo ids
(``meta-llama/Llama-3.1-8B``), well-known public sites (huggingface.co, github.com, docs.vllm.ai…),
``/root`` and other non-home paths.

A value recognised once (say a host name after ``--host``) is masked wherever it appears again,
also where no pattern would recognise it. `Redactor.redact_obj` redacts every string of a nested
structure in two passes — first learning every value, then replacing — so the numbering does not
depend on which string is visited first and dictionary keys such as ``master_addr`` mark their
values as host names.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable

from kvlogdiag import recache

if TYPE_CHECKING:  # ipaddress (~1 ms) is imported by the redactor's first address: stdout's SafeText needs none
    import ipaddress

__all__ = ["KIND_LABELS", "Redactor", "SafeText", "escape_controls"]


# -- terminal safety ----------------------------------------------------------------------------
# C0 controls but tab and newline (ESC starts CSI/OSC/OSC-8/DCS, BEL ends OSC, CR rewrites a line), DEL,
# C1 (0x9b is the 8-bit CSI, 0x9d OSC, 0x90 DCS): none of them may reach a terminal from a log.
_C0 = recache.compile(r"[\x00-\x08\x0b-\x1f]")
_C1 = recache.compile(r"[\x7f-\x9f]")


def escape_controls(text: str) -> str:
    """``text`` with control characters shown as escapes, so log bytes never drive the terminal.

    C0 becomes ``\\x1b``; DEL and C1 become ``\\u009b`` — JSON output may hold those raw (json.dumps
    leaves them with ``ensure_ascii=False``), and ``\\u009b`` inside a JSON string is the same character."""
    if text.isprintable() or not (_C0.search(text) or _C1.search(text)):
        return text
    text = _C0.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_SGR = recache.compile(r"\x1b\[[0-9;:]{0,64}m")  # colour/style only: dropped, as click drops it off a terminal


class SafeText:
    """A text stream (stdout) whose writes go through `escape_controls` (a log's colour codes are dropped
    first, so evidence lines of a coloured vLLM log stay readable); everything else is the stream's."""

    def __init__(self, inner: Any):
        self._inner = inner

    def write(self, s: str) -> int:
        self._inner.write(escape_controls(_SGR.sub("", s) if "\x1b[" in s else s))
        return len(s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

#: mask kind → what it stands for (for the report's "redacted: …" line)
KIND_LABELS = {
    "host": "host name",
    "ip": "IP address",
    "user": "user name",
    "api-key": "API key",
    "hf-token": "Hugging Face token",
    "email": "e-mail address",
    "credentials": "URL credential",
    "pem": "PEM block",
    "mac": "MAC address",
}

_MASK = recache.compile(r"<(?:host|ip|user|api-key|hf-token|email|credentials|pem|mac)-\d+>")

# public sites whose names identify nobody (kept, with their subdomains)
_PUBLIC_DOMAINS = (
    "huggingface.co", "hf.co", "github.com", "githubusercontent.com", "github.io", "pytorch.org",
    "python.org", "pypi.org", "vllm.ai", "nvidia.com", "modelscope.cn", "hiascend.com",
    "readthedocs.io", "readthedocs.org", "openai.com", "google.com", "googleapis.com", "ray.io",
    "anaconda.com", "docker.com", "docker.io", "quay.io", "ghcr.io", "nvcr.io",
)
_KEEP_HOSTS = {"localhost", "localhost.localdomain", "ip6-localhost", "none", "null", "true", "false",
               "auto", "default", "any", "all", "*"}
_PLACEHOLDERS = {"", "none", "null", "nil", "empty", "***", "xxx", "<redacted>", "redacted", "false", "true"}

# TLDs and internal suffixes that mark a dotted word as a host name; short or code-like ones
# ("int", "app", "dev", "in", "co") are left out because Python names use them ("torch.int").
_TLDS = (r"com|net|org|io|ai|cn|local|localdomain|internal|intranet|lan|corp|svc|edu|gov|"
         r"uk|de|fr|jp|kr|ru|nl|ch|sg|hk|tw|eu")

# -- secrets ------------------------------------------------------------------------------------
_HF_TOKEN = recache.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{20,}(?![A-Za-z0-9])")
_SK_KEY = recache.compile(r"(?<![A-Za-z0-9-])sk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{16,}(?![A-Za-z0-9_-])")
_FLAG_SECRET = recache.compile(r"(?i)(--(?P<flag>api-key|hf-token|token|password)(?:\s+|=))(?P<q>['\"]?)(?P<v>[^\s'\"]+)")
_BEARER = recache.compile(r"(?i)(\bbearer\s+)(?P<v>[A-Za-z0-9._~+/=:-]{8,})")
_AUTH = recache.compile(r"(?i)(\b(?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?(?:(?:bearer|token|basic)\s+)?)"
                        r"(?P<v>[A-Za-z0-9._~+/=:-]{8,})")
# key [:=] value, the key possibly quoted and prefixed (VLLM_API_KEY=, 'api_key': , "hf_token": )
_KEYED_SECRET = recache.compile(
    r"(?i)(?<![\w.-])(?P<key>(?:[\w.-]*?[_.-])?(?P<word>hugging_?face_(?:hub_)?token|hf_(?:api_)?token|api[_-]?key|secret[_-]?key|"
    r"secret[_-]?access[_-]?key|session[_-]?token|access[_-]?token|auth[_-]?token|password|passwd|client[_-]secret|secret))['\"]?\s*[:=]\s*"
    r"(?P<v>\[[^\]\n]*\]|'[^'\n]*'|\"[^\"\n]*\"|[^\s,;}\])'\"]+)"
)
# cloud and SaaS credentials with a fixed shape (all bounded: no unbounded repeat next to another)
_AWS_KEY_ID = recache.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA|ASCA)[A-Z0-9]{16}(?![A-Z0-9])")
_GITHUB = recache.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})(?![A-Za-z0-9_])")
_SLACK = recache.compile(r"(?<![A-Za-z0-9-])(?:xox[abposr]-|xapp-)[A-Za-z0-9-]{10,255}(?![A-Za-z0-9-])")
_GOOGLE = recache.compile(r"(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}(?![A-Za-z0-9_-])")
_JWT = recache.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,4096}\.eyJ[A-Za-z0-9_-]{2,8192}\.[A-Za-z0-9_-]{0,4096}(?![A-Za-z0-9_-])")
# a PEM block in one text, or its header alone (the base64 lines after it: `Redactor._pem_body`)
_PEM = recache.compile(r"-----BEGIN (?P<kind>[A-Z0-9 ]{1,40})-----(?:[\s\S]{0,20000}?-----END (?P=kind)-----)?")
_PEM_END = recache.compile(r"-----END [A-Z0-9 ]{1,40}-----")
_BASE64_RUN = recache.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{16,}={0,2}(?![A-Za-z0-9+/=])")
_QUOTED = recache.compile(r"'([^'\n]*)'|\"([^\"\n]*)\"")

# -- people and places --------------------------------------------------------------------------
_EMAIL = recache.compile(r"(?<![\w.+%-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
_URL_CREDS = recache.compile(r"(?i)(?<=://)(?P<v>[^/\s:@'\"<>]+:[^/\s@'\"<>]+)@")
_URL_HOST = recache.compile(r"(?i)(?<![a-z0-9+.-])(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<cred>[^/\s@'\"]*@)?(?P<v>\[[0-9a-f:.%]+\]|[^\s/:'\"?#\[\]()<>,;|`\\]+)")
_PROMPT_HOST = recache.compile(r"\[(?P<user>[\w.-]+)@(?P<v>[\w.-]+)(?P<rest>\s[^\]\n]*)?\][#$]|"
                               r"(?<![\w.-])(?P<user2>[\w.-]+)@(?P<v2>[\w.-]+):(?=[~/])")
_SYSLOG_HOST = recache.compile(r"^(?P<head>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d )(?P<v>[\w.-]+)(?= [\w./@-]+?(?:\[\d+\])?: )")
_HOST_FLAG = recache.compile(
    r"(?i)(--(?:host|hostname|master-addr|master-address|data-parallel-address|node-ip-address|"
    r"head-node|kv-ip)(?:\s+|=))(?P<q>['\"]?)(?P<v>[^\s'\",;}\]]+)")
_HOST_KEY = recache.compile(
    r"(?i)(?<![\w-])(?P<key>(?:\w*_)?(?:host|hostname|host_name|master_addr|master_address|"
    r"data_parallel_address|data_parallel_master_ip|node_ip|node_name|nodename|head_node|kv_ip|"
    r"ip_address|server_ip|pod_ip|pod_name)['\"]?\s*[:=]\s*)(?P<q>['\"]?)(?P<v>[A-Za-z0-9][\w.:%-]*)")
_FQDN = recache.compile(
    r"(?<![\w.@/-])(?P<v>(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+(?:" + _TLDS + r"))(?![\w-]|\.\w)")
_IPV4 = recache.compile(r"(?<![\w.])(?P<v>\d{1,3}(?:\.\d{1,3}){3})(?![\w]|\.\w)")
_VERSION_BEFORE = recache.compile(r"(?i)(?:version\W{0,3}|==|>=|<=|~=)$")
_IPV6 = recache.compile(
    r"(?<![\w:.])(?P<v>(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|\d{1,3}(?:\.\d{1,3}){3})?(?:%[\w.]+)?)(?![\w:])")
_HOME = recache.compile(r"(?P<pre>(?<![\w.])/(?:home|Users|export/home)/)(?P<v>[^/\s'\"`:;,()\[\]{}<>|\\]+)")
_TILDE_HOME = recache.compile(r"(?<![\w~/.-])~(?P<v>[A-Za-z_][A-Za-z0-9_.-]{0,31})(?=/)")
_MAC = recache.compile(r"(?<![0-9A-Fa-f:-])(?P<v>[0-9A-Fa-f]{2}(?P<sep>[:-])(?:[0-9A-Fa-f]{2}(?P=sep)){4}[0-9A-Fa-f]{2})(?![0-9A-Fa-f:-])")
_WIN_HOME = recache.compile(r"(?i)(?P<pre>\b[A-Z]:(?:\\{1,2}|/)Users(?:\\{1,2}|/))(?P<v>[^\\/\s'\"`:;,()\[\]{}<>|]+)")

# dictionary keys whose (string) values are host names / secrets
_HOST_DICT_KEY = recache.compile(
    r"(?i)^(?:\w*_)?(?:host|hostname|host_name|master_addr|master_address|data_parallel_address|"
    r"data_parallel_master_ip|node_ip|node_name|nodename|head_node|kv_ip|ip|ip_address|server_ip|pod_ip|pod_name)$")
_SECRET_DICT_KEY = recache.compile(
    r"(?i)^(?:\w*_)?(?:api_?key|secret_?key|access_?token|auth_?token|password|passwd|client_secret|secret|"
    r"hf_token|hf_api_token|hugging_?face_(?:hub_)?token)$")


def _is_hf_word(word: str) -> bool:
    w = word.lower().replace("-", "_")
    return w.startswith("hf_") or "hugging" in w


class Redactor:
    """Consistent masks for hosts, IPs, home-directory user names, API keys, HF tokens, e-mails."""

    def __init__(self) -> None:
        self._masks: dict[tuple[str, str], str] = {}
        self._counts: dict[str, int] = {}
        self._literal: re.Pattern | None = None
        self._literal_size = -1
        self._in_pem = False  # a PEM header was seen without its END: the base64 lines after it are masked
        self._pem_mask = ""

    # -- masks ----------------------------------------------------------------------------------

    def mask(self, kind: str, value: str) -> str:
        """The mask of ``value`` (the same value → the same mask)."""
        key = (kind, value)
        m = self._masks.get(key)
        if m is None:
            n = self._counts.get(kind, 0) + 1
            self._counts[kind] = n
            m = f"<{kind}-{n}>"
            self._masks[key] = m
        return m

    @property
    def counts(self) -> dict[str, int]:
        """How many distinct values of each kind were masked."""
        return dict(self._counts)

    def summary(self) -> str:
        """``2 IP addresses, 1 host name`` (empty when nothing was masked)."""
        parts = []
        for kind, label in KIND_LABELS.items():
            n = self._counts.get(kind, 0)
            if n:
                parts.append(f"{n} {label}{'es' if n > 1 and label.endswith('ss') else 's' if n > 1 else ''}")
        return ", ".join(parts)

    # -- classification helpers ----------------------------------------------------------------

    @staticmethod
    def _ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        import ipaddress

        try:
            return ipaddress.ip_address(value.strip("[]").split("%", 1)[0])
        except ValueError:
            return None

    @staticmethod
    def _keep_ip(ip) -> bool:
        return ip.is_loopback or ip.is_unspecified

    def _host_or_ip(self, value: str) -> str:
        """Mask a value known to name a machine (an IP or a host name)."""
        if not value or _MASK.fullmatch(value) or value.startswith("<"):
            return value
        ip = self._ip(value)
        if ip is not None:
            return value if self._keep_ip(ip) else self.mask("ip", value.strip("[]"))
        v = value.rstrip(".")
        low = v.lower()
        if low in _KEEP_HOSTS or not re.search(r"[A-Za-z]", v) or self._public(low):
            return value
        return self.mask("host", v)

    @staticmethod
    def _public(host: str) -> bool:
        return any(host == d or host.endswith("." + d) for d in _PUBLIC_DOMAINS)

    def _secret(self, kind: str, value: str) -> str:
        if value.strip().lower() in _PLACEHOLDERS or _MASK.fullmatch(value) or value.startswith("<"):
            return value
        return self.mask(kind, value)

    # -- the passes ----------------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` with every recognised secret or identifying value masked."""
        if not text:
            return text
        s = self._pem_body(text) if self._in_pem else text
        s = _PEM.sub(self._pem, s)
        s = _JWT.sub(lambda m: self._secret("api-key", m.group(0)), s)
        s = _AWS_KEY_ID.sub(lambda m: self._secret("api-key", m.group(0)), s)
        s = _GITHUB.sub(lambda m: self._secret("api-key", m.group(0)), s)
        s = _SLACK.sub(lambda m: self._secret("api-key", m.group(0)), s)
        s = _GOOGLE.sub(lambda m: self._secret("api-key", m.group(0)), s)
        s = _HF_TOKEN.sub(lambda m: self._secret("hf-token", m.group(0)), s)
        s = _SK_KEY.sub(lambda m: self._secret("api-key", m.group(0)), s)
        s = _FLAG_SECRET.sub(self._flag_secret, s)
        s = _KEYED_SECRET.sub(self._keyed_secret, s)
        s = _AUTH.sub(lambda m: m.group(1) + self._secret("api-key", m.group("v")), s)
        s = _BEARER.sub(lambda m: m.group(1) + self._secret("api-key", m.group("v")), s)
        s = _URL_CREDS.sub(lambda m: self._secret("credentials", m.group("v")) + "@", s)
        s = _EMAIL.sub(lambda m: self.mask("email", m.group(0)), s)
        s = _PROMPT_HOST.sub(self._prompt_host, s)
        s = _SYSLOG_HOST.sub(lambda m: m.group("head") + self._host_or_ip(m.group("v")), s)
        s = _URL_HOST.sub(lambda m: m.group("scheme") + (m.group("cred") or "") + self._url_host(m.group("v")), s)
        s = _HOST_FLAG.sub(lambda m: m.group(1) + m.group("q") + self._host_or_ip(m.group("v")), s)
        s = _HOST_KEY.sub(self._host_key, s)
        s = _FQDN.sub(lambda m: self._host_or_ip(m.group("v")), s)
        s = _IPV4.sub(self._ipv4, s)
        s = _MAC.sub(lambda m: self.mask("mac", m.group("v").lower().replace("-", ":")), s)
        s = _IPV6.sub(self._ipv6, s)
        s = _HOME.sub(lambda m: m.group("pre") + self._user(m.group("v")), s)
        s = _TILDE_HOME.sub(lambda m: "~" + self._user(m.group("v")), s)
        s = _WIN_HOME.sub(lambda m: m.group("pre") + self._user(m.group("v")), s)
        return self._replace_known(s)

    def _pem(self, m: re.Match) -> str:
        """A whole PEM block, or a header whose body follows in the next texts (lines of a log)."""
        block = m.group(0)
        if "-----END " in block:
            return self.mask("pem", block)
        self._in_pem = True
        self._pem_mask = self.mask("pem", f"{block}#{self._counts.get('pem', 0)}")  # each such block its own
        return self._pem_mask

    def _pem_body(self, text: str) -> str:
        """A line inside a PEM block split over lines: its base64 runs and the END line become the block's mask."""
        end = _PEM_END.search(text)
        body, rest = (text[: end.start()], text[end.end():]) if end else (text, "")
        body = _BASE64_RUN.sub(self._pem_mask, body)
        if end:
            self._in_pem = False
            return body + self._pem_mask + rest
        return body

    def _flag_secret(self, m: re.Match) -> str:
        kind = "hf-token" if m.group("flag").lower() in ("hf-token", "token") else "api-key"
        return m.group(1) + m.group("q") + self._secret(kind, m.group("v"))

    def _keyed_secret(self, m: re.Match) -> str:
        kind = "hf-token" if _is_hf_word(m.group("word")) else "api-key"
        value = m.group("v")
        head = m.group(0)[: m.start("v") - m.start(0)]
        if value.startswith("["):
            return head + _QUOTED.sub(lambda q: self._requote(q, kind), value)
        if value[:1] in "'\"":
            return head + value[0] + self._secret(kind, value[1:-1]) + value[-1]
        return head + self._secret(kind, value)

    def _requote(self, q: re.Match, kind: str) -> str:
        if q.group(1) is not None:
            return "'" + self._secret(kind, q.group(1)) + "'"
        return '"' + self._secret(kind, q.group(2)) + '"'

    def _prompt_host(self, m: re.Match) -> str:
        if m.group("v") is not None:
            return f"[{m.group('user')}@{self._host_or_ip(m.group('v'))}{m.group('rest') or ''}]" + m.group(0)[-1]
        return f"{m.group('user2')}@{self._host_or_ip(m.group('v2'))}:"

    def _url_host(self, value: str) -> str:
        if value.startswith("["):
            inner = self._host_or_ip(value[1:-1])
            return f"[{inner}]"
        return self._host_or_ip(value)

    def _host_key(self, m: re.Match) -> str:
        value = m.group("v")
        port = ""
        ip = self._ip(value)
        if ip is None and value.count(":") == 1:  # host:port
            value, port = value.split(":", 1)
            port = ":" + port
        return m.group("key") + m.group("q") + self._host_or_ip(value) + port

    def _ipv4(self, m: re.Match) -> str:
        v = m.group("v")
        parts = v.split(".")
        if any(int(p) > 255 for p in parts) or parts[0] == "0":  # 0.x.y.z: "this network", and vLLM versions (0.10.1.1)
            return v
        if _VERSION_BEFORE.search(m.string, max(0, m.start() - 16), m.start()):
            return v
        return self._host_or_ip(v)

    def _ipv6(self, m: re.Match) -> str:
        v = m.group("v")
        ip = self._ip(v)
        if ip is None or ip.version != 6 or self._keep_ip(ip):  # not an IPv6Address
            return v
        groups = [g for g in v.split("%", 1)[0].split(":") if g]
        if "::" not in v and len(groups) < 8 and not (groups and "." in groups[-1]):
            return v
        if len(groups) < 2:  # "::2" (a slice), "fe80::" — too short to be sure it is an address
            return v
        return self.mask("ip", v)

    def _user(self, value: str) -> str:
        if value.startswith("<") or value in (".", "..", "*"):
            return value
        return self.mask("user", value)

    def _replace_known(self, s: str) -> str:
        """Mask values learned elsewhere (a host seen after --host, a key seen after --api-key)."""
        known = [(v, m) for (k, v), m in self._masks.items()
                 if k in ("host", "ip", "api-key", "hf-token", "email", "credentials", "mac") and len(v) >= 3]
        if not known:
            return s
        if self._literal is None or self._literal_size != len(self._masks):
            alts = sorted({v for v, _ in known}, key=len, reverse=True)
            self._literal = re.compile(
                r"(?<![A-Za-z0-9_.-])(?:" + "|".join(re.escape(v) for v in alts) + r")(?![A-Za-z0-9_-])(?!\.\w)")
            self._literal_size = len(self._masks)
            self._lookup = {v: m for v, m in known}
        return self._literal.sub(lambda m: self._lookup.get(m.group(0), m.group(0)), s)

    # -- structures ----------------------------------------------------------------------------

    def redact_obj(self, obj: Any) -> Any:
        """A copy of a nested dict/list structure with every string redacted (keys too).

        Two passes: the first learns every value (so numbering and literal replacement do not
        depend on visiting order), the second replaces."""
        self._walk(obj, lambda kind, s: (self._learn_keyed(kind, s), self.redact(s))[1])
        return self._walk(obj, lambda kind, s: self.redact(self._learn_keyed(kind, s)))

    def _learn_keyed(self, kind: str | None, s: str) -> str:
        if kind == "host":
            return self._host_or_ip(s) if re.fullmatch(r"[\w.:%\[\]-]+", s) else s
        if kind == "secret":
            return self._secret("api-key", s)
        if kind == "hf":
            return self._secret("hf-token", s)
        return s

    def _walk(self, obj: Any, fn: Callable[[str | None, str], str], kind: str | None = None) -> Any:
        if isinstance(obj, str):
            return fn(kind, obj)
        if isinstance(obj, dict):
            out = {}
            for k, v in obj.items():
                sub = None
                if isinstance(k, str):
                    if _HOST_DICT_KEY.match(k):
                        sub = "host"
                    elif _SECRET_DICT_KEY.match(k):
                        sub = "hf" if _is_hf_word(k) else "secret"
                nk = fn(None, k) if isinstance(k, str) else k
                out[nk] = self._walk(v, fn, sub)
            return out
        if isinstance(obj, list):
            return [self._walk(v, fn, kind) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self._walk(v, fn, kind) for v in obj)
        return obj

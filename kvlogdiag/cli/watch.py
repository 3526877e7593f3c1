"""``kvlogdiag watch``: the command line of the live mode (the engine is `kvlogdiag.modes.watch`)."""

from __future__ import annotations

from typing import Any

import click

from kvlogdiag.cli.common import build_analyzer, err, rule_options
from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.cli.output import check_target
from kvlogdiag.modes.metrics_poll import parse_interval
from kvlogdiag.modes.watch import is_glob, watch_main


@click.command()
@click.option("-f", "--follow", "follow", type=click.Path(dir_okay=False), multiple=True, metavar="FILE",
              help="Follow FILE like tail -F (truncation and rotation included) instead of reading stdin. Repeat it, or "
                   "give a quoted glob ('logs/*.log'), to follow several files: each its own analysis, findings "
                   "prefixed with the file, new files matching the glob picked up.")
@click.option("--from-end", is_flag=True, help="With --follow: start at the end of the file (default: its beginning).")
@click.option("--no-echo", is_flag=True, help="Do not copy the input to stdout; print findings only.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="stderr events as text, or one JSON object per line.")
@click.option("--repeat-after", type=click.FloatRange(min=0), default=300.0, show_default=True, metavar="SECONDS",
              help="Repeat a rule whose finding changed (KVD012's preemption count, KVD013's peak, ...) at most once "
                   "per this interval, with its latest message.")
@click.option("--metrics", "metrics_url", metavar="URL",
              help="Also poll vLLM's Prometheus endpoint (http://HOST:PORT/metrics) beside the log: running/waiting "
                   "requests, KV usage, preemptions feed the same rules when the log has no stats lines; a failing or "
                   "slow endpoint is a note, never a stall of the pass-through.")
@click.option("--interval", "metrics_interval", default="10s", show_default=True, metavar="DURATION",
              help="With --metrics: time between two polls (10s, 500ms, 1m).")
@click.option("--metrics-timeout", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
              metavar="SECONDS", help="With --metrics: give up one poll after this long (the next poll starts --interval after it ended).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the events (figures, findings, notes) to FILE as they happen instead of stderr; "
                   "the log still passes through on stdout.")
@rule_options
def watch(follow: tuple[str, ...], from_end: bool, no_echo: bool, fmt: str, repeat_after: float,
          metrics_url: str | None, metrics_interval: str, metrics_timeout: float, output: str | None = None,
          **kw: Any) -> int:
    """Live: copy a running server's log to stdout and print figures and findings on stderr as they are decided.

    \b
    vllm serve ... 2>&1 | kvlogdiag watch
    kvlogdiag watch -f /var/log/vllm/server.log --no-echo --format json
    kvlogdiag watch -f 'logs/*.log'                      (several files: each its own analysis)
    vllm serve ... 2>&1 | kvlogdiag watch --metrics http://127.0.0.1:8000/metrics

    Exit: 0/1 by --fail-on at end of input, 2 on bad options or when stdout cannot be written, 3 when the
    analysis stopped at an internal error (the log was still passed through unchanged), 130 after SIGINT,
    143 after SIGTERM, 141 when the reader of stdout goes away.
    """
    several = len(follow) > 1 or any(is_glob(f) for f in follow)
    if several and metrics_url:
        err("--metrics goes with the log of one server: give one --follow FILE (or stdin), not several files")
        return int(ExitCode.ERROR)
    if from_end and not follow:
        err("--from-end needs --follow FILE")
        return int(ExitCode.ERROR)
    try:
        interval_s = parse_interval(metrics_interval)
    except ValueError as exc:
        err(f"--interval {exc}")
        return int(ExitCode.ERROR)
    if metrics_url is not None and not metrics_url.lower().startswith(("http://", "https://")):
        err(f"--metrics {metrics_url!r}: give the endpoint's URL, e.g. http://127.0.0.1:8000/metrics")
        return int(ExitCode.ERROR)
    problem = check_target(output)
    if problem:
        err(problem)
        return int(ExitCode.ERROR)
    analyzer = build_analyzer(kw, follow)
    events = None
    if output:
        # a live stream, written as it happens (line-buffered), not replaced at the end like other outputs
        try:
            events = open(output, "w", encoding="utf-8", buffering=1)
        except OSError as exc:
            err(f"{output}: cannot write ({exc.strerror or exc})")
            return int(ExitCode.ERROR)
    try:
        return watch_main(analyzer, follows=list(follow) or None, from_end=from_end, echo=not no_echo, fmt=fmt,
                          repeat_after=repeat_after, hard_exit=True, metrics_url=metrics_url, metrics_interval=interval_s,
                          metrics_timeout=metrics_timeout, err_stream=events)
    finally:
        if events is not None:
            events.close()

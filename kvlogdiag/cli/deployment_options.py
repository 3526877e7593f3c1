"""The options ``deployment``, ``analyze --deployment`` and ``report`` on a deployment share.

A module of its own so that ``analyze`` on one log does not import the deployment command and its mode.
"""

from __future__ import annotations

from typing import Callable

import click

# = kvlogdiag.deployment_result.GROUP_BY (tests/test_startup_cache.py checks): importing that module here
# would load its dataclasses into every `analyze` of one log
GROUP_BY = ("auto", "dir", "model", "all")


def deployment_options(func: Callable) -> Callable:
    """The options ``deployment`` and ``analyze --deployment`` share (besides the rule options)."""
    for opt in reversed((
        click.option("--avg-output-len", type=click.IntRange(min=1), default=None,
                     help="Average output length in tokens (with --avg-prompt-len: the D/P capacity figures; "
                          "without both, inferred from the stats lines where they allow it)."),
        click.option("--group-by", type=click.Choice(GROUP_BY), default=None,
                     help="How logs are split into deployments: auto (connector peers and model within each PATH; "
                          "the default), dir (one per PATH), model, all."),
        click.option("--host-ram-gib", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="RAM of each host, GiB: compared with the pinned offload buffers of the ranks on it."),
    )):
        func = opt(func)
    return func

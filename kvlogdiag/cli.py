"""Command-line interface."""

from __future__ import annotations

import json
import sys

import click

from kvlogdiag import __version__
from kvlogdiag.analysis import analyze_source
from kvlogdiag.reader import InputError


@click.group()
@click.version_option(__version__, prog_name="kvlogdiag")
def cli() -> None:
    """Read vLLM / vLLM-Ascend logs: exact KV-cache figures and wrong settings."""


@cli.command()
@click.argument("inputs", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text")
def analyze(inputs, fmt):
    """Analyse logs."""
    out = []
    rc = 0
    for src in inputs or ("-",):
        try:
            out.append(analyze_source(src))
        except InputError as exc:
            click.echo(f"kvlogdiag: error: {exc}", err=True)
            rc = 2
    click.echo(json.dumps({"tool": "kvlogdiag", "version": __version__, "analyses": out}, indent=2, default=str))
    sys.exit(rc)


def main() -> None:
    cli()

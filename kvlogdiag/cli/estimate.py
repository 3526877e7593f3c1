"""``kvlogdiag estimate``: the command line of the what-if mode (the arithmetic is `kvlogdiag.modes.estimate`).

The parameter types here (byte sizes, KV dtypes, versions, ranges) are pure command-line parsing;
a usage error is one ``kvlogdiag: error: estimate: ...`` line and exit 2.
"""

from __future__ import annotations

import json
import re
from typing import Any

import click

from kvlogdiag.cli.common import OneLineUsageError, err
from kvlogdiag.cli.exit import ExitCode
from kvlogdiag.derive.architecture import kv_dtype_bytes, parse_vllm_version
from kvlogdiag.input.reader import InputError
from kvlogdiag.modes.estimate import ROLES, EstimateError, estimate_document, render_table
from kvlogdiag.render.redact import escape_controls

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.I)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "ki": 1024,
               "m": 1024**2, "mb": 1000**2, "mib": 1024**2, "mi": 1024**2,
               "g": 1024**3, "gb": 1000**3, "gib": 1024**3, "gi": 1024**3,
               "t": 1024**4, "tb": 1000**4, "tib": 1024**4, "ti": 1024**4}


class ByteSize(click.ParamType):
    """Bytes: ``68719476736``, ``64GiB``, ``64G`` (binary) or ``64GB`` (decimal)."""

    name = "BYTES"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            number = float(value)
        else:
            m = _SIZE.match(str(value))
            if not m:
                self.fail(f"{value!r} is not a byte size (e.g. 68719476736, 64GiB, 64GB)", param, ctx)
            number = float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()]
        if number <= 0:
            self.fail(f"{value!r} must be > 0", param, ctx)
        return int(number)


def _kv_dtype(ctx, param, value):
    if value is None:
        return None
    try:
        kv_dtype_bytes(value)
    except ValueError:
        raise click.BadParameter(f"unsupported KV cache dtype {value!r} (auto, fp8, fp8_e4m3, fp8_e5m2, "
                                 "fp8_ds_mla, bfloat16, float16, …)") from None
    return value


def _version(ctx, param, value):
    if value is not None and parse_vllm_version(value) is None:
        raise click.BadParameter(f"{value!r} is not a vLLM version (e.g. 0.10.2)")
    return value


class OneLineErrors(click.Command):
    """Usage errors (bad numbers, unknown flags) as one line on stderr and exit 2."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise OneLineUsageError(f"estimate: {exc.format_message()}") from None


POSITIVE = click.FloatRange(min=0, min_open=True)
FRACTION = click.FloatRange(min=0, max=1, min_open=True)
COUNT = click.IntRange(min=1)


def _check_run(ctx, param, value):
    if value in ("last", "first") or (value.isdigit() and int(value) >= 1):
        return value
    if value == "all":
        raise click.BadParameter("an estimate sizes one server start: use last, first or a run number (1, 2, ...)")
    raise click.BadParameter(f"{value!r}: use last, first or a run number (1, 2, ...)")


@click.command("estimate", cls=OneLineErrors)
@click.option("--log", "log_path", metavar="FILE", default=None, help="A vLLM / vLLM-Ascend log (or - for stdin): measured figures, config, memory.")
@click.option("--run", "run", default="last", show_default=True, metavar="last|first|N", callback=_check_run,
              help="Which server start of the --log: last (the current one), first, or a run number (1 = first).")
@click.option("--available-gib", type=POSITIVE, default=None, help="KV memory per rank, GiB (the log's 'Available KV cache memory').")
@click.option("--bytes-per-token", type=POSITIVE, default=None, help="Measured bytes per token per rank (Z·2^30/N).")
@click.option("--model", default=None, help="Model name looked up in the built-in catalogue [default: the model in the log].")
@click.option("--model-config", type=click.Path(), default=None, help="Local config.json (or a model directory holding one); never downloads.")
@click.option("--tp", type=COUNT, default=None, help="Tensor parallel size [log, else 1].")
@click.option("--pp", type=COUNT, default=None, help="Pipeline parallel size [log, else 1].")
@click.option("--dp", type=COUNT, default=None, help="Data parallel size [log, else 1].")
@click.option("--devices", type=COUNT, default=None, help="Devices (ranks) on the node [TP × PP × DP].")
@click.option("--max-model-len", type=COUNT, default=None, help="Max model length in tokens [log].")
@click.option("--gpu-memory-gib", type=POSITIVE, default=None, help="Total memory of one device, GiB [log].")
@click.option("--gpu-memory-utilization", type=FRACTION, default=None, help="--gpu-memory-utilization (0, 1] [log]; with a log, a what-if.")
@click.option("--non-kv-gib", type=click.FloatRange(min=0), default=None, help="Non-KV memory per device (weights + activation + non-torch + graph), GiB [log].")
@click.option("--kv-fraction", type=FRACTION, default=None, help="Share of the utilization budget left for KV (node budget: devices × GiB × utilization × fraction).")
@click.option("--kv-cache-dtype", callback=_kv_dtype, default=None, help="KV cache dtype (auto, fp8, fp8_e4m3, fp8_ds_mla, bfloat16, …) [log, else auto].")
@click.option("--block-size", type=COUNT, default=None, help="KV block size in tokens [log, else platform default].")
@click.option("--max-num-batched-tokens", type=COUNT, default=None, help="Tokens per scheduler step (sliding-window reservations) [log].")
@click.option("--prompt-len", type=COUNT, default=None, help="Prompt length of the workload, tokens.")
@click.option("--output-len", type=COUNT, default=None, help="Output length of the workload, tokens.")
@click.option("--p99-len", type=COUNT, default=None, help="P99 request length (prompt + output) [prompt + output].")
@click.option("--requests", "--concurrency", "requests", type=COUNT, default=None, help="Target concurrent requests N per DP group.")
@click.option("--role", type=click.Choice(ROLES), default=None, help="Node role for live tokens [log's kv_role, else mixed].")
@click.option("--hma/--no-hma", default=None, help="Hybrid KV cache manager on/off [log, else vLLM's default].")
@click.option("--vllm-version", callback=_version, default=None, help="vLLM version, e.g. 0.10.2 [log]: sets what the log figure means.")
@click.option("--platform", type=click.Choice(["cuda", "npu", "rocm"]), default=None, help="cuda, or npu for vLLM-Ascend [log, else cuda].")
@click.option("--cpu-bytes-to-use", type=ByteSize(), default=None, help="RecomputeCPUOffloadConnector cpu_bytes_to_use (GLOBAL, ÷ world size): 68719476736, 64GiB.")
@click.option("--cpu-bytes-to-use-per-rank", type=ByteSize(), default=None, help="cpu_bytes_to_use_per_rank (per rank).")
@click.option("--basis", type=click.Choice(["auto", "measured", "expected"]), default="auto", show_default=True,
              help="Bytes per token the capacity figures use.")
@click.option("--format", "fmt", type=click.Choice(["table", "text", "json"]), default="table", show_default=True)
def estimate(log_path: str | None, run: str, fmt: str, **params: Any) -> ExitCode:
    """What the KV cache costs and what fits: from a log, from numbers, or both.

    \b
    kvlogdiag estimate --log server.log --p99-len 12000 --requests 32
    kvlogdiag estimate --model meta-llama/Llama-3.1-70B-Instruct --tp 4 --available-gib 37.01
    kvlogdiag estimate --devices 8 --gpu-memory-gib 64 --gpu-memory-utilization 0.85 \\
        --kv-fraction 0.6 --dp 2 --tp 4 --prompt-len 10000 --output-len 2000 --concurrency 48 --role decode

    Per rank = per DP group (TP ranks hold slices of the same tokens). Flags override the log;
    every input says where it came from. Missing inputs leave a figure empty with the reason.
    """
    try:
        est = estimate_document(params, log_path, run)
    except InputError as exc:
        err(str(exc))
        return ExitCode.ERROR
    except EstimateError as exc:
        err(f"estimate: {exc}")
        return ExitCode.ERROR
    click.echo(json.dumps(est, indent=2, ensure_ascii=False, default=str) if fmt == "json" else render_table(est),
               nl=fmt == "json")
    if est.get("truncated"):
        click.echo(f"kvlogdiag: {escape_controls(log_path or '')}: truncated: {est['truncated']['message']}", err=True)
        return ExitCode.TRUNCATED
    return ExitCode.OK

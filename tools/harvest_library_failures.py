#!/usr/bin/env python3
"""Harvest the error messages of the libraries a vLLM start-up runs through (transformers, huggingface_hub, torch).

A failed vLLM start often ends in a library's exception, not vLLM's own: the Hub refusing a gated repo,
transformers not knowing a model type or a tokenizer class, torch unable to initialise CUDA in a forked
process. These messages are the long tail the failure catalogue cannot list by hand. This tool collects
them the way ``tools/harvest_failures.py`` collects vLLM's (same ``raise`` reader, same templates), from
released wheels of the libraries (``pip download transformers==X --no-deps --only-binary :all:``) or an
installed ``site-packages`` directory, restricted to the modules that run while a model, its config, its
tokenizer or the devices are set up. Output (``kvlogdiag/catalogue/failures_harvest_libs.json``) has the
shape of ``failures_harvest.json``; ``p`` is the library::

    python tools/harvest_library_failures.py /tmp/lib-wheels /path/to/site-packages \\
        -o kvlogdiag/catalogue/failures_harvest_libs.json
"""

from __future__ import annotations

import argparse
import re
import sys
import zipfile
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harvest_failures import add_message, harvest_source, version_key, write_harvest  # noqa: E402

# the modules of each library that run while vLLM loads a model's config, weights and tokenizer or sets up
# devices and process groups (the model zoo under transformers/models/<arch>/ is left out: thousands of
# shape checks that never end a start-up)
LIBRARY_FILES = {
    "transformers": re.compile(
        r"^transformers/(?:configuration_utils|modeling_utils|tokenization_utils(?:_base|_fast)?|tokenization_\w+"
        r"|dynamic_module_utils|processing_utils|feature_extraction_utils|image_processing_\w+|safetensors_conversion"
        r"|generation/configuration_utils|utils/(?:hub|import_utils|peft_utils|quantization_config)"
        r"|models/auto/\w+|quantizers/\w+|integrations/(?:bitsandbytes|awq|ggml|hub_kernels|sdpa_attention|flash_attention))\.py$"),
    "huggingface_hub": re.compile(
        r"^huggingface_hub/(?:file_download|_snapshot_download|hf_api|errors|constants|utils/(?:_http|_validators|_errors"
        r"|_auth|_headers|_cache_manager|_fixes|_paths))\.py$"),
    "torch": re.compile(
        r"^torch/(?:cuda/(?:__init__|memory|graphs|random)|distributed/(?:distributed_c10d|rendezvous|utils|constants)"
        r"|serialization|_utils|xpu/__init__|mtia/__init__)\.py$"),
}

_WHEEL = re.compile(r"^(?P<pkg>transformers|huggingface_hub|torch)-(?P<ver>\d+(?:\.\d+)*)")
_DISTINFO = re.compile(r"^(?P<pkg>transformers|huggingface_hub|torch)-(?P<ver>\d+(?:\.\d+)*)[^/]*\.dist-info$")


def _releases(paths: list[Path]) -> Iterator[tuple[str, str, Iterator[tuple[str, bytes]]]]:
    """(library, version, its (member path, source) pairs) for every wheel or installed library found."""
    for p in paths:
        if p.is_file() and p.suffix == ".whl" and (m := _WHEEL.match(p.name)):
            yield m["pkg"], m["ver"], _wheel_files(p)
        elif p.is_dir():
            for q in sorted(p.iterdir()):
                if q.suffix == ".whl" and (m := _WHEEL.match(q.name)):
                    yield m["pkg"], m["ver"], _wheel_files(q)
                elif q.is_dir() and (m := _DISTINFO.match(q.name)) and (p / m["pkg"]).is_dir():
                    yield m["pkg"], m["ver"], _dir_files(p, m["pkg"])


def _wheel_files(path: Path) -> Iterator[tuple[str, bytes]]:
    with zipfile.ZipFile(path) as z:
        for n in z.namelist():
            if n.endswith(".py"):
                yield n, z.read(n)


def _dir_files(root: Path, pkg: str) -> Iterator[tuple[str, bytes]]:
    for f in (root / pkg).rglob("*.py"):
        yield f.relative_to(root).as_posix(), f.read_bytes()


def harvest(paths: list[Path]) -> dict:
    versions: dict[str, list[str]] = {k: [] for k in LIBRARY_FILES}
    msgs: dict[tuple[str, str, str], dict] = {}
    for lib, ver, files in _releases(paths):
        if ver in versions[lib]:
            continue
        versions[lib].append(ver)
        want = LIBRARY_FILES[lib]
        for name, src in files:
            if not want.match(name):
                continue
            for exc, t in harvest_source(src):
                add_message(msgs, lib, ver, name, exc, t)
        print(f"{lib} {ver}: {len(msgs)} messages so far", file=sys.stderr)
    for k in versions:
        versions[k].sort(key=version_key)
    return {"versions": versions, "messages": sorted(msgs.values(), key=lambda e: (e["p"], e["f"], e["t"]))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="wheels, folders of wheels, or site-packages directories")
    ap.add_argument("-o", "--output", type=Path, default=Path("kvlogdiag/catalogue/failures_harvest_libs.json"))
    a = ap.parse_args(argv)
    write_harvest(harvest(a.paths), a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The harvesters in tools/ give the same table whatever form a release comes in (wheel, sdist, member order).

They read released vLLM archives, which are not in the repository; these tests build tiny archives of the
same layouts (an sdist's ``vllm-X/`` top folder, a wheel's package-rooted paths) in a temporary folder.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import harvest_cli_args  # noqa: E402
import harvest_failures  # noqa: E402
import harvest_formats  # noqa: E402

_CONFIG = b'''
class CacheConfig:
    def check(self):
        raise ValueError(f"block_size ({self.block_size}) must be a power of two")
'''
_ARGS = b'''
def make(parser):
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--enforce-eager", action="store_true")
'''


def _sdist(path: Path, version: str, files: list[tuple[str, bytes]]) -> Path:
    out = path / f"vllm-{version}.tar.gz"
    with tarfile.open(out, "w:gz") as tf:
        for name, data in files:
            info = tarfile.TarInfo(f"vllm-{version}/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return out


def _wheel(path: Path, version: str, files: list[tuple[str, bytes]]) -> Path:
    out = path / f"vllm-{version}-cp38-abi3-manylinux1_x86_64.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in files:
            zf.writestr(name, data)
    return out


def test_failures_file_does_not_depend_on_member_order(tmp_path):
    # the same message raised in two files of the newest release: the table names the first by path,
    # whether the archive lists that file first or last
    files = [("vllm/config/cache.py", _CONFIG), ("vllm/config/alt.py", _CONFIG)]
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    _sdist(a, "0.30.0", files)
    _wheel(b, "0.30.0", list(reversed(files)))
    ta = harvest_failures.harvest([a])
    tb = harvest_failures.harvest([b])
    assert ta == tb
    (msg,) = ta["messages"]
    assert msg["f"] == "vllm/config/alt.py"
    assert msg["t"] == "block_size ({self.block_size}) must be a power of two"


def test_failures_newest_release_names_the_file(tmp_path):
    _sdist(tmp_path, "0.29.0", [("vllm/config/cache.py", _CONFIG)])
    _sdist(tmp_path, "0.30.0", [("vllm/config/zz_moved.py", _CONFIG)])
    (msg,) = harvest_failures.harvest([tmp_path])["messages"]
    assert (msg["first"], msg["last"], msg["f"]) == ("0.29.0", "0.30.0", "vllm/config/zz_moved.py")


def test_cli_args_reads_a_wheel_when_there_is_no_sdist(tmp_path):
    _sdist(tmp_path, "0.29.0", [("vllm/engine/arg_utils.py", _ARGS)])
    _wheel(tmp_path, "0.30.0", [("vllm/engine/arg_utils.py", _ARGS)])
    table = harvest_cli_args.harvest([tmp_path])
    assert table["versions"] == ["0.29.0", "0.30.0"]
    assert table["flags"]["--max-model-len"]["last"] == "0.30.0"
    assert table["flags"]["--enforce-eager"]["kind"] == "flag"


def test_cli_args_prefers_the_sdist_of_a_release(tmp_path):
    # an sdist and a wheel of one release: the sdist is read (the wheel here lacks a flag, so it would show)
    _wheel(tmp_path, "0.30.0", [("vllm/engine/arg_utils.py", _ARGS.replace(b"--enforce-eager", b"--other"))])
    _sdist(tmp_path, "0.30.0", [("vllm/engine/arg_utils.py", _ARGS)])
    table = harvest_cli_args.harvest([tmp_path])
    assert "--enforce-eager" in table["flags"] and "--other" not in table["flags"]


def test_committed_tables_name_their_releases():
    root = Path(__file__).resolve().parent.parent / "kvlogdiag" / "catalogue"
    failures = json.loads((root / "failures_harvest.json").read_text(encoding="utf-8"))
    args = json.loads((root / "cli_args.json").read_text(encoding="utf-8"))
    assert failures["versions"]["vllm"][-1] == args["versions"][-1]
    assert all(m["last"] in failures["versions"][m["p"]] for m in failures["messages"])


def test_formats_take_vllm_ascends_newest_rc_only_when_no_final_is_newer(tmp_path):
    # vLLM-Ascend has published release candidates only since 0.23.0: its newest rc stands for the releases after
    # its last final one; older rcs, and vllm's rcs, are never read
    for name in ("vllm-0.30.0.tar.gz", "vllm-0.31.0rc1.tar.gz", "vllm_ascend-0.23.0.post1.tar.gz",
                 "vllm_ascend-0.23.0rc1.tar.gz", "vllm_ascend-0.29.0rc1.tar.gz", "vllm_ascend-0.30.0rc2.tar.gz"):
        (tmp_path / name).write_bytes(b"")
    got = [(p, v) for p, v, _ in harvest_formats.select_sdists(tmp_path)]
    assert got == [("vllm", "0.30.0"), ("vllm-ascend", "0.23.0.post1"), ("vllm-ascend", "0.30.0rc2")]
    assert harvest_formats._newest_rc("vllm-ascend", ["0.18.0", "0.18.0rc1"]) is None
    assert harvest_formats._newest_rc("vllm", ["0.30.0", "0.31.0rc1"]) is None


def test_release_order_puts_a_release_candidate_before_its_final():
    for key in (harvest_failures.version_key, harvest_formats._vkey):
        assert sorted(["0.18.0.post1", "0.18.0", "0.18.0rc1", "0.17.1", "0.18.1"], key=key) == \
            ["0.17.1", "0.18.0rc1", "0.18.0", "0.18.0.post1", "0.18.1"]

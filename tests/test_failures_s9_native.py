"""Session-9 general rules for start-up causes stated by native tools rather than by vLLM's Python: the
architecture guard of vLLM's CUTLASS kernels, NVIDIA's option parser refusing an architecture name, a shell
that cannot execute the start command (docs/failures.md "Session 9: general rules")."""

from __future__ import annotations

from conftest import startup_verdict as run

EC = "(EngineCore pid=829571) "
ENGINE_TB = [EC + "Process EngineCore:", EC + "Traceback (most recent call last):",
             EC + '  File "/vllm/v1/engine/core.py", line 1084, in run_engine_core',
             EC + "    engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)"]


def test_cutlass_arch_guard_is_the_cause():
    # every guard of 0.20.2 csrc/cutlass_extensions/common.hpp, as the device printf writes it
    for arch in ("sm[75, 80)", "sm[80, 89)", "sm[89, 90)", "sm >= 90", "sm90", "sm100f", "sm100a", "sm120"):
        r = run([f"This kernel only supports {arch}.", "cudaErrorLaunchFailure: unspecified launch failure"])
        assert r["failed"] is True and r["cause_line"] == 1, arch
        assert r["cause_class"] == "kernel" and r["details"].get("target") == arch, arch
    # near misses: another sentence, or no architecture after "supports" — not the guard
    for line in ("This kernel only supports bf16 inputs.", "This kernel only supports sm.", "This model only supports sm90."):
        r = run([line, "cudaErrorLaunchFailure: unspecified launch failure"])
        assert r["cause_id"] != "kernel_missing", line


def test_cutlass_arch_guard_before_an_engine_traceback():
    r = run(["This kernel only supports sm100f.", *ENGINE_TB])
    assert r["cause_line"] == 1 and r["cause_class"] == "kernel"


def test_nvidia_option_parser_without_its_head():
    for line in ("Value 'sm_121a' is not defined for option 'gpu-name'",
                 "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'",
                 "nvcc fatal   : Value 'sm_30' is not defined for option 'gpu-architecture'",
                 "(EngineCore_DP0 pid=93) ptxas fatal   : Value 'compute_121' is not defined for option 'gpu-name'"):
        r = run([line])
        assert r["failed"] is True and r["cause_id"] == "kernel_missing" and r["cause_class"] == "kernel", line
    # near misses: another option, or a value that is no architecture: not a GPU without code
    for line in ("Value 'fast' is not defined for option 'gpu-name'",
                 "Value 'sm_121a' is not defined for option 'output-file'"):
        assert run([line])["cause_id"] != "kernel_missing", line


def test_shell_cannot_execute_the_start_command():
    for line in ("/bin/sh: 1: vllm: Permission denied", "sh: 3: vllm: Permission denied", "bash: vllm: Permission denied",
                 "/bin/bash: line 1: vllm: Permission denied"):
        r = run([line])
        assert r["failed"] is True and r["cause_id"] == "shell_command_not_found" and r["cause_class"] == "config", line
    # near misses: a path a program opened, or a program's own message: no shell's failed exec
    for line in ("/bin/sh: 1: /dev/shm/psm_1: Permission denied", "mkdir: cannot create directory '/data': Permission denied",
                 "vllm: Permission denied"):
        assert run([line])["cause_id"] != "shell_command_not_found", line

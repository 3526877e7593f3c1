"""Session-9 general rule: a native record the process aborts on — CPython's fatal error, a tt-metal assertion,
clang's failed compile — is a cause when nothing the log states before it is one (docs/failures.md "Session 9:
general rules"). Lines go through the reader's prefilter, as `kvlogdiag analyze` feeds them."""

from __future__ import annotations

from conftest import startup_verdict as run

RW = "(RayWorker pid=3554640) "
SIGBUS = [RW + "*** SIGBUS received at time=1692931519 on cpu 133 ***",
          RW + "PC: @     0x7f60c5616291  (unknown)  __memset_avx2_erms",
          RW + "[2023-08-25 10:45:19,168 E 3554640 3555230] logging.cc:361: *** SIGBUS received at time=1692931519 on cpu 133 ***",
          RW + "Fatal Python error: Bus error"]


def test_cpython_fatal_error_is_a_cause():
    r = run(SIGBUS)
    assert r["failed"] is True and r["cause_line"] == 4 and r["cause_class"] == "memory"
    assert r["process"] == "RayWorker pid=3554640" and r["exception"] == "Fatal Python error"
    for sig in ("Segmentation fault", "Aborted", "Floating point exception"):
        r = run([f"Fatal Python error: {sig}", "", "Current thread 0x00007f (most recent call first):"])
        assert r["cause_line"] == 1 and r["cause_class"] == "unknown", sig
    # the catalogue's reading comes first: SIGILL is the CPU's missing instruction set
    assert run(["Fatal Python error: Illegal instruction"])["cause_class"] == "arch"
    # near misses: the words in a sentence, at WARNING, or after the server came up
    assert run(["I get a Fatal Python error: Bus error when starting"])["cause_line"] is None
    assert run(["WARNING 08-25 10:45:19 [x.py:1] Fatal Python error: Bus error"])["cause_line"] is None
    assert run(["INFO:     Application startup complete.", "INFO:     Uvicorn running on http://0.0.0.0:8000",
                "Fatal Python error: Bus error"])["failed"] is False
    # a cause stated before it stays the cause
    r = run(["(EngineCore pid=5) RuntimeError: CUDA error: an illegal memory access was encountered",
             "Fatal Python error: Aborted"])
    assert r["cause_line"] == 1


SV = "[SERVER] ERROR 02-17 21:00:42 [engine.py:506] "
TT = [SV + "TT_FATAL @ /home/u/tt-metal/tt_metal/fabric/control_plane.cpp:1159: connected_eth_cores.size() >= edge.connected_chip_ids.size()",
      SV + "Expected 4 eth links from physical chip 1 to physical chip 2",
      SV + "backtrace:",
      SV + " --- /home/u/tt-metal/build/lib/libtt_metal.so(+0xa0a28a) [0x713e8061928a]",
      SV + " --- tt::tt_metal::DeviceManager::open_devices(std::vector<int, std::allocator<int> > const&)"]


def test_tt_metal_assertion_and_its_message():
    r = run(TT)
    assert r["failed"] is True and r["cause_line"] == 1 and r["exception"] == "TT_FATAL"
    assert r["cause_text"].endswith("— Expected 4 eth links from physical chip 1 to physical chip 2")
    # tt_throw_impl's own layout: the message under "info:" (each line a record of the logging call, as above)
    r = run([SV + s for s in ("TT_THROW @ tt_metal/impl/device.cpp:12: tt::exception", "info:", "Device 0 is not available",
                              "backtrace:")])
    assert r["cause_line"] == 1 and r["cause_text"].endswith("— Device 0 is not available")
    # the same head re-raised by the binding as a RuntimeError: the message joins it too
    W = "(VllmWorker rank=0 pid=9) ERROR 02-17 21:00:42 [multiproc_executor.py:1] "
    r = run([W + s for s in ("RuntimeError: TT_FATAL @ /x/bank_manager.cpp:462: false", "info:",
                             "Out of Memory: Not enough space to allocate 536870912 B DRAM buffer", "backtrace:")])
    assert r["cause_line"] == 1 and "Out of Memory: Not enough space" in r["cause_text"]
    # near misses: without "@ file:line: " no assertion head; a backtrace line is no message
    assert run(["TT_FATAL happened somewhere"])["cause_line"] is None
    r = run([TT[0], TT[2], TT[3]])
    assert r["cause_line"] == 1 and "—" not in r["cause_text"]


KL = ["(EngineCore_DP0 pid=331) ERROR 03-25 17:21:20 [multiproc_executor.py:154] Worker proc VllmWorker-4 died unexpectedly, shutting down executor.",
      "error: unable to rename temporary '/tmp/xpujitc-temp/537/xpu31/crt.o.tmp' to output file '/tmp/xpujitc-temp/537/xpu31/crt.o': 'No such file or directory'",
      "1 error generated when compiling for xpu3."]


def test_clang_error_and_its_summary():
    r = run(KL)
    assert r["cause_line"] == 2 and r["cause_class"] == "kernel" and r["exception"] == "compile error"
    r = run(["csrc/k.hip:12:3: error: use of undeclared identifier '__builtin_amdgcn_mfma_f32'", "2 warnings and 1 error generated."])
    assert r["failed"] is True and r["cause_line"] == 1 and r["cause_class"] == "kernel"
    # near misses: an "error:" line without clang's count, the count too far below, an argparse error
    assert run(KL[:2])["cause_text"] != KL[1]
    assert run([KL[1], "a", "b", "c", "d", KL[2]])["cause_line"] != 1
    assert run(["vllm serve: error: argument --max-model-len: invalid int value", "1 error generated."])["exception"] != "compile error"

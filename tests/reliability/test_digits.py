"""Same code, another machine, the same digits (issue 42, class 8).

The cause, measured on 2026-12-06 (bench/determinism.py): ATen's vectorised kernels and MKL pick
their code by the CPU's instruction sets, and AVX-512 and AVX2 code add in other orders. Here the
kernels a run uses are pinned to AVX2 unless ``BENCH_CPU_DIGITS=native``; these tests check that
the pins take effect (the last bits of softmax, a matrix product and exp change with them on an
AVX-512 CPU, and equal those of a process forced onto AVX2 kernels: what a CPU without AVX-512
runs), and that every run and ledger row records what its digits depend on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.determinism import PORTABLE, digits_key, pin_cpu_digits, portable_possible
from bench.records import RunResult
from bench.records.ledger import ledger_row
from bench.run import train_and_test

REPO = Path(__file__).resolve().parents[2]
OPS = """
import hashlib, json, torch
torch.manual_seed(0)
x = torch.randn(257, 1001)
ops = {"softmax": x.softmax(1), "log_softmax": x.log_softmax(1), "exp": x.exp(), "mm": x @ x.T, "sum": x.sum(1)}
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(),
                  **{k: hashlib.sha256(v.numpy().tobytes()).hexdigest() for k, v in ops.items()}}))
"""


def _ops(**env) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "BENCH_CPU_DIGITS")}
    done = subprocess.run([sys.executable, "-c", "import bench\n" + OPS], env={**clean, "PYTHONPATH": str(REPO),
                          "OMP_NUM_THREADS": "1", **env}, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def _has_avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def _is_intel() -> bool:
    try:
        return "GenuineIntel" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def test_the_modes_set_their_pins_and_a_users_own_setting_wins():
    env: dict[str, str] = {}
    mode = pin_cpu_digits(env)
    if portable_possible():
        assert mode == "portable" and env == PORTABLE
    env = {"BENCH_CPU_DIGITS": "native"}
    assert pin_cpu_digits(env) == "native" and env["MKL_CBWR"] == "AUTO,STRICT" and "ATEN_CPU_CAPABILITY" not in env
    env = {"MKL_CBWR": "COMPATIBLE"}
    pin_cpu_digits(env)
    assert env["MKL_CBWR"] == "COMPATIBLE"
    env = {"BENCH_CPU_DIGITS": "fast"}
    with pytest.warns(UserWarning, match="BENCH_CPU_DIGITS='fast' is not a mode; using portable"):
        pin_cpu_digits(env)
    assert env["BENCH_CPU_DIGITS"] == "portable"


@pytest.mark.skipif(not portable_possible(), reason="the pins apply to x86-64 CPUs with AVX2 only")
def test_portable_kernels_are_an_avx2_cpus_and_differ_from_avx512_ones():
    portable = _ops()
    assert portable["capability"] == "AVX2"
    # a CPU without AVX-512 runs ATen's AVX2 kernels and MKL's AVX2 branch: forced here
    assert _ops(BENCH_CPU_DIGITS="native", ATEN_CPU_CAPABILITY="avx2", MKL_CBWR="AVX2,STRICT") == portable
    if not _has_avx512():
        pytest.skip("no AVX-512 here: native kernels are the AVX2 ones")
    native = _ops(BENCH_CPU_DIGITS="native")
    assert native["capability"] == "AVX512"
    # ATen's softmax changes its last bits with the kernels on any AVX-512 CPU, and on Intel's MKL's exp and
    # matrix product too: the differences that made MQ2008 SL give .640804 on one machine and .640280 on
    # another. MKL takes its AVX-512 branch on Intel CPUs only (on an AMD EPYC with AVX-512 its AUTO branch
    # gave the AVX2 digits), so there the pin changes ATen's kernels alone.
    differ = {"capability", "softmax", "log_softmax"} | ({"exp", "mm"} if _is_intel() else set())
    assert {k for k in portable if portable[k] != native[k]} >= differ


@pytest.mark.slow
def test_every_run_and_ledger_row_records_what_its_digits_depend_on(tiny, make_cfg, tmp_path):
    res = train_and_test(make_cfg([*tiny, "logger=none"], tmp_path), overrides=list(tiny))
    digits = RunResult.read(tmp_path).digits
    assert set(digits) >= {"torch", "device", "cpu_capability", "mkl_cbwr", "threads", "deterministic", "mode"}
    assert digits["device"] == "cpu" and digits["threads"] >= 1 and digits["torch"].startswith("2.")
    if portable_possible():
        assert digits["cpu_capability"] == "AVX2" and digits["mkl_cbwr"] == "AVX2,STRICT"
    row = ledger_row(res)
    assert row["digits"] == digits_key(digits) and row["digits"].endswith(f"|{digits['threads']}t")
    assert len(str(row["data_id"])) == 16

"""bench: a benchmark suite for top-K recommendation losses (Lightning + Hydra)."""

import os

from bench.determinism import pin_cpu_digits

# before anything imports torch: the kernels a CPU runs decide the last digits (bench/determinism.py);
# unless BENCH_CPU_DIGITS=native, every x86-64 CPU with AVX2 runs the same ones. MKL's STRICT mode
# also makes matrix products independent of the thread count (a Linear weight gradient differed
# between 1 and 2 threads on a 2-core Xeon without it).
pin_cpu_digits()
# what Lightning's import sets, and a run imports Lightning only after its checks, which may ask CUDA
# for its devices: NVML answers that without starting CUDA in the process, so a forked child can use it
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

__version__ = "0.1.0"

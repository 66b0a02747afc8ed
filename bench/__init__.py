"""bench: a benchmark suite for top-K recommendation losses (Lightning + Hydra)."""

import os

# MKL splits a GEMM's reduction by thread count on some CPUs (seen on a 2-core Intel Xeon: a Linear
# weight gradient differed between 1 and 2 threads), so a parallel-launcher job would not equal
# the single run. Strict conditional numerical reproducibility makes GEMMs independent of the
# thread count; it is read at MKL's first call, so this must run before any matmul. A user's own
# MKL_CBWR wins.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

__version__ = "0.1.0"

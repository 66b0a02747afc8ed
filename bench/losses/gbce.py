r"""gBCE: generalised binary cross-entropy (Petrov & Macdonald, RecSys 2023, gSASRec).

BCE trained with k sampled negatives per positive is overconfident: the model learns
probabilities for a world where an item is a negative k/(|I|-1) times as often as it is. gBCE
raises the positive's probability to a power :math:`\beta \le 1`:

.. math::
    \ell_{ui} = \frac{1}{k+1}\Big[\beta\,\mathrm{softplus}(-s_{ui}) + \sum_{j=1}^{k}\mathrm{softplus}(s_{uj})\Big],
    \qquad \beta = \alpha\big(t(1 - 1/\alpha) + 1/\alpha\big) = 1 - t(1-\alpha),
    \quad \alpha = \frac{k}{|I| - 1},

with :math:`\mathrm{softplus}(-s) = -\log\sigma(s)`; t = 0 is BCE with k negatives (β = 1), t = 1 is
"fully calibrated" (β = α). The authors' code does not write this loss down: it rewrites the
positive logit as :math:`\gamma = \log(1/(\sigma(s)^{-\beta} - 1))` (so that
:math:`\sigma(\gamma) = \sigma(s)^\beta`) in float64 with 1e-10 clamps and runs BCE over the k+1
columns, which is the formula above inside the clamps; here it is computed directly (stable in
float32, no clamp, so no vanishing gradient where a clamp would bind).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from bench.contracts import LossBatch, TrainData
from bench.errors import ConfigError
from bench.losses.base import RecLoss
from bench.losses.registry import LOSSES


def gbce_beta(t: float, n_negatives: int, n_items: int) -> float:
    """β of gBCE for calibration ``t`` in [0, 1], k = ``n_negatives`` and |I| = ``n_items``."""
    alpha = n_negatives / (n_items - 1)
    return alpha * (t * (1.0 - 1.0 / alpha) + 1.0 / alpha)


def gbce_terms(pos: Tensor, neg: Tensor, beta: float, valid: Tensor | None = None) -> Tensor:
    """(B,) per-pair gBCE: (β·softplus(-s⁺) + Σ_j softplus(s_j)) / (k + 1), k the pair's valid
    negatives (shared draws mask a row's own positives: they hold -inf, softplus 0)."""
    k = neg.shape[1] if valid is None else valid.sum(1)
    return (beta * F.softplus(-pos) + F.softplus(neg).sum(1)) / (k + 1)


@LOSSES.register("gbce")
class GBCE(RecLoss):
    """gBCE (gSASRec's loss).

    Args:
        t: calibration in [0, 1] (0.75 in the authors' code and README; 0 is BCE).
        n_negatives: k (256 in gSASRec).
    """

    def __init__(self, t: float = 0.75, n_negatives: int = 256) -> None:
        super().__init__(n_negatives=n_negatives)
        if not 0.0 <= t <= 1.0:
            raise ConfigError(f"loss.t must be in [0, 1], got {t}")
        self.t = float(t)
        self.beta = 1.0

    def bind(self, data: TrainData) -> None:
        if data.n_items < 2:
            raise ConfigError("gbce needs at least two items")
        self.beta = gbce_beta(self.t, self.n_negatives, data.n_items)

    def forward(self, batch: LossBatch) -> Tensor:
        return gbce_terms(batch.pos, batch.neg, self.beta, batch.neg_valid).mean()

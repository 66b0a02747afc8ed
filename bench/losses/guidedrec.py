"""GuidedRec: BCE guided by a learned DCG surrogate (Rashed, Grabocka and Schmidt-Thieme, SIGIR 2021)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.contracts import LossBatch, Scorer
from bench.errors import ConfigError
from bench.losses import pointwise
from bench.losses.base import RecLoss
from bench.losses.registry import LOSSES

POS_WEIGHTS = ("balanced", "none")
SURROGATES = ("mlp_nfm", "mlp")
OUT_WIDTH = 8  # the reference's last hidden layer


def _linear(layer: nn.Linear, x: Tensor, frozen: bool) -> Tensor:
    # frozen: the layer acts as a constant, so -EDCG moves the scores and never the surrogate
    weight, bias = (layer.weight.detach(), layer.bias.detach()) if frozen else (layer.weight, layer.bias)
    return F.linear(x, weight, bias)


class DCGSurrogate(nn.Module):
    r"""Phi_psi: a list of L (sigmoid score, label) pairs -> its estimated DCG in (-1, 1).

    ``mlp``: :math:`\tanh(O_2 \tanh(O_1 h))` with :math:`h = \tanh(W_2 \tanh(W_1 \mathrm{vec}(x)))`
    (2L -> w -> w -> 8 -> 1). ``mlp_nfm`` (the paper's and IR-Benchmark's network) multiplies h by
    an NFM-like branch :math:`\tanh(B\,\mathrm{mean}_{\text{rows}}(z z^\top))`, :math:`z = \tanh(A x)`
    (each pair -> w, then the L x L Gram matrix of the list, L -> w). Every layer, the output too,
    is tanh as in the reference; PyTorch's default nn.Linear initialisation (the reference's).

    Args:
        length: L, list length (positive + negatives).
        width: w, hidden width (the reference: 2L).
        nfm: add the NFM-like branch.
    """

    def __init__(self, length: int, width: int, nfm: bool) -> None:
        super().__init__()
        self.length, self.nfm = int(length), bool(nfm)
        self.mlp1 = nn.Linear(2 * length, width)
        self.mlp2 = nn.Linear(width, width)
        self.nfm_pair = nn.Linear(2, width) if nfm else None
        self.nfm_list = nn.Linear(length, width) if nfm else None
        self.out1 = nn.Linear(width, OUT_WIDTH)
        self.out2 = nn.Linear(OUT_WIDTH, 1)

    def forward(self, x: Tensor, frozen: bool = False) -> Tensor:
        """(P, L, 2) lists -> (P,) estimated DCG; ``frozen``: weights as constants (no gradient)."""
        h = torch.tanh(_linear(self.mlp2, torch.tanh(_linear(self.mlp1, x.flatten(1), frozen)), frozen))
        if self.nfm_pair is not None and self.nfm_list is not None:
            z = torch.tanh(_linear(self.nfm_pair, x, frozen))  # (P, L, w)
            gram = torch.bmm(z, z.transpose(1, 2)).mean(1)  # (P, L)
            h = h * torch.tanh(_linear(self.nfm_list, gram, frozen))
        return torch.tanh(_linear(self.out2, torch.tanh(_linear(self.out1, h, frozen)), frozen)).squeeze(-1)


def list_dcg(pos: Tensor, listed: Tensor, member: Tensor | None) -> Tensor:
    """(P,) DCG of each list with its one relevant item, the positive: 1 / log2(1 + rank),
    rank = 1 + #members of ``listed`` (P, L-1) scoring strictly higher than ``pos`` (P,);
    ``member`` (P, L-1) marks the real list entries (None: all). No gradient."""
    higher = listed.detach() > pos.detach().unsqueeze(1)
    if member is not None:
        higher = higher & member
    return 1.0 / torch.log2(2.0 + higher.sum(1).to(pos.dtype))


def pick_list(neg: Tensor, valid: Tensor | None, size: int) -> tuple[Tensor, Tensor | None]:
    """The list's negatives: the first ``size`` columns of ``neg`` (P, N), or with a mask
    ``valid`` (P, N) the first ``size`` valid ones of each row.

    Returns:
        (P, size) scores (masked entries may hold -inf) and (P, size) membership (False where a
        row has fewer than ``size`` valid columns), or None when every column is valid.
    """
    if valid is None:
        return neg[:, :size], None
    if neg.shape[1] == size:
        return neg, valid
    cols = torch.arange(neg.shape[1], device=neg.device)
    # valid columns keep their index, masked ones sort after every valid one: the k smallest
    # keys are the first valid columns in order (topk is O(N) a row, a full sort is not needed)
    key = torch.where(valid, cols, cols + neg.shape[1])
    idx = torch.topk(key, size, dim=1, largest=False, sorted=True).indices
    return neg.gather(1, idx), valid.gather(1, idx)


def bce_terms(pos: Tensor, neg: Tensor, valid: Tensor | None, pos_weight: str) -> Tensor:
    r"""(P,) log loss of each pair: :math:`-(w \log\sigma(s_{ui}) + \sum_j \log(1-\sigma(s_{uj})))`
    over the valid negatives; w = their number (``balanced``, 1:1 as the reference code) or 1
    (``none``, the paper's formula)."""
    if pos_weight != "balanced":
        return pointwise.bce_terms(pos, neg, "sum", valid)
    # w * softplus(-s_ui) + sum_j softplus(s_uj) = w * (BCE with the negatives' mean); w = 0 gives 0
    count = torch.full_like(pos, neg.shape[1]) if valid is None else valid.sum(1).to(pos.dtype)
    return count * pointwise.bce_terms(pos, neg, "mean", valid)


def surrogate_input(pos: Tensor, listed: Tensor, member: Tensor | None) -> Tensor:
    """(P, L, 2) (sigmoid score, label) pairs, positive first; non-members are (0, 0)."""
    probs = torch.sigmoid(torch.cat([pos.unsqueeze(1), listed if member is None else
                                     torch.where(member, listed, 0.0)], dim=1))
    labels = torch.zeros_like(probs)
    labels[:, 0] = 1.0
    if member is not None:
        probs = probs * torch.cat([torch.ones_like(member[:, :1]), member], dim=1).to(probs.dtype)
    return torch.stack([probs, labels], dim=2)


def guidedrec_terms(pos: Tensor, neg: Tensor, valid: Tensor | None, surrogate: DCGSurrogate,
                    list_negatives: int, pos_weight: str = "balanced") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """GuidedRec's three per-pair terms.

    Args:
        pos: (P,) positive scores; neg: (P, N) negative scores (-inf where ``valid`` is False).
        valid: (P, N) bool mask of true negatives, or None (all).
        surrogate: Phi_psi over lists of length ``list_negatives + 1``.
        list_negatives: L - 1, negatives per list (the first valid ones).
        pos_weight: ``balanced`` or ``none`` (see :func:`bce_terms`).
    Returns:
        (P,) each: the BCE (gradient to the scores only); the squared error
        (Phi(detached list) - DCG)^2 (gradient to the surrogate only); the estimate
        Phi_frozen(list) (gradient to the scores only); and the true DCG (no gradient).
    """
    listed, member = pick_list(neg, valid, list_negatives)
    dcg = list_dcg(pos, listed, member)
    x = surrogate_input(pos, listed, member)
    mse = (surrogate(x.detach()) - dcg).pow(2)
    edcg = surrogate(x, frozen=True)
    return bce_terms(pos, neg, valid, pos_weight), mse, edcg, dcg


@LOSSES.register("guidedrec")
class GuidedRec(RecLoss):
    r"""GuidedRec in one optimiser step (docs/losses.md#guidedrec). Per pair, list
    :math:`\ell = \{i\} \cup` the first L-1 negatives:

    :math:`a\,\mathrm{BCE} + b\,(\Phi_\psi(\mathrm{sg}[x_\ell]) - \mathrm{DCG}_\ell)^2
    - \lambda\,\Phi_{\mathrm{sg}[\psi]}(x_\ell)`, mean over pairs,

    with x the (sigmoid score, label) pairs and sg stop-gradient: the surrogate (an
    nn.Module, so optimised with the backbone) learns from the squared error only, the model
    from the BCE and -EDCG only. The papers take three optimiser steps per batch instead.

    Args:
        list_negatives: L - 1 negatives in the surrogate's list (9: L = 10 as the papers).
        pos_weight: ``balanced`` (positive weighted by the row's negative count, 1:1 as the
            reference code) or ``none`` (the paper's log loss).
        surrogate: ``mlp_nfm`` (the reference network) or ``mlp`` (its MLP branch alone).
        width: hidden width of the surrogate; None = 2L (the reference).
        bce_weight, surrogate_weight, dcg_weight: a, b, lambda above.
        surrogate_lr, surrogate_weight_decay: the surrogate's own optimiser options (its own
            parameter group, as the original code's separate optimiser); None = the backbone's.
        n_negatives: N >= list_negatives; the BCE uses all N.
    """

    def __init__(self, list_negatives: int = 9, pos_weight: str = "balanced", surrogate: str = "mlp_nfm",
                 width: int | None = None, bce_weight: float = 1.0, surrogate_weight: float = 1.0,
                 dcg_weight: float = 1.0, surrogate_lr: float | None = None,
                 surrogate_weight_decay: float | None = None, n_negatives: int = 9) -> None:
        super().__init__(n_negatives=n_negatives)
        if not 1 <= list_negatives <= self.n_negatives:
            raise ConfigError(f"loss.list_negatives must be in [1, loss.n_negatives={self.n_negatives}], "
                              f"got {list_negatives}")
        if pos_weight not in POS_WEIGHTS:
            raise ConfigError(f"loss.pos_weight must be one of {', '.join(POS_WEIGHTS)}, got '{pos_weight}'")
        if surrogate not in SURROGATES:
            raise ConfigError(f"loss.surrogate must be one of {', '.join(SURROGATES)}, got '{surrogate}'")
        if width is not None and width < 1:
            raise ConfigError(f"loss.width must be >= 1 or null (2 x list length), got {width}")
        for key, value in (("bce_weight", bce_weight), ("surrogate_weight", surrogate_weight),
                           ("dcg_weight", dcg_weight)):
            if not value >= 0:
                raise ConfigError(f"loss.{key} must be >= 0, got {value}")
        for key, option in (("surrogate_lr", surrogate_lr), ("surrogate_weight_decay", surrogate_weight_decay)):
            if option is not None and not option >= 0:
                raise ConfigError(f"loss.{key} must be >= 0 or null (the optimiser's), got {option}")
        options = (("lr", surrogate_lr), ("weight_decay", surrogate_weight_decay))
        self.surrogate_options = {k: float(v) for k, v in options if v is not None}
        self.list_negatives, self.pos_weight = int(list_negatives), str(pos_weight)
        self.weights = (float(bce_weight), float(surrogate_weight), float(dcg_weight))
        length = self.list_negatives + 1
        # built here, from the global RNG: bench.training seeds it before instantiating the loss
        self.surrogate = DCGSurrogate(length, 2 * length if width is None else int(width), surrogate == "mlp_nfm")
        self._sums: Tensor | None = None  # diagnostics: per-term sums over this epoch's steps
        self._steps = 0

    def on_train_epoch_start(self, epoch: int) -> None:
        # per epoch, so that a run resumed at an epoch boundary logs the same values
        self._sums, self._steps = None, 0

    def forward(self, batch: LossBatch) -> Tensor:
        valid = batch.neg_valid
        bce, mse, edcg, dcg = guidedrec_terms(batch.pos, batch.neg, valid, self.surrogate, self.list_negatives,
                                              self.pos_weight)
        a, b, lam = self.weights
        per_pair = a * bce + b * mse - lam * edcg
        if valid is not None:  # a row whose drawn columns are all its own positives has no list
            per_pair = torch.where(valid.any(1), per_pair, 0.0)
        with torch.no_grad():
            parts = torch.stack([bce.mean(), mse.mean(), edcg.mean(), dcg.mean()]).float()
            self._sums = parts if self._sums is None else self._sums + parts
            self._steps += 1
        return per_pair.mean()

    def optimizer_groups(self, defaults: Mapping[str, Any]) -> list[dict[str, Any]]:
        if not self.surrogate_options:
            return []
        return [{"params": list(self.surrogate.parameters()), **self.surrogate_options}]

    def diagnostics(self, scorer: Scorer) -> dict[str, float]:
        """Means over the last training epoch's steps of the BCE, the surrogate's squared error,
        its estimate EDCG and the true list DCG."""
        if self._sums is None or self._steps == 0:
            return {}
        means = (self._sums / self._steps).tolist()
        return dict(zip(("bce", "surrogate_mse", "edcg", "list_dcg"), means, strict=True))

r"""Scorers of learning to rank (``task=ltr``): a list of documents in, one score per document out.

A query comes with a list of L candidate documents, document j described by a feature vector
:math:`\mathbf{x}_j \in \mathbb{R}^F` (LETOR: F = 46 for MQ2008, 45 for OHSUMED). A batch holds Q
lists padded to a common length: ``features`` (Q, L, F) with zero rows for padding and ``mask``
(Q, L), True for a real document. Every scorer returns (Q, L) scores :math:`s_{qj}`, with 0 at
padded positions, and the loss ranks each list by them.

- ``linear``: :math:`s_j = \mathbf{w}^\top \mathbf{x}_j + b`.
- ``mlp``: :math:`s_j = \mathrm{MLP}(\mathbf{x}_j)`, ReLU hidden layers.
- ``transformer``: the context-aware scorer of Pobrotyn et al., "Context-Aware Learning to Rank with
  Self-Attention" (SIGIR eCom 2020; the allRank library): a document's score depends on the other
  documents of its list through self-attention, :math:`s_j = g(\mathbf{x}_j, \{\mathbf{x}_k\}_k)`.

The first two score each document on its own; the transformer is permutation-equivariant (no
positional encoding: a candidate list is a set), and neither kind lets padding change the score of
a real document.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from bench.errors import ConfigError, DataError
from bench.models.registry import MODELS


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value or value < 1:
        raise ConfigError(f"model.{key}={value} is out of range: use an integer >= 1")
    return int(value)


def _dropout(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < 1.0:
        raise ConfigError(f"model.dropout={value} is out of range: use a probability in [0, 1)")
    return float(value)


class ListScorer(nn.Module):
    """Base class: scores the documents of padded candidate lists (``task=ltr``).

    Subclasses implement :meth:`_scores`; :meth:`forward` checks the shapes, handles empty
    batches and sets padded positions to 0.

    Args:
        n_features: F, the length of a document's feature vector.
    """

    tasks: tuple[str, ...] = ("ltr",)

    def __init__(self, n_features: int) -> None:
        super().__init__()
        if isinstance(n_features, bool) or not isinstance(n_features, int) or n_features < 1:
            raise DataError(f"the documents have {n_features} features; a learning-to-rank data set needs at "
                            "least one feature per document")
        self.n_features = n_features

    def bind(self, data: object) -> None:
        """Called once with the task's training data before training; the scorers need nothing from it."""

    def forward(self, features: Tensor, mask: Tensor) -> Tensor:
        """Scores of each list's documents.

        Args:
            features: (Q, L, F) float, zero rows at padded positions.
            mask: (Q, L) bool, True for a real document.
        Returns:
            (Q, L) scores (unitless; only their order within a list matters), 0 at padded positions.
        """
        if features.dim() != 3 or features.shape[-1] != self.n_features or mask.shape != features.shape[:2]:
            raise DataError(f"the scorer expects features (lists, documents, {self.n_features}) and a mask "
                            f"(lists, documents), got {tuple(features.shape)} and {tuple(mask.shape)}; the model "
                            "was built for another number of features than the data has")
        if features.shape[0] == 0 or features.shape[1] == 0:
            return features.new_zeros(features.shape[:2])
        return self._scores(features, mask).masked_fill(~mask, 0.0)

    def _scores(self, features: Tensor, mask: Tensor) -> Tensor:
        """(Q, L, F) features, (Q, L) mask -> (Q, L) finite scores (any value at padded positions)."""
        raise NotImplementedError


@MODELS.register("linear")
class LinearScorer(ListScorer):
    r"""A linear function of each document's features, :math:`s_j = \mathbf{w}^\top \mathbf{x}_j + b`
    (the classic linear ranker, e.g. of RankSVM or ListNet's experiments on LETOR).

    Args:
        n_features: F.
    """

    def __init__(self, n_features: int) -> None:
        super().__init__(n_features)
        self.linear = nn.Linear(n_features, 1)

    def _scores(self, features: Tensor, mask: Tensor) -> Tensor:
        return self.linear(features).squeeze(-1)


@MODELS.register("mlp")
class MLPScorer(ListScorer):
    r"""A feed-forward network applied to each document on its own:
    :math:`\mathbf{h}_0 = \mathbf{x}_j`, :math:`\mathbf{h}_i = \mathrm{Dropout}(\mathrm{ReLU}(W_i \mathbf{h}_{i-1}
    + \mathbf{b}_i))`, :math:`s_j = \mathbf{w}^\top \mathbf{h}_n + b`.

    Args:
        n_features: F.
        hidden: the hidden layer widths, at least one (model=linear has none).
        dropout: after each hidden layer, in training.
    """

    def __init__(self, n_features: int, hidden: Sequence[int] = (64, 32), dropout: float = 0.1) -> None:
        super().__init__(n_features)
        if isinstance(hidden, str | int) or not isinstance(hidden, Sequence) or not len(hidden):
            raise ConfigError(f"model.hidden={hidden} is not a list of layer widths: use e.g. [64, 32] "
                              "(model=linear for a scorer without hidden layers)")
        widths = [n_features, *(_positive_int("hidden", h) for h in hidden)]
        p = _dropout(dropout)
        layers: list[nn.Module] = []
        for w_in, w_out in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(w_in, w_out), nn.ReLU(), nn.Dropout(p)]
        self.net = nn.Sequential(*layers, nn.Linear(widths[-1], 1))

    def _scores(self, features: Tensor, mask: Tensor) -> Tensor:
        return self.net(features).squeeze(-1)


@MODELS.register("transformer")
class TransformerScorer(ListScorer):
    r"""The context-aware scorer of allRank (Pobrotyn, Bartczak, Synowiec, Białobrzeski and Bojar,
    "Context-Aware Learning to Rank with Self-Attention", SIGIR eCom 2020).

    :math:`H_0 = X W_{in} + \mathbf{b}_{in}` maps the list's (L, F) features to (L, dim); ``layers``
    pre-norm encoder blocks follow, each :math:`H \leftarrow H + \mathrm{MHA}(\mathrm{LN}(H))`,
    :math:`H \leftarrow H + \mathrm{FFN}(\mathrm{LN}(H))` with ``heads`` attention heads over the
    documents of the same list (padded documents are hidden as keys) and a ReLU feed-forward of width
    ``ffn_dim``; then a final LayerNorm and :math:`s_j = \mathbf{w}^\top \mathbf{h}_j + b`. Without a
    positional encoding, permuting a list's documents permutes its scores. Weight matrices start
    Xavier-uniform, as in allRank.

    Defaults are allRank's configuration for MSLR-WEB30K in the paper (one linear input layer to 128
    without activation, N = 4 blocks, h = 4 heads, d_ff = 512, dropout 0.3, no positional encoding).
    One deviation: PyTorch's LayerNorm (biased variance, eps 1e-5) rather than allRank's
    (unbiased std, eps 1e-6), a difference of normalisation detail only.

    Args:
        n_features: F.
        dim: d_model, the width of the input layer and the blocks (a multiple of ``heads``).
        layers: encoder blocks. heads: attention heads. ffn_dim: the feed-forward width.
        dropout: on attention weights, the feed-forward hidden layer and each residual branch, in training.
    """

    def __init__(self, n_features: int, dim: int = 128, layers: int = 4, heads: int = 4, ffn_dim: int = 512,
                 dropout: float = 0.3) -> None:
        super().__init__(n_features)
        dim, layers, heads = _positive_int("dim", dim), _positive_int("layers", layers), _positive_int("heads", heads)
        ffn_dim, p = _positive_int("ffn_dim", ffn_dim), _dropout(dropout)
        if dim % heads:
            raise ConfigError(f"model.dim={dim} is out of range: use a multiple of model.heads={heads}")
        self.input = nn.Linear(n_features, dim)
        block = nn.TransformerEncoderLayer(dim, heads, ffn_dim, p, activation="relu", batch_first=True,
                                           norm_first=True)
        # nested tensors are not used with pre-norm blocks anyway; saying so avoids PyTorch's warning
        self.encoder = nn.TransformerEncoder(block, layers, norm=nn.LayerNorm(dim), enable_nested_tensor=False)
        self.output = nn.Linear(dim, 1)
        for param in self.parameters():
            if param.dim() > 1:
                nn.init.xavier_uniform_(param)

    def _scores(self, features: Tensor, mask: Tensor) -> Tensor:
        # a list without any real document would give every query position only hidden keys, which
        # PyTorch's inference fast path turns into NaN; let it see its first (padding) position
        # instead: its scores are all padding, set to 0 by forward()
        empty = ~mask.any(dim=1, keepdim=True)
        first = torch.arange(mask.shape[1], device=mask.device) == 0
        hidden = ~mask & ~(empty & first)
        h = self.encoder(self.input(features), src_key_padding_mask=hidden)
        return self.output(h).squeeze(-1)

"""NCF as the SL@K authors' IR-Benchmark has it: two residual MLP towers over MF embeddings."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from bench.errors import ConfigError
from bench.models.mf import MF
from bench.models.registry import MODELS


def tower(dim: int, layers: Sequence[int]) -> nn.Sequential:
    """Linear + ReLU for each width of ``layers`` (the last must be ``dim``), ReLU after the last too."""
    widths = [dim, *layers]
    parts: list[nn.Module] = []
    for a, b in zip(widths[:-1], widths[1:], strict=True):
        parts += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*parts)


@MODELS.register("ncf")
class NCF(MF):
    r"""NCF in IR-Benchmark's two-tower form (the backbone the SL@K paper's code base calls NCF):

    .. math::
        h_u = e_u + \mathrm{MLP}_U(e_u),\qquad h_i = e_i + \mathrm{MLP}_I(e_i),\qquad s_{ui} = f(h_u, h_i),

    each MLP a stack of Linear + ReLU layers of widths ``layers`` (the last equal to d). This is
    *not* NeuMF (He et al., WWW 2017), whose score is a joint MLP over the pair
    :math:`\sigma(h^\top[p_u \odot q_i;\ \mathrm{MLP}([p_u; q_i])])`: that score does not factorise into
    a user and an item vector, which the suite's sampled and shared negatives and its full-ranking
    evaluation rely on (one matrix product per batch); the towers keep NCF's nonlinearity per side.

    Args:
        n_users, n_items, dim, score, init, init_std: as :class:`~bench.models.mf.MF`.
        layers: the towers' widths ([32, 16, 8, 64], IR-Benchmark's default; the last must be ``dim``).
    """

    def __init__(self, n_users: int, n_items: int, dim: int = 64, layers: Sequence[int] = (32, 16, 8, 64),
                 score: str = "cosine", init: str = "auto", init_std: float = 1.0) -> None:
        super().__init__(n_users, n_items, dim=dim, score=score, init=init, init_std=init_std)
        layers = [int(w) for w in layers]
        if not layers or layers[-1] != dim or min(layers) < 1:
            raise ConfigError(f"model.layers={layers}: positive widths ending with model.dim={dim}")
        self.layers = layers
        self.user_tower, self.item_tower = tower(dim, layers), tower(dim, layers)

    def embeddings(self) -> tuple[Tensor, Tensor]:
        users, items = self.user_emb.weight, self.item_emb.weight
        return users + self.user_tower(users), items + self.item_tower(items)


"""Matrix factorisation."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from bench.errors import ConfigError
from bench.models.base import EmbeddingModel
from bench.models.registry import MODELS

# "normal" takes init_std; "auto" resolves to one of these by the score
INITS: dict[str, Callable[..., Tensor]] = {
    "normal": nn.init.normal_, "xavier_normal": nn.init.xavier_normal_, "xavier_uniform": nn.init.xavier_uniform_}


@MODELS.register("mf")
class MF(EmbeddingModel):
    r"""Matrix factorisation: :math:`s_{ui} = f(\mathbf{p}_u, \mathbf{q}_i)`.

    Free embeddings ``p_u, q_i`` in R^dim; f is the dot product or the cosine similarity.

    Args:
        n_users, n_items: catalogue sizes.
        dim: embedding dimension (64 in the SL@K paper).
        score: "cosine" or "dot".
        init: "normal" (N(0, init_std^2)), "xavier_normal", "xavier_uniform" (XSimGCL's authors and the
            SL@K reference code's XSimGCL: U(-a, a), a = sqrt(6 / (rows + dim))), or "auto": normal with
            std 1 for cosine scores (scale-free; PyTorch's embedding default, as in the
            SL@K reference code) and xavier-normal for dot scores (small initial scores,
            as the reference BPR).
        init_std: std of "normal".
    """

    def __init__(self, n_users: int, n_items: int, dim: int = 64, score: str = "cosine",
                 init: str = "auto", init_std: float = 1.0) -> None:
        super().__init__(n_users, n_items, score)
        if init != "auto" and init not in INITS:
            raise ConfigError(f"unknown model.init '{init}'; known: auto, {', '.join(INITS)}")
        self.user_emb = nn.Embedding(n_users, dim)
        self.item_emb = nn.Embedding(n_items, dim)
        if init == "auto":
            init = "normal" if score == "cosine" else "xavier_normal"
        for table in (self.user_emb, self.item_emb):
            if init == "normal":
                nn.init.normal_(table.weight, std=init_std)
            else:
                INITS[init](table.weight)

    def embeddings(self) -> tuple[Tensor, Tensor]:
        return self.user_emb.weight, self.item_emb.weight

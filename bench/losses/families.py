"""The loss families of the SL@K paper's Table 2 and the paper's names for the losses.

Reports list losses family by family in this order (pairwise, NDCG surrogates, partial AUC,
the softmax family, top-K), each family in the paper's row order first, so a report reads
like Table 2; losses newer than the paper follow the paper's in their family. Every registered
loss belongs to exactly one family (tested).
"""

from __future__ import annotations

FAMILIES: dict[str, tuple[str, ...]] = {
    "pointwise and pairwise": ("bpr", "bce", "ranknet", "gbce", "ccl", "simce"),
    "NDCG surrogates": ("guidedrec", "songk", "song", "lambdarank", "lambdaloss", "lambdalossk", "approxndcg",
                        "neuralndcg"),
    "partial AUC": ("llpauc",),
    "softmax family": ("sl", "advinfonce", "bsl", "psl", "sogclr", "listnet", "listmle", "logq", "logq_corrected",
                       "sce"),
    "top-K": ("slk", "talos"),
}

#: the papers' names; "@K" is replaced by the run's K where the loss has one
PAPER_NAMES: dict[str, str] = {
    "bpr": "BPR", "bce": "BCE", "ranknet": "RankNet", "guidedrec": "GuidedRec", "songk": "SONG@K", "song": "SONG",
    "lambdarank": "LambdaRank", "lambdaloss": "LambdaLoss", "lambdalossk": "LambdaLoss@K", "approxndcg": "ApproxNDCG",
    "neuralndcg": "NeuralNDCG", "llpauc": "LLPAUC", "sl": "SL", "advinfonce": "AdvInfoNCE", "bsl": "BSL", "psl": "PSL",
    "sogclr": "SogCLR", "listnet": "ListNet", "listmle": "ListMLE", "slk": "SL@K",
    # newer than the paper (issue 46)
    "gbce": "gBCE", "ccl": "CCL", "simce": "SimCE", "logq": "SSM-logQ", "logq_corrected": "SSM-logQ (corrected)",
    "talos": "Talos@K", "sce": "SCE",
}

_ORDER = {loss: i for i, loss in enumerate(loss for members in FAMILIES.values() for loss in members)}
_FAMILY = {loss: family for family, members in FAMILIES.items() for loss in members}


def family_of(loss: str) -> str:
    """The family of a registered loss name; "other" for a loss outside the table (a user's own)."""
    return _FAMILY.get(loss, "other")


def order_key(loss: str) -> tuple[int, str]:
    """Sort key: the table's order, then losses outside it by name."""
    return _ORDER.get(loss, len(_ORDER)), loss


def paper_name(loss: str, k: int | None = None) -> str:
    """"SL@20" for ``("slk", 20)``, "SL" for ``"sl"``; an unknown loss keeps its registry name."""
    name = PAPER_NAMES.get(loss, loss)
    return name.replace("@K", f"@{k}") if k is not None else name

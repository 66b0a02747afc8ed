"""SL@K: SoftmaxLoss@K (Yang et al., KDD 2025, arXiv 2508.05673)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from bench.contracts import LossBatch, Scorer, SyncedRows, TrainData
from bench.datasets.base import CSR
from bench.errors import ConfigError
from bench.evaluation.metrics import ranks_within
from bench.losses.base import RecLoss, list_mean
from bench.losses.registry import LOSSES
from bench.losses.softmax import graded_softmax_terms, softmax_terms
from bench.thresholds import ThresholdEstimator, from_spec, kth_largest


def slk_loss(pos: Tensor, neg: Tensor, beta: Tensor, tau_d: float, tau_w: float, self_term: bool = False,
             valid: Tensor | None = None, detach_weight: bool = False) -> Tensor:
    r"""SL@K per pair, averaged:
    :math:`\sigma((s_{ui} - \beta_u^K)/\tau_w) \cdot \log \sum_{j \in N} e^{(s_{uj} - s_{ui})/\tau_d}`.

    The weight is not detached (the paper's form): through the weight, the gradient lowers a
    positive's score while its softmax term is positive (it is, with many negatives near it) and
    raises it once the term is negative. ``detach_weight=True`` removes that part (an ablation).

    Args:
        pos: (B,) positive scores; neg: (B, N) negative scores; beta: (B,) thresholds (no grad).
        tau_d, tau_w: temperatures of the softmax term and of the weight.
        self_term: include the positive in the softmax normaliser.
        valid: (B, N) true negatives of a shared draw (the others hold -inf), or None.
        detach_weight: no gradient through the weight.
    Returns:
        scalar.
    """
    weight = torch.sigmoid(((pos.detach() if detach_weight else pos) - beta.detach()) / tau_w)
    return (weight * softmax_terms(pos, neg, tau_d, self_term, valid)).mean()


def list_thresholds(scores: Tensor, mask: Tensor, k: int) -> Tensor:
    """(B,) the K-th largest score among each list's real documents (its smallest when the
    list is shorter than K: then every document is in the top K), without gradient."""
    ordered = scores.detach().masked_fill(~mask, float("-inf")).sort(dim=1, descending=True).values
    place = mask.sum(1, keepdim=True).clamp(min=1, max=k) - 1
    return ordered.gather(1, place).squeeze(1)


#: prefix_refresh measures its thresholds' drift on one batch row in this many (see prefix_thresholds)
STALENESS_STRIDE = 8
#: how SL@K thresholds rows of sequential data (``loss.seq_threshold``)
SEQ_THRESHOLDS = ("prefix", "prefix_refresh", "user")


@LOSSES.register("slk")
class SoftmaxLossAtK(RecLoss):
    """SL@K: the softmax loss weighted by a smooth top-K indicator of the positive
    (docs/losses.md#slk).

    ``beta`` (one threshold per user, a buffer: checkpointed) starts at 0 and, as in
    the reference code, is refreshed in every epoch e with (e + 1) % t_beta == 0, after
    every optimiser step, for the users of that batch, by the chosen estimator. On
    sequential data (rows are history prefixes) each row's threshold is instead the exact
    K-th score of its own query, computed at every step (:meth:`query_thresholds`), or with
    ``seq_threshold="prefix_refresh"`` computed in refresh epochs only and kept per prefix in between.

    Args:
        k: the K of NDCG@K (20 by default).
        tau_d: softmax temperature (SL's best tau).
        tau_w: weight temperature, in [0.5, 3].
        t_beta: refresh interval in epochs (5 or 20 in the paper).
        self_term: False = the paper's Algorithm C.1 and code; True = with the positive
            in the normaliser (what Theorem 3.2's bound assumes).
        detach_weight: False = the paper's (the weight's gradient flows); True = the weight
            is a constant of each step (an ablation).
        seq_threshold: sequential data only: "prefix" (default; each row's exact K-th score of
            its own history prefix, every step), "prefix_refresh" (that exact threshold taken
            only in refresh epochs, as the step's own, and kept per prefix for the epochs in
            between: the t_beta schedule of collaborative filtering applied to prefixes, at a
            fraction of the exact one's cost) or "user" (one threshold per user from its
            whole training history, estimated and refreshed as for collaborative filtering:
            an ablation).
        estimator: name of a threshold estimator (``sampled``, ``exact``, ...) or a dict
            ``{name: ..., **options}``.
        n_negatives: N.
        diagnostics_users: users sampled (fixed, seeded) for the validation diagnostics;
            0 disables them.
    """

    beta: Tensor  # buffers (checkpointed)
    diag_users: Tensor

    def __init__(self, k: int = 20, tau_d: float = 0.2, tau_w: float = 2.5, t_beta: int = 5,
                 self_term: bool = False, estimator: Any = "sampled", n_negatives: int = 1000,
                 diagnostics_users: int = 256, detach_weight: bool = False, seq_threshold: str = "prefix") -> None:
        super().__init__(n_negatives=n_negatives)
        if k < 1 or tau_d <= 0 or tau_w <= 0 or t_beta < 1:
            raise ConfigError(f"SL@K needs k >= 1, tau_d > 0, tau_w > 0, t_beta >= 1 "
                              f"(got {k}, {tau_d}, {tau_w}, {t_beta})")
        self.k, self.tau_d, self.tau_w, self.t_beta = int(k), float(tau_d), float(tau_w), int(t_beta)
        self.self_term = bool(self_term)
        self.detach_weight = bool(detach_weight)
        if seq_threshold not in SEQ_THRESHOLDS:
            raise ConfigError(f"loss.seq_threshold={seq_threshold!r}: use {' or '.join(SEQ_THRESHOLDS)}")
        self.seq_threshold = seq_threshold
        self.estimator: ThresholdEstimator = from_spec(estimator)
        self.diagnostics_users = int(diagnostics_users)
        self.refreshing = False
        self.refreshes = 0
        self.per_query = False
        self.per_prefix = False  # prefix_refresh on sequences: beta has one entry per training pair
        self._staleness: list[Tensor] = []
        self.register_buffer("beta", torch.zeros(0))
        self.register_buffer("diag_users", torch.zeros(0, dtype=torch.int64))
        self._train_csr: CSR | None = None

    def bind(self, data: TrainData) -> None:
        # sequential data: rows are history prefixes, thresholds are per query (see query_thresholds)
        self.per_query = data.sequences is not None and self.seq_threshold == "prefix"
        self.per_prefix = data.sequences is not None and self.seq_threshold == "prefix_refresh"
        # per prefix: a pair id is its target's position, so a prefix keeps its entry across epochs
        self.beta = torch.zeros(data.n_pairs if self.per_prefix else data.n_users, device=self.beta.device)
        self._staleness = []
        self.estimator.bind(data)
        self._train_csr = data.train
        gen = torch.Generator().manual_seed(0)
        n = min(self.diagnostics_users, data.n_users)
        self.diag_users = torch.randperm(data.n_users, generator=gen)[:n].sort().values.to(self.beta.device)

    def synced_rows(self, batch: LossBatch) -> SyncedRows:
        if self.per_prefix:  # stored thresholds change in refresh epochs only
            return [(self.beta, batch.require("pair_ids"))] if self.refreshing else []
        return [(self.beta, batch.require("users")), *self.estimator.synced_rows(batch)]

    def forward(self, batch: LossBatch) -> Tensor:
        if self.per_query:
            beta = self.query_thresholds(batch)
        elif self.per_prefix:
            beta = self.prefix_thresholds(batch)
        else:
            beta = self.beta[batch.require("users")]
        return slk_loss(batch.pos, batch.neg, beta, self.tau_d, self.tau_w, self.self_term, batch.neg_valid,
                        self.detach_weight)

    def list_loss(self, scores: Tensor, labels: Tensor, mask: Tensor,
                  generator: torch.Generator | None = None) -> Tensor:
        r"""Graded SL@K: graded SL (:func:`~bench.losses.softmax.graded_softmax_terms`) with each
        document's term weighted by :math:`\sigma((s_i - \beta^K)/\tau_w)`, :math:`\beta^K` the
        exact K-th score of its own list (:func:`list_thresholds`; lists are short, so no
        estimator and no refresh schedule); mean over the lists."""
        terms, weights, counted = graded_softmax_terms(scores, labels, mask, self.tau_d, self.self_term)
        beta = list_thresholds(scores, mask, self.k)
        s = scores.masked_fill(~mask, 0.0)
        top = torch.sigmoid(((s.detach() if self.detach_weight else s) - beta[:, None]) / self.tau_w)
        return list_mean((weights * top * terms).sum(1), counted)

    @torch.no_grad()
    def query_thresholds(self, batch: LossBatch, chunk: int = 4096) -> Tensor:
        """(B,) the exact K-th score of each row's own query (its full score row).

        In sequential recommendation a row's query is a history prefix, not the user: a
        per-user beta from the user's full-history state would not be on the scale of the
        prefix's scores. Each step therefore takes every row's exact threshold from the
        scores the step computed anyway (no state, no refresh schedule)."""
        rows = torch.arange(batch.pos.shape[0], device=batch.pos.device)
        full_scores = batch.require("full_scores")
        return torch.cat([kth_largest(full_scores(part), self.k) for part in rows.split(chunk)])

    @torch.no_grad()
    def prefix_thresholds(self, batch: LossBatch, chunk: int = 4096) -> Tensor:
        """(B,) each row's stored prefix threshold; in a refresh epoch first replaced by the exact one
        (:meth:`query_thresholds`' K-th score, taken from the step's own scores before its update:
        no extra scoring pass). A refresh also records, for :meth:`diagnostics`, how far the replaced
        (stale) thresholds were from what the exact mode would have used in this step, on the rows
        whose index in the batch is a multiple of :data:`STALENESS_STRIDE`: the rank each one held
        in its prefix's current score row (1 + #{items scored above it}; K when it equals the exact
        one) and (exact - stale) / tau_w. The scores are the step's training-mode ones (SASRec's
        dropout included), as the exact mode's thresholds are, so the rank holds the model's change
        since the last refresh and the dropout draw's difference alike."""
        pair_ids = batch.require("pair_ids")
        if not self.refreshing:
            return self.beta[pair_ids]
        full_scores = batch.require("full_scores")
        fresh, drift = [], []
        rows = torch.arange(batch.pos.shape[0], device=batch.pos.device)
        # a full rank count is one more pass over the (P, I) scores, about as dear as the K-th score
        measure = self.refreshes > 1  # before the first refresh every stored threshold is the initial 0
        for part in rows.split(chunk):
            scores = full_scores(part)
            kth = kth_largest(scores, self.k)
            fresh.append(kth)
            if measure:
                local = (part % STALENESS_STRIDE == 0).nonzero().squeeze(1)
                stale = self.beta[pair_ids[part[local]]]
                rank = ranks_within(scores[local], stale[:, None]).squeeze(1)
                drift.append(torch.stack([rank.to(kth.dtype), (kth[local] - stale) / self.tau_w], 1))
        beta = torch.cat(fresh)
        if measure:
            self._staleness.append(torch.cat(drift))
        self.beta[pair_ids] = beta.to(self.beta.dtype)
        return beta

    def on_train_epoch_start(self, epoch: int) -> None:
        self.refreshing = (epoch + 1) % self.t_beta == 0
        # refresh epochs so far, this one included (a checkpoint's epoch restores the count)
        self.refreshes = (epoch + 1) // self.t_beta
        if self.refreshing:  # the drift reported is the latest refresh epoch's
            self._staleness = []
        self.estimator.on_train_epoch_start(epoch)

    @torch.no_grad()
    def after_step(self, batch: LossBatch) -> None:
        if self.refreshing and not (self.per_query or self.per_prefix):
            beta = self.estimator.estimate_batch(batch, self.k)
            self.beta[batch.require("users")] = beta.to(self.beta.dtype)

    @torch.no_grad()
    def diagnostics(self, scorer: Scorer) -> dict[str, float]:
        """Estimate vs exact beta on a fixed user sample, and the Theorem 3.2 check.

        - ``beta_overestimate_rate``: share of users with beta > exact K-th score.
        - ``beta_effective_rank_median``: median of #{items with s >= beta} (ideal: K).
        - ``beta_gap_over_tau_w``: mean (exact - beta) / tau_w, what the weight feels.
        - ``thm32_holds``: among users with H > 1 training positives in their top K,
          the share for which -log DCG@K(u) <= sum_i w_ui * log sum_{j in I} e^{(s_uj - s_ui)/tau_d}
          (full catalogue, self term included) with the current beta.
        - ``thm32_holds_without_self``: the same with the sum over j != i, the form that
          ``self_term=false`` (the paper's Algorithm C.1) trains; without the e^0 term a
          positive far above every other item makes its log-sum negative, so this can fail
          where the theorem's own form holds.
        """
        if self.per_prefix:
            return self._prefix_staleness()
        users = self.diag_users
        if users.numel() == 0 or self._train_csr is None or self.per_query:
            return {}
        scores = scorer.score_users(users).float()
        exact = kth_largest(scores, self.k)
        beta = self.beta[users]
        eff_rank = (scores >= beta[:, None]).sum(1).float()
        out = {
            "beta_overestimate_rate": float((beta > exact).float().mean()),
            "beta_effective_rank_median": float(eff_rank.median()),
            "beta_gap_over_tau_w": float(((exact - beta) / self.tau_w).mean()),
        }
        # Theorem 3.2 on the training positives
        train = self._train_csr.to(users.device)
        pos_items, valid = train.padded_rows(users)
        pos = scores.gather(1, pos_items)
        rank = ranks_within(scores, pos)  # 1 + #{s > s_ui}
        in_top = valid & (rank <= self.k)
        hits = in_top.sum(1)
        dcg = torch.where(in_top, 1.0 / torch.log2(rank.float() + 1), torch.zeros_like(pos)).sum(1)
        # log sum_j exp((s_uj - s_ui)/tau) = logsumexp_j(s_uj/tau) - s_ui/tau: no (b, P, I) tensor
        lse = torch.logsumexp(scores / self.tau_d, dim=1, keepdim=True) - pos / self.tau_d
        weight = torch.sigmoid((pos - beta[:, None]) / self.tau_w)
        # without the self term: log(e^lse - 1), written so that neither side overflows
        lse_without_self = lse + torch.log(-torch.expm1(-lse))
        eligible = hits > 1
        if eligible.any():
            minus_log_dcg = -torch.log(dcg[eligible])
            for key, terms in (("thm32_holds", lse), ("thm32_holds_without_self", lse_without_self)):
                bound = torch.where(valid, weight * terms, torch.zeros_like(terms)).sum(1)
                out[key] = float((minus_log_dcg <= bound[eligible] + 1e-6).float().mean())
        out["thm32_eligible_users"] = float(eligible.sum())
        return out

    def _prefix_staleness(self) -> dict[str, float]:
        """prefix_refresh's drift at its latest refresh epoch (every measured row of that epoch; see
        :meth:`prefix_thresholds`): the median rank of the stored thresholds in their prefixes' scores
        just before they were replaced (``prefix_beta_stale_rank_median``; K where they equal what the
        exact mode would have used) and the mean (exact - stale) / tau_w
        (``prefix_beta_stale_gap_over_tau_w``). The same values at every validation until the next
        refresh epoch; nothing before the second refresh, nor after a resume until the next refresh
        (they are not checkpointed), nor from other data-parallel ranks (this rank's rows)."""
        if not self._staleness:
            return {}
        drift = torch.cat(self._staleness)
        return {"prefix_beta_stale_rank_median": float(drift[:, 0].median()),
                "prefix_beta_stale_gap_over_tau_w": float(drift[:, 1].mean())}

"""SASRec: causal self-attention over a user's item history (Kang & McAuley, ICDM 2018)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from bench.contracts import Queries, TrainData, grouped_scores, score_candidates, take_rows
from bench.errors import ConfigError
from bench.models.base import EmbeddingModel
from bench.models.registry import MODELS


class ThreadStableLayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` whose gradients do not depend on the CPU thread count.

    The fused CPU kernel sums the weight and bias gradients over rows in per-thread buffers,
    so they change in the last bits with the number of threads. Normalising without the affine
    part and applying it as a separate ``addcmul`` leaves those sums to autograd's reductions,
    which split the same way at any thread count.
    """

    def forward(self, x: Tensor) -> Tensor:
        y = nn.functional.layer_norm(x, self.normalized_shape, None, None, self.eps)
        if self.weight is None:
            return y
        return y * self.weight if self.bias is None else torch.addcmul(self.bias, y, self.weight)


class UniformMaskDropout(nn.Dropout):
    """``nn.Dropout`` with its mask drawn by ``torch.rand`` on CPU: the same inverted dropout
    (each entry kept with probability 1 - p and scaled by 1 / (1 - p)), about 3.5x faster.

    PyTorch's CPU dropout draws its mask with ``bernoulli_``, which took ~40% of a SASRec step on
    Amazon Games (10 dropouts of 128 x 50 x 50 a step, ~5 ms each against ~1.4 ms here, one
    thread). On GPUs the fused kernel is kept.
    """

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p in (0, 1) or x.is_cuda:
            return super().forward(x)
        return x * torch.rand_like(x).ge_(self.p).mul_(1.0 / (1.0 - self.p))


class SASRecBlock(nn.Module):
    r"""One pre-norm transformer block, :math:`x + \mathrm{Att}(\mathrm{LN}(x))`, then
    :math:`x + \mathrm{FFN}(\mathrm{LN}(x))` with a ReLU feed-forward of width d.

    Written out rather than ``nn.TransformerEncoderLayer`` because PyTorch's CPU softmax and
    attention backward kernels split their sums by thread, so a sweep job (cores / jobs threads)
    would train differently from a single run; here the softmax is :math:`\exp(s - \mathrm{lse}(s))`,
    whose gradient is the same at any thread count.

    Args:
        dim: d. heads: attention heads (d divisible by heads). dropout: on attention weights and
            each residual branch, in training.
    """

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = ThreadStableLayerNorm(dim), ThreadStableLayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.ffn = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), UniformMaskDropout(dropout), nn.Linear(dim, dim))
        self.dropout = UniformMaskDropout(dropout)
        nn.init.xavier_uniform_(self.qkv.weight)  # as nn.MultiheadAttention initialises
        nn.init.zeros_(self.qkv.bias)
        nn.init.zeros_(self.out.bias)

    def attention(self, x: Tensor, hidden: Tensor) -> Tensor:
        """(B, L, d) inputs, (B, L, L) bool ``hidden`` (True: the key is not visible) -> (B, L, d)."""
        B, L, d = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        s = s.masked_fill(hidden.unsqueeze(1), float("-inf"))
        weights = self.dropout(torch.exp(s - s.logsumexp(-1, keepdim=True)))  # softmax, thread-stable
        return self.out((weights @ v).transpose(1, 2).reshape(B, L, d))

    def forward(self, x: Tensor, hidden: Tensor) -> Tensor:
        x = x + self.dropout(self.attention(self.norm1(x), hidden))
        return x + self.dropout(self.ffn(self.norm2(x)))


@MODELS.register("sasrec")
class SASRec(EmbeddingModel):
    r"""The state after a history :math:`(i_1, ..., i_t)` (its last ``max_len`` items) is
    :math:`h_t = \mathrm{LN}(\mathrm{Transformer}_{causal}(E_{i} \sqrt{d} + P)[t])`; the
    score of item j is :math:`f(h_t, e_j)` with the item table shared between input and output.

    Training pairs are (history up to t, item t+1); evaluation scores each user's state
    after the training history (validation) or training + validation history (test).

    Args:
        n_users, n_items: sizes. dim: d. max_len: history window. layers, heads: transformer.
        dropout: in training. score: "dot" (SASRec's) or "cosine".
        pack: in training, place several users' histories side by side in one row of ``max_len``
            (each attending only to its own past, positions as if alone) instead of one user a
            row padded on the left. The same model: states equal the padded ones up to rounding
            with dropout off; only the dropout draws differ. On Amazon Beauty and Games, where a
            user holds ~7 training items and 13% of a padded batch is real, this encodes ~5x fewer
            positions. Evaluation is not packed.
        separate_output: score items with their own (n_items, d) table instead of the input table
            (gSASRec's ``reuse_item_embeddings=False``, Petrov & Macdonald 2023); xavier-normal as the input's.
    """

    seq_items: Tensor  # buffers set by bind()
    seq_indptr: Tensor
    valid_item: Tensor

    tasks = ("seq",)

    def __init__(self, n_users: int, n_items: int, dim: int = 64, max_len: int = 50, layers: int = 2,
                 heads: int = 1, dropout: float = 0.2, score: str = "dot", chunk: int = 1024,
                 pack: bool = False, separate_output: bool = False) -> None:
        super().__init__(n_users, n_items, score)
        if max_len < 1 or dim % heads:
            raise ConfigError(f"model.max_len must be >= 1 and model.dim divisible by model.heads "
                              f"(got {max_len}, {dim}, {heads})")
        self.max_len, self.heads, self.chunk, self.pad = int(max_len), int(heads), int(chunk), n_items
        self.pack = bool(pack)
        self.item_emb = nn.Embedding(n_items + 1, dim, padding_idx=n_items)
        self.pos_emb = nn.Embedding(max_len, dim)
        self.dropout = UniformMaskDropout(dropout)
        self.blocks = nn.ModuleList(SASRecBlock(dim, heads, dropout) for _ in range(layers))
        self.norm = ThreadStableLayerNorm(dim)
        nn.init.xavier_normal_(self.item_emb.weight)
        with torch.no_grad():
            self.item_emb.weight[self.pad].zero_()
        # made after every other table so that the shared-table model draws the same initial weights
        self.out_emb: nn.Embedding | None = None
        if separate_output:
            self.out_emb = nn.Embedding(n_items, dim)
            nn.init.xavier_normal_(self.out_emb.weight)
        for name_ in ("seq_items", "seq_indptr", "valid_item"):
            self.register_buffer(name_, torch.zeros(0, dtype=torch.long), persistent=False)

    def bind(self, data: TrainData) -> None:
        seq = data.sequences
        if seq is None:
            raise ConfigError("model=sasrec needs item sequences: use task=seq")
        device = self.item_emb.weight.device
        self.seq_items, self.seq_indptr = seq.items.to(device), seq.indptr.to(device)
        self.valid_item = seq.valid_item.to(device)

    # histories ----------------------------------------------------------------------
    def _window(self, starts: Tensor, ends: Tensor, extra: Tensor | None = None) -> Tensor:
        """(B, L) item ids of items[starts:ends] (+ one extra last item), right-aligned, padded left."""
        L = self.max_len
        take = L if extra is None else L - 1
        idx = ends[:, None] - take + torch.arange(take, device=ends.device)
        ok = idx >= starts[:, None]
        window = torch.where(ok, self.seq_items[idx.clamp(min=0)], torch.full_like(idx, self.pad))
        if extra is not None:
            last = torch.where(extra >= 0, extra, torch.full_like(extra, self.pad))
            window = torch.cat([window, last[:, None]], dim=1)
            # a user without a validation item: shift so the real history stays last
            missing = extra < 0
            if missing.any():
                window[missing] = self._window(starts[missing], ends[missing])
        return window

    def encode_all(self, window: Tensor) -> Tensor:
        """(B, L) right-aligned histories -> (B, L, d) states after each position (causal)."""
        L = window.shape[1]
        pad = window == self.pad
        # causal, and padded keys hidden; each position may always see itself, so that no
        # attention row is empty (an all-masked row would put NaN into later layers)
        future = torch.triu(torch.ones(L, L, dtype=torch.bool, device=window.device), diagonal=1)
        eye = torch.eye(L, dtype=torch.bool, device=window.device)
        hidden = future.unsqueeze(0) | (pad.unsqueeze(1) & ~eye.unsqueeze(0))
        return self._transform(window, self.pos_emb.weight[-L:], hidden)

    def _transform(self, window: Tensor, positions: Tensor, hidden: Tensor) -> Tensor:
        """(B, L) item ids, their (L, d) or (B, L, d) position embeddings and the (B, L, L) mask
        of keys each position may not see -> (B, L, d) states."""
        x = self.item_emb(window) * math.sqrt(self.item_emb.embedding_dim) + positions
        x = self.dropout(x)
        for block in self.blocks:
            x = block(x, hidden)
        return self.norm(x)

    def _encode_packed(self, starts: Tensor, ends: Tensor) -> tuple[Tensor, Tensor]:
        """Each user's last ``n_u = min(len_u - 1, max_len)`` inputs, packed into rows of
        ``max_len`` (first fit, longest first) -> ((P, d) states, (P,) target positions) in the
        order of the padded encoding: user by user, positions ascending."""
        L, device = self.max_len, starts.device
        n = (ends - starts - 1).clamp(min=0, max=L)
        # first fit decreasing, in Python: a batch is a few hundred users
        placed: list[tuple[int, int, int]] = []  # (user, row, first column)
        free: list[int] = []  # cells left in each row
        for u in sorted(range(len(n)), key=lambda i: -int(n[i])):
            need = int(n[u])
            r = next((r for r, f in enumerate(free) if f >= need), len(free))
            if r == len(free):
                free.append(L)
            placed.append((u, r, L - free[r]))
            free[r] -= need
        placed.sort()
        row = torch.tensor([r for _, r, _ in placed], dtype=torch.long, device=device)
        col = torch.tensor([c for _, _, c in placed], dtype=torch.long, device=device)
        users = torch.repeat_interleave(torch.arange(len(n), device=device), n)
        t = torch.arange(int(n.sum()), device=device) - torch.repeat_interleave(torch.cumsum(n, 0) - n, n)
        flat = (row[users] * L + col[users] + t)  # each real input's cell in the packed rows
        target_pos = ends[users] - n[users] + t
        R = len(free)
        window = torch.full((R * L,), self.pad, dtype=torch.long, device=device)
        window[flat] = self.seq_items[target_pos - 1]
        segment = torch.full((R * L,), -1, dtype=torch.long, device=device)
        segment[flat] = users
        position = torch.zeros(R * L, dtype=torch.long, device=device)
        position[flat] = L - n[users] + t  # where the item sits in the padded, right-aligned window
        window, segment, position = window.view(R, L), segment.view(R, L), position.view(R, L)
        future = torch.triu(torch.ones(L, L, dtype=torch.bool, device=device), diagonal=1)
        hidden = future.unsqueeze(0) | (segment.unsqueeze(2) != segment.unsqueeze(1))
        states = self._transform(window, self.pos_emb(position), hidden)
        return states.reshape(R * L, -1)[flat], target_pos

    def user_states(self, users: Tensor, stage: str = "valid") -> Tensor:
        """(B, d) states after each user's training history (+ validation item at test)."""
        starts, ends = self.seq_indptr[users], self.seq_indptr[users + 1]
        extra = self.valid_item[users] if stage == "test" else None
        return self.encode_all(self._window(starts, ends, extra))[:, -1]

    # scoring ------------------------------------------------------------------------
    def _item_emb(self) -> Tensor:
        """(n_items, d) the table items are scored with."""
        if self.out_emb is not None:
            return self.out_emb.weight
        return self.item_emb.weight[: self.n_items]  # without the padding row

    def embeddings(self) -> tuple[Tensor, Tensor]:
        users = torch.arange(self.n_users, device=self.item_emb.weight.device)
        return torch.cat([self.user_states(part) for part in users.split(self.chunk)]), self._item_emb()

    def score_items(self, users: Tensor, items: Tensor) -> Tensor:
        return score_candidates(self.normalise(self.user_states(users)), self._item_emb(), items, self.cosine)

    def score_users(self, users: Tensor) -> Tensor:
        return self.normalise(self.user_states(users)) @ self.normalise(self._item_emb()).T

    def score_groups(self, users: Tensor, items: Tensor, draws: Tensor) -> tuple[Tensor, Tensor]:
        # one encoder pass over the users' histories serves both the rows' items and the draws
        states = self.normalise(self.user_states(users))
        return (score_candidates(states, self._item_emb(), items, self.cosine),
                grouped_scores(states, self.normalise(take_rows(self._item_emb(), draws))))

    @torch.no_grad()
    def full_scorer(self, stage: str = "valid") -> Callable[[Tensor], Tensor]:
        items_t = self.normalise(self._item_emb()).T.contiguous()
        return lambda users: torch.cat([self.normalise(self.user_states(part, stage)) @ items_t
                                        for part in users.split(self.chunk)])

    def encode(self, rows: Tensor) -> Queries:
        """``rows`` hold users: each contributes its last ``max_len`` next-item pairs (the
        window SASRec trains on), all positions encoded in one causal pass; a pair's query
        is the state after its history prefix and its pair id the target's position in
        the sequences."""
        users = rows[:, 0]
        starts, ends = self.seq_indptr[users], self.seq_indptr[users + 1]
        if self.pack and self.training:
            vectors, target_pos = self._encode_packed(starts, ends)
            owner = torch.repeat_interleave(users, (ends - starts - 1).clamp(min=0, max=self.max_len))
            return Queries(users=owner, items=self.seq_items[target_pos], pair_ids=target_pos,
                           vectors=self.normalise(vectors), item_emb=self._item_emb(), cosine=self.cosine)
        L = self.max_len
        idx = ends[:, None] - (L + 1) + torch.arange(L + 1, device=users.device)  # inputs then the last target
        ok = idx >= starts[:, None]
        seq = torch.where(ok, self.seq_items[idx.clamp(min=0)], torch.full_like(idx, self.pad))
        inputs, targets, target_pos = seq[:, :-1], seq[:, 1:], idx[:, 1:]
        states = self.encode_all(inputs)  # (B, L, d)
        valid = ok[:, :-1]  # the input is real, hence so is the target after it
        return Queries(users=users[:, None].expand_as(inputs)[valid], items=targets[valid],
                       pair_ids=target_pos[valid], vectors=self.normalise(states[valid]), item_emb=self._item_emb(),
                       cosine=self.cosine)

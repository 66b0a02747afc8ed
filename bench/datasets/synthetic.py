"""A built-in generator of implicit feedback with learnable structure.

Users and items get latent factors ``p_u, q_i ~ N(0, I_d / d)`` and items a popularity
``pop_i ∝ rank_i^(-alpha)`` (power law, Zipf exponent ``alpha``). User u interacts with
``n_u = min_per_user + Poisson(mean_per_user - min_per_user)`` distinct items drawn
without replacement with probability ∝ ``pop_i * exp(p_u·q_i / temperature)`` (Gumbel
top-k). A per-user random ``test_fraction`` (at least one item) becomes the test set, as
in the paper's data. A model that learns the factors and the popularity beats a
popularity ranking, so the data exercises real training.
"""

from __future__ import annotations

import torch

from bench.datasets.base import Interactions, canonical_pairs, per_user_split


class Synthetic:
    """Synthetic data set (see module docstring for the generative model).

    Args:
        n_users, n_items: catalogue sizes.
        dim: latent dimension of the generator.
        mean_per_user: mean interactions per user (before the test split).
        min_per_user: minimum interactions per user.
        alpha: popularity power-law exponent (0 = uniform popularity).
        temperature: sharpness of the preference term (smaller = more predictable).
        test_fraction: per-user share held out for test.
        seed: seed of the data (fixed across runs, like a shipped data set).
    """

    def __init__(self, n_users: int = 1000, n_items: int = 500, dim: int = 16, mean_per_user: float = 20.0,
                 min_per_user: int = 10, alpha: float = 0.8, temperature: float = 0.1,
                 test_fraction: float = 0.2, seed: int = 2024, name: str = "synthetic") -> None:
        if min_per_user > n_items:
            raise ValueError("min_per_user cannot exceed n_items")
        self.n_users, self.n_items, self.dim = n_users, n_items, dim
        self.mean_per_user, self.min_per_user = mean_per_user, min_per_user
        self.alpha, self.temperature, self.test_fraction = alpha, temperature, test_fraction
        self.seed, self.name = seed, name

    def load(self) -> Interactions:
        gen = torch.Generator().manual_seed(int(self.seed))
        p = torch.randn(self.n_users, self.dim, generator=gen) / self.dim ** 0.5
        q = torch.randn(self.n_items, self.dim, generator=gen) / self.dim ** 0.5
        ranks = torch.randperm(self.n_items, generator=gen).double() + 1.0
        log_pop = (-self.alpha * torch.log(ranks)).float()
        extra = max(self.mean_per_user - self.min_per_user, 0.0)
        n_u = self.min_per_user + torch.poisson(torch.full((self.n_users,), float(extra)), generator=gen).long()
        n_u = n_u.clamp(max=self.n_items)
        chunks = []
        chunk = max(1, (1 << 22) // self.n_items)  # bounded memory for large catalogues
        for start in range(0, self.n_users, chunk):
            stop = min(start + chunk, self.n_users)
            logits = p[start:stop] @ q.T / self.temperature + log_pop
            gumbel = -torch.log(-torch.log(torch.rand(logits.shape, generator=gen).clamp_min(1e-12)))
            order = torch.argsort(logits + gumbel, dim=1, descending=True)
            take = torch.arange(self.n_items)[None, :] < n_u[start:stop, None]
            rows = torch.arange(start, stop)[:, None].expand_as(order)
            chunks.append(torch.stack([rows[take], order[take]], 1))
        pairs = canonical_pairs(torch.cat(chunks))
        train, test = per_user_split(pairs, self.n_users, self.test_fraction, gen)
        return Interactions(name=self.name, n_users=self.n_users, n_items=self.n_items,
                            train=train, test=test, info={"generator": "synthetic", "seed": self.seed})

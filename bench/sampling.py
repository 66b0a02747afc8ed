"""Seeded, vectorised sampling: batch order and negative items.

Randomness is counter-based: every draw uses a fresh generator seeded from
(run seed, epoch, batch index, purpose). A run resumed from an end-of-epoch checkpoint
therefore sees exactly the batches and negatives of an uninterrupted run, with no
generator state to save.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from bench.contracts import group_layout
from bench.datasets.base import CSR
from bench.errors import ConfigError, DataError

_SHUFFLE, _NEGATIVES = 1, 2

#: largest (groups x items) membership table that :meth:`UniformNegativeSampler.shared_hits` builds (4 MiB of bools)
MAX_KEY_TABLE = 1 << 22



def derive_seed(*keys: int) -> int:
    """A 63-bit seed that depends on every key (numpy's SeedSequence hashing)."""
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(2, np.uint64)[0] >> np.uint64(1))


def make_generator(device: torch.device | str, *keys: int) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(*keys))
    return gen


def negatives_generator(device: torch.device | str, seed: int, epoch: int, batch: int) -> torch.Generator:
    """The generator of one training batch's negatives (the same in a resumed run)."""
    return make_generator(device, seed, epoch, batch, _NEGATIVES)


class PairBatchSampler(torch.utils.data.Sampler):
    """Yields index tensors of shuffled mini-batches; ``set_epoch`` picks the shuffle.

    Lightning calls ``set_epoch`` on a train loader's sampler at every epoch start.

    Args:
        n: number of training pairs.
        batch_size: pairs per batch (the last batch may be smaller).
        seed: run seed.
        shuffle: reshuffle every epoch.
        rank, world: this process's share under data-parallel training: batch b of the
            epoch goes to rank b mod world; when the batch count does not divide, the first
            batches are reused so every rank takes the same number of steps.
    """

    def __init__(self, n: int, batch_size: int, seed: int, shuffle: bool = True, rank: int = 0,
                 world: int = 1) -> None:
        self.n, self.batch_size, self.seed, self.shuffle = n, batch_size, seed, shuffle
        self.rank, self.world = rank, world
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        n_batches = (self.n + self.batch_size - 1) // self.batch_size
        return (n_batches + self.world - 1) // self.world

    def __iter__(self):
        if self.shuffle:
            order = torch.randperm(self.n, generator=make_generator("cpu", self.seed, self.epoch, _SHUFFLE))
        else:
            order = torch.arange(self.n)
        batches = list(order.split(self.batch_size))
        if self.world > 1:
            batches += batches[: len(self) * self.world - len(batches)]
            batches = batches[self.rank::self.world]
        yield from batches


class IndexedPairs(torch.utils.data.Dataset):
    """(E, 2) pairs indexed by a whole batch of positions at once.

    An item is a (B, 3) tensor of (user, item, pair id): the pair id is the row in
    ``pairs``, for losses that keep per-pair state.
    """

    def __init__(self, pairs: Tensor) -> None:
        self.rows = torch.cat([pairs, torch.arange(pairs.shape[0]).unsqueeze(1)], dim=1)

    def __len__(self) -> int:
        return self.rows.shape[0]

    def __getitem__(self, idx: Tensor) -> Tensor:
        return self.rows[idx]


class UniformNegativeSampler:
    """Negatives uniform over the items that are not the user's training positives.

    Draws are fresh for every (u, i) pair, by rejection: draw uniformly from all items,
    redraw those that hit a positive. By default they are i.i.d. with replacement; with
    ``distinct=True`` a pair's N negatives are N distinct items, uniform over the N-subsets of
    the user's non-positives, as the SL@K reference code draws them (where N is close to the
    number of non-positives, as on Health, that sample covers more distinct items).
    Membership is read from a (B, I) bitmap of the batch's users where a row's draws are many
    (B*I bytes and one gather, far less than a search per draw at N = 1000), and by a binary
    search per draw in the sorted training pairs where they are few (BPR's one negative a pair:
    the bitmap would be most of the step); see :class:`_Positives`. The draws are the same.

    Args:
        train: the training positives per user.
    """

    def __init__(self, train: CSR) -> None:
        full = (train.degrees() >= train.n_items).nonzero()
        if full.numel():
            raise DataError(f"user {int(full[0])} has every item as a training positive; no negative can be drawn")
        self.train = train
        self._log_prob: dict[str, Tensor] = {}

    def _log_q(self) -> Tensor:
        return torch.full((self.train.n_items,), -float(np.log(self.train.n_items)))

    def _positive_mass(self) -> Tensor:
        """(n_users,) float64 Q(P_u): the probability that one draw is one of u's training positives."""
        return self.train.degrees().double() / self.train.n_items

    def log_prob(self, device: torch.device | str = "cpu") -> Tensor:
        """(I,) log Q(j), the probability that one draw is item j before a row's own positives are
        redrawn (or masked): -log I for every item here. What a logQ-corrected loss subtracts."""
        key = str(device)
        if key not in self._log_prob:
            self._log_prob[key] = self._log_q().to(device)
        return self._log_prob[key]

    def log_kept(self, users: Tensor) -> Tensor:
        """(P,) log(1 - Q(P_u)): the share of Q a per-pair draw for user u is restricted to (its training
        positives are drawn again), so that a drawn negative's actual proposal is Q(j) / (1 - Q(P_u))."""
        key = f"keep:{users.device}"
        if key not in self._log_prob:  # once per device
            self._log_prob[key] = torch.log1p(-self._positive_mass()).float().to(users.device)
        return self._log_prob[key][users]

    def sample_shared(self, n: int, generator: torch.Generator, device: torch.device | str = "cpu",
                      groups: int | None = None, distinct: bool = False) -> Tensor:
        """Item ids drawn uniformly from the whole catalogue, with replacement or (``distinct``)
        n different items: (n,), one draw that every row of a batch shares, or (groups, n), one
        draw per group of rows (rows mask their own positives, see :meth:`shared_hits`)."""
        shape = (n,) if groups is None else (groups, n)
        if not distinct:
            return torch.randint(0, self.train.n_items, shape, generator=generator, device=device)
        if n > self.train.n_items:
            raise ConfigError(f"train.distinct_negatives=true draws {n} distinct items, but the catalogue has "
                              f"{self.train.n_items}; lower loss.n_negatives or set train.distinct_negatives=false")
        keys = torch.rand((1 if groups is None else groups, self.train.n_items), generator=generator, device=device)
        return keys.topk(n, dim=1, largest=False).indices.view(shape)

    def shared_hits(self, users: Tensor, items: Tensor) -> tuple[Tensor, Tensor]:
        """Where shared draws hit a row's own training positives, as sparse coordinates.

        Args:
            users: (B,) user of each row.
            items: (M,) one draw for every row, or (G, M) one draw per group of
                s = ceil(B / G) consecutive rows (row b takes ``items[b // s]``); repeats allowed.
        Returns:
            (rows, cols): two (H,) int64 tensors, every (b, j) whose drawn item is a training
            positive of ``users[b]``, each once. H is about B * M * |P_u| / |I|, a few per row,
            so masking costs H writes instead of a pass over the (B, M) scores.
        """
        train = self.train.on(users.device)
        draws = items.reshape(-1, items.shape[-1])
        n_groups, m = draws.shape
        size, _ = group_layout(users.numel(), n_groups)
        rows, positives = train.gather_rows(users)
        # draw entries and (row, positive) pairs as keys group * |I| + item; the draw's columns
        # sorted by key, and where each pair's key starts in that order and how often it occurs,
        # by a sorted search; never a (B, |I|) bitmap. When a (G * |I|,) membership table is small
        # (655 KB of bools on Gowalla with 16 groups: it stays in cache) one lookup per pair first
        # keeps the few pairs whose item was drawn, so the search runs on ~N·|P_u|/|I| per row
        # (half the time of a count table with a cumulative sum over it)
        n_keys = n_groups * train.n_items
        keys = (draws + torch.arange(n_groups, device=users.device).unsqueeze(1) * train.n_items).reshape(-1)
        wanted = torch.div(rows, size, rounding_mode="floor") * train.n_items + positives
        if n_keys <= MAX_KEY_TABLE:
            member = torch.zeros(n_keys, dtype=torch.bool, device=users.device).index_fill_(0, keys, True)
            drawn = member[wanted]
            rows, wanted = rows[drawn], wanted[drawn]
        sorted_keys, order = keys.sort(stable=True)
        first = torch.searchsorted(sorted_keys, wanted)
        hits = torch.searchsorted(sorted_keys, wanted, right=True) - first
        drawn = hits > 0
        rows, first, hits = rows[drawn], first[drawn], hits[drawn]
        within = torch.arange(int(hits.sum()), device=users.device) - torch.repeat_interleave(
            torch.cumsum(hits, 0) - hits, hits)
        cols = order[torch.repeat_interleave(first, hits) + within] % m
        return torch.repeat_interleave(rows, hits), cols

    def sample(self, users: Tensor, n: int, generator: torch.Generator, distinct: bool = False) -> Tensor:
        """(B, n) negative item ids for users (B,), drawn with ``generator``; ``distinct``: no
        item twice in a row (each row a uniform n-subset of the user's non-positives)."""
        train = self.train.on(users.device)
        if not distinct:
            return _non_positives(_Positives(train, users, n), n, generator)[0]
        positives = train.dense_rows(users)
        room = train.n_items - positives.sum(1)
        if bool((room < n).any()):
            row = int((room < n).nonzero()[0])
            raise ConfigError(f"train.distinct_negatives=true draws {n} distinct negatives per pair, but user "
                              f"{int(users[row])} has only {int(room[row])} non-positive items; lower "
                              "loss.n_negatives or set train.distinct_negatives=false")
        spare = room - n  # (B,) the non-positives each row leaves out
        if int(spare.max()) >= n:
            return _distinct_non_positives(train, users, positives, n, generator)
        # most non-positives are taken (Health: 1,000 of ~1,180): draw the few left out instead,
        # the first spare_u of a distinct draw (any fixed positions of it are a uniform subset)
        k = int(spare.max())
        left_out = positives.clone()
        if k:
            out = _distinct_non_positives(train, users, positives, k, generator)
            take = torch.arange(k, device=users.device)[None, :] < spare[:, None]
            left_out[torch.arange(users.numel(), device=users.device)[:, None].expand(-1, k)[take], out[take]] = True
        items = (~left_out).nonzero()[:, 1].view(users.numel(), n)  # exactly n per row, by item id
        # out of id order: one random permutation of the columns, rotated by a random offset per
        # row, so that any fixed columns (a loss's first few) hold a uniform subset of each row
        shift = torch.randint(0, n, (users.numel(), 1), generator=generator, device=users.device)
        return items.gather(1, (torch.randperm(n, generator=generator, device=users.device) + shift) % n)


SAMPLERS = ("uniform", "popularity")
#: rounds of redrawing a popularity draw that hit a row's positive before drawing the rest exactly
MAX_REDRAWS = 32


class PopularityNegativeSampler(UniformNegativeSampler):
    r"""Negatives drawn with probability :math:`Q(j) \propto c_j^{\alpha}`, :math:`c_j` item j's
    number of training interactions (``train.sampler=popularity``, ``train.popularity_power`` α;
    word2vec's 0.75, 1 for proportional, 0 for uniform over the catalogue); a draw that hits one of
    the row's own training positives is drawn again (per pair) or masked (shared draws), as for
    uniform negatives. Items without a training interaction are never drawn (α > 0). A loss with
    a logQ correction reads :meth:`log_prob`.

    Args:
        train: the training positives per user.
        power: α >= 0.
    """

    def __init__(self, train: CSR, power: float = 1.0) -> None:
        super().__init__(train)
        if not power >= 0:
            raise ConfigError(f"train.popularity_power={power} is out of range: use a number >= 0 (1: proportional)")
        counts = torch.bincount(train.indices, minlength=train.n_items).double()
        weights = counts.pow(power) if power > 0 else torch.ones_like(counts)
        self.probs = weights / weights.sum()
        # a user whose non-positives all have Q = 0 could never be given a negative
        mass = self._positive_mass()
        stuck = (mass > 1 - 1e-9).nonzero()
        if stuck.numel():
            raise DataError(f"user {int(stuck[0])} has every item of nonzero popularity as a training positive; no "
                            "popularity-sampled negative can be drawn (lower train.popularity_power to 0 or use "
                            "train.sampler=uniform)")
        self._accept, self._alias = alias_table(self.probs)

    def _log_q(self) -> Tensor:
        return self.probs.log().float()

    def _positive_mass(self) -> Tensor:
        return torch.zeros(self.train.n_users, dtype=torch.float64).index_add_(
            0, self.train.row_ids(), self.probs[self.train.indices])

    def _draw(self, count: int, generator: torch.Generator, device: torch.device | str) -> Tensor:
        """``count`` i.i.d. items from Q by the alias method: a uniform column, kept with its acceptance
        probability, else its alias (two uniform draws per item; ~8x faster than ``torch.multinomial``)."""
        if str(device) != str(self._accept.device):
            self._accept, self._alias = self._accept.to(device), self._alias.to(device)
        column = torch.randint(0, self.train.n_items, (count,), generator=generator, device=device)
        keep = torch.rand(count, generator=generator, device=device, dtype=torch.float64) < self._accept[column]
        return torch.where(keep, column, self._alias[column])

    def sample_shared(self, n: int, generator: torch.Generator, device: torch.device | str = "cpu",
                      groups: int | None = None, distinct: bool = False) -> Tensor:
        if distinct:
            raise ConfigError("train.distinct_negatives=true draws uniformly; with train.sampler=popularity set it "
                              "to false")
        shape = (n,) if groups is None else (groups, n)
        return self._draw(int(np.prod(shape)), generator, device).view(shape)

    def sample(self, users: Tensor, n: int, generator: torch.Generator, distinct: bool = False) -> Tensor:
        if distinct:
            raise ConfigError("train.distinct_negatives=true draws uniformly; with train.sampler=popularity set it "
                              "to false")
        train = self.train.on(users.device)
        positives = _Positives(train, users, n)
        draws, left = _non_positives(positives, n, generator,
                                     lambda count: self._draw(count, generator, users.device), MAX_REDRAWS)
        flat = draws.view(-1)
        # a user whose positives hold most of Q (rare): the rest drawn from Q restricted to its non-positives
        for row in (left // n).unique().tolist():
            at = left[left // n == row]
            own = train.dense_rows(users[row:row + 1])[0]
            probs = self.probs.to(users.device).masked_fill(own, 0.0)
            flat[at] = torch.multinomial(probs, at.numel(), replacement=True, generator=generator)
        return draws


def alias_table(probs: Tensor) -> tuple[Tensor, Tensor]:
    """Walker's alias table of a distribution (Vose's construction): (acceptance (I,) float64, alias (I,)
    int64), so that column k drawn uniformly, kept with probability ``acceptance[k]`` and otherwise
    replaced by ``alias[k]``, is item j with probability ``probs[j]``."""
    n = probs.numel()
    scaled = (probs.double() / probs.double().sum() * n).tolist()
    accept, alias = [1.0] * n, list(range(n))
    small = [i for i, q in enumerate(scaled) if q < 1.0]
    large = [i for i, q in enumerate(scaled) if q >= 1.0]
    while small and large:
        s, g = small.pop(), large.pop()
        accept[s], alias[s] = scaled[s], g
        scaled[g] -= 1.0 - scaled[s]
        (small if scaled[g] < 1.0 else large).append(g)
    # what is left is 1 up to rounding: always kept
    return torch.tensor(accept, dtype=torch.float64), torch.tensor(alias, dtype=torch.int64)


def make_sampler(train: CSR, kind: str = "uniform", popularity_power: float = 1.0) -> UniformNegativeSampler:
    """The negative sampler ``train.sampler`` names, over the training positives ``train``."""
    if kind == "uniform":
        return UniformNegativeSampler(train)
    if kind == "popularity":
        return PopularityNegativeSampler(train, popularity_power)
    raise ConfigError(f"train.sampler={kind} is not a sampler; use {' or '.join(SAMPLERS)}")


class _Positives:
    """Whether drawn items are training positives of their rows, for a batch of users: from a
    (B, I) bitmap of their rows (one pass over B * I bytes, then one byte a lookup: cheap when the
    draws are many, N = 1000), or by a binary search per draw in the sorted training pairs
    (:meth:`~bench.datasets.base.CSR.contains`: cheap when they are few next to B * I, BPR's one
    negative a pair on Gowalla's 41k items). Both give the same answers, so the draws are the same."""

    #: the search is used when a row's draws number at most I / this (each search costs ~log2(nnz) reads)
    SEARCH_BELOW = 256

    def __init__(self, train: CSR, users: Tensor, n: int, bitmap: Tensor | None = None) -> None:
        self.train, self.users = train, users
        if bitmap is None and n * self.SEARCH_BELOW > train.n_items:
            bitmap = train.dense_rows(users)
        self.bitmap = bitmap

    def full(self, draws: Tensor) -> Tensor:
        """(B, n) items, one row per user -> (B, n) bool."""
        if self.bitmap is not None:
            return self.bitmap.gather(1, draws)
        return self.train.contains(self.users.unsqueeze(1).expand_as(draws), draws)

    def at(self, rows: Tensor, items: Tensor) -> Tensor:
        """(M,) row indices into the batch and (M,) items -> (M,) bool."""
        if self.bitmap is not None:
            return self.bitmap[rows, items]
        return self.train.contains(self.users[rows], items)


def _non_positives(positives: _Positives, n: int, generator: torch.Generator,
                   draw: Callable[[int], Tensor] | None = None,
                   max_rounds: int | None = None) -> tuple[Tensor, Tensor]:
    """(B, n) items drawn i.i.d. from each row's non-positives, by rejection: draw from all items,
    redraw only the hits, tracked by flat position. ``draw(count)``: ``count`` i.i.d. items from the
    proposal (None: uniform over the catalogue). After ``max_rounds`` of redraws (None: no limit)
    the entries still on a positive are left there for the caller: the second value, their flat
    positions in ascending order (empty when every draw is a non-positive)."""
    users = positives.users
    if draw is None:
        def draw(count: int) -> Tensor:
            return torch.randint(0, positives.train.n_items, (count,), generator=generator, device=users.device)
    draws = draw(users.numel() * n).view(users.numel(), n)
    flat = draws.view(-1)
    pending = positives.full(draws).view(-1).nonzero().squeeze(1)
    rounds = 0
    while pending.numel() and (max_rounds is None or rounds < max_rounds):
        fresh = draw(pending.numel())
        flat[pending] = fresh
        pending = pending[positives.at(pending // n, fresh)]
        rounds += 1
    return draws, pending


def _distinct_non_positives(train: CSR, users: Tensor, positives: Tensor, n: int,
                            generator: torch.Generator) -> Tensor:
    """(B, n) n different non-positive items per row: i.i.d. draws, then every later copy of an
    item in its row drawn again until none is left (~n^2 / 2I copies per row at first). The rule
    treats all items alike, so each row's set is a uniform n-subset of its non-positives."""
    draws, _ = _non_positives(_Positives(train, users, n, bitmap=positives), n, generator)
    rows = torch.arange(draws.shape[0], device=draws.device)
    while rows.numel():
        ordered, order = draws[rows].sort(dim=1, stable=True)
        repeat = torch.zeros_like(ordered, dtype=torch.bool)
        repeat[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
        r, c = repeat.nonzero(as_tuple=True)
        if r.numel() == 0:
            break
        again, cols = rows[r], order[r, c]
        pending = torch.arange(again.numel(), device=draws.device)
        while pending.numel():  # a fresh non-positive for each repeat
            fresh = torch.randint(0, positives.shape[1], (pending.numel(),), generator=generator,
                                  device=draws.device)
            draws[again[pending], cols[pending]] = fresh
            pending = pending[positives[again[pending], fresh]]
        rows = again.unique()  # only rows that changed can hold a new repeat
    return draws

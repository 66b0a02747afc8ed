"""Negative sampling and batch order: correctness, uniformity, determinism."""

import pytest
import torch
from scipy import stats

from bench.datasets import CSR
from bench.sampling import PairBatchSampler, UniformNegativeSampler, make_generator


def _train():
    gen = torch.Generator().manual_seed(0)
    n_users, n_items = 30, 20
    mask = torch.rand(n_users, n_items, generator=gen) < 0.4
    mask[0, :19] = True  # user 0 has a single non-positive item (19)
    mask[0, 19] = False
    return CSR.from_pairs(mask.nonzero(), n_users, n_items), mask


def test_negatives_are_never_training_positives_and_are_uniform():
    csr, mask = _train()
    sampler = UniformNegativeSampler(csr)
    users = torch.arange(30).repeat_interleave(20)
    neg = sampler.sample(users, 300, make_generator("cpu", 0, 0, 0))
    assert neg.shape == (600, 300)
    assert not mask[users[:, None], neg].any()
    assert (neg[users == 0] == 19).all()
    # uniform over each user's non-positives: chi-square goodness of fit for user 5
    row = neg[users == 5].flatten()
    allowed = (~mask[5]).nonzero().squeeze(1)
    counts = torch.bincount(row, minlength=20)[allowed].numpy()
    assert counts.sum() == row.numel()
    assert stats.chisquare(counts).pvalue > 1e-3


def test_sampling_is_deterministic_per_seed_epoch_and_batch():
    csr, _ = _train()
    sampler = UniformNegativeSampler(csr)
    users = torch.arange(30)
    a = sampler.sample(users, 50, make_generator("cpu", 1, 2, 3))
    assert torch.equal(a, sampler.sample(users, 50, make_generator("cpu", 1, 2, 3)))
    assert not torch.equal(a, sampler.sample(users, 50, make_generator("cpu", 2, 2, 3)))  # the run seed matters
    assert not torch.equal(a, sampler.sample(users, 50, make_generator("cpu", 1, 3, 3)))


def test_batch_sampler_covers_every_pair_once_per_epoch_and_reshuffles():
    s = PairBatchSampler(n=2500, batch_size=1024, seed=0)
    s.set_epoch(0)
    e0 = list(s)
    assert [len(b) for b in e0] == [1024, 1024, 452] and len(s) == 3
    assert torch.equal(torch.sort(torch.cat(e0)).values, torch.arange(2500))
    s.set_epoch(1)
    e1 = torch.cat(list(s))
    assert not torch.equal(e1, torch.cat(e0))
    s.set_epoch(0)
    assert torch.equal(torch.cat(list(s)), torch.cat(e0))


def test_shared_draw_positives_match_a_dense_lookup_with_repeated_items():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        pairs = torch.unique(torch.stack([torch.randint(0, 50, (400,), generator=gen),
                                          torch.randint(0, 30, (400,), generator=gen)], 1), dim=0)
        train = CSR.from_pairs(pairs, 50, 30)
        sampler = UniformNegativeSampler(train)
        users = torch.randint(0, 50, (64,), generator=gen)
        draw = sampler.sample_shared(40, gen)  # 40 of 30 items: repeats for sure
        assert draw.unique().numel() < 40
        dense = train.dense_rows(users)[:, draw]
        rows, cols = sampler.shared_hits(users, draw)  # the same set, each coordinate once
        mask = torch.zeros_like(dense)
        mask[rows, cols] = True
        assert torch.equal(mask, dense) and rows.numel() == int(dense.sum())


@pytest.mark.parametrize("groups", [1, 3, 64])
def test_grouped_shared_hits_match_a_dense_lookup_by_table_and_by_search(groups, monkeypatch):
    import bench.sampling as sampling

    gen = torch.Generator().manual_seed(groups)
    pairs = torch.unique(torch.stack([torch.randint(0, 50, (600,), generator=gen),
                                      torch.randint(0, 30, (600,), generator=gen)], 1), dim=0)
    train = CSR.from_pairs(pairs, 50, 30)
    sampler = UniformNegativeSampler(train)
    users = torch.randint(0, 50, (64,), generator=gen)
    draws = sampler.sample_shared(40, gen, groups=groups)  # repeats within each draw
    size = -(-64 // groups)
    per_row = draws.reshape(-1, 40).repeat_interleave(size, 0)[:64]
    dense = train.dense_rows(users).gather(1, per_row)
    found = []
    for table in (sampling.MAX_KEY_TABLE, 0):  # the (G x |I|) membership table, then the sorted search alone
        monkeypatch.setattr(sampling, "MAX_KEY_TABLE", table)
        rows, cols = sampler.shared_hits(users, draws)
        mask = torch.zeros_like(dense)
        mask[rows, cols] = True
        assert torch.equal(mask, dense) and rows.numel() == int(dense.sum())
        found.append(sorted(zip(rows.tolist(), cols.tolist())))
    assert found[0] == found[1]


@pytest.mark.parametrize("n", [2, 7])  # 2 of 8: repeats redrawn; 7 of 8: the one left out drawn instead
def test_distinct_negatives_are_uniform_subsets_of_the_non_positives(n):
    from bench.errors import ConfigError

    csr, mask = _train()
    sampler = UniformNegativeSampler(csr)
    user = int(((~mask).sum(1) == 8).nonzero()[0])  # 8 non-positives: 28 subsets of 2, 8 of 7
    allowed = (~mask[user]).nonzero().squeeze(1).tolist()
    users = torch.full((8000,), user)
    neg = sampler.sample(users, n, make_generator("cpu", 0, 0, 3), distinct=True)
    assert not mask[users[:, None], neg].any() and all(len(set(row)) == n for row in neg.tolist())
    chosen = torch.zeros(8000, 20, dtype=torch.bool).scatter_(1, neg, True)
    codes = (chosen.long() << torch.arange(20)).sum(1)  # each row's subset as a bit set
    subsets = {int(c) for c in codes}
    counts = [(codes == c).sum().item() for c in sorted(subsets)]
    assert len(counts) == (28 if n == 2 else 8) and sum(counts) == 8000 and stats.chisquare(counts).pvalue > 1e-3
    assert stats.chisquare(torch.bincount(neg[:, 0], minlength=20)[allowed].numpy()).pvalue > 1e-3  # any order
    # every row of a mixed batch: distinct, never a positive, all of a user's non-positives when n equals them
    users = torch.arange(1, 30).repeat_interleave(5)
    n = int((~mask[1:]).sum(1).min())
    neg = sampler.sample(users, n, make_generator("cpu", 0, 0, 4), distinct=True)
    assert not mask[users[:, None], neg].any()
    assert all(len(set(row)) == n for row in neg.tolist())
    again = sampler.sample(users, n, make_generator("cpu", 0, 0, 4), distinct=True)
    assert torch.equal(neg, again)  # one generator, one draw
    with pytest.raises(ConfigError, match=r"2 distinct negatives per pair, but user 0 has only 1 non-positive"):
        sampler.sample(torch.tensor([3, 0]), 2, make_generator("cpu", 0, 0, 5), distinct=True)


def test_distinct_shared_draws_hold_no_item_twice():
    from bench.errors import ConfigError

    csr, _ = _train()
    sampler = UniformNegativeSampler(csr)
    draws = sampler.sample_shared(15, make_generator("cpu", 0, 0, 6), groups=400, distinct=True)
    assert draws.shape == (400, 15) and all(len(set(row)) == 15 for row in draws.tolist())
    counts = torch.bincount(draws.flatten(), minlength=20).numpy()  # each item in 15 of 20 places
    assert stats.chisquare(counts).pvalue > 1e-3
    assert sampler.sample_shared(20, make_generator("cpu", 0, 0, 6), distinct=True).sort().values.tolist() == \
        list(range(20))
    with pytest.raises(ConfigError, match=r"draws 21 distinct items, but the catalogue has 20"):
        sampler.sample_shared(21, make_generator("cpu", 0, 0, 6), distinct=True)


def _popular():
    # item counts 4, 3, 2, 1, 0 over five users; Q ∝ count: .4 .3 .2 .1 0
    pairs = torch.tensor([[0, 0], [1, 0], [2, 0], [3, 0], [0, 1], [1, 1], [2, 1], [3, 2], [4, 2], [4, 3]])
    return CSR.from_pairs(pairs, 5, 5)


def test_popularity_negatives_follow_q_without_the_users_positives():
    from bench.sampling import PopularityNegativeSampler

    sampler = PopularityNegativeSampler(_popular(), power=1.0)
    torch.testing.assert_close(sampler.probs, torch.tensor([0.4, 0.3, 0.2, 0.1, 0.0], dtype=torch.float64))
    users = torch.tensor([0, 4])  # positives {0, 1} and {2, 3}
    neg = sampler.sample(users, 40000, make_generator("cpu", 0, 0, 0))
    # user 0 draws from {2, 3} in proportion .2 : .1; user 4 from {0, 1} as .4 : .3; item 4 (no count) never
    for row, expected in ((0, {2: 2 / 3, 3: 1 / 3}), (1, {0: 4 / 7, 1: 3 / 7})):
        counts = torch.bincount(neg[row], minlength=5)
        assert set(counts.nonzero().squeeze(1).tolist()) == set(expected)
        observed = [int(counts[i]) for i in expected]
        assert stats.chisquare(observed, [40000 * p for p in expected.values()]).pvalue > 1e-3
    # the proposal a per-pair draw came from: Q(j) / (1 - Q(P_u)); the kept share 1 - Q(P_u) is .3 and .7
    items = torch.tensor([[2, 3], [0, 1]])
    torch.testing.assert_close((sampler.log_prob()[items] - sampler.log_kept(users)[:, None]).exp(),
                               torch.tensor([[2 / 3, 1 / 3], [4 / 7, 3 / 7]]))
    torch.testing.assert_close(sampler.log_prob()[items].exp(), torch.tensor([[0.2, 0.1], [0.4, 0.3]]))
    shared = sampler.sample_shared(20000, make_generator("cpu", 0, 0, 1))
    freq = torch.bincount(shared, minlength=5).double() / 20000
    torch.testing.assert_close(freq, sampler.probs, atol=0.015, rtol=0)
    # uniform: -log I, and per pair over the user's I - |P_u| non-positives
    uniform = UniformNegativeSampler(_popular())
    torch.testing.assert_close(uniform.log_prob().exp(), torch.full((5,), 1 / 5))
    torch.testing.assert_close(uniform.log_kept(users).exp(), torch.full((2,), 3 / 5))


def test_popularity_sampler_errors():
    from bench.errors import ConfigError, DataError
    from bench.sampling import PopularityNegativeSampler, make_sampler

    with pytest.raises(ConfigError, match="train.distinct_negatives=true draws uniformly"):
        PopularityNegativeSampler(_popular()).sample(torch.tensor([0]), 2, make_generator("cpu", 0, 0, 0),
                                                     distinct=True)
    with pytest.raises(ConfigError, match="train.sampler=zipf is not a sampler; use uniform or popularity"):
        make_sampler(_popular(), "zipf")
    # user 0 holds every item that has a count: nothing of nonzero probability is left to draw
    stuck = CSR.from_pairs(torch.tensor([[0, 0], [0, 1], [1, 0]]), 2, 3)
    with pytest.raises(DataError, match="user 0 has every item of nonzero popularity"):
        PopularityNegativeSampler(stuck)
    assert isinstance(PopularityNegativeSampler(stuck, power=0.0), UniformNegativeSampler)  # power 0: all items


def test_the_alias_table_implies_exactly_the_distribution():
    from bench.sampling import alias_table

    g = torch.Generator().manual_seed(3)
    probs = torch.rand(5000, generator=g, dtype=torch.float64)
    probs[::7] = 0.0  # items never drawn
    probs /= probs.sum()
    accept, alias = alias_table(probs)
    # column k (probability 1/I) gives k with probability accept[k], else alias[k]
    implied = torch.zeros_like(probs).index_add_(0, torch.arange(5000), accept / 5000)
    implied.index_add_(0, alias, (1 - accept) / 5000)
    torch.testing.assert_close(implied, probs, atol=1e-15, rtol=0)
    assert bool((accept[::7] == 0).all())


def test_a_user_holding_almost_all_of_q_still_gets_its_negatives_exactly():
    from bench.sampling import PopularityNegativeSampler

    # items 0-2 are popular (2000, 900, 900 other users), items 3 and 4 have one user each; user 0 holds items 0-2
    # (Q(P_0) = 0.9995: a redraw hits a non-positive once in 2,000)
    counts = [2000, 900, 900, 1, 1]
    pairs = [[u, i] for i, c in enumerate(counts) for u in range(1, c + 1)] + [[0, 0], [0, 1], [0, 2]]
    pairs = [p for p in pairs if p != [1, 4]] + [[2, 4]]  # user 1 would hold all five items
    train = CSR.from_pairs(torch.tensor(pairs), 2001, 5)
    sampler = PopularityNegativeSampler(train, power=1.0)
    neg = sampler.sample(torch.tensor([0]), 2000, make_generator("cpu", 0, 0, 0))
    assert set(neg.unique().tolist()) == {3, 4}  # never a positive, after the redraw rounds run out
    counts34 = torch.bincount(neg[0], minlength=5)[3:]
    assert stats.chisquare(counts34.tolist()).pvalue > 1e-3  # 3 and 4 equally likely


def test_csr_membership_by_search_matches_the_dense_rows():
    csr, mask = _train()
    gen = torch.Generator().manual_seed(4)
    users, items = torch.randint(0, 30, (7, 50), generator=gen), torch.randint(0, 20, (7, 50), generator=gen)
    assert torch.equal(csr.contains(users, items), mask[users, items])
    assert torch.equal(csr.contains(users[0], items[0]), csr.dense_rows(users[0]).gather(1, items[0, :, None])[:, 0])
    empty = CSR.from_pairs(torch.zeros(0, 2, dtype=torch.int64), 3, 5)
    assert not empty.contains(torch.tensor([0, 2]), torch.tensor([4, 0])).any()


@pytest.mark.parametrize("kind", ["uniform", "popularity"])
@pytest.mark.parametrize("n", [1, 7, 300])
def test_both_ways_of_finding_positives_draw_the_same_negatives(kind, n, monkeypatch):
    # a (B, I) bitmap of the batch's rows (many draws) or a search per draw (few): the same draws, none a positive
    from bench.sampling import _Positives, make_sampler

    csr, mask = _train()
    users = torch.arange(30).repeat(3)
    draws = {}
    for way, ratio in (("bitmap", 10**9), ("search", 0)):
        monkeypatch.setattr(_Positives, "SEARCH_BELOW", ratio)
        sampler = make_sampler(csr, kind)
        assert (_Positives(csr, users, n).bitmap is None) == (way == "search")
        draws[way] = sampler.sample(users, n, make_generator("cpu", 0, 1, 2))
    assert torch.equal(draws["bitmap"], draws["search"])
    assert not mask[users[:, None], draws["search"]].any()

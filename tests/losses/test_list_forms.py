"""The learning-to-rank (list) forms of the losses, against loops over documents and pairs."""

from __future__ import annotations

import math

import pytest
import torch

from bench.errors import ConfigError
from bench.losses import LOSSES, build
from bench.losses.base import has_list_form
from bench.losses.lambdaloss import lambda_weights, lambdarank_weights
from bench.losses.softmax import softmax_terms

LIST_LOSSES = ["sl", "slk", "lambdaloss", "lambdalossk", "lambdarank", "listnet", "listmle", "ranknet",
               "approxndcg", "neuralndcg"]


def random_lists(seed: int, b: int = 5, width: int = 9, grades: int = 3) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(b, width, generator=g, dtype=torch.float64)
    labels = torch.randint(0, grades, (b, width), generator=g)
    lengths = torch.randint(2, width + 1, (b,), generator=g)
    mask = torch.arange(width)[None, :] < lengths[:, None]
    return scores, labels, mask


def gain(y: int) -> float:
    return 2.0**y - 1.0


def loop_sl(scores, labels, mask, tau, k=None, tau_w=1.0):
    """Graded SL / SL@K by loops: per list, gain-weighted mean over relevant documents of
    log sum over lower-grade documents; SL@K weights each by sigmoid((s_i - beta^K) / tau_w)."""
    total, lists = 0.0, 0
    for s, y, m in zip(scores.tolist(), labels.tolist(), mask.tolist(), strict=True):
        docs = [(si, yi) for si, yi, mi in zip(s, y, m, strict=True) if mi]
        terms = []
        for si, yi in docs:
            lower = [sj for sj, yj in docs if yj < yi]
            if yi > 0 and lower:
                term = math.log(sum(math.exp((sj - si) / tau) for sj in lower))
                if k is not None:
                    beta = sorted((d[0] for d in docs), reverse=True)[min(k, len(docs)) - 1]
                    term *= 1.0 / (1.0 + math.exp(-(si - beta) / tau_w))
                terms.append((gain(yi), term))
        if terms:
            total += sum(g * t for g, t in terms) / sum(g for g, _ in terms)
            lists += 1
    return total / max(lists, 1)


def loop_lambda(scores, labels, mask, weight_of, k=None):
    """Graded lambda losses by loops over the pairs y_i > y_j of each list."""
    total, lists = 0.0, 0
    for s, y, m in zip(scores.tolist(), labels.tolist(), mask.tolist(), strict=True):
        docs = [(si, yi) for si, yi, mi in zip(s, y, m, strict=True) if mi]
        gains = sorted((gain(yi) for _, yi in docs), reverse=True)
        idcg = sum(g / math.log2(2 + r) for r, g in enumerate(gains) if k is None or r < k)
        if idcg == 0:
            continue
        ranks = [1 + sum(sj > si for sj, _ in docs) for si, _ in docs]
        value, pairs = 0.0, 0
        for a, (si, yi) in enumerate(docs):
            for b, (sj, yj) in enumerate(docs):
                if yi > yj:
                    w = float(weight_of(torch.tensor([[float(ranks[a])]], dtype=torch.float64),
                                        torch.tensor([[float(ranks[b])]], dtype=torch.float64)))
                    value += w * abs(gain(yi) - gain(yj)) / idcg * math.log1p(math.exp(sj - si))
                    pairs += 1
        if pairs:
            total += value
            lists += 1
    return total / max(lists, 1)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("self_term", [False, True])
def test_graded_sl_matches_loops(seed, self_term):
    scores, labels, mask = random_lists(seed)
    loss = build("sl", tau=0.5, self_term=self_term)
    got = float(loss.list_loss(scores, labels, mask))
    if self_term:  # the document's own e^0 in the normaliser: checked on binary lists below
        assert math.isfinite(got)
        return
    assert got == pytest.approx(loop_sl(scores, labels, mask, 0.5), rel=1e-10)


def test_graded_sl_with_binary_labels_is_the_pair_softmax_loss():
    """Binary grades: each relevant document against the non-relevant ones, as a (user, positive)
    pair against its negatives; every relevant document of a list weighs 1 / |relevant|."""
    scores = torch.tensor([[2.0, 0.5, -1.0, 0.3, 1.1]], dtype=torch.float64)
    labels = torch.tensor([[1, 0, 0, 1, 0]])
    mask = torch.ones_like(labels, dtype=torch.bool)
    neg = scores[:, [1, 2, 4]]
    for self_term in (False, True):
        expected = softmax_terms(scores[0, [0, 3]], neg.expand(2, 3), 0.2, self_term).mean()
        got = build("sl", tau=0.2, self_term=self_term).list_loss(scores, labels, mask)
        assert float(got) == pytest.approx(float(expected), rel=1e-12)


@pytest.mark.parametrize("k", [1, 3, 20])
def test_graded_slk_matches_loops(k):
    scores, labels, mask = random_lists(3)
    loss = build("slk", k=k, tau_d=0.4, tau_w=0.7)
    assert float(loss.list_loss(scores, labels, mask)) == pytest.approx(
        loop_sl(scores, labels, mask, 0.4, k=k, tau_w=0.7), rel=1e-10)


@pytest.mark.parametrize("name,kwargs,weight_of,k", [
    ("lambdaloss", {}, lambda a, b: lambda_weights(a, b, None), None),
    ("lambdalossk", {"k": 3}, lambda a, b: lambda_weights(a, b, 3), 3),
    ("lambdarank", {}, lambdarank_weights, None),
])
def test_lambda_list_forms_match_loops(name, kwargs, weight_of, k):
    scores, labels, mask = random_lists(4)
    scores[0, 1] = scores[0, 0]  # a tie: both documents share a rank
    got = float(build(name, **kwargs).list_loss(scores, labels, mask))
    assert got == pytest.approx(loop_lambda(scores, labels, mask, weight_of, k), rel=1e-9)


@pytest.mark.parametrize("name", LIST_LOSSES)
def test_padding_and_flat_lists_are_inert(name):
    """Padding holds garbage and takes no part; a list with one grade gives 0 and no NaN gradient."""
    scores, labels, mask = random_lists(5, b=3, width=6)
    loss = build(name) if name != "slk" else build("slk", k=3)
    gen = torch.Generator().manual_seed(0)
    base = loss.list_loss(scores, labels, mask, generator=gen)
    wide = torch.cat([scores, torch.full((3, 4), 1e4, dtype=scores.dtype)], 1)
    wide_labels = torch.cat([labels, torch.full((3, 4), 2)], 1)
    wide_mask = torch.cat([mask, torch.zeros(3, 4, dtype=torch.bool)], 1)
    padded = loss.list_loss(wide, wide_labels, wide_mask, generator=torch.Generator().manual_seed(0))
    if name != "listmle":  # ListMLE's random order of tied grades depends on the list width
        assert float(padded) == pytest.approx(float(base), rel=1e-9, abs=1e-12)
    flat_scores = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    flat = loss.list_loss(flat_scores, torch.ones(2, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.bool))
    flat.backward()
    assert float(flat.detach()) == 0.0
    assert torch.isfinite(flat_scores.grad).all()


def test_listwise_list_forms_average_over_lists():
    """ListNet's list form is the functional form's mean over lists with two grades."""
    scores = torch.tensor([[1.0, 0.0, 2.0], [0.5, 0.5, 0.5]], dtype=torch.float64)
    labels = torch.tensor([[2, 0, 1], [1, 1, 1]])
    mask = torch.ones_like(labels, dtype=torch.bool)
    p = torch.softmax(scores[0] / 0.2, 0)
    expected = -(2 / 3 * math.log(p[0]) + 1 / 3 * math.log(p[2]))
    assert float(build("listnet", tau=0.2).list_loss(scores, labels, mask)) == pytest.approx(expected, rel=1e-12)


def test_which_losses_have_a_list_form():
    have = {n for n in LOSSES.names() if has_list_form(LOSSES.get(n))}
    assert have == set(LIST_LOSSES)


def test_ltr_refuses_a_loss_without_list_form():
    from bench.models import build as build_model
    from bench.tasks.ltr import LtrModule

    model = build_model("linear", n_features=4)
    with pytest.raises(ConfigError, match=r"loss=bpr has no learning-to-rank form; task=ltr trains with .*slk"):
        LtrModule(model, build("bpr"), torch.optim.Adam, seed=0)


def test_slk_detach_weight_keeps_the_value_and_drops_the_weights_gradient():
    """The same loss value; the positive's gradient loses exactly the weight's part,
    sigma' / tau_w * term (one pair, one negative: the term is (s_j - s_i) / tau_d)."""
    from bench.losses.slk import slk_loss

    pos, neg, beta = torch.tensor([0.3], requires_grad=True), torch.tensor([[0.9]]), torch.tensor([0.5])
    grads = []
    for detach in (False, True):
        pos.grad = None
        value = slk_loss(pos, neg, beta, tau_d=0.5, tau_w=2.0, detach_weight=detach)
        value.backward()
        grads.append(float(pos.grad))
    w = torch.sigmoid(torch.tensor((0.3 - 0.5) / 2.0))
    term = (0.9 - 0.3) / 0.5
    assert grads[1] == pytest.approx(float(w) * -1 / 0.5, rel=1e-6)  # softmax part only
    assert grads[0] - grads[1] == pytest.approx(float(w * (1 - w)) / 2.0 * term, rel=1e-6)


def test_slk_on_sequences_thresholds_by_prefix_unless_asked_per_user(train_data):
    """Sequential rows take each prefix's exact K-th score by default; loss.seq_threshold=user keeps one
    refreshed threshold per user instead (an ablation); anything else is a one-line error."""
    from dataclasses import replace

    data = replace(train_data(3, 10, {0: [1, 2], 1: [3], 2: [4, 5]}), sequences=object())
    prefix, user = build("slk", k=2), build("slk", k=2, seq_threshold="user")
    prefix.bind(data)
    user.bind(data)
    assert prefix.per_query and not user.per_query and user.beta.shape == (3,)
    with pytest.raises(ConfigError, match=r"loss.seq_threshold='query': use prefix or prefix_refresh or user"):
        build("slk", seq_threshold="query")


def test_slk_prefix_refresh_keeps_each_prefix_exact_threshold_between_refresh_epochs(train_data):
    """loss.seq_threshold=prefix_refresh: in a refresh epoch a row's threshold is its prefix's exact K-th
    score (as with prefix) and is stored under its pair id; in the epochs between, the stored value is
    used though the scores moved; a later refresh records how far the stored ones had drifted (their
    rank in the new scores, counted here by brute force, on one row in STALENESS_STRIDE)."""
    from dataclasses import replace

    from bench.contracts import LossBatch
    from bench.losses.slk import STALENESS_STRIDE, slk_loss

    data = replace(train_data(3, 10, {0: [1, 2], 1: [3], 2: [4, 5]}), sequences=object(), n_pairs=30)
    loss = build("slk", k=2, t_beta=2, tau_d=0.5, tau_w=1.5, seq_threshold="prefix_refresh")
    loss.bind(data)
    assert loss.per_prefix and not loss.per_query and loss.beta.shape == (30,)
    g = torch.Generator().manual_seed(0)
    rows = 2 * STALENESS_STRIDE + 1
    pair_ids = torch.randperm(30, generator=g)[:rows]
    pos, neg = torch.randn(rows, generator=g), torch.randn(rows, 4, generator=g)

    def step(epoch: int, table: torch.Tensor) -> torch.Tensor:
        loss.on_train_epoch_start(epoch)
        batch = LossBatch(pos=pos, neg=neg, pair_ids=pair_ids, full_scores=lambda at: table[at])
        return loss(batch)

    def kth(table: torch.Tensor) -> torch.Tensor:  # the 2nd largest of each row, by sorting
        return table.sort(dim=1, descending=True).values[:, 1]

    def expected(beta: torch.Tensor) -> float:
        return float(slk_loss(pos, neg, beta, 0.5, 1.5))

    first, second = torch.randn(rows, 10, generator=g), torch.randn(rows, 10, generator=g)
    # epoch 0 is not a refresh epoch (t_beta 2): every threshold is the initial 0
    assert step(0, first) == pytest.approx(expected(torch.zeros(rows)), rel=1e-6)
    # epoch 1 refreshes: the exact thresholds of the step's scores, stored per pair id
    assert step(1, first) == pytest.approx(expected(kth(first)), rel=1e-6)
    untouched = torch.ones(30, dtype=torch.bool).index_fill_(0, pair_ids, False)
    assert torch.equal(loss.beta[pair_ids], kth(first)) and not loss.beta[untouched].any()
    assert loss.diagnostics(None) == {}  # the first refresh replaced zeros: no drift to report
    # epoch 2: the scores moved, the stored thresholds stay
    assert step(2, second) == pytest.approx(expected(kth(first)), rel=1e-6)
    # epoch 3 refreshes again and records the drift of the replaced thresholds in the new scores
    assert step(3, second) == pytest.approx(expected(kth(second)), rel=1e-6)
    measured = list(range(0, rows, STALENESS_STRIDE))  # rows 0, S and 2S
    ranks = sorted(1 + sum(float(s) > float(kth(first)[r]) for s in second[r]) for r in measured)
    gaps = ((kth(second) - kth(first)) / 1.5)[measured]
    diag = loss.diagnostics(None)
    assert diag["prefix_beta_stale_rank_median"] == ranks[1]
    assert diag["prefix_beta_stale_gap_over_tau_w"] == pytest.approx(float(gaps.mean()), rel=1e-6)
    assert ranks != [2, 2, 2]  # the case is one where the stored thresholds did drift
    # the latest refresh's drift stands until the next refresh epoch; stored thresholds are shared
    # across data-parallel ranks only when they change
    step(4, first)
    assert loss.diagnostics(None) == diag
    assert loss.synced_rows(LossBatch(pos=pos, neg=neg, pair_ids=pair_ids)) == []
    # a batch scored in chunks (5 rows, not a multiple of the stride) gives the same thresholds and drift
    import copy

    batch = LossBatch(pos=pos, neg=neg, pair_ids=pair_ids, full_scores=lambda at: first[at])
    chunked = copy.deepcopy(loss)
    for one, chunk in ((loss, 4096), (chunked, 5)):
        one.on_train_epoch_start(5)
        assert torch.equal(one.prefix_thresholds(batch, chunk=chunk), kth(first))
    assert loss.diagnostics(None) == chunked.diagnostics(None) != diag
    ranks = sorted(1 + sum(float(s) > float(kth(second)[r]) for s in first[r]) for r in measured)
    assert loss.diagnostics(None)["prefix_beta_stale_rank_median"] == ranks[1]
    (synced, at), = loss.synced_rows(batch)
    assert synced is loss.beta and at is pair_ids

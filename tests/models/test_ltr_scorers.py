"""Learning-to-rank scorers: one finite score per document, padding changes no real score, the
transformer is permutation-equivariant and context-dependent, the per-document scorers are not."""

import pytest
import torch
from hydra.utils import instantiate

from bench.errors import ConfigError, DataError, find_user_error
from bench.models import MODELS, LinearScorer, MLPScorer, TransformerScorer, build

F = 6
SMALL = {"linear": {}, "mlp": {"hidden": [8, 4]}, "transformer": {"dim": 8, "layers": 2, "heads": 2, "ffn_dim": 16}}


def scorer(name, **kwargs):
    torch.manual_seed(0)
    return build(name, n_features=F, **{**SMALL[name], **kwargs})


def padded(lists, length):
    """Lists of (n_j, F) features -> (Q, length, F) features with zero padding and the (Q, length) mask."""
    features = torch.zeros(len(lists), length, F)
    mask = torch.zeros(len(lists), length, dtype=torch.bool)
    for q, docs in enumerate(lists):
        features[q, : len(docs)], mask[q, : len(docs)] = docs, True
    return features, mask


@pytest.mark.parametrize("name", list(SMALL))
def test_one_finite_score_per_document_and_zero_at_padding(name):
    model = scorer(name)
    torch.manual_seed(1)
    features, mask = padded([torch.randn(5, F), torch.randn(2, F), torch.randn(1, F)], 7)
    for train in (True, False):
        scores = model.train(train)(features, mask)
        assert scores.shape == (3, 7) and torch.isfinite(scores).all()
        assert (scores[~mask] == 0).all() and (scores[mask] != 0).all()
    assert model.tasks == ("ltr",) and model(torch.zeros(0, 4, F), torch.zeros(0, 4, dtype=torch.bool)).shape == (0, 4)


@pytest.mark.parametrize("name", list(SMALL))
def test_padding_changes_no_real_score(name):
    model = scorer(name).eval()
    torch.manual_seed(1)
    lists = [torch.randn(5, F), torch.randn(3, F)]
    with torch.no_grad():  # PyTorch's inference fast path (even heads, no grad): the evaluation's path
        tight, mask = padded(lists, 5)
        loose, loose_mask = padded(lists, 5 + 7)
        a, b = model(tight, mask), model(loose, loose_mask)
        alone = model(*padded(lists[1:], 3))  # the short list without any padding
    torch.testing.assert_close(b[:, :5][mask], a[mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(a[1, :3], alone[0], atol=1e-5, rtol=0)
    # the training path (autograd, no fast path) gives the evaluation's scores
    torch.testing.assert_close(model(loose, loose_mask), b, atol=1e-5, rtol=0)


def test_the_transformer_is_permutation_equivariant():
    model = scorer("transformer").eval()
    torch.manual_seed(1)
    features, mask = padded([torch.randn(6, F), torch.randn(4, F)], 8)
    perm = torch.randperm(8)  # padded positions move too: padding need not be at the end
    with torch.no_grad():
        scores = model(features, mask)
        permuted = model(features[:, perm], mask[:, perm])
    torch.testing.assert_close(permuted, scores[:, perm], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", list(SMALL))
def test_only_the_transformer_scores_a_document_in_context(name):
    model = scorer(name).eval()
    torch.manual_seed(1)
    features, mask = padded([torch.randn(4, F)], 4)
    other = features.clone()
    other[0, 3] = torch.randn(F)  # another document of the same list changes
    with torch.no_grad():
        before, after = model(features, mask)[0, :3], model(other, mask)[0, :3]
    if name == "transformer":
        assert (before - after).abs().min() > 1e-4
    else:
        torch.testing.assert_close(before, after, atol=0, rtol=0)


def test_the_linear_scorer_is_a_dot_product_with_its_weights():
    model = LinearScorer(3)
    with torch.no_grad():
        model.linear.weight.copy_(torch.tensor([[1.0, -2.0, 0.5]]))
        model.linear.bias.fill_(0.25)
    features = torch.tensor([[[2.0, 1.0, 4.0], [0.0, 0.0, 0.0]]])
    scores = model(features, torch.tensor([[True, False]]))
    torch.testing.assert_close(scores, torch.tensor([[2.0 - 2.0 + 2.0 + 0.25, 0.0]]))


@pytest.mark.parametrize("train", [True, False])
def test_lists_without_documents_stay_finite(train):
    # a fully padded list hides every key from every query: NaN on PyTorch's fast path unless guarded
    model = build("transformer", n_features=F).train(train)
    torch.manual_seed(1)
    features, mask = padded([torch.randn(3, F), torch.randn(1, F), torch.zeros(0, F)], 4)
    with torch.set_grad_enabled(train):
        scores = model(features, mask)
        raw = model._scores(features, mask)  # before forward() zeroes padding: NaN would poison gradients
    assert torch.isfinite(scores).all() and (scores[2] == 0).all() and torch.isfinite(raw).all()
    if train:
        scores.sum().backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("name", list(SMALL))
def test_gradients_reach_every_parameter(name):
    model = scorer(name).train()
    torch.manual_seed(1)
    features, mask = padded([torch.randn(5, F), torch.randn(2, F)], 5)
    scores = model(features, mask)
    # a listwise loss: the softmax cross-entropy of each list against its first document
    logits = scores.masked_fill(~mask, float("-inf"))
    torch.nn.functional.cross_entropy(logits, torch.zeros(2, dtype=torch.long)).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, pname


def test_the_configs_build_the_scorers(tmp_path, make_cfg):
    for name, cls in (("linear", LinearScorer), ("mlp", MLPScorer), ("transformer", TransformerScorer)):
        cfg = make_cfg([f"model={name}"], tmp_path)
        assert "score" not in cfg.model and cfg.optimizer.lr == cfg.model.recipe.lr == 0.001
        model = instantiate(cfg.model, n_features=46)
        assert type(model) is cls and model.n_features == 46 and MODELS.get(name) is cls
        assert model(torch.zeros(2, 3, 46), torch.ones(2, 3, dtype=torch.bool)).shape == (2, 3)
    encoder = model.encoder
    assert (len(encoder.layers), encoder.layers[0].self_attn.num_heads, encoder.layers[0].linear1.out_features,
            model.input.out_features, encoder.layers[0].dropout.p) == (4, 4, 512, 128, 0.3)
    assert [m.out_features for m in build("mlp", n_features=46).net if isinstance(m, torch.nn.Linear)] == [64, 32, 1]


@pytest.mark.parametrize(("name", "setting", "message"), [
    ("transformer", {"dim": 30, "heads": 4}, r"model\.dim=30 is out of range: use a multiple of model\.heads=4"),
    ("transformer", {"layers": 0}, r"model\.layers=0 is out of range: use an integer >= 1"),
    ("transformer", {"dropout": 1.0}, r"model\.dropout=1\.0 is out of range"),
    ("mlp", {"hidden": [64, 0]}, r"model\.hidden=0 is out of range: use an integer >= 1"),
    ("mlp", {"hidden": []}, r"model\.hidden=\[\] is not a list of layer widths"),
    ("mlp", {"hidden": 64}, r"model\.hidden=64 is not a list of layer widths"),
])
def test_bad_settings_are_one_line_config_errors(name, setting, message):
    with pytest.raises(ConfigError, match=message) as err:
        build(name, n_features=46, **setting)
    assert "\n" not in str(err.value)


def test_bad_settings_from_the_command_line_and_wrong_feature_counts(tmp_path, make_cfg):
    cfg = make_cfg(["model=transformer", "model.heads=3"], tmp_path)
    with pytest.raises(Exception) as err:  # Hydra wraps the constructor's error; the CLI finds it
        instantiate(cfg.model, n_features=46)
    assert isinstance(find_user_error(err.value), ConfigError)
    with pytest.raises(DataError, match="expects features"):
        build("linear", n_features=46)(torch.zeros(2, 3, 45), torch.ones(2, 3, dtype=torch.bool))

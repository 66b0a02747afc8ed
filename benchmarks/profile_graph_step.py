"""Where a graph backbone's training step goes (issue 47): LightGCN on Gowalla, the SL@K paper's run.

The step of ``python -m bench +experiment=paper/table2_<model>_<dataset> loss=<loss>`` (the paper's
tuned settings; ``--negatives`` chooses the protocol, by default one draw of N per group of 64 rows,
``shared/16``), split into parts over the same ``--batches`` batches:

    propagation   the backbone's embeddings (L sparse products over the normalised adjacency, the layer mean)
    sampling      the negatives (the shared draws and each row's own positives among them)
    loss          everything else in the forward: gathering, scoring, the loss
    backward      loss.backward() (through the loss and the L products)
    optimizer     Adam's step and zero_grad
    after step    the loss's hook after the update (SL@K's threshold refresh; nothing for SL)

each for the propagation as it runs now (CSR products, ``bench.models.sparse``) and as it ran
before (``torch.sparse.mm`` on the COO adjacency, whose backward builds Aᵀ every call), in
alternating rounds (medians printed). The bare limit is what no implementation can skip: the L
products forward and L backward (the same CSR kernel), and the score matmul of the batch's queries
with its draws, forward and backward, timed alone. The run's epoch and a 200-epoch run are projected from the step
and one timed validation pass (every 5th epoch, as the paper's runs).

For LightGCN with shared draws, the restricted floor: the products of a propagation that computes the
last layer only for the rows the step uses (S: the batch's users, positives and draws). Forward, L - 1
full products and the last over A's rows in S (A[S, :], gathered from A's CSR each step); backward, the
last layer's product with A[S, :]ᵀ, built the cheapest of three ways measured (A's entries in columns S
masked from A, as A is symmetric; the forward's slice transposed by a stable sort; or simply all of A),
then L - 1 full products. Also printed: the same with every restricted structure free (its products
alone), a bound for any construction with these kernels; and whether the embeddings' gradient through
the restricted propagation equals the full one's bit for bit (it does).

    BENCH_DATA_DIR=../shared/data python benchmarks/profile_graph_step.py [--dataset gowalla]
        [--model lightgcn] [--loss sl] [--negatives shared/16] [--batches 40] [--rounds 3] [overrides ...]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate

from bench.allocator import retain_freed_memory, skip_uninitialised_fill
from bench.composition import compose, config_groups
from bench.contracts import grouped_scores
from bench.models.lightgcn import layer_mean
from bench.models.sparse import sparse_product
from bench.sampling import negatives_generator
from bench.step import after_update, negatives_overrides, train_step
from bench.training import build_datamodule

PARTS = ("propagation", "sampling", "loss", "backward", "optimizer", "after step")


def timed(record: dict[str, float], key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` whose calls add their wall time to ``record[key]``."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            record[key] += time.perf_counter() - t0
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="gowalla")
    parser.add_argument("--model", default="lightgcn")
    parser.add_argument("--loss", default="sl")
    parser.add_argument("--negatives", default="shared/16", help="per_pair, shared or shared/G")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="more key=value overrides of the run")
    args = parser.parse_args()
    retain_freed_memory(True)
    skip_uninitialised_fill()
    torch.use_deterministic_algorithms(True, warn_only=True)
    known = sorted(e for e in config_groups().get("experiment/paper", ()) if e.startswith("table2_"))
    if f"table2_{args.model}_{args.dataset}" not in known:
        raise SystemExit(f"no paper experiment table2_{args.model}_{args.dataset}; --model and --dataset from: "
                         f"{', '.join(known)}")
    out = tempfile.mkdtemp(prefix="bench-profile-")
    cfg = compose([f"+experiment=paper/table2_{args.model}_{args.dataset}", f"loss={args.loss}", "logger=none",
                   f"output_dir={out}", *negatives_overrides(args.negatives), *args.overrides])
    dm = build_datamodule(cfg, seed=0)
    dm.setup("fit")
    n_epoch = len(dm.train_dataloader())
    n = min(args.batches, n_epoch)
    mode, groups = str(cfg.train.negatives), int(cfg.train.shared_groups)

    def fresh():
        L.seed_everything(0, verbose=False)
        model = instantiate(cfg.model, n_users=dm.splits.n_users, n_items=dm.splits.n_items)
        loss = instantiate(cfg.loss)
        model.bind(dm.train_data)
        loss.bind(dm.train_data)
        return model, loss, instantiate(cfg.optimizer)(model.parameters())

    model0, loss0, _ = fresh()
    if not hasattr(model0, "spread"):
        raise SystemExit(f"--model {args.model}: not a graph backbone that propagates over an adjacency "
                         "(lightgcn, xsimgcl, lightgcnpp, simgcl)")
    adjacency = model0.adjacency
    adjacency_t = model0.adjacency_t if model0.adjacency_t.numel() else None
    coo = adjacency.to_sparse_coo().coalesce()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.dataset}: {dm.splits.n_users} users x "
          f"{dm.splits.n_items} items, adjacency {adjacency.shape[0]} nodes / {coo._nnz()} entries; {args.model} "
          f"({getattr(model0, 'layers', '?')} layers, d {model0.user_emb.weight.shape[1]}), loss {args.loss} "
          f"(N {loss0.n_negatives}), negatives {args.negatives}; {n_epoch} batches an epoch, timing {n}")

    def parts(propagation: str) -> dict[str, float]:
        model, loss, opt = fresh()
        if propagation == "coo":  # the earlier path: autograd through torch.sparse.mm on the COO matrix
            model.spread = lambda x: torch.sparse.mm(coo, x)
        t: dict[str, float] = defaultdict(float)
        model.embeddings = timed(t, "propagation", model.embeddings)
        for name in ("sample", "sample_shared", "shared_hits"):
            setattr(dm.sampler, name, timed(t, "sampling", getattr(type(dm.sampler), name).__get__(dm.sampler)))
        loader = dm.train_dataloader()
        loader.sampler.set_epoch(0)
        for b, rows in zip(range(n), loader):
            t0 = time.perf_counter()
            inner = t["propagation"] + t["sampling"]
            output = train_step(model, loss, rows, sampler=dm.sampler, generator=negatives_generator("cpu", 0, 0, b),
                                mode=mode, groups=groups)
            t1 = time.perf_counter()
            t["loss"] += t1 - t0 - (t["propagation"] + t["sampling"] - inner)
            output.loss.backward()
            t2 = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=True)
            t3 = time.perf_counter()
            before_hook = t["propagation"]
            after_update(loss, output)
            t4 = time.perf_counter()
            t["propagation"] = before_hook  # a refresh's own propagation counts in its hook
            t["backward"] += t2 - t1
            t["optimizer"] += t3 - t2
            t["after step"] += t4 - t3
        for name in ("sample", "sample_shared", "shared_hits"):
            delattr(dm.sampler, name)
        return dict(t)

    # the bare limit: the products and the score matmul, alone, on the first batch's shapes
    model, loss, _ = fresh()
    rows = next(iter(dm.train_dataloader()))
    ego = torch.cat([model.user_emb.weight, model.item_emb.weight]).detach()
    draws = dm.sampler.sample_shared(loss.n_negatives, negatives_generator("cpu", 0, 0, 0), "cpu",
                                     groups=groups).view(groups, -1)  # (G, N): each group of rows against its draw

    def bare_products() -> float:
        t0 = time.perf_counter()
        with torch.no_grad():
            x = ego
            for layer in range(2 * model.layers):  # forward with A, then the backward's products with Aᵀ
                x = sparse_product(adjacency if layer < model.layers or adjacency_t is None else adjacency_t, x)
        return time.perf_counter() - t0

    def bare_scores() -> float:
        if mode != "shared":  # per pair, gathering the (B, N, d) rows is the work itself: no floor to compare
            return 0.0
        queries = ego[rows[:, 0]].clone().requires_grad_(True)
        items = ego[dm.splits.n_users + draws].clone().requires_grad_(True)
        t0 = time.perf_counter()
        grouped_scores(queries, items).sum().backward()
        return time.perf_counter() - t0

    # LightGCN's own propagation (the others add noise or weigh layers), over one shared draw per group
    symmetric = args.model == "lightgcn" and adjacency_t is None and model.layers >= 1 and mode == "shared"
    # the restricted floor's parts on the first batch's rows S (users, positives, draws: sorted node ids)
    n_nodes = adjacency.shape[0]
    crow, col, val = adjacency.crow_indices(), adjacency.col_indices(), adjacency.values()
    degree = crow[1:] - crow[:-1]
    items = dm.splits.n_users + torch.cat([rows[:, 1], draws.reshape(-1)])
    needed = torch.unique(torch.cat([rows[:, 0], items]))

    def row_slice() -> torch.Tensor:  # A[S, :], (|S|, n)
        d = degree[needed]
        starts = torch.zeros(needed.numel() + 1, dtype=crow.dtype)
        torch.cumsum(d, 0, out=starts[1:])
        entries = torch.repeat_interleave(crow[needed] - starts[:-1], d) + torch.arange(int(starts[-1]))
        return torch.sparse_csr_tensor(starts, col[entries], val[entries], (needed.numel(), n_nodes),
                                       check_invariants=False)

    def column_mask() -> torch.Tensor:  # A[:, S] (= A[S, :]ᵀ for a symmetric A), as an (n, n) CSR
        inside = torch.zeros(n_nodes, dtype=torch.bool)
        inside[needed] = True
        kept = inside[col]
        counts = torch.zeros(col.numel() + 1, dtype=crow.dtype)
        torch.cumsum(kept, 0, out=counts[1:])
        return torch.sparse_csr_tensor(counts[crow], col[kept], val[kept], (n_nodes, n_nodes), check_invariants=False)

    def slice_transposed(sliced: torch.Tensor) -> torch.Tensor:  # A[S, :]ᵀ, (n, |S|), from the forward's slice
        starts, cols = sliced.crow_indices(), sliced.col_indices()
        owner = torch.repeat_interleave(torch.arange(needed.numel()), starts[1:] - starts[:-1])
        order = torch.argsort(cols, stable=True)  # each row's entries stay in S's (ascending) order
        rows_t = torch.zeros(n_nodes + 1, dtype=starts.dtype)
        torch.cumsum(torch.bincount(cols, minlength=n_nodes), 0, out=rows_t[1:])
        return torch.sparse_csr_tensor(rows_t, owner[order], sliced.values()[order], (n_nodes, needed.numel()),
                                       check_invariants=False)

    def restricted_gradients() -> bool:
        """The embeddings' gradient of a loss on the final rows S, through the full propagation and
        through the restricted one (last layer A[S, :], its backward A[S, :]ᵀ): bit for bit the same?"""
        weights = torch.randn(needed.numel(), ego.shape[1])
        grads = []
        for restricted in (False, True):
            x = ego.clone().requires_grad_(True)
            layers = [x]
            for _ in range(model.layers - (1 if restricted else 0)):
                layers.append(sparse_product(adjacency, layers[-1]))
            if restricted:
                sliced = row_slice()
                last = sparse_product(sliced, layers[-1], slice_transposed(sliced))
                final = layer_mean([layer[needed] for layer in layers] + [last])
            else:
                final = layer_mean(layers)[needed]
            (final * weights).sum().backward()
            grads.append(x.grad)
        return torch.equal(grads[0], grads[1])

    def restricted_parts() -> dict[str, float]:
        t: dict[str, float] = {}
        grad_rows = torch.zeros_like(ego)
        grad_rows[needed] = torch.randn(needed.numel(), ego.shape[1])
        for name, build, operand in (("full product", lambda: adjacency, ego), ("row slice", row_slice, ego),
                                     ("column mask", column_mask, grad_rows)):
            t0 = time.perf_counter()
            matrix = build()
            t[name + " build"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            sparse_product(matrix, operand)
            t[name] = time.perf_counter() - t0
        sliced = row_slice()
        t0 = time.perf_counter()
        transposed = slice_transposed(sliced)
        t["slice transposed build"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        sparse_product(transposed, grad_rows[needed])
        t["slice transposed"] = time.perf_counter() - t0
        return t

    rounds: dict[str, list[float]] = defaultdict(list)
    parts("csr")  # warm-up
    for _ in range(args.rounds):
        for propagation in ("csr", "coo"):
            for k, v in parts(propagation).items():
                rounds[f"{propagation}:{k}"].append(v)
        rounds["bare products"].append(statistics.median(bare_products() for _ in range(3)) * n)
        rounds["bare scores"].append(statistics.median(bare_scores() for _ in range(3)) * n)
        if symmetric:
            for _ in range(3):
                for k, v in restricted_parts().items():
                    rounds[f"restricted:{k}"].append(v * n)
    med = {k: statistics.median(v) for k, v in rounds.items()}
    step = {p: sum(med.get(f"{p}:{k}", 0.0) for k in PARTS) for p in ("csr", "coo")}
    bare = med["bare products"] + med["bare scores"]

    model, _, _ = fresh()
    model.eval()
    t0 = time.perf_counter()
    with torch.no_grad():
        dm.val_evaluator.evaluate(model.full_scorer("valid"))
    validation = time.perf_counter() - t0
    epochs, every = int(cfg.trainer.max_epochs), int(cfg.trainer.check_val_every_n_epoch)

    print("\n| part | now (CSR), ms / step | before (COO), ms / step |\n|---|---|---|")
    for k in PARTS:
        print(f"| {k} | {1000 * med.get(f'csr:{k}', 0.0) / n:.1f} | {1000 * med.get(f'coo:{k}', 0.0) / n:.1f} |")
    print(f"| **step** | **{1000 * step['csr'] / n:.1f}** | **{1000 * step['coo'] / n:.1f}** |")
    scores = (f"the score matmul forward and backward {1000 * med['bare scores'] / n:.1f} ms" if mode == "shared"
              else "per pair, no score floor: gathering each pair's N rows is the loss's own work")
    print(f"\nbare limit: {1000 * bare / n:.1f} ms / step ({model.layers} products forward and {model.layers} backward "
          f"{1000 * med['bare products'] / n:.1f} ms; {scores}); step / bare: {step['csr'] / bare:.2f} now, "
          f"{step['coo'] / bare:.2f} before")
    if symmetric:
        r = {k.split(":", 1)[1]: 1000 * v / n for k, v in med.items() if k.startswith("restricted:")}
        full, others = r["full product"], 2 * (model.layers - 1) * r["full product"]
        forward = r["row slice build"] + r["row slice"]
        # the last layer's backward: A's columns in S masked from A, the forward's slice transposed, or all of A
        backward = {"masking A[:, S]": r["column mask build"] + r["column mask"],
                    "transposing A[S, :]": r["slice transposed build"] + r["slice transposed"], "the full A": full}
        best = min(backward, key=backward.get)
        free = r["row slice"] + min(r["column mask"], r["slice transposed"], full)
        print(f"restricted floor: {others + forward + backward[best]:.1f} ms / step of products against "
              f"{2 * model.layers} full, {2 * model.layers * full:.1f} ms (S: {needed.numel()} of {n_nodes} nodes, "
              f"{int(degree[needed].sum())} of {col.numel()} entries; a full product {full:.1f} ms; last layer forward "
              f"{r['row slice build']:.1f} ms building A[S, :] + {r['row slice']:.1f} ms; backward by "
              + ", ".join(f"{k} {v:.1f} ms" for k, v in backward.items())
              + f"; with its structure free {others + free:.1f} ms; the same gradient, bit for bit: "
              f"{'yes' if restricted_gradients() else 'NO'})")
    print(f"a validation pass: {validation:.1f} s")
    for p, label in (("csr", "now"), ("coo", "before")):
        epoch = n_epoch * step[p] / n
        total = epochs * epoch + (epochs // every) * validation
        print(f"{label}: an epoch ≈ {epoch:.0f} s of steps; {epochs} epochs with {epochs // every} validations "
              f"≈ {total / 3600:.2f} h")


if __name__ == "__main__":
    main()

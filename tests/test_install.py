"""What ``pip install -e .`` pulls in on a fresh machine: the design card's core (Lightning, Hydra, PyG,
W&B, pandas, SciPy) and nothing a user only needs to tune or use a cluster (Optuna and its SQL stack,
submitit: the ``[tune]`` and ``[slurm]`` extras), nor a CUDA build when the CPU torch is already there."""

from __future__ import annotations

import json
import subprocess
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: what only the extras bring (Optuna's SQL and CLI stack, submitit), the CUDA wheels, the test tools
NOT_IN_CORE = ("optuna", "hydra-optuna-sweeper", "alembic", "sqlalchemy", "cliff", "cmd2", "submitit",
               "hydra-submitit-launcher", "playwright", "pytest")


@pytest.mark.slow
def test_the_core_install_resolves_without_the_extras_or_cuda(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    torch = subprocess.run([python, "-m", "pip", "install", "-q", "torch==2.13.0"], capture_output=True, text=True)
    if torch.returncode != 0:
        pytest.skip(f"no CPU torch 2.13.0 to install here: {torch.stderr.strip().splitlines()[-1:]}")
    report = tmp_path / "report.json"
    plan = subprocess.run([python, "-m", "pip", "install", "--dry-run", "-q", "--report", str(report), "-e", str(REPO)],
                          capture_output=True, text=True)
    if plan.returncode != 0:
        pytest.skip(f"pip could not resolve the dependencies here (no index?): {plan.stderr.strip()[-300:]}")
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert {"lightning", "hydra-core", "torch-geometric", "wandb", "pandas", "scipy"} <= names, names
    pulled = sorted(n for n in names if n in NOT_IN_CORE or n.startswith("nvidia-") or n == "torch")
    assert pulled == [], f"the core install pulls in {pulled}"
    extras = subprocess.run([python, "-m", "pip", "install", "--dry-run", "-q", "--report", str(report),
                             "-e", f"{REPO}[tune,slurm]"], capture_output=True, text=True)
    assert extras.returncode == 0, extras.stderr[-500:]
    with_extras = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert {"optuna", "hydra-submitit-launcher", "submitit"} <= with_extras
    optuna = next(i for i in json.loads(report.read_text())["install"] if i["metadata"]["name"].lower() == "optuna")
    assert int(optuna["metadata"]["version"].split(".")[0]) >= 4  # not the 2021 pin of Hydra's Optuna sweeper

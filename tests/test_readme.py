"""The README's claims that code can check: its set-up commands, its example loss, and that
every `python -m bench` command it shows composes."""

import re
from pathlib import Path

import yaml

from bench.run import train_and_test
from tests.helpers import TINY, make_cfg

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_states_the_two_setup_commands():
    block = re.search(r"## Set up\n\n```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ['pip install -e . && python -m bench', 'pip install -e ".[test]" && python -m pytest']


def test_the_add_a_loss_example_trains_through_the_registry(tmp_path):
    section = README[README.index("### Adding a loss"):]
    python_src = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    yaml_src = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    exec(compile(python_src, "README.md", "exec"), {})  # registers "my_loss"
    cfg = make_cfg(TINY, tmp_path)
    cfg.loss = yaml.safe_load(yaml_src)
    cfg.loss.n_negatives = 20
    res = train_and_test(cfg)
    assert res["config"]["loss"]["name"] == "my_loss" and res["status"] == "completed"
    assert res["config"]["optimizer"]["lr"] == 0.1  # the recipe reached the optimizer


def _readme_bench_commands() -> list[list[str]]:
    """The overrides of each ``python -m bench ...`` line in the README's bash blocks."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.splitlines():
            line = line.split(" #")[0].split(" > ")[0].strip()
            if line.startswith("BENCH_DATA_DIR="):
                line = line.split(" ", 1)[1]
            if not line.startswith("python -m bench ") or line.startswith("python -m bench."):
                continue
            args = [a for a in line.split()[3:] if a not in ("-m", "--multirun")]
            if any(a.startswith("--") for a in args):
                continue  # --help, --cfg job
            out.append(args)
    return out


def test_every_bench_command_in_the_readme_composes():
    from hydra import compose, initialize_config_dir

    from bench.app import CONFIG_DIR
    from bench.experiments import apply_per_loss

    commands = _readme_bench_commands()
    assert len(commands) >= 15
    for args in commands:
        # a sweep composes as its first value of each swept key
        overrides = [a if "=" not in a or "(" in a else a.split("=", 1)[0] + "=" + a.split("=", 1)[1].split(",")[0]
                     for a in args]
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", overrides=overrides, return_hydra_config=True)
        apply_per_loss(cfg, overrides)

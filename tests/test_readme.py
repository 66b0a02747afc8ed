"""The README's claims that code can check: its two set-up commands and its example loss."""

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

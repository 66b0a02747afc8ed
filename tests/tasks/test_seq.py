"""Sequential recommendation: the data module batches users; SASRec trains with every loss."""

from pathlib import Path

import pytest

from bench.app import CONFIG_DIR
from bench.datasets import CustomFile
from bench.errors import ConfigError
from bench.run import train_and_test
from bench.tasks import SeqTask

LOSSES = sorted(p.stem for p in (Path(CONFIG_DIR) / "loss").glob("*.yaml"))


def test_training_rows_are_users_with_a_next_item_and_pairs_are_sequence_positions(tmp_path):
    f = tmp_path / "s.tsv"
    f.write_text("user\titem\ttime\na\tx\t3\na\ty\t1\na\tz\t2\na\tw\t9\nb\tx\t5\nb\ty\t4\nc\tx\t1\nc\tw\t2\nc\ty\t3\n")
    dm = SeqTask(users_per_batch=7).datamodule(CustomFile(str(f), k_core=1).load(), seed=0)
    seq = dm.train_data.sequences
    # a keeps y, z for training; b keeps y, x; c keeps x only (w validates, y tests): no next item
    assert (seq.indptr[1:] - seq.indptr[:-1]).tolist() == [2, 2, 1]
    assert dm.train_rows.tolist() == [[0, 0], [1, 0]] and dm.batch_size == 7
    assert dm.train_data.n_pairs == seq.items.numel() == 5


@pytest.mark.slow
@pytest.mark.parametrize("loss", LOSSES)
def test_sasrec_trains_with_every_loss(loss, tmp_path, make_cfg, sequences_file, loss_settings):
    f = sequences_file(tmp_path / "seq.tsv")
    cfg = make_cfg(["task=seq", "model=sasrec", f"loss={loss}", "dataset=custom", f"dataset.path={f}",
                    "dataset.k_core=1", "trainer.max_epochs=1", "trainer.accelerator=cpu", "loss.n_negatives=20",
                    "task.users_per_batch=16", "model.max_len=8", "logger=none", *loss_settings(loss)], tmp_path)
    if loss == "talos":  # one threshold per user, and a sequence's queries are its prefixes
        with pytest.raises(ConfigError, match="loss=talos learns one threshold per user"):
            train_and_test(cfg)
        return
    res = train_and_test(cfg)
    assert res.status == "completed" and res.data["test_users"] == 40

"""Every registered loss has a family and a paper name; reports follow Table 2's order."""

from bench.losses import LOSSES
from bench.losses.families import FAMILIES, PAPER_NAMES, family_of, order_key, paper_name


def test_every_registered_loss_is_in_exactly_one_family_and_has_a_paper_name():
    members = [loss for family in FAMILIES.values() for loss in family]
    # the package's own losses (tests register throwaway ones elsewhere)
    ours = [name for name, cls in LOSSES.items() if cls.__module__.startswith("bench.losses.")]
    assert len(ours) == 27 and sorted(members) == sorted(ours) == sorted(PAPER_NAMES)  # none twice, none missing


def test_order_and_names_follow_table_2():
    table2 = ["slk", "psl", "sl", "bpr", "songk", "bsl", "llpauc", "advinfonce", "guidedrec"]
    assert [paper_name(loss, 20) for loss in sorted(table2, key=order_key)] == [
        "BPR", "GuidedRec", "SONG@20", "LLPAUC", "SL", "AdvInfoNCE", "BSL", "PSL", "SL@20"]
    assert family_of("llpauc") == "partial AUC" and family_of("mine") == "other"
    assert order_key("mine") > order_key("slk") and paper_name("mine") == "mine" and paper_name("slk") == "SL@K"

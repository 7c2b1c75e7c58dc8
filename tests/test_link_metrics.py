"""Link prediction's figures: AUC and AP against sklearn, MRR and Hits@K against OGB's own Evaluator for
ogbl-citation2, hand-computed cases with ties, the NaN of a split without both classes, and every figure over 2
real gloo ranks with uneven shares (one rank's share empty) exactly the figure of one process."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.harness.gloo_ranks import join_gloo
from train.cluster.distenv import free_port
from train.loop.link_metrics import (
    HITS_AT,
    LinkTally,
    average_precision,
    doubled_ranks,
    figures,
    pair_figures,
    ranking_figures,
)


def scored_pairs(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores rounded to tenths (many ties across both classes), edges scored higher on the whole."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (count,), generator=g)
    scores = torch.round((labels * 0.7 + torch.randn(count, generator=g)) * 10) / 10
    return scores, labels


def ranked_positives(count: int, negatives: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positives with their own negatives, on a coarse grid so that a positive often ties some of them."""
    g = torch.Generator().manual_seed(seed)
    pos = torch.round((torch.randn(count, generator=g) + 1.5) * 4) / 4
    neg = torch.round(torch.randn(count, negatives, generator=g) * 4) / 4
    return pos, neg


def test_auc_and_ap_by_hand_with_a_tie_across_the_classes():
    scores, labels = torch.tensor([0.9, 0.8, 0.8, 0.3]), torch.tensor([1, 0, 1, 0])
    found, notes = pair_figures("val", torch.stack([scores, labels.float()], dim=1))
    # AUC: of the 4 (edge, negative) pairs 3 are ordered right and one tie counts half: 3.5 / 4.
    # AP: at 0.9 recall 1/2 with precision 1, at 0.8 (both tied pairs at once) recall 1 with precision 2/3.
    assert found == {"val_auc": 0.875, "val_ap": pytest.approx(0.5 * 1 + 0.5 * 2 / 3, abs=1e-15)} and notes == []


@pytest.mark.parametrize("count,seed", [(7, 0), (301, 1), (5000, 2)])
def test_auc_and_ap_are_sklearns_with_ties_and_ignore_the_order_of_the_pairs(count, seed):
    from sklearn.metrics import average_precision_score, roc_auc_score

    scores, labels = scored_pairs(count, seed)
    if count == 7:  # a few pairs: both classes for certain
        labels = torch.tensor([1, 0, 1, 0, 0, 1, 1])
    found, _ = pair_figures("test", torch.stack([scores, labels.float()], dim=1))
    assert found["test_auc"] == pytest.approx(roc_auc_score(labels.numpy(), scores.numpy()), abs=1e-12)
    assert found["test_ap"] == pytest.approx(average_precision_score(labels.numpy(), scores.numpy()), abs=1e-12)
    if count > 7:
        assert 0.6 < found["test_auc"] < 0.9  # a signal, not perfect
    shuffled = torch.randperm(count, generator=torch.Generator().manual_seed(9))
    again, _ = pair_figures("test", torch.stack([scores[shuffled], labels[shuffled].float()], dim=1))
    assert again == found  # to the bit


def test_a_split_of_one_class_has_nan_figures_and_says_why():
    from sklearn.metrics import average_precision_score

    edges_only = torch.tensor([[0.2, 1.0], [0.7, 1.0], [0.7, 1.0]])
    found, notes = pair_figures("val", edges_only)
    assert math.isnan(found["val_auc"])
    assert found["val_ap"] == average_precision_score([1, 1, 1], [0.2, 0.7, 0.7]) == 1.0  # AP needs no negative
    assert notes == ["val_auc is NaN: all 3 scored pairs of the split are edges, none a negative (the AUC needs both)"]
    found, notes = pair_figures("test", torch.tensor([[0.2, 0.0], [0.1, 0.0]]))
    assert math.isnan(found["test_auc"]) and math.isnan(found["test_ap"])
    assert notes == ["test_auc and test_ap are NaN: all 2 scored pairs of the split are negatives, none an edge"]
    found, notes = pair_figures("test", torch.empty(0, 2))
    assert math.isnan(found["test_auc"]) and notes == ["test_auc and test_ap are NaN: the split has no scored pairs"]


def test_average_precision_of_a_perfect_and_a_reversed_ranking():
    assert average_precision(torch.tensor([3.0, 2.0, 1.0]), torch.tensor([True, True, False])) == 1.0
    # reversed: the edge comes last, at precision 1/3
    assert average_precision(torch.tensor([3.0, 2.0, 1.0]), torch.tensor([False, False, True])) == 1 / 3


def test_ogbs_rank_by_hand_ties_take_the_mean_of_optimistic_and_pessimistic():
    pos = torch.tensor([0.5, 0.9, 0.1])
    neg = torch.tensor([[0.7, 0.5, 0.1], [0.1, 0.2, 0.3], [0.1, 0.1, 0.1]])
    # ranks: 0.5 has 1 above and 1 tie: (1 + 2) / 2 + 1 = 2.5; 0.9 is first: 1; 0.1 ties all 3: (0 + 3) / 2 + 1 = 2.5
    assert doubled_ranks(pos, neg).tolist() == [5, 2, 5]
    found, notes = ranking_figures("val", doubled_ranks(pos, neg), (1, 3))
    assert found == {"val_mrr": pytest.approx((1 / 2.5 + 1 + 1 / 2.5) / 3, abs=1e-15), "val_hits@1": 1 / 3,
                     "val_hits@3": 1.0} and notes == []


def test_mrr_and_hits_are_ogbs_evaluator_for_citation2():
    from ogb.linkproppred import Evaluator

    pos, neg = ranked_positives(2000, 1000, seed=4)
    found, _ = ranking_figures("test", doubled_ranks(pos, neg), HITS_AT)
    ogb = Evaluator(name="ogbl-citation2").eval({"y_pred_pos": pos, "y_pred_neg": neg})
    assert found["test_mrr"] == pytest.approx(float(ogb["mrr_list"].mean()), abs=1e-6)  # OGB's mean is float32
    for k in HITS_AT:
        assert found[f"test_hits@{k}"] == pytest.approx(float(ogb[f"hits@{k}_list"].mean()), abs=1e-6)
    assert 0.05 < found["test_mrr"] < 0.9  # neither all first nor all last
    shuffled = torch.randperm(2000, generator=torch.Generator().manual_seed(3))
    assert ranking_figures("test", doubled_ranks(pos[shuffled], neg[shuffled]), HITS_AT)[0] == found  # to the bit


def test_a_split_without_ranked_positives_has_nan_ranking_figures():
    found, notes = ranking_figures("test", torch.empty(0, dtype=torch.long), (10,))
    assert math.isnan(found["test_mrr"]) and math.isnan(found["test_hits@10"])
    assert notes == ["test_mrr, test_hits@10 are NaN: the split has no ranked positives"]


def test_a_tally_refuses_shapes_that_do_not_pair():
    tally = LinkTally()
    with pytest.raises(ValueError, match=r"\[M\] and neg_scores \[M, K\], not \(3,\) and \(2, 5\)"):
        tally.add_ranked(torch.zeros(3), torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"two vectors of one length, not \(3,\) and \(4,\)"):
        tally.add_pairs(torch.zeros(3), torch.zeros(4))


# ---- over real ranks --------------------------------------------------------------------------------------

VAL_PAIRS, TEST_PAIRS, VAL_RANKED = (3001, 5), (457, 6), (801, 50, 7)  # (count, seed), (count, negatives, seed)


def _shares(count: int, rank: int) -> list[torch.Tensor]:
    """Uneven, interleaved shares of 2 ranks, each in a shuffled order and several batches: rank 0 one in five."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(11))
    mine = order[order % 5 == 0] if rank == 0 else order[order % 5 != 0]
    return list(mine.split(97))


def _worker(rank: int, port: int, out_dir: str) -> None:
    join_gloo(rank, 2, port)
    try:
        tallies = {"val": LinkTally(), "test": LinkTally()}
        if rank == 0:  # the val split's pairs are all on rank 0; rank 1's share of them is empty
            scores, labels = scored_pairs(*VAL_PAIRS)
            for s, lab in zip(scores.split(500), labels.split(500)):
                tallies["val"].add_pairs(s, lab)
        scores, labels = scored_pairs(*TEST_PAIRS)
        for part in _shares(TEST_PAIRS[0], rank):
            tallies["test"].add_pairs(scores[part], labels[part].bool())
        pos, neg = ranked_positives(*VAL_RANKED)
        for part in _shares(VAL_RANKED[0], rank):  # the test split ranks nothing: its MRR is NaN, with a note
            tallies["val"].add_ranked(pos[part], neg[part])
        found = figures(tallies, torch.device("cpu"))
        (Path(out_dir) / f"{rank}.json").write_text(json.dumps({"values": found.values, "notes": found.notes}))
    finally:
        dist.destroy_process_group()


def test_every_figure_over_two_ranks_is_exactly_one_process_figure(tmp_path):
    mp.start_processes(_worker, args=(free_port(), str(tmp_path)), nprocs=2, start_method="spawn")
    results = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(2)]
    expected: dict[str, float] = {}
    for split, (count, seed) in (("val", VAL_PAIRS), ("test", TEST_PAIRS)):
        scores, labels = scored_pairs(count, seed)  # one process, every pair, in order
        expected.update(pair_figures(split, torch.stack([scores, labels.float()], dim=1))[0])
    pos, neg = ranked_positives(*VAL_RANKED)
    expected.update(ranking_figures("val", doubled_ranks(pos, neg), HITS_AT)[0])
    unranked = ["test_mrr", *(f"test_hits@{k}" for k in HITS_AT)]
    for result in results:
        values = result["values"]
        assert set(values) == {*expected, *unranked}
        assert {k: values[k] for k in expected} == expected  # to the bit
        assert all(math.isnan(values[k]) for k in unranked)
        assert result["notes"] == ["test_mrr, test_hits@1, test_hits@3, test_hits@10 are NaN: the split has no "
                                   "ranked positives"]
    assert 0.6 < expected["val_auc"] < 0.9 and 0.6 < expected["test_ap"] < 0.95 and 0.05 < expected["val_mrr"] < 0.9


def test_a_nan_score_makes_no_figure_and_says_how_many():
    pairs = torch.tensor([[0.3, 1.0], [float("nan"), 0.0], [0.1, 0.0]])
    found, notes = pair_figures("val", pairs)
    assert math.isnan(found["val_auc"]) and math.isnan(found["val_ap"])
    assert notes == ["val_auc and val_ap are NaN: 1 of the split's 3 scores are NaN"]
    pos, neg = torch.tensor([0.5, float("nan"), 0.5]), torch.tensor([[0.1, 0.2], [0.1, 0.2], [0.1, float("nan")]])
    assert doubled_ranks(pos, neg).tolist() == [2, 0, 0]  # OGB's comparisons would rank all three first
    found, notes = ranking_figures("test", doubled_ranks(pos, neg), (1,))
    assert math.isnan(found["test_mrr"]) and math.isnan(found["test_hits@1"])
    assert notes == ["test_mrr, test_hits@1 are NaN: 2 of the split's 3 positives or their negatives scored NaN"]

"""bench/pools.py: the scale case's layouts (the references beside the pools) and a
ratio against the right one queue: ours for ours, Node's for Node's."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

from bench.pools import FAIRNESS_LAYOUTS, NODE_ONE_QUEUE, ONE_QUEUE, markdown, round_order, scale_layouts  # noqa: E402


def test_the_references_run_beside_the_pools_and_node_only_when_it_can():
    labels = [lay[0] for lay in scale_layouts(with_node=True)]
    assert labels[:4] == [ONE_QUEUE, "pool over 1 queue", "pool over 10 queues", "pool over 100 queues"]
    assert "a Worker per queue, 100 queues, no pool" in labels
    assert NODE_ONE_QUEUE in labels and "Node: a Worker per queue, 100 queues" in labels
    assert not [lay for lay in scale_layouts(with_node=False) if lay[1] == "node"]
    assert "pool over 1,000 queues" in labels and "pool over 1,000 queues, turn 10" in labels
    for _label, layout, _count, base, *more in scale_layouts(with_node=True):
        assert more in ([], [{"turn": 10}])
        assert base == (NODE_ONE_QUEUE if layout == "node" else ONE_QUEUE)


def _row(case, base, jps, worker, redis):
    return {"case": case, "base": base, "jobs": 1000, "jobs_per_s": jps, "worker_us_per_job": worker,
            "redis_us_per_job": redis, "script_calls_per_job": 0.1, "connections": 4}


def test_a_node_row_is_read_against_nodes_own_one_queue():
    meta = {"when": "w", "commit": "c", "cpus": 2, "cpu": "AMD EPYC", "redis": "7.0.15", "python": "3.11",
            "load_before": "0.1", "load_after": "0.2"}
    res = {"meta": meta, "fairness": [], "idle": None, "node_skipped": None,
           "scale": [_row(ONE_QUEUE, ONE_QUEUE, 20000, 30, 30), _row("pool over 100 queues", ONE_QUEUE, 15000, 40, 40),
                     _row(NODE_ONE_QUEUE, NODE_ONE_QUEUE, 10000, 60, 40),
                     _row("Node: a Worker per queue, 100 queues", NODE_ONE_QUEUE, 5000, 120, 80)]}
    md = markdown(res)
    assert "| pool over 100 queues | 1,000 | 15,000 | 0.75 |" in md and "| 0.75 | 0.1 | 4 |" in md
    assert "| Node: a Worker per queue, 100 queues | 1,000 | 5,000 | 0.50 |" in md and "| 0.50 | 0.1 | 4 |" in md
    res["node_skipped"] = "no node on PATH"
    assert "The Node layouts did not run: no node on PATH." in markdown(res)


def test_the_fairness_case_runs_the_pool_with_turns_of_one_and_ten():
    assert [(layout, turn) for _label, layout, turn in FAIRNESS_LAYOUTS] == [("worker", 1), ("family", 1), ("family", 10)]


def test_our_layouts_never_run_right_after_nodes_and_each_takes_its_turn_first():
    """Node's layouts close every round: the one queue our ratios are read against never
    runs right after Node's workers, and each of ours leads a round in turn."""
    layouts = scale_layouts(with_node=True)
    ours = [lay for lay in layouts if lay[1] != "node"]
    firsts = set()
    for r in range(len(ours)):
        order = round_order(layouts, r)
        assert sorted(order) == sorted(layouts)
        kinds = [lay[1] == "node" for lay in order]
        assert kinds == sorted(kinds), order  # ours, then Node's
        firsts.add(order[0][0])
    assert firsts == {lay[0] for lay in ours}
    assert all(lay[1] != "node" for lay in round_order(scale_layouts(with_node=False), 3))

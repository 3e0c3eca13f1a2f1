"""Where compute threads run (reame/topology.py): NUMA pools from a fake sysfs, slots claimed
by lock files, and compute threads really pinned."""

import os
import subprocess
import sys
import threading
import time

import pytest
from dataclasses import replace

from reame.server.config import ServerConfig
from reame.topology import Topology, claim_slot, parse_cpulist


def fake_sysfs(root, nodes: dict[int, str], siblings: int = 2, cores_per_pkg: int = 8):
    """nodes: node -> cpulist; cpu c is core c % cores_per_pkg (its SMT siblings c + k*8)."""
    for n, cl in nodes.items():
        d = root / "node" / f"node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cl + "\n")
        for c in parse_cpulist(cl):
            t = root / "cpu" / f"cpu{c}" / "topology"
            t.mkdir(parents=True)
            (t / "core_id").write_text(f"{c % cores_per_pkg}\n")
            (t / "physical_package_id").write_text("0\n")
    return root


# two nodes of 4 cores with 2 hyperthreads each: cpu c and c + 8 share a core
TWO_NODES = {0: "0-3,8-11", 1: "4-7,12-15"}


def test_parse_cpulist():
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []


def test_one_pool_per_node_cores_before_siblings(tmp_path):
    # catches: pools that interleave nodes (remote memory for half the threads) and an order
    # that puts two threads on one core's siblings while other cores idle
    topo = Topology.read(fake_sysfs(tmp_path, TWO_NODES), allowed=set(range(16)))
    assert topo.nodes == {0: [0, 1, 2, 3, 8, 9, 10, 11], 1: [4, 5, 6, 7, 12, 13, 14, 15]}
    assert topo.pools(2) == [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]
    one = topo.pools(1)[0]
    assert sorted(one) == list(range(16)) and topo.physical_cores(one[:8]) == 8
    four = topo.pools(4)                      # each node split by whole cores
    assert four == [[0, 1, 8, 9], [2, 3, 10, 11], [4, 5, 12, 13], [6, 7, 14, 15]]
    assert all(topo.physical_cores(p) == 2 for p in four)


def test_the_affinity_mask_and_missing_sysfs(tmp_path):
    topo = Topology.read(fake_sysfs(tmp_path, TWO_NODES), allowed={0, 1, 2, 3})
    assert topo.nodes == {0: [0, 1, 2, 3]}    # a container on part of node 0: one node
    bare = Topology.read(tmp_path / "nothing", allowed={0, 1, 5})
    assert bare.nodes == {0: [0, 1, 5]} and bare.physical_cores([0, 1, 5]) == 3


def test_placement_binds_only_where_there_are_several_nodes(tmp_path):
    # catches: pinning on a single-node machine by default (the OS balances better when the
    # machine is shared) and workers that all take the same node
    two = Topology.read(fake_sysfs(tmp_path / "a", TWO_NODES), allowed=set(range(16)))
    one = Topology.read(fake_sysfs(tmp_path / "b", {0: "0-7"}), allowed=set(range(8)))
    assert ServerConfig(pin="auto").placement(one) is None
    assert ServerConfig().placement(two) is None          # reame.wsgi:app: REAME_PIN decides
    assert ServerConfig(pin="off").placement(two) is None
    assert ServerConfig(pin="cores").placement(one) == list(range(8))
    from reame.server import config as server_config
    cfgs = [ServerConfig(pin="auto", workers=2, metrics_dir=str(tmp_path / "m")) for _ in "ab"]
    got = []
    for c in cfgs:                      # two workers: the claim is per process, forget ours
        server_config._CLAIMED.clear()
        got.append(c.placement(two))
    assert got == two.pools(2)
    # one worker placing several models (each its config): one pool, the one it claimed
    # (catches: a second claim, which flock refuses in this process, taking another's pool)
    server_config._CLAIMED.clear()
    third = ServerConfig(pin="auto", workers=3, metrics_dir=str(tmp_path / "n"))
    assert third.placement(two) == third.placement(two) == replace(third).placement(two)


def test_a_slot_is_held_until_its_process_exits(tmp_path):
    assert [claim_slot(tmp_path, 2) for _ in range(3)] == [0, 1, None]
    code = f"from reame.topology import claim_slot; print(claim_slot({str(tmp_path)!r}, 3))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.stdout.strip() == "2"          # 0 and 1 held here; the child got the free one
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.stdout.strip() == "2"          # the child exited: its slot is free again


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to pin apart")
def test_compute_threads_run_on_their_cpus(stories_model):
    # catches: a `cpus` option that never reaches the threads (the pool ignores it), pinning
    # the wrong thread (the one running steps must be on cpus[0], the worker on cpus[1]), and
    # pinning that changes the numbers
    from reame.batch import Batch
    from reame.jit.engine import JITEngine
    a, b = sorted(os.sched_getaffinity(0))[:2]
    seen = {}

    def steps(cpus, key):
        eng = JITEngine(stories_model, n_ctx=64, max_seqs=1, threads=2, cpus=cpus)
        seen[key] = eng.forward(Batch.prefill([1, 43, 261, 112], 0, 0))[0].copy()
        if cpus:
            seen["caller"] = os.sched_getaffinity(0)
            seen["worker"] = os.sched_getaffinity(eng.pool._threads[0].native_id)
        eng.pool.close()
    for cpus, key in (([b, a], "pinned"), (None, "floating")):
        t = threading.Thread(target=steps, args=(cpus, key))   # pinning is per thread: not
        t.start()                                              # the test's own
        t.join()
    assert (seen["caller"], seen["worker"]) == ({b}, {a})
    assert (seen["pinned"] == seen["floating"]).all()
    assert len(os.sched_getaffinity(0)) >= 2

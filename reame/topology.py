"""Where compute threads run: NUMA nodes, physical cores, and one engine per node.

A step's threads meet at barriers many times per token, so a thread that migrates, or shares a
physical core with another compute thread, stalls all of them; and weights read across NUMA
nodes run at the remote node's bandwidth. So, on a machine with several nodes, `reame serve`
runs one worker process (one engine, one pool of threads) per node by default, each bound to
its node's CPUs before it loads the model (its pages are then allocated on that node: Linux
places a page where it is first touched); within a pool, thread i runs on the i-th physical
core of the pool (SMT siblings only after every core has one thread).

Read from sysfs (`/sys/devices/system`; a fake tree in tests): `node/node*/cpulist` and
`cpu/cpu*/topology/{core_id,physical_package_id}`. Without them (containers often hide them)
every allowed CPU is its own core on one node.
"""

from __future__ import annotations

import fcntl
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("reame.topology")
SYSFS = "/sys/devices/system"


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


@dataclass
class Topology:
    nodes: dict[int, list[int]]                    # node -> its CPUs
    core_of: dict[int, tuple[int, int]] = field(default_factory=dict)   # cpu -> (package, core)

    @classmethod
    def read(cls, root: str | os.PathLike = SYSFS, allowed: set[int] | None = None) -> "Topology":
        """The topology of the CPUs this process may use (`allowed`: its affinity mask)."""
        if allowed is None:
            allowed = set(os.sched_getaffinity(0))
        root = Path(root)
        nodes: dict[int, list[int]] = {}
        for d in sorted(root.glob("node/node[0-9]*")):
            try:
                cpus = [c for c in parse_cpulist((d / "cpulist").read_text()) if c in allowed]
            except (OSError, ValueError):
                continue
            if cpus:
                nodes[int(d.name[4:])] = cpus
        seen = {c for cs in nodes.values() for c in cs}
        if not nodes or seen != allowed:          # no NUMA information (or CPUs outside it)
            nodes = {0: sorted(allowed)}
        core_of = {}
        for c in allowed:
            t = root / "cpu" / f"cpu{c}" / "topology"
            try:
                core_of[c] = (int((t / "physical_package_id").read_text()),
                              int((t / "core_id").read_text()))
            except (OSError, ValueError):
                core_of[c] = (-1, c)              # unknown: a core of its own
        return cls(nodes, core_of)

    def by_core(self, cpus: list[int]) -> list[list[int]]:
        """`cpus` grouped by physical core (SMT siblings together), in CPU order."""
        groups: dict[tuple[int, int], list[int]] = {}
        for c in sorted(cpus):
            groups.setdefault(self.core_of.get(c, (-1, c)), []).append(c)
        return list(groups.values())

    def cores_first(self, cpus: list[int]) -> list[int]:
        """`cpus` ordered so that the first k are on k different physical cores (as far as
        there are k cores): the first CPU of every core, then the second of every core, ..."""
        cores = self.by_core(cpus)
        rounds = max((len(v) for v in cores), default=0)
        return [v[r] for r in range(rounds) for v in cores if r < len(v)]

    def physical_cores(self, cpus: list[int]) -> int:
        return len(self.by_core(cpus))

    def pools(self, n: int) -> list[list[int]]:
        """The CPUs of `n` engines: with n equal to the nodes, one node each; fewer engines
        take whole nodes (consecutive ones); more engines split nodes by physical cores. Each
        list is ordered cores first."""
        nodes = [self.nodes[k] for k in sorted(self.nodes)]
        if n <= len(nodes):
            groups = [sum(nodes[i * len(nodes) // n:(i + 1) * len(nodes) // n], [])
                      for i in range(n)]
            return [self.cores_first(g) for g in groups]
        out: list[list[int]] = []
        for k, cpus in enumerate(nodes):          # n > nodes: node k gets its share of n
            share = (k + 1) * n // len(nodes) - k * n // len(nodes)
            cores = self.by_core(cpus)
            for i in range(share):
                part = cores[i * len(cores) // share:(i + 1) * len(cores) // share]
                out.append(self.cores_first(sum(part, [])))
        return out


def claim_slot(directory: str | os.PathLike, n: int) -> int | None:
    """A worker's index among `n` (which pool it takes): the first of `directory`/slot-i.lock
    it can lock. The lock is held as long as the process lives (a restarted worker takes the
    slot its predecessor left); None when all are taken."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    for i in range(n):
        fd = os.open(os.path.join(directory, f"slot-{i}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        _HELD.append(fd)                          # never closed: the lock lives with us
        return i
    return None


_HELD: list[int] = []


def bind_process(cpus: list[int]) -> None:
    """Bind this process (every thread it has and will start) to `cpus`."""
    os.sched_setaffinity(0, cpus)

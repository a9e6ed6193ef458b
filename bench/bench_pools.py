"""The hugetlb pages a bench adds to the pools, and gives back
(bench/numpy_bench.py, bench/first_touch.py): exactly the pages it added,
per page size, with Ctrl-C, SIGTERM and SIGHUP held off while a pool
changes size (bench_proc.signals_held: an interrupt midway would leave
pages added that no count knows of).  Through tests/python/hp_pools.py,
the tests' one hugetlb pool fixture."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import hp_pools  # noqa: E402
from bench_proc import signals_held  # noqa: E402


class Pools:
    """Pages added to the pools, per page size; say() tells of a pool that
    did not shrink back."""

    def __init__(self, say):
        self.added = {}  # pagesize -> pages we added
        self.say = say

    def add(self, pagesize, pages):
        """Add pages to the pool of pagesize: how many the kernel gave (0
        where it has no such pool)."""
        if not hp_pools.pool_exists(pagesize):
            return 0
        with signals_held():
            got = max(hp_pools.add_pages(pagesize, pages, refused_ok=True), 0)
            self.added[pagesize] = self.added.get(pagesize, 0) + got
        return got

    def give_back(self):
        """Give back exactly the pages add() added."""
        with signals_held():
            for pagesize, added in self.added.items():
                if added and not hp_pools.take_back(pagesize, added):
                    self.say("the %d kB pool did not shrink back by %d pages (%s); hugetlb pages "
                             "held by: %s" % (pagesize // 1024, added, hp_pools.pool_state(),
                                              hp_pools.holders()))
            self.added = {}

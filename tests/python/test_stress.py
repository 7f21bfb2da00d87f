"""Stress through the Python API: threads and asyncio tasks allocating, exporting and freeing
through full adaptor stacks, each with its own using_memory_resource scope; at the end the
statistics balance and tracking reports nothing outstanding."""

import asyncio
import random
import threading

import numpy as np

import devmm
from devmm.mrs.cpu import MallocMemoryResource

ROUNDS = 3000


def stack():
    base = MallocMemoryResource()
    tracking = devmm.TrackingAdaptor(devmm.LimitingAdaptor(base, "64MiB"))
    return devmm.StatisticsAdaptor(tracking), tracking


def churn(seed, stats, errors):
    rng = random.Random(seed)
    live = []
    try:
        with devmm.using_memory_resource(stats):
            for _ in range(ROUNDS):
                op = rng.random()
                if op < 0.5 or not live:
                    shape = (rng.randint(0, 64), rng.randint(1, 16))
                    layout = rng.choice([None, devmm.ColumnMajor(),
                                         devmm.Aligned(devmm.RowMajor(), 64)])
                    live.append(devmm.empty(shape, rng.choice(["float32", "int8", "float64"]),
                                            layout=layout))
                elif op < 0.7:
                    t = live.pop(rng.randrange(len(live)))
                    a = np.from_dlpack(t)  # an export that outlives ...
                    t.buffer.free()        # ... the owner's free
                    a[...] = 1
                    del a
                elif op < 0.8:
                    # an export never consumed: the capsule's destructor gives it back
                    live[rng.randrange(len(live))].__dlpack__(max_version=(1, 0))
                else:
                    live.pop(rng.randrange(len(live))).buffer.free()
    except Exception as e:  # report, do not hang the join
        errors.append(e)
    live.clear()


def test_threads_balance():
    stats, tracking = stack()
    errors = []
    threads = [threading.Thread(target=churn, args=(i, stats, errors)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert stats.current_bytes == 0 and stats.current_count == 0, stats.statistics
    assert tracking.outstanding == (0, 0)
    assert stats.total_count > 6 * ROUNDS // 4  # about half of each thread's operations


def test_asyncio_tasks_balance_and_scopes_do_not_leak():
    stats_a, tr_a = stack()
    stats_b, tr_b = stack()

    async def task(seed, stats):
        rng = random.Random(seed)
        with devmm.using_memory_resource(stats):
            kept = []
            for i in range(500):
                kept.append(devmm.empty((rng.randint(1, 100),), "int32"))
                if i % 7 == 0:
                    await asyncio.sleep(0)  # the other tasks run with their own scope
                    assert devmm.get_current_device_resource() is stats
                if len(kept) > 20:
                    kept.pop(0).buffer.free()
            for t in kept:
                t.buffer.free()

    async def main():
        await asyncio.gather(*(task(i, stats_a if i % 2 else stats_b) for i in range(8)))

    asyncio.run(main())
    for stats, tr in ((stats_a, tr_a), (stats_b, tr_b)):
        assert stats.current_bytes == 0 and tr.outstanding == (0, 0)
        assert stats.total_count == 4 * 500

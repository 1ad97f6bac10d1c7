"""bbb.runs.jobs.worker_pool: the experiments' one process pool with a progress queue."""

from __future__ import annotations

import operator

from bbb.runs.jobs import worker_pool


def test_one_worker_trains_in_the_callers_process():
    with worker_pool(1, 1, "test") as (pool, queue):
        assert pool is None and queue is None


def test_workers_run_jobs_and_share_a_queue():
    with worker_pool(2, 1, "test") as (pool, queue):
        assert pool.submit(operator.add, 2, 3).result(timeout=60) == 5
        queue.put(7)
        assert queue.get(timeout=10) == 7
    try:  # shut down on exit: no new job, no worker left behind
        pool.submit(operator.add, 1, 1)
        raise AssertionError("the pool still took a job after the block")
    except RuntimeError:
        pass

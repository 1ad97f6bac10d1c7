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


def test_a_workers_user_warning_is_one_line_named_as_the_command(capfd, monkeypatch):
    """A worker's UserWarning was Python's two lines (a path into bbb's source, then its line of
    code) beside the command's own one-line warnings; it takes the command's form now, which
    ``bbb``'s entry point hands its workers (bbb.errors.WARNINGS_PROG_ENV)."""
    import warnings

    from bbb.errors import WARNINGS_PROG_ENV

    monkeypatch.setenv(WARNINGS_PROG_ENV, "bbb reproduce uci")
    with worker_pool(2, 1, "test") as (pool, _):
        pool.submit(warnings.warn, "a moot setting", UserWarning).result(timeout=60)
        pool.submit(warnings.warn, "a deprecation", DeprecationWarning).result(timeout=60)
    err = capfd.readouterr().err
    assert "bbb reproduce uci: warning: a moot setting\n" in err and "UserWarning" not in err, err


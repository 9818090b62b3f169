import numpy as np
import pytest

from marketsched.workloads.workload import Workload


def test_from_columns_sorts_and_defaults():
    w = Workload.from_columns(submit_time=[5, 1, 3], runtime=[1, 2, 3], capacity=4)
    assert list(w.submit_time) == [1, 3, 5]
    assert list(w.runtime) == [2, 3, 1]
    assert list(w.job_id) == [2, 3, 1]
    assert w.procs.dtype == np.int64 and (w.procs == 1).all()
    assert np.isnan(w.runtime_estimate).all()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(runtime=[1, -2]), "'runtime': row 1"),
        (dict(runtime=[1, np.nan]), "'runtime': row 1"),
        (dict(runtime=[1, 2], procs=[1, 0]), "'procs': row 1"),
        (dict(runtime=[1, 2], procs=[1, 9]), "needs 9 processors but the machine has 4"),
        (dict(runtime=[1, 2], procs=[1, 1.5]), "whole numbers"),
    ],
)
def test_from_columns_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Workload.from_columns(submit_time=[0, 1], capacity=4, **kwargs)


def test_rejects_bad_capacity():
    with pytest.raises(ValueError, match="capacity"):
        Workload.from_columns(submit_time=[0], runtime=[1], capacity=0)

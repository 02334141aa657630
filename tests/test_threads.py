"""CPU threads per process (`threads=auto|N`): the usable cores from the affinity mask and the cgroup quota, the cores
other processes keep busy, the local ranks sharing them; the start line names the choice (tests/test_output.py)."""

from __future__ import annotations

import pytest

from litforge.runtime.devices import choose_threads, idle_cores, usable_cores


@pytest.mark.parametrize(
    ("affinity", "cpu_max", "cfs", "cores"),
    [
        (8, None, None, 8),  # no cgroup quota: the affinity mask
        (8, "max 100000", None, 8),  # cgroup v2 without a quota
        (8, "200000 100000", None, 2),  # v2: 2 cores' worth of time per period
        (8, "150000 100000\n", None, 1),  # 1.5 cores: a second busy thread would be throttled
        (8, "50000 100000", None, 1),  # under one core: still one thread
        (2, "400000 100000", None, 2),  # a quota above the mask: the mask
        (8, None, ("-1\n", "100000\n"), 8),  # cgroup v1 without a quota
        (8, None, ("300000\n", "100000\n"), 3),  # v1 quota
        (4, "garbage", None, 4),  # an unreadable quota: the mask
    ],
)
def test_usable_cores_from_the_affinity_mask_and_the_cgroup_quota(affinity, cpu_max, cfs, cores):
    # the cgroup files are faked: setting a real quota takes root control of the cgroup tree, which tests lack here
    assert usable_cores(affinity, cpu_max, cfs) == cores


STAT = "cpu  {t} 0 0 {i} 0 0 0 0 0 0\ncpu0 {a} 0 0 {ai} 0 0 0 0 0 0\ncpu1 {b} 0 0 {bi} 0 0 0 0 0 0\nintr 1\n"


def test_idle_cores_counts_the_idle_share_of_each_allowed_cpu():
    before = STAT.format(t=0, i=0, a=100, ai=100, b=100, bi=100)
    after = STAT.format(t=0, i=0, a=110, ai=100, b=102, bi=108)  # cpu0 busy throughout, cpu1 80 % idle
    assert idle_cores({0, 1}, before, after) == pytest.approx(0.8)
    assert idle_cores({1}, before, after) == pytest.approx(0.8)  # only the CPUs of the mask count
    assert idle_cores({0, 1}, before, before) == 2  # no tick between the readings: nothing known, nothing busy


@pytest.mark.parametrize(
    ("setting", "omp", "cores", "idle", "ranks", "threads", "why"),
    [
        ("auto", None, 2, 1.95, 1, 2, "auto: 2 usable cores"),
        ("auto", None, 2, 0.1, 1, 1, "auto: 2 usable cores, 1 busy with other work"),  # two busy processes
        ("auto", None, 8, 5.6, 1, 5, "auto: 8 usable cores, 3 busy with other work"),
        ("auto", None, 8, None, 4, 2, "auto: 8 usable cores shared by 4 local ranks"),
        ("auto", None, 2, None, 4, 1, "auto: 2 usable cores shared by 4 local ranks"),
        ("auto", "3", 2, 2.0, 1, 3, "OMP_NUM_THREADS=3"),  # the user's variable wins over auto
        ("auto", "", 2, 2.0, 1, 2, "auto: 2 usable cores"),  # set but empty: not a choice
        (4, "1", 2, 0.0, 2, 4, "threads=4"),  # the config key wins over everything
    ],
)
def test_choose_threads(setting, omp, cores, idle, ranks, threads, why):
    assert choose_threads(setting, omp, cores, idle, ranks) == (threads, why)

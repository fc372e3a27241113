"""The length-leak check: a scheduler that reads no job's length decides the same with lengths hidden; one that
reads them (through ``jobs.duration`` or ``remaining_time``) is named, with where it asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_sim.leak_check import check_length_leak

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["fifo", "tiresias", "qssf", "gandiva", "gavel-las"])
def test_schedulers_that_know_no_length_decide_the_same_with_lengths_hidden(name: str) -> None:
    report = check_length_leak(name)
    assert not report.reads_lengths and not report.inconclusive and report.jobs == 600 and report.oracle_calls == ()
    assert "reads no job's length (every job finished at the same time with lengths hidden; up to " in str(report)


def test_the_oracles_are_caught_and_where_they_asked_is_named() -> None:
    srtf = check_length_leak("srtf")
    assert srtf.reads_lengths and srtf.differing > 10 and srtf.jct[0] != srtf.jct[1]
    assert any(call.startswith("cluster_sim/policies/srtf.py:") for call in srtf.oracle_calls), srtf.oracle_calls
    sjf = check_length_leak("sjf")  # reads jobs.duration: no call to name, the message says which is left
    assert sjf.reads_lengths and sjf.oracle_calls == () and "so it reads jobs.duration" in str(sjf)


def test_reading_the_simulators_private_state_or_copying_it_counts_as_reading_lengths() -> None:
    """Hiding lengths cannot reach the simulator's own state (``view._remaining``) nor a copy of it played ahead,
    which hold the true lengths: a scheduler that reads either is caught by that alone, named with where."""
    import copy

    import numpy as np

    from cluster_sim.placement import FreePool, get_placement
    from cluster_sim.policies import get_policy
    from cluster_sim.protocol import Start

    class Private:  # shortest remaining work first, read from the simulator's own state: no remaining_time call
        name = "private"

        def reset(self, view) -> None:
            self.place = get_placement("consolidate")

        def schedule(self, view):
            queue = np.asarray(view.queue, dtype=np.int64)
            pool, out = FreePool(view), []
            for job in queue[np.argsort(view._remaining[queue], kind="stable")].tolist():
                gpus = self.place(view, job, int(view.jobs.num_gpus[job]), pool)
                if gpus is not None:
                    pool.take(gpus, job)
                    out.append(Start(job, gpus))
            return out

    class Copies:  # FIFO that copies the simulator once, as a look-ahead does, and uses nothing of it
        def __init__(self) -> None:
            self.inner, self.name, self.copied = get_policy("fifo"), "copies", False

        def reset(self, view) -> None:
            self.inner.reset(view)

        def schedule(self, view):
            if not self.copied:
                self.copied = copy.deepcopy(view) is not view
            return self.inner.schedule(view)

    private = check_length_leak(Private)
    assert private.reads_lengths and private.differing == 0 and private.oracle_calls == ()  # only its read shows it
    assert any(r.startswith("tests/test_leak_check.py:") and r.endswith(" (_remaining)") for r in private.private_reads)
    assert "it read the simulator's private state, which holds every job's true length" in str(private)
    copies = check_length_leak(Copies)
    assert copies.differing == 0 and copies.reads_lengths  # the same decisions: caught by the copy alone
    assert copies.private_reads == (
        f"tests/test_leak_check.py:{_line_of('copy.deepcopy(view)')} (a copy of the simulator)",
    )
    assert str(copies).endswith("a scheduler reads the SchedulerView protocol only")


def _line_of(text: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line and "_line_of" not in line)


def test_a_learned_policy_and_a_users_scheduler_through_the_command(tmp_path: Path, capsys) -> None:
    """``marlsched check-leak`` prints one line a scheduler and exits 1 where any reads lengths: here a shipped
    policy that reads none and a scheduler of one's own that orders its queue by ``view.jobs.duration``."""
    from experiments.cli import main

    (tmp_path / "peek.py").write_text(
        "import numpy as np\n"
        "from cluster_sim.placement import FreePool, get_placement\n"
        "from cluster_sim.protocol import Start\n"
        "class Peek:\n"
        "    name = 'peek'\n"
        "    def reset(self, view):\n"
        "        self.place = get_placement('best-fit')\n"
        "    def schedule(self, view):\n"
        "        queue = np.asarray(view.queue, dtype=np.int64)\n"
        "        order = queue[np.argsort(view.jobs.duration[queue], kind='stable')]  # its own length: a leak\n"
        "        pool, out = FreePool(view), []\n"
        "        for job in order.tolist():\n"
        "            need = int(view.jobs.num_gpus[job])\n"
        "            if need <= pool.num_free:\n"
        "                gpus = self.place(view, job, need, pool)\n"
        "                pool.take(gpus, job)\n"
        "                out.append(Start(job, gpus))\n"
        "        return out\n"
    )
    policy = f"marl:{REPO / 'experiments/policies/philly-small-dagger'}"
    assert main(["check-leak", "--policy", f"{policy},{tmp_path / 'peek.py'}:Peek"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{policy} on synthetic (600 jobs): reads no job's length")
    assert lines[1].startswith("peek on synthetic (600 jobs): READS JOB LENGTHS: with every length hidden")
    assert main(["check-leak", "--policy", "fifo,qssf"]) == 0
    # where no two jobs ever wait at once no order is chosen: even the oracle shows nothing, and nothing is cleared
    assert main(["check-leak", "--policy", "srtf", "--workload", "synthetic:100,load=0.2"]) == 3
    assert "srtf on synthetic (100 jobs): NOT CHECKED: at most 1 job waited at once" in capsys.readouterr().out

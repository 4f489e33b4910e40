"""Heavy work on a real server (loopback): one line for all sessions, and a closed tab stops its training.

Two tabs press Train with ATTNVIZ_MAX_JOBS=1: the second is told it waits, first in line, and starts
when the first tab closes; when the second closes too, the server goes idle (its CPU time stops growing).
"""

import time
from pathlib import Path

import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetState

from conftest import start_server
from helpers import Tab, open_page

STEPS = 3000  # far more than the test waits for: training must be stopped, not finish


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process and its threads so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime, stime in clock ticks (100 Hz)


class TrainTab(Tab):
    """A tab on the Train page (every run names it: the session's first page hash is the home page's)."""

    def __init__(self, url: str):
        super().__init__(url, max_size=2**26)
        self.open("Train")

    def train(self):
        self.send("Train", widgets=[WidgetState(id=self.ids["train_steps"], int_value=STEPS),
                                    WidgetState(id=self.ids["train_go"], trigger_value=True)])


@pytest.fixture(scope="module")
def server():
    proc, url = start_server({"ATTNVIZ_MAX_JOBS": "1", "ATTNVIZ_MAX_TRAIN_STEPS": str(STEPS)})
    yield proc, url
    proc.terminate()
    proc.wait(timeout=30)


def test_one_line_for_heavy_work_and_a_closed_tab_stops_its_training(server):
    proc, url = server
    first, second = TrainTab(url), TrainTab(url)
    first.train()
    first.read_until(lambda s: "step 3" in s and "loss" in s)  # training, and saying so
    second.train()
    waiting = second.read_until(lambda s: "Waiting for a free slot" in s)
    assert "1 heavy jobs run at once" in waiting and "This training is number 1 in line" in waiting

    first.close()  # its training stops at its next step, and the second one starts
    second.read_until(lambda s: "step 3" in s and "loss" in s, timeout=60)
    busy_from = cpu_seconds(proc.pid)
    time.sleep(2)
    busy = cpu_seconds(proc.pid) - busy_from

    second.close()
    time.sleep(3)  # the script stops at its next progress report (every 30 steps here)
    idle_from = cpu_seconds(proc.pid)
    time.sleep(3)
    idle = cpu_seconds(proc.pid) - idle_from
    print(f"\nserver CPU: {busy / 2:.2f} s/s while training, {idle / 3:.2f} s/s after both tabs closed")
    assert busy > 0.5, busy  # the measurement sees training
    assert idle < 0.3, idle  # and nothing trains once the tabs are gone


def test_a_session_trains_at_most_its_steps(monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MAX_TRAIN_STEPS", "60")
    at = open_page("pages/5_Train.py", timeout=300)
    at.select_slider(key="train_size").set_value("tiny")
    at.number_input(key="train_steps").set_value(400)
    at.run()
    assert any("may train 60 more steps" in c.value for c in at.caption)
    at.button(key="train_go").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)
    assert at.session_state["train_results"]["classifier"]["history"][-1]["step"] == 60  # cut to the budget
    assert any("has trained its 60 steps" in i.value and "ATTNVIZ_MAX_TRAIN_STEPS" in i.value for i in at.info)
    assert at.button(key="train_go").disabled

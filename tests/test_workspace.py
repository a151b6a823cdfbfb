"""Scratch for split-K and operand copies, and the top Hopper rung's plans around it, with the
driver faked (no GPU): each stream and host thread its own buffer, a captured call its own for
good, growth keeping the old buffer; a forced split that K cannot carry falls back whole."""
import threading
import types

import pytest

from conftest import SIM
from numba_tc import driver, workspace
from numba_tc.arrays import Matrix

pytestmark = [pytest.mark.cpu, pytest.mark.skipif(SIM, reason="the Hopper planner is not built under the simulator")]


@pytest.fixture
def fake_memory(monkeypatch):
    state = {"next": 1 << 20, "capturing": set(), "allocs": []}

    def alloc(n):
        addr = state["next"]
        state["next"] += n
        state["allocs"].append(n)
        return addr
    monkeypatch.setattr(driver, "mem_alloc", alloc)
    monkeypatch.setattr(driver, "mem_alloc_during_capture", alloc)
    monkeypatch.setattr(driver, "stream_is_capturing", lambda s: s in state["capturing"])
    monkeypatch.setattr(workspace, "_BUFFERS", {})
    monkeypatch.setattr(workspace, "_KEPT", [])
    return state


def test_each_stream_and_thread_gets_its_own_scratch(fake_memory):
    a = workspace.get(0, 7, 1000)
    assert workspace.get(0, 7, 5000) == a                  # the same stream and thread: reused
    assert workspace.get(0, 8, 1000) != a                  # another stream
    assert workspace.get(1, 7, 1000) != a                  # another device
    other = []
    t = threading.Thread(target=lambda: other.append(workspace.get(0, 7, 1000)))
    t.start()
    t.join()
    assert other[0] != a                                   # another thread on the same stream


def test_growth_keeps_the_old_buffer_and_a_capture_gets_its_own(fake_memory):
    a = workspace.get(0, 7, 1000)
    b = workspace.get(0, 7, 3 << 20)                       # grows: a new buffer, the old one kept
    assert b != a and (a, 1 << 20) in workspace._KEPT
    fake_memory["capturing"].add(7)
    c1, c2 = workspace.get(0, 7, 100), workspace.get(0, 7, 100)
    assert len({b, c1, c2}) == 3                           # each captured call its own, for good
    fake_memory["capturing"].clear()
    assert workspace.get(0, 7, 100) == b


def test_carve_aligns_every_region():
    offsets, total = workspace.carve(10, 0, 300)
    assert offsets == [0, 256, 256] and total == 768


@pytest.fixture
def fake_driver(monkeypatch):
    monkeypatch.setattr(driver, "load", lambda kernel, dev: types.SimpleNamespace(kernel=kernel, device=dev))
    monkeypatch.setattr(driver, "sm_count", lambda dev: 132)
    monkeypatch.setattr(driver, "device_name", lambda dev: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(driver, "max_active_clusters", lambda fn, block, smem, cluster: 132 // cluster)


def test_a_forced_split_that_k_cannot_carry_is_no_split(fake_driver):
    """K of one slice: splits=4 plans the plain kernel into C (no fp32 planes, no fix-up)."""
    from numba_tc import hopper
    v = hopper.variant_from(hopper.RUNG7, "forced", splits=4)
    a = Matrix(None, 256, 64, 64, False, "bfloat16", 1 << 20)
    b = Matrix(None, 64, 512, 512, False, "bfloat16", 2 << 20)
    c = Matrix(None, 256, 512, 512, False, "bfloat16", 3 << 20)
    steps = v.plan(a, b, c, 0)
    assert [st.label for st in steps] == ["128x256"] and ", split=False," in steps[0].kernel.key[-1]
    k = Matrix(None, 256, 4096, 4096, False, "bfloat16", 1 << 20)
    steps = v.plan(k, Matrix(None, 4096, 512, 512, False, "bfloat16", 2 << 20), c, 0)
    assert [st.label for st in steps] == ["128x256 split-K 4", "fixup"] and steps[0].workspace > 0
    with pytest.raises(ValueError, match="splits=0"):
        hopper.variant_from(hopper.RUNG7, "bad", splits=0)
    with pytest.raises(ValueError, match="persistent"):
        hopper.variant_from(hopper.RUNG4, "bad", splits=2)

"""The native RT launch path against a stand-in libcuda (a C library written here that logs each
driver call): the calls, their order and their arguments are exactly what the CUDA driver API
documents for a stream-ordered flag write followed by a graph launch."""

from __future__ import annotations

import ctypes
import subprocess
import time

import pytest

from gpu_runtime.executors.rt_launcher import RtLauncher

FAKE_CUDA = r"""
#include <stdint.h>
static uint64_t calls[64][4];
static int n;
static volatile int32_t *stamp;
static void log4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  calls[n][0] = a; calls[n][1] = b; calls[n][2] = c; calls[n][3] = d; n++;
}
int cuStreamWriteValue32_v2(void *s, unsigned long long addr, unsigned int v, unsigned int f) {
  log4(1, (uint64_t)s, addr, v); return 0;
}
int cuEventRecord(void *e, void *s) { log4(2, (uint64_t)e, (uint64_t)s, 0); return 0; }
int cuCtxSetCurrent(void *c) { log4(4, (uint64_t)c, 0, 0); return 0; }
int cuCtxGetCurrent(void **c) { *c = (void *)77; return 0; }
int cuGraphLaunch(void *g, void *s) {
  log4(3, (uint64_t)g, (uint64_t)s, 0);
  if (stamp) *stamp = 1;  /* the graph's stamp kernel ran */
  return (uint64_t)g == 999 ? 700 : 0;  /* 700: cudaErrorIllegalAddress, for the error path */
}
void fake_arm_stamp(int32_t *word) { stamp = word; }
int fake_calls(uint64_t *out) { for (int i = 0; i < n; i++) for (int j = 0; j < 4; j++) out[4*i+j] = calls[i][j]; int k = n; n = 0; return k; }
"""


@pytest.fixture(scope="module")
def fake_cuda(tmp_path_factory):
    d = tmp_path_factory.mktemp("fake_cuda")
    (d / "fake.c").write_text(FAKE_CUDA)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(d / "libcuda_fake.so"), str(d / "fake.c")],
                   check=True)
    return str(d / "libcuda_fake.so")


def _calls(lib) -> list[tuple[int, ...]]:
    out = (ctypes.c_uint64 * 256)()
    k = lib.fake_calls(out)
    return [tuple(out[4 * i:4 * i + 4]) for i in range(k)]


def test_preempting_launch_writes_the_flag_before_the_graph(fake_cuda):
    launcher = RtLauncher(libcuda=fake_cuda)
    lib = ctypes.CDLL(fake_cuda)  # the same loaded image the launcher opened
    context = launcher.current_context()
    assert context == 77
    program = launcher.program(context, stream=11, flag=0xDEAD00, flag_event=22, graph=33, done_event=44)
    assert launcher.fire(program, preempt=True)[1] is None
    assert _calls(lib) == [(4, 77, 0, 0), (1, 11, 0xDEAD00, 1), (2, 22, 11, 0), (3, 33, 11, 0),
                           (2, 44, 11, 0)]
    launcher.fire(program, preempt=False)  # streams/seq: no flag, same launch
    assert _calls(lib) == [(4, 77, 0, 0), (3, 33, 11, 0), (2, 44, 11, 0)]


def test_waiting_for_the_stamp_reports_when_it_was_seen(fake_cuda):
    launcher = RtLauncher(libcuda=fake_cuda)
    lib = ctypes.CDLL(fake_cuda)
    word = ctypes.c_int32(0)
    program = launcher.program(77, 11, 0xDEAD00, 22, 33, 44, started=ctypes.addressof(word))
    lib.fake_arm_stamp(ctypes.byref(word))
    before = time.perf_counter()
    entered, seen = launcher.fire(program, preempt=True, wait_s=1.0)
    assert word.value == 1 and before <= entered <= seen <= time.perf_counter()  # Python's clock
    word.value = 0
    lib.fake_arm_stamp(None)  # a stamp that never comes: give up after wait_s, report nothing
    assert launcher.fire(program, preempt=True, wait_s=0.01)[1] is None
    _calls(lib)


def test_driver_errors_are_raised(fake_cuda):
    launcher = RtLauncher(libcuda=fake_cuda)
    with pytest.raises(RuntimeError, match="driver error 700"):
        launcher.fire(launcher.program(77, 11, 1, 22, 999, 44), preempt=True)


def test_a_launch_allocates_no_ctypes_object(fake_cuda, monkeypatch):
    """Everything `fire` passes was made with the program: no c_double, byref or pointer per launch."""
    launcher = RtLauncher(libcuda=fake_cuda)
    program = launcher.program(launcher.current_context(), stream=11, flag=0xDEAD00, flag_event=22, graph=33,
                               done_event=44)
    made = []
    for name in ("byref", "pointer", "c_double"):
        real = getattr(ctypes, name)
        monkeypatch.setattr(ctypes, name, lambda *a, _real=real, _name=name: made.append(_name) or _real(*a))
    for preempt in (True, False, True):
        entered, started = launcher.fire(program, preempt=preempt)
        assert entered > 0 and started is None
    assert made == []

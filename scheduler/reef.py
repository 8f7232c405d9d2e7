"""The per-vGPU scheduler: an RT queue, one BE queue per client, and a polling loop in its own
thread that applies a policy (`scheduler.policies`).

Normal mode: BE tasks run concurrently, one per BE stream. RT mode (entered when an RT task may
start): the policy gets the BE streams out of the way (nothing, wait, or reset), RT tasks run one at
a time in arrival order on the unguarded RT stream, and BE kernels run only as padding (`reef`).
When the RT queue empties the policy restores BE work. The mode and its transitions are
`scheduler.preemption`; the BE side `scheduler.be_streams`; software padding `scheduler.pad_planner`.
An RT task that finds no other RT task in the system has its first kernel launched by `submit`,
in the caller's thread: one thread hand-off less before the preemption (docs/scheduling.md).
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import sys
import threading
import time
import traceback
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gpu_runtime.executors.quiet import RT_WINDOW
from gpu_runtime.priority import relay_this_thread
from gpu_runtime.program import Program
from gpu_runtime.thread_names import name_this_thread

from scheduler.be_streams import BeStreams
from scheduler.pad_planner import PadPlanner
from scheduler.policies import Policy, make_policy
from scheduler.preemption import Mode, Preemption
from scheduler.profiler import KernelProfile
from scheduler.rerun_window import rerun_window
from scheduler.task import BE, RT, Task

DEFAULT_CAPACITY = 4


@dataclass
class Client:
    name: str
    priority: str
    program: Program
    state: Any
    rerun_window: int
    units: int  # what the device schedules: launches (CPU), or graphs/chunks (CUDA)
    profiles: list[KernelProfile] | None = None
    in_flight: int = 0  # accepted, not yet finished: while 0, the client's buffers are free


@dataclass
class SchedulerStats:
    # Guard raised .. every BE stream drained and rewound. Under `reset` the RT task's kernels
    # are submitted in between (they need not wait), so this includes their submission.
    flush_s: list[float] = field(default_factory=list)
    restore_s: list[float] = field(default_factory=list)  # RT queue empty .. BE kernels resubmitted
    padded_kernels: int = 0
    rt_started_on_arrival: int = 0  # RT tasks whose first kernel the submitting thread launched


class Reef:
    def __init__(self, executor: Any, device: Any, policy: str | Policy = "reset",
                 capacity: int = DEFAULT_CAPACITY, be_streams: int = 4, poll_s: float | None = None,
                 profile_reps: int = 3):
        self.executor = executor
        self.device = device
        self.policy = make_policy(policy) if isinstance(policy, str) else policy
        self.clock = device.clock
        self.poll_s = device.poll_s if poll_s is None else poll_s
        self.stats = SchedulerStats()
        self._capacity = capacity
        self._clients: dict[str, Client] = {}
        self._clients_lock = threading.Lock()  # guards each client's in_flight
        self._rt_stream = device.stream(guarded=False, priority=-1)
        self._rt_queue: deque[Task] = deque()
        self._rt_task: Task | None = None
        self._be = BeStreams(device, capacity, be_streams)
        self._state = Preemption(device, self._be, self.stats,
                                 pads_in_hardware=self.policy.pads and device.pads_in_hardware)
        self._planner = (PadPlanner(device, profile_reps)  # pads planned in software (CPU vGPUs)
                         if self.policy.pads and device.padding_rules is not None else None)
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._ids = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- set-up and client side ----------------------------------------------------------------
    def add_client(self, name: str, program: Program, priority: str) -> Client:
        if priority not in (RT, BE):
            raise ValueError(f"priority must be {RT!r} or {BE!r}")
        state = self.device.load(program, guarded=priority == BE)
        # rerun_window also rejects programs whose launches alias their inputs. A device that knows
        # exactly which kernels finished re-runs at most one, so only an inexact one needs the cap.
        window = rerun_window(program)
        client = Client(name, priority, program, state,
                        self._capacity if self.device.exact_progress else window,
                        self.device.units(state))
        if self._planner is not None:
            client.profiles = self._planner.profile(program, state)
        self._clients[name] = client
        if priority == BE:
            self._be.add_client(name)
        return client

    def has_client(self, name: str) -> bool:
        return name in self._clients

    def prepare_padding(self) -> None:
        """Tabulate REEF's allowed launch pairs before traffic: planning pads is then a lookup."""
        if self._planner is not None:
            self._planner.prepare(self._clients.values())

    def submit(self, client: str, inputs: dict[str, np.ndarray]) -> Future:
        c = self._clients.get(client)
        if c is None:
            raise KeyError(f"unknown client {client!r}")
        if self._stop.is_set():
            return _failed(RuntimeError("scheduler is stopped"))
        with self._clients_lock:
            free = c.in_flight == 0
            c.in_flight += 1
        upload = free and c.priority == RT
        # The task exists before it arrives, so that nothing but the launch comes after arrival.
        task = Task(next(self._ids), c.priority, client, inputs, c.units, c.rerun_window, 0.0,
                    inputs_loaded=upload, state=c.state if upload else None)
        # From an RT task's upload to its first launch no garbage collection may start.
        with RT_WINDOW if c.priority == RT else contextlib.nullcontext():
            if upload:
                # An RT request has arrived once its inputs are on the vGPU (behind another of its
                # client, the upload waits for its start); BE inputs go through `be_streams`' uploader.
                try:
                    self.device.set_inputs(c.state, inputs)
                except BaseException:
                    with self._clients_lock:
                        c.in_flight -= 1
                    raise
            task.arrival_s = self.clock()
            if c.priority == RT:
                at_once = upload and self.policy.rt_starts_at_once
                self._state.rt_arrives((lambda: self._launch_first(task)) if at_once else None)
        self._inbox.put(task)
        self.device.wake.set()
        return task.future

    def _launch_first(self, task: Task) -> None:
        """No other RT task is in the system, so nothing else uses the RT stream: the preemption."""
        self._rt_stream.submit(task, 0, preempt=self.policy.flushes)
        task.next_launch = 1
        self.stats.rt_started_on_arrival += 1

    def start(self) -> "Reef":
        self._be.start()
        self._thread = threading.Thread(target=self._loop, name="exec-reef", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.device.wake.set()
        if self._thread is not None:
            self._thread.join()
            self._be.stop()
        self.device.set_flag()  # whatever is still queued on a stream exits at once
        for s in [self._rt_stream, *self._be.streams]:
            s.drain()
        self.device.clear_flag()
        self._fail_all(RuntimeError("scheduler stopped before the task finished"))

    def _fail_all(self, error: Exception) -> None:
        leftovers = [self._rt_task, *self._rt_queue, *self._be.leftovers()]
        while not self._inbox.empty():  # the loop has ended: this thread is the one consumer
            leftovers.append(self._inbox.get_nowait())
        for t in leftovers:
            if t is not None:
                t.fail(error)

    def __enter__(self) -> "Reef":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- Controller callbacks for the policy ---------------------------------------------------
    def rt_pending(self) -> bool:
        return self._rt_task is not None or bool(self._rt_queue)

    def rt_mode(self) -> bool:
        return self._state.rt_mode

    def be_active(self) -> bool:
        return self._be.active()

    def be_kernels_outstanding(self) -> bool:
        return self._be.outstanding()

    def padding_open(self) -> bool:
        return self._state.mode is Mode.PADDING

    def wait_be_idle(self) -> None:
        self._be.wait_idle()

    def flush_be(self) -> None:
        self._state.flush()

    def restore_be(self) -> None:
        self._state.restore()

    def resume_be(self) -> None:
        self._state.resume()

    # ---- the loop ------------------------------------------------------------------------------
    def _loop(self) -> None:
        name_this_thread()
        if getattr(self.device, "os_priorities", False) and self.poll_s:  # it waits between polls
            relay_this_thread()  # relays RT work ahead of ordinary threads (cpu_device.CpuStream)
        try:
            self._poll_forever()
        except Exception as e:  # a bug or a device error: answer every task, then stop accepting
            self._stop.set()
            traceback.print_exc(file=sys.stderr)
            self._fail_all(RuntimeError(f"scheduler failed: {type(e).__name__}: {e}"))

    def _poll_forever(self) -> None:
        wake = self.device.wake
        while not self._stop.is_set():
            wake.clear()
            self._admit()
            self._rt_stream.poll()
            self._be.poll()
            self._schedule_rt()
            self._be.schedule(self.policy, self, 1 if self.padding_open() else None,
                              self._begin, self._finish)
            if self.poll_s:
                wake.wait(self.poll_s)
            else:
                time.sleep(0)  # busy polling, but let client threads take the GIL

    def _admit(self) -> None:
        while not self._inbox.empty():  # the one consumer: this thread
            task = self._inbox.get_nowait()
            if task.priority == RT:
                self._rt_queue.append(task)
            else:
                self._be.enqueue(task)

    def _begin(self, task: Task) -> None:
        task.state = self._clients[task.client].state
        if task.inputs_loaded:
            return
        if task.priority == RT:
            self.device.set_inputs(task.state, task.inputs)
            task.inputs_loaded = True
        else:
            self._be.upload(task)

    def _finish(self, task: Task) -> None:
        end = self.clock()
        outputs = {k: np.array(v, copy=True) for k, v in self.executor.outputs(task.state).items()}
        task.first_kernel_s = self.device.started_at(task)
        client = self._clients[task.client]
        with self._clients_lock:
            client.in_flight -= 1
        if task.priority == RT:
            self._state.rt_departs()
        task.finish(outputs, end)

    def _schedule_rt(self) -> None:
        rt = self._rt_task
        if rt is not None:
            if not (rt.finished_kernels and self._rt_stream.outstanding() == 0):
                return
            self._finish(rt)
            self._rt_task = None
        if not self._rt_queue:
            if self._state.rt_mode:
                self.policy.leave_rt(self)  # a restore keeps RT mode if an RT task arrived
            return
        if not self._state.rt_mode and not self.policy.rt_may_start(self):
            return
        task = self._rt_queue.popleft()
        self._begin(task)  # inputs first: they do not depend on the BE streams
        entering = not self._state.rt_mode
        if entering:
            self._state.enter_rt()
        early = entering and self.policy.flushes
        if entering and not early:
            self.policy.enter_rt(self)
        self._rt_task = task
        if task.next_launch == 0:  # else the submitting thread launched it (rt_starts_at_once)
            # The preemption: nothing comes before it. A flushing policy raises the flag with it,
            # also when hardware padding had let BE work back in beside the last RT task.
            padded = self.padding_open()
            self._rt_stream.submit(task, 0, preempt=self.policy.flushes)
            if padded:
                self._state.flush()
        if early:
            self.policy.enter_rt(self)
        self._continue_rt(task)

    def _continue_rt(self, task: Task) -> None:
        """Submit RT kernels 1.. at once. Pads start from each BE task's rewound position, known once
        the flushed BE kernels have exited: RT kernels go unpadded rather than wait for that."""
        client = self._clients[task.client]
        plan, first = None, task.n_launches
        if self._planner is not None:
            time.sleep(0)  # CPU: the RT stream thread takes the GIL to start kernel 0; planning holds it
        for i in range(1, task.n_launches):
            if self._planner is not None and plan is None and self._be.exited():
                self._state.settle()
                plan, first = self._planner.plan(client, i, self._be.running(), self._clients), i
                self.stats.padded_kernels += sum(map(len, plan))
            self._rt_stream.submit(task, i, plan[i - first] if plan else ())
        task.next_launch = task.n_launches
        if self._be.exited():  # else settled at restore: the RT task's end must not wait for it
            self._state.settle()


def _failed(error: Exception) -> Future:
    future: Future = Future()
    future.set_exception(error)
    return future

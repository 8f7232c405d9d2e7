"""The per-vGPU scheduler: an RT queue, one BE queue per client, vHQs over BE streams, and a polling
loop in its own thread that applies a policy (`scheduler.policies`).

Normal mode: BE tasks run concurrently, one per BE stream. RT mode (entered when an RT task may
start): the policy gets the BE streams out of the way (nothing, wait, or reset), RT tasks run one at
a time in arrival order on the unguarded RT stream, and BE kernels run only as padding (`reef`).
When the RT queue empties the policy restores BE work.

Clients own one loaded program state each, so a client's requests run one after another; inputs
are copied in when a task starts and outputs copied out when it ends.

The arrival path is kept short: under policies whose RT tasks start at once (streams, reset, reef)
an RT task that finds no other RT task in the system has its first kernel launched by `submit`
itself, in the caller's thread, before the scheduler thread has seen it; the scheduler thread then
flushes the BE streams and launches the rest. On a 1-core CPU vGPU this took the RT-only arrival
to first kernel from p50 294 / p99 1070 us to 76 / 210 us (same-session runs of 100 requests).
"""

from __future__ import annotations

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
from gpu_runtime.program import Program

from scheduler.padding import pair_table, plan_padding
from scheduler.policies import Policy, make_policy
from scheduler.profiler import KernelProfile, profile_program
from scheduler.rerun_window import rerun_window
from scheduler.task import BE, RT, Task
from scheduler.vhq import VirtualHostQueue, round_robin

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
        self.profile_reps = profile_reps
        self.stats = SchedulerStats()
        self._clients: dict[str, Client] = {}
        self._rt_stream = device.stream(guarded=False, priority=-1)
        self._capacity = capacity
        self._vhqs = [VirtualHostQueue(device.stream(guarded=True), capacity) for _ in range(be_streams)]
        self._rr = [0] * be_streams
        self._rt_queue: deque[Task] = deque()
        self._be_queues: dict[str, deque[Task]] = {}
        self._rt_task: Task | None = None
        self._rt_mode = False
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._uploads: queue.SimpleQueue = queue.SimpleQueue()  # BE tasks whose inputs to copy in
        self._ids = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._clients_lock = threading.Lock()
        self._rt_in_system = 0  # RT tasks submitted and not yet finished (under _clients_lock)
        self._pad_ok: dict[tuple[str, str], np.ndarray] = {}  # (RT client, BE client) -> paddable
        self._unsettled = False  # flag set, BE streams not yet drained and rewound
        self._flush_t0 = 0.0
        # Padding: REEF's planned pads where the device runs them in software (CPU vGPUs), the
        # GPU's block scheduler where it pads in hardware (CUDA: `_padding` opens once a flush
        # has settled, and BE chunks then go out one per stream beside the RT task).
        self._pads_in_software = self.policy.pads and device.padding_rules is not None
        self._pads_in_hardware = self.policy.pads and device.pads_in_hardware
        self._padding = False

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
        if self._pads_in_software:
            client.profiles = self.profile(client)
        self._clients[name] = client
        if priority == BE:
            self._be_queues[name] = deque()
            vhq = self._vhqs[(len(self._be_queues) - 1) % len(self._vhqs)]
            vhq.clients.append(name)
        return client

    def has_client(self, name: str) -> bool:
        return name in self._clients

    def profile(self, client: Client) -> list[KernelProfile]:
        zeros = {name: np.zeros(client.program.buffers[i].shape, client.program.buffers[i].dtype)
                 for name, i in client.program.inputs.items()}
        self.device.set_inputs(client.state, zeros)
        return profile_program(client.program,
                               lambda i: self.device.time_launch(client.state, i),
                               self.device.limits, self.profile_reps, self.device.resources)

    def prepare_padding(self) -> None:
        """Tabulate, before traffic, per (RT client, BE client) which launch pairs REEF's rules
        allow (software padding), so planning on the RT path is a table lookup."""
        if not self._pads_in_software:
            return
        same_block = self.device.padding_rules.same_block
        for rt in (c for c in self._clients.values() if c.priority == RT):
            for be in (c for c in self._clients.values() if c.priority == BE):
                self._pad_ok[(rt.name, be.name)] = pair_table(rt.profiles, be.profiles, same_block)

    def submit(self, client: str, inputs: dict[str, np.ndarray]) -> Future:
        c = self._clients.get(client)
        if c is None:
            raise KeyError(f"unknown client {client!r}")
        if self._stop.is_set():
            task = Task(next(self._ids), c.priority, client, inputs, c.units, c.rerun_window,
                        self.clock())
            task.fail(RuntimeError("scheduler is stopped"))
            return task.future
        with self._clients_lock:
            free = c.in_flight == 0
            c.in_flight += 1
            alone = c.priority == RT and self._rt_in_system == 0
            self._rt_in_system += c.priority == RT
        upload = free and c.priority == RT
        # The task exists before it arrives, so that nothing but the launch comes after arrival.
        task = Task(next(self._ids), c.priority, client, inputs, c.units, c.rerun_window, 0.0,
                    inputs_loaded=upload, state=c.state if upload else None)
        if upload:
            # Upload now, in the caller's thread: an RT request counts as arrived once its inputs
            # are on the vGPU. (Behind another request of the same client, the upload waits for
            # its start and counts against it.) BE inputs go through the uploader thread: a BE
            # batch can take milliseconds to copy, and the caller (a worker's receive thread)
            # must stay free for the RT requests behind it.
            self.device.set_inputs(c.state, inputs)
        task.arrival_s = self.clock()
        if alone and upload and self.policy.rt_starts_at_once:
            # Nothing else uses the RT stream now and the scheduler thread does not know this
            # task yet: launching here is safe, and it is the preemption.
            self._rt_stream.submit(task, 0, preempt=self.policy.flushes)
            task.next_launch = 1
            self.stats.rt_started_on_arrival += 1
        self._inbox.put(task)
        self.device.wake.set()
        return task.future

    def start(self) -> "Reef":
        self._thread = threading.Thread(target=self._loop, name="reef", daemon=True)
        self._thread.start()
        self._uploader = threading.Thread(target=self._upload_loop, name="reef-upload", daemon=True)
        self._uploader.start()
        return self

    def _upload_loop(self) -> None:
        """BE inputs onto the vGPU, one task at a time; the vHQ submits nothing before."""
        while True:
            task = self._uploads.get()
            if task is None:
                return
            try:
                self.device.set_inputs(task.state, task.inputs)
            except Exception as e:  # answered once, like any other failure of the task
                task.fail(e)
                task.completed = task.n_launches
            task.inputs_loaded = True
            self.device.wake.set()

    def stop(self) -> None:
        self._stop.set()
        self.device.wake.set()
        if self._thread is not None:
            self._thread.join()
            self._uploads.put(None)
            self._uploader.join()
        self.device.set_flag()  # whatever is still queued on a stream exits at once
        for s in [self._rt_stream] + [v.stream for v in self._vhqs]:
            s.drain()
        self.device.clear_flag()
        self._fail_all(RuntimeError("scheduler stopped before the task finished"))

    def _fail_all(self, error: Exception) -> None:
        leftovers = [self._rt_task] + list(self._rt_queue) + [v.current for v in self._vhqs]
        leftovers += [t for q in self._be_queues.values() for t in q]
        while True:
            try:
                leftovers.append(self._inbox.get_nowait())
            except queue.Empty:
                break
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
        return self._rt_mode

    def be_active(self) -> bool:
        return any(v.current is not None for v in self._vhqs)

    def be_kernels_outstanding(self) -> bool:
        return any(v.stream.outstanding() for v in self._vhqs)

    def padding_open(self) -> bool:
        return self._padding

    def wait_be_idle(self) -> None:
        for v in self._vhqs:
            v.stream.drain()
            v.stream.poll()

    def flush_be(self) -> None:
        """Set the guard and drop the vHQs' pending launches. Waiting for the kernels already on
        the BE streams to exit (`_settle`) is left until after the RT task's first kernel is
        submitted: the RT stream does not depend on them, and guarded ones exit at once anyway."""
        self._flush_t0 = self.clock()
        for v in self._vhqs:
            v.stream.poll()  # credit what finished before the flag, nothing after
        self.device.set_flag()  # a no-op where the RT launch raised it already
        self._padding = False
        self._unsettled = True

    def _settle(self) -> None:
        """Wait for the flushed BE kernels to exit, then rewind the vHQs."""
        if not self._unsettled:
            return
        for v in self._vhqs:
            v.stream.drain()
        for v in self._vhqs:
            v.clear()
        self._unsettled = False
        self.stats.flush_s.append(self.clock() - self._flush_t0)
        if self._pads_in_hardware and self._rt_mode:
            self.device.clear_flag()
            self._padding = True

    def restore_be(self) -> None:
        self._settle()  # the flushed kernels must be gone before the guard comes down
        t0 = self.clock()
        self._padding = False
        self.device.clear_flag()
        for v in self._vhqs:
            v.pump()
        self.stats.restore_s.append(self.clock() - t0)

    # ---- the loop ------------------------------------------------------------------------------
    def _loop(self) -> None:
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
            for v in self._vhqs:
                v.stream.poll()
            self._schedule_rt()
            self._schedule_be()
            if self.poll_s:
                wake.wait(self.poll_s)
            else:
                time.sleep(0)  # busy polling, but let client threads take the GIL

    def _admit(self) -> None:
        while True:
            try:
                task = self._inbox.get_nowait()
            except queue.Empty:
                return
            if task.priority == RT:
                self._rt_queue.append(task)
            else:
                self._be_queues[task.client].append(task)

    def _begin(self, task: Task) -> None:
        task.state = self._clients[task.client].state
        if task.inputs_loaded:
            return
        if task.priority == RT:
            self.device.set_inputs(task.state, task.inputs)
            task.inputs_loaded = True
        else:
            self._uploads.put(task)

    def _finish(self, task: Task) -> None:
        end = self.clock()
        outputs = {k: np.array(v, copy=True) for k, v in self.executor.outputs(task.state).items()}
        task.first_kernel_s = self.device.started_at(task)
        client = self._clients[task.client]
        with self._clients_lock:
            client.in_flight -= 1
            self._rt_in_system -= task.priority == RT
        task.finish(outputs, end)

    def _schedule_rt(self) -> None:
        rt = self._rt_task
        if rt is not None:
            if not (rt.finished_kernels and self._rt_stream.outstanding() == 0):
                return
            self._finish(rt)
            self._rt_task = None
        if not self._rt_queue:
            if self._rt_mode:
                self._rt_mode = False
                self.policy.leave_rt(self)
            return
        if not self._rt_mode and not self.policy.rt_may_start(self):
            return
        task = self._rt_queue.popleft()
        self._begin(task)  # inputs first: they do not depend on the BE streams
        entering = not self._rt_mode
        self._rt_mode = True
        early = entering and self.policy.flushes
        if entering and not early:
            self.policy.enter_rt(self)
        self._rt_task = task
        if task.next_launch == 0:  # else the submitting thread launched it (rt_starts_at_once)
            # The preemption: nothing else comes before it. A flushing policy raises the flag
            # with it, also when hardware padding had let BE work back in beside the last RT
            # task: then that work is flushed again.
            padded = self._padding
            self._rt_stream.submit(task, 0, preempt=self.policy.flushes)
            if padded:
                self.flush_be()
        if early:
            self.policy.enter_rt(self)
        self._continue_rt(task)

    def _continue_rt(self, task: Task) -> None:
        """Submit RT kernels 1.. at once. Pads start from each BE task's rewound position, known
        only once the flushed BE kernels have exited: until then RT kernels go unpadded rather
        than wait (a running BE kernel can take longer than several RT kernels)."""
        client = self._clients[task.client]
        plan, first = None, task.n_launches
        if self._pads_in_software:
            time.sleep(0)  # CPU vGPUs: the RT stream thread needs the GIL to start kernel 0, and planning pads holds it
        for i in range(1, task.n_launches):
            if self._pads_in_software and plan is None and self._be_exited():
                self._settle()
                plan, first = self._plan_pads(client, i), i
            self._rt_stream.submit(task, i, plan[i - first] if plan else ())
        task.next_launch = task.n_launches
        if self._be_exited():  # else settled at restore: the RT task's end must not wait for it
            self._settle()

    def _be_exited(self) -> bool:
        return all(v.stream.exited() for v in self._vhqs)

    def _plan_pads(self, client: Client, first: int) -> list:
        """Pads for the client's RT kernels first.. (a list per kernel)."""
        be = [(v.current, self._clients[v.current.client].profiles) for v in self._vhqs
              if v.current is not None]
        tables = self._pad_ok

        def paddable(r, t, i):
            table = tables.get((client.name, t.client))
            return table is not None and bool(table[r + first, i])

        plan = plan_padding(client.profiles[first:], be, self.device.padding_rules,
                            paddable if tables else None)  # not prepared: the rules alone
        self.stats.padded_kernels += sum(map(len, plan))
        return plan

    def _schedule_be(self) -> None:
        for i, v in enumerate(self._vhqs):
            done = v.reap()
            if done is not None:
                self._finish(done)
            if v.idle() and self.policy.be_may_start(self):
                task, self._rr[i] = round_robin(self._be_queues, v.clients, self._rr[i])
                if task is not None:
                    self._begin(task)
                    v.assign(task)
            if v.current is not None and self.policy.be_may_issue(self):
                v.pump(limit=1 if self._padding else None)

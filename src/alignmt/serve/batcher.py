"""The decoding thread and the queue in front of it: dynamic batching for the service.

One thread owns the models. Requests wait in one queue; the thread takes the oldest, waits
while others keep arriving (each within `Limits.batch_wait` of the last), and runs every
waiting job that can share decoder steps with it (the same `key`: model and search) in one
call, up to `Limits.batch_width` sentences. While fewer sentences wait than the last batch
held, it waits up to 10 x batch_wait more: the clients it just answered are likely to send
again, and a batch of 2 costs nearly as many decoder steps as a batch of 30 (measured:
without this, 32 clients settled into alternating batches of 30 and 2). Inside that call
search's continuous batching keeps the steps full. Because only this thread touches a
model, nothing that packs or patches weights for decoding speed (packed.py) can race with
another request, and the event loop only ever awaits a future.

A call still running when all of its jobs are past their deadline is stopped: its clients
have had their 504, and a request at the limits (64 sentences of 200 tokens, beam 16) would
otherwise keep the thread long after that while every other request waits. The thread hands
each call a `Check` on its deadline, which the search calls between decoder steps.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from alignmt.answers.limits import Limits, RequestError, over_limit
from alignmt.decoding.engine import Check

# payloads of jobs with one key, and the call's check -> one result (or the exception to
# raise) per payload
RunFn = Callable[[list[Any], Check], list[Any]]


@dataclass
class Job:
    key: Hashable  # jobs with equal keys run in one call of `run`
    run: RunFn
    payload: Any
    sentences: int  # what the job adds to the queue and to a batch
    deadline: float = math.inf  # time.monotonic() past which its client has had a 504
    future: Future = field(default_factory=Future)


def deadline_check(deadline: float) -> Check:
    """The check of a call whose last client gives up at `deadline` (a time.monotonic()):
    a 504 once it has passed, and otherwise nothing, so a call stops within a step of it."""

    def check() -> None:
        if time.monotonic() > deadline:
            raise RequestError(504, "timeout", "stopped at the deadline: no client waits for it")

    return check


class Batcher:
    """Queues jobs for the decoding thread; see the module docstring. A job whose key is
    None shares its call with no other and runs as soon as the thread reaches it."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._queue: deque[Job] = deque()
        self._waiting = 0  # sentences in the queue
        self._arrived = 0.0  # time.monotonic() of the last job queued
        self._last_batch = 0  # sentences in the last batch run
        self._changed = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="alignmt-decoder", daemon=True)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Let the job being run finish; refuse those still waiting (503)."""
        with self._changed:
            self._stopping = True
            waiting, self._queue, self._waiting = list(self._queue), deque(), 0
            self._changed.notify()
        for job in waiting:
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(RequestError(503, "busy", "the server is stopping"))
        self._thread.join()

    async def submit(self, key: Hashable | None, run: RunFn, payload: Any, sentences: int) -> Any:
        """Queue a job and wait for its result.

        Raises:
            RequestError: 503 when the queue is full or the server stopping, 504 past the
                deadline, or whatever `run` returned as this job's exception.
        """
        limits = self.limits
        job = Job(key, run, payload, sentences, time.monotonic() + limits.deadline)
        with self._changed:
            if self._stopping:
                raise RequestError(503, "busy", "the server is stopping")
            if (waiting := self._waiting + sentences) > limits.max_queue:
                error = over_limit("max_queue", waiting, limits.max_queue, "sentences waiting", 503)
                error.details["retry_after"] = 1
                raise error
            self._queue.append(job)
            self._arrived = time.monotonic()
            self._waiting += sentences
            self._changed.notify()
        job.future.add_done_callback(partial(self._forget, job))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(job.future), limits.deadline)
        except asyncio.TimeoutError:
            # wait_for cancelled the future: a job the thread has not started never runs
            message = f"no answer within the deadline of {limits.deadline} s"
            raise RequestError(
                504, "timeout", message, limit="deadline", max=limits.deadline
            ) from None

    def _forget(self, job: Job, future: Future) -> None:
        """Take a job cancelled while waiting out of the queue: it holds no place there."""
        if not future.cancelled():
            return
        with self._changed:
            if job in self._queue:
                self._queue.remove(job)
                self._waiting -= job.sentences

    def _serve(self) -> None:
        while (jobs := self._next_batch()) is not None:
            jobs = [job for job in jobs if job.future.set_running_or_notify_cancel()]
            if jobs:
                self._run(jobs)

    def _next_batch(self) -> list[Job] | None:
        """The oldest job and those waiting that share its key, up to the batch width;
        None when stopping."""
        limits = self.limits
        with self._changed:
            while not self._queue and not self._stopping:
                self._changed.wait()
            if self._stopping:
                return None
            key = self._queue[0].key
            start, cap = time.monotonic(), 10 * limits.batch_wait
            while key is not None and (waiting := self._sharing(key)) < limits.batch_width:
                # Wait while sentences keep arriving (none for batch_wait: go), and while
                # fewer wait than the last batch held, for its clients may be about to send
                # their next ones; never past the cap.
                until = self._arrived + limits.batch_wait
                if waiting < self._last_batch:
                    until = start + cap
                left = min(until, start + cap) - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            jobs, kept, size = [], deque(), 0
            for job in self._queue:
                fits = not jobs or (key is not None and size + job.sentences <= limits.batch_width)
                if job.key == key and fits:
                    jobs.append(job)
                    size += job.sentences
                else:
                    kept.append(job)
            self._queue, self._waiting = kept, self._waiting - size
            self._last_batch = size
            return jobs

    def _sharing(self, key: Hashable) -> int:
        return sum(job.sentences for job in self._queue if job.key == key)

    @staticmethod
    def _run(jobs: list[Job]) -> None:
        """Run one call; whatever goes wrong, every job gets an answer and the thread lives."""
        check = deadline_check(max(job.deadline for job in jobs))
        try:
            results = jobs[0].run([job.payload for job in jobs], check)
            if len(results) != len(jobs):
                raise RuntimeError(f"{len(jobs)} jobs got {len(results)} results")
        except Exception as error:  # a bug or the deadline, not the client: every job fails
            results = [error] * len(jobs)
        for job, result in zip(jobs, results, strict=True):
            if isinstance(result, BaseException):
                job.future.set_exception(result)
            else:
                job.future.set_result(result)

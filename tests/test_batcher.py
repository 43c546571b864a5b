"""The serving queue and its decoding thread (serve/batcher.py), without a model: 503
and 504, dynamic batching by key, stopping, and an event loop that never blocks."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from alignmt.answers.limits import Limits, RequestError
from alignmt.serve.batcher import Batcher, deadline_check


def run_async(coroutine):
    return asyncio.run(coroutine)


def echo(payloads, check):
    return list(payloads)


def test_a_full_queue_answers_503_and_a_late_answer_504():
    async def scenario():
        batcher = Batcher(Limits(max_queue=3, max_sentences=2, deadline=0.2))  # never started
        waiting = asyncio.ensure_future(batcher.submit("k", echo, None, 2))
        await asyncio.sleep(0)
        with pytest.raises(RequestError) as full:
            await batcher.submit("k", echo, None, 2)
        with pytest.raises(RequestError) as late:
            await waiting
        return full.value, late.value

    full, late = run_async(scenario())
    assert full.status == 503 and full.details["retry_after"] == 1
    assert full.details["limit"] == "max_queue"
    assert late.status == 504


def test_a_job_that_timed_out_gives_its_place_in_the_queue_back():
    async def scenario():
        batcher = Batcher(Limits(max_queue=2, max_sentences=2, deadline=0.05))  # never started
        for _ in range(2):  # the second would find a full queue if the first still held it
            with pytest.raises(RequestError) as late:
                await batcher.submit("k", echo, None, 2)
            assert late.value.status == 504

    run_async(scenario())


def test_stopping_answers_the_jobs_still_waiting_and_a_broken_call_fails_only_its_jobs():
    release = threading.Event()

    def slow(payloads, check):
        release.wait(5)
        return payloads

    async def scenario():
        batcher = Batcher(Limits(batch_wait=0.001))
        batcher.start()
        running = asyncio.ensure_future(batcher.submit(None, slow, 1, 1))
        await asyncio.sleep(0.05)
        waiting = asyncio.ensure_future(batcher.submit("k", echo, 2, 1))
        await asyncio.sleep(0.05)
        stopping = asyncio.get_running_loop().run_in_executor(None, batcher.stop)
        await asyncio.sleep(0.05)
        release.set()
        await stopping
        return await running, await asyncio.gather(waiting, return_exceptions=True)

    done, [refused] = run_async(scenario())
    assert done == 1 and refused.status == 503

    async def broken():
        batcher = Batcher(Limits())
        batcher.start()
        with pytest.raises(RuntimeError, match="2 jobs got 1 results"):
            await asyncio.gather(
                batcher.submit("k", lambda p, c: [0], 1, 1),
                batcher.submit("k", lambda p, c: [0], 2, 1),
            )
        assert batcher.alive and await batcher.submit("k", echo, 3, 1) == 3
        batcher.stop()

    run_async(broken())


def test_waiting_jobs_that_share_a_key_run_in_one_call_on_one_thread():
    calls = []

    def run(payloads, check):
        calls.append((threading.current_thread().name, list(payloads)))
        return [p * 10 for p in payloads]

    async def scenario():
        batcher = Batcher(Limits(batch_width=3, batch_wait=0.02))
        batcher.start()
        jobs = [batcher.submit(key, run, n, 1) for n, key in enumerate("aabaa")]
        results = await asyncio.gather(*jobs)
        batcher.stop()
        return results

    assert run_async(scenario()) == [0, 10, 20, 30, 40]
    assert {name for name, _ in calls} == {"alignmt-decoder"}
    # The oldest waiting job's key goes first, with the others of its key up to the width.
    assert [payloads for _, payloads in calls] == [[0, 1, 3], [2], [4]]


def test_after_a_batch_the_decoder_waits_for_as_many_sentences_as_it_held():
    sizes = []

    def run(payloads, check):
        sizes.append(len(payloads))
        return payloads

    async def scenario():
        batcher = Batcher(Limits(batch_wait=0.02))  # waits at most 0.2 s
        batcher.start()
        await asyncio.gather(*[batcher.submit("k", run, n, 1) for n in range(3)])
        first = asyncio.ensure_future(batcher.submit("k", run, 3, 1))
        await asyncio.sleep(0.05)  # past batch_wait, within the cap: the others still join
        await asyncio.gather(first, batcher.submit("k", run, 4, 1), batcher.submit("k", run, 5, 1))
        batcher.stop()

    run_async(scenario())
    assert sizes == [3, 3]


def test_decoding_never_blocks_the_event_loop():
    def slow(payloads, check):
        time.sleep(0.3)
        return payloads

    async def scenario():
        batcher = Batcher(Limits())
        batcher.start()
        job = asyncio.ensure_future(batcher.submit("k", slow, 1, 1))
        ticks = 0
        while not job.done():
            await asyncio.sleep(0.01)
            ticks += 1
        batcher.stop()
        return ticks

    assert run_async(scenario()) >= 10  # the loop kept running while the job slept


def test_a_calls_check_is_silent_until_its_deadline_and_then_a_504():
    check = deadline_check(time.monotonic() + 0.2)
    check()  # well before the deadline: nothing
    time.sleep(0.25)
    with pytest.raises(RequestError) as late:
        check()
    assert (late.value.status, late.value.code) == (504, "timeout")


def test_a_call_is_checked_against_the_latest_deadline_of_its_jobs():
    release, calls = threading.Event(), []

    def blocker(payloads, check):
        release.wait(5)
        return payloads

    def run(payloads, check):
        time.sleep(0.6)  # past the first job's deadline (1.05 s), not the second's (1.6 s)
        check()
        calls.append(list(payloads))
        return payloads

    async def scenario():
        batcher = Batcher(Limits(deadline=1.0, batch_wait=0.001))
        batcher.start()
        held = asyncio.ensure_future(batcher.submit(None, blocker, 0, 1))
        await asyncio.sleep(0.05)
        first = asyncio.ensure_future(batcher.submit("k", run, 1, 1))
        await asyncio.sleep(0.55)
        second = asyncio.ensure_future(batcher.submit("k", run, 2, 1))
        await asyncio.sleep(0.05)
        release.set()  # both wait: they run in one call
        results = await asyncio.gather(held, first, second, return_exceptions=True)
        batcher.stop()
        return results

    held, first, second = run_async(scenario())
    assert calls == [[1, 2]] and (held, second) == (0, 2)
    assert isinstance(first, RequestError) and first.status == 504  # its client gave up

"""Running asyncio-based NSQ clients (pynsq on tornado) inside a synchronous pytest test, with
every scenario bounded in time."""

import asyncio
import time

SCENARIO_TIMEOUT = 40


def run(coro_fn, timeout=SCENARIO_TIMEOUT):
    """Runs coro_fn() on a fresh event loop, at most `timeout` seconds, then cancels leftovers."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(asyncio.wait_for(coro_fn(), timeout))
    finally:
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=2))
        finally:
            loop.close()
            asyncio.set_event_loop(None)


async def until(pred, timeout, what):
    """Waits until pred() is true; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))

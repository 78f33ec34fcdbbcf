"""AsyncTrainerClient: TrainerClient's methods as coroutines, on the same engine (tjob.client says how
a call's completion reaches its caller: here the asyncio loop reads the channel among its descriptors).
"""
from __future__ import annotations

import asyncio
import time
import weakref
from typing import Callable, Dict, List, Optional, Set

from . import _tjob
from ._checks import _request
from .client import (JobFailedError, _array_members, _Base, _check_wait, _exception, _Lines, _log_options,
                     _queue_entry, _runtime)
from .types import Event, QueueEntry, Runtime, TrainJob


class AsyncTrainerClient(_Base):
    """TrainerClient's methods as coroutines, completed from the engine's thread (no thread per call):
    `await client.train(...)`, `async for line in client.get_job_logs(name, follow=True)`."""

    def __init__(self, backend_config=None):
        super().__init__(backend_config)
        self._channels = weakref.WeakKeyDictionary()  # loop -> its channel
        self._last_loop = self._last_channel = None

    def _channel(self, loop):
        # The engine's completions reach this loop in batches: its reader drains them.
        if loop is self._last_loop:
            return self._last_channel
        ch = self._channels.get(loop)
        if ch is None:
            ch = _tjob.Channel()
            loop.add_reader(ch.fileno(), ch.drain)
            self._channels[loop] = ch
        self._last_loop, self._last_channel = loop, ch
        return ch

    async def _call(self, start, *args):
        import asyncio  # here, not at the top: `import tjob` stays cheap for the blocking client

        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def settle(result, error):  # on the loop's thread (the channel's drain)
            if fut.done():
                return
            if error is not None:
                fut.set_exception(_exception(error))
            else:
                fut.set_result(result)

        call = start(*args, self._channel(loop).target(settle))
        try:
            return await fut
        except asyncio.CancelledError:
            call.cancel()
            raise

    def close(self):
        for loop, ch in list(self._channels.items()):
            if not loop.is_closed():
                loop.remove_reader(ch.fileno())
        self._channels.clear()
        self._last_loop = self._last_channel = None
        super().close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()

    async def _runtime_map(self, names) -> Dict[str, Optional[Runtime]]:
        known = self._runtimes
        if all(n in known for n in names):
            return known
        for n in set(names) - set(known):
            r = None
            if n:
                try:
                    r = _runtime(await self._call(self._engine.get_runtime, n))
                except ValueError:
                    r = Runtime(name=n, trainer=RuntimeTrainer(trainer_type=TrainerType.CUSTOM_TRAINER,
                                                               framework="unknown"))
            self._runtimes[n] = r
        return self._runtimes

    async def list_runtimes(self) -> List[Runtime]:
        return [_runtime(d) for d in await self._call(self._engine.list_runtimes)]

    async def get_runtime(self, name: str) -> Runtime:
        return _runtime(await self._call(self._engine.get_runtime, name))

    async def get_runtime_packages(self, runtime: Runtime) -> List[str]:
        name = runtime.name if isinstance(runtime, Runtime) else runtime
        return list((await self.get_runtime(name)).trainer.packages)

    async def train(self, runtime=None, initializer=None, trainer=None, options=None) -> str:
        req = self._request(runtime, initializer, trainer, options)
        array = req.pop("_array", None)
        if array is not None:
            await self._call(self._engine.train_array, req, array)
            return req["name"]
        return await self._call(self._engine.train, req)

    async def optimize(self, trial_template, **kwargs) -> str:
        """TrainerClient.optimize, in a worker thread (it starts the sweep's owner and returns)."""
        import asyncio

        from .optimizer import _trainer_optimize

        return await asyncio.to_thread(_trainer_optimize, self, trial_template, **kwargs)

    async def list_jobs(self, runtime: Optional[Runtime] = None) -> List[TrainJob]:
        name = runtime.name if isinstance(runtime, Runtime) else runtime
        jobs = await self._call(self._engine.list_jobs, name)
        rts = await self._runtime_map([d["runtime"] for d in jobs])
        return [self._job(d, rts) for d in jobs]

    async def get_job(self, name: str) -> TrainJob:
        d = await self._call(self._engine.get_job, name)
        return self._job(d, await self._runtime_map([d["runtime"]]))

    async def get_job_logs(self, name: str, step: str = "node-0", follow: bool = False,
                           tail: Optional[int] = None, timestamps: bool = False, since=None,
                           attempt: Optional[int] = None):
        options = _log_options(step, follow, tail, timestamps, since, attempt)
        log = await self._call(self._engine.open_logs, name, options)
        lines = _Lines()
        while True:
            while lines.lines:
                yield lines.lines.popleft()
            if log is None:
                return
            chunk = await self._call(log.read)
            lines.feed(chunk)
            if chunk is None:
                log = None

    async def get_job_events(self, name: str) -> List[Event]:
        return self._events(name, await self._call(self._engine.events, name))

    async def get_queue(self) -> List[QueueEntry]:
        return [_queue_entry(q) for q in await self._call(self._engine.queue)]

    async def wait_for_job_status(self, name: str, status: Set[str] = {"Complete"}, timeout: int = 600,
                                  polling_interval: int = 2, callbacks: Optional[List[Callable]] = None
                                  ) -> TrainJob:
        wanted = _check_wait(status, timeout, polling_interval)
        deadline = time.monotonic() + timeout
        if callbacks:
            watch, now = await self._call(self._engine.open_watch, name)
            while True:
                if now is None:
                    raise ValueError(f"No TrainJob with name {name!r}")
                job = self._job(now, await self._runtime_map([now["runtime"]]))
                for cb in callbacks:
                    cb(job)
                left = deadline - time.monotonic()
                if job.status in wanted or job.status in ("Complete", "Failed") or left <= 0:
                    break
                now = await self._call(watch.next, left)
        left = max(deadline - time.monotonic(), 0.001)
        try:
            d = await self._call(self._engine.wait, name, wanted, left)
        except JobFailedError as e:
            try:
                job = await self.get_job(name)
            except (ValueError, RuntimeError):
                job = None
            raise JobFailedError(str(e), job) from None
        return self._job(d, await self._runtime_map([d["runtime"]]))

    async def cancel_job(self, name: str, force: bool = False, checkpoint: bool = False) -> None:
        try:
            await self._call(self._engine.cancel_job, name, force, checkpoint)
        except ValueError:
            members = _array_members(await self.list_jobs(), name)
            if not members:
                raise
            for j in members:
                if j.status not in ("Complete", "Failed"):
                    await self._call(self._engine.cancel_job, j.name, force, checkpoint)

    async def delete_job(self, name: str) -> None:
        try:
            await self._call(self._engine.delete_job, name)
        except ValueError:
            members = _array_members(await self.list_jobs(), name)
            if not members:
                raise
            for j in members:
                await self._call(self._engine.delete_job, j.name)

    async def get_array(self, name: str) -> List[TrainJob]:
        members = _array_members(await self.list_jobs(), name)
        if not members:
            raise ValueError(f"No job array with name {name!r}")
        return members

    async def wait_for_array(self, name: str, status: Set[str] = {"Complete"}, timeout: int = 600
                             ) -> List[TrainJob]:
        wanted = _check_wait(status, timeout, min(timeout / 2, 1))
        deadline = time.monotonic() + timeout
        out = []
        for j in await self.get_array(name):
            left = max(deadline - time.monotonic(), 0.001)
            try:
                d = await self._call(self._engine.wait, j.name, wanted, left)
            except JobFailedError as e:
                try:
                    job = await self.get_job(j.name)
                except (ValueError, RuntimeError):
                    job = None
                raise JobFailedError(str(e), job) from None
            out.append(self._job(d, await self._runtime_map([d["runtime"]])))
        return out

"""The Python client's side of bench/run's pyclient case: N command jobs, K in flight, through
AsyncTrainerClient, as tjob-bench's spawn mode runs them through the C++ engine. Prints one JSON line:
runs, in_flight, wall_s, per_s, cpu_us_per_run (this process: the engine's thread and Python's).

    PYTHONPATH=build/python python3 bench/py_client.py HOME N K PROGRAM...
"""
import asyncio
import json
import resource
import sys
import time

from tjob import AsyncTrainerClient, CommandTrainer, LocalProcessBackendConfig


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def main(home, n, k, argv):
    async with AsyncTrainerClient(LocalProcessBackendConfig(home=home, cpu_budget=0)) as client:
        left = n

        async def worker():
            nonlocal left
            while left > 0:
                left -= 1
                name = await client.train(trainer=CommandTrainer(argv, working_dir="."))
                await client.wait_for_job_status(name)

        cpu0, t0 = cpu_seconds(), time.monotonic()
        await asyncio.gather(*[worker() for _ in range(k)])
        wall, cpu = time.monotonic() - t0, cpu_seconds() - cpu0
    print(json.dumps({"runs": n, "in_flight": k, "wall_s": wall, "per_s": n / wall, "cpu_us_per_run": cpu / n * 1e6}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]))

# run: python loop_run.py
# prints: hello from goloop
import asyncio
import sys

import goloop


async def main():
    await asyncio.sleep(0.01)
    return f"hello from {type(asyncio.get_running_loop()).__module__.split('.')[0]}"


print(goloop.run(main()))  # like asyncio.run, on every supported version

if sys.version_info >= (3, 12):
    asyncio.run(main(), loop_factory=goloop.new_event_loop)  # asyncio's own, 3.12+

    with asyncio.Runner(loop_factory=goloop.new_event_loop) as runner:
        runner.run(main())

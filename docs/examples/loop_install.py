# run: python loop_install.py
# prints: goloop
import asyncio

import goloop

goloop.install()  # the event loop policy, without asyncio 3.14's deprecation warning


async def main():
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


print(asyncio.run(main()))

# run: python loop_threads.py
# prints: 3 loops answered
import asyncio
import threading

import goloop

results = []


def worker(n):
    # each thread runs a loop of its own; a loop belongs to the thread that runs it
    results.append(goloop.run(asyncio.sleep(0.01, result=n)))


threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()


async def main():
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    # the one way in from another thread: call_soon_threadsafe
    threading.Thread(target=loop.call_soon_threadsafe, args=(done.set_result, len(results))).start()
    return await done


print(f"{goloop.run(main())} loops answered")

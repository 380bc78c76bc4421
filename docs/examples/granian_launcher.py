# run: python granian_launcher.py --interface asgi --loop asyncio --port {port} asgi_hello:app
# check: GET / -> 200 "Hello, world"
# needs: granian
import goloop

goloop.install()  # module level: spawned workers run it too
if __name__ == "__main__":
    from granian.cli import cli

    cli()  # python granian_launcher.py --interface asgi --loop asyncio app:app

"""python -m goloop serve module:app [options]: goloop serve (see goloop.serve.server)."""
import sys

from .serve.server import main

sys.exit(main())

"""python -m goloop serve module:app [options]: goloop serve (see goloop._serve)."""
import sys

from ._serve import main

sys.exit(main())

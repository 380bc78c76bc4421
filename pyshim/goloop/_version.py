"""goloop's version: the one place it is written. pyproject.toml reads it (setuptools'
`attr:`) for the wheel and the sdist; goloop.__version__ and `goloop --version` import it."""
__version__ = "0.1.0"

"""fp4forge: the C command-line tool, shipped in a wheel. `python -m fp4forge ARGS`
and the `fp4forge` command both run the bundled binary."""
import os

__version__ = "@VERSION@"


def binary():
    """Path of the bundled fp4forge executable."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "fp4forge")

"""Runs the bundled binary with this process's arguments (exec: its exit code,
signals and output are the binary's own)."""
import os
import sys

from fp4forge import binary


def main():
    exe = binary()
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()

"""Runs `python ARGS` through pyserver.py's preloaded fork when FP4FORGE_PYSERVER names
its socket, else as plain python (the same command line, exec'd).

Why a separate client: the shell's $PY stays one word, and every form the tests use
(SCRIPT, - with a heredoc, -c CODE) goes through; any other form runs plain python.
"""
import json
import os
import socket
import sys

argv = sys.argv[1:]
sock_path = os.environ.get("FP4FORGE_PYSERVER", "")
real = os.environ["FP4FORGE_PY_REAL"]
if not sock_path or not argv or (argv[0].startswith("-") and argv[0] not in ("-", "-c")):
    os.execv(real, [real] + argv)
try:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(sock_path)
except OSError:
    os.execv(real, [real] + argv)  # no server (it died or was never started): plain python
request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}) + "\n"
socket.send_fds(conn, [request.encode()], [0, 1, 2])
reply = b""
while not reply.endswith(b"\n"):
    chunk = conn.recv(64)
    if not chunk:
        print("pyclient: the fork server closed without an exit status", file=sys.stderr)
        sys.exit(70)
    reply += chunk
sys.exit(int(reply))

"""Fork server for the conformance tier's Python checks.

Why: the tier runs about 200 short scripts, and each one spent 3-7 s importing torch,
transformers and compressed-tensors before doing under a second of work. This process
imports them once; each request forks a child that already holds them and runs the
script as `python SCRIPT ARGS` would (its own argv, cwd, environment, stdin, stdout and
stderr, passed over the socket), so a script cannot tell the difference except by the
clock. llm-compressor is not preloaded: importing it patches nothing we rely on, but the
checks that load our output with plain transformers must not run under it.

Usage: pyserver.py SOCKET (prints "ready" on stdout once it listens).
"""
import array
import atexit
import json
import os
import runpy
import signal
import socket
import sys
import traceback

import torch  # noqa: F401  (the point of the server: imported once)
import transformers  # noqa: F401
import safetensors.torch  # noqa: F401
import compressed_tensors  # noqa: F401


def receive_request(conn):
    """One request: a JSON header plus the client's stdin, stdout and stderr."""
    fds = array.array("i")
    data = b""
    while not data.endswith(b"\n"):
        msg, anc, _, _ = conn.recvmsg(1 << 20, socket.CMSG_SPACE(3 * fds.itemsize))
        if not msg:
            raise ConnectionError("client closed before its request was whole")
        data += msg
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if len(fds) != 3:
        raise ConnectionError(f"expected 3 descriptors, got {len(fds)}")
    return json.loads(data), list(fds)


def exit_code_of(exc):
    """The status `python` itself gives a SystemExit's argument."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_script(argv):
    """Runs argv as python's command line would: SCRIPT, - (stdin) or -c CODE."""
    if argv[0] == "-c":
        sys.argv = ["-c"] + argv[2:]
        sys.path[0] = ""
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    elif argv[0] == "-":
        sys.argv = argv
        sys.path[0] = ""
        code = sys.stdin.read()
        exec(compile(code, "<stdin>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = argv
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


def child(request, fds):
    """In the forked child: become the client's process, run, and never return."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    try:
        run_script(request["argv"])
        status = 0
    except SystemExit as exc:
        status = exit_code_of(exc)
    except BaseException:  # a script's uncaught error: python prints it and exits 1
        traceback.print_exc()
        status = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        status = status or 1
    os._exit(status & 0xFF)


def serve_one(conn):
    """Forks the request's child and reports its exit status to the client."""
    request, fds = receive_request(conn)
    pid = os.fork()
    if pid == 0:
        conn.close()
        child(request, fds)
    for fd in fds:
        os.close(fd)
    _, wstatus = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(wstatus)
    # a child killed by a signal: the shell's 128+N, so a crash never reads as a pass
    conn.sendall(f"{code if code >= 0 else 128 - code}\n".encode())


def handle(conn):
    """In a forked handler, so a request never waits for another to finish."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        serve_one(conn)
    except (ConnectionError, OSError, ValueError) as exc:
        print(f"pyserver: request dropped: {exc}", file=sys.stderr, flush=True)
    os._exit(0)


def main():
    path = sys.argv[1]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    print("ready", flush=True)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the reader of "ready" is gone
    while True:
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            handle(conn)
        conn.close()


if __name__ == "__main__":
    main()

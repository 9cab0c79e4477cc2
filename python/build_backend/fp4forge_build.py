"""PEP 517 backend for fp4forge: runs the project's Makefile and packs the binary,
a two-file Python package and the console script into a wheel. Only the standard
library is used, so `pip install .` needs no build requirements from PyPI.

The wheel is tagged py3-none-linux_<arch>: it links the system's libjansson and
libcurl. tools/wheel/build.sh turns it into a manylinux wheel with auditwheel,
which copies those libraries in and points the binary at them."""
import base64
import hashlib
import os
import platform
import re
import subprocess
import tarfile
import zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = "build-wheel"   # its own build folder: never mixes with a developer's build/


def _version():
    with open(os.path.join(ROOT, "include", "fp4forge", "version.h")) as f:
        return re.search(r'FP4FORGE_VERSION "([^"]+)"', f.read()).group(1)


def _metadata(version):
    return ("Metadata-Version: 2.1\nName: fp4forge\nVersion: %s\n"
            "Summary: Hugging Face checkpoints to vLLM's NVFP4A16 (compressed-tensors), streaming, in C\n"
            "License: Apache-2.0\nRequires-Python: >=3.8\n" % version)


def _tag():
    return "py3-none-linux_%s" % platform.machine()


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _build_binary():
    jobs = str(max(1, (os.cpu_count() or 1)))
    # LINK_CURL=1: libcurl linked, not opened at probe time, so that
    # auditwheel sees it and copies it into the wheel (Makefile says more)
    subprocess.run(["make", "-C", ROOT, "-j" + jobs, "B=" + BUILD, "LINK_CURL=1", BUILD + "/fp4forge"],
                   check=True)
    with open(os.path.join(ROOT, BUILD, "fp4forge"), "rb") as f:
        return f.read()


def _files(version):
    with open(os.path.join(ROOT, "python", "fp4forge", "__init__.py")) as f:
        init = f.read().replace("@VERSION@", version).encode()
    with open(os.path.join(ROOT, "python", "fp4forge", "__main__.py"), "rb") as f:
        main = f.read()
    dist = "fp4forge-%s.dist-info" % version
    wheel = "Wheel-Version: 1.0\nGenerator: fp4forge_build\nRoot-Is-Purelib: false\nTag: %s\n" % _tag()
    return [
        ("fp4forge/__init__.py", init, 0o644),
        ("fp4forge/__main__.py", main, 0o644),
        ("fp4forge/bin/fp4forge", _build_binary(), 0o755),
        (dist + "/METADATA", _metadata(version).encode(), 0o644),
        (dist + "/WHEEL", wheel.encode(), 0o644),
        (dist + "/entry_points.txt", b"[console_scripts]\nfp4forge = fp4forge.__main__:main\n", 0o644),
    ], dist


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    files, dist = _files(version)
    name = "fp4forge-%s-%s.whl" % (version, _tag())
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data, mode in files:
            info = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16   # a regular file with its mode
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            records.append(_record_line(arc, data))
        records.append(dist + "/RECORD,,")
        z.writestr(dist + "/RECORD", "\n".join(records) + "\n")
    return name


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    version = _version()
    dist = "fp4forge-%s.dist-info" % version
    os.makedirs(os.path.join(metadata_directory, dist), exist_ok=True)
    with open(os.path.join(metadata_directory, dist, "METADATA"), "w") as f:
        f.write(_metadata(version))
    return dist


def build_sdist(sdist_directory, config_settings=None):
    """The files git tracks, under fp4forge-VERSION/."""
    version = _version()
    name = "fp4forge-%s.tar.gz" % version
    tracked = subprocess.run(["git", "-C", ROOT, "ls-files"], check=True, capture_output=True,
                             text=True).stdout.split()
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for path in tracked:
            t.add(os.path.join(ROOT, path), arcname="fp4forge-%s/%s" % (version, path))
        pkg = "Metadata-Version: 2.1\nName: fp4forge\nVersion: %s\n" % version
        info = tarfile.TarInfo("fp4forge-%s/PKG-INFO" % version)
        info.size = len(pkg)
        import io
        t.addfile(info, io.BytesIO(pkg.encode()))
    return name

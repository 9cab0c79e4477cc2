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


CLASSIFIERS = [
    "Development Status :: 4 - Beta",
    "Environment :: Console",
    "Intended Audience :: Developers",
    "Intended Audience :: Science/Research",
    "License :: OSI Approved :: Apache Software License",
    "Operating System :: POSIX :: Linux",
    "Programming Language :: C",
    "Topic :: Scientific/Engineering :: Artificial Intelligence",
]


def _metadata(version):
    """Core metadata with the README as the long description (what PyPI shows)."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    head = ("Metadata-Version: 2.1\nName: fp4forge\nVersion: %s\n"
            "Summary: Hugging Face checkpoints to vLLM's NVFP4A16 (compressed-tensors), streaming, in C\n"
            "License: Apache-2.0\nLicense-File: LICENSE\nRequires-Python: >=3.8\n"
            "Keywords: nvfp4,quantization,vllm,compressed-tensors,safetensors,llm\n" % version)
    head += "".join("Classifier: %s\n" % c for c in CLASSIFIERS)
    return head + "Description-Content-Type: text/markdown\n\n" + readme


# Libraries every manylinux system has: auditwheel never bundles them, so
# their licenses need not travel (the rest, libjansson, libcurl and what they
# load, are copied into the wheel by tools/wheel/build.sh).
SYSTEM_LIBS = ("linux-vdso", "ld-linux", "libc.so", "libm.so", "libpthread", "libdl.so", "librt.so",
               "libgcc_s", "libstdc++", "libresolv")


def _linked_libraries(exe):
    try:
        out = subprocess.run(["ldd", exe], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    libs = []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(/\S+)", line)
        if m and not m.group(1).startswith(SYSTEM_LIBS):
            libs.append(m.group(2))
    return libs


def _package_of(path):
    """The Debian package that installed path ('' when none did). dpkg knows a
    library by the path its package put it at, /lib or /usr/lib (usrmerge)."""
    try:
        out = subprocess.run(["dpkg", "-S", path], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""
    return out.split(":")[0].split(",")[0].strip()


def _third_party_licenses(exe, dist):
    """The Debian copyright file of each library the binary links (and so the
    wheel bundles), as dist-info/licenses/third_party/PACKAGE.copyright."""
    files = {}
    for lib in _linked_libraries(exe):
        owner = _package_of(lib) or _package_of(os.path.realpath(lib))
        path = "/usr/share/doc/%s/copyright" % owner
        if owner and os.path.isfile(path) and owner not in files:
            with open(path, "rb") as f:
                files[owner] = f.read()
    return [("%s/licenses/third_party/%s.copyright" % (dist, pkg), data, 0o644) for pkg, data in sorted(files.items())]


def _tag():
    return "py3-none-linux_%s" % platform.machine()


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _build_binary():
    """Builds the binary; returns its path."""
    jobs = str(max(1, (os.cpu_count() or 1)))
    # LINK_CURL=1: libcurl linked, not opened at probe time, so that
    # auditwheel sees it and copies it into the wheel (Makefile says more)
    subprocess.run(["make", "-C", ROOT, "-j" + jobs, "B=" + BUILD, "LINK_CURL=1", BUILD + "/fp4forge"],
                   check=True)
    return os.path.join(ROOT, BUILD, "fp4forge")


def _files(version):
    with open(os.path.join(ROOT, "python", "fp4forge", "__init__.py")) as f:
        init = f.read().replace("@VERSION@", version).encode()
    with open(os.path.join(ROOT, "python", "fp4forge", "__main__.py"), "rb") as f:
        main = f.read()
    dist = "fp4forge-%s.dist-info" % version
    wheel = "Wheel-Version: 1.0\nGenerator: fp4forge_build\nRoot-Is-Purelib: false\nTag: %s\n" % _tag()
    exe = _build_binary()
    with open(exe, "rb") as f:
        binary = f.read()
    with open(os.path.join(ROOT, "LICENSE"), "rb") as f:
        license_text = f.read()
    return [
        ("fp4forge/__init__.py", init, 0o644),
        ("fp4forge/__main__.py", main, 0o644),
        ("fp4forge/bin/fp4forge", binary, 0o755),
        (dist + "/METADATA", _metadata(version).encode(), 0o644),
        (dist + "/WHEEL", wheel.encode(), 0o644),
        (dist + "/entry_points.txt", b"[console_scripts]\nfp4forge = fp4forge.__main__:main\n", 0o644),
        (dist + "/licenses/LICENSE", license_text, 0o644),
    ] + _third_party_licenses(exe, dist), dist


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


# pip install -e . (PEP 660): the package is a compiled binary, so the
# "editable" wheel is the same wheel; rebuilding after a change is `make`.
build_editable = build_wheel


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return prepare_metadata_for_build_wheel(metadata_directory, config_settings)


# Not in an sdist: build outputs, virtual environments, caches.
SKIP_DIRS = {".git", "dist", "__pycache__", ".whl", ".gl"}


def _source_files():
    """The files git tracks; outside a git checkout (an unpacked sdist), every
    file but build outputs."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files"], check=True, capture_output=True, text=True).stdout
        if out.strip():
            return out.split()
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for d, dirs, names in os.walk(ROOT):
        top = d == ROOT   # build/, build-wheel/, ...: the Makefile's output folders
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not (top and x.startswith("build")))
        files += [os.path.relpath(os.path.join(d, n), ROOT) for n in sorted(names) if n != "PKG-INFO"]
    return files


def build_sdist(sdist_directory, config_settings=None):
    """The source files under fp4forge-VERSION/, with PKG-INFO."""
    version = _version()
    name = "fp4forge-%s.tar.gz" % version
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for path in _source_files():
            t.add(os.path.join(ROOT, path), arcname="fp4forge-%s/%s" % (version, path))
        pkg = _metadata(version).encode()
        info = tarfile.TarInfo("fp4forge-%s/PKG-INFO" % version)
        info.size = len(pkg)
        import io
        t.addfile(info, io.BytesIO(pkg))
    return name

#!/usr/bin/env bash
# The wheel (issue 19): tools/wheel/build.sh (pip wheel through the in-tree PEP 517
# backend, then auditwheel repair), installed into a fresh venv with no index: the
# installed `fp4forge` and `python -m fp4forge` report the C version string, run on
# the libraries bundled in the wheel, and carry the README's demo.
set -u
cd "$(dirname "$0")/../.."
. tests/conformance/conf_lib.sh
D=$WORK/wheel; rm -rf "$D"; mkdir -p "$D"
want=$(sed -n 's/.*FP4FORGE_VERSION "\(.*\)".*/\1/p' include/fp4forge/version.h)
if ! whl=$(bash tools/wheel/build.sh "$D/dist" 2> "$D/build.err" | tail -1) || [ ! -f "$whl" ]; then
    echo "FAIL wheel_build ($(tail -1 "$D/build.err"))"; exit 1
fi
tag=$(basename "$whl"); size=$(du -k "$whl" | cut -f1)
echo "PASS wheel_build ($tag, ${size} KB)"
python3 -m venv "$D/venv" && "$D/venv/bin/python" -m pip install -q --no-index "$whl" > "$D/install.log" 2>&1 \
    || { echo "FAIL wheel_install ($(tail -1 "$D/install.log"))"; exit 1; }
v1=$("$D/venv/bin/fp4forge" --version 2>&1); v2=$("$D/venv/bin/python" -m fp4forge --version 2>&1)
[ "$v1" = "fp4forge $want" ] && [ "$v2" = "$v1" ] && echo "PASS wheel_version ($v1, python -m too)" \
    || { echo "FAIL wheel_version ('$v1' / '$v2', want fp4forge $want)"; rc=1; }
bin=$("$D/venv/bin/python" -c 'import fp4forge; print(fp4forge.binary())')
if ldd "$bin" | grep -E 'libjansson|libcurl' | grep -q 'fp4forge.libs/'; then
    echo "PASS wheel_bundled_libs (libjansson and libcurl from fp4forge.libs/)"
else
    echo "FAIL wheel_bundled_libs ($(ldd "$bin" | grep -E 'jansson|curl' | tr '\n' ' '))"; rc=1
fi
if FP4FORGE_BIN="$D/venv/bin/fp4forge" DEMO_DIR="$D/demo" bash tools/demo.sh > "$D/demo.log" 2>&1 \
    && grep -q "verdict: PASS" "$D/demo.log"; then
    echo "PASS wheel_demo (tools/demo.sh with the installed command)"
else
    echo "FAIL wheel_demo ($(tail -1 "$D/demo.log"))"; rc=1
fi
# what a user of PyPI sees: the license and the bundled libraries' licenses travel in the
# wheel, the metadata has a description, classifiers and the license file
if "$D/venv/bin/python" - "$whl" > "$D/meta.log" 2>&1 <<'PYEOF'
import sys, zipfile
from importlib.metadata import metadata
z = zipfile.ZipFile(sys.argv[1])
names = z.namelist()
lic = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
third = sorted(n.rsplit("/", 1)[1] for n in names if "/licenses/third_party/" in n and not n.endswith("/"))
m = metadata("fp4forge")
ok = (lic and "Apache License" in z.read(lic[0]).decode() and any(t.startswith("libcurl") for t in third)
      and any(t.startswith("libjansson") for t in third) and m.get_all("Classifier")
      and m["Description-Content-Type"] == "text/markdown" and "# fp4forge" in (m.get_payload() or ""))
print(f"{len(third)} third-party licenses ({', '.join(third[:4])}, ...); {len(m.get_all('Classifier') or [])} classifiers")
sys.exit(0 if ok else 1)
PYEOF
then echo "PASS wheel_licenses_and_metadata ($(tail -1 "$D/meta.log"))"
else echo "FAIL wheel_licenses_and_metadata ($(tail -1 "$D/meta.log"))"; rc=1; fi
# an sdist unpacked outside git builds its own sdist and installs; pip install -e . works
sdist() {  # SRC_DIR OUT_DIR: the in-tree backend's build_sdist, as a frontend calls it
    local out; out=$(mkdir -p "$2" && cd "$2" && pwd) || return 1
    (cd "$1" && python3 -c 'import sys; sys.path.insert(0, "python/build_backend"); import fp4forge_build; print(fp4forge_build.build_sdist(sys.argv[1]))' "$out")
}
python3 -m venv "$D/venv2" > /dev/null 2>&1
if sdist . "$D/sdist" > "$D/sdist.log" 2>&1 && mkdir -p "$D/unpacked" \
    && tar xzf "$D"/sdist/fp4forge-*.tar.gz -C "$D/unpacked" && rm -rf "$D"/unpacked/fp4forge-*/.git \
    && sdist "$(echo "$D"/unpacked/fp4forge-*)" "$D/sdist2" >> "$D/sdist.log" 2>&1 \
    && [ "$(tar tzf "$D"/sdist2/fp4forge-*.tar.gz | wc -l)" = "$(tar tzf "$D"/sdist/fp4forge-*.tar.gz | wc -l)" ] \
    && "$D/venv2/bin/python" -m pip install -q --no-index --no-build-isolation "$D"/unpacked/fp4forge-* >> "$D/sdist.log" 2>&1 \
    && [ "$("$D/venv2/bin/fp4forge" --version)" = "fp4forge $want" ]; then
    echo "PASS wheel_sdist_outside_git ($(tar tzf "$D"/sdist/fp4forge-*.tar.gz | wc -l) files; the unpacked sdist's own sdist has as many; pip install of it runs fp4forge $want)"
else echo "FAIL wheel_sdist_outside_git ($(grep -v '^ *$' "$D/sdist.log" | tail -1 | cut -c1-200))"; rc=1; fi
python3 -m venv "$D/venv3" > /dev/null 2>&1
if "$D/venv3/bin/python" -m pip install -q --no-index --no-build-isolation -e . > "$D/editable.log" 2>&1 \
    && [ "$("$D/venv3/bin/fp4forge" --version)" = "fp4forge $want" ]; then
    echo "PASS wheel_editable_install (pip install -e . runs fp4forge $want)"
else echo "FAIL wheel_editable_install ($(grep -v '^ *$' "$D/editable.log" | tail -1 | cut -c1-200))"; rc=1; fi
exit $rc

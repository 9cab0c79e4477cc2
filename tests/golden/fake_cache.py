"""fake_cache.py ROOT REPO REF SRC: adds the files of SRC to a Hugging Face hub
cache at ROOT as huggingface_hub lays it out (blobs/<sha256>, snapshots/<commit>/
links to ../../blobs, refs/REF naming the commit) and prints the commit.
Shared by the golden tests that read from a cache."""
import hashlib, os, sys

root, repo, ref, src = sys.argv[1:5]
m = os.path.join(root, "models--" + repo.replace("/", "--"))
files = sorted(os.listdir(src))
commit = hashlib.sha1(b"".join(f.encode() + open(os.path.join(src, f), "rb").read() for f in files)).hexdigest()
snap = os.path.join(m, "snapshots", commit)
os.makedirs(snap, exist_ok=True)
os.makedirs(os.path.join(m, "blobs"), exist_ok=True)
for f in files:
    data = open(os.path.join(src, f), "rb").read()
    blob = hashlib.sha256(data).hexdigest()
    with open(os.path.join(m, "blobs", blob), "wb") as out:
        out.write(data)
    link = os.path.join(snap, f)
    if not os.path.lexists(link):
        os.symlink(os.path.join("..", "..", "blobs", blob), link)
os.makedirs(os.path.dirname(os.path.join(m, "refs", ref)), exist_ok=True)
open(os.path.join(m, "refs", ref), "w").write(commit)
print(commit)

"""A submission's disk cap: its folder and its private /tmp share one size-limited tmpfs.

    unshare --mount --propagation private -- python -I -m zerolab.grading.diskcap SPEC -- bwrap ...

A per-file limit (RLIMIT_FSIZE) does not stop ten thousand files. So the kernel launcher starts this helper in a
mount namespace of its own: it mounts a tmpfs of `size` bytes (and one inode per 4 KiB of it, as a disk block
would cost, so empty files and folders run out too) over the kernel's scratch folder, copies the submission's
files (not its notebooks) into `work/` and the connection file into `tmp/`, and execs bubblewrap, which binds
`work/` at the submission's path and `tmp/` at /tmp. Past the cap every write fails with "No space left on
device" and the cell errors. The mount is seen by no one else and goes away with the kernel's last process.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

BYTES_PER_INODE = 4096


def command(spec, inner):
    """argv that runs `inner` (a bwrap command) with the disk cap of `spec`."""
    return [_system("unshare"), "--mount", "--propagation", "private", "--", sys.executable, "-I", "-m",
            "zerolab.grading.diskcap", json.dumps(spec), "--", *inner]


def mount_options(size):
    return f"size={size},nr_inodes={max(1024, size // BYTES_PER_INODE)},mode=0755,nosuid,nodev"


def _system(name):
    """A system tool (util-linux) by its full path, so a folder early on PATH cannot stand in for it."""
    for folder in ("/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        if os.access(f"{folder}/{name}", os.X_OK):
            return f"{folder}/{name}"
    raise FileNotFoundError(f"{name} (util-linux) is not installed")


def main(argv):
    spec, inner = json.loads(argv[0]), argv[2:]
    top, uid = Path(spec["mount"]), spec["uid"]
    mount = [_system("mount"), "-t", "tmpfs", "-o", mount_options(spec["size"]), "zerolab-disk", str(top)]
    subprocess.run(mount, check=True)
    work, tmp = top / "work", top / "tmp"
    shutil.copytree(spec["workdir"], work, symlinks=True, ignore=shutil.ignore_patterns("*.ipynb"))
    tmp.mkdir()
    shutil.copy(spec["connection_file"], tmp / "kernel.json")
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, uid)
    os.execv(inner[0] if os.sep in inner[0] else shutil.which(inner[0]), inner)


if __name__ == "__main__":
    main(sys.argv[1:])

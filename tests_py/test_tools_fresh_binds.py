"""tools/fresh_binds.sh: the bind mounts a deleted clone left in a chroot root are lifted, and a
bind that still shows its folder is kept (CI's roots for 3.14/3.15, aarch64 and old glibc)."""
import os
import subprocess
import tempfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "tools", "fresh_binds.sh")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def bind(src, dst):
    os.makedirs(dst, exist_ok=True)
    r = subprocess.run(["mount", "--bind", src, dst], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"mount --bind refused here: {r.stderr.strip()}")


def test_stale_binds_lifted_live_ones_kept():
    with tempfile.TemporaryDirectory(prefix="fresh-binds-") as tmp:
        root = os.path.join(tmp, "root")
        clones = os.path.join(tmp, "clones")         # the folder above a clone, as CI binds it
        live = os.path.join(tmp, "live")              # a bind whose folder still exists
        for d in (clones, live):
            os.makedirs(d)
        try:
            bind(clones, root + clones)
            bind(live, root + live)
            os.rmdir(clones)                          # the clone's folder deleted ...
            os.makedirs(clones)                       # ... and made again by the next run
            assert not os.path.exists(os.path.join(root + clones, "marker"))
            open(os.path.join(clones, "marker"), "w").close()
            # the stale bind hides the new folder: what made CI fail
            assert not os.path.exists(os.path.join(root + clones, "marker"))
            r = subprocess.run(["bash", SCRIPT, clones, root], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            assert "lifting" in r.stderr
            assert not mounted(root + clones)
            assert mounted(root + live)
            # a fresh bind now shows the new folder, and a second pass keeps it
            bind(clones, root + clones)
            assert os.path.exists(os.path.join(root + clones, "marker"))
            r = subprocess.run(["bash", SCRIPT, clones, root], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0 and "lifting" not in r.stderr, r.stderr
            assert mounted(root + clones)
        finally:
            for m in (root + clones, root + live):
                while mounted(m):
                    subprocess.run(["umount", "-l", m], capture_output=True)


def test_bind_of_another_folder_lifted():
    with tempfile.TemporaryDirectory(prefix="fresh-binds-") as tmp:
        root = os.path.join(tmp, "root")
        clones, other = os.path.join(tmp, "clones"), os.path.join(tmp, "other")
        os.makedirs(clones)
        os.makedirs(other)
        try:
            bind(other, root + clones)                # the path shows a different folder
            r = subprocess.run(["bash", SCRIPT, clones, root], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            assert not mounted(root + clones)
        finally:
            while mounted(root + clones):
                subprocess.run(["umount", "-l", root + clones], capture_output=True)

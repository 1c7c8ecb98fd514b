# bubblewrap, for rath-backend's `isolated` sandbox (its tests skip when bwrap is missing).
command -v bwrap >/dev/null || apt-get install -y -qq bubblewrap >/dev/null

# Headless Chromium for the HTML viewer test (crates/rath-cli/tests/viewer_chromium.rs).
if ! command -v chromium >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq chromium >/dev/null ||
        { apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null; }
fi
RATH_CHROMIUM="$(command -v chromium)"
export RATH_CHROMIUM

# rath-persist: a venv with Python OpenRath 2.0.0, so tests/python_loader.rs can check that
# the Python loader accepts the stores we write; with its postgres extra (psycopg 3 +
# psycopg-pool), so `cargo xtask bench --runtime` can run the LocalRuntime peer on its
# PostgreSQL run store too. Idempotent; quiet; fast when present.
RATH_VENV_OPENRATH="${RATH_VENV_OPENRATH:-/opt/rath-venv-openrath}"
if ! "$RATH_VENV_OPENRATH/bin/python" -c 'import importlib.metadata as m, sys, psycopg, psycopg_pool; sys.exit(m.version("openrath") != "2.0.0")' 2>/dev/null; then
    python3 -m venv "$RATH_VENV_OPENRATH"
    "$RATH_VENV_OPENRATH/bin/pip" install --quiet --disable-pip-version-check 'openrath[postgres]==2.0.0'
fi
export RATH_OPENRATH_PYTHON="$RATH_VENV_OPENRATH/bin/python"

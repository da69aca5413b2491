#!/usr/bin/env bash
# Run the three refund agents, each on its library's own test model (no key, no network
# beyond the package index): tether from the project's environment, the other two from a
# throwaway environment with the versions in requirements.txt.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
echo "== tether"
uv run python "$here/tether_refund.py"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
env_dir="$tmp/env"
uv venv -q "$env_dir"
VIRTUAL_ENV="$env_dir" uv pip install -q -r "$here/requirements.txt"
echo "== pydantic-ai"
"$env_dir/bin/python" "$here/pydantic_ai_refund.py"
echo "== OpenAI Agents SDK"
OPENAI_AGENTS_DISABLE_TRACING=1 "$env_dir/bin/python" "$here/openai_agents_refund.py"

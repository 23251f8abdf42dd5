#!/usr/bin/env bash
# Query expansion with the local chat model, measured as a pipeline on the long pages: a
# scratch library gets the query tool in expand_with_model.py (one ctx.llm call writing a
# keyword query, a rephrased question and a hypothetical passage) and two pipelines over the
# same retrieval tool, `plain` and `expand`; `quarry eval --pipeline` scores both per split.
# A benchmark, not a test (about 6 s a question on 2 cores with the 0.5B model).
#
# usage: bench/expansion/run.sh [MODEL]   (default: qwen2.5-coder-0.5b-instruct-q4_k_m)
#   QUARRY  the quarry binary (default: target/release/quarry)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MODEL=${1:-qwen2.5-coder-0.5b-instruct-q4_k_m}
QUARRY=${QUARRY:-$ROOT/target/release/quarry}
WORK=$(mktemp -d /tmp/quarry-expansion.XXXX)
q() { "$QUARRY" --data-dir "$WORK/user" "$@"; }
q tools create expand_with_model --type query --name "Query expansion with the local model" \
  --description "Adds keyword, rephrased and hypothetical-passage variants written by the tool's chat model." \
  --source "$HERE/expand_with_model.py" --model "$MODEL" --timeout-ms 30000 >/dev/null
q pipeline create expand --query-tools expand_with_model --retrieval retrieve-hybrid-coverage \
  --max-query-variants 4 >/dev/null
q pipeline create plain --retrieval retrieve-hybrid-coverage >/dev/null
q pipeline save expand >/dev/null
q pipeline save plain >/dev/null
q eval --beir "$ROOT/tests/data/rust-docs-qa" --keep "$WORK/set" --mode hybrid \
  --pipeline plain --pipeline expand

#!/usr/bin/env bash
# Smoke tests run after every deploy.
# Usage: ./scripts/api-smoke-test.sh [staging|production]
set -euo pipefail

ENV="${1:-staging}"
BASE="https://api.${ENV}.northwind.io"
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== health"
curl -fsS "$BASE/healthz" | jq -e '.status == "ok"' >/dev/null || fail health

echo "== latest release exists on GitHub"
curl -fsSL \
  -H 'Accept: application/vnd.github+json' \
  -H 'Authorization: Bearer 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' \
  -H 'X-GitHub-Api-Version: 2022-11-28' \
  https://api.github.com/repos/northwind/orders-api/releases/latest | jq -r .tag_name

echo "== admin metrics (basic auth)"
curl -fsS -u 'smoke:PZY7BBQkC2_vjtiBeh' "$BASE/admin/metrics" >/dev/null || fail admin-metrics
curl -fsS -H "Authorization: Basic YWRtaW46d1dCbzdTTWc5bWpNfjhOZ2p2RkFxblNHczRtTQ==" https://grafana.northwind.io/api/health

echo "== model providers"
curl -fsS https://api.anthropic.com/v1/messages \
  -H 'x-api-key: sk-ant-api03-F7-EHb06ww2n7G3mFw1SFesWq6-SKHsCPEt9TTJTYaAVyCcqN7HK62sX7yQxn89dcagCYI9vOQ6v5gWSqN7BrnMs9-emqAA' \
  -H 'anthropic-version: 2023-06-01' \
  -H 'content-type: application/json' \
  -d '{"model":"claude-3-5-haiku-latest","max_tokens":16,"messages":[{"role":"user","content":"ping"}]}' | jq -r '.content[0].text'
curl -fsS https://api.openai.com/v1/models -H "Authorization: Bearer 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" | jq '.data | length'

echo "== metrics pipeline"
NOW=$(date +%s)
curl -fsS -X POST "https://api.datadoghq.eu/api/v2/series" \
  -H "Accept: application/json" \
  -H "Content-Type: application/json" \
  -H "DD-API-KEY: 372d3080bccfca251dbe3cb8b1a129d3" \
  -d @- <<EOF
{"series":[{"metric":"smoke.run","type":0,"points":[{"timestamp":${NOW},"value":1}],"tags":["env:${ENV}"]}]}
EOF
curl -fsS -X POST https://api.eu.newrelic.com/graphql \
  -H 'Content-Type: application/json' \
  -H 'API-Key: NRAK-14Z87LQDJDNYA36JT11L2HWVDDJ' \
  -d '{"query":"{ actor { user { name } } }"}' >/dev/null

echo "== sms"
curl -fsS -X POST "https://api.twilio.com/2010-04-01/Accounts/AC43a996ad4934dad7b9471c851733c978/Messages.json" \
  --data-urlencode "To=+31348591576" \
  --data-urlencode "From=+442051850731" \
  --data-urlencode "Body=smoke test ${ENV}" \
  -u "AC43a996ad4934dad7b9471c851733c978:386f0eff5d70dd09ae244d68f45a68cc" >/dev/null

echo "== notify"
curl -fsS -H "Content-Type: application/json" -X POST \
  -d '{"content":"smoke tests passed on '"$ENV"'"}' \
  https://discord.com/api/webhooks/1484556911326759659/mzmOIIRLsM3B8pURN_f7htB7vRx9TyDEpOdJOkT7UfHajh2KlF4hoefxaW6okHtlAPu7
curl -fsS -X POST -H 'Content-type: application/json' \
  --data '{"text":"smoke tests passed on '"$ENV"'"}' \
  https://hooks.slack.com/services/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
echo "all smoke tests passed"

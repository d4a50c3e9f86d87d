#!/usr/bin/env bash
# `make demo`: a real campaign, end to end, on the embedded defaults (SQLite + a local sink).
set -euo pipefail
cd "$(dirname "$0")/.."
workdir=.demo
rm -rf "$workdir" && mkdir -p "$workdir"
export HERALD_DATABASE_URL="sqlite:///$workdir/herald.db"
# One-click unsubscribe links (a demo key; in production a long random secret of your own, and
# HERALD_PUBLIC_URL the https:// address where `herald serve` is reached).
export HERALD_SIGNING_KEYS="demo:demo-only-secret-0123456789"
export HERALD_PUBLIC_URL="http://127.0.0.1:8025"

echo "== starting a local SMTP sink (messages land in $workdir/maildir)"
herald sink --maildir "$workdir/maildir" --port 0 >"$workdir/sink.log" 2>"$workdir/sink.err" &
sink_pid=$!
trap 'kill $sink_pid 2>/dev/null || true' EXIT
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/^sink listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$workdir/sink.err")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "the sink did not start:"; cat "$workdir/sink.err"; exit 1; }
export HERALD_SMTP_URL="smtp://127.0.0.1:$port"

echo "== herald validate examples/welcome.yaml"
herald validate examples/welcome.yaml
echo "== herald launch examples/welcome.yaml"
herald launch examples/welcome.yaml
echo "== herald launch examples/welcome.yaml   (again: idempotent)"
herald launch examples/welcome.yaml
echo "== herald worker --concurrency 20 --until-idle"
herald worker --concurrency 20 --until-idle
echo "== herald schedule examples/digest.yaml -n 3   (a recurring campaign: when it fires)"
herald schedule examples/digest.yaml -n 3
echo "== herald launch examples/digest.yaml   (registered; \`herald run\` or \`herald scheduler\` fires it)"
herald launch examples/digest.yaml
echo "== herald status"
herald status
echo "== herald suppress add carol@example.com   (never mailed again, in any spelling)"
herald suppress add carol@example.com --reason "asked by phone"
herald suppress list
echo "== what the sink received"
cat "$workdir/sink.log"
received=$(find "$workdir/maildir/new" -type f | wc -l)
echo "== $received message(s) in $workdir/maildir/new"
[ "$received" -eq 9 ] || { echo "expected 9 messages"; exit 1; }

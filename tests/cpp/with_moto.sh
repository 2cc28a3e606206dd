#!/usr/bin/env bash
# Runs a test binary against a fresh moto S3 server on 127.0.0.1 (a free port), with a bucket
# named "conformance" created. Exports S3STREAM_TEST_ENDPOINT and test credentials.
set -euo pipefail
PYTHON="${PYTHON:-python3}"
port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
"$PYTHON" -m moto.server -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
moto=$!
trap 'kill $moto 2>/dev/null || true; rm -f "$log"' EXIT
export S3STREAM_TEST_ENDPOINT="http://127.0.0.1:$port"
for _ in $(seq 100); do
  curl -sf -o /dev/null "$S3STREAM_TEST_ENDPOINT/moto-api/" && break
  sleep 0.1
done
curl -sf -o /dev/null -X PUT "$S3STREAM_TEST_ENDPOINT/conformance" || { cat "$log"; exit 1; }
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
unset AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_SESSION_TOKEN
"$@"

#!/bin/sh
# Serve a one-page static site on the given port from the unit's work dir.
# Arguments arrive as environment variables: port, title.
set -eu
site="${FORNACE_WORK_DIR:-$PWD}/site"
mkdir -p "$site"
printf '<!doctype html><title>%s</title><h1>%s</h1>\n' "$title" "$title" > "$site/index.html"
nohup python3 -m http.server "$port" --directory "$site" >/dev/null 2>&1 &
echo "serving $site on port $port"

#!/bin/sh
# The image's entry point (behind tini): runs the role its command names, with the command the
# Procfile gives that role, so the Procfile stays the one place that says how each role starts.
#   web | worker | scheduler   the service's processes
#   migrate                    pending migrations (the Procfile's `release`), then exits
# Anything else runs as given, e.g. `node dist/scripts/mint-jwt.js`.
set -eu
role=${1:-web}
case "$role" in
  migrate) entry=release ;;
  web | worker | scheduler | release) entry=$role ;;
  *) exec "$@" ;;
esac
shift || true
line=$(sed -n "s/^$entry: //p" /app/Procfile)
[ -n "$line" ] || { echo "role $role: no '$entry' line in the Procfile" >&2; exit 64; }
# shellcheck disable=SC2086 # the Procfile's line is a command and its arguments, split as a shell would
exec $line "$@"

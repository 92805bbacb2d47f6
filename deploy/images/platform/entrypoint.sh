#!/bin/sh
# The platform image's entrypoint: every role runs the command Compose gives it.
# `migrate` is the one-shot service that applies migrations before the others start.
set -eu
case "${1:-}" in
    migrate) exec python manage.py migrate --noinput ;;
esac
exec "$@"

#!/bin/sh
# Makes a local base image from Debian's own packages, for machines that cannot pull the public
# node:20-bookworm-slim (an offline CI, an air-gapped registry). Debian trixie's nodejs is Node 20,
# the version the service is built and tested on. The image carries what the Containerfile's two
# stages expect of their base: node, npm, CA certificates and tini.
#
#   scripts/container/build-base-image.sh [image]     (default: localhost/chat-api-base:trixie)
#
# Needs mmdebstrap and podman (Debian packages) and Debian's mirror (DEBIAN_MIRROR). Does nothing when
# the image already exists, unless REBUILD=1.
set -eu

IMAGE=${1:-localhost/chat-api-base:trixie}
SUITE=${DEBIAN_SUITE:-trixie}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [ -z "${REBUILD:-}" ] && podman image exists "$IMAGE"; then
  echo "base image $IMAGE is already here (REBUILD=1 makes it again)"
  exit 0
fi

# Documentation, man pages and locales are dropped as the packages unpack: the image runs Node,
# nobody reads manuals in it.
mmdebstrap \
  --variant=apt \
  --include=nodejs,npm,ca-certificates,tini \
  --aptopt='Acquire::Retries "3"' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
  "$SUITE" - "$MIRROR" |
  podman import \
    --change 'CMD ["node"]' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - "$IMAGE"
echo "built base image $IMAGE from Debian $SUITE"

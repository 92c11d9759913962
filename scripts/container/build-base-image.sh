#!/bin/sh
# Makes the Containerfile's two base images from Debian's own packages, for machines that cannot
# pull the public node:20-bookworm-slim (an offline CI, an air-gapped registry). Debian trixie's
# nodejs is Node 20, the version the service is built and tested on.
#
#   scripts/container/build-base-image.sh [build image] [runtime image]
#     build image    node, npm, CA certificates and tini    (default localhost/chat-api-base:trixie)
#     runtime image  the same without npm and its libraries  (default localhost/chat-api-runtime:trixie)
#
# then: podman build --build-arg BASE_IMAGE=<build image> --build-arg RUNTIME_IMAGE=<runtime image> .
#
# Needs mmdebstrap and podman (Debian packages) and Debian's mirror (DEBIAN_MIRROR). An image that
# already exists is kept, unless REBUILD=1.
set -eu

BUILD_IMAGE=${1:-localhost/chat-api-base:trixie}
RUNTIME_IMAGE=${2:-localhost/chat-api-runtime:trixie}
SUITE=${DEBIAN_SUITE:-trixie}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# make IMAGE PACKAGES: a minimal Debian with PACKAGES, imported into podman as IMAGE. Documentation,
# man pages and locales are dropped as the packages unpack: nobody reads manuals in the image.
make() {
  if [ -z "${REBUILD:-}" ] && podman image exists "$1"; then
    echo "base image $1 is already here (REBUILD=1 makes it again)"
    return
  fi
  mmdebstrap \
    --variant=apt \
    --include="$2" \
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
      - "$1"
  echo "built base image $1 from Debian $SUITE"
}

make "$BUILD_IMAGE" nodejs,npm,ca-certificates,tini
make "$RUNTIME_IMAGE" nodejs,ca-certificates,tini

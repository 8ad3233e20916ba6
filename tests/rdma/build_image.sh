#!/bin/bash
# Builds (once, cached in $CACHE) a small Debian guest with Soft-RoCE tools, MariaDB
# and the Python packages the project needs (wheels fetched here with $PIP, installed
# in the guest without network). ~3 min from nothing; see shared/notes/soft-roce-vm.md.
# Output: $CACHE/vmlinuz, $CACHE/initrd.img, $CACHE/rootfs.img
set -euo pipefail
IMAGE_VERSION=5  # bump when the contents below change: a cached image of another version is rebuilt
CACHE=${CACHE:-/var/cache/rdma-bridge-vm}
PIP=${PIP:-python3 -m pip}
DEPS="mysql-replication==1.0.17 PyMySQL>=1.1,<2 click>=8.1 sqlalchemy>=2.0 hdrhistogram>=0.10 prometheus-client>=0.17"
[ -f "$CACHE/rootfs.img" ] && [ "$(cat "$CACHE/version" 2>/dev/null)" = "$IMAGE_VERSION" ] && exit 0
rm -f "$CACHE/rootfs.img"
mkdir -p "$CACHE"
ROOT=$(mktemp -d)
trap 'rm -rf "$ROOT"' EXIT
MIRROR=$( (grep -h -E '^\s*(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null || true) \
  | grep -o -E 'https?://[^ ]+' | head -1)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
debootstrap --variant=minbase \
  --include=initramfs-tools,kmod,iproute2,procps,rdma-core,ibverbs-utils,ibverbs-providers,python3,python3-pyverbs,python3-pytest,python3-crc32c,python3-pip,perftest,mariadb-server,mariadb-client,openssl \
  bookworm "$ROOT" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1
mkdir -p "$ROOT/wheels"
# shellcheck disable=SC2086
$PIP download -q -d "$ROOT/wheels" --python-version 3.11 --only-binary=:all: $DEPS
# shellcheck disable=SC2086
chroot "$ROOT" python3 -m pip install -q --no-index --find-links /wheels --break-system-packages $DEPS
rm -rf "$ROOT/wheels"
# The kernel: the newest of trixie-backports, unpacked over this bookworm root (its packages
# want trixie's tools), its modules indexed and its initramfs made by bookworm's tools. An
# rdma_rxe from Linux 6.16 on keeps a UDP socket per network namespace, which the routed
# test (tests/rdma/test_routed.py) needs; bookworm's 6.1 sends from the initial one only.
KERNEL=$(python3 "$(dirname "$0")/kernel_debs.py" "$MIRROR" trixie-backports "$ROOT/debs")
for deb in "$ROOT"/debs/*.deb; do dpkg-deb -x "$deb" "$ROOT"; done
rm -rf "$ROOT/debs"
for name in vmlinuz config; do
  [ -f "$ROOT/boot/$name-$KERNEL" ] || cp "$ROOT/usr/lib/modules/$KERNEL/$name" "$ROOT/boot/$name-$KERNEL"
done
chroot "$ROOT" depmod "$KERNEL"
chroot "$ROOT" mkinitramfs -o "/boot/initrd.img-$KERNEL" "$KERNEL" 2>>"$CACHE/debootstrap.log"
cp "$ROOT/boot/vmlinuz-$KERNEL" "$CACHE/vmlinuz"
cp "$ROOT/boot/initrd.img-$KERNEL" "$CACHE/initrd.img"
cat >"$ROOT/sbin/bridge-init" <<'INIT'
#!/bin/bash
# PID 1 in the guest: mount, bring up Soft-RoCE on a dummy netdev, run the command
# from the results share, write its exit code, power off.
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /project /results
mount -t 9p -o trans=virtio,version=9p2000.L,ro project /project
mount -t 9p -o trans=virtio,version=9p2000.L results /results
ulimit -l unlimited
modprobe rdma_rxe
ip link add dummy0 type dummy; ip addr add 10.11.0.1/24 dev dummy0; ip link set dummy0 up; ip link set lo up
rdma link add rxe0 type rxe netdev dummy0
cd /project
bash /results/cmd.sh >/results/output.txt 2>&1
echo $? >/results/exit_code
echo o >/proc/sysrq-trigger
INIT
chmod +x "$ROOT/sbin/bridge-init"
mkfs.ext4 -q -d "$ROOT" "$CACHE/rootfs.img" 2500M
echo "$IMAGE_VERSION" >"$CACHE/version"

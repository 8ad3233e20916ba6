#!/bin/bash
# Boots the Soft-RoCE guest (tests/rdma/build_image.sh) with this project shared
# read-only, runs "$@" inside (from the project root), prints its output and exits
# with its exit code. KVM when the host has ordinary KVM, else software emulation.
set -euo pipefail
CACHE=${CACHE:-/var/cache/rdma-bridge-vm}
PROJECT=$(cd "$(dirname "$0")/../.." && pwd)
RESULTS=$(mktemp -d)
trap 'rm -rf "$RESULTS"' EXIT
{ echo ': >/results/started; hostname rdma-guest; printf "127.0.0.1 localhost rdma-guest\n" >/etc/hosts'
  echo 'export PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/project'; echo "$*"; } >"$RESULTS/cmd.sh"
if grep -qE '^kvm_(intel|amd) ' /proc/modules 2>/dev/null && [ -w /dev/kvm ]; then
  ACCEL=(-enable-kvm -cpu host)
else
  ACCEL=(-accel tcg,thread=multi,tb-size=256 -cpu max)
fi
# Under software emulation the kernel now and then oopses while it patches its own code at
# boot (an int3 met on another vCPU, before init runs): a guest that never started the
# command is booted again, up to three times.
for attempt in 1 2 3; do
  timeout "${GUEST_TIMEOUT_S:-600}" qemu-system-x86_64 "${ACCEL[@]}" -m 2G -smp 2 -nographic -no-reboot -nic none \
    -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initrd.img" \
    -append "console=ttyS0 root=/dev/vda rw init=/sbin/bridge-init panic=-1 quiet" \
    -drive "file=$CACHE/rootfs.img,format=raw,if=virtio,snapshot=on" \
    -virtfs "local,path=$PROJECT,mount_tag=project,security_model=none,readonly=on" \
    -virtfs "local,path=$RESULTS,mount_tag=results,security_model=none" >"$RESULTS/console.txt" 2>&1 || true
  [ -f "$RESULTS/started" ] && break
  echo "rdma guest: boot $attempt failed before the command started; console:" >&2
  grep -m3 -E "Oops|panic|BUG" "$RESULTS/console.txt" >&2 || tail -5 "$RESULTS/console.txt" >&2
done
if [ ! -f "$RESULTS/exit_code" ]; then
  echo "rdma guest: no result; console:" >&2
  tail -40 "$RESULTS/console.txt" >&2
  exit 2
fi
cat "$RESULTS/output.txt"
exit "$(cat "$RESULTS/exit_code")"

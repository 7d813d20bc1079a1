#!/usr/bin/env bash
# Runs a command inside a KVM guest booted with a Debian kernel that has what this
# machine's kernel lacks (kTLS: CONFIG_TLS=m), so kernel features the broker relies on
# can be built and tested where the host cannot load them.
#
#   tools/kernel-vm/run.sh [--cpus N] [--mem MIB] -- COMMAND [ARGS...]
#
# The guest sees the host's whole filesystem (virtio-9p, read-write) and runs COMMAND
# with bash in it, as root, in the current directory, with loopback up, the kernel's
# tls, AES-GCM and ChaCha20-Poly1305 modules loaded, and a fresh ext4 scratch disk at
# $KERNEL_VM_SCRATCH (O_DIRECT works there, as the broker needs; 9p would not do).
# Its exit status is this script's. Output goes to this terminal (the guest's serial
# console). Without usable KVM (no vmx/svm here) the guest runs under qemu's emulation:
# it boots in about 5 s, and CPU-bound work is several times slower than on the host, so
# it is for correctness, not for figures. First use installs qemu, busybox-static and kmod through apt and downloads
# the kernel package into .cache/kernel-vm (about 70 MB); later runs boot in seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$PWD"
cpus=2
mem=2048
while [[ $# -gt 0 ]]; do
    case "$1" in
        --cpus) cpus="$2"; shift 2 ;;
        --mem) mem="$2"; shift 2 ;;
        --) shift; break ;;
        *) break ;;
    esac
done
[[ $# -gt 0 ]] || { echo "usage: $0 [--cpus N] [--mem MIB] -- COMMAND [ARGS...]" >&2; exit 2; }

cache="$repo/.cache/kernel-vm"
mkdir -p "$cache"
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[[ -x /bin/busybox ]] && /bin/busybox --list | grep -qx insmod || need+=(busybox-static)
command -v depmod >/dev/null || need+=(kmod)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
if [[ ${#need[@]} -gt 0 ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The kernel: Debian's current one for this release, unpacked once.
if [[ ! -f "$cache/vmlinuz" ]]; then
    kernel_package() {
        apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'
    }
    pkg=$(kernel_package)
    # A fresh machine may not have the package lists yet.
    [[ -n "$pkg" ]] || { apt-get update -qq >/dev/null; pkg=$(kernel_package); }
    (cd "$cache" && apt-get download -qq "$pkg" 2>/dev/null) \
        || { apt-get update -qq >/dev/null; (cd "$cache" && apt-get download -qq "$pkg"); }
    rm -rf "$cache/root" && dpkg-deb -x "$cache/$pkg"_*.deb "$cache/root"
    version=$(ls "$cache/root/lib/modules")
    depmod -b "$cache/root" "$version"
    cp "$cache/root/boot/vmlinuz-$version" "$cache/vmlinuz"
    echo "$version" > "$cache/version"
fi
version=$(cat "$cache/version")

# The initramfs: busybox, the modules (in dependency order) and /init.
if [[ ! -f "$cache/initrd.gz" || "$0" -nt "$cache/initrd.gz" ]]; then
    ird=$(mktemp -d)
    mkdir -p "$ird/bin" "$ird/modules"
    cp /bin/busybox "$ird/bin/busybox"
    : > "$ird/modules.order"
    for m in virtio_pci virtio_blk ext4 9p 9pnet_virtio tls gcm aesni_intel ghash_clmulni_intel \
             chacha_generic chacha_x86_64 poly1305_generic poly1305_x86_64 chacha20poly1305; do
        modprobe -d "$cache/root" -S "$version" --show-depends "$m" 2>/dev/null | awk '$1 == "insmod" {print $2}'
    done | awk '!seen[$0]++' | while read -r ko; do
        cp "$ko" "$ird/modules/"
        basename "$ko" >> "$ird/modules.order"
    done
    cat > "$ird/init" <<'INIT'
#!/bin/busybox sh
bb=/bin/busybox
$bb mkdir -p /proc /sys /dev /mnt
$bb mount -t proc proc /proc
$bb mount -t sysfs sys /sys
$bb mount -t devtmpfs dev /dev
for m in $($bb cat /modules.order); do $bb insmod /modules/$m 2>/dev/null; done
$bb ip link set lo up
$bb mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 hostroot /mnt
for d in proc sys dev; do $bb mount --bind /$d /mnt/$d; done
job=$($bb sed -n 's/.*kernel_vm_job=\([^ ]*\).*/\1/p' /proc/cmdline)
scratch=$($bb cat /mnt$job/scratch)
$bb mkdir -p /mnt$scratch
$bb mount -t ext4 /dev/vda /mnt$scratch
$bb chroot /mnt /bin/bash "$job/job.sh"
echo $? > /mnt$job/rc
$bb umount /mnt$scratch
$bb sync
$bb poweroff -f
INIT
    chmod +x "$ird/init"
    (cd "$ird" && find . | /bin/busybox cpio -o -H newc 2>/dev/null | gzip -1) > "$cache/initrd.gz"
    rm -rf "$ird"
fi

job=$(mktemp -d "$cache/job.XXXXXX")
trap 'rm -rf "$job"' EXIT
scratch="/tmp/kernel-vm-scratch"
echo "$scratch" > "$job/scratch"
{
    echo "cd $(printf %q "$PWD")"
    echo "export KERNEL_VM_SCRATCH=$scratch PATH=$(printf %q "$PATH") HOME=/root"
    printf '%q ' "$@"
    echo
} > "$job/job.sh"
truncate -s 4G "$job/scratch.img"
mkfs.ext4 -q -F "$job/scratch.img"
# KVM where the CPU offers virtualization to this machine; otherwise qemu's own
# emulation (TCG), slower but exact: a Firecracker guest has /dev/kvm without vmx/svm,
# and nested KVM there stops the guest kernel before its first line.
accel=(-cpu max)
if [[ -w /dev/kvm && -z "${KERNEL_VM_TCG:-}" ]] && grep -qw -e vmx -e svm /proc/cpuinfo; then
    accel=(-enable-kvm -cpu host)
fi
qemu-system-x86_64 "${accel[@]}" -smp "$cpus" -m "$mem" -nographic -no-reboot \
    -kernel "$cache/vmlinuz" -initrd "$cache/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1 kernel_vm_job=$job" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,multidevs=remap \
    -drive file="$job/scratch.img",if=virtio,format=raw,cache=unsafe
[[ -f "$job/rc" ]] || { echo "kernel-vm: the guest ended without the command's status" >&2; exit 125; }
exit "$(cat "$job/rc")"

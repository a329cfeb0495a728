#!/bin/sh
# Installs what the VM tests need when it is missing: qemu (TCG),
# cpio (initramfs), iproute2, iputils-ping and iperf3 (copied into the VM)
# and apt's lists (to download the guest kernel and
# busybox). Idempotent; needs root.
set -eu
need=""
command -v qemu-system-x86_64 >/dev/null 2>&1 || need="$need qemu-system-x86"
command -v cpio >/dev/null 2>&1 || need="$need cpio"
command -v gzip >/dev/null 2>&1 || need="$need gzip"
command -v dpkg-deb >/dev/null 2>&1 || need="$need dpkg"
# The lab VM copies iproute2's ip (netns) and iputils' ping from the host.
[ -x /usr/bin/ip ] || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || need="$need iproute2"
dpkg -s iputils-ping >/dev/null 2>&1 || need="$need iputils-ping"
# felix's TestEncapThroughputInVM runs the host's iperf3 in the VM.
command -v iperf3 >/dev/null 2>&1 || need="$need iperf3"
if [ -z "$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-cloud-amd64' 2>/dev/null | head -n1)" ]; then
	apt-get update -qq
fi
if [ -n "$need" ]; then
	[ -n "$(find /var/lib/apt/lists -name '*Packages*' 2>/dev/null | head -n1)" ] || apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need
fi

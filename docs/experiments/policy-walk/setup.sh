#!/bin/bash
# setup.sh MODE: none, plain, guarded or union. Builds netns ga -> gr -> gb
# (10.77.0.1 -> router -> 10.77.1.2) and loads into gr a forward chain of
# the shape felix writes for 200 policies selecting the destination, each
# with one rule "meta l4proto udp ip saddr @sN accept" over 1,000 addresses
# (none of them the sender): plain = jump to each policy chain under the
# pass-bit test (as felix does today); guarded = the jump also needs
# ip saddr @sN; union = one set of all 200,000 addresses in front of the
# plain run; none = no policy. Then, from the repository root:
#   ip netns exec ga go run docs/experiments/policy-walk/send.go 10.77.1.2 20000 20100
# Cleanup: ip netns del ga; ip netns del gr; ip netns del gb
set -e
for n in ga gr gb; do ip netns del $n 2>/dev/null || true; ip netns add $n; done
ip link add ga0 netns ga type veth peer name ra netns gr
ip link add gb0 netns gb type veth peer name rb netns gr
ip -n ga addr add 10.77.0.1/24 dev ga0; ip -n ga link set ga0 up; ip -n ga link set lo up
ip -n gb addr add 10.77.1.2/24 dev gb0; ip -n gb link set gb0 up; ip -n gb link set lo up
ip -n gr addr add 10.77.0.254/24 dev ra; ip -n gr addr add 10.77.1.254/24 dev rb
ip -n gr link set ra up; ip -n gr link set rb up
ip netns exec gr sysctl -qw net.ipv4.ip_forward=1
ip -n ga route add default via 10.77.0.254
ip -n gb route add default via 10.77.1.254
# neighbour entries resolved up front
ip netns exec ga ping -c1 -W1 10.77.1.2 >/dev/null
mode=$1
{
echo "table ip t {"
if [ "$mode" != none ]; then
for i in $(seq 0 199); do
  echo " set s$i { type ipv4_addr; elements = {"
  for j in $(seq 0 999); do printf "172.%d.%d.%d," $((16 + i/64)) $(( (i%64)*4 + j/250 )) $((j%250+1)); done | sed 's/,$//'
  echo " }; }"
  echo " chain pol$i { meta l4proto udp ip saddr @s$i accept; }"
done
fi
if [ "$mode" = union ]; then
  echo " set u { type ipv4_addr; elements = {"
  for i in $(seq 0 199); do for j in $(seq 0 999); do printf "172.%d.%d.%d," $((16 + i/64)) $(( (i%64)*4 + j/250 )) $((j%250+1)); done; done | sed 's/,$//'
  echo " }; }"
  echo " chain run {"
  for i in $(seq 0 199); do echo "  meta mark & 0x00200000 == 0 jump pol$i"; done
  echo " }"
fi
echo " chain tob {"
echo "  ct state established,related accept"
if [ "$mode" = plain ]; then
  for i in $(seq 0 199); do echo "  meta mark & 0x00200000 == 0 jump pol$i"; done
elif [ "$mode" = union ]; then
  echo "  ip saddr @u jump run"
elif [ "$mode" = guarded ]; then
  for i in $(seq 0 199); do echo "  meta mark & 0x00200000 == 0 ip saddr @s$i jump pol$i"; done
fi
echo "  ip saddr 10.77.0.1 accept"
echo "  drop"
echo " }"
echo " chain fw { type filter hook forward priority 0; policy accept; oifname \"rb\" jump tob; }"
echo "}"
} > /tmp/policy-walk-$mode.nft
ip netns exec gr nft -f /tmp/policy-walk-$mode.nft

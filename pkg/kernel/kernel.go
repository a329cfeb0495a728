// Package kernel is the contract between felix and the CNI plugin: the
// kernel state both program on a node, defined once so the two binaries
// cannot drift apart. It owns the route protocol that marks routed's
// routes, the host-side device prefix and the device-name rule, the
// sysctls of a pod's host-side device, and the rule that decides whether
// an IP pool serves a node.
//
// It imports nothing of routed but the selector language, so the CNI
// plugin stays small and pkg/api can validate against the same rule.
package kernel

// RouteProtocol is the route protocol number on every route routed
// programs (felix and the CNI plugin alike), and the only one either
// ever deletes or replaces: foreign routes are never touched. 82 (0x52,
// "R") is not assigned in iproute2's rt_protos and not used by the
// common routing daemons (zebra/FRR 11 and 186-196, BIRD 12, keepalived
// 18, babel 42) nor by Calico (80).
//
// `ip route show proto 82` lists routed's routes.
const RouteProtocol = 82

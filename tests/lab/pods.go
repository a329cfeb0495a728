package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
)

// AddPod creates a pod namespace and runs CNI ADD for it on node through
// cnitool, the real CNI runtime client.
func (l *Lab) AddPod(ctx context.Context, node, name string) (Pod, error) {
	return l.AddPodIn(ctx, node, name, "")
}

// AddPodIn is AddPod for a pod of Kubernetes namespace namespace ("":
// default). Pod names are unique in the lab, whatever their namespace.
func (l *Lab) AddPodIn(ctx context.Context, node, name, namespace string) (Pod, error) {
	if _, err := l.node(node); err != nil {
		return Pod{}, err
	}
	ns := fmt.Sprintf("%s-p-%s", l.Topo.Prefix, name)
	if err := ip(ctx, "", "netns", "add", ns); err != nil {
		return Pod{}, err
	}
	p := Pod{Name: name, Node: node, NS: ns, Namespace: namespace}
	out, err := l.cnitool(ctx, p, "add")
	if err != nil {
		_ = ip(ctx, "", "netns", "del", ns)
		return Pod{}, err
	}
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.IPs) == 0 {
		_, _ = l.cnitool(ctx, p, "del")
		_ = ip(ctx, "", "netns", "del", ns)
		return Pod{}, fmt.Errorf("cnitool add %s: no IP in result %q (%v)", name, out, err)
	}
	for _, ipc := range res.IPs {
		a := strings.Split(ipc.Address, "/")[0]
		if strings.Contains(a, ":") {
			p.IP6 = a
		} else {
			p.IP = a
		}
	}
	if l.Topo.DualStack && (p.IP == "" || p.IP6 == "") {
		_, _ = l.cnitool(ctx, p, "del")
		_ = ip(ctx, "", "netns", "del", ns)
		return Pod{}, fmt.Errorf("cnitool add %s: want an IPv4 and an IPv6 address, got %q", name, out)
	}
	l.podsMu.Lock()
	l.pods = append(l.pods, p)
	l.podsMu.Unlock()
	return p, nil
}

// DelPod runs CNI DEL for a pod and removes its namespace.
func (l *Lab) DelPod(ctx context.Context, p Pod) error {
	l.podsMu.Lock()
	for i, q := range l.pods {
		if q.NS == p.NS {
			l.pods = append(l.pods[:i], l.pods[i+1:]...)
			break
		}
	}
	l.podsMu.Unlock()
	return l.delPod(ctx, p)
}

func (l *Lab) delPod(ctx context.Context, p Pod) error {
	_, err := l.cnitool(ctx, p, "del")
	_ = ip(ctx, "", "netns", "del", p.NS)
	return err
}

// Pods returns the pods the lab created.
func (l *Lab) Pods() []Pod {
	l.podsMu.Lock()
	defer l.podsMu.Unlock()
	return append([]Pod(nil), l.pods...)
}

func (l *Lab) cnitool(ctx context.Context, p Pod, verb string) (string, error) {
	namespace := p.Namespace
	if namespace == "" {
		namespace = "default"
	}
	args := []string{"env",
		"NETCONFPATH=" + filepath.Join(l.Dir, p.Node, "net.d"),
		"CNI_PATH=" + filepath.Dir(l.Bins.RoutedCNI),
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=" + namespace + ";K8S_POD_NAME=" + p.Name,
		l.Bins.Cnitool, verb, "k8s-pod-network", "/var/run/netns/" + p.NS}
	return nsRun(ctx, p.Node, args...)
}

// Ping sends count pings from one pod to another's IP and reports the
// packets received.
func (l *Lab) Ping(ctx context.Context, from Pod, to string, count int) (int, error) {
	args := []string{"ping", "-n", "-q", "-c", fmt.Sprint(count), "-i", "0.2", "-W", "1", to}
	if strings.Contains(to, ":") {
		args = append(args[:1], append([]string{"-6"}, args[1:]...)...)
	}
	out, err := nsRun(ctx, from.NS, args...)
	var sent, recv int
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "packets transmitted") {
			fmt.Sscanf(line, "%d packets transmitted, %d received", &sent, &recv)
		}
	}
	if sent == 0 {
		return 0, fmt.Errorf("ping %s from %s: %v: %s", to, from.Name, err, out)
	}
	return recv, nil
}

// NodeRoutes returns `ip route` of a node's namespace (and `ip -6
// route` in a dual-stack lab).
func (l *Lab) NodeRoutes(ctx context.Context, node string) (string, error) {
	out, err := nsRun(ctx, node, "ip", "-4", "route", "show")
	if err != nil || !l.Topo.DualStack {
		return out, err
	}
	out6, err := nsRun(ctx, node, "ip", "-6", "route", "show")
	return out + out6, err
}

package demo

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/routed-net/routed/tests/k8s/cluster"
)

// scaleUpPods is how many pods the scale-up starts while routed restarts.
const scaleUpPods = 60

// scaleUpThroughRestart starts scaleUpPods pods and restarts routed on
// every node (kubectl rollout restart) while the kubelets are creating
// them: CNI ADDs meet routed's CNI socket, a routed going away and the
// plugin's own path. Every pod must come up with no failed sandbox, and
// once they are deleted IPAM must be clean.
func scaleUpThroughRestart(ctx context.Context, c *cluster.Cluster, bin string, logf func(string, ...any)) error {
	kubectl := func(args ...string) (string, error) { return c.Kubectl(ctx, args...) }
	routedctl := func(args ...string) (string, error) { return Routedctl(ctx, c, bin, args...) }
	// failed lists the FailedCreatePodSandBox events, one line each:
	// the object's name, then the kubelet's message (why the sandbox
	// failed), so a failure says what went wrong.
	failed := func() ([]string, error) {
		out, err := kubectl("get", "events", "-A", "--field-selector", "reason=FailedCreatePodSandBox",
			"-o", `jsonpath={range .items[*]}{.metadata.name}{" x"}{.count}{" "}{.lastTimestamp}{": "}{.message}{"\n"}{end}`)
		if err != nil {
			return nil, err
		}
		return strings.Split(strings.TrimSpace(out), "\n"), nil
	}
	before, err := failed()
	if err != nil {
		return err
	}
	yaml := strings.Replace(strings.Replace(deploymentYAML, "name: web", "name: burst", 1), "replicas: 10", "replicas: "+strconv.Itoa(scaleUpPods), 1)
	yaml = strings.ReplaceAll(yaml, "app: web", "app: burst")
	start := time.Now()
	if err := applyYAML(ctx, c, yaml); err != nil {
		return err
	}
	// Restart routed once the kubelets are busy: the first pods are
	// on their nodes, so their sandboxes' CNI ADDs are starting. (Waiting
	// for pods Running came too late: a quick machine had done all 60
	// ADDs by the time 10 pods showed Running.)
	if err := cluster.WaitFor(ctx, 120*time.Second, "the first pods of the scale-up scheduled", func() error {
		out, err := kubectl("get", "pods", "-l", "app=burst", "-o", "jsonpath={.items[*].spec.nodeName}")
		if err == nil && len(strings.Fields(out)) < 2 {
			err = fmt.Errorf("%d scheduled", len(strings.Fields(out)))
		}
		return err
	}); err != nil {
		return err
	}
	ips, _ := podIPs(ctx, c, "app=burst")
	logf("%d of %d pods Running after %s: restarting routed on every node", len(ips), scaleUpPods, time.Since(start).Round(time.Millisecond))
	restarted := time.Now()
	if _, err := kubectl("-n", "kube-system", "rollout", "restart", "ds/routed-node"); err != nil {
		return err
	}
	if out, err := kubectl("rollout", "status", "deployment/burst", "--timeout=300s"); err != nil {
		logf("%s", describe(ctx, c))
		return fmt.Errorf("scale-up through a routed restart: %w\n%s", err, out)
	}
	if _, err := kubectl("-n", "kube-system", "rollout", "status", "ds/routed-node", "--timeout=120s"); err != nil {
		return err
	}
	ips, err = podIPs(ctx, c, "app=burst")
	if err != nil {
		return err
	}
	seen := map[string]string{}
	for pod, ip := range ips {
		if other, dup := seen[ip]; dup {
			return fmt.Errorf("pods %s and %s both have %s", other, pod, ip)
		}
		seen[ip] = pod
	}
	after, err := failed()
	if err != nil {
		return err
	}
	fresh := newLines(before, after)
	var away []string // each node's first line, for the error's first line
	for _, n := range c.Nodes {
		w := waitedForRouted(n.HostPath("/var/log/routed/cni.log"))
		logf("  %s: %s", n.Name, w)
		first, _, _ := strings.Cut(w, "\n")
		away = append(away, n.Name+": "+first)
	}
	if len(ips) != scaleUpPods || len(fresh) > 0 {
		return fmt.Errorf("scale-up through a routed restart: %d of %d pods Running, %d FailedCreatePodSandBox events (restart began %s, all Running after %s; %s):\n%s",
			len(ips), scaleUpPods, len(fresh), restarted.UTC().Format(time.RFC3339), time.Since(start).Round(time.Second),
			strings.Join(away, "; "), strings.Join(fresh, "\n"))
	}
	logf("%d pods Running, each its own address, in %s; 0 FailedCreatePodSandBox events", len(ips), time.Since(start).Round(time.Millisecond))
	if _, err := kubectl("delete", "deployment", "burst", "--wait=true"); err != nil {
		return err
	}
	// The Deployment goes at once; its pods are deleted after it, each
	// with a CNI DEL: wait for them before asking IPAM.
	if out, err := kubectl("wait", "--for=delete", "pod", "-l", "app=burst", "--timeout=300s"); err != nil {
		return fmt.Errorf("the scale-up's pods not deleted: %w\n%s", err, out)
	}
	err = cluster.WaitFor(ctx, 120*time.Second, "the scale-up's addresses released, ipam check clean", func() error {
		out, err := routedctl("ipam", "check")
		if err != nil {
			return fmt.Errorf("%w\n%s", err, out)
		}
		if !strings.Contains(out, "No IPAM problems found") {
			return fmt.Errorf("%s", out)
		}
		for ip := range seen {
			if o, _ := routedctl("ipam", "show", "--ip", ip); strings.Contains(o, "k8s-pod-network") {
				return fmt.Errorf("%s still allocated", ip)
			}
		}
		logf("%s", strings.TrimSpace(out))
		return nil
	})
	if err != nil {
		for ip := range seen {
			if o, _ := routedctl("ipam", "show", "--ip", ip); strings.Contains(o, "k8s-pod-network") {
				logf("%s (was pod %s):\n%s", ip, seen[ip], o)
			}
		}
		pods, _ := kubectl("get", "pods", "-A", "-o", "wide")
		logf("%s", pods)
	}
	return err
}

// newLines returns the lines of after that are not in before (events
// that were there before the scale-up are not its failures).
func newLines(before, after []string) []string {
	old := map[string]bool{}
	for _, l := range before {
		old[l] = true
	}
	var out []string
	for _, l := range after {
		if l != "" && !old[l] {
			out = append(out, l)
		}
	}
	return out
}

var routedAbsent = regexp.MustCompile(`routedAbsent=([0-9.]+[a-zµ]+)`)

// waitedForRouted reads a node's CNI log and says how many ADDs waited
// for routed to come back (the restart) and for how long at most, and
// which ADDs failed, so the scale-up's log shows how long routed was
// away from the node.
func waitedForRouted(logFile string) string {
	raw, err := os.ReadFile(logFile)
	if err != nil {
		return err.Error()
	}
	var n, direct int
	var longest time.Duration
	var failed []string
	for _, l := range strings.Split(string(raw), "\n") {
		if m := routedAbsent.FindStringSubmatch(l); m != nil {
			n++
			if d, err := time.ParseDuration(m[1]); err == nil && d > longest {
				longest = d
			}
		}
		if strings.Contains(l, "doing the ADD against etcd directly") {
			direct++
		}
		if strings.Contains(l, "level=error") && strings.Contains(l, "verb=ADD") {
			failed = append(failed, l)
		}
	}
	out := fmt.Sprintf("%d ADDs found routed away and did the work themselves, %d waited for routed to come back (the longest %s); %d ADDs failed", direct, n, longest, len(failed))
	if len(failed) > 0 {
		out += ":\n" + strings.Join(failed, "\n")
	}
	return out
}

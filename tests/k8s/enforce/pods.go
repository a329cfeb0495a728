package enforce

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/routed-net/routed/tests/k8s/cluster"
)

// Env is a cluster with routed installed, and a client for it.
type Env struct {
	C    *cluster.Cluster
	K    kubernetes.Interface
	Bin  string // routedctl's directory
	Logf func(string, ...any)
}

// NewEnv makes a client from the cluster's admin kubeconfig.
func NewEnv(c *cluster.Cluster, bin string, logf func(string, ...any)) (*Env, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 100, 200
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Env{C: c, K: k, Bin: bin, Logf: logf}, nil
}

// Namespace creates namespace ns (labels as given) and returns a
// function that deletes it.
func (e *Env) Namespace(ctx context.Context, ns string, labels map[string]string) (func(), error) {
	_, err := e.K.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		return func() {}, err
	}
	return func() {
		_ = e.K.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	}, nil
}

// PodSpec is a busybox pod pinned to a node.
type PodSpec struct {
	NS, Name, Node string
	Labels         map[string]string
	// IP, when set, is asked for with cni.projectcalico.org/ipAddrs, so
	// the pod's address is known before it exists.
	IP string
	// Args run under /bin/busybox; default: sleep.
	Args []string
}

// Pod creates the pod.
func (e *Env) Pod(ctx context.Context, s PodSpec) (*corev1.Pod, error) {
	args := s.Args
	if len(args) == 0 {
		args = []string{"sleep", "36000"}
	}
	grace := int64(1)
	no := false
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.NS, Labels: s.Labels},
		Spec: corev1.PodSpec{
			NodeName:                      s.Node,
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "main", Image: cluster.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: append([]string{"/bin/busybox"}, args...)}},
		},
	}
	if s.IP != "" {
		p.Annotations = map[string]string{"cni.projectcalico.org/ipAddrs": fmt.Sprintf(`["%s"]`, s.IP)}
	}
	return e.K.CoreV1().Pods(s.NS).Create(ctx, p, metav1.CreateOptions{})
}

// Running waits until the pod is Running with an address.
func (e *Env) Running(ctx context.Context, ns, name string, limit time.Duration) (*corev1.Pod, error) {
	var p *corev1.Pod
	err := cluster.WaitFor(ctx, limit, "pod "+ns+"/"+name+" Running", func() error {
		var err error
		p, err = e.K.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("phase %s, ip %q", p.Status.Phase, p.Status.PodIP)
		}
		return nil
	})
	return p, err
}

// node returns the cluster node called name.
func (e *Env) node(name string) (*cluster.Node, error) {
	for _, n := range e.C.Nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("enforce: no node %q", name)
}

// ContainerPID is the host PID of the pod's first container, from its
// node's containerd.
func (e *Env) ContainerPID(ctx context.Context, p *corev1.Pod) (int, error) {
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
		return 0, fmt.Errorf("enforce: pod %s/%s has no container yet", p.Namespace, p.Name)
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	n, err := e.node(p.Spec.NodeName)
	if err != nil {
		return 0, err
	}
	out, err := exec.CommandContext(ctx, "ctr", "--address", n.Containerd, "-n", "k8s.io", "task", "ls").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("enforce: ctr task ls on %s: %v: %s", n.Name, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == id && f[2] == "RUNNING" {
			var pid int
			if _, err := fmt.Sscan(f[1], &pid); err == nil && pid > 1 {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("enforce: container %s of %s/%s not running on %s", id, p.Namespace, p.Name, n.Name)
}

// PodNetNS opens the network namespace of a Running pod.
func (e *Env) PodNetNS(ctx context.Context, p *corev1.Pod) (*NetNS, error) {
	pid, err := e.ContainerPID(ctx, p)
	if err != nil {
		return nil, err
	}
	return OpenNetNS(p.Namespace+"/"+p.Name, fmt.Sprintf("/proc/%d/ns/net", pid))
}

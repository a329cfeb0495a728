package demo

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/tests/k8s/cluster"
)

// gcElection is routed/gc's election key (the cluster-wide GC).
const gcElection = datastore.KeyPrefix + "leases/ipam-gc/"

// gcLeader returns the name the cluster GC election's leader campaigned
// with ("" while nobody leads), read from routed's etcd.
func gcLeader(ctx context.Context, c *cluster.Cluster) (string, error) {
	tls := c.EtcdTLS
	ds, err := datastore.New(datastore.Config{Endpoints: []string{c.RoutedEtcd}, CACertFile: tls.CAFile, CertFile: tls.ClientCert, KeyFile: tls.ClientKey})
	if err != nil {
		return "", err
	}
	defer ds.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := ds.Etcd().Get(rctx, gcElection, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// waitClusterGC waits until the routed-cluster-gc Deployment is rolled
// out and one of its pods leads the cluster GC election (the nodes run
// with ROUTED_CLUSTER_GC=false and never campaign).
func waitClusterGC(ctx context.Context, c *cluster.Cluster, logf func(string, ...any)) error {
	logs := func() {
		logf("routed-cluster-gc logs:\n%s", podLogs(ctx, c, "kube-system", "app.kubernetes.io/component=cluster-gc"))
	}
	if out, err := c.Kubectl(ctx, "-n", "kube-system", "rollout", "status", "deploy/routed-cluster-gc", "--timeout=180s"); err != nil {
		logs()
		return err
	} else {
		logf("%s", out)
	}
	var leader string
	err := cluster.WaitFor(ctx, 60*time.Second, "a routed-cluster-gc pod leading the cluster GC election", func() error {
		var err error
		if leader, err = gcLeader(ctx, c); err != nil {
			return err
		}
		if !strings.HasPrefix(leader, "routed-cluster-gc-") {
			return fmt.Errorf("leader %q", leader)
		}
		return nil
	})
	if err != nil {
		logs()
		return err
	}
	logf("cluster GC election: %s leads", leader)
	return livez(ctx, c, "cluster-gc", "9094", logf)
}

// livez asks the pods of a component (app.kubernetes.io/component) for
// /livez where their liveness probe looks (deploy/base): the pod's
// address (the node's: hostNetwork) and port; each must answer 200.
func livez(ctx context.Context, c *cluster.Cluster, component, port string, logf func(string, ...any)) error {
	out, err := c.Kubectl(ctx, "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/component="+component,
		"-o", `jsonpath={range .items[*]}{.metadata.name}{" "}{.status.podIP}{"\n"}{end}`)
	if err != nil {
		return err
	}
	pods := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range pods {
		name, ip, _ := strings.Cut(l, " ")
		got, err := c.NodeExec(ctx, "curl", "-sS", "--max-time", "10", "-w", " %{http_code}", "http://"+net.JoinHostPort(ip, port)+"/livez")
		if err != nil || !strings.HasSuffix(strings.TrimSpace(got), " 200") {
			return fmt.Errorf("%s: /livez on %s:%s (its liveness probe): %q, %v", name, ip, port, got, err)
		}
		logf("%s: /livez answers %s", name, strings.TrimSpace(got))
	}
	return nil
}

package datastore

import (
	"context"
	"fmt"
	"io"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
)

// Permission is one etcd RBAC grant: read, or read and write, on every
// key under Prefix (or on the one key Prefix when Exact).
type Permission struct {
	Prefix string
	Write  bool
	Exact  bool
}

// Role is the etcd identity of one component: the etcd user (the common
// name of its client certificate) and the role granted to it.
type Role struct {
	Name    string // role and user name
	Purpose string
	Perms   []Permission
}

// Etcd role names, one per component. A client certificate's common name
// is its etcd user, so each component gets a certificate with its own CN.
const (
	RoleNode           = "routed-node"
	RoleCNI            = "routed-cni"
	RoleRouteReflector = "routed-rr"
	RoleAdmin          = "routed-admin"
	RoleControllers    = "routed-controllers"
	RoleClusterGC      = "routed-cluster-gc"
)

// Prefixes of the datastore that are not one resource kind.
const (
	IPAMPrefix = KeyPrefix + "ipam/"
	// IPAMDataPrefix holds IPAM's whole blocks, outside KeyPrefix so
	// that the nodes' watch of KeyPrefix does not carry them (pkg/ipam
	// keeps a summary of each under IPAMPrefix).
	IPAMDataPrefix    = "/routed/ipamdata/v1/"
	LeasesPrefix      = KeyPrefix + "leases/"
	NodeGCPrefix      = KeyPrefix + "nodegc/"
	ClusterInfoPrefix = KeyPrefix + "clusterinformation/"
)

func rw(prefix string) Permission { return Permission{Prefix: prefix, Write: true} }

// Roles returns the least-privilege etcd roles of routed's components.
// The node daemon writes IPAM, Node and endpoint records (GC), the
// cluster identity, its GC election, the default pool and the three
// tiers that always exist (those keys only), but never
// BGP peers, BGP or IPAM configuration. The CNI plugin writes only IPAM
// and endpoint keys. routed cluster-gc writes IPAM, endpoints (those of
// deleted nodes), its election and the node GC's records. The
// Kubernetes controllers write only profiles,
// network policies, endpoints and the endpoints of Services rules name. A route reflector reads everything and writes only
// its own Node record (one key per name in reflectors).
func Roles(reflectors []string) []Role {
	readAll := Permission{Prefix: KeyPrefix}
	rrPerms := []Permission{readAll}
	for _, n := range reflectors {
		rrPerms = append(rrPerms, Permission{Prefix: Key(api.KindNode, n), Write: true, Exact: true})
	}
	return []Role{
		{Name: RoleNode, Purpose: "routed on every node", Perms: append([]Permission{readAll,
			rw(IPAMPrefix), rw(IPAMDataPrefix), rw(KindPrefix(api.KindNode)), rw(KindPrefix(api.KindWorkloadEndpoint)),
			rw(KindPrefix(api.KindIPPool)), rw(ClusterInfoPrefix), rw(LeasesPrefix), rw(NodeGCPrefix)}, defaultTierPerms()...)},
		{Name: RoleCNI, Purpose: "routed-cni and routed-ipam (key copied to every node's /etc/cni/net.d)", Perms: []Permission{readAll,
			rw(IPAMPrefix), rw(IPAMDataPrefix), rw(KindPrefix(api.KindWorkloadEndpoint))}},
		{Name: RoleClusterGC, Purpose: "routed cluster-gc (the cluster-wide GC, when the nodes run with --cluster-gc=false)", Perms: []Permission{readAll,
			rw(IPAMPrefix), rw(IPAMDataPrefix), rw(KindPrefix(api.KindWorkloadEndpoint)), rw(LeasesPrefix), rw(NodeGCPrefix)}},
		{Name: RoleRouteReflector, Purpose: "routed --role route-reflector", Perms: rrPerms},
		{Name: RoleControllers, Purpose: "routed controllers (Kubernetes namespaces, service accounts, pods and NetworkPolicies)", Perms: []Permission{readAll,
			rw(KindPrefix(api.KindProfile)), rw(KindPrefix(api.KindNetworkPolicy)), rw(KindPrefix(api.KindWorkloadEndpoint)),
			rw(KindPrefix(api.KindServiceEndpoints)), rw(KindPrefix(api.KindHostEndpoint))}},
		{Name: RoleAdmin, Purpose: "routedctl (operators)", Perms: []Permission{rw(KeyPrefix), rw(IPAMDataPrefix)}},
	}
}

// defaultTierPerms lets the node create the tiers that always exist
// (EnsureDefaultTiers), and no other tier.
func defaultTierPerms() []Permission {
	var out []Permission
	for _, t := range api.DefaultTiers() {
		out = append(out, Permission{Prefix: Key(api.KindTier, t.Metadata.Name), Write: true, Exact: true})
	}
	return out
}

// WriteEtcdctlRoles prints the etcdctl commands that create the roles and
// users of Roles, then enable auth. Users authenticate with client
// certificates (etcd --client-cert-auth): their CN is the user name, so
// they are created without a password.
func WriteEtcdctlRoles(w io.Writer, reflectors []string) error {
	var b strings.Builder
	b.WriteString("# etcd RBAC for routed: one identity per component.\n")
	b.WriteString("# Run with etcdctl as an existing root user (or before auth is enabled).\n")
	b.WriteString("etcdctl user add root --no-password\netcdctl user grant-role root root\n")
	for _, r := range Roles(reflectors) {
		fmt.Fprintf(&b, "\n# %s: %s\n", r.Name, r.Purpose)
		fmt.Fprintf(&b, "etcdctl role add %s\n", r.Name)
		for _, p := range r.Perms {
			kind := "read"
			if p.Write {
				kind = "readwrite"
			}
			if p.Exact {
				fmt.Fprintf(&b, "etcdctl role grant-permission %s %s %s\n", r.Name, kind, p.Prefix)
			} else {
				fmt.Fprintf(&b, "etcdctl role grant-permission %s %s %s --prefix\n", r.Name, kind, p.Prefix)
			}
		}
		fmt.Fprintf(&b, "etcdctl user add %s --no-password\n", r.Name)
		fmt.Fprintf(&b, "etcdctl user grant-role %s %s\n", r.Name, r.Name)
	}
	b.WriteString("\netcdctl auth enable\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// ApplyRoles creates the roles and users of Roles (and a root user) on
// etcd through ec, then enables auth: what the printed etcdctl commands
// do. Users get the password in passwords, or none (client-certificate
// authentication) when it has no entry.
func ApplyRoles(ctx context.Context, ec *clientv3.Client, reflectors []string, passwords map[string]string) error {
	addUser := func(name string) error {
		if pw, ok := passwords[name]; ok {
			_, err := ec.UserAdd(ctx, name, pw)
			return err
		}
		_, err := ec.UserAddWithOptions(ctx, name, "", &clientv3.UserAddOptions{NoPassword: true})
		return err
	}
	if err := addUser("root"); err != nil {
		return fmt.Errorf("etcd user root: %w", err)
	}
	if _, err := ec.UserGrantRole(ctx, "root", "root"); err != nil {
		return fmt.Errorf("etcd user root: %w", err)
	}
	for _, r := range Roles(reflectors) {
		if _, err := ec.RoleAdd(ctx, r.Name); err != nil {
			return fmt.Errorf("etcd role %s: %w", r.Name, err)
		}
		for _, p := range r.Perms {
			typ := clientv3.PermissionType(clientv3.PermRead)
			if p.Write {
				typ = clientv3.PermissionType(clientv3.PermReadWrite)
			}
			end := clientv3.GetPrefixRangeEnd(p.Prefix)
			if p.Exact {
				end = ""
			}
			if _, err := ec.RoleGrantPermission(ctx, r.Name, p.Prefix, end, typ); err != nil {
				return fmt.Errorf("etcd role %s, %s: %w", r.Name, p.Prefix, err)
			}
		}
		if err := addUser(r.Name); err != nil {
			return fmt.Errorf("etcd user %s: %w", r.Name, err)
		}
		if _, err := ec.UserGrantRole(ctx, r.Name, r.Name); err != nil {
			return fmt.Errorf("etcd user %s: %w", r.Name, err)
		}
	}
	if _, err := ec.AuthEnable(ctx); err != nil {
		return fmt.Errorf("etcd auth enable: %w", err)
	}
	return nil
}

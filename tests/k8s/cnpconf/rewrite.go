package cnpconf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The conformance binary is built against a copy of upstream's module
// (a go.mod replace; the go tool refuses to overlay files in the module
// cache) in which the one function that makes pokes, PokeServer in
// conformance/utils/kubernetes/helper.go, first asks routedSCTPPokeNotMade
// (a file of our own added to that package) whether to skip the poke.
// It skips only SCTP pokes and only when the runner sets NoSCTPEnv
// (this kernel has no SCTP); each skipped poke logs one PokeNotMade line
// naming the pod, the target and the verdict the test expected, and the
// runner counts them. Without NoSCTPEnv the binary behaves as upstream's.

// NoSCTPEnv, set to 1 in the conformance binary's environment, makes it
// not make its SCTP pokes.
const NoSCTPEnv = "ROUTED_CNPCONF_NO_SCTP"

// PokeNotMade starts the line the binary logs for each SCTP poke it did
// not make.
const PokeNotMade = "routed-cnpconf: SCTP poke not made:"

// ErrUpstreamChanged is returned by Build when upstream's poke helper is
// not the code the rewrite was written for (another network-policy-api
// version, or another way of poking): the rewrite must be redone by hand.
var ErrUpstreamChanged = errors.New("cnpconf: upstream's poke helper changed")

// helperFile is the upstream file that holds PokeServer.
const helperFile = "conformance/utils/kubernetes/helper.go"

// pokeServerHead is PokeServer's signature and first line as v0.3.0 has
// them; the hook goes between the two.
const pokeServerHead = "func PokeServer(t *testing.T, client k8sclient.Interface, kubeConfig *rest.Config, clientNamespace, clientPod, protocol, targetHost string, targetPort int32, timeoutConfig config.TimeoutConfig, shouldConnect bool) {\n"

const pokeServerFirst = "\trequire.Eventually(t, func() bool {\n"

// pokeHook is the only code inserted into upstream's file.
const pokeHook = "\tif routedSCTPPokeNotMade(t, clientNamespace, clientPod, protocol, targetHost, targetPort, shouldConnect) {\n\t\treturn\n\t}\n"

// hookFile is added to upstream's conformance/utils/kubernetes package.
const hookFile = "conformance/utils/kubernetes/zz_routed_nosctp.go"

const hookGo = `// Added by routed's tests/k8s/cnpconf: this kernel has no SCTP.
package kubernetes

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// routedSCTPPokeNotMade reports whether PokeServer must not make this
// poke: an SCTP one while ` + NoSCTPEnv + `=1. It logs each poke it stops,
// with what the test expected of it.
func routedSCTPPokeNotMade(t *testing.T, clientNamespace, clientPod, protocol, targetHost string, targetPort int32, shouldConnect bool) bool {
	if !strings.EqualFold(protocol, "sctp") || os.Getenv("` + NoSCTPEnv + `") != "1" {
		return false
	}
	t.Helper()
	expected := "to be dropped"
	if shouldConnect {
		expected = "to connect"
	}
	t.Logf("` + PokeNotMade + ` %s/%s -> %s over %s, expected %s (this kernel has no SCTP)",
		clientNamespace, clientPod, net.JoinHostPort(targetHost, strconv.Itoa(int(targetPort))), protocol, expected)
	return true
}
`

// rewriteHelper inserts pokeHook at the top of PokeServer. It fails
// unless upstream's helper.go holds PokeServer exactly once, as written
// above, and is the only place that pokes (runs agnhost connect).
func rewriteHelper(src string) (string, error) {
	head := pokeServerHead + pokeServerFirst
	if n := strings.Count(src, head); n != 1 {
		return "", fmt.Errorf("%w: %s holds PokeServer's head %d times, not once", ErrUpstreamChanged, helperFile, n)
	}
	if n := strings.Count(src, "/agnhost connect"); n != 1 {
		return "", fmt.Errorf("%w: %s runs agnhost connect %d times, not once", ErrUpstreamChanged, helperFile, n)
	}
	if strings.Contains(src, "routedSCTPPokeNotMade") {
		return "", fmt.Errorf("%w: %s is already rewritten", ErrUpstreamChanged, helperFile)
	}
	return strings.Replace(src, head, pokeServerHead+pokeHook+pokeServerFirst, 1), nil
}

// copyModule copies upstream's module from the module cache (read-only)
// to dst with PokeServer rewritten and hookGo added; it fails if any
// other Go file of the module runs agnhost connect or calls the
// helper's exec (RunCommandFromPod), since such pokes would bypass the hook.
func copyModule(from, dst string) error {
	err := copyTree(from, dst, func(rel, src string) (string, error) {
		switch {
		case filepath.ToSlash(rel) == helperFile:
			return rewriteHelper(src)
		case strings.HasSuffix(rel, ".go") && (strings.Contains(src, "agnhost connect") || strings.Contains(src, "RunCommandFromPod(")):
			return "", fmt.Errorf("%w: %s pokes too (agnhost connect or RunCommandFromPod), past PokeServer", ErrUpstreamChanged, rel)
		}
		return src, nil
	})
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dst, hookFile)); err == nil {
		return fmt.Errorf("%w: %s exists upstream", ErrUpstreamChanged, hookFile)
	}
	return os.WriteFile(filepath.Join(dst, hookFile), []byte(hookGo), 0o644)
}

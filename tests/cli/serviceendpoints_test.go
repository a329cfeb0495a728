package cli

import (
	"strings"
	"testing"
)

// TestServiceEndpointsNotApplied: felix enforces a ServiceEndpoints
// record as a Service's endpoints, so routedctl never writes one, not
// even with the controllers' owner annotation copied onto it; the error
// names the file's document and says who writes them.
func TestServiceEndpointsNotApplied(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	doc := `apiVersion: routed.io/v1
kind: ServiceEndpoints
metadata:
  name: web
  namespace: shop
  annotations: {routed.io/owner: routed-controllers}
spec:
  subsets: [{addresses: [10.0.0.9], ports: [{protocol: TCP, port: 80}]}]
`
	_, errOut, code := ctl(t, ep, doc, "apply", "-f", "-")
	if code == 0 || !strings.Contains(errOut, "written by routed-controllers") || !strings.Contains(errOut, "document 1") {
		t.Fatalf("apply of a ServiceEndpoints record: code %d, stderr %q", code, errOut)
	}
	out, errOut, code := ctl(t, ep, "", "get", "serviceendpoints")
	if code != 0 {
		t.Fatalf("get serviceendpoints: code %d, stderr %q", code, errOut)
	}
	if strings.Contains(out, "web") {
		t.Errorf("the record was written:\n%s", out)
	}
}

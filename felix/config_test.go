package felix

import (
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/kernel"
)

// felix and the CNI plugin share the device prefix and route protocol
// (package kernel); a config naming another prefix is refused, not
// silently routed past the plugin's devices.
func TestConfigKernelContract(t *testing.T) {
	c, err := Config{NodeName: "a"}.withDefaults()
	if err != nil || c.WorkloadInterfacePrefix != kernel.HostDevicePrefix || c.RouteProtocol != kernel.RouteProtocol {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	_, err = Config{NodeName: "a", WorkloadInterfacePrefix: "veth"}.withDefaults()
	if err == nil || !strings.Contains(err.Error(), "WorkloadInterfacePrefix") {
		t.Errorf("prefix veth: %v, want an error naming WorkloadInterfacePrefix", err)
	}
}

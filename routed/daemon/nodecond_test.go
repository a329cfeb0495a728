package daemon

import (
	"testing"

	"github.com/spf13/pflag"
)

// TestNodeConditionFlag: the keeper runs by default in a pod, not with
// --node-condition=false or ROUTED_NODE_CONDITION=false, and never
// outside a pod.
func TestNodeConditionFlag(t *testing.T) {
	for _, tc := range []struct {
		name, env, host string
		args            []string
		want            string
	}{
		{name: "default in a pod", host: "10.96.0.1", want: ""},
		{name: "flag off", host: "10.96.0.1", args: []string{"--node-condition=false"}, want: "--node-condition=false"},
		{name: "env off", host: "10.96.0.1", env: "false", want: "--node-condition=false"},
		{name: "not in a pod", want: "not in a Kubernetes pod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBERNETES_SERVICE_HOST", tc.host)
			t.Setenv("ROUTED_NODE_CONDITION", tc.env)
			c := Config{}
			fs := pflag.NewFlagSet("routed", pflag.ContinueOnError)
			c.BindFlags(fs)
			if err := fs.Parse(append([]string{"--nodename", "n1"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := nodeConditionOff(c); got != tc.want {
				t.Fatalf("nodeConditionOff = %q, want %q", got, tc.want)
			}
		})
	}
}

package main

import (
	"errors"
	"os"

	"github.com/routed-net/routed/routed/health"
	"github.com/spf13/cobra"
)

func newHealthCmd() *cobra.Command {
	var addr string
	var readiness, liveness bool
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Ask the local routed whether it is ready or live (for exec probes)",
		Long: `Exits 0 when the local routed answers 200 on /readiness (--readiness) or
/liveness (--liveness), 1 otherwise, printing each failing check's reason.
The health server listens on loopback by default, so Kubernetes probes exec
this command instead of fetching a port on every host interface.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if readiness == liveness {
				return errors.New("routed health: give exactly one of --readiness and --liveness")
			}
			path := "/liveness"
			if readiness {
				path = "/readiness"
			}
			return health.Probe(cmd.Context(), addr, path)
		},
	}
	def := os.Getenv("ROUTED_HEALTH_LISTEN")
	if def == "" {
		def = health.DefaultHealthAddr
	}
	f := cmd.Flags()
	f.StringVar(&addr, "health-listen", def, "routed's health address (env ROUTED_HEALTH_LISTEN)")
	f.BoolVar(&readiness, "readiness", false, "check /readiness")
	f.BoolVar(&liveness, "liveness", false, "check /liveness")
	return cmd
}

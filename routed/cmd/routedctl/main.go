// Command routedctl manages routed: resources, IPAM and node status.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/routed-net/routed/routed/ctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := ctl.New(os.Stdout, os.Stderr)
	err := root.ExecuteContext(ctx)
	stop()
	// Status commands print their own verdict ("routed process is not
	// running.") and only need the exit code.
	var silent interface{ Silent() bool }
	if err != nil && !(errors.As(err, &silent) && silent.Silent()) {
		fmt.Fprintln(os.Stderr, "Error:", err)
	}
	os.Exit(ctl.ExitCode(err))
}

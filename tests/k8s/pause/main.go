// Command pause is the pod sandbox's process in the test cluster's pause
// image (no registry is reachable to pull one): it waits for a signal.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}

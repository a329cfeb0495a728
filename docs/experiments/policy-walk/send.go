//go:build ignore

// send.go sends N one-byte UDP datagrams from this network namespace to
// DST, each to a new port from BASE up (each a new flow), and prints the
// median and mean CPU time of the sending thread per sendto(2). On veths
// the packet is forwarded (through the router netns and its nftables
// forward chain) in the same softirq, so the figure includes the
// ruleset walk and does not depend on the load average.
//
// Usage (see setup.sh): ip netns exec ga go run docs/experiments/policy-walk/send.go DST N BASE
package main

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"
)

func cpu() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

func main() {
	runtime.LockOSThread()
	n, _ := strconv.Atoi(os.Args[2])
	base, _ := strconv.Atoi(os.Args[3])
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		panic(err)
	}
	ip := net.ParseIP(os.Args[1]).To4()
	var d []int64
	for i := 0; i < n; i++ {
		sa := &unix.SockaddrInet4{Port: base + i}
		copy(sa.Addr[:], ip)
		t := cpu()
		if err := unix.Sendto(fd, []byte("x"), 0, sa); err != nil {
			panic(err)
		}
		d = append(d, cpu()-t)
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	var sum int64
	for _, v := range d {
		sum += v
	}
	fmt.Printf("n=%d median %.1f us mean %.1f us\n", n, float64(d[n/2])/1e3, float64(sum)/float64(n)/1e3)
}

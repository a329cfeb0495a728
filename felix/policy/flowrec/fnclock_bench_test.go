package flowrec_test

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// fnClock times a kernel function in the kernel: fentry notes the time
// on the CPU, fexit adds what passed to the CPU's sum and count (a
// per-CPU array; the function must not sleep or migrate, as
// ctnetlink_conntrack_event does not). BenchmarkEventSources uses it to
// set the kernel's cost of ctnetlink's events beside the probes' own
// (their programs' run time).
type fnClock struct {
	m     *ebpf.Map
	progs []*ebpf.Program
	links []link.Link
}

// Slots of the per-CPU value: start, sum (ns), count.
const (
	clockStart = 0
	clockSum   = 8
	clockCount = 16
)

func newFnClock(fn string) (*fnClock, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 24, MaxEntries: 1})
	if err != nil {
		return nil, err
	}
	c := &fnClock{m: m}
	lookup := asm.Instructions{
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Reg(asm.R6, asm.R0),
		asm.FnKtimeGetNs.Call(),
	}
	enter := append(append(asm.Instructions{}, lookup...),
		asm.StoreMem(asm.R6, clockStart, asm.R0, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return())
	exit := append(append(asm.Instructions{}, lookup...),
		asm.LoadMem(asm.R1, asm.R6, clockStart, asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "out"),
		asm.Sub.Reg(asm.R0, asm.R1),
		asm.LoadMem(asm.R1, asm.R6, clockSum, asm.DWord),
		asm.Add.Reg(asm.R1, asm.R0),
		asm.StoreMem(asm.R6, clockSum, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.R6, clockCount, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R6, clockCount, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return())
	for _, p := range []struct {
		at    ebpf.AttachType
		insns asm.Instructions
	}{{ebpf.AttachTraceFEntry, enter}, {ebpf.AttachTraceFExit, exit}} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: p.at, AttachTo: fn, Instructions: p.insns, License: "Dual BSD/GPL"})
		if err != nil {
			c.close()
			return nil, fmt.Errorf("timing %s: %w", fn, err)
		}
		c.progs = append(c.progs, prog)
		l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: p.at})
		if err != nil {
			c.close()
			return nil, fmt.Errorf("timing %s: %w", fn, err)
		}
		c.links = append(c.links, l)
	}
	return c, nil
}

// total is the function's time and calls over every CPU.
func (c *fnClock) total() (time.Duration, uint64, error) {
	var vals [][3]uint64
	if err := c.m.Lookup(uint32(0), &vals); err != nil {
		return 0, 0, err
	}
	var sum, n uint64
	for _, v := range vals {
		sum += v[1]
		n += v[2]
	}
	return time.Duration(sum), n, nil
}

func (c *fnClock) close() {
	for _, l := range c.links {
		l.Close()
	}
	for _, p := range c.progs {
		p.Close()
	}
	c.m.Close()
}

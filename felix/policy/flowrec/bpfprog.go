package flowrec

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// The kernel source of conntrack's NEW and DESTROY without ctnetlink's
// events (bpfsrc.go): an fexit program on __nf_conntrack_confirm (a
// connection's entry entered the table: NEW) and an fentry program on
// nf_ct_delete for an entry not yet dying (it is about to leave the
// table: DESTROY, reported before the entry goes, as ctnetlink reports
// it, so a new entry on the same tuple comes after it), that copy the
// entry's id and two tuples and, on DESTROY, its accounting counters
// into a ring buffer. (At nf_ct_delete's fexit its return would say
// whether the call took the entry out, but it is also false when a
// reliable ctnetlink listener could not take the event, and the entry
// then goes without another nf_ct_delete.) Once anyone listens to ctnetlink's events, the kernel caches
// the events of every connection and builds and queues a netlink
// message for each (BenchmarkEventSources: 6-7 % of the connection
// rate); these programs cost a function call and a few reads per
// connection.
//
// The programs are written here as instructions, their offsets taken
// from the running kernel's BTF at load time (no compiler, no object
// file), so one binary follows the kernel's struct layouts. What is
// decoded in Go (the tuple and the counters) is checked against BTF
// too: a kernel whose layout differs fails the load, and the collector
// falls back to ctnetlink's events.

// ctRecord is the ring buffer's record: kind, the time (CLOCK_MONOTONIC,
// ns), the entry's id (its address XOR a secret of the collector's
// start), the original and reply tuples (struct nf_conntrack_tuple),
// and on DESTROY the counters (struct nf_conn_acct: packets and bytes
// of the original direction, then of the reply).
const (
	recKind     = 0
	recTime     = 8
	recID       = 16
	recOrig     = 24
	recReply    = recOrig + tupleSize
	recCounters = recReply + tupleSize
	recSize     = recCounters + 32

	recNew     = 1
	recDestroy = 2

	tupleSize = 40
	// scratch is an 8-byte stack slot below the record for reads.
	scratch = -recSize - 8

	ipsConfirmed = 1 << 3 // IPS_CONFIRMED
	ipsDying     = 1 << 9 // IPS_DYING
	nfAccept     = 1      // NF_ACCEPT
)

// ctLayout holds the kernel's offsets the programs read at.
type ctLayout struct {
	skbNfct        uint32 // sk_buff._nfct
	ctNet          uint32 // nf_conn.ct_net.net
	netInum        uint32 // net.ns.inum
	ctStatus       uint32 // nf_conn.status
	ctTuple        [2]uint32
	ctExt          uint32 // nf_conn.ext
	extOffsetAcct  uint32 // nf_ct_ext.offset[NF_CT_EXT_ACCT]
	confirmRetSlot int16  // __nf_conntrack_confirm's return value in the ctx
}

// errLayout is a kernel whose structures the programs cannot read.
var errLayout = errors.New("flowrec: kernel conntrack layout not understood")

// kernelLayout reads ctLayout from the running kernel's BTF and checks
// the layouts decoded in Go.
func kernelLayout() (*ctLayout, error) {
	base, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("flowrec: kernel BTF: %w", err)
	}
	// Conntrack built as a module has its functions (and some of its
	// types) in the module's BTF, on top of the kernel's; a module's
	// spec finds only its own types by name, so both are searched.
	specs := []*btf.Spec{base}
	var confirm *btf.Func
	if base.TypeByName(hookConfirm, &confirm) != nil {
		mod, err := btf.LoadKernelModuleSpec("nf_conntrack")
		if err != nil {
			return nil, fmt.Errorf("flowrec: nf_conntrack's BTF: %w", err)
		}
		specs = []*btf.Spec{mod, base}
	}
	byName := func(name string, typ any) error {
		var err error
		for _, s := range specs {
			if err = s.TypeByName(name, typ); err == nil {
				return nil
			}
		}
		return err
	}
	st := func(name string) (*btf.Struct, error) {
		var s *btf.Struct
		if err := byName(name, &s); err != nil {
			return nil, fmt.Errorf("%w: struct %s: %v", errLayout, name, err)
		}
		return s, nil
	}
	var l ctLayout
	skb, err := st("sk_buff")
	if err != nil {
		return nil, err
	}
	nfConn, err := st("nf_conn")
	if err != nil {
		return nil, err
	}
	net, err := st("net")
	if err != nil {
		return nil, err
	}
	ext, err := st("nf_ct_ext")
	if err != nil {
		return nil, err
	}
	tuple, err := st("nf_conntrack_tuple")
	if err != nil {
		return nil, err
	}
	hash, err := st("nf_conntrack_tuple_hash")
	if err != nil {
		return nil, err
	}
	// struct nf_conn_counter (two atomic64_t, packets then bytes,
	// unchanged since 2010) is checked where the BTF has it: a
	// module's BTF may leave it out (Debian 6.1's does).
	counter, _ := st("nf_conn_counter")
	var errs []error
	off := func(s *btf.Struct, path ...string) uint32 {
		o, err := memberOffset(s, path...)
		if err != nil {
			errs = append(errs, err)
		}
		return o
	}
	l.skbNfct = off(skb, "_nfct")
	l.ctNet = off(nfConn, "ct_net", "net")
	l.netInum = off(net, "ns", "inum")
	l.ctStatus = off(nfConn, "status")
	th := off(nfConn, "tuplehash")
	tt := off(hash, "tuple")
	l.ctTuple = [2]uint32{th + tt, th + hash.Size + tt}
	l.ctExt = off(nfConn, "ext")
	l.extOffsetAcct = off(ext, "offset")
	// The layout decodeTuple and the counters' decoding read.
	want := []struct {
		s    *btf.Struct
		path []string
		at   uint32
	}{
		{tuple, []string{"src", "u3"}, 0}, {tuple, []string{"src", "u"}, 16}, {tuple, []string{"src", "l3num"}, 18},
		{tuple, []string{"dst", "u3"}, 20}, {tuple, []string{"dst", "u"}, 36}, {tuple, []string{"dst", "protonum"}, 38},
	}
	if counter != nil {
		want = append(want, []struct {
			s    *btf.Struct
			path []string
			at   uint32
		}{{counter, []string{"packets"}, 0}, {counter, []string{"bytes"}, 8}}...)
		if counter.Size != 16 {
			errs = append(errs, fmt.Errorf("%w: nf_conn_counter %d bytes", errLayout, counter.Size))
		}
	}
	for _, w := range want {
		if o := off(w.s, w.path...); o != w.at {
			errs = append(errs, fmt.Errorf("%w: %s.%v at %d, not %d", errLayout, w.s.Name, w.path, o, w.at))
		}
	}
	if tuple.Size != tupleSize {
		errs = append(errs, fmt.Errorf("%w: nf_conntrack_tuple %d bytes", errLayout, tuple.Size))
	}
	var acct *btf.Enum
	if err := byName("nf_ct_ext_id", &acct); err != nil {
		errs = append(errs, fmt.Errorf("%w: enum nf_ct_ext_id: %v", errLayout, err))
	} else if v, ok := enumValue(acct, "NF_CT_EXT_ACCT"); ok {
		l.extOffsetAcct += uint32(v)
	} else {
		errs = append(errs, fmt.Errorf("%w: no NF_CT_EXT_ACCT", errLayout))
	}
	// The programs read the entry (the packet) from the first argument.
	for fn, first := range map[string]string{hookConfirm: "sk_buff", hookDelete: "nf_conn"} {
		n, got, err := firstParam(byName, fn)
		switch {
		case err != nil:
			errs = append(errs, err)
		case got != first:
			errs = append(errs, fmt.Errorf("%w: %s's first argument is a %q, not a %q", errLayout, fn, got, first))
		case fn == hookConfirm:
			l.confirmRetSlot = int16(8 * n)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &l, nil
}

// memberOffset is the byte offset of a member path in s, looking
// through anonymous structs and unions on the way.
func memberOffset(s btf.Type, path ...string) (uint32, error) {
	var total uint32
	cur := s
	for _, name := range path {
		o, t, ok := findMember(cur, name)
		if !ok {
			return 0, fmt.Errorf("%w: no member %v in %s", errLayout, path, s.TypeName())
		}
		total += o
		cur = t
	}
	return total, nil
}

func findMember(t btf.Type, name string) (uint32, btf.Type, bool) {
	var members []btf.Member
	switch v := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		members = v.Members
	case *btf.Union:
		members = v.Members
	default:
		return 0, nil, false
	}
	for _, m := range members {
		if m.Name == name {
			return m.Offset.Bytes(), m.Type, true
		}
		if m.Name == "" {
			if o, mt, ok := findMember(m.Type, name); ok {
				return m.Offset.Bytes() + o, mt, true
			}
		}
	}
	return 0, nil, false
}

func enumValue(e *btf.Enum, name string) (uint64, bool) {
	for _, v := range e.Values {
		if v.Name == name {
			return v.Value, true
		}
	}
	return 0, false
}

// The kernel functions the probes attach to. A new entry is taken at
// its confirmation, not at its insertion into the table
// (__nf_conntrack_hash_insert), which the compiler may inline into the
// confirmation (Debian's 6.1 does: the probe of the function's own copy
// then sees only entries ctnetlink creates).
const (
	hookConfirm = "__nf_conntrack_confirm"
	hookDelete  = "nf_ct_delete"
)

// firstParam is the number of a kernel function's parameters and the
// name of the struct its first one points to ("" for anything else).
func firstParam(byName func(string, any) error, name string) (int, string, error) {
	var fn *btf.Func
	if err := byName(name, &fn); err != nil {
		return 0, "", fmt.Errorf("%w: function %s: %v", errLayout, name, err)
	}
	proto, ok := fn.Type.(*btf.FuncProto)
	if !ok || len(proto.Params) == 0 {
		return 0, "", fmt.Errorf("%w: function %s has no parameters", errLayout, name)
	}
	if ptr, ok := btf.UnderlyingType(proto.Params[0].Type).(*btf.Pointer); ok {
		if st, ok := btf.UnderlyingType(ptr.Target).(*btf.Struct); ok {
			return len(proto.Params), st.Name, nil
		}
	}
	return len(proto.Params), "", nil
}

// ctProgram is the program of one hook: destroy the fentry program of
// nf_ct_delete, else the fexit program of __nf_conntrack_confirm. It
// keeps the entries of the namespace whose inode number is inum, writes
// them to events with their address XOR secret as their id, and counts
// in lost[0] what the ring buffer had no room for.
func ctProgram(l *ctLayout, destroy bool, inum uint32, secret uint64, events, lost, inflight *ebpf.Map) asm.Instructions {
	const exit = "exit"
	// probeRead reads size bytes at src+off (src a register) into the
	// stack at dst; a failed read leaves the program.
	probeRead := func(dst int16, size int32, src asm.Register, off uint32, onFail string) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.RFP),
			asm.Add.Imm(asm.R1, int32(dst)),
			asm.Mov.Imm(asm.R2, size),
			asm.Mov.Reg(asm.R3, src),
			asm.Add.Imm(asm.R3, int32(off)),
			asm.FnProbeReadKernel.Call(),
			asm.JNE.Imm(asm.R0, 0, onFail),
		}
	}
	insns := asm.Instructions{asm.Mov.Reg(asm.R6, asm.R1)}
	if destroy {
		// fentry: the entry as nf_ct_delete gets it, read as a
		// number (the verifier allows no XOR on the typed pointer
		// a load from the context gives; the id needs one).
		insns = append(insns, probeRead(scratch, 8, asm.R6, 0, exit)...)
		insns = append(insns, asm.LoadMem(asm.R7, asm.RFP, scratch, asm.DWord))
	} else {
		insns = append(insns,
			asm.LoadMem(asm.R0, asm.R6, l.confirmRetSlot, asm.DWord),
			asm.JNE.Imm32(asm.R0, nfAccept, exit),
			asm.LoadMem(asm.R8, asm.R6, 0, asm.DWord))
		insns = append(insns, probeRead(scratch, 8, asm.R8, l.skbNfct, exit)...)
		insns = append(insns,
			asm.LoadMem(asm.R7, asm.RFP, scratch, asm.DWord),
			asm.And.Imm(asm.R7, -8), // NFCT_PTRMASK
		)
	}
	insns = append(insns, asm.JEq.Imm(asm.R7, 0, exit))
	// The namespace's entries only.
	insns = append(insns, probeRead(scratch, 8, asm.R7, l.ctNet, exit)...)
	insns = append(insns, asm.LoadMem(asm.R8, asm.RFP, scratch, asm.DWord))
	insns = append(insns, probeRead(scratch, 4, asm.R8, l.netInum, exit)...)
	insns = append(insns,
		asm.LoadMem(asm.R0, asm.RFP, scratch, asm.Word),
		asm.JNE.Imm32(asm.R0, int32(inum), exit))
	// Entries in the table only; a deletion only of a live entry (the
	// call that will set DYING: as ctnetlink, which reports from
	// there, before the entry leaves the table; a second call for a
	// dying entry finds the bit set).
	insns = append(insns, probeRead(scratch, 8, asm.R7, l.ctStatus, exit)...)
	insns = append(insns,
		asm.LoadMem(asm.R0, asm.RFP, scratch, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.And.Imm(asm.R0, ipsConfirmed),
		asm.JEq.Imm(asm.R0, 0, exit))
	if destroy {
		insns = append(insns,
			asm.And.Imm(asm.R1, ipsDying),
			asm.JNE.Imm(asm.R1, 0, exit),
			// Two deletions at once on two CPUs can both find the
			// entry live: the first to claim it in inflight reports
			// (nf_ct_delete's fexit, ctDoneProgram, frees the
			// claim; by then DYING is set). A full map claims
			// nothing: the entry is reported.
			asm.StoreMem(asm.RFP, scratch, asm.R7, asm.DWord),
			asm.LoadMapPtr(asm.R1, inflight.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, scratch),
			asm.Mov.Reg(asm.R3, asm.R2),
			asm.Mov.Imm(asm.R4, bpfNoExist),
			asm.FnMapUpdateElem.Call(),
			asm.JEq.Imm(asm.R0, -int32(unix.EEXIST), exit))
	}
	// The record, zeroed first (no 8-byte store of an immediate).
	insns = append(insns, asm.Mov.Imm(asm.R1, 0))
	for o := int16(-recSize); o < 0; o += 8 {
		insns = append(insns, asm.StoreMem(asm.RFP, o, asm.R1, asm.DWord))
	}
	kind := int64(recNew)
	if destroy {
		kind = recDestroy
	}
	insns = append(insns,
		asm.StoreImm(asm.RFP, -recSize+recKind, kind, asm.Byte),
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.RFP, -recSize+recTime, asm.R0, asm.DWord),
		asm.LoadImm(asm.R1, int64(secret), asm.DWord),
		asm.Mov.Reg(asm.R2, asm.R7),
		asm.Xor.Reg(asm.R2, asm.R1),
		asm.StoreMem(asm.RFP, -recSize+recID, asm.R2, asm.DWord))
	insns = append(insns, probeRead(-recSize+recOrig, tupleSize, asm.R7, l.ctTuple[0], exit)...)
	insns = append(insns, probeRead(-recSize+recReply, tupleSize, asm.R7, l.ctTuple[1], exit)...)
	const emit = "emit"
	if destroy {
		// The counters, when the entry has accounting.
		insns = append(insns, probeRead(scratch, 8, asm.R7, l.ctExt, emit)...)
		insns = append(insns,
			asm.LoadMem(asm.R8, asm.RFP, scratch, asm.DWord),
			asm.JEq.Imm(asm.R8, 0, emit))
		insns = append(insns, probeRead(scratch, 1, asm.R8, l.extOffsetAcct, emit)...)
		insns = append(insns,
			asm.LoadMem(asm.R9, asm.RFP, scratch, asm.Byte),
			asm.JEq.Imm(asm.R9, 0, emit),
			asm.Add.Reg(asm.R8, asm.R9))
		insns = append(insns, probeRead(-recSize+recCounters, 32, asm.R8, 0, emit)...)
	}
	insns = append(insns,
		asm.LoadMapPtr(asm.R1, events.FD()).WithSymbol(emit),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -recSize),
		asm.Mov.Imm(asm.R3, recSize),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnRingbufOutput.Call(),
		asm.JEq.Imm(asm.R0, 0, exit),
		// No room: lost[0]++.
		asm.StoreImm(asm.RFP, scratch, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, lost.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, scratch),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, exit),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0),
		asm.Mov.Imm(asm.R0, 0).WithSymbol(exit),
		asm.Return(),
	)
	return insns
}

// bpfNoExist is BPF_NOEXIST: an update that fails if the key is there.
const bpfNoExist = 1

// ctDoneProgram is nf_ct_delete's fexit program: it frees the entry's
// claim in inflight (ctProgram's DESTROY), whoever made it.
func ctDoneProgram(inflight *ebpf.Map) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R3, asm.R1),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, -8),
		asm.Mov.Imm(asm.R2, 8),
		asm.FnProbeReadKernel.Call(),
		asm.JNE.Imm(asm.R0, 0, "exit"),
		asm.LoadMapPtr(asm.R1, inflight.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapDeleteElem.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	}
}

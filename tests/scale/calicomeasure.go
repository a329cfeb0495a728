package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Felix's log lines for its first sync (daemon.go) and its first
// programmed dataplane (int_dataplane.go).
const (
	felixInSync     = "Datastore now in sync."
	felixProgrammed = "Completed first update to dataplane."
)

// startFelix runs Calico's felix as cfxNode's felix in the node
// namespace, as tests/k8s startCalicoFelix does (nftables mode, BPF
// off, a mount namespace with empty /var/lib and /run), on the etcd
// datastore, with its health port on the namespace's loopback.
func (r *cfxRun) startFelix() error {
	r.felixLog = filepath.Join(r.dir, "felix.log")
	logf, err := os.Create(r.felixLog)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", "--net=/var/run/netns/"+r.ns, "unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs felix /var/lib && mount -t tmpfs felix /run && mount -t sysfs sysfs /sys && mkdir /run/calico && exec "$0"`, r.f.felix)
	const etcd = "http://127.0.0.1:2379"
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "FELIX_FELIXHOSTNAME=" + cfxNode,
		"DATASTORE_TYPE=etcdv3", "ETCD_ENDPOINTS=" + etcd, "FELIX_DATASTORETYPE=etcdv3", "FELIX_ETCDENDPOINTS=" + etcd,
		"FELIX_NFTABLESMODE=Enabled", "FELIX_BPFENABLED=false", "FELIX_IPV6SUPPORT=false", "FELIX_XDPENABLED=false",
		"FELIX_HEALTHENABLED=true", "FELIX_HEALTHHOST=127.0.0.1", "FELIX_HEALTHPORT=9099",
		"FELIX_LOGFILEPATH=none", "FELIX_LOGSEVERITYSCREEN=" + r.f.felixLog, "FELIX_USAGEREPORTINGENABLED=false",
		"FELIX_LOGSEVERITYSYS=none", "FELIX_DEFAULTENDPOINTTOHOSTACTION=ACCEPT",
		// The cgo-less build's libbpf stub panics on BPF's clean-up.
		"FELIX_DebugSkipCTLBCleanup=true"}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting felix: %w", err)
	}
	r.felix, r.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(r.exited) }()
	return nil
}

// measure starts felix, times its sync and its first programmed
// dataplane and readiness, checks what it programmed for its pods, and
// reports its memory idle and at its peak.
func (r *cfxRun) measure(ctx context.Context) error {
	start := time.Now()
	if err := r.startFelix(); err != nil {
		return err
	}
	pid := r.felix.Process.Pid
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for {
			r.mem.sample(pid)
			if !sleep(sctx, 200*time.Millisecond) {
				return
			}
		}
	}()
	var inSync, programmed, ready time.Duration
	deadline := time.Now().Add(r.f.readyTimeout)
	for ready == 0 {
		select {
		case <-r.exited:
			return fmt.Errorf("felix exited %s after its start (log %s):\n%s", time.Since(start).Round(time.Millisecond), r.felixLog, r.logTail(30))
		default:
		}
		log, _ := os.ReadFile(r.felixLog)
		if inSync == 0 && strings.Contains(string(log), felixInSync) {
			inSync = time.Since(start)
			fmt.Printf("==> felix in sync with the datastore after %s\n", inSync.Round(time.Millisecond))
		}
		if programmed == 0 && strings.Contains(string(log), felixProgrammed) {
			programmed = time.Since(start)
			fmt.Printf("==> felix's first dataplane update done after %s\n", programmed.Round(time.Millisecond))
		}
		if programmed > 0 {
			if code, _, err := httpGet(ctx, r.dial, "http://127.0.0.1:9099/readiness"); err == nil && code == 200 {
				ready = time.Since(start)
				fmt.Printf("==> felix ready (health /readiness 200) after %s\n", ready.Round(time.Millisecond))
			}
		}
		if ready == 0 && time.Now().After(deadline) {
			return fmt.Errorf("felix not ready after %s (in sync: %v, programmed: %v; log %s):\n%s",
				r.f.readyTimeout, inSync > 0, programmed > 0, r.felixLog, r.logTail(30))
		}
		if ready == 0 && !sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	// Its first update may come before its pods' devices are seen: wait
	// for their chains.
	var prog string
	for {
		var err error
		if prog, err = r.programmed(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", r.f.readyTimeout, err)
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	podsDone := time.Since(start)
	fmt.Printf("==> felix's pods programmed after %s; its nftables: %s\n", podsDone.Round(time.Millisecond), prog)
	fmt.Printf("==> idle for %s\n", r.f.idle)
	cpu0, err := cpuTicks(pid)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if !sleep(ctx, r.f.idle) {
		return ctx.Err()
	}
	select {
	case <-r.exited:
		return fmt.Errorf("felix exited during the idle window (log %s):\n%s", r.felixLog, r.logTail(30))
	default:
	}
	idle, err := readMem(pid)
	if err != nil {
		return err
	}
	cpu1, err := cpuTicks(pid)
	if err != nil {
		return err
	}
	fmt.Printf("idle: felix anonymous %.1f MiB, file-backed %.1f MiB, private %.1f MiB; CPU %.2f s/min\n",
		mib(idle.Anon), mib(idle.File), mib(idle.Private), float64(cpu1-cpu0)/100/time.Since(t0).Minutes())
	after := "no churn"
	if r.f.churn > 0 {
		fmt.Printf("==> churn for %s at %.0f pod replacements a second\n", r.f.churn, r.f.churnRate)
		cpu0, t0 = cpu1, time.Now()
		sum, err := r.churn(ctx)
		if err != nil {
			return err
		}
		churned, err := readMem(pid)
		if err != nil {
			return fmt.Errorf("felix after the churn (log %s): %w", r.felixLog, err)
		}
		if cpu1, err = cpuTicks(pid); err != nil {
			return err
		}
		if code, _, err := httpGet(ctx, r.dial, "http://127.0.0.1:9099/readiness"); err != nil || code != 200 {
			return fmt.Errorf("felix not ready after the churn (HTTP %d, %v; log %s):\n%s", code, err, r.felixLog, r.logTail(30))
		}
		fmt.Printf("churn: %s; felix still ready; CPU %.2f s/min\n", sum, float64(cpu1-cpu0)/100/time.Since(t0).Minutes())
		fmt.Printf("after churn: felix anonymous %.1f MiB, file-backed %.1f MiB\n", mib(churned.Anon), mib(churned.File))
		after = fmt.Sprintf("after %s of churn %.1f MiB", r.f.churn, mib(churned.Anon))
	}
	stop()
	r.mem.sample(pid)
	peakAnon, peakRSS, samples := r.mem.get()
	hwm, _ := vmHWM(pid)
	log := r.logText()
	warn := strings.Count(log, "[WARNING]") + strings.Count(log, "level=warning")
	errs := strings.Count(log, "[ERROR]") + strings.Count(log, "level=error")
	sh := &r.f.sh
	fmt.Printf("peak: anonymous %.1f MiB, anonymous + file-backed %.1f MiB (%d samples every 200 ms from its start), VmHWM %.1f MiB\n",
		mib(peakAnon), mib(peakRSS), samples, mib(hwm))
	fmt.Printf("felix's log: %d warnings, %d errors\n", warn, errs)
	fmt.Printf("scale-big calico-felix: %d pods, %d nodes, %d policies: in sync %s, first update %s, ready %s, its pods programmed %s, anonymous idle %.1f MiB, %s, peak %.1f MiB, file-backed %.1f MiB\n",
		sh.pods, sh.nodes, sh.policies, inSync.Round(time.Millisecond), programmed.Round(time.Millisecond), ready.Round(time.Millisecond), podsDone.Round(time.Millisecond),
		mib(idle.Anon), after, mib(peakAnon), mib(idle.File))
	return nil
}

func (r *cfxRun) logText() string {
	b, _ := os.ReadFile(r.felixLog)
	return string(b)
}

func (r *cfxRun) logTail(n int) string {
	lines := strings.Split(strings.TrimRight(r.logText(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// programmed reads the node's nftables ruleset and checks that felix
// programmed each of its pods (a chain naming its device each way) and
// policy chains; it returns a summary.
func (r *cfxRun) programmed(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", r.ns, "nft", "-j", "list", "ruleset").Output()
	if err != nil {
		return "", fmt.Errorf("nft list ruleset in %s: %w", r.ns, err)
	}
	var rs struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(out, &rs); err != nil {
		return "", fmt.Errorf("nft -j list ruleset: %w", err)
	}
	type obj struct {
		Table string            `json:"table"`
		Name  string            `json:"name"`
		Elem  []json.RawMessage `json:"elem"`
		Chain string            `json:"chain"`
	}
	var chains, sets, rules, elems, policyChains int
	var names []string
	tables := map[string]bool{}
	for _, item := range rs.Nftables {
		for kind, raw := range item {
			var o obj
			if kind == "metainfo" || json.Unmarshal(raw, &o) != nil || !strings.Contains(o.Table, "calico") {
				continue
			}
			tables[o.Table] = true
			switch kind {
			case "chain":
				chains++
				names = append(names, o.Name)
				if strings.Contains(o.Name, "-pi-") || strings.Contains(o.Name, "-po-") {
					policyChains++
				}
			case "set", "map":
				sets++
				elems += len(o.Elem)
			case "rule":
				rules++
			}
		}
	}
	for _, dev := range r.ifaces {
		var tw, fw bool
		for _, n := range names {
			tw = tw || strings.Contains(n, "tw-"+dev)
			fw = fw || strings.Contains(n, "fw-"+dev)
		}
		if !tw || !fw {
			return "", fmt.Errorf("felix programmed no chain to (tw-) and from (fw-) its pod's device %s (to %v, from %v) among %d chains of tables %v: %s", dev, tw, fw, chains, keys(tables), strings.Join(names[:min(len(names), 60)], " "))
		}
	}
	if policyChains == 0 {
		return "", fmt.Errorf("felix programmed no policy chain (-pi-/-po-) among %d chains: its pods' policies are not there", chains)
	}
	return fmt.Sprintf("tables %v: %d chains (%d policy chains, to and from each of its %d pods' devices), %d rules, %d sets and maps with %d elements",
		keys(tables), chains, policyChains, len(r.ifaces), rules, sets, elems), nil
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// vmHWM is a process's peak resident memory (anonymous and file-backed),
// in bytes.
func vmHWM(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib int64
			_, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kib)
			return kib * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

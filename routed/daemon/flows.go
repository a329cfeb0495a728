package daemon

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/routed/flowagg"
)

// FlowsConfig is routed's flow records (docs/flows.md): off unless
// Group is set.
type FlowsConfig struct {
	// Group is the nflog group of the flow marks (0: no flow records).
	Group int
	// File is the JSON-lines file for log shippers ("": none).
	File string
	// Aggregator is the flow aggregator's URL ("": not sent); the
	// node sends with its etcd client certificate (its routed-node
	// identity) and verifies the aggregator with AggregatorCA (default
	// the etcd CA).
	Aggregator, AggregatorCA string
	// Source is where connections come from: auto, probes or events
	// (flowrec.Config.Source).
	Source string
}

func (c *Config) bindFlowsFlags(fs *pflag.FlagSet) {
	fs.IntVar(&c.Flows.Group, "flows-group", c.envInt(0, "ROUTED_FLOWS_GROUP"), "nflog group of flow verdict marks: records every connection of this node's pods with its policy trace (0: off; docs/flows.md) (env ROUTED_FLOWS_GROUP)")
	fs.StringVar(&c.Flows.File, "flows-file", env("", "ROUTED_FLOWS_FILE"), "JSON-lines file of the node's flows, rotated (env ROUTED_FLOWS_FILE)")
	fs.StringVar(&c.Flows.Aggregator, "flows-aggregator", env("", "ROUTED_FLOWS_AGGREGATOR"), "URL of the flow aggregator, https://HOST:PORT (env ROUTED_FLOWS_AGGREGATOR)")
	fs.StringVar(&c.Flows.Source, "flows-source", env(flowrec.SourceAuto, "ROUTED_FLOWS_SOURCE"), "where connections' starts and ends come from: probes (fexit programs on the kernel's conntrack functions), poll (the conntrack table read every second by generations in the conntrack mark's upper 16 bits: no work in a connection's own context, but a connection whose entry goes before it is read is only counted, as ct-unread), events (ctnetlink's events, which cost new connections more) or auto (probes, else events) (env ROUTED_FLOWS_SOURCE)")
	fs.StringVar(&c.Flows.AggregatorCA, "flows-aggregator-ca-file", env("", "ROUTED_FLOWS_AGGREGATOR_CA_FILE"), "CA of the aggregator's certificate (default the etcd CA) (env ROUTED_FLOWS_AGGREGATOR_CA_FILE)")
}

func (c *Config) validateFlows() error {
	f := c.Flows
	switch {
	case f.Source != "" && f.Source != flowrec.SourceAuto && f.Source != flowrec.SourceProbes && f.Source != flowrec.SourceEvents && f.Source != flowrec.SourcePoll:
		return fmt.Errorf("--flows-source: %q: want auto, probes, poll or events", f.Source)
	case f.Group < 0 || f.Group > 65535:
		return fmt.Errorf("--flows-group: %d is not an nflog group (0-65535)", f.Group)
	case f.Group != 0 && f.Group == c.PolicyLogGroup:
		return fmt.Errorf("--flows-group: %d is --policy-log-group's; the flow marks need a group of their own", f.Group)
	case f.Group == 0 && (f.File != "" || f.Aggregator != ""):
		return fmt.Errorf("--flows-file and --flows-aggregator need --flows-group")
	case f.Group != 0 && f.File == "" && f.Aggregator == "":
		return fmt.Errorf("--flows-group: flows need somewhere to go: --flows-file or --flows-aggregator")
	case f.Aggregator != "" && (c.Datastore.CertFile == "" || c.Datastore.KeyFile == ""):
		return fmt.Errorf("--flows-aggregator: the node sends over mutual TLS with its etcd client certificate: set --etcd-cert-file and --etcd-key-file (ETCD_CERT_FILE, ETCD_KEY_FILE)")
	}
	return nil
}

// flowsParts are the sinks of a node's flows and what runs them.
type flowsParts struct {
	felix  felix.FlowsConfig
	sender *flowagg.Sender
	file   *flowrec.FileSink
}

// newFlowsParts opens the file, the sender and the metrics of flows.
func newFlowsParts(cfg Config, reg prometheus.Registerer) (*flowsParts, error) {
	p := &flowsParts{felix: felix.FlowsConfig{Source: cfg.Flows.Source}}
	if cfg.Flows.Group == 0 {
		return p, nil
	}
	m, err := flowrec.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	p.felix.Sinks = append(p.felix.Sinks, m.Sink)
	if cfg.Flows.File != "" {
		if p.file, err = flowrec.OpenFile(flowrec.FileConfig{Path: cfg.Flows.File}); err != nil {
			return nil, err
		}
		p.felix.Sinks = append(p.felix.Sinks, p.file.Sink)
	}
	if cfg.Flows.Aggregator != "" {
		ca := cfg.Flows.AggregatorCA
		if ca == "" {
			ca = cfg.Datastore.CACertFile
		}
		if p.sender, err = flowagg.NewSender(flowagg.SenderConfig{URL: cfg.Flows.Aggregator, CertFile: cfg.Datastore.CertFile,
			KeyFile: cfg.Datastore.KeyFile, CAFile: ca}); err != nil {
			return nil, err
		}
		p.felix.Sinks = append(p.felix.Sinks, p.sender.Sink)
	}
	return p, nil
}

// runSender sends until ctx ends (a supervised part).
func (p *flowsParts) runSender(ctx context.Context) error {
	p.sender.Run(ctx)
	return ctx.Err()
}

package api

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Protocol is an IP protocol in a policy rule, written as Calico writes
// it: a name (TCP, UDP, ICMP, ICMPv6, SCTP, UDPLite) or a number 1-255.
// Exactly one of Name and Number is set; a quoted number ("6") is read
// as the number, as Calico reads it.
type Protocol struct {
	Name   string
	Number int
}

// Protocol names Calico accepts, and their numbers.
const (
	ProtocolTCP     = "TCP"
	ProtocolUDP     = "UDP"
	ProtocolICMP    = "ICMP"
	ProtocolICMPv6  = "ICMPv6"
	ProtocolSCTP    = "SCTP"
	ProtocolUDPLite = "UDPLite"
)

var protocolNumbers = map[string]int{
	ProtocolTCP: 6, ProtocolUDP: 17, ProtocolICMP: 1, ProtocolICMPv6: 58, ProtocolSCTP: 132, ProtocolUDPLite: 136,
}

// ProtocolFromName returns the protocol written by name.
func ProtocolFromName(name string) Protocol { return Protocol{Name: name} }

// ProtocolFromNumber returns the protocol written by number.
func ProtocolFromNumber(n int) Protocol { return Protocol{Number: n} }

// Num is the protocol's number (TCP 6); ok is false for an unknown name
// or a number out of 1-255 (Validate refuses both).
func (p Protocol) Num() (n uint8, ok bool) {
	if p.Name != "" {
		v, ok := protocolNumbers[p.Name]
		return uint8(v), ok
	}
	if p.Number < 1 || p.Number > 255 {
		return 0, false
	}
	return uint8(p.Number), true
}

// HasPorts reports whether rules may match ports of this protocol
// (TCP, UDP, SCTP, as Calico allows).
func (p Protocol) HasPorts() bool {
	n, ok := p.Num()
	return ok && (n == 6 || n == 17 || n == 132)
}

// IsICMP reports whether p is ICMP (4) or ICMPv6 (6), the protocols
// an icmp match needs; v6 tells which.
func (p Protocol) IsICMP() (isICMP, v6 bool) {
	n, ok := p.Num()
	return ok && (n == 1 || n == 58), n == 58
}

// Canonical returns p with a known name in Calico's spelling ("tcp" is
// TCP), as Calico's ProtocolFromString reads names; others unchanged.
func (p Protocol) Canonical() Protocol {
	for name := range protocolNumbers {
		if strings.EqualFold(name, p.Name) {
			return Protocol{Name: name}
		}
	}
	return p
}

func (p Protocol) String() string {
	if p.Name != "" {
		return p.Name
	}
	return strconv.Itoa(p.Number)
}

// MarshalJSON writes the name, or the number.
func (p Protocol) MarshalJSON() ([]byte, error) {
	if p.Name != "" {
		return json.Marshal(p.Name)
	}
	return json.Marshal(p.Number)
}

// UnmarshalJSON reads a name or a number.
func (p *Protocol) UnmarshalJSON(b []byte) error {
	*p = Protocol{}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if n, err := strconv.Atoi(s); err == nil {
			p.Number = n
		} else {
			p.Name = s
		}
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil || f != float64(int(f)) {
		return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeOf(p).Elem()}
	}
	p.Number = int(f)
	return nil
}

// Port is one entry of a rule's ports or notPorts, as Calico writes it:
// a number (80), a range "8080:8090" (both ends included), or the name
// of a port a workload declares ("http"). A port that does not parse is
// kept as written in Invalid for Validate to report with its field.
type Port struct {
	MinPort  uint16
	MaxPort  uint16
	PortName string
	// Invalid holds what was written when it is not a port; never stored.
	Invalid string
}

var (
	portRangeRE = lazyRegexp(`^(\d+):(\d+)$`)
	portNameRE  = lazyRegexp(`^[a-zA-Z0-9_.-]{1,128}$`)
)

// SinglePort returns the port n.
func SinglePort(n uint16) Port { return Port{MinPort: n, MaxPort: n} }

// PortRange returns the ports lo to hi, both included.
func PortRange(lo, hi uint16) Port { return Port{MinPort: lo, MaxPort: hi} }

// NamedPort returns the port a workload declares under name.
func NamedPort(name string) Port { return Port{PortName: name} }

// ParsePort reads a port as Calico's files write it in a string.
func ParsePort(s string) Port {
	if n, err := strconv.ParseUint(s, 10, 16); err == nil {
		return SinglePort(uint16(n))
	}
	if g := portRangeRE().FindStringSubmatch(s); g != nil {
		lo, err1 := strconv.ParseUint(g[1], 10, 16)
		hi, err2 := strconv.ParseUint(g[2], 10, 16)
		if err1 != nil || err2 != nil || lo > hi {
			return Port{Invalid: s}
		}
		return PortRange(uint16(lo), uint16(hi))
	}
	if strings.Trim(s, "0123456789") == "" || !portNameRE().MatchString(s) {
		return Port{Invalid: s}
	}
	return NamedPort(s)
}

func (p Port) String() string {
	switch {
	case p.Invalid != "":
		return p.Invalid
	case p.PortName != "":
		return p.PortName
	case p.MinPort == p.MaxPort:
		return strconv.Itoa(int(p.MinPort))
	}
	return fmt.Sprintf("%d:%d", p.MinPort, p.MaxPort)
}

// MarshalJSON writes a number for a single port, else a string.
func (p Port) MarshalJSON() ([]byte, error) {
	if p.Invalid == "" && p.PortName == "" && p.MinPort == p.MaxPort {
		return json.Marshal(p.MinPort)
	}
	return json.Marshal(p.String())
}

// UnmarshalJSON reads a number or a string; what is not a port is kept
// in Invalid.
func (p *Port) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*p = ParsePort(s)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeOf(p).Elem()}
	}
	if f != float64(int(f)) || f < 0 || f > 65535 {
		*p = Port{Invalid: string(b)}
		return nil
	}
	*p = SinglePort(uint16(f))
	return nil
}

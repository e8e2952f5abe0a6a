package kernel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// NFTable is the name of skein-agent's own nftables tables: one of family ip, one of family
// ip6 (source NAT is per family: an IPv6 connection can only take an IPv6 address).
// skein-agent reads and writes nothing else of the nftables ruleset: every change replaces
// these tables, or deletes them.
const NFTable = "skein-agent"

// Names of the objects in NFTable.
const (
	nftChainPostrouting  = "postrouting"
	nftChainBypass       = "masquerade-bypass"
	nftChainWatch        = "masquerade-watch"
	nftChainRPFilter     = "rpfilter"
	nftChainOverlayIn    = "overlay-in"
	nftChainOverlayFwd   = "overlay-forward"
	nftSetRemote         = "remote"
	nftSetPods           = "pods"
	nftSetNodes          = "overlay-nodes"
	nftSetGateways       = "overlay-gateways"
	nftCounterMasq       = "masqueraded"
	nftCounterRPFilter   = "rpfilter-dropped"
	nftCounterOverlay    = "overlay-dropped"
	nftRuleComment       = "skein: host-network traffic to remote clusters leaves with the external CIDR address"
	nftBypassComment     = "skein: pod traffic to remote clusters keeps its source (NAT bound to itself, so later masquerade rules are skipped)"
	nftWatchComment      = "skein: counts pod connections to remote clusters that another rule source-NATed"
	nftRPFilterComment   = "skein: IPv6 from the overlay device only from sources routed back through it (rp_filter is IPv4 only)"
	nftRPFilter4Comment  = "skein: IPv4 from the overlay device, unless relayed back out of it, only from sources routed back through it"
	nftOverlayInComment  = "skein: the overlay's frames only from a node or a gateway"
	nftOverlayFwdComment = "skein: the overlay's frames to a node only from a node or a gateway (not from pods)"
)

// HostSNAT is the desired host-network SNAT.
//
// Traffic the node itself sends to a peer cluster (from host-network pods, kubelet probes)
// would leave with a source address that is not a pod IP, and the peer's replies would not
// find their way back. Such traffic is SNATed to the node's address in the cluster's
// external CIDR of its family (ExternalIP, ExternalIP6), which the peer routes back through
// the tunnel; conntrack restores the original source on the replies.
type HostSNAT struct {
	ExternalIP  netip.Addr // the node's address in the cluster's IPv4 external CIDR
	ExternalIP6 netip.Addr // the node's address in the cluster's IPv6 external CIDR
	// PodCIDRs are the local pod CIDRs, of either family: traffic from them is never SNATed.
	PodCIDRs []netip.Prefix
	// Remote are the remote CIDRs as this cluster sees them, of either family; those of a
	// family need that family's external address.
	Remote []netip.Prefix
	// MasqueradeBypass keeps the source of pod traffic to Remote whatever other rules of the
	// node say: a NAT chain that runs before the usual source NAT priority binds such
	// connections to their own source, and the kernel then skips every later NAT rule for
	// them, the CNI's masquerade included (iptables' and nftables' alike).
	MasqueradeBypass bool
	// Overlay, when set, names the overlay device (liqo.vxlan) for reverse-path filtering of
	// IPv6 in the ip6 table: an IPv6 packet arriving on it from a source this node would not
	// route back through it is dropped and counted (counter "rpfilter-dropped"). The
	// kernel's rp_filter, which the agent sets on the device, is IPv4 only; without this
	// anything that can send VXLAN to the node could inject IPv6 packets claiming a local
	// pod's or the node's own address. Link-local and unspecified sources are left alone
	// (neighbour discovery). The filter does not depend on SNAT: with Overlay set the ip6
	// table exists, holding the filter alone when no IPv6 remote CIDR is SNATed (the node
	// has no IPv6 external address, yet IPv6 is routed through the device).
	Overlay string
	// Relay, when set, names the overlay device (liqo.vxlan) for the SNAT rule: what arrives
	// on it is another node's traffic that this node forwards to a gateway pod (the relay of
	// status.internalEndpoint.nodeVTEP), already SNATed by its own node where it was host
	// traffic, and keeps its source: "iifname != DEVICE" comes first in the rule.
	Relay string
	// Guard, when set, keeps out of the overlay device what no node and no gateway sent
	// (OverlayGuard).
	Guard *OverlayGuard
}

// OverlayGuard is what the overlay device (liqo.vxlan) takes, and from whom. The kernel's
// VXLAN and Geneve devices decapsulate a frame from any sender that reaches their UDP port,
// and the frame may claim any inner source; the guard admits:
//
//   - to this node, frames of the overlay (UDP to Port whose header names VNI; VXLAN and
//     Geneve both carry the VNI in bytes 4-6) only from Nodes (every node's VTEP: the relay
//     of status.internalEndpoint.nodeVTEP, and a gateway's frames when the pod network
//     masquerades them to its node's address) or Gateways (the active gateways' VTEPs, their
//     pod addresses): not from a pod, a host of the node network that is no node, or the
//     internet (chain overlay-in, hook input);
//   - through this node to another node, such frames only from Nodes or Gateways: a pod
//     whose traffic the pod network masquerades to its node's address would otherwise pass
//     the other node's guard as this node (chain overlay-forward, hook forward);
//   - on Device, IPv4 packets only from sources routed back through it, unless they are
//     routed back out of it (a relayed frame on its way to the gateway pod, which checks its
//     source itself): a strict reverse-path filter beside the device's loose rp_filter
//     (chain rpfilter of table ip, counter "rpfilter-dropped"; HostSNAT.Overlay is the
//     IPv6 twin).
//
// What the first two drop is counted in counter "overlay-dropped" of the table of the
// underlay's family (the family of Nodes). A node's own process (root or host network) sends
// as the node and passes; the gateway checks the inner source of what a node sends.
type OverlayGuard struct {
	Device string
	Port   uint16
	VNI    uint32
	// Nodes are the nodes' underlay addresses, this node's included (at least one); Gateways
	// the gateways' VTEP addresses. All of one family, the underlay's.
	Nodes, Gateways []netip.Addr
}

// Each table always counts, in the named counter "masqueraded", the pod connections to Remote
// that left source-NATed by a rule that is not skein's (a CNI that masquerades everything
// not bound for its own pod CIDR): peers see the node's address instead of the pod's and
// drop the traffic. MasqueradedConnections reads them.

// snatFamilies are the two tables' families, IPv4 first.
var snatFamilies = [2]nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6}

// EnsureHostSNAT makes the NFTable tables hold exactly what s describes, for IPv4:
//
//	table ip skein-agent {
//		set remote { type ipv4_addr; flags interval; elements = { s.Remote (IPv4) } }
//		set pods { type ipv4_addr; flags interval; elements = { s.PodCIDRs (IPv4) } }
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			[iifname != s.Relay] ip daddr @remote ip saddr != @pods fib saddr type local snat to s.ExternalIP comment "skein: ..."
//		}
//	}
//
// and the same for IPv6 in table ip6 skein-agent (ipv6_addr sets, ip6 daddr and saddr,
// s.ExternalIP6). A family without Remote CIDRs has no table, except that with s.Overlay set
// table ip6 skein-agent always holds the reverse-path filter (alone when no IPv6 remote CIDR
// is SNATed), and with s.Guard set table ip holds the IPv4 one and the table of the
// underlay's family the guard's chains (OverlayGuard):
//
//	set overlay-nodes { type ipv4_addr; flags interval; elements = { s.Guard.Nodes } }
//	set overlay-gateways { type ipv4_addr; flags interval; elements = { s.Guard.Gateways } }
//	chain overlay-in {
//		type filter hook input priority filter; policy accept;
//		udp dport PORT @th,96,24 VNI ip saddr != @overlay-nodes ip saddr != @overlay-gateways counter name "overlay-dropped" drop
//	}
//	chain overlay-forward {
//		type filter hook forward priority filter; policy accept;
//		udp dport PORT @th,96,24 VNI ip daddr @overlay-nodes ip saddr != @overlay-nodes ip saddr != @overlay-gateways counter name "overlay-dropped" drop
//	}
//
// It reads the tables first and writes nothing when they already match; otherwise it
// replaces the tables that differ in one atomic netlink batch (as nft -f would with "add
// table ip skein-agent; delete table ip skein-agent" followed by the table above), so
// packets never see a half-programmed table. With no Remote CIDRs and no Overlay there is
// nothing to do: it deletes both tables and ignores the other fields.
//
// Prefixes with host bits set are masked (10.1.2.3/16 is 10.1.0.0/16); overlapping and
// adjacent prefixes are merged, so the sets hold the union of what s lists.
//
// It works in the network namespace netnsFd refers to, which it does not close; with
// netnsFd 0 it works in the calling thread's current namespace (a caller that switched its
// thread with setns must have locked it to its goroutine). Calls must not run concurrently
// with different s for the same namespace.
func EnsureHostSNAT(netnsFd int, s HostSNAT) error {
	if len(s.Remote) == 0 && s.Overlay == "" && s.Guard == nil {
		return DeleteHostSNAT(netnsFd)
	}
	want, err := s.rulesets()
	if err != nil {
		return err
	}
	// A lasting connection: one socket, made in the target namespace once, for the reads
	// and the write, wherever the goroutine runs meanwhile.
	c, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(netnsFd))
	if err != nil {
		return fmt.Errorf("host SNAT: open nftables netlink socket: %w", err)
	}
	defer c.CloseLasting()

	// A table that cannot be read back (say, holding something the nftables library cannot
	// parse) is replaced like one that differs; the read errors only matter if that fails.
	var readErrs []error
	changed := false
	for i, family := range snatFamilies {
		if want[i] == nil {
			t, err := ourTable(c, family)
			if err != nil {
				readErrs = append(readErrs, err)
			}
			if t != nil || err != nil {
				c.AddTable(hostSNATTable(family)) // deleting what may be absent
				c.DelTable(hostSNATTable(family))
				changed = true
			}
			continue
		}
		same, err := want[i].inPlace(c)
		if err != nil {
			readErrs = append(readErrs, err)
		}
		if err == nil && same {
			continue
		}
		if err := want[i].queueReplace(c); err != nil {
			return fmt.Errorf("host SNAT: table %s %s: %w", familyWord(family), NFTable, err)
		}
		changed = true
	}
	if !changed {
		return nil
	}
	if err := c.Flush(); err != nil {
		if len(readErrs) > 0 {
			err = fmt.Errorf("%w (reading them first failed too: %v)", err, errors.Join(readErrs...))
		}
		return fmt.Errorf("host SNAT: replace nftables tables %s: %w", NFTable, err)
	}
	return nil
}

// DeleteHostSNAT removes both NFTable tables, and with them all host-network SNAT, from the
// network namespace netnsFd refers to (0: the calling thread's); it is not an error when
// they are absent.
func DeleteHostSNAT(netnsFd int) error {
	c, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(netnsFd))
	if err != nil {
		return fmt.Errorf("host SNAT: open nftables netlink socket: %w", err)
	}
	defer c.CloseLasting()
	found := false
	for _, family := range snatFamilies {
		table, err := ourTable(c, family)
		if err != nil {
			return fmt.Errorf("host SNAT: list nftables tables: %w", err)
		}
		if table != nil {
			c.DelTable(table)
			found = true
		}
	}
	if !found {
		return nil
	}
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("host SNAT: delete nftables tables %s: %w", NFTable, err)
	}
	return nil
}

// familyWord is a table family as nft names it.
func familyWord(f nftables.TableFamily) string {
	if f == nftables.TableFamilyIPv6 {
		return "ip6"
	}
	return "ip"
}

// hostSNATRuleset is a validated HostSNAT of one family as nftables sees it.
type hostSNATRuleset struct {
	family       nftables.TableFamily
	snat         bool // SNAT to external (false: an ip6 table holding the filter alone)
	external     netip.Addr
	remote, pods []nftables.SetElement // interval set elements, sorted (see intervalElements)
	bypass       bool
	rpfilter     string // the overlay device to filter the family's packets arriving on ("": none)
	relay        string // the overlay device whose arrivals the SNAT rule leaves alone ("": none)
	// The overlay guard's frame filters (OverlayGuard), in the underlay family's table.
	guard           bool
	port            uint16
	vni             uint32
	nodes, gateways []nftables.SetElement
}

// checkDevice refuses what is not a network interface name.
func checkDevice(name string) error {
	if len(name) >= unix.IFNAMSIZ || strings.ContainsRune(name, 0) {
		return fmt.Errorf("host SNAT: overlay device name %q is not a network interface name", name)
	}
	return nil
}

// check validates the guard; is6 is the underlay's family.
func (g *OverlayGuard) check() (is6 bool, err error) {
	if g.Port == 0 || g.VNI >= 1<<24 {
		return false, fmt.Errorf("overlay guard: port %d, VNI %d: want a port and a 24-bit VNI", g.Port, g.VNI)
	}
	if len(g.Nodes) == 0 {
		return false, errors.New("overlay guard: no node address (the node's own at least)")
	}
	if g.Device == "" {
		return false, errors.New("overlay guard: no overlay device")
	}
	if err := checkDevice(g.Device); err != nil {
		return false, err
	}
	is6 = g.Nodes[0].Is6()
	for _, a := range slices.Concat(g.Nodes, g.Gateways) {
		if !a.IsValid() || a.Is4In6() || a.Zone() != "" || a.Is6() != is6 {
			return false, fmt.Errorf("overlay guard: address %v is not a plain address of the underlay's family (that of %v)", a, g.Nodes[0])
		}
	}
	return is6, nil
}

// hostPrefixes are addresses as single-address prefixes.
func hostPrefixes(addrs []netip.Addr) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out
}

// rulesets validates s and splits it by family: [0] IPv4, [1] IPv6, nil for a family
// without remote CIDRs (and, for IPv6, without the overlay's filter).
func (s HostSNAT) rulesets() ([2]*hostSNATRuleset, error) {
	var out [2]*hostSNATRuleset
	for _, p := range s.Remote {
		if !p.IsValid() {
			return out, fmt.Errorf("host SNAT: remote CIDR %q is invalid", p.String())
		}
	}
	for _, p := range s.PodCIDRs {
		if !p.IsValid() {
			return out, fmt.Errorf("host SNAT: pod CIDR %q is invalid", p.String())
		}
	}
	underlay6 := false
	if s.Guard != nil {
		var err error
		if underlay6, err = s.Guard.check(); err != nil {
			return out, err
		}
	}
	for i, family := range snatFamilies {
		is6 := family == nftables.TableFamilyIPv6
		of := func(ps []netip.Prefix) []netip.Prefix {
			return slices.DeleteFunc(slices.Clone(ps), func(p netip.Prefix) bool { return p.Addr().Is6() != is6 })
		}
		remote := of(s.Remote)
		filter := is6 && s.Overlay != "" || !is6 && s.Guard != nil
		guard := s.Guard != nil && underlay6 == is6
		if len(remote) == 0 && !filter && !guard {
			continue
		}
		rs := &hostSNATRuleset{family: family}
		if filter {
			rs.rpfilter = s.Overlay
			if !is6 {
				rs.rpfilter = s.Guard.Device
			}
			if err := checkDevice(rs.rpfilter); err != nil {
				return out, err
			}
		}
		if guard {
			rs.guard, rs.port, rs.vni = true, s.Guard.Port, s.Guard.VNI
			rs.nodes = intervalElements(hostPrefixes(s.Guard.Nodes))
			rs.gateways = intervalElements(hostPrefixes(s.Guard.Gateways))
		}
		out[i] = rs
		if len(remote) == 0 {
			continue
		}
		ip, field, word := s.ExternalIP, "external IP", "IPv4"
		if is6 {
			ip, field, word = s.ExternalIP6, "IPv6 external IP", "IPv6"
		}
		switch {
		case !ip.IsValid():
			return out, fmt.Errorf("host SNAT: the %s is not set (it is the node's address in the cluster's %s external CIDR), but remote CIDR %v is %s", field, word, remote[0], word)
		case ip.Is4In6() || ip.Is6() != is6 || ip.Zone() != "":
			return out, fmt.Errorf("host SNAT: %s %s is not an %s address", field, ip, word)
		case !ip.IsGlobalUnicast():
			return out, fmt.Errorf("host SNAT: %s %s is not a unicast address", field, ip)
		}
		for _, p := range remote {
			if p.Addr().Is4In6() {
				return out, fmt.Errorf("host SNAT: remote CIDR %s is an IPv4-mapped IPv6 CIDR", p)
			}
		}
		if err := checkDevice(s.Relay); err != nil {
			return out, err
		}
		rs.snat, rs.external, rs.bypass, rs.relay = true, ip, s.MasqueradeBypass, s.Relay
		rs.remote = intervalElements(remote)
		rs.pods = intervalElements(of(s.PodCIDRs))
	}
	return out, nil
}

// lastAddr is the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := range b {
		if host := p.Bits() - 8*i; host < 8 {
			b[i] |= byte(0xff >> max(host, 0))
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// addrRange is the addresses first to last, both included.
type addrRange struct{ first, last netip.Addr }

// intervalElements turns prefixes of one family into the elements of an nftables interval
// set: the union of the prefixes as disjoint, non-adjacent ranges, each a start element and
// an end element one past its last address (none when it runs to the family's last
// address), sorted by key.
func intervalElements(prefixes []netip.Prefix) []nftables.SetElement {
	ranges := make([]addrRange, 0, len(prefixes))
	for _, p := range prefixes {
		ranges = append(ranges, addrRange{p.Masked().Addr(), lastAddr(p)})
	}
	slices.SortFunc(ranges, func(a, b addrRange) int { return a.first.Compare(b.first) })
	var merged []addrRange
	for _, r := range ranges {
		if n := len(merged); n > 0 {
			next := merged[n-1].last.Next() // invalid past the family's last address
			if !next.IsValid() || r.first.Compare(next) <= 0 {
				if r.last.Compare(merged[n-1].last) > 0 {
					merged[n-1].last = r.last
				}
				continue
			}
		}
		merged = append(merged, r)
	}
	var elems []nftables.SetElement
	for _, r := range merged {
		elems = append(elems, nftables.SetElement{Key: r.first.AsSlice()})
		if next := r.last.Next(); next.IsValid() {
			elems = append(elems, nftables.SetElement{Key: next.AsSlice(), IntervalEnd: true})
		}
	}
	return elems
}

// ourTable returns the NFTable of family if it exists, or nil.
func ourTable(c *nftables.Conn, family nftables.TableFamily) (*nftables.Table, error) {
	tables, err := c.ListTablesOfFamily(family)
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		if t.Name == NFTable {
			return t, nil
		}
	}
	return nil, nil
}

// hostSNATTable, hostSNATChain and hostSNATSets are the fixed parts of NFTable.
func hostSNATTable(family nftables.TableFamily) *nftables.Table {
	return &nftables.Table{Family: family, Name: NFTable}
}

// nftChain is one chain of NFTable with its rules.
type nftChain struct {
	chain   *nftables.Chain
	exprs   func(ids setIDs) []expr.Any // refers to the sets by name and batch ID
	comment string
	// more are further rules, after exprs' (each with the same comment).
	more []func(ids setIDs) []expr.Any
}

// rules are the chain's rules in order.
func (ch nftChain) rules() []func(ids setIDs) []expr.Any {
	return append([]func(ids setIDs) []expr.Any{ch.exprs}, ch.more...)
}

func postroutingChain(t *nftables.Table, name string, typ nftables.ChainType, prio *nftables.ChainPriority) *nftables.Chain {
	return &nftables.Chain{
		Table:    t,
		Name:     name,
		Type:     typ,
		Hooknum:  nftables.ChainHookPostrouting,
		Priority: prio,
		Policy:   new(nftables.ChainPolicyAccept),
	}
}

// chains are the chains want puts in table t (for IPv4; ip6 and the IPv6 external address
// in the ip6 table):
//
//	chain masquerade-bypass {            (with MasqueradeBypass only)
//		type nat hook postrouting priority srcnat - 10; policy accept;
//		ip daddr @remote ip saddr @pods snat to ip saddr
//	}
//	chain postrouting {
//		type nat hook postrouting priority srcnat; policy accept;
//		ip daddr @remote ip saddr != @pods snat to EXTERNAL
//	}
//	chain masquerade-watch {
//		type filter hook postrouting priority srcnat + 100; policy accept;
//		ct state new ct status snat ip daddr @remote ip saddr != EXTERNAL counter name "masqueraded"
//	}
func (want hostSNATRuleset) chains(t *nftables.Table) []nftChain {
	var out []nftChain
	if want.bypass && want.snat {
		out = append(out, nftChain{postroutingChain(t, nftChainBypass, nftables.ChainTypeNAT, nftables.ChainPriorityRef(*nftables.ChainPriorityNATSource-10)),
			want.bypassExprs, nftBypassComment, nil})
	}
	if want.snat {
		out = append(out,
			nftChain{postroutingChain(t, nftChainPostrouting, nftables.ChainTypeNAT, nftables.ChainPriorityNATSource), want.exprs, nftRuleComment, nil},
			nftChain{postroutingChain(t, nftChainWatch, nftables.ChainTypeFilter, nftables.ChainPriorityRef(*nftables.ChainPriorityNATSource+100)),
				want.watchExprs, nftWatchComment, nil})
	}
	if want.rpfilter != "" {
		ch := postroutingChain(t, nftChainRPFilter, nftables.ChainTypeFilter, nftables.ChainPriorityRaw)
		ch.Hooknum = nftables.ChainHookPrerouting
		if want.family == nftables.TableFamilyIPv6 {
			out = append(out, nftChain{ch, want.rpfilterExprs, nftRPFilterComment, nil})
		} else {
			out = append(out, nftChain{ch, want.rpfilter4Exprs, nftRPFilter4Comment, []func(setIDs) []expr.Any{want.rpfilter4CastExprs}})
		}
	}
	if want.guard {
		in := postroutingChain(t, nftChainOverlayIn, nftables.ChainTypeFilter, nftables.ChainPriorityFilter)
		in.Hooknum = nftables.ChainHookInput
		fwd := postroutingChain(t, nftChainOverlayFwd, nftables.ChainTypeFilter, nftables.ChainPriorityFilter)
		fwd.Hooknum = nftables.ChainHookForward
		inRules := []func(setIDs) []expr.Any{want.overlaySourceExprs}
		if want.family == nftables.TableFamilyIPv6 {
			// IPv6 is reassembled after the input hook unless conntrack is used in the
			// namespace (then before prerouting): a ct expression makes it so, and the first
			// fragment, which may stop before the VNI, never meets the rules alone.
			inRules = append([]func(setIDs) []expr.Any{want.overlayInvalidExprs}, inRules...)
		}
		out = append(out, nftChain{in, want.overlayInExprs, nftOverlayInComment, inRules},
			nftChain{fwd, want.overlayFwdExprs, nftOverlayFwdComment, []func(setIDs) []expr.Any{want.overlaySourceExprs}})
	}
	return out
}

// ifname is a device name as nftables compares it (IFNAMSIZ bytes, zero-padded).
func ifname(dev string) []byte {
	name := make([]byte, unix.IFNAMSIZ)
	copy(name, dev)
	return name
}

// rpfilter4Exprs is, in table ip skein-agent's chain rpfilter (type filter hook prerouting
// priority raw):
//
//	iifname DEVICE fib daddr oifname != DEVICE fib saddr . iif oif missing counter name "rpfilter-dropped" drop
//
// the IPv4 twin of rpfilterExprs, but for what is routed back out of the device: on the node
// that runs a gateway, other nodes' frames arrive on the device carrying their pods' packets
// and leave through it again to the gateway pod (the relay of
// status.internalEndpoint.nodeVTEP), which checks their sources itself.
func (want hostSNATRuleset) rpfilter4Exprs(setIDs) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(want.rpfilter)},
		&expr.Fib{Register: 1, FlagDADDR: true, ResultOIFNAME: true},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname(want.rpfilter)},
		&expr.Fib{Register: 1, FlagSADDR: true, FlagIIF: true, ResultOIF: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: make([]byte, 4)}, // no route back through iif
		&expr.Objref{Type: 1, Name: nftCounterRPFilter},                 // NFT_OBJECT_COUNTER
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// rpfilter4CastExprs is the second rule of table ip's chain rpfilter:
//
//	iifname DEVICE fib daddr type != unicast fib saddr . iif oif missing counter name "rpfilter-dropped" drop
//
// what rpfilter4Exprs exempts for being routed back out of the device is a unicast packet on
// its way to a gateway; the overlay's broadcast address is routed on the device too, and a
// packet to it, delivered to the node's sockets, gets no exemption.
func (want hostSNATRuleset) rpfilter4CastExprs(setIDs) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(want.rpfilter)},
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binary.NativeEndian.AppendUint32(nil, unix.RTN_UNICAST)},
		&expr.Fib{Register: 1, FlagSADDR: true, FlagIIF: true, ResultOIF: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: make([]byte, 4)},
		&expr.Objref{Type: 1, Name: nftCounterRPFilter}, // NFT_OBJECT_COUNTER
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// overlaySourceExprs is, in chains overlay-in and overlay-forward, "... fib saddr . iif oif
// missing counter name overlay-dropped drop": a frame whose source address is not routed
// back through the interface it came in on is forged (a pod with CAP_NET_RAW posing as a
// node or a gateway: its frame comes in on its own veth, where no node's address lives).
func (want hostSNATRuleset) overlaySourceExprs(setIDs) []expr.Any {
	return slices.Concat(want.overlayFrame(), []expr.Any{
		&expr.Fib{Register: 1, FlagSADDR: true, FlagIIF: true, ResultOIF: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: make([]byte, 4)},
		&expr.Objref{Type: 1, Name: nftCounterOverlay}, // NFT_OBJECT_COUNTER
		&expr.Verdict{Kind: expr.VerdictDrop},
	})
}

// overlayInvalidExprs is, first in table ip6's chain overlay-in, "... ct state invalid counter
// name overlay-dropped drop": a frame conntrack finds malformed (truncated, a bad checksum)
// is dropped; and its ct expression has the kernel reassemble IPv6 before the chains run.
func (want hostSNATRuleset) overlayInvalidExprs(setIDs) []expr.Any {
	return slices.Concat(want.overlayFrame(), []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, ctStateInvalid), Xor: binary.NativeEndian.AppendUint32(nil, 0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binary.NativeEndian.AppendUint32(nil, 0)},
		&expr.Objref{Type: 1, Name: nftCounterOverlay}, // NFT_OBJECT_COUNTER
		&expr.Verdict{Kind: expr.VerdictDrop},
	})
}

// overlayFrame matches the overlay's frames: "meta l4proto udp udp dport PORT @th,96,24 VNI"
// (the VNI is in bytes 4-6 of the VXLAN and of the Geneve header, after 8 bytes of UDP).
func (want hostSNATRuleset) overlayFrame() []expr.Any {
	vni := binary.BigEndian.AppendUint32(nil, want.vni)[1:]
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, want.port)},
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 12, Len: 3},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: vni},
	}
}

// notFromNodeOrGateway is "ip saddr != @overlay-nodes ip saddr != @overlay-gateways counter
// name overlay-dropped drop".
func (want hostSNATRuleset) notFromNodeOrGateway(ids setIDs) []expr.Any {
	return []expr.Any{
		want.loadSaddr(),
		&expr.Lookup{SourceRegister: 1, SetName: nftSetNodes, SetID: ids.nodes, Invert: true},
		&expr.Lookup{SourceRegister: 1, SetName: nftSetGateways, SetID: ids.gateways, Invert: true},
		&expr.Objref{Type: 1, Name: nftCounterOverlay}, // NFT_OBJECT_COUNTER
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// overlayInExprs is, in chain overlay-in (type filter hook input priority filter), the
// overlay's frames to this node not from a node or a gateway dropped (OverlayGuard).
func (want hostSNATRuleset) overlayInExprs(ids setIDs) []expr.Any {
	return slices.Concat(want.overlayFrame(), want.notFromNodeOrGateway(ids))
}

// overlayFwdExprs is, in chain overlay-forward (type filter hook forward priority filter),
// "... ip daddr @overlay-nodes" and then as overlayInExprs: the overlay's frames this node
// forwards to a node, not from a node or a gateway, dropped (a pod's, before the pod
// network's masquerade gives them the node's address).
func (want hostSNATRuleset) overlayFwdExprs(ids setIDs) []expr.Any {
	return slices.Concat(want.overlayFrame(), []expr.Any{
		want.loadDaddr(),
		&expr.Lookup{SourceRegister: 1, SetName: nftSetNodes, SetID: ids.nodes},
	}, want.notFromNodeOrGateway(ids))
}

// rpfilterExprs is, in table ip6 skein-agent's chain rpfilter (type filter hook prerouting
// priority raw):
//
//	iifname DEVICE ip6 saddr != fe80::/10 ip6 saddr != :: fib saddr . iif oif missing counter name "rpfilter-dropped" drop
//
// a strict reverse-path check: the route back to the source, looked up as the kernel would
// (policy rules included: a peer's CIDR is routed through table 18952), must leave through
// the device the packet came in on.
func (want hostSNATRuleset) rpfilterExprs(setIDs) []expr.Any {
	name := ifname(want.rpfilter)
	linkLocal := netip.MustParseAddr("fe80::").As16()
	mask := netip.MustParseAddr("ffc0::").As16()
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
		want.loadSaddr(),
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 16, Mask: mask[:], Xor: make([]byte, 16)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: linkLocal[:]},
		want.loadSaddr(),
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 16)},
		&expr.Fib{Register: 1, FlagSADDR: true, FlagIIF: true, ResultOIF: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: make([]byte, 4)}, // no route back through iif
		&expr.Objref{Type: 1, Name: nftCounterRPFilter},                 // NFT_OBJECT_COUNTER
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// counters are the named counters of want's table.
func (want hostSNATRuleset) counters() []string {
	var out []string
	if want.snat {
		out = append(out, nftCounterMasq)
	}
	if want.rpfilter != "" {
		out = append(out, nftCounterRPFilter)
	}
	if want.guard {
		out = append(out, nftCounterOverlay)
	}
	return out
}

// setIDs are the batch IDs of the sets a rule refers to (zero when comparing with what the
// kernel reports: it does not report them).
type setIDs struct{ remote, pods, nodes, gateways uint32 }

// nftSet is one set of want's table with its elements.
type nftSet struct {
	set   *nftables.Set
	elems []nftables.SetElement
}

// sets are the sets of want's table, in table t, and their batch IDs.
func (want hostSNATRuleset) sets(t *nftables.Table) ([]nftSet, setIDs) {
	key := nftables.TypeIPAddr
	// Explicit IDs (they only need to be unique within the batch): with ID 0, AddSet would
	// allocate one from a global counter that is not safe for concurrent use. Both families'
	// tables may be written in one batch.
	ids := setIDs{1, 2, 3, 4}
	if want.family == nftables.TableFamilyIPv6 {
		key = nftables.TypeIP6Addr
		ids = setIDs{5, 6, 7, 8}
	}
	set := func(id uint32, name string) *nftables.Set {
		return &nftables.Set{Table: t, ID: id, Name: name, KeyType: key, Interval: true}
	}
	var out []nftSet
	if want.snat {
		out = append(out, nftSet{set(ids.remote, nftSetRemote), want.remote}, nftSet{set(ids.pods, nftSetPods), want.pods})
	}
	if want.guard {
		out = append(out, nftSet{set(ids.nodes, nftSetNodes), want.nodes}, nftSet{set(ids.gateways, nftSetGateways), want.gateways})
	}
	return out, ids
}

// Loads of the IP header's source and destination addresses into register 1 (IPv4: bytes
// 12 and 16, 4 long; IPv6: bytes 8 and 24, 16 long).
func (want hostSNATRuleset) loadSaddr() expr.Any {
	if want.family == nftables.TableFamilyIPv6 {
		return &expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 8, Len: 16}
	}
	return &expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}
}

func (want hostSNATRuleset) loadDaddr() expr.Any {
	if want.family == nftables.TableFamilyIPv6 {
		return &expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16}
	}
	return &expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}
}

func (want hostSNATRuleset) natFamily() uint32 {
	if want.family == nftables.TableFamilyIPv6 {
		return unix.NFPROTO_IPV6
	}
	return unix.NFPROTO_IPV4
}

// exprs is the rule "[iifname != RELAY] ip daddr @remote ip saddr != @pods fib saddr type local
// snat to external"; it refers to the
// sets by name and by the IDs they have in the batch that creates them.
func (want hostSNATRuleset) exprs(ids setIDs) []expr.Any {
	var relay []expr.Any
	if want.relay != "" {
		name := make([]byte, unix.IFNAMSIZ)
		copy(name, want.relay)
		relay = []expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: name}}
	}
	return append(relay,
		want.loadDaddr(),
		&expr.Lookup{SourceRegister: 1, SetName: nftSetRemote, SetID: ids.remote},
		want.loadSaddr(),
		&expr.Lookup{SourceRegister: 1, SetName: nftSetPods, SetID: ids.pods, Invert: true},
		// fib saddr type local: the node's own (host-network) traffic alone. A packet the node
		// forwards for another host (a LAN host routing the peers' CIDRs via this node) keeps
		// its source, and the gateway, which takes from a node only its pods and its external
		// address, drops it: no host reaches the peers as this node.
		&expr.Fib{Register: 1, FlagSADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
		&expr.Immediate{Register: 1, Data: want.external.AsSlice()},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: want.natFamily(), RegAddrMin: 1, RegAddrMax: 1},
	)
}

// bypassExprs is "ip daddr @remote ip saddr @pods snat to ip saddr": a NAT binding that
// changes nothing, after which the kernel runs no other source NAT rule for the connection.
func (want hostSNATRuleset) bypassExprs(ids setIDs) []expr.Any {
	return []expr.Any{
		want.loadDaddr(),
		&expr.Lookup{SourceRegister: 1, SetName: nftSetRemote, SetID: ids.remote},
		want.loadSaddr(),
		&expr.Lookup{SourceRegister: 1, SetName: nftSetPods, SetID: ids.pods},
		want.loadSaddr(),
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: want.natFamily(), RegAddrMin: 1, RegAddrMax: 1},
	}
}

// Conntrack bits the watch rule tests (linux/netfilter/nf_conntrack_common.h).
const (
	ctStateInvalid = 1      // NF_CT_STATE_INVALID_BIT
	ctStateNew     = 1 << 3 // NF_CT_STATE_BIT(IP_CT_NEW)
	ctStatusSNAT   = 1 << 4 // IPS_SRC_NAT: set only when the source really changed
)

// watchExprs is "ct state new ct status snat ip daddr @remote ip saddr != EXTERNAL counter
// name masqueraded". Running after every NAT chain at the usual priorities, it sees what the
// NAT rules made of a connection's first packet: source-NATed, but not by skein's own rule
// (which gives host traffic the external address), so by another (the bypass's binding to
// itself does not set the status bit). It tests the translated source rather than the
// original one (ct original ip saddr @pods) because the nftables library cannot read back a
// ct expression with a direction, and a table it cannot read would be replaced, its counter
// reset, at every reconcile.
func (want hostSNATRuleset) watchExprs(ids setIDs) []expr.Any {
	bit := func(key expr.CtKey, mask uint32) []expr.Any {
		return []expr.Any{
			&expr.Ct{Register: 1, Key: key},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binary.NativeEndian.AppendUint32(nil, mask), Xor: binary.NativeEndian.AppendUint32(nil, 0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binary.NativeEndian.AppendUint32(nil, 0)},
		}
	}
	return slices.Concat(bit(expr.CtKeySTATE, ctStateNew), bit(expr.CtKeySTATUS, ctStatusSNAT), []expr.Any{
		want.loadDaddr(),
		&expr.Lookup{SourceRegister: 1, SetName: nftSetRemote, SetID: ids.remote},
		want.loadSaddr(),
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: want.external.AsSlice()},
		&expr.Objref{Type: 1, Name: nftCounterMasq}, // NFT_OBJECT_COUNTER
	})
}

func ruleComment(s string) []byte { return userdata.AppendString(nil, userdata.TypeComment, s) }

// queueReplace queues the replacement of want's table; the caller's Flush sends it in one
// batch, which the kernel applies atomically or not at all.
func (want hostSNATRuleset) queueReplace(c *nftables.Conn) error {
	t := hostSNATTable(want.family)
	// Adding first makes the delete succeed whether or not the table exists.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	sets, ids := want.sets(t)
	for _, set := range sets {
		if err := c.AddSet(set.set, set.elems); err != nil {
			return fmt.Errorf("set %s: %w", set.set.Name, err)
		}
	}
	for _, name := range want.counters() {
		c.AddObj(&nftables.CounterObj{Table: t, Name: name})
	}
	for _, ch := range want.chains(t) {
		chain := c.AddChain(ch.chain)
		for _, exprs := range ch.rules() {
			c.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: exprs(ids), UserData: ruleComment(ch.comment)})
		}
	}
	return nil
}

// inPlace reports whether want's table holds exactly want: its chains, the two sets with
// their elements, the counter and one rule per chain, and nothing else of these kinds.
func (want hostSNATRuleset) inPlace(c *nftables.Conn) (bool, error) {
	t, err := ourTable(c, want.family)
	if err != nil || t == nil {
		return false, err
	}

	chains, err := c.ListChainsOfTableFamily(want.family)
	if err != nil {
		return false, fmt.Errorf("list chains: %w", err)
	}
	got := map[string]*nftables.Chain{}
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == NFTable {
			got[ch.Name] = ch
		}
	}
	wantChains := want.chains(t)
	if len(got) != len(wantChains) {
		return false, nil
	}
	for _, w := range wantChains {
		if ch := got[w.chain.Name]; ch == nil || !sameChain(ch, w.chain) {
			return false, nil
		}
	}

	sets, err := c.GetSets(t)
	if err != nil {
		return false, fmt.Errorf("list sets: %w", err)
	}
	wantSets, _ := want.sets(t)
	if len(sets) != len(wantSets) {
		return false, nil
	}
	for _, set := range sets {
		i := slices.IndexFunc(wantSets, func(w nftSet) bool { return w.set.Name == set.Name })
		if i < 0 {
			return false, nil
		}
		wantSet, wantElems := wantSets[i].set, wantSets[i].elems
		if !sameSetKind(set, wantSet) {
			return false, nil
		}
		elems, err := c.GetSetElements(set)
		if err != nil {
			return false, fmt.Errorf("list elements of set %s: %w", set.Name, err)
		}
		if !sameElements(elems, wantElems) {
			return false, nil
		}
	}

	objs, err := c.GetObjects(t)
	if err != nil {
		return false, fmt.Errorf("list objects: %w", err)
	}
	var gotCounters []string
	for _, o := range objs {
		c, ok := o.(*nftables.CounterObj)
		if !ok {
			return false, nil
		}
		gotCounters = append(gotCounters, c.Name)
	}
	slices.Sort(gotCounters)
	if !slices.Equal(gotCounters, slices.Sorted(slices.Values(want.counters()))) {
		return false, nil
	}

	for _, w := range wantChains {
		rules, err := c.GetRules(t, w.chain)
		if err != nil {
			return false, fmt.Errorf("list rules of chain %s: %w", w.chain.Name, err)
		}
		// The kernel does not report set IDs (they only live within a batch).
		want := w.rules()
		if len(rules) != len(want) {
			return false, nil
		}
		for i, r := range rules {
			if !reflect.DeepEqual(r.Exprs, want[i](setIDs{})) || !bytes.Equal(r.UserData, ruleComment(w.comment)) {
				return false, nil
			}
		}
	}
	return true, nil
}

// MasqueradedConnections reads the counters of pod connections to remote clusters that
// another rule source-NATed (see HostSNAT), both families summed, in the namespace netnsFd
// refers to (0: the calling thread's). ok is false when no NFTable table is there. A
// family's count restarts from zero whenever EnsureHostSNAT replaces its table.
func MasqueradedConnections(netnsFd int) (n uint64, ok bool, err error) {
	c, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(netnsFd))
	if err != nil {
		return 0, false, fmt.Errorf("masquerade watch: open nftables netlink socket: %w", err)
	}
	defer c.CloseLasting()
	for _, family := range snatFamilies {
		t, err := ourTable(c, family)
		if err != nil {
			return 0, false, err
		}
		if t == nil {
			continue
		}
		objs, err := c.GetObjects(t)
		if err != nil {
			return 0, false, fmt.Errorf("masquerade watch: read counter %s of table %s %s: %w", nftCounterMasq, familyWord(family), NFTable, err)
		}
		for _, o := range objs {
			// A table of an older agent, without the counter, counts nothing: the next
			// reconcile replaces it.
			if counter, isCounter := o.(*nftables.CounterObj); isCounter && counter.Name == nftCounterMasq {
				n, ok = n+counter.Packets, true
			}
		}
	}
	return n, ok, nil
}

// GuardDrops reads what the overlay guard dropped (OverlayGuard), both families summed, in the
// namespace netnsFd refers to (0: the calling thread's): sender counts the overlay's frames
// from what is no node and no gateway (counter "overlay-dropped"), source the packets from the
// overlay device whose source is not routed back through it (counter "rpfilter-dropped", the
// IPv6 filter of HostSNAT.Overlay included). A count restarts from zero whenever
// EnsureHostSNAT replaces its table. guarded says whether the guard's chains are there.
func GuardDrops(netnsFd int) (sender, source uint64, guarded bool, err error) {
	c, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(netnsFd))
	if err != nil {
		return 0, 0, false, fmt.Errorf("overlay guard: open nftables netlink socket: %w", err)
	}
	defer c.CloseLasting()
	for _, family := range snatFamilies {
		t, err := ourTable(c, family)
		if err != nil {
			return 0, 0, false, err
		}
		if t == nil {
			continue
		}
		objs, err := c.GetObjects(t)
		if err != nil {
			return 0, 0, false, fmt.Errorf("overlay guard: read the counters of table %s %s: %w", familyWord(family), NFTable, err)
		}
		for _, o := range objs {
			if counter, ok := o.(*nftables.CounterObj); ok {
				switch counter.Name {
				case nftCounterOverlay:
					sender += counter.Packets
					guarded = true
				case nftCounterRPFilter:
					source += counter.Packets
				}
			}
		}
	}
	return sender, source, guarded, nil
}

func sameChain(got, want *nftables.Chain) bool {
	return got.Name == want.Name && got.Type == want.Type && got.Device == want.Device &&
		equalPtr(got.Hooknum, want.Hooknum) && equalPtr(got.Priority, want.Priority) &&
		equalPtr(got.Policy, want.Policy)
}

func equalPtr[T comparable](a, b *T) bool {
	return a != nil && b != nil && *a == *b
}

func sameSetKind(got, want *nftables.Set) bool {
	return got.KeyType.GetNFTMagic() == want.KeyType.GetNFTMagic() && got.KeyType.Bytes == want.KeyType.Bytes &&
		got.Interval == want.Interval && got.IsMap == want.IsMap && got.Constant == want.Constant &&
		got.Anonymous == want.Anonymous && got.HasTimeout == want.HasTimeout &&
		got.Dynamic == want.Dynamic && got.Concatenation == want.Concatenation
}

// sameElements compares set elements by key and interval-end flag, in any order; want is
// sorted as intervalElements sorts.
func sameElements(got, want []nftables.SetElement) bool {
	if len(got) != len(want) {
		return false
	}
	got = slices.Clone(got)
	slices.SortFunc(got, func(a, b nftables.SetElement) int { return bytes.Compare(a.Key, b.Key) })
	for i := range got {
		if !bytes.Equal(got[i].Key, want[i].Key) || got[i].IntervalEnd != want[i].IntervalEnd ||
			len(got[i].Val) != 0 || len(got[i].KeyEnd) != 0 {
			return false
		}
	}
	return true
}

// monitorNFTables reports every change to skein's nftables table (the table, its chain, rule
// and sets) in the namespace of nsPath ("" for this one), so a table deleted or edited by hand
// is repaired at once instead of at the next resync. Changes of other tables are ignored.
func monitorNFTables(nsPath string, done <-chan struct{}) (<-chan struct{}, error) {
	var opts []nftables.ConnOption
	if nsPath != "" {
		f, err := os.Open(nsPath)
		if err != nil {
			return nil, fmt.Errorf("nftables monitor: %w", err)
		}
		defer f.Close()
		opts = append(opts, nftables.WithNetNSFd(int(f.Fd())))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables monitor: %w", err)
	}
	m := nftables.NewMonitor(nftables.WithMonitorAction(nftables.MonitorActionAny),
		nftables.WithMonitorObject(nftables.MonitorObjectTables|nftables.MonitorObjectChains|nftables.MonitorObjectRules|nftables.MonitorObjectSets|nftables.MonitorObjectElements))
	events, err := c.AddMonitor(m)
	if err != nil {
		return nil, fmt.Errorf("nftables monitor: %w", err)
	}
	out := make(chan struct{}, 1)
	go func() { <-done; m.Close() }()
	go func() {
		for ev := range events {
			if !ours(ev.Data) {
				continue
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, nil
}

// ours reports whether a monitor event's object belongs to skein's table (objects the
// monitor cannot name a table for count as ours: a spurious repair check costs little).
func ours(obj any) bool {
	var t *nftables.Table
	switch o := obj.(type) {
	case *nftables.Table:
		t = o
	case *nftables.Chain:
		t = o.Table
	case *nftables.Rule:
		t = o.Table
	case *nftables.Set:
		t = o.Table
	}
	return t == nil || (t.Name == NFTable && (t.Family == nftables.TableFamilyIPv4 || t.Family == nftables.TableFamilyIPv6))
}

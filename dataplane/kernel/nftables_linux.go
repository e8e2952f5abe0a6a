package kernel

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"reflect"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// NFTable is the name of skein-agent's own nftables table (family ip). skein-agent reads and
// writes nothing else of the nftables ruleset: every change replaces this table, or deletes it.
const NFTable = "skein-agent"

// Names of the objects in NFTable.
const (
	nftChainPostrouting = "postrouting"
	nftChainBypass      = "masquerade-bypass"
	nftChainWatch       = "masquerade-watch"
	nftSetRemote        = "remote"
	nftSetPods          = "pods"
	nftCounterMasq      = "masqueraded"
	nftRuleComment      = "skein: host-network traffic to remote clusters leaves with the external CIDR address"
	nftBypassComment    = "skein: pod traffic to remote clusters keeps its source (NAT bound to itself, so later masquerade rules are skipped)"
	nftWatchComment     = "skein: counts pod connections to remote clusters that another rule source-NATed"
)

// HostSNAT is the desired host-network SNAT.
//
// Traffic the node itself sends to a peer cluster (from host-network pods, kubelet probes)
// would leave with a source address that is not a pod IP, and the peer's replies would not
// find their way back. Such traffic is SNATed to ExternalIP, the node's address in the
// cluster's external CIDR, which the peer routes back through the tunnel; conntrack restores
// the original source on the replies.
type HostSNAT struct {
	ExternalIP netip.Addr     // the node's address in the cluster's external CIDR (IPv4)
	PodCIDRs   []netip.Prefix // local pod CIDRs: traffic from them is never SNATed
	Remote     []netip.Prefix // remote CIDRs as this cluster sees them
	// MasqueradeBypass keeps the source of pod traffic to Remote whatever other rules of the
	// node say: a NAT chain that runs before the usual source NAT priority binds such
	// connections to their own source, and the kernel then skips every later NAT rule for
	// them, the CNI's masquerade included (iptables' and nftables' alike).
	MasqueradeBypass bool
}

// The table always counts, in the named counter "masqueraded", the pod connections to Remote
// that left source-NATed by a rule that is not skein's (a CNI that masquerades everything
// not bound for its own pod CIDR): peers see the node's address instead of the pod's and
// drop the traffic. MasqueradedConnections reads it.

// EnsureHostSNAT makes NFTable hold exactly what s describes:
//
//	table ip skein-agent {
//		set remote { type ipv4_addr; flags interval; elements = { s.Remote } }
//		set pods { type ipv4_addr; flags interval; elements = { s.PodCIDRs } }
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			ip daddr @remote ip saddr != @pods snat to s.ExternalIP comment "skein: ..."
//		}
//	}
//
// It reads the table first and writes nothing when it already matches; otherwise it replaces
// the whole table in one atomic netlink batch (as nft -f would with "add table ip
// skein-agent; delete table ip skein-agent" followed by the table above), so packets never
// see a half-programmed table. With no Remote CIDRs there is nothing to SNAT: it deletes the
// table and ignores the other fields.
//
// Prefixes with host bits set are masked (10.1.2.3/16 is 10.1.0.0/16); overlapping and
// adjacent prefixes are merged, so the sets hold the union of what s lists.
//
// It works in the network namespace netnsFd refers to, which it does not close; with
// netnsFd 0 it works in the calling thread's current namespace (a caller that switched its
// thread with setns must have locked it to its goroutine). Calls must not run concurrently
// with different s for the same namespace.
func EnsureHostSNAT(netnsFd int, s HostSNAT) error {
	if len(s.Remote) == 0 {
		return DeleteHostSNAT(netnsFd)
	}
	want, err := s.ruleset()
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
	// parse) is replaced like one that differs; the read error only matters if that fails.
	same, readErr := want.inPlace(c)
	if readErr == nil && same {
		return nil
	}
	if err := want.replace(c); err != nil {
		if readErr != nil {
			err = fmt.Errorf("%w (reading it first failed too: %v)", err, readErr)
		}
		return fmt.Errorf("host SNAT: replace nftables table ip %s: %w", NFTable, err)
	}
	return nil
}

// DeleteHostSNAT removes NFTable, and with it all host-network SNAT, from the network
// namespace netnsFd refers to (0: the calling thread's); it is not an error when the table
// is absent.
func DeleteHostSNAT(netnsFd int) error {
	c, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(netnsFd))
	if err != nil {
		return fmt.Errorf("host SNAT: open nftables netlink socket: %w", err)
	}
	defer c.CloseLasting()
	table, err := ourTable(c)
	if err != nil {
		return fmt.Errorf("host SNAT: list nftables tables: %w", err)
	}
	if table == nil {
		return nil
	}
	c.DelTable(table)
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("host SNAT: delete nftables table ip %s: %w", NFTable, err)
	}
	return nil
}

// hostSNATRuleset is a validated HostSNAT as nftables sees it.
type hostSNATRuleset struct {
	external     netip.Addr
	remote, pods []nftables.SetElement // interval set elements, sorted (see intervalElements)
	bypass       bool
}

// ruleset validates s and turns it into set elements.
func (s HostSNAT) ruleset() (hostSNATRuleset, error) {
	ip := s.ExternalIP
	switch {
	case !ip.IsValid():
		return hostSNATRuleset{}, errors.New("host SNAT: the external IP is not set (it is the node's address in the cluster's external CIDR)")
	case !ip.Is4():
		return hostSNATRuleset{}, fmt.Errorf("host SNAT: external IP %s is not an IPv4 address", ip)
	case !ip.IsGlobalUnicast():
		return hostSNATRuleset{}, fmt.Errorf("host SNAT: external IP %s is not a unicast address", ip)
	}
	remote, err := intervalElements("remote", s.Remote)
	if err != nil {
		return hostSNATRuleset{}, err
	}
	pods, err := intervalElements("pod", s.PodCIDRs)
	if err != nil {
		return hostSNATRuleset{}, err
	}
	return hostSNATRuleset{external: ip, remote: remote, pods: pods, bypass: s.MasqueradeBypass}, nil
}

// ipv4Range is the addresses first to last, both included.
type ipv4Range struct{ first, last uint32 }

// intervalElements turns prefixes into the elements of an nftables interval set: the union
// of the prefixes as disjoint, non-adjacent ranges, each a start element and an end element
// one past its last address (none when it runs to 255.255.255.255), sorted by key. kind
// names the prefixes in errors.
func intervalElements(kind string, prefixes []netip.Prefix) ([]nftables.SetElement, error) {
	ranges := make([]ipv4Range, 0, len(prefixes))
	for _, p := range prefixes {
		if !p.IsValid() {
			return nil, fmt.Errorf("host SNAT: %s CIDR %q is invalid", kind, p.String())
		}
		if !p.Addr().Is4() {
			return nil, fmt.Errorf("host SNAT: %s CIDR %s is not IPv4", kind, p)
		}
		first := binary.BigEndian.Uint32(p.Masked().Addr().AsSlice())
		ranges = append(ranges, ipv4Range{first, first | ^uint32(0)>>p.Bits()})
	}
	slices.SortFunc(ranges, func(a, b ipv4Range) int { return cmp.Compare(a.first, b.first) })
	var merged []ipv4Range
	for _, r := range ranges {
		if n := len(merged); n > 0 && (merged[n-1].last == math.MaxUint32 || r.first <= merged[n-1].last+1) {
			merged[n-1].last = max(merged[n-1].last, r.last)
			continue
		}
		merged = append(merged, r)
	}
	var elems []nftables.SetElement
	for _, r := range merged {
		elems = append(elems, nftables.SetElement{Key: binary.BigEndian.AppendUint32(nil, r.first)})
		if r.last != math.MaxUint32 {
			elems = append(elems, nftables.SetElement{Key: binary.BigEndian.AppendUint32(nil, r.last+1), IntervalEnd: true})
		}
	}
	return elems, nil
}

// ourTable returns NFTable if it exists, or nil.
func ourTable(c *nftables.Conn) (*nftables.Table, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
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
func hostSNATTable() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyIPv4, Name: NFTable}
}

// nftChain is one chain of NFTable with its one rule.
type nftChain struct {
	chain   *nftables.Chain
	exprs   func(remoteID, podsID uint32) []expr.Any // refers to the sets by name and batch ID
	comment string
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

// chains are the chains want puts in table t:
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
	if want.bypass {
		out = append(out, nftChain{postroutingChain(t, nftChainBypass, nftables.ChainTypeNAT, nftables.ChainPriorityRef(*nftables.ChainPriorityNATSource-10)),
			bypassExprs, nftBypassComment})
	}
	return append(out,
		nftChain{postroutingChain(t, nftChainPostrouting, nftables.ChainTypeNAT, nftables.ChainPriorityNATSource), want.exprs, nftRuleComment},
		nftChain{postroutingChain(t, nftChainWatch, nftables.ChainTypeFilter, nftables.ChainPriorityRef(*nftables.ChainPriorityNATSource+100)),
			want.watchExprs, nftWatchComment})
}

func hostSNATSets(t *nftables.Table) (remote, pods *nftables.Set) {
	// Explicit IDs (they only need to be unique within the batch): with ID 0, AddSet would
	// allocate one from a global counter that is not safe for concurrent use.
	remote = &nftables.Set{Table: t, ID: 1, Name: nftSetRemote, KeyType: nftables.TypeIPAddr, Interval: true}
	pods = &nftables.Set{Table: t, ID: 2, Name: nftSetPods, KeyType: nftables.TypeIPAddr, Interval: true}
	return remote, pods
}

// Loads of the IPv4 header's source and destination addresses into register 1.
func loadSaddr() expr.Any {
	return &expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}
}

func loadDaddr() expr.Any {
	return &expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}
}

// exprs is the rule "ip daddr @remote ip saddr != @pods snat to external"; it refers to the
// sets by name and by the IDs they have in the batch that creates them.
func (want hostSNATRuleset) exprs(remoteID, podsID uint32) []expr.Any {
	return []expr.Any{
		loadDaddr(),
		&expr.Lookup{SourceRegister: 1, SetName: nftSetRemote, SetID: remoteID},
		loadSaddr(),
		&expr.Lookup{SourceRegister: 1, SetName: nftSetPods, SetID: podsID, Invert: true},
		&expr.Immediate{Register: 1, Data: want.external.AsSlice()},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1},
	}
}

// bypassExprs is "ip daddr @remote ip saddr @pods snat to ip saddr": a NAT binding that
// changes nothing, after which the kernel runs no other source NAT rule for the connection.
func bypassExprs(remoteID, podsID uint32) []expr.Any {
	return []expr.Any{
		loadDaddr(),
		&expr.Lookup{SourceRegister: 1, SetName: nftSetRemote, SetID: remoteID},
		loadSaddr(),
		&expr.Lookup{SourceRegister: 1, SetName: nftSetPods, SetID: podsID},
		loadSaddr(),
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1},
	}
}

// Conntrack bits the watch rule tests (linux/netfilter/nf_conntrack_common.h).
const (
	ctStateNew   = 1 << 3 // NF_CT_STATE_BIT(IP_CT_NEW)
	ctStatusSNAT = 1 << 4 // IPS_SRC_NAT: set only when the source really changed
)

// watchExprs is "ct state new ct status snat ip daddr @remote ip saddr != EXTERNAL counter
// name masqueraded". Running after every NAT chain at the usual priorities, it sees what the
// NAT rules made of a connection's first packet: source-NATed, but not by skein's own rule
// (which gives host traffic the external address), so by another (the bypass's binding to
// itself does not set the status bit). It tests the translated source rather than the
// original one (ct original ip saddr @pods) because the nftables library cannot read back a
// ct expression with a direction, and a table it cannot read would be replaced, its counter
// reset, at every reconcile.
func (want hostSNATRuleset) watchExprs(remoteID, _ uint32) []expr.Any {
	bit := func(key expr.CtKey, mask uint32) []expr.Any {
		return []expr.Any{
			&expr.Ct{Register: 1, Key: key},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binary.NativeEndian.AppendUint32(nil, mask), Xor: binary.NativeEndian.AppendUint32(nil, 0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binary.NativeEndian.AppendUint32(nil, 0)},
		}
	}
	return slices.Concat(bit(expr.CtKeySTATE, ctStateNew), bit(expr.CtKeySTATUS, ctStatusSNAT), []expr.Any{
		loadDaddr(),
		&expr.Lookup{SourceRegister: 1, SetName: nftSetRemote, SetID: remoteID},
		loadSaddr(),
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: want.external.AsSlice()},
		&expr.Objref{Type: 1, Name: nftCounterMasq}, // NFT_OBJECT_COUNTER
	})
}

func masqCounter(t *nftables.Table) *nftables.CounterObj {
	return &nftables.CounterObj{Table: t, Name: nftCounterMasq}
}

func ruleComment(s string) []byte { return userdata.AppendString(nil, userdata.TypeComment, s) }

// replace queues the replacement of NFTable and sends it as one batch, which the kernel
// applies atomically or not at all.
func (want hostSNATRuleset) replace(c *nftables.Conn) error {
	t := hostSNATTable()
	// Adding first makes the delete succeed whether or not the table exists.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	remote, pods := hostSNATSets(t)
	if err := c.AddSet(remote, want.remote); err != nil {
		return fmt.Errorf("set %s: %w", remote.Name, err)
	}
	if err := c.AddSet(pods, want.pods); err != nil {
		return fmt.Errorf("set %s: %w", pods.Name, err)
	}
	c.AddObj(masqCounter(t))
	for _, ch := range want.chains(t) {
		c.AddRule(&nftables.Rule{Table: t, Chain: c.AddChain(ch.chain), Exprs: ch.exprs(remote.ID, pods.ID), UserData: ruleComment(ch.comment)})
	}
	return c.Flush()
}

// inPlace reports whether NFTable holds exactly want: its chains, the two sets with their
// elements, the counter and one rule per chain, and nothing else of these kinds.
func (want hostSNATRuleset) inPlace(c *nftables.Conn) (bool, error) {
	t, err := ourTable(c)
	if err != nil || t == nil {
		return false, err
	}

	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
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
	wantRemote, wantPods := hostSNATSets(t)
	if len(sets) != 2 {
		return false, nil
	}
	for _, set := range sets {
		var wantSet *nftables.Set
		var wantElems []nftables.SetElement
		switch set.Name {
		case wantRemote.Name:
			wantSet, wantElems = wantRemote, want.remote
		case wantPods.Name:
			wantSet, wantElems = wantPods, want.pods
		default:
			return false, nil
		}
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
	if len(objs) != 1 {
		return false, nil
	}
	if o, ok := objs[0].(*nftables.CounterObj); !ok || o.Name != nftCounterMasq {
		return false, nil
	}

	for _, w := range wantChains {
		rules, err := c.GetRules(t, w.chain)
		if err != nil {
			return false, fmt.Errorf("list rules of chain %s: %w", w.chain.Name, err)
		}
		// The kernel does not report set IDs (they only live within a batch).
		if len(rules) != 1 || !reflect.DeepEqual(rules[0].Exprs, w.exprs(0, 0)) || !bytes.Equal(rules[0].UserData, ruleComment(w.comment)) {
			return false, nil
		}
	}
	return true, nil
}

// MasqueradedConnections reads the counter of pod connections to remote clusters that
// another rule source-NATed (see HostSNAT), in the namespace netnsFd refers to (0: the
// calling thread's). ok is false when NFTable is not there. The count restarts from zero
// whenever EnsureHostSNAT replaces the table.
func MasqueradedConnections(netnsFd int) (n uint64, ok bool, err error) {
	c, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(netnsFd))
	if err != nil {
		return 0, false, fmt.Errorf("masquerade watch: open nftables netlink socket: %w", err)
	}
	defer c.CloseLasting()
	t, err := ourTable(c)
	if err != nil || t == nil {
		return 0, false, err
	}
	objs, err := c.GetObjects(t)
	if err != nil {
		return 0, false, fmt.Errorf("masquerade watch: read counter %s: %w", nftCounterMasq, err)
	}
	for _, o := range objs {
		if counter, isCounter := o.(*nftables.CounterObj); isCounter && counter.Name == nftCounterMasq {
			return counter.Packets, true, nil
		}
	}
	return 0, false, nil // a table of an older agent, without the counter: the next reconcile replaces it
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
	return t == nil || (t.Name == NFTable && t.Family == nftables.TableFamilyIPv4)
}

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
	nftSetRemote        = "remote"
	nftSetPods          = "pods"
	nftRuleComment      = "skein: host-network traffic to remote clusters leaves with the external CIDR address"
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
}

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
	return hostSNATRuleset{external: ip, remote: remote, pods: pods}, nil
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

func hostSNATChain(t *nftables.Table) *nftables.Chain {
	return &nftables.Chain{
		Table:    t,
		Name:     nftChainPostrouting,
		Type:     nftables.ChainTypeNAT,
		Hooknum:  nftables.ChainHookPostrouting,
		Priority: nftables.ChainPriorityNATSource,
		Policy:   new(nftables.ChainPolicyAccept),
	}
}

func hostSNATSets(t *nftables.Table) (remote, pods *nftables.Set) {
	// Explicit IDs (they only need to be unique within the batch): with ID 0, AddSet would
	// allocate one from a global counter that is not safe for concurrent use.
	remote = &nftables.Set{Table: t, ID: 1, Name: nftSetRemote, KeyType: nftables.TypeIPAddr, Interval: true}
	pods = &nftables.Set{Table: t, ID: 2, Name: nftSetPods, KeyType: nftables.TypeIPAddr, Interval: true}
	return remote, pods
}

// exprs is the rule "ip daddr @remote ip saddr != @pods snat to external"; it refers to the
// sets by name and by the IDs they have in the batch that creates them.
func (want hostSNATRuleset) exprs(remoteID, podsID uint32) []expr.Any {
	return []expr.Any{
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: nftSetRemote, SetID: remoteID},
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: nftSetPods, SetID: podsID, Invert: true},
		&expr.Immediate{Register: 1, Data: want.external.AsSlice()},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1},
	}
}

// hostSNATRuleUserData is the rule's comment, for whoever reads the ruleset with nft.
func hostSNATRuleUserData() []byte {
	return userdata.AppendString(nil, userdata.TypeComment, nftRuleComment)
}

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
	ch := c.AddChain(hostSNATChain(t))
	c.AddRule(&nftables.Rule{
		Table:    t,
		Chain:    ch,
		Exprs:    want.exprs(remote.ID, pods.ID),
		UserData: hostSNATRuleUserData(),
	})
	return c.Flush()
}

// inPlace reports whether NFTable holds exactly want: the one chain, the two sets with
// their elements and the one rule, and nothing else of these kinds.
func (want hostSNATRuleset) inPlace(c *nftables.Conn) (bool, error) {
	t, err := ourTable(c)
	if err != nil || t == nil {
		return false, err
	}

	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return false, fmt.Errorf("list chains: %w", err)
	}
	var ours []*nftables.Chain
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == NFTable {
			ours = append(ours, ch)
		}
	}
	wantChain := hostSNATChain(t)
	if len(ours) != 1 || !sameChain(ours[0], wantChain) {
		return false, nil
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

	rules, err := c.GetRules(t, wantChain)
	if err != nil {
		return false, fmt.Errorf("list rules of chain %s: %w", wantChain.Name, err)
	}
	// The kernel does not report set IDs (they only live within a batch).
	return len(rules) == 1 &&
		reflect.DeepEqual(rules[0].Exprs, want.exprs(0, 0)) &&
		bytes.Equal(rules[0].UserData, hostSNATRuleUserData()), nil
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

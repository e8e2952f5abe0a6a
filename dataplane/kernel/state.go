package kernel

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
)

// Table is the routing table that holds the routes to peer clusters (Liqo's number).
const Table = 18952

// DefaultRulePriority is the priority of the `to <cidr> lookup 18952` rules: after the local
// table (0), before main (32766).
const DefaultRulePriority = 1900

// Overlay is the node's overlay device as the agent wants it.
type Overlay struct {
	Name string // liqo.vxlan
	Kind overlay.Kind
	VNI  uint32
	Port uint16
	// Local is the node's underlay address the device sends from (so the gateway recognises
	// the node's VTEP): IPv4, or IPv6 in an IPv6-only cluster.
	Local netip.Addr
	// Address is the device's overlay address with its prefix, such as 10.80.0.11/16.
	Address netip.Prefix
	// Address6 is the device's IPv6 overlay address with its prefix, such as
	// 64:ff9b:1::a50:b/96; zero: none. It is needed for IPv6 routes: their next hops (the
	// gateways' OverlayIP6) are on its network.
	Address6 netip.Prefix
	MTU      int
	// MAC of the device; zero lets the kernel pick one. A MAC derived from the node keeps
	// the node's VTEP the same when the device is recreated.
	MAC packet.MAC
}

// Peer is a peering's active gateway as the node reaches it over the overlay.
type Peer struct {
	// OverlayIP and MAC are the gateway's overlay address and MAC; VTEP is the active gateway
	// pod's IP, where the frames go. OverlayIP6 is the gateway's IPv6 overlay address, the
	// next hop of its IPv6 routes (zero: it has none).
	OverlayIP  netip.Addr
	OverlayIP6 netip.Addr
	MAC        packet.MAC
	VTEP       netip.Addr
	// Routes are the peer's CIDRs as this cluster sees them, routed via OverlayIP (IPv4) or
	// OverlayIP6 (IPv6).
	Routes []netip.Prefix
}

// Desired is everything the agent programs on a node.
type Desired struct {
	Overlay      Overlay
	Peers        []Peer
	RulePriority int // 0: DefaultRulePriority
}

// Link is what the agent reads of a link.
type Link struct {
	Name  string
	Alias string // IFLA_IFALIAS: OwnerAlias on the links skein-agent creates
	Kind  string // vxlan, geneve, ...
	VNI   uint32
	Port  uint16
	Local netip.Addr
	MTU   int
	MAC   packet.MAC
	Up    bool
	// Addrs are its addresses but the kernel's own IPv6 link-local ones.
	Addrs []netip.Prefix
}

// FDBEntry sends frames for MAC to the VTEP Dst.
type FDBEntry struct {
	MAC packet.MAC
	Dst netip.Addr
}

// Neigh is a permanent neighbour entry: IP is at MAC.
type Neigh struct {
	IP  netip.Addr
	MAC packet.MAC
}

// Route is `Dst via Via dev <overlay> onlink table 18952` (`ip -6 route` for IPv6).
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

// Rule is `to To lookup 18952 priority Priority` (`ip -6 rule` for IPv6).
type Rule struct {
	To       netip.Prefix
	Priority int
}

// Kernel is the agent's view of one network namespace: only the objects it manages. The real
// one (NewNetlink) speaks netlink; Fake records what would be done, as iproute2 commands.
type Kernel interface {
	// Link returns the named link, or nil when there is none.
	Link(name string) (*Link, error)
	// CreateOverlay creates the overlay device marked with OwnerAlias.
	CreateOverlay(o Overlay) error
	// SetAlias marks an existing link.
	SetAlias(name, alias string) error
	DeleteLink(name string) error
	SetLink(name string, mtu int, up bool) error
	AddAddr(link string, p netip.Prefix) error
	DelAddr(link string, p netip.Prefix) error
	// FDB lists the link's FDB entries that point at a remote VTEP.
	FDB(link string) ([]FDBEntry, error)
	// SetFDB points e.MAC at e.Dst, replacing where it pointed before (one change, so a
	// failover repoints without a gap).
	SetFDB(link string, e FDBEntry) error
	DelFDB(link string, e FDBEntry) error
	// Neighbors lists the link's permanent IPv4 and IPv6 neighbour entries.
	Neighbors(link string) ([]Neigh, error)
	SetNeigh(link string, n Neigh) error
	DelNeigh(link string, n Neigh) error
	// Routes lists the routes of Table, both families.
	Routes() ([]Route, error)
	AddRoute(link string, r Route) error
	DelRoute(link string, r Route) error
	// Rules lists the rules that look up Table, both families.
	Rules() ([]Rule, error)
	AddRule(r Rule) error
	DelRule(r Rule) error
	// SetRPFilter sets net.ipv4.conf.<link>.rp_filter.
	SetRPFilter(link string, value int) error
}

// Changes counts what a reconcile changed, by kind of object.
type Changes struct {
	Links, Addrs, FDB, Neighbors, Routes, Rules int
}

// Total is the number of changes.
func (c Changes) Total() int { return c.Links + c.Addrs + c.FDB + c.Neighbors + c.Routes + c.Rules }

// validate checks d before anything is touched.
func (d *Desired) validate() error {
	o := d.Overlay
	var errs []error
	if o.Name == "" || len(o.Name) > 15 {
		errs = append(errs, fmt.Errorf("overlay device name %q: want 1-15 characters", o.Name))
	}
	if o.Kind != overlay.VXLAN && o.Kind != overlay.Geneve {
		errs = append(errs, fmt.Errorf("overlay kind %v: want vxlan or geneve", o.Kind))
	}
	if o.VNI == 0 || o.VNI > packet.MaxVNI {
		errs = append(errs, fmt.Errorf("overlay VNI %d: want 1-%d", o.VNI, packet.MaxVNI))
	}
	if !o.Local.IsValid() || o.Local.Is4In6() || o.Local.Zone() != "" || o.Local.IsUnspecified() {
		errs = append(errs, fmt.Errorf("overlay: local %v must be the node's IPv4 or IPv6 underlay address", o.Local))
	}
	if !o.Address.Addr().Is4() {
		errs = append(errs, fmt.Errorf("overlay: address %v must be IPv4 (the overlay's addresses are, whatever the underlay)", o.Address))
	}
	if o.Address6.IsValid() && (!o.Address6.Addr().Is6() || o.Address6.Addr().Is4In6() || o.Address6.Addr().IsLinkLocalUnicast() || o.Address6.Addr().IsMulticast()) {
		errs = append(errs, fmt.Errorf("overlay: IPv6 address %v must be a unicast IPv6 address of global scope", o.Address6))
	}
	if o.MTU < 576 || o.MTU > 9000 {
		errs = append(errs, fmt.Errorf("overlay MTU %d: want 576-9000", o.MTU))
	}
	seen := map[netip.Prefix]netip.Addr{}
	for _, p := range d.Peers {
		if !p.OverlayIP.Is4() || !p.VTEP.IsValid() || p.VTEP.Is4In6() || p.VTEP.Is4() != o.Local.Is4() {
			errs = append(errs, fmt.Errorf("peer gateway %v at VTEP %v: want an IPv4 overlay address and a VTEP of the family of the node's underlay address %v", p.OverlayIP, p.VTEP, o.Local))
		}
		if !o.Address.Contains(p.OverlayIP) {
			errs = append(errs, fmt.Errorf("peer gateway %v is outside the overlay network %v", p.OverlayIP, o.Address.Masked()))
		}
		if p.OverlayIP6.IsValid() && (!p.OverlayIP6.Is6() || !o.Address6.Contains(p.OverlayIP6)) {
			errs = append(errs, fmt.Errorf("peer gateway %v: IPv6 overlay address %v is outside the overlay's IPv6 network %v", p.OverlayIP, p.OverlayIP6, o.Address6.Masked()))
		}
		for _, r := range p.Routes {
			if r.Addr().Is6() && !p.OverlayIP6.IsValid() {
				errs = append(errs, fmt.Errorf("remote CIDR %v of peer gateway %v: an IPv6 route needs the gateway's IPv6 overlay address", r, p.OverlayIP))
			}
			if other, ok := seen[r.Masked()]; ok && other != p.OverlayIP {
				errs = append(errs, fmt.Errorf("remote CIDR %v is routed to two gateways (%v and %v)", r, other, p.OverlayIP))
			}
			seen[r.Masked()] = p.OverlayIP
		}
	}
	return errors.Join(errs...)
}

// Reconcile makes the kernel hold exactly d: the overlay device with its address, MTU and loose
// reverse-path filtering; per peer an FDB entry (gateway MAC -> VTEP), a permanent neighbour
// (gateway overlay IP -> MAC), its routes in Table via the gateway, and a rule per route.
// What differs is changed, what is missing is added, what the agent owns but d does not hold
// is removed (FDB and neighbour entries on the device, routes in Table, rules to Table);
// nothing else is touched. Calling it again with the same d changes nothing.
func Reconcile(k Kernel, d Desired) (Changes, error) {
	var ch Changes
	if err := d.validate(); err != nil {
		return ch, err
	}
	o := d.Overlay
	prio := d.RulePriority
	if prio == 0 {
		prio = DefaultRulePriority
	}

	// The device: only ever one skein-agent created (a device of that name made before the
	// mark existed is marked now); recreated when its identity differs, which only a hand edit
	// causes.
	l, err := k.Link(o.Name)
	if err != nil {
		return ch, err
	}
	if l != nil {
		mine, legacy := owned(l, o.VNI)
		if !mine {
			return ch, foreign(l)
		}
		if legacy {
			if err := k.SetAlias(o.Name, OwnerAlias); err != nil {
				return ch, err
			}
			ch.Links++
		}
	}
	if l != nil && (l.Kind != o.Kind.String() || l.VNI != o.VNI || (o.Kind == overlay.VXLAN && (l.Port != o.Port || l.Local != o.Local))) {
		if err := k.DeleteLink(o.Name); err != nil {
			return ch, err
		}
		ch.Links++
		l = nil
	}
	if l == nil {
		if err := k.CreateOverlay(o); err != nil {
			return ch, err
		}
		ch.Links++
		if l, err = k.Link(o.Name); err != nil || l == nil {
			return ch, fmt.Errorf("overlay device %s: created but not found: %v", o.Name, err)
		}
	}
	if l.MTU != o.MTU || !l.Up {
		if err := k.SetLink(o.Name, o.MTU, true); err != nil {
			return ch, err
		}
		ch.Links++
	}
	for _, a := range []netip.Prefix{o.Address, o.Address6} {
		if a.IsValid() && !slices.Contains(l.Addrs, a) {
			if err := k.AddAddr(o.Name, a); err != nil {
				return ch, err
			}
			ch.Addrs++
		}
	}
	// Any other address the agent could have given the device goes (the kernel's IPv6
	// link-local one stays).
	for _, a := range l.Addrs {
		if a != o.Address && a != o.Address6 && !a.Addr().IsLinkLocalUnicast() {
			if err := k.DelAddr(o.Name, a); err != nil {
				return ch, err
			}
			ch.Addrs++
		}
	}
	if err := k.SetRPFilter(o.Name, 2); err != nil {
		return ch, err
	}

	// FDB and neighbours.
	var wantFDB []FDBEntry
	var wantNeigh []Neigh
	var wantRoutes []Route
	var wantRules []Rule
	for _, p := range d.Peers {
		wantFDB = append(wantFDB, FDBEntry{MAC: p.MAC, Dst: p.VTEP})
		wantNeigh = append(wantNeigh, Neigh{IP: p.OverlayIP, MAC: p.MAC})
		if p.OverlayIP6.IsValid() {
			wantNeigh = append(wantNeigh, Neigh{IP: p.OverlayIP6, MAC: p.MAC})
		}
		for _, r := range p.Routes {
			via := p.OverlayIP
			if r.Addr().Is6() {
				via = p.OverlayIP6
			}
			wantRoutes = append(wantRoutes, Route{Dst: r.Masked(), Via: via})
			wantRules = append(wantRules, Rule{To: r.Masked(), Priority: prio})
		}
	}
	haveFDB, err := k.FDB(o.Name)
	if err != nil {
		return ch, err
	}
	n, err := syncKeyed(haveFDB, wantFDB, func(e FDBEntry) packet.MAC { return e.MAC },
		func(e FDBEntry) error { return k.DelFDB(o.Name, e) }, func(e FDBEntry) error { return k.SetFDB(o.Name, e) })
	ch.FDB += n
	if err != nil {
		return ch, err
	}
	haveNeigh, err := k.Neighbors(o.Name)
	if err != nil {
		return ch, err
	}
	n, err = syncKeyed(haveNeigh, wantNeigh, func(e Neigh) netip.Addr { return e.IP },
		func(e Neigh) error { return k.DelNeigh(o.Name, e) }, func(e Neigh) error { return k.SetNeigh(o.Name, e) })
	ch.Neighbors += n
	if err != nil {
		return ch, err
	}
	haveRoutes, err := k.Routes()
	if err != nil {
		return ch, err
	}
	n, err = syncAll(haveRoutes, wantRoutes, func(r Route) error { return k.DelRoute(o.Name, r) }, func(r Route) error { return k.AddRoute(o.Name, r) })
	ch.Routes += n
	if err != nil {
		return ch, err
	}
	haveRules, err := k.Rules()
	if err != nil {
		return ch, err
	}
	n, err = syncAll(haveRules, wantRules, k.DelRule, k.AddRule)
	ch.Rules += n
	return ch, err
}

// syncAll deletes what is in have but not in want, then adds what is in want but not in have.
// Deleting first lets a changed entry (same key, new value) be replaced.
func syncAll[T comparable](have, want []T, del, add func(T) error) (int, error) {
	n := 0
	for _, h := range have {
		if !slices.Contains(want, h) {
			if err := del(h); err != nil {
				return n, err
			}
			n++
		}
	}
	for i, w := range want {
		if slices.Contains(want[:i], w) || slices.Contains(have, w) {
			continue
		}
		if err := add(w); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// syncKeyed is syncAll for entries identified by a key: an entry whose key is wanted with another
// value is replaced in one call (set), not deleted and added.
func syncKeyed[T comparable, K comparable](have, want []T, key func(T) K, del, set func(T) error) (int, error) {
	n := 0
	wanted := make(map[K]T, len(want))
	for _, w := range want {
		wanted[key(w)] = w
	}
	haveByKey := make(map[K]T, len(have))
	for _, h := range have {
		w, ok := wanted[key(h)]
		switch {
		case !ok:
			if err := del(h); err != nil {
				return n, err
			}
			n++
		case w == h:
			haveByKey[key(h)] = h
		}
	}
	for _, w := range want {
		if h, ok := haveByKey[key(w)]; ok && h == w {
			continue
		}
		if err := set(w); err != nil {
			return n, err
		}
		haveByKey[key(w)] = w
		n++
	}
	return n, nil
}

// Cleanup removes everything the agent creates: the rules to Table, the routes in Table and
// the overlay device (with its addresses, FDB and neighbour entries). It is safe to call when
// some or all of it is already gone.
func Cleanup(k Kernel, device string, vni uint32) error {
	var errs []error
	rules, err := k.Rules()
	errs = append(errs, err)
	for _, r := range rules {
		errs = append(errs, k.DelRule(r))
	}
	routes, err := k.Routes()
	errs = append(errs, err)
	for _, r := range routes {
		errs = append(errs, k.DelRoute(device, r))
	}
	if l, err := k.Link(device); err != nil {
		errs = append(errs, err)
	} else if l != nil {
		if mine, _ := owned(l, vni); mine {
			errs = append(errs, k.DeleteLink(device))
		} else {
			errs = append(errs, fmt.Errorf("not deleting it: %w", foreign(l)))
		}
	}
	return errors.Join(errs...)
}

// OwnerAlias is the alias (IFLA_IFALIAS, `ip link show` prints it) of the links skein-agent
// creates: it deletes or replaces no other.
const OwnerAlias = "skein-agent"

// ErrForeignLink means a link of the overlay device's name is not skein-agent's.
var ErrForeignLink = errors.New("a link skein-agent did not create")

// owned reports whether l is skein-agent's overlay device for vni: marked with OwnerAlias, or
// (legacy: created before the mark existed) an unmarked VXLAN or Geneve device of that VNI.
func owned(l *Link, vni uint32) (mine, legacy bool) {
	if l.Alias == OwnerAlias {
		return true, false
	}
	legacy = l.Alias == "" && (l.Kind == overlay.VXLAN.String() || l.Kind == overlay.Geneve.String()) && l.VNI == vni
	return legacy, legacy
}

func foreign(l *Link) error {
	return fmt.Errorf("%w: %s is a %s link (alias %q, VNI %d); skein-agent neither deletes nor replaces it: remove it, or give skein another --device name",
		ErrForeignLink, l.Name, l.Kind, l.Alias, l.VNI)
}

// Fake is an in-memory Kernel that records every change as the iproute2 command that would
// make it, for golden tests of what the agent does.
type Fake struct {
	mu     sync.Mutex
	Ops    []string
	links  map[string]*Link
	fdb    map[string][]FDBEntry
	neigh  map[string][]Neigh
	routes []Route
	rules  []Rule
	rpf    map[string]int
}

// NewFake returns an empty fake namespace.
func NewFake() *Fake {
	return &Fake{links: map[string]*Link{}, fdb: map[string][]FDBEntry{}, neigh: map[string][]Neigh{}, rpf: map[string]int{}}
}

func (f *Fake) op(format string, a ...any) { f.Ops = append(f.Ops, fmt.Sprintf(format, a...)) }

// six is iproute2's family flag for a: " -6" for IPv6, else nothing.
func six(a netip.Addr) string {
	if a.Is6() && !a.Is4In6() {
		return " -6"
	}
	return ""
}

// Script returns the recorded commands, one per line, and forgets them.
func (f *Fake) Script() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := strings.Join(f.Ops, "\n")
	f.Ops = nil
	if s != "" {
		s += "\n"
	}
	return s
}

func (f *Fake) Link(name string) (*Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return nil, nil
	}
	c := *l
	c.Addrs = slices.Clone(l.Addrs)
	return &c, nil
}

func (f *Fake) CreateOverlay(o Overlay) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o.Kind == overlay.Geneve {
		f.op("ip link add %s type geneve id %d dstport %d", o.Name, o.VNI, o.Port)
	} else {
		f.op("ip link add %s type vxlan id %d dstport %d local %s nolearning", o.Name, o.VNI, o.Port, o.Local)
	}
	f.op("ip link set %s alias %s", o.Name, OwnerAlias)
	mac := o.MAC
	if mac == (packet.MAC{}) {
		mac = packet.MAC{0x02, 0xfa, 0xce, 0, 0, 1}
	}
	f.links[o.Name] = &Link{Name: o.Name, Alias: OwnerAlias, Kind: o.Kind.String(), VNI: o.VNI, Port: o.Port, Local: o.Local, MTU: 1500, MAC: mac}
	return nil
}

func (f *Fake) SetAlias(name, alias string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op("ip link set %s alias %s", name, alias)
	f.links[name].Alias = alias
	return nil
}

// AddLink puts a link into the fake namespace as something other than skein-agent would
// (a test's foreign or legacy device); it records no command.
func (f *Fake) AddLink(l Link) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.links[l.Name] = &l
}

func (f *Fake) DeleteLink(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op("ip link del %s", name)
	delete(f.links, name)
	delete(f.fdb, name)
	delete(f.neigh, name)
	f.routes = nil // routes through the device go with it
	return nil
}

func (f *Fake) SetLink(name string, mtu int, up bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	state := "down"
	if up {
		state = "up"
	}
	f.op("ip link set %s mtu %d %s", name, mtu, state)
	f.links[name].MTU, f.links[name].Up = mtu, up
	return nil
}

func (f *Fake) AddAddr(link string, p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	nodad := ""
	if p.Addr().Is6() {
		nodad = " nodad"
	}
	f.op("ip addr add %s dev %s%s", p, link, nodad)
	f.links[link].Addrs = append(f.links[link].Addrs, p)
	return nil
}

func (f *Fake) DelAddr(link string, p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op("ip addr del %s dev %s", p, link)
	l := f.links[link]
	l.Addrs = slices.DeleteFunc(l.Addrs, func(a netip.Prefix) bool { return a == p })
	return nil
}

func (f *Fake) FDB(link string) ([]FDBEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.fdb[link]), nil
}

func (f *Fake) SetFDB(link string, e FDBEntry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op("bridge fdb replace %s dev %s dst %s", overlay.MACString(e.MAC), link, e.Dst)
	f.fdb[link] = append(slices.DeleteFunc(f.fdb[link], func(x FDBEntry) bool { return x.MAC == e.MAC }), e)
	return nil
}

func (f *Fake) DelFDB(link string, e FDBEntry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op("bridge fdb del %s dev %s dst %s", overlay.MACString(e.MAC), link, e.Dst)
	f.fdb[link] = slices.DeleteFunc(f.fdb[link], func(x FDBEntry) bool { return x == e })
	return nil
}

func (f *Fake) Neighbors(link string) ([]Neigh, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.neigh[link]), nil
}

func (f *Fake) SetNeigh(link string, n Neigh) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op("ip%s neigh replace %s lladdr %s dev %s nud permanent", six(n.IP), n.IP, overlay.MACString(n.MAC), link)
	f.neigh[link] = append(slices.DeleteFunc(f.neigh[link], func(x Neigh) bool { return x.IP == n.IP }), n)
	return nil
}

func (f *Fake) DelNeigh(link string, n Neigh) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op("ip%s neigh del %s dev %s", six(n.IP), n.IP, link)
	f.neigh[link] = slices.DeleteFunc(f.neigh[link], func(x Neigh) bool { return x == n })
	return nil
}

func (f *Fake) Routes() ([]Route, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.routes), nil
}

func (f *Fake) AddRoute(link string, r Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op("ip%s route add %s via %s dev %s onlink table %d", six(r.Via), r.Dst, r.Via, link, Table)
	f.routes = append(f.routes, r)
	return nil
}

func (f *Fake) DelRoute(link string, r Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op("ip%s route del %s via %s dev %s table %d", six(r.Via), r.Dst, r.Via, link, Table)
	f.routes = slices.DeleteFunc(f.routes, func(x Route) bool { return x == r })
	return nil
}

func (f *Fake) Rules() ([]Rule, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.rules), nil
}

func (f *Fake) AddRule(r Rule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op("ip%s rule add to %s lookup %d priority %d", six(r.To.Addr()), r.To, Table, r.Priority)
	f.rules = append(f.rules, r)
	return nil
}

func (f *Fake) DelRule(r Rule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op("ip%s rule del to %s lookup %d priority %d", six(r.To.Addr()), r.To, Table, r.Priority)
	f.rules = slices.DeleteFunc(f.rules, func(x Rule) bool { return x == r })
	return nil
}

func (f *Fake) SetRPFilter(link string, value int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rpf[link] != value {
		f.op("sysctl -w net.ipv4.conf.%s.rp_filter=%d", link, value)
		f.rpf[link] = value
	}
	return nil
}

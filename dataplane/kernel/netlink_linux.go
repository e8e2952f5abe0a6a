package kernel

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
)

// Netlink is the real Kernel: netlink requests to one network namespace.
type Netlink struct {
	h *netlink.Handle
	// inNS runs a function inside the namespace, for what netlink cannot reach (sysctls).
	inNS func(func() error) error
}

var _ Kernel = (*Netlink)(nil)

// NewNetlink returns a Kernel for the namespace open at nsPath (such as
// /var/run/netns/NAME), or for the calling process's namespace when nsPath is "". inNS runs a
// function inside that namespace (nil: run it directly, for the process's own namespace).
func NewNetlink(nsPath string, inNS func(func() error) error) (*Netlink, error) {
	var h *netlink.Handle
	var err error
	if nsPath == "" {
		h, err = netlink.NewHandle()
	} else {
		var ns netns.NsHandle
		if ns, err = netns.GetFromPath(nsPath); err != nil {
			return nil, fmt.Errorf("network namespace %s: %w", nsPath, err)
		}
		defer ns.Close()
		h, err = netlink.NewHandleAt(ns)
	}
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	if inNS == nil {
		inNS = func(f func() error) error { return f() }
	}
	return &Netlink{h: h, inNS: inNS}, nil
}

// Close releases the netlink sockets.
func (n *Netlink) Close() { n.h.Close() }

func (n *Netlink) link(name string) (netlink.Link, error) {
	l, err := n.h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", name, err)
	}
	return l, nil
}

func (n *Netlink) Link(name string) (*Link, error) {
	l, err := n.h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, nil
		}
		return nil, fmt.Errorf("link %s: %w", name, err)
	}
	a := l.Attrs()
	out := &Link{Name: a.Name, Alias: a.Alias, Kind: l.Type(), MTU: a.MTU, Up: a.Flags&net.FlagUp != 0}
	if len(a.HardwareAddr) == 6 {
		out.MAC = packet.MAC(a.HardwareAddr)
	}
	switch v := l.(type) {
	case *netlink.Vxlan:
		out.VNI, out.Port = uint32(v.VxlanId), uint16(v.Port)
		if ip, ok := netip.AddrFromSlice(v.SrcAddr); ok {
			out.Local = ip.Unmap()
		}
	case *netlink.Geneve:
		out.VNI, out.Port = v.ID, v.Dport
	}
	addrs, err := n.h.AddrList(l, unix.AF_UNSPEC)
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", name, err)
	}
	for _, ad := range addrs {
		ip, _ := netip.AddrFromSlice(ad.IP)
		if ip.Is6() && !ip.Is4In6() && ip.IsLinkLocalUnicast() {
			continue // the kernel's own (IPv6 autoconfiguration), never the agent's
		}
		ones, _ := ad.Mask.Size()
		out.Addrs = append(out.Addrs, netip.PrefixFrom(ip.Unmap(), ones))
	}
	return out, nil
}

func (n *Netlink) CreateOverlay(o Overlay) error {
	attrs := netlink.LinkAttrs{Name: o.Name, MTU: o.MTU}
	if o.MAC != (packet.MAC{}) {
		attrs.HardwareAddr = net.HardwareAddr(o.MAC[:])
	}
	var l netlink.Link
	switch o.Kind {
	case overlay.VXLAN:
		l = &netlink.Vxlan{LinkAttrs: attrs, VxlanId: int(o.VNI), Port: int(o.Port), SrcAddr: o.Local.AsSlice(), Learning: false}
	case overlay.Geneve:
		l = &netlink.Geneve{LinkAttrs: attrs, ID: o.VNI, Dport: o.Port}
	default:
		return fmt.Errorf("overlay device %s: kind %v", o.Name, o.Kind)
	}
	if err := n.h.LinkAdd(l); err != nil {
		if o.Kind == overlay.Geneve && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP)) {
			return fmt.Errorf("create %s: the kernel has no Geneve support (CONFIG_GENEVE, module geneve): %w", o.Name, err)
		}
		return fmt.Errorf("create overlay device %s (%s id %d port %d local %s): %w", o.Name, o.Kind, o.VNI, o.Port, o.Local, err)
	}
	return n.SetAlias(o.Name, OwnerAlias)
}

func (n *Netlink) SetAlias(name, alias string) error {
	l, err := n.link(name)
	if err != nil {
		return err
	}
	if err := n.h.LinkSetAlias(l, alias); err != nil {
		return fmt.Errorf("set the alias of %s: %w", name, err)
	}
	return nil
}

func (n *Netlink) DeleteLink(name string) error {
	l, err := n.link(name)
	if err != nil {
		return err
	}
	if err := n.h.LinkDel(l); err != nil {
		return fmt.Errorf("delete link %s: %w", name, err)
	}
	return nil
}

func (n *Netlink) SetLink(name string, mtu int, up bool) error {
	l, err := n.link(name)
	if err != nil {
		return err
	}
	if l.Attrs().MTU != mtu {
		if err := n.h.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("set MTU %d on %s: %w", mtu, name, err)
		}
	}
	if up {
		err = n.h.LinkSetUp(l)
	} else {
		err = n.h.LinkSetDown(l)
	}
	if err != nil {
		return fmt.Errorf("set %s up=%v: %w", name, up, err)
	}
	return nil
}

// toAddr is p as an address to add or delete. An IPv6 one skips duplicate address detection
// (`ip addr add ... nodad`): the controller hands out the overlay's addresses, and the
// detection's probes over the overlay reach nobody (its FDB has no flood entry).
func toAddr(p netip.Prefix) *netlink.Addr {
	a := &netlink.Addr{IPNet: ipNet(p)}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

func (n *Netlink) AddAddr(link string, p netip.Prefix) error {
	l, err := n.link(link)
	if err != nil {
		return err
	}
	if err := n.h.AddrAdd(l, toAddr(p)); err != nil {
		return fmt.Errorf("add address %s to %s: %w", p, link, err)
	}
	return nil
}

func (n *Netlink) DelAddr(link string, p netip.Prefix) error {
	l, err := n.link(link)
	if err != nil {
		return err
	}
	if err := n.h.AddrDel(l, toAddr(p)); err != nil {
		return fmt.Errorf("delete address %s from %s: %w", p, link, err)
	}
	return nil
}

func (n *Netlink) FDB(link string) ([]FDBEntry, error) {
	l, err := n.link(link)
	if err != nil {
		return nil, err
	}
	entries, err := n.h.NeighList(l.Attrs().Index, unix.AF_BRIDGE)
	if err != nil {
		return nil, fmt.Errorf("FDB of %s: %w", link, err)
	}
	var out []FDBEntry
	for _, e := range entries {
		ip, ok := netip.AddrFromSlice(e.IP)
		if !ok || len(e.HardwareAddr) != 6 {
			continue // the device's own address and other local entries
		}
		out = append(out, FDBEntry{MAC: packet.MAC(e.HardwareAddr), Dst: ip.Unmap()})
	}
	return out, nil
}

func (n *Netlink) fdbNeigh(link string, e FDBEntry) (*netlink.Neigh, error) {
	l, err := n.link(link)
	if err != nil {
		return nil, err
	}
	return &netlink.Neigh{
		LinkIndex:    l.Attrs().Index,
		Family:       unix.AF_BRIDGE,
		Flags:        netlink.NTF_SELF,
		State:        netlink.NUD_PERMANENT | netlink.NUD_NOARP,
		IP:           e.Dst.AsSlice(),
		HardwareAddr: net.HardwareAddr(e.MAC[:]),
	}, nil
}

func (n *Netlink) SetFDB(link string, e FDBEntry) error {
	nb, err := n.fdbNeigh(link, e)
	if err != nil {
		return err
	}
	if err := n.h.NeighSet(nb); err != nil {
		return fmt.Errorf("set FDB entry %s dst %s on %s: %w", overlay.MACString(e.MAC), e.Dst, link, err)
	}
	return nil
}

func (n *Netlink) DelFDB(link string, e FDBEntry) error {
	nb, err := n.fdbNeigh(link, e)
	if err != nil {
		return err
	}
	if err := n.h.NeighDel(nb); err != nil {
		return fmt.Errorf("delete FDB entry %s dst %s on %s: %w", overlay.MACString(e.MAC), e.Dst, link, err)
	}
	return nil
}

func (n *Netlink) Neighbors(link string) ([]Neigh, error) {
	l, err := n.link(link)
	if err != nil {
		return nil, err
	}
	entries, err := n.h.NeighList(l.Attrs().Index, unix.AF_INET)
	if err != nil {
		return nil, fmt.Errorf("neighbours of %s: %w", link, err)
	}
	entries6, err := n.h.NeighList(l.Attrs().Index, unix.AF_INET6)
	if err != nil && !noIPv6(err) {
		return nil, fmt.Errorf("IPv6 neighbours of %s: %w", link, err)
	}
	var out []Neigh
	for _, e := range append(entries, entries6...) {
		ip, ok := netip.AddrFromSlice(e.IP)
		if !ok || e.State&netlink.NUD_PERMANENT == 0 || len(e.HardwareAddr) != 6 {
			continue
		}
		out = append(out, Neigh{IP: ip.Unmap(), MAC: packet.MAC(e.HardwareAddr)})
	}
	return out, nil
}

func (n *Netlink) neigh(link string, e Neigh) (*netlink.Neigh, error) {
	l, err := n.link(link)
	if err != nil {
		return nil, err
	}
	return &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: family(e.IP), State: netlink.NUD_PERMANENT,
		IP: e.IP.AsSlice(), HardwareAddr: net.HardwareAddr(e.MAC[:])}, nil
}

// noIPv6 reports whether err says the kernel has no IPv6 (booted with ipv6.disable=1): there
// is then no IPv6 state to list, and an IPv4-only agent carries on.
func noIPv6(err error) bool {
	return errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EPROTONOSUPPORT)
}

// family is a's address family (AF_INET or AF_INET6).
func family(a netip.Addr) int {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// ipNet is p as the netlink package takes it.
func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func (n *Netlink) SetNeigh(link string, e Neigh) error {
	nb, err := n.neigh(link, e)
	if err != nil {
		return err
	}
	if err := n.h.NeighSet(nb); err != nil {
		return fmt.Errorf("set neighbour %s lladdr %s on %s: %w", e.IP, overlay.MACString(e.MAC), link, err)
	}
	return nil
}

func (n *Netlink) DelNeigh(link string, e Neigh) error {
	nb, err := n.neigh(link, e)
	if err != nil {
		return err
	}
	if err := n.h.NeighDel(nb); err != nil {
		return fmt.Errorf("delete neighbour %s on %s: %w", e.IP, link, err)
	}
	return nil
}

func (n *Netlink) Routes() ([]Route, error) {
	rs, err := n.h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: Table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("routes of table %d: %w", Table, err)
	}
	rs6, err := n.h.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Table: Table}, netlink.RT_FILTER_TABLE)
	if err != nil && !noIPv6(err) {
		return nil, fmt.Errorf("IPv6 routes of table %d: %w", Table, err)
	}
	var out []Route
	for _, r := range append(rs, rs6...) {
		if r.Dst == nil {
			continue
		}
		ip, _ := netip.AddrFromSlice(r.Dst.IP)
		ones, _ := r.Dst.Mask.Size()
		gw, _ := netip.AddrFromSlice(r.Gw)
		out = append(out, Route{Dst: netip.PrefixFrom(ip.Unmap(), ones), Via: gw.Unmap()})
	}
	return out, nil
}

func (n *Netlink) route(link string, r Route) (*netlink.Route, error) {
	nr := &netlink.Route{
		Table: Table,
		Dst:   ipNet(r.Dst),
		Gw:    r.Via.AsSlice(),
		Flags: int(netlink.FLAG_ONLINK),
	}
	if link != "" {
		l, err := n.link(link)
		if err != nil {
			return nil, err
		}
		nr.LinkIndex = l.Attrs().Index
	}
	return nr, nil
}

func (n *Netlink) AddRoute(link string, r Route) error {
	nr, err := n.route(link, r)
	if err != nil {
		return err
	}
	if err := n.h.RouteAdd(nr); err != nil {
		return fmt.Errorf("add route %s via %s dev %s table %d: %w", r.Dst, r.Via, link, Table, err)
	}
	return nil
}

func (n *Netlink) DelRoute(link string, r Route) error {
	// The route is identified by destination and table; the device may already be gone.
	nr := &netlink.Route{Table: Table, Dst: ipNet(r.Dst)}
	if err := n.h.RouteDel(nr); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("delete route %s table %d: %w", r.Dst, Table, err)
	}
	return nil
}

func (n *Netlink) Rules() ([]Rule, error) {
	rs, err := n.h.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	rs6, err := n.h.RuleList(netlink.FAMILY_V6)
	if err != nil && !noIPv6(err) {
		return nil, fmt.Errorf("IPv6 rules: %w", err)
	}
	var out []Rule
	for _, r := range append(rs, rs6...) {
		if r.Table != Table || r.Dst == nil {
			continue
		}
		ip, _ := netip.AddrFromSlice(r.Dst.IP)
		ones, _ := r.Dst.Mask.Size()
		out = append(out, Rule{To: netip.PrefixFrom(ip.Unmap(), ones), Priority: r.Priority})
	}
	return out, nil
}

func (n *Netlink) rule(r Rule) *netlink.Rule {
	nr := netlink.NewRule()
	nr.Family = family(r.To.Addr())
	nr.Table = Table
	nr.Priority = r.Priority
	nr.Dst = ipNet(r.To)
	return nr
}

func (n *Netlink) AddRule(r Rule) error {
	if err := n.h.RuleAdd(n.rule(r)); err != nil {
		return fmt.Errorf("add rule to %s lookup %d priority %d: %w", r.To, Table, r.Priority, err)
	}
	return nil
}

func (n *Netlink) DelRule(r Rule) error {
	if err := n.h.RuleDel(n.rule(r)); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete rule to %s lookup %d priority %d: %w", r.To, Table, r.Priority, err)
	}
	return nil
}

// ipv4DevconfRPFilter is IPV4_DEVCONF_RP_FILTER, the index of rp_filter in a device's IPv4
// configuration (include/uapi/linux/ip.h).
const ipv4DevconfRPFilter = 8

// SetRPFilter sets the link's rp_filter through netlink (RTM_SETLINK with IFLA_AF_SPEC ->
// AF_INET -> IFLA_INET_CONF), like "sysctl -w net.ipv4.conf.LINK.rp_filter=VALUE" but without
// writing /proc/sys, which container runtimes mount read-only for unprivileged containers: it
// needs only CAP_NET_ADMIN. The current value is read from /proc/sys (reading is allowed).
func (n *Netlink) SetRPFilter(link string, value int) error {
	path := "/proc/sys/net/ipv4/conf/" + link + "/rp_filter"
	return n.inNS(func() error {
		cur, err := os.ReadFile(path)
		if err == nil && string(cur) == strconv.Itoa(value)+"\n" {
			return nil
		}
		l, err := netlink.LinkByName(link)
		if err != nil {
			return fmt.Errorf("set rp_filter of %s: %w", link, err)
		}
		req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
		msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
		msg.Index = int32(l.Attrs().Index)
		req.AddData(msg)
		spec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
		conf := spec.AddRtAttr(unix.AF_INET, nil).AddRtAttr(unix.IFLA_INET_CONF, nil)
		conf.AddRtAttr(ipv4DevconfRPFilter, nl.Uint32Attr(uint32(value)))
		req.AddData(spec)
		if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
			return fmt.Errorf("set rp_filter of %s to %d: %w", link, value, err)
		}
		return nil
	})
}

// InNamespace returns a function that runs f on an OS thread switched into the network
// namespace at path (for what netlink cannot reach, such as sysctls). The thread is not reused
// if switching back fails.
func InNamespace(path string) func(func() error) error {
	return func(f func() error) error {
		target, err := os.Open(path)
		if err != nil {
			return err
		}
		defer target.Close()
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			orig, err := os.Open("/proc/thread-self/ns/net")
			if err != nil {
				errc <- err
				return
			}
			defer orig.Close()
			if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
				errc <- fmt.Errorf("setns %s: %w", path, err)
				return
			}
			ferr := f()
			if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
				errc <- fmt.Errorf("setns back from %s: %w", path, err)
				return
			}
			runtime.UnlockOSThread()
			errc <- ferr
		}()
		return <-errc
	}
}

// Monitor calls changed whenever a route of Table, a link or a neighbour entry changes in the
// namespace at nsPath ("" for the process's own), until done is closed, so that drift (such as
// a route deleted by hand) is repaired at once rather than at the next resync. It returns once
// subscribed. Rules have no notification here; the resync covers them.
func Monitor(nsPath string, changed func(), done <-chan struct{}) error {
	var nsh *netns.NsHandle
	if nsPath != "" {
		h, err := netns.GetFromPath(nsPath)
		if err != nil {
			return fmt.Errorf("network namespace %s: %w", nsPath, err)
		}
		nsh = &h
		go func() { <-done; h.Close() }()
	}
	routes := make(chan netlink.RouteUpdate, 64)
	links := make(chan netlink.LinkUpdate, 64)
	neighs := make(chan netlink.NeighUpdate, 64)
	if err := netlink.RouteSubscribeWithOptions(routes, done, netlink.RouteSubscribeOptions{Namespace: nsh}); err != nil {
		return fmt.Errorf("subscribe to routes: %w", err)
	}
	if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{Namespace: nsh}); err != nil {
		return fmt.Errorf("subscribe to links: %w", err)
	}
	if err := netlink.NeighSubscribeWithOptions(neighs, done, netlink.NeighSubscribeOptions{Namespace: nsh}); err != nil {
		return fmt.Errorf("subscribe to neighbours: %w", err)
	}
	rules, err := subscribeRules(nsh, done)
	if err != nil {
		return err
	}
	nft, err := monitorNFTables(nsPath, done)
	if err != nil {
		return err
	}
	go func() {
		for {
			select {
			case <-done:
				return
			case <-rules:
				changed()
			case <-nft:
				changed()
			case u, ok := <-routes:
				if !ok {
					return
				}
				if u.Table == Table {
					changed()
				}
			case _, ok := <-links:
				if !ok {
					return
				}
				changed()
			case u, ok := <-neighs:
				if !ok {
					return
				}
				// Ours are permanent neighbours and FDB entries; ARP churn elsewhere is not.
				if u.State&netlink.NUD_PERMANENT != 0 || u.Family == unix.AF_BRIDGE {
					changed()
				}
			}
		}
	}()
	return nil
}

// subscribeRules reports every change of the namespace's IPv4 and IPv6 policy rules (vishvananda's
// netlink has no rule subscription): a rule to table 18952 deleted by hand is then repaired at
// once, like a route, instead of at the next resync.
func subscribeRules(nsh *netns.NsHandle, done <-chan struct{}) (<-chan struct{}, error) {
	var sock *nl.NetlinkSocket
	var err error
	if nsh != nil {
		cur, cerr := netns.Get()
		if cerr != nil {
			return nil, fmt.Errorf("subscribe to rules: %w", cerr)
		}
		defer cur.Close()
		sock, err = nl.SubscribeAt(*nsh, cur, unix.NETLINK_ROUTE, unix.RTNLGRP_IPV4_RULE, unix.RTNLGRP_IPV6_RULE)
	} else {
		sock, err = nl.Subscribe(unix.NETLINK_ROUTE, unix.RTNLGRP_IPV4_RULE, unix.RTNLGRP_IPV6_RULE)
	}
	if err != nil {
		return nil, fmt.Errorf("subscribe to rules: %w", err)
	}
	out := make(chan struct{}, 1)
	go func() { <-done; sock.Close() }()
	go func() {
		for {
			msgs, _, err := sock.Receive()
			if err != nil {
				return // closed
			}
			for _, m := range msgs {
				if m.Header.Type == unix.RTM_NEWRULE || m.Header.Type == unix.RTM_DELRULE {
					select {
					case out <- struct{}{}:
					default: // one pending notice is enough
					}
				}
			}
		}
	}()
	return out, nil
}

// RouteGet says where this namespace sends a packet to dst, its policy rules included (`ip
// route get`): the output device and the routing table of the route that matched.
func (n *Netlink) RouteGet(dst netip.Addr) (dev string, table int, err error) {
	rs, err := n.h.RouteGet(dst.AsSlice())
	if err != nil {
		return "", 0, fmt.Errorf("ip route get %s: %w", dst, err)
	}
	if len(rs) == 0 {
		return "", 0, fmt.Errorf("ip route get %s: no route", dst)
	}
	l, err := n.h.LinkByIndex(rs[0].LinkIndex)
	if err != nil {
		return "", rs[0].Table, fmt.Errorf("ip route get %s: device %d: %w", dst, rs[0].LinkIndex, err)
	}
	return l.Attrs().Name, rs[0].Table, nil
}

// LocalNetworks lists the IPv4 and IPv6 networks this namespace's links have addresses in (an
// address 192.168.10.20/24 gives 192.168.10.0/24; a /32 gives itself; IPv6 link-local ones
// are left out), leaving out loopback and the
// links named in skip (the overlay device). A peer's CIDR that overlaps one would send the
// node's traffic to its own neighbours (a DNS resolver, the API server, the other nodes) into
// the tunnel.
func (n *Netlink) LocalNetworks(skip ...string) ([]netip.Prefix, error) {
	links, err := n.h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []netip.Prefix
	for _, l := range links {
		a := l.Attrs()
		if a.Flags&net.FlagLoopback != 0 || slices.Contains(skip, a.Name) {
			continue
		}
		addrs, err := n.h.AddrList(l, unix.AF_UNSPEC)
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", a.Name, err)
		}
		for _, ad := range addrs {
			ip, ok := netip.AddrFromSlice(ad.IP)
			if !ok || ip.Is6() && !ip.Is4In6() && ip.IsLinkLocalUnicast() {
				continue // fe80::/10 is forbidden to peers anyway
			}
			ones, _ := ad.Mask.Size()
			out = append(out, netip.PrefixFrom(ip.Unmap(), ones).Masked())
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return slices.Compact(out), nil
}

// RuleBefore finds the policy rule that sends dst to table ahead of skein's rules (priority
// below before): the lowest-priority rule looking up table whose destination, if it has one,
// holds dst. It returns its priority and `ip rule` style text, or ok false.
func (n *Netlink) RuleBefore(dst netip.Addr, table, before int) (priority int, text string, ok bool, err error) {
	rs, err := n.h.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return 0, "", false, fmt.Errorf("rules: %w", err)
	}
	slices.SortFunc(rs, func(a, b netlink.Rule) int { return a.Priority - b.Priority })
	for _, r := range rs {
		if r.Table != table || r.Priority >= before {
			continue
		}
		if r.Dst != nil {
			ip, _ := netip.AddrFromSlice(r.Dst.IP)
			ones, _ := r.Dst.Mask.Size()
			if !netip.PrefixFrom(ip.Unmap(), ones).Contains(dst) {
				continue
			}
		}
		return r.Priority, fmt.Sprintf("%d: %s lookup %s", r.Priority, ruleMatch(r), TableName(r.Table)), true, nil
	}
	return 0, "", false, nil
}

// ruleMatch is what a rule matches, as `ip rule` writes it.
func ruleMatch(r netlink.Rule) string {
	var parts []string
	if r.Src != nil {
		parts = append(parts, "from "+r.Src.String())
	} else {
		parts = append(parts, "from all")
	}
	if r.Dst != nil {
		parts = append(parts, "to "+r.Dst.String())
	}
	if r.IifName != "" {
		parts = append(parts, "iif "+r.IifName)
	}
	if r.OifName != "" {
		parts = append(parts, "oif "+r.OifName)
	}
	if r.Mark != 0 {
		parts = append(parts, fmt.Sprintf("fwmark %#x", r.Mark))
	}
	return strings.Join(parts, " ")
}

// TableName is a routing table's name as iproute2 writes it (main, local, default) or its number.
func TableName(t int) string {
	switch t {
	case unix.RT_TABLE_MAIN:
		return "main"
	case unix.RT_TABLE_LOCAL:
		return "local"
	case unix.RT_TABLE_DEFAULT:
		return "default"
	}
	return strconv.Itoa(t)
}

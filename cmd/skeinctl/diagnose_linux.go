package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/agent/plan"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/dataplane/overlay"
)

// diagnoseNode compares this machine's kernel with what skein-agent plans for the node (the
// same pure function of the API objects the agent runs, control/agent/plan) and checks where a
// packet to each peer CIDR really goes.
func (g *globals) diagnoseNode(ctx context.Context, r *report, cl client.Client, s *peerings, f nodeCheckFlags) {
	const check = "kernel"
	name := f.name
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			r.problem(check, "", "no --node-name and no hostname: "+err.Error(), "pass --node-name")
			return
		}
		name = h
	}
	if s == nil {
		r.problem(check, name, "the peerings could not be read (above)", "")
		return
	}
	var in netv1alpha1.InternalNode
	if err := cl.Get(ctx, client.ObjectKey{Name: name}, &in); err != nil {
		r.problem(check, name, "no InternalNode "+name+": "+err.Error(), "pass --node-name as Kubernetes calls this node (kubectl get nodes)")
		return
	}
	if in.Status.VTEP == nil {
		r.problem(check, name, "the agent has not published the node's VTEP in its InternalNode: it has not programmed this node yet", "kubectl logs of the skein-agent pod on "+name)
		return
	}
	ip, err := netip.ParseAddr(string(in.Status.VTEP.IP))
	if err != nil {
		r.problem(check, name, fmt.Sprintf("the InternalNode's VTEP IP %q does not parse", in.Status.VTEP.IP), "")
		return
	}
	n, err := identity.ReadNetwork(ctx, cl, g.liqoNamespace)
	if err != nil {
		r.problem(check, name, "the cluster's network parameters: "+err.Error(), "")
		return
	}
	inNS := func(fn func() error) error { return fn() }
	if f.netns != "" {
		inNS = kernel.InNamespace(f.netns)
	}
	k, err := kernel.NewNetlink(f.netns, inNS)
	if err != nil {
		r.problem(check, name, err.Error(), "run as root on the node (kubectl debug node/"+name+" --profile=sysadmin, or ssh)")
		return
	}
	defer k.Close()
	// The agent's own plan for the node, with the networks the node has addresses in as the
	// agent reads them.
	nets, err := k.LocalNetworks(f.device)
	if err != nil {
		r.problem(check, name, err.Error(), "")
		return
	}
	pn := plan.Node{Name: name, IP: ip, InternalCIDR: n.InternalCIDR, PodCIDRs: n.PodCIDRs, Device: f.device, Kind: overlay.VXLAN, LocalNetworks: nets}
	// Every node's InternalNode too: the agent relays through a node only when its
	// InternalNode publishes the endpoint the gateway names, and guards the overlay by them.
	var nodes netv1alpha1.InternalNodeList
	if err := cl.List(ctx, &nodes); err != nil {
		r.problem(check, name, "the InternalNodes: "+err.Error(), "")
		return
	}
	p, err := plan.FromObjects(pn, plan.Objects{InternalNode: &in, Nodes: nodes.Items, Configurations: s.confs.Items, Servers: s.servers.Items, Clients: s.clients.Items})
	if err != nil {
		r.problem(check, name, "what the agent would program: "+err.Error(), "")
		return
	}
	agentLogs := "the skein-agent pod's log on " + name + " (kubectl -n " + g.liqoNamespace + " logs POD)"

	l, err := k.Link(f.device)
	switch {
	case err != nil:
		r.problem(check, name, err.Error(), "")
		return
	case len(p.Kernel.Peers) == 0 && l == nil:
		r.ok(check, name, "no active peering and no overlay device "+f.device+", as it should be")
		return
	case len(p.Kernel.Peers) == 0:
		r.warn(check, name, "overlay device "+f.device+" present although no peering is active", "the agent removes it within its resync (10 s); if it stays: "+agentLogs)
		return
	case l == nil:
		hint := agentLogs
		if _, err := os.Stat("/sys/module/vxlan"); err != nil && f.netns == "" {
			hint = "the kernel's vxlan module is not loaded (modprobe vxlan); " + hint
		}
		r.problem(check, name, fmt.Sprintf("no overlay device %s although %d peering(s) are active", f.device, len(p.Kernel.Peers)), hint)
		return
	}
	var bad []string
	if l.Alias != kernel.OwnerAlias {
		bad = append(bad, fmt.Sprintf("its alias is %q, not %q: it is not skein-agent's", l.Alias, kernel.OwnerAlias))
	}
	if !l.Up {
		bad = append(bad, "it is down")
	}
	if !slices.Contains(l.Addrs, p.Kernel.Overlay.Address) {
		bad = append(bad, fmt.Sprintf("it lacks the node's overlay address %v (has %v)", p.Kernel.Overlay.Address, l.Addrs))
	}
	if len(bad) > 0 {
		r.problem(check, name, "overlay device "+f.device+": "+strings.Join(bad, "; "), agentLogs)
	} else {
		r.ok(check, name, fmt.Sprintf("overlay device %s up, %s, MTU %d, address %v", f.device, l.Kind, l.MTU, p.Kernel.Overlay.Address))
	}

	fdb, err1 := k.FDB(f.device)
	neigh, err2 := k.Neighbors(f.device)
	rules, err3 := k.Rules()
	routes, err4 := k.Routes()
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			r.problem(check, name, err.Error(), "")
			return
		}
	}
	for _, peer := range p.Kernel.Peers {
		subject := fmt.Sprintf("%s gateway %v", name, peer.OverlayIP)
		// Where this node sends the gateway's frames: the active replica, or the node it runs
		// on, which relays them (status.internalEndpoint.nodeVTEP).
		at := "the active replica"
		if pod := activeVTEP(s, peer.OverlayIP); pod.IsValid() && pod != peer.VTEP {
			at = "the active replica's node"
		}
		var problems []string
		if !slices.Contains(fdb, kernel.FDBEntry{MAC: peer.MAC, Dst: peer.VTEP}) {
			what := fmt.Sprintf("no forwarding entry for the gateway's MAC %s to %s at %v", overlay.MACString(peer.MAC), at, peer.VTEP)
			for _, e := range fdb {
				if e.MAC == peer.MAC {
					what = fmt.Sprintf("the forwarding entry for the gateway's MAC %s points at %v, not at %s %v", overlay.MACString(peer.MAC), e.Dst, at, peer.VTEP)
				}
			}
			problems = append(problems, what+" (bridge fdb show dev "+f.device+")")
		}
		if !slices.Contains(neigh, kernel.Neigh{IP: peer.OverlayIP, MAC: peer.MAC}) {
			problems = append(problems, fmt.Sprintf("neighbour entry %v -> %s missing (ip neigh show dev %s)", peer.OverlayIP, overlay.MACString(peer.MAC), f.device))
		}
		if peer.OverlayIP6.IsValid() && !slices.Contains(neigh, kernel.Neigh{IP: peer.OverlayIP6, MAC: peer.MAC}) {
			problems = append(problems, fmt.Sprintf("neighbour entry %v -> %s missing (ip -6 neigh show dev %s)", peer.OverlayIP6, overlay.MACString(peer.MAC), f.device))
		}
		var routed []string
		for _, cidr := range peer.Routes {
			// An IPv6 CIDR goes via the gateway's IPv6 overlay address (its IPv4 one inside
			// 64:ff9b:1::/96), and iproute2 shows it with -6.
			via, ip := peer.OverlayIP, "ip"
			if cidr.Addr().Is6() {
				via, ip = peer.OverlayIP6, "ip -6"
			}
			if !slices.ContainsFunc(rules, func(ru kernel.Rule) bool { return ru.To == cidr }) {
				problems = append(problems, fmt.Sprintf("no rule `to %v lookup %d` (%s rule)", cidr, kernel.Table, ip))
			}
			if !slices.Contains(routes, kernel.Route{Dst: cidr, Via: via}) {
				problems = append(problems, fmt.Sprintf("no route %v via %v in table %d (%s route show table %d)", cidr, via, kernel.Table, ip, kernel.Table))
			}
			probe := cidr.Addr() // a host of the CIDR: its first after the network address
			if cidr.Bits() < cidr.Addr().BitLen() {
				probe = probe.Next()
			}
			dev, table, err := k.RouteGet(probe)
			switch {
			case err != nil:
				problems = append(problems, err.Error())
			case dev != f.device:
				ours := kernel.DefaultRulePriority
				for _, ru := range rules {
					if ru.To == cidr {
						ours = ru.Priority
					}
				}
				detail := fmt.Sprintf("a packet to %v leaves through %s (routing table %s), not the overlay", probe, dev, kernel.TableName(table))
				hint := fmt.Sprintf("the agent cannot repair this: have the rule's owner (often the CNI) leave the peer's CIDR alone, or set the chart's agent.rulePriority below its priority (rules are looked up from the lowest number; skein's are at %d)", ours)
				if prio, text, ok, err := k.RuleBefore(probe, table, ours); err == nil && ok {
					detail += fmt.Sprintf(": the rule `%s` comes before skein's at %d", text, ours)
					hint = fmt.Sprintf("the agent cannot repair this: have the rule's owner (often the CNI) leave the peer's CIDR alone, or set the chart's agent.rulePriority to a number below %d (rules are looked up from the lowest number)", prio)
				} else if table != kernel.Table {
					detail += " (ip rule)"
				}
				r.problem(check, fmt.Sprintf("%s %v", name, cidr), detail, hint)
			default:
				routed = append(routed, cidr.String())
			}
		}
		if len(problems) > 0 {
			r.problem(check, subject, strings.Join(problems, "; "), "the agent repairs drift within its resync (10 s); if this stays: "+agentLogs)
		} else {
			r.ok(check, subject, fmt.Sprintf("%s routed through %s to %s at %v", strings.Join(routed, ", "), f.device, at, peer.VTEP))
		}
	}
	for _, why := range p.Refused {
		r.warn(check, name, "left unrouted: "+why, "a peer's CIDR covers this node's own traffic: the peer must use another CIDR, or this cluster a remapping")
	}

	fd := 0
	if f.netns != "" {
		nsf, err := os.Open(f.netns)
		if err != nil {
			r.problem(check, name, err.Error(), "")
			return
		}
		defer nsf.Close()
		fd = int(nsf.Fd())
	}
	masq, ok, err := kernel.MasqueradedConnections(fd)
	switch {
	case err != nil:
		r.warn(check, name, "nftables: "+err.Error(), "run as root (CAP_NET_ADMIN) to read skein-agent's nftables table")
	case !ok && p.SNAT != nil && len(p.SNAT.Remote) > 0: // (without Remote, an ip6 table holding the overlay's filter alone)
		r.problem(check, name, "no nftables table ip skein-agent (nor ip6 skein-agent): host-network traffic to the peers is not source-NATed to the node's external address", agentLogs)
	case ok && masq > 0:
		r.warn(check, name, fmt.Sprintf("%d pod connection(s) to peers left source-NATed by another rule since the table was made (nft list table ip skein-agent; ip6 skein-agent for IPv6)", masq),
			"the InternalNode's PodTrafficMasqueraded condition says whether it still happens; the chart's agent.masqueradeBypass=true stops it")
	case ok:
		r.ok(check, name, "nftables table skein-agent present (ip, ip6 or both: the families of the peers' CIDRs); no pod connection to peers source-NATed by another rule")
	}
	if err != nil || p.SNAT == nil || p.SNAT.Guard == nil {
		return
	}
	sender, source, guarded, err := kernel.GuardDrops(fd)
	switch {
	case err != nil:
		r.warn(check, name, "overlay guard: "+err.Error(), "")
	case !guarded:
		r.warn(check, name, "no overlay guard: "+f.device+" takes the overlay's frames from any sender, and anything that can send UDP to this node can inject packets into its pods",
			"the chart's agent.overlayGuard=true (the default) puts it in skein-agent's nftables tables; if it is set: "+agentLogs)
	case sender+source > 0:
		r.warn(check, name, fmt.Sprintf("the overlay guard dropped %d frame(s) from what is no node or gateway of the cluster (or forged, or sent by a pod) and %d packet(s) leaving %s from a source not routed back through it, since its table was made", sender, source, f.device),
			"an attempt to inject packets, or a node or gateway whose frames come from an address it did not publish (kubectl get internalnodes; the gateways' status.internalEndpoint.vtep); skein_agent_overlay_dropped_packets_total counts them")
	default:
		r.ok(check, name, "overlay guard on: nothing dropped since its table was made")
	}
}

// activeVTEP is the pod address of the active replica of the gateway whose overlay address is
// overlayIP (its status.internalEndpoint.vtep), the zero Addr when none is published.
func activeVTEP(ps *peerings, overlayIP netip.Addr) netip.Addr {
	var ies []*netv1alpha1.InternalEndpoint
	for _, g := range ps.servers.Items {
		ies = append(ies, g.Status.InternalEndpoint)
	}
	for _, g := range ps.clients.Items {
		ies = append(ies, g.Status.InternalEndpoint)
	}
	for _, ie := range ies {
		if ie == nil || ie.IP == nil || ie.VTEP == nil {
			continue
		}
		if ip, err := netip.ParseAddr(string(*ie.IP)); err == nil && ip == overlayIP {
			a, _ := netip.ParseAddr(string(ie.VTEP.IP))
			return a
		}
	}
	return netip.Addr{}
}

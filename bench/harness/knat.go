package harness

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// kernelNATRung is what a kernel-side gateway does (Liqo's userspace mode): the gateway
// namespace decapsulates the nodes' VXLAN in the kernel, NETMAPs the overlapping CIDRs with
// nftables (rules written with github.com/google/nftables) and forwards through stock
// wireguard-go on a TUN; the far side is the mirror image. Same sites as the skein rung.
type kernelNATRung struct {
	ns    []netns
	socks []string
}

func (r *kernelNATRung) Name() string { return "kernel-nat" }
func (r *kernelNATRung) Describe() string {
	return fmt.Sprintf("pod -> node (kernel VXLAN) -> gateway namespace: kernel VXLAN, nftables NETMAP, wireguard-go on TUN -> mirror; overlapping pod CIDRs; tunnel MTU %d", InnerMTU)
}

func (r *kernelNATRung) Up(e *Env) (*Path, error) {
	sites, made, err := buildSites(e, "knat", true, false)
	r.ns = append(r.ns, made...)
	if err != nil {
		return nil, err
	}
	p := &Path{Client: sites[0].pod, Server: sites[1].pod, Addr: serverAddr(sites, true)}
	real := netip.MustParsePrefix("10.244.0.0/16")
	for i, s := range sites {
		peer := sites[1-i]
		seen := netip.MustParsePrefix(map[int]string{0: "10.71.0.0/16", 1: "10.72.0.0/16"}[i]) // how this site sees the peer's pods
		dev := fmt.Sprintf("%skn%c", e.Prefix, "cs"[i])
		cmd, err := s.gw.start(e.Log, filepath.Join(e.Bin, "wireguard-go"), "-f", dev)
		if err != nil {
			return nil, err
		}
		p.Gateways = append(p.Gateways, cmd)
		sock := "/var/run/wireguard/" + dev + ".sock"
		r.socks = append(r.socks, sock)
		if err := waitFile(sock, 5*time.Second); err != nil {
			return nil, fmt.Errorf("wireguard-go %s: %w", dev, err)
		}
		keyFile := filepath.Join(e.Work, dev+".key")
		if err := os.WriteFile(keyFile, []byte(s.key+"\n"), 0o600); err != nil {
			return nil, err
		}
		for _, c := range [][]string{
			{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
			{"sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0"},
			{"sysctl", "-qw", "net.ipv4.conf.default.rp_filter=0"},
			{"wg", "set", dev, "private-key", keyFile, "listen-port", "51820",
				"peer", peer.pub, "allowed-ips", real.String(), "endpoint", peer.wan + ":51820"},
			{"ip", "link", "set", dev, "mtu", fmt.Sprint(InnerMTU), "up"},
			{"ip", "link", "add", "vxlan0", "address", s.gwMAC, "type", "vxlan", "id", "18952", "dstport", "4789", "local", s.under + ".2", "nolearning"},
			{"ip", "link", "set", "vxlan0", "mtu", "1450", "up"},
			{"ip", "addr", "add", "10.80.0.1/16", "dev", "vxlan0"},
			{"bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "vxlan0", "dst", s.under + ".1"},
			// From the nodes to the peer: everything goes into the tunnel (after DNAT the
			// destination is in the peer's real CIDR, which overlaps ours).
			{"ip", "rule", "add", "iif", "vxlan0", "lookup", "100"},
			{"ip", "route", "add", "default", "dev", dev, "table", "100"},
			// From the tunnel to our pods: through the node's overlay address.
			{"ip", "route", "add", s.podNet + ".0/24", "via", "10.80.0.12", "dev", "vxlan0", "onlink"},
		} {
			if err := s.gw.run(c...); err != nil {
				return nil, err
			}
		}
		if err := netmap(s.gw, dev, seen, real); err != nil {
			return nil, fmt.Errorf("nftables in %s: %w", s.gw, err)
		}
	}
	return p, nil
}

func (r *kernelNATRung) Down() error {
	err := removeAll(r.ns)
	for _, s := range r.socks {
		_ = os.Remove(s)
	}
	return err
}

// netmap installs, in namespace n, the two prefix translations of a kernel gateway:
//
//	table ip skein-bench-netmap {
//	  chain prerouting  { type nat hook prerouting priority dstnat;  iifname "vxlan0" ip daddr SEEN dnat ip prefix to REAL }
//	  chain postrouting { type nat hook postrouting priority srcnat; iifname "WG" ip saddr REAL snat ip prefix to SEEN }
//	}
func netmap(n netns, wg string, seen, real netip.Prefix) error {
	f, err := os.Open("/run/netns/" + string(n))
	if err != nil {
		return err
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "skein-bench-netmap"})
	accept := nftables.ChainPolicyAccept
	pre := c.AddChain(&nftables.Chain{Table: t, Name: "prerouting", Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	post := c.AddChain(&nftables.Chain{Table: t, Name: "postrouting", Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
	c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: prefixNAT("vxlan0", 16, seen, real, expr.NATTypeDestNAT)})
	c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: prefixNAT(wg, 12, real, seen, expr.NATTypeSourceNAT)})
	return c.Flush()
}

// prefixNAT matches iifname and the address at offset (12 source, 16 destination) within
// from, and maps it into to keeping the host bits (NF_NAT_RANGE_PREFIX: NETMAP).
func prefixNAT(iif string, offset uint32, from, to netip.Prefix, typ expr.NATType) []expr.Any {
	name := make([]byte, unix.IFNAMSIZ)
	copy(name, iif)
	m := make([]byte, 4)
	for i := range from.Bits() {
		m[i/8] |= 0x80 >> (i % 8)
	}
	last := to.Masked().Addr().As4()
	for i := range 4 {
		last[i] |= ^m[i]
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: m, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: from.Masked().Addr().AsSlice()},
		&expr.Immediate{Register: 1, Data: to.Masked().Addr().AsSlice()},
		&expr.Immediate{Register: 2, Data: last[:]},
		&expr.NAT{Type: typ, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 2, Prefix: true},
	}
}

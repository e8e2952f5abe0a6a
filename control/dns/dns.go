// Package dns answers the Multi-Cluster Services names, NAME.NAMESPACE.svc.clusterset.local
// (KEP-1645's DNS specification), from this cluster's ServiceImports and the EndpointSlices
// skein derives for them. skein-controller serves it (--dns-listen); the cluster's own DNS
// forwards the clusterset.local zone to it (docs/services.md).
//
// Records, with the zone Z (clusterset.local.):
//
//   - NAME.NS.svc.Z: A/AAAA of a ClusterSetIP import's spec.ips; of a Headless import, one
//     A/AAAA per ready endpoint address of its slices.
//   - NAME.NS.svc.Z, SRV: one per port of the import (per port and ready endpoint when
//     headless), as cluster DNS answers for cluster.local names.
//   - _PORT._PROTO.NAME.NS.svc.Z: SRV of the import's port named PORT with protocol PROTO:
//     target NAME.NS.svc.Z for a ClusterSetIP import, one per ready endpoint
//     (HOST.CLUSTER.NAME.NS.svc.Z) for a Headless one.
//   - HOST.CLUSTER.NAME.NS.svc.Z: a Headless import's endpoint of cluster CLUSTER whose hostname
//     is HOST (or, without one, whose address written with dashes is HOST).
//
// Anything else under Z is NXDOMAIN; a name that exists without records of the asked type gets
// an empty answer (NODATA); a name outside Z is REFUSED. The server is authoritative and never
// recursive.
//
// Every query costs bounded work and memory: answers are built from the controller's cache (no
// API request), hold at most Limits.MaxRecords records and fit the client's buffer (512 bytes,
// or its EDNS size up to 4096, over UDP; truncated with TC set beyond), queries being handled
// at once are capped (Limits.MaxInFlight: beyond it a query is dropped, as an overloaded
// server drops them), and TCP connections have read and idle timeouts and a query cap.
package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/skein-net/skein/control/connlimit"
)

// Zone is the cluster set's DNS zone.
const Zone = "clusterset.local."

// SliceIndex is the field index of EndpointSlices by the import they belong to
// ("NAMESPACE/NAME", from the multicluster.kubernetes.io/service-name label), which IndexSlices
// registers; lookups of a headless import read its slices through it.
const SliceIndex = "skein.io/dns-import"

// IndexSlices registers SliceIndex with a cache's field indexer (before the cache starts).
func IndexSlices(ctx context.Context, idx client.FieldIndexer) error {
	return idx.IndexField(ctx, &discoveryv1.EndpointSlice{}, SliceIndex, sliceKey)
}

func sliceKey(o client.Object) []string {
	name := o.GetLabels()[mcsv1a1.LabelServiceName]
	if name == "" {
		return nil
	}
	return []string{o.GetNamespace() + "/" + name}
}

// Limits bound what one query and all queries at once may cost.
type Limits struct {
	// MaxRecords is the most records an answer is built with (a headless import's endpoints
	// beyond are left out; a UDP answer is truncated further to the client's buffer).
	MaxRecords int
	// MaxInFlight is the most queries handled at once; more are dropped.
	MaxInFlight int
	// MaxTCPConns is the most TCP connections open at once, MaxTCPConnsPerSource from one
	// address; more are closed as they are accepted (each costs a goroutine and buffers, and a
	// client sending a query every few seconds keeps one open for good).
	MaxTCPConns, MaxTCPConnsPerSource int
	// TTL of every record, and of negative answers (the SOA's minimum).
	TTL uint32
}

// DefaultLimits are the server's limits unless told otherwise.
var DefaultLimits = Limits{MaxRecords: 256, MaxInFlight: 512, TTL: 5, MaxTCPConns: 256, MaxTCPConnsPerSource: 32}

// Server answers clusterset.local queries from Reader, which must hold ServiceImports and the
// EndpointSlices skein derives, with SliceIndex registered (the controller's cache).
type Server struct {
	Reader client.Reader
	Limits Limits

	inflight chan struct{}
	dropped  atomic.Uint64
	answered atomic.Uint64
}

// New returns a Server reading from r, with lim (zero fields take DefaultLimits').
func New(r client.Reader, lim Limits) *Server {
	if lim.MaxRecords <= 0 {
		lim.MaxRecords = DefaultLimits.MaxRecords
	}
	if lim.MaxInFlight <= 0 {
		lim.MaxInFlight = DefaultLimits.MaxInFlight
	}
	if lim.TTL == 0 {
		lim.TTL = DefaultLimits.TTL
	}
	if lim.MaxTCPConns <= 0 {
		lim.MaxTCPConns = DefaultLimits.MaxTCPConns
	}
	if lim.MaxTCPConnsPerSource <= 0 {
		lim.MaxTCPConnsPerSource = DefaultLimits.MaxTCPConnsPerSource
	}
	return &Server{Reader: r, Limits: lim, inflight: make(chan struct{}, lim.MaxInFlight)}
}

// Stats are the queries answered and dropped (over MaxInFlight; TCP connections over
// MaxTCPConns or MaxTCPConnsPerSource) so far.
func (s *Server) Stats() (answered, dropped uint64) { return s.answered.Load(), s.dropped.Load() }

// ServeDNS implements dns.Handler.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	select {
	case s.inflight <- struct{}{}:
	default:
		s.dropped.Add(1)
		if _, tcp := w.RemoteAddr().(*net.TCPAddr); tcp {
			_ = w.Close()
		}
		return
	}
	_, tcp := w.RemoteAddr().(*net.TCPAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	m := s.Answer(ctx, req, tcp)
	cancel()
	// The place is given back before the answer is written: a TCP client that does not read
	// its answers blocks the write until the write timeout, and must not hold a place of the
	// in-flight budget (and starve UDP queries) meanwhile.
	<-s.inflight
	s.answered.Add(1)
	_ = w.WriteMsg(m)
}

// Answer is the reply to req (over TCP when tcp, which lifts the UDP size limit).
func (s *Server) Answer(ctx context.Context, req *dns.Msg, tcp bool) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative, m.RecursionAvailable = true, false
	size := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		size = min(max(int(opt.UDPSize()), dns.MinMsgSize), 4096)
		m.SetEdns0(uint16(size), false)
	}
	if tcp {
		size = dns.MaxMsgSize
	}
	switch {
	case req.Opcode != dns.OpcodeQuery:
		m.Rcode = dns.RcodeNotImplemented
		return m
	case len(req.Question) != 1:
		m.Rcode = dns.RcodeFormatError
		return m
	}
	q := req.Question[0]
	name := strings.ToLower(dns.Fqdn(q.Name))
	if (q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY) || !dns.IsSubDomain(Zone, name) {
		m.Rcode = dns.RcodeRefused
		return m
	}
	rrs, exists, err := s.records(ctx, name, q.Qtype)
	switch {
	case err != nil:
		m.Rcode = dns.RcodeServerFailure
	case !exists:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{s.soa()}
	case len(rrs) == 0:
		m.Ns = []dns.RR{s.soa()}
	default:
		m.Answer = rrs
	}
	m.Truncate(size)
	return m
}

func (s *Server) soa() dns.RR {
	return &dns.SOA{Hdr: dns.RR_Header{Name: Zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: s.Limits.TTL},
		Ns: "ns.dns." + Zone, Mbox: "hostmaster." + Zone, Serial: 1, Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: s.Limits.TTL}
}

// endpoint is one ready endpoint of a headless import.
type endpoint struct {
	host, cluster string
	addrs         []netip.Addr
}

// records are the answer records for name (lower case, under Zone) and type qtype, and whether
// the name exists.
func (s *Server) records(ctx context.Context, name string, qtype uint16) ([]dns.RR, bool, error) {
	rel := strings.TrimSuffix(strings.TrimSuffix(name, Zone), ".")
	if rel == "" { // the zone's apex
		if qtype == dns.TypeSOA || qtype == dns.TypeANY {
			return []dns.RR{s.soa()}, true, nil
		}
		return nil, true, nil
	}
	l := dns.SplitDomainName(rel)
	n := len(l)
	if n < 3 || n > 5 || n == 4 || l[n-1] != "svc" {
		// svc. and NS.svc. are names between the apex and the services; not answered as such.
		return nil, false, nil
	}
	svcName, ns := l[n-3], l[n-2]
	imp, err := s.serviceImport(ctx, ns, svcName)
	if err != nil || imp == nil {
		return nil, false, err
	}
	headless := imp.Spec.Type == mcsv1a1.Headless
	target := svcName + "." + ns + ".svc." + Zone
	var eps []endpoint
	if headless {
		if eps, err = s.endpoints(ctx, ns, svcName); err != nil {
			return nil, false, err
		}
	}
	if n == 3 {
		var addrs []netip.Addr
		if headless {
			for _, e := range eps {
				addrs = append(addrs, e.addrs...)
			}
		} else {
			for _, ip := range imp.Spec.IPs {
				if a, err := netip.ParseAddr(ip); err == nil {
					addrs = append(addrs, a.Unmap())
				}
			}
		}
		rrs := s.addressRecords(name, qtype, addrs)
		if qtype == dns.TypeSRV || qtype == dns.TypeANY {
			// SRV at the service's own name too, one per port (per port and endpoint when
			// headless), as cluster DNS answers it for cluster.local (the MCS conformance
			// suite asks for them; the KEP names only _PORT._PROTO.NAME).
			weight := uint16(max(1, 100/max(1, len(eps))))
			for _, p := range imp.Spec.Ports {
				if !headless {
					rrs = append(rrs, s.srv(name, target, p.Port, 100))
					continue
				}
				for _, e := range eps {
					rrs = append(rrs, s.srv(name, e.host+"."+e.cluster+"."+target, p.Port, weight))
				}
			}
			rrs = rrs[:min(len(rrs), s.Limits.MaxRecords)]
		}
		return rrs, true, nil
	}
	// Five labels: _PORT._PROTO.NAME.NS.svc or HOST.CLUSTER.NAME.NS.svc.
	if p, ok := strings.CutPrefix(l[0], "_"); ok {
		proto, ok := strings.CutPrefix(l[1], "_")
		if !ok {
			return nil, false, nil
		}
		var port *mcsv1a1.ServicePort
		for i := range imp.Spec.Ports {
			sp := &imp.Spec.Ports[i]
			if sp.Name != "" && strings.EqualFold(sp.Name, p) && strings.EqualFold(string(cmpProto(sp.Protocol)), proto) {
				port = sp
				break
			}
		}
		if port == nil {
			return nil, false, nil
		}
		if qtype != dns.TypeSRV && qtype != dns.TypeANY {
			return nil, true, nil
		}
		if !headless {
			return []dns.RR{s.srv(name, target, port.Port, 100)}, true, nil
		}
		var rrs []dns.RR
		weight := uint16(max(1, 100/max(1, len(eps))))
		for _, e := range eps {
			if len(rrs) >= s.Limits.MaxRecords {
				break
			}
			rrs = append(rrs, s.srv(name, e.host+"."+e.cluster+"."+target, port.Port, weight))
		}
		return rrs, true, nil
	}
	if !headless {
		return nil, false, nil
	}
	var addrs []netip.Addr
	found := false
	for _, e := range eps {
		if e.host == l[0] && e.cluster == l[1] {
			found = true
			addrs = append(addrs, e.addrs...)
		}
	}
	if !found {
		return nil, false, nil
	}
	return s.addressRecords(name, qtype, addrs), true, nil
}

func cmpProto(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return "TCP"
	}
	return p
}

func (s *Server) srv(name, target string, port int32, weight uint16) dns.RR {
	return &dns.SRV{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: s.Limits.TTL},
		Priority: 0, Weight: weight, Port: uint16(port), Target: target}
}

// addressRecords are the A (IPv4) or AAAA (IPv6) records of addrs asked for by qtype, at most
// MaxRecords, without repeats.
func (s *Server) addressRecords(name string, qtype uint16, addrs []netip.Addr) []dns.RR {
	if qtype != dns.TypeA && qtype != dns.TypeAAAA && qtype != dns.TypeANY {
		return nil
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	var rrs []dns.RR
	for _, a := range addrs {
		if len(rrs) >= s.Limits.MaxRecords {
			break
		}
		hdr := dns.RR_Header{Name: name, Class: dns.ClassINET, Ttl: s.Limits.TTL}
		switch {
		case a.Is4() && qtype != dns.TypeAAAA:
			hdr.Rrtype = dns.TypeA
			rrs = append(rrs, &dns.A{Hdr: hdr, A: a.AsSlice()})
		case a.Is6() && qtype != dns.TypeA:
			hdr.Rrtype = dns.TypeAAAA
			rrs = append(rrs, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	return rrs
}

func (s *Server) serviceImport(ctx context.Context, ns, name string) (*mcsv1a1.ServiceImport, error) {
	var imp mcsv1a1.ServiceImport
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &imp); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("ServiceImport %s/%s: %w", ns, name, err)
	}
	if imp.DeletionTimestamp != nil {
		return nil, nil
	}
	return &imp, nil
}

// endpoints are the ready endpoints of a headless import, from the slices skein derived for it,
// at most MaxRecords, in a stable order.
func (s *Server) endpoints(ctx context.Context, ns, name string) ([]endpoint, error) {
	var list discoveryv1.EndpointSliceList
	// Read only, never changed: the cache's own objects, not a copy of each slice per query.
	if err := s.Reader.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{SliceIndex: ns + "/" + name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("EndpointSlices of %s/%s: %w", ns, name, err)
	}
	slices.SortFunc(list.Items, func(a, b discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	var out []endpoint
	for _, sl := range list.Items {
		if sl.DeletionTimestamp != nil || (sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6) {
			continue
		}
		cluster := strings.ToLower(sl.Labels[mcsv1a1.LabelSourceCluster])
		if cluster == "" || strings.Contains(cluster, ".") {
			continue
		}
		for _, e := range sl.Endpoints {
			if len(out) >= s.Limits.MaxRecords {
				return out, nil
			}
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			var ep endpoint
			for _, a := range e.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					ep.addrs = append(ep.addrs, ip.Unmap())
				}
			}
			if len(ep.addrs) == 0 {
				continue
			}
			ep.cluster = cluster
			if e.Hostname != nil && *e.Hostname != "" {
				ep.host = strings.ToLower(*e.Hostname)
			} else {
				ep.host = dashed(ep.addrs[0])
			}
			out = append(out, ep)
		}
	}
	return out, nil
}

// dashed is an address as a DNS label: 10-0-0-1, fd00--1 (as CoreDNS names endpoints without a
// hostname).
func dashed(a netip.Addr) string {
	if a.Is4() {
		return strings.ReplaceAll(a.String(), ".", "-")
	}
	return strings.ReplaceAll(a.String(), ":", "-")
}

// Serve answers on addr over UDP and TCP until ctx ends.
func (s *Server) Serve(ctx context.Context, addr string) error {
	udp, err := net.ListenPacket("udp", addr)
	if err != nil {
		return fmt.Errorf("dns: %w", err)
	}
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		udp.Close()
		return fmt.Errorf("dns: %w", err)
	}
	return s.ServeConns(ctx, udp, tcp)
}

// ServeConns answers on a UDP socket and a TCP listener until ctx ends, and closes them.
func (s *Server) ServeConns(ctx context.Context, udp net.PacketConn, tcp net.Listener) error {
	var err error
	servers := []*dns.Server{
		{PacketConn: udp, Handler: s, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second},
		{Listener: s.limitConns(tcp), Handler: s, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
			IdleTimeout: func() time.Duration { return 8 * time.Second }, MaxTCPQueries: 128},
	}
	errs := make(chan error, len(servers))
	for _, srv := range servers {
		go func() { errs <- srv.ActivateAndServe() }()
	}
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	for _, srv := range servers {
		_ = srv.Shutdown()
	}
	// A server not started yet when ctx ended would start later: its sockets go now.
	_, _ = udp.Close(), tcp.Close()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("dns: %w", err)
	}
	return nil
}

// limitConns bounds the TCP connections l hands out: at most MaxTCPConns open at once and
// MaxTCPConnsPerSource from one source; a connection beyond is closed at once (and counted
// as dropped).
func (s *Server) limitConns(l net.Listener) net.Listener {
	lim := connlimit.New(s.Limits.MaxTCPConns, s.Limits.MaxTCPConnsPerSource)
	lim.OnRefused = func() { s.dropped.Add(1) }
	return lim.Listener(l)
}

// Collectors are the server's counters as Prometheus metrics:
// skein_controller_dns_queries_total{result="answered"|"dropped"} (dropped: over MaxInFlight,
// and TCP connections over MaxTCPConns or MaxTCPConnsPerSource).
func (s *Server) Collectors() []prometheus.Collector {
	counter := func(result string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "skein_controller_dns_queries_total",
			Help:        "Queries for clusterset.local answered, and queries and TCP connections dropped over the server's bounds.",
			ConstLabels: prometheus.Labels{"result": result}}, f)
	}
	return []prometheus.Collector{
		counter("answered", func() float64 { return float64(s.answered.Load()) }),
		counter("dropped", func() float64 { return float64(s.dropped.Load()) }),
	}
}

package dns_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	skeindns "github.com/skein-net/skein/control/dns"
	"github.com/skein-net/skein/control/kube"
	"github.com/skein-net/skein/internal/apitest"
)

var env *apitest.Env

func TestMain(m *testing.M) {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard()) // the caches' informers log through it
	if testing.Short() {
		os.Exit(m.Run())
	}
	e, stop, err := apitest.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	env = e
	code := m.Run()
	stop()
	os.Exit(code)
}

func requireAPI(tb testing.TB) {
	tb.Helper()
	if env == nil {
		tb.Skip(apitest.ShortSkip)
	}
}

// serve starts a cache over the test API server with the slice index, and a server answering
// from it on loopback; it returns the server and its address.
func serve(tb testing.TB, lim skeindns.Limits) (*skeindns.Server, string) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	c, err := cache.New(env.Config, cache.Options{Scheme: kube.Scheme()})
	if err != nil {
		tb.Fatal(err)
	}
	if err := skeindns.IndexSlices(ctx, c); err != nil {
		tb.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	// Informers start on first use: touch both kinds, then wait.
	if _, err := c.GetInformer(ctx, &mcsv1a1.ServiceImport{}); err != nil {
		tb.Fatal(err)
	}
	if _, err := c.GetInformer(ctx, &discoveryv1.EndpointSlice{}); err != nil {
		tb.Fatal(err)
	}
	if !c.WaitForCacheSync(ctx) {
		tb.Fatal("cache not synced")
	}
	s := skeindns.New(c, lim)
	udp, tcp := listenPair(tb)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.ServeConns(ctx, udp, tcp) }()
	tb.Cleanup(func() { cancel(); <-done })
	return s, udp.LocalAddr().String()
}

// listenPair listens for UDP and TCP on one loopback port, as a DNS server
// does. The UDP port is free when chosen but its TCP twin may not be (another
// test's connection can hold it), so a taken TCP port means another try.
func listenPair(tb testing.TB) (net.PacketConn, net.Listener) {
	tb.Helper()
	var lastErr error
	for range 20 {
		udp, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		tcp, err := net.Listen("tcp", udp.LocalAddr().String())
		if err == nil {
			return udp, tcp
		}
		lastErr = err
		_ = udp.Close()
	}
	tb.Fatalf("no loopback port free for both UDP and TCP after 20 tries: %v", lastErr)
	return nil, nil
}

func clusterSetIP(ns, name string, ips []string, ports ...mcsv1a1.ServicePort) *mcsv1a1.ServiceImport {
	return &mcsv1a1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: mcsv1a1.ServiceImportSpec{Type: mcsv1a1.ClusterSetIP, IPs: ips, Ports: ports}}
}

func headless(ns, name string, ports ...mcsv1a1.ServicePort) *mcsv1a1.ServiceImport {
	return &mcsv1a1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: mcsv1a1.ServiceImportSpec{Type: mcsv1a1.Headless, Ports: ports}}
}

// slice is an EndpointSlice skein derived for import name from cluster, as mcs.Build labels it.
func slice(ns, name, sliceName, cluster string, at discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sliceName,
		Labels: map[string]string{mcsv1a1.LabelServiceName: name, mcsv1a1.LabelSourceCluster: cluster,
			discoveryv1.LabelServiceName: "derived-x", discoveryv1.LabelManagedBy: "skein"}},
		AddressType: at, Endpoints: eps}
}

func ep(addr, host string, ready bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}
	if host != "" {
		e.Hostname = ptr.To(host)
	}
	return e
}

type answer struct {
	rcode int
	rrs   []string // each record's type and data, sorted
	tc    bool
}

func query(tb testing.TB, addr, netw, name string, qtype uint16, edns uint16) (*dns.Msg, answer) {
	tb.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if edns > 0 {
		m.SetEdns0(edns, false)
	}
	c := &dns.Client{Net: netw, Timeout: 3 * time.Second, UDPSize: 65535}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		tb.Fatalf("%s %s over %s: %v", name, dns.TypeToString[qtype], netw, err)
	}
	a := answer{rcode: r.Rcode, tc: r.Truncated}
	for _, rr := range r.Answer {
		f := strings.SplitN(rr.String(), "\t", 5)
		a.rrs = append(a.rrs, f[3]+" "+f[4])
	}
	sort.Strings(a.rrs)
	return r, a
}

func (a answer) String() string {
	return fmt.Sprintf("%s %q", dns.RcodeToString[a.rcode], a.rrs)
}

// TestRecords: the KEP-1645 records of a ClusterSetIP and a headless import, NXDOMAIN and
// NODATA where due, REFUSED outside the zone, and no records once an import is withdrawn.
func TestRecords(t *testing.T) {
	requireAPI(t)
	ctx := context.Background()
	ns := env.Namespace(t, "dns")
	_, addr := serve(t, skeindns.Limits{})
	z := ".svc." + skeindns.Zone
	web := clusterSetIP(ns, "web", []string{"10.96.5.5", "fd00:96::5"},
		mcsv1a1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}, mcsv1a1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
		mcsv1a1.ServicePort{Protocol: corev1.ProtocolTCP, Port: 8080})
	db := headless(ns, "db", mcsv1a1.ServicePort{Name: "pg", Protocol: corev1.ProtocolTCP, Port: 5432})
	for _, o := range []client.Object{web, db,
		slice(ns, "db", "db-a", "c1", discoveryv1.AddressTypeIPv4, ep("10.244.1.5", "db-0", true), ep("10.244.1.6", "", true), ep("10.244.1.7", "db-2", false)),
		slice(ns, "db", "db-b", "c2", discoveryv1.AddressTypeIPv6, ep("fd00:244::8", "db-3", true)),
		// A slice of another import in the namespace, and one of no import: not db's.
		slice(ns, "other", "other-a", "c1", discoveryv1.AddressTypeIPv4, ep("10.244.9.9", "x", true)),
	} {
		apitest.Must(t, env.Client.Create(ctx, o))
	}
	webName, dbName := "web."+ns+z, "db."+ns+z
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  string
	}{
		{webName, dns.TypeA, `NOERROR ["A 10.96.5.5"]`},
		{webName, dns.TypeAAAA, `NOERROR ["AAAA fd00:96::5"]`},
		{strings.ToUpper(webName), dns.TypeA, `NOERROR ["A 10.96.5.5"]`},
		{webName, dns.TypeMX, `NOERROR []`},
		{webName, dns.TypeSRV, `NOERROR ["SRV 0 100 53 ` + webName + `" "SRV 0 100 80 ` + webName + `" "SRV 0 100 8080 ` + webName + `"]`},
		{dbName, dns.TypeSRV, `NOERROR ["SRV 0 33 5432 10-244-1-6.c1.` + dbName + `" "SRV 0 33 5432 db-0.c1.` + dbName + `" "SRV 0 33 5432 db-3.c2.` + dbName + `"]`},
		{"_http._tcp." + webName, dns.TypeSRV, `NOERROR ["SRV 0 100 80 ` + webName + `"]`},
		{"_dns._udp." + webName, dns.TypeSRV, `NOERROR ["SRV 0 100 53 ` + webName + `"]`},
		{"_http._udp." + webName, dns.TypeSRV, `NXDOMAIN []`},
		{"_nope._tcp." + webName, dns.TypeSRV, `NXDOMAIN []`},
		{dbName, dns.TypeA, `NOERROR ["A 10.244.1.5" "A 10.244.1.6"]`},
		{dbName, dns.TypeAAAA, `NOERROR ["AAAA fd00:244::8"]`},
		{"_pg._tcp." + dbName, dns.TypeSRV, `NOERROR ["SRV 0 33 5432 10-244-1-6.c1.` + dbName + `" "SRV 0 33 5432 db-0.c1.` + dbName + `" "SRV 0 33 5432 db-3.c2.` + dbName + `"]`},
		{"db-0.c1." + dbName, dns.TypeA, `NOERROR ["A 10.244.1.5"]`},
		{"10-244-1-6.c1." + dbName, dns.TypeA, `NOERROR ["A 10.244.1.6"]`},
		{"db-3.c2." + dbName, dns.TypeAAAA, `NOERROR ["AAAA fd00:244::8"]`},
		{"db-2.c1." + dbName, dns.TypeA, `NXDOMAIN []`}, // not ready
		{"db-0.c2." + dbName, dns.TypeA, `NXDOMAIN []`}, // another cluster
		{"x.c1." + webName, dns.TypeA, `NXDOMAIN []`},   // not headless
		{"missing." + ns + z, dns.TypeA, `NXDOMAIN []`},
		{"web." + ns + ".svc.cluster.local.", dns.TypeA, `REFUSED []`},
		{"example.com.", dns.TypeA, `REFUSED []`},
		{"a.b.c.d.e.f.web." + ns + z, dns.TypeA, `NXDOMAIN []`},
		{skeindns.Zone, dns.TypeSOA, `NOERROR ["SOA ns.dns.clusterset.local. hostmaster.clusterset.local. 1 7200 1800 86400 5"]`},
	} {
		var got answer
		// The cache sees the objects shortly after they are created.
		apitest.Eventually(t, fmt.Sprintf("%s %s: %s", tc.name, dns.TypeToString[tc.qtype], tc.want), 10*time.Second, func() bool {
			_, got = query(t, addr, "udp", tc.name, tc.qtype, 0)
			return got.String() == tc.want
		}, func() string { return "got " + got.String() })
	}
	// Withdrawal: the import goes, its name goes.
	apitest.Must(t, env.Client.Delete(ctx, web))
	apitest.Eventually(t, "web's name gone after its import was deleted", 10*time.Second, func() bool {
		_, got := query(t, addr, "udp", webName, dns.TypeA, 0)
		return got.rcode == dns.RcodeNameError
	})
	// TTL and the negative answer's SOA.
	r, _ := query(t, addr, "udp", dbName, dns.TypeA, 0)
	if len(r.Answer) == 0 || r.Answer[0].Header().Ttl != 5 || !r.Authoritative || r.RecursionAvailable {
		t.Errorf("answer %v: want TTL 5, authoritative, no recursion", r)
	}
	r, _ = query(t, addr, "udp", "missing."+ns+z, dns.TypeA, 0)
	if len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA {
		t.Errorf("NXDOMAIN without the zone's SOA: %v", r)
	}
}

// TestBounds: a headless import with more endpoints than an answer may hold gets a UDP answer
// within the client's buffer (TC set), over TCP at most MaxRecords records; malformed and
// unsupported queries get an error, not an answer.
func TestBounds(t *testing.T) {
	requireAPI(t)
	ctx := context.Background()
	ns := env.Namespace(t, "dnsbounds")
	_, addr := serve(t, skeindns.Limits{MaxRecords: 300})
	apitest.Must(t, env.Client.Create(ctx, headless(ns, "big", mcsv1a1.ServicePort{Name: "p", Protocol: corev1.ProtocolTCP, Port: 1})))
	for k := range 4 {
		var eps []discoveryv1.Endpoint
		for j := range 100 {
			eps = append(eps, ep(fmt.Sprintf("10.%d.%d.%d", 100+k, j/250, j%250+1), "", true))
		}
		apitest.Must(t, env.Client.Create(ctx, slice(ns, "big", fmt.Sprintf("big-%d", k), "c1", discoveryv1.AddressTypeIPv4, eps...)))
	}
	name := "big." + ns + ".svc." + skeindns.Zone
	apitest.Eventually(t, "all 400 endpoints in the cache (MaxRecords answered over TCP)", 10*time.Second, func() bool {
		_, a := query(t, addr, "tcp", name, dns.TypeA, 0)
		return len(a.rrs) == 300
	})
	for _, tc := range []struct {
		edns uint16
		max  int
	}{{0, 512}, {1232, 1232}, {65000, 4096}} {
		r, a := query(t, addr, "udp", name, dns.TypeA, tc.edns)
		r.Compress = true // the size on the wire: names compressed, as the server sent it
		if n := r.Len(); n > tc.max || !a.tc || a.rcode != dns.RcodeSuccess || len(a.rrs) == 0 {
			t.Errorf("UDP answer with EDNS size %d: %d bytes, TC %v, %d records, %s; want at most %d bytes, TC set, some records",
				tc.edns, n, a.tc, len(a.rrs), dns.RcodeToString[a.rcode], tc.max)
		}
	}
	// Two questions, and an opcode other than QUERY.
	c := &dns.Client{Net: "udp", Timeout: 3 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Question = append(m.Question, m.Question[0])
	if r, _, err := c.Exchange(m, addr); err != nil || r.Rcode != dns.RcodeFormatError || len(r.Answer) != 0 {
		t.Errorf("two questions: %v, %v; want FORMERR", r, err)
	}
	m = new(dns.Msg)
	m.SetNotify(name)
	if r, _, err := c.Exchange(m, addr); err != nil || r.Rcode == dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Errorf("NOTIFY: %v, %v; want an error rcode", r, err)
	}
}

// blockingReader blocks every read until release is closed.
type blockingReader struct {
	client.Reader
	entered, release chan struct{}
}

func (b blockingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	b.entered <- struct{}{}
	<-b.release
	return fmt.Errorf("released")
}

type fakeWriter struct {
	dns.ResponseWriter
	wrote chan *dns.Msg
}

func (f fakeWriter) RemoteAddr() net.Addr      { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5} }
func (f fakeWriter) WriteMsg(m *dns.Msg) error { f.wrote <- m; return nil }

// TestFlood: queries beyond MaxInFlight are dropped at once, not queued.
func TestFlood(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 2)
	s := skeindns.New(blockingReader{release: release, entered: entered}, skeindns.Limits{MaxInFlight: 2})
	w := fakeWriter{wrote: make(chan *dns.Msg, 10)}
	q := new(dns.Msg)
	q.SetQuestion("a.b.svc."+skeindns.Zone, dns.TypeA)
	for range 2 {
		go s.ServeDNS(w, q)
	}
	for range 2 {
		<-entered
	}
	start := time.Now()
	for range 100 {
		s.ServeDNS(w, q) // dropped: returns at once
	}
	if _, dropped := s.Stats(); dropped != 100 || time.Since(start) > time.Second {
		t.Errorf("%d of 100 queries beyond MaxInFlight dropped in %s, want all at once", dropped, time.Since(start))
	}
	if len(w.wrote) != 0 {
		t.Errorf("%d answers written for dropped queries", len(w.wrote))
	}
	close(release)
	for range 2 {
		select {
		case m := <-w.wrote:
			if m.Rcode != dns.RcodeServerFailure {
				t.Errorf("a query whose read failed: %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the queries in flight were not answered")
		}
	}
	if answered, _ := s.Stats(); answered != 2 {
		t.Errorf("%d queries answered, want the 2 in flight", answered)
	}
}

// stuckWriter is a client that does not read its answers: WriteMsg blocks until release.
type stuckWriter struct {
	dns.ResponseWriter
	writing, release chan struct{}
}

func (f stuckWriter) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6} }
func (f stuckWriter) WriteMsg(*dns.Msg) error {
	f.writing <- struct{}{}
	<-f.release
	return nil
}

// TestUnreadAnswersHoldNoPlace (an attack review's low item): answers a TCP client leaves
// unread block their writes; they must not hold places of MaxInFlight meanwhile, or a few
// such clients starve everyone's queries.
func TestUnreadAnswersHoldNoPlace(t *testing.T) {
	s := skeindns.New(emptyReader{}, skeindns.Limits{MaxInFlight: 2})
	stuck := stuckWriter{writing: make(chan struct{}, 2), release: make(chan struct{})}
	defer close(stuck.release)
	q := new(dns.Msg)
	q.SetQuestion("a.b.svc."+skeindns.Zone, dns.TypeA)
	for range 2 {
		go s.ServeDNS(stuck, q)
		<-stuck.writing
	}
	w := fakeWriter{wrote: make(chan *dns.Msg, 1)}
	s.ServeDNS(w, q)
	if len(w.wrote) != 1 {
		_, dropped := s.Stats()
		t.Errorf("with two answers blocked in their writes, a UDP query was not answered (%d dropped)", dropped)
	}
}

// emptyReader finds nothing.
type emptyReader struct{ client.Reader }

func (emptyReader) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	return apierrors.NewNotFound(schema.GroupResource{Resource: "serviceimports"}, key.Name)
}

// TestTCPConnectionsBounded (found by an attack review): each TCP connection costs the
// controller a goroutine and buffers, and a client querying every few seconds keeps one open
// for good, so 49,000 of them passed the controller's memory limit. Connections beyond
// MaxTCPConnsPerSource from one address (and MaxTCPConns in all) are closed as they come, and
// counted as dropped; a closed connection gives its place back.
func TestTCPConnectionsBounded(t *testing.T) {
	requireAPI(t)
	s, addr := serve(t, skeindns.Limits{MaxTCPConns: 8, MaxTCPConnsPerSource: 4})
	name := "nothing.here.svc." + skeindns.Zone
	open := func(n int) (conns []*dns.Conn, answered int) {
		for range n {
			c, err := dns.DialTimeout("tcp", addr, 3*time.Second)
			if errors.Is(err, syscall.ECONNRESET) {
				continue // refused, and reset before the dial returned
			}
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			m := new(dns.Msg)
			m.SetQuestion(name, dns.TypeA)
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			if c.WriteMsg(m) == nil {
				if r, err := c.ReadMsg(); err == nil && r.Rcode == dns.RcodeNameError {
					answered++
				}
			}
		}
		return conns, answered
	}
	_, droppedBefore := s.Stats()
	conns, answered := open(12)
	if answered != 4 {
		t.Errorf("12 connections from one address: %d answered, want 4 (MaxTCPConnsPerSource)", answered)
	}
	if _, dropped := s.Stats(); dropped-droppedBefore != 8 {
		t.Errorf("dropped %d, want the 8 connections over the bound", dropped-droppedBefore)
	}
	// The same counted in the controller's metrics.
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collectors()...)
	if got := testutil.ToFloat64(s.Collectors()[1]); got < 8 {
		t.Errorf("skein_controller_dns_queries_total{result=dropped} %v, want at least 8", got)
	}
	if n, err := testutil.GatherAndCount(reg, "skein_controller_dns_queries_total"); err != nil || n != 2 {
		t.Errorf("skein_controller_dns_queries_total: %d series, %v", n, err)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	// Their places come back once the server sees them closed.
	apitest.Eventually(t, "four connections again", 10*time.Second, func() bool {
		conns, answered := open(4)
		for _, c := range conns {
			_ = c.Close()
		}
		return answered == 4
	})
}

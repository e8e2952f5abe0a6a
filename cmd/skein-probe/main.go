// Command skein-probe is skein's network probe (the skein-probe image): a server that tells
// each caller the address it sees the call come from, and a client that calls it. The
// end-to-end tests, the lab and the benchmark harness run the server in pods and the client in
// pods or node namespaces, and compare what the server saw with what they expect (for example
// a remapped source address across clusters).
//
//	skein-probe version
//	skein-probe serve [--tcp :7070] [--udp :7071] [--http :7072]
//	skein-probe call [--timeout 2s] tcp|udp HOST:PORT
//	skein-probe stream [--interval 50ms] [--duration 10s] [--gaps 0] HOST:PORT
//	skein-probe rr-serve [--tcp :7073]
//	skein-probe rr [--count 2000] [--size 1] HOST:PORT
//	skein-probe get [--timeout 5s] URL
//	skein-probe resolve [--timeout 5s] [--srv] [--server HOST:PORT] NAME
//	skein-probe check [--timeout 2s] [--pings 3] [--mtu 0] [--route] ADDR...
//	skein-probe tput [--duration 10s] [--streams 1] [--reverse] HOST
//	skein-probe rate [--duration 10s] [--size 64] HOST
//	skein-probe latency [--duration 10s] [--size 1] [--count 100000] HOST
//	skein-probe idle
//
// serve answers every TCP connection and UDP datagram with one line:
// "<hostname> saw <source ip>:<port>"; its HTTP port answers /healthz. call prints the line
// and exits 1 when there is none. stream sends numbered UDP datagrams and reports how many
// came back and the longest gap without replies (failover measurements); with --gaps D > 0 it
// first prints every gap longer than D as "gap-ms G ending-at-ms T" (T from the start). rr-serve echoes what
// it reads; rr does --count request/response round trips of --size bytes over one TCP
// connection (TCP_NODELAY), one at a time, and prints the latency percentiles in microseconds:
// "count N p50-us X p90-us Y p99-us Z". get prints an HTTP response's body and exits 1 unless
// the status is 200 (tests scrape /metrics inside the lab's namespaces with it). resolve looks a
// name up as the pod's programs do (/etc/resolv.conf: its nameservers, search list and ndots)
// and prints each address on a line, or with --srv each SRV record of NAME as "TARGET PORT
// PRIORITY WEIGHT"; it exits 1 when the name has none (the lab's DNS tests). check runs
// every connectivity check of control/probe against each address (a TCP and a UDP call to
// its skein-probe server, ICMP echo, with --mtu the path MTU, with --route where this
// namespace's kernel sends it) and prints one JSON document (probe.Report); skeinctl test
// network runs it in its probe pods. tput, rate and latency measure TCP throughput, the UDP
// packet rate (with loss) and request/response latency against serve's measurement ports and
// print JSON (control/probe's Throughput, Rate, Latency); skeinctl bench runs them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/skein-net/skein/control/buildinfo"
	"github.com/skein-net/skein/control/probe"
)

// usage is what skein-probe --help prints; each command's --help lists its flags.
const usage = `skein-probe is skein's network probe (the skein-probe image that skeinctl test network and
skeinctl bench run in their pods).

  skein-probe serve [--tcp :7070] [--udp :7071] [--http :7072]   answer each caller with the source it saw
                                                                (and serve tput, rate, latency on 7073-7075)
  skein-probe call [--timeout 2s] tcp|udp HOST:PORT             one call; prints what the server saw
  skein-probe check [--timeout 2s] [--pings 3] [--mtu 0] [--route] ADDR...
                                                                every check of skeinctl test network, as JSON
  skein-probe tput [--duration 10s] [--streams 1] [--reverse] HOST   TCP throughput, as JSON
  skein-probe rate [--duration 10s] [--size 64] HOST            UDP packet rate and loss, as JSON
  skein-probe latency [--duration 10s] [--size 1] HOST          request/response latency, as JSON
  skein-probe resolve [--timeout 5s] [--srv] [--server HOST:PORT] NAME
                                                                look a name up through the pod's resolv.conf
  skein-probe stream | rr-serve | rr | get | idle | version     used by skein's own tests

In a pod kept by skeinctl test network --keep:
  kubectl -n NAMESPACE exec POD -- skein-probe check --mtu 1340 --route 10.71.2.7
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "help", "-h", "--help", "-help":
		fmt.Print(usage)
	case "version", "--version", "-version":
		fmt.Printf("skein-probe %s\n", buildinfo.Get())
	case "serve":
		err = serve(os.Args[2:])
	case "call":
		err = call(os.Args[2:])
	case "stream":
		err = stream(os.Args[2:])
	case "rr-serve":
		err = rrServe(os.Args[2:])
	case "rr":
		err = rr(os.Args[2:])
	case "get":
		err = get(os.Args[2:])
	case "check":
		err = check(os.Args[2:])
	case "resolve":
		err = resolve(os.Args[2:])
	case "tput", "rate", "latency":
		err = measure(os.Args[1], os.Args[2:])
	case "idle":
		// The container of a pod that only runs checks through exec (skeinctl test network's
		// host-network probes): wait to be stopped.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
	default:
		err = fmt.Errorf("unknown command %q (serve, call, stream, rr-serve, rr, get, resolve, check, tput, rate, latency, idle, version)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "skein-probe %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// parseFlags parses a command's flags as flag.ExitOnError would, with --help's list on stdout:
// --help exits 0, a bad flag exits 2 after saying why on stderr.
func parseFlags(fs *flag.FlagSet, args []string) {
	if err := buildinfo.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	tcpAddr := fs.String("tcp", ":7070", "TCP address")
	udpAddr := fs.String("udp", ":7071", "UDP address")
	httpAddr := fs.String("http", ":7072", "HTTP address of /healthz")
	echoAddr := fs.String("echo", ":7073", "TCP echo address (request/response latency; empty: none)")
	tputAddr := fs.String("throughput", ":7074", "TCP throughput address (empty: none)")
	rateAddr := fs.String("rate", ":7075", "UDP packet-rate address (empty: none)")
	parseFlags(fs, args)
	host, _ := os.Hostname()
	ln, err := net.Listen("tcp", *tcpAddr)
	if err != nil {
		return err
	}
	pc, err := net.ListenPacket("udp", *udpAddr)
	if err != nil {
		return err
	}
	// One set of limits for every port (issue 40): connections per server and per source,
	// request and idle deadlines, bounded requests, UDP answered to probe datagrams only.
	srv := probe.NewServer(host, probe.DefaultLimits)
	hl, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return err
	}
	go func() {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { writeMetrics(w, srv.Stats()) })
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: probe.DefaultLimits.RequestTimeout, ReadTimeout: probe.DefaultLimits.RequestTimeout,
			WriteTimeout: probe.DefaultLimits.RequestTimeout, IdleTimeout: probe.DefaultLimits.IdleTimeout, MaxHeaderBytes: 8 << 10}
		// Limits of its own, so that a flood of the measurement ports does not fail the
		// kubelet's readiness probe (nor hide /metrics).
		fmt.Fprintln(os.Stderr, hs.Serve(probe.NewServer(host, probe.Limits{MaxConns: 64, MaxConnsPerSource: 16}).Listener(hl)))
	}()
	// The measurement servers of skeinctl bench.
	for _, m := range []struct {
		addr  string
		serve func(string) error
	}{
		{*echoAddr, func(a string) error {
			l, err := net.Listen("tcp", a)
			return errors.Join(err, serveIf(l, srv.ServeEcho))
		}},
		{*tputAddr, func(a string) error {
			l, err := net.Listen("tcp", a)
			return errors.Join(err, serveIf(l, srv.ServeThroughput))
		}},
		{*rateAddr, func(a string) error {
			pc, err := net.ListenPacket("udp", a)
			if err != nil {
				return err
			}
			go func() { _ = srv.ServeRate(pc) }()
			return nil
		}},
	} {
		if m.addr == "" {
			continue
		}
		if err := m.serve(m.addr); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "skein-probe: serving tcp %s udp %s http %s echo %s throughput %s rate %s\n", *tcpAddr, *udpAddr, *httpAddr, *echoAddr, *tputAddr, *rateAddr)
	return srv.ServeCalls(ln, pc)
}

// writeMetrics writes the server's counts in the Prometheus text format.
func writeMetrics(w io.Writer, st probe.Stats) {
	for _, m := range []struct {
		name, kind, help string
		v                int64
	}{
		{"skein_probe_connections_open", "gauge", "TCP connections held now.", st.Open},
		{"skein_probe_connections_refused_total", "counter", "TCP connections closed at once: over the server's or the source's cap.", st.Refused},
		{"skein_probe_connections_timed_out_total", "counter", "TCP connections closed for a missing request or silence.", st.TimedOut},
		{"skein_probe_malformed_total", "counter", "Requests and datagrams that are not skein-probe's, dropped.", st.Malformed},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", m.name, m.help, m.name, m.kind, m.name, m.v)
	}
}

func get(args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	parseFlags(fs, args)
	if fs.NArg() != 1 {
		return errors.New("usage: skein-probe get [--timeout 5s] URL (flags first)")
	}
	resp, err := (&http.Client{Timeout: *timeout}).Get(fs.Arg(0))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", fs.Arg(0), resp.Status)
	}
	_, err = io.Copy(os.Stdout, resp.Body)
	return err
}

// resolve looks NAME up with Go's own resolver, which reads /etc/resolv.conf as the C library
// does (the probe image has no C library).
func resolve(args []string) error {
	fs := flag.NewFlagSet("resolve", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	srv := fs.Bool("srv", false, "look up the SRV records of NAME (such as _http._tcp.web.default.svc.cluster.local)")
	server := fs.String("server", "", "ask this DNS server (HOST:PORT) instead of resolv.conf's nameservers (its search list and ndots still apply)")
	parseFlags(fs, args)
	if fs.NArg() != 1 || *timeout <= 0 || *timeout > time.Minute {
		return errors.New("usage: skein-probe resolve [--timeout 5s (at most 1m)] [--srv] [--server HOST:PORT] NAME (flags first)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	r := &net.Resolver{PreferGo: true}
	if *server != "" {
		if _, _, err := net.SplitHostPort(*server); err != nil {
			return fmt.Errorf("--server %q: %w", *server, err)
		}
		r.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, *server)
		}
	}
	if *srv {
		_, recs, err := r.LookupSRV(ctx, "", "", fs.Arg(0))
		if err != nil {
			return err
		}
		for _, s := range recs {
			fmt.Printf("%s %d %d %d\n", s.Target, s.Port, s.Priority, s.Weight)
		}
		return nil
	}
	addrs, err := r.LookupHost(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	for _, a := range addrs {
		fmt.Println(a)
	}
	return nil
}

func call(args []string) error {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	parseFlags(fs, args)
	if fs.NArg() != 2 || (fs.Arg(0) != "tcp" && fs.Arg(0) != "udp") {
		return errors.New("usage: skein-probe call [--timeout 2s] tcp|udp HOST:PORT (flags first)")
	}
	c, err := net.DialTimeout(fs.Arg(0), fs.Arg(1), *timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(*timeout))
	if fs.Arg(0) == "udp" {
		if _, err := c.Write(probe.CallDatagram("call")); err != nil {
			return err
		}
	}
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		return fmt.Errorf("no answer from %s: %w", fs.Arg(1), err)
	}
	fmt.Println(strings.TrimSpace(strings.TrimSuffix(string(buf[:n]), " call")))
	return nil
}

func stream(args []string) error {
	fs := flag.NewFlagSet("stream", flag.ContinueOnError)
	interval := fs.Duration("interval", 50*time.Millisecond, "time between datagrams")
	duration := fs.Duration("duration", 10*time.Second, "how long to send (bounded: at most 10 minutes)")
	report := fs.Duration("gaps", 0, "print every gap without replies longer than this (0: only the longest)")
	parseFlags(fs, args)
	if fs.NArg() != 1 {
		return errors.New("usage: skein-probe stream [--interval 50ms] [--duration 10s] [--gaps 0] HOST:PORT (flags first)")
	}
	if *duration > 10*time.Minute || *interval < time.Millisecond {
		return errors.New("--duration at most 10m, --interval at least 1ms")
	}
	c, err := net.Dial("udp", fs.Arg(0))
	if err != nil {
		return err
	}
	defer c.Close()
	start := time.Now()
	replies := make(chan time.Time, 1024)
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := c.Read(buf); err != nil {
				if errors.Is(err, net.ErrClosed) {
					close(replies)
					return
				}
				continue // ECONNREFUSED while the far side is away
			}
			replies <- time.Now()
		}
	}()
	sent, got := 0, 0
	last := start
	var gap time.Duration
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	end := time.After(*duration)
loop:
	for {
		select {
		case <-tick.C:
			_, _ = c.Write(probe.CallDatagram(strconv.Itoa(sent)))
			sent++
		case t := <-replies:
			got++
			if g := t.Sub(last); *report > 0 && g > *report {
				fmt.Printf("gap-ms %d ending-at-ms %d\n", g.Milliseconds(), t.Sub(start).Milliseconds())
			}
			gap = max(gap, t.Sub(last))
			last = t
		case <-end:
			break loop
		}
	}
	// Replies to the last datagrams still count: wait 200 ms for them.
	drain := time.After(200 * time.Millisecond)
wait:
	for {
		select {
		case t := <-replies:
			got++
			gap = max(gap, t.Sub(last))
			last = t
		case <-drain:
			break wait
		}
	}
	if g := time.Since(last) - 200*time.Millisecond; *report > 0 && g > *report {
		fmt.Printf("gap-ms %d ending-at-ms %d\n", g.Milliseconds(), time.Since(start).Milliseconds()-200)
	}
	gap = max(gap, time.Since(last)-200*time.Millisecond)
	fmt.Printf("sent %d received %d longest-gap-ms %d\n", sent, got, gap.Milliseconds())
	return nil
}

func rrServe(args []string) error {
	fs := flag.NewFlagSet("rr-serve", flag.ContinueOnError)
	addr := fs.String("tcp", ":7073", "TCP address")
	parseFlags(fs, args)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	return probe.ServeEcho(ln)
}

func rr(args []string) error {
	fs := flag.NewFlagSet("rr", flag.ContinueOnError)
	count := fs.Int("count", 2000, "round trips (at most 1000000)")
	size := fs.Int("size", 1, "request and response size in bytes (at most 65536)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	parseFlags(fs, args)
	if fs.NArg() != 1 || *count < 1 || *count > 1000000 || *size < 1 || *size > 65536 {
		return errors.New("usage: skein-probe rr [--count 2000] [--size 1] HOST:PORT (flags first)")
	}
	c, err := net.DialTimeout("tcp", fs.Arg(0), 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetNoDelay(true)
	_ = c.SetDeadline(time.Now().Add(*timeout))
	req, resp := make([]byte, *size), make([]byte, *size)
	lat := make([]time.Duration, 0, *count)
	for range *count {
		start := time.Now()
		if _, err := c.Write(req); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			return err
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	pct := func(p float64) int64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds() }
	fmt.Printf("count %d p50-us %d p90-us %d p99-us %d\n", len(lat), pct(0.50), pct(0.90), pct(0.99))
	return nil
}

func check(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 2*time.Second, "time allowed each check")
	pings := fs.Int("pings", 3, "ICMP echo requests per address (0: no ICMP check)")
	mtu := fs.Int("mtu", 0, "check the path against this tunnel MTU (0: no path-MTU check)")
	route := fs.Bool("route", false, "also report where this namespace's kernel routes each address")
	parallel := fs.Int("parallel", 4, "addresses checked at once")
	parseFlags(fs, args)
	if fs.NArg() == 0 || fs.NArg() > 1000 || *timeout <= 0 || *timeout > time.Minute || *pings < 0 || *pings > 100 ||
		*parallel < 1 || *parallel > 64 || (*mtu != 0 && (*mtu < 576 || *mtu > 9000)) {
		return errors.New("usage: skein-probe check [--timeout 2s (at most 1m)] [--pings 3 (0-100)] [--mtu 0 (or 576-9000)] [--route] [--parallel 4] ADDR... (1-1000 addresses, flags first)")
	}
	var targets []netip.Addr
	for _, a := range fs.Args() {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return fmt.Errorf("address %q: %w", a, err)
		}
		targets = append(targets, ip)
	}
	opts := probe.Options{Timeout: *timeout, Pings: *pings, MTU: *mtu, Route: *route}
	if *pings == 0 {
		opts.Pings = -1
	}
	host, _ := os.Hostname()
	rep := probe.Report{Host: host, Cells: make([]probe.Cell, len(targets))}
	sem := make(chan struct{}, *parallel)
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			rep.Cells[i] = probe.Check(context.Background(), t, opts)
		}()
	}
	wg.Wait()
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// serveIf serves on l in the background when it was opened.
func serveIf(l net.Listener, serve func(net.Listener) error) error {
	if l != nil {
		go func() { _ = serve(l) }()
	}
	return nil
}

// measure runs one of skeinctl bench's measurements against HOST and prints it as JSON.
func measure(kind string, args []string) error {
	fs := flag.NewFlagSet(kind, flag.ContinueOnError)
	duration := fs.Duration("duration", 10*time.Second, "how long to measure (at most 10m)")
	streams := fs.Int("streams", 1, "tput: parallel TCP connections (1-128)")
	reverse := fs.Bool("reverse", false, "tput: the server sends, this side receives")
	size := fs.Int("size", 0, "rate: IPv4 packet size (41-9000, default 64); latency: request and response size (1-65536, default 1)")
	count := fs.Int("count", 100000, "latency: at most this many round trips")
	parseFlags(fs, args)
	if fs.NArg() != 1 {
		return fmt.Errorf("usage: skein-probe %s [flags] HOST (flags first)", kind)
	}
	host, err := netip.ParseAddr(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("HOST %q: %w", fs.Arg(0), err)
	}
	if *size == 0 {
		*size = map[string]int{"rate": 64, "latency": 1, "tput": 1}[kind]
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var res any
	switch kind {
	case "tput":
		res, err = probe.MeasureThroughput(ctx, netip.AddrPortFrom(host, probe.ThroughputPort), *streams, *reverse, *duration)
	case "rate":
		res, err = probe.MeasureRate(ctx, netip.AddrPortFrom(host, probe.RatePort), *size, *duration)
	case "latency":
		res, err = probe.MeasureLatency(ctx, netip.AddrPortFrom(host, probe.EchoPort), *size, *count, *duration)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/skein-net/skein/control/probe"
)

// narrowWANMTU is the path MTU the narrow-wan scenario gives the WAN: below the default
// tunnel's 1400-byte packets (1340 + 60).
const narrowWANMTU = 1380

// narrowWAN: the running lab's WAN narrowed to 1380 bytes with ICMP frag-needed dropped (a path
// MTU black hole, the harder case): both active gateways lower their tunnel MTU
// (skein_gateway_tunnel_mtu_bytes{kind="effective"}) within 30 s without a reconnect, then bulk
// TCP crosses both ways and request/response of full-size messages completes. The WAN is
// restored at the end (the gateways raise their MTU again on their own schedule, 10 minutes).
func (e *env) narrowWAN(ctx context.Context) {
	topo := e.l.Topology
	if err := topo.NarrowWAN(narrowWANMTU, true); err != nil {
		e.t.Fatal(err)
	}
	defer func() {
		if err := topo.NarrowWAN(0, false); err != nil {
			e.t.Errorf("restore the WAN: %v", err)
		}
	}()
	effective := func(i int) int {
		for _, tg := range e.scrapeTargets(ctx, i) {
			if tg.component != "gateway" || tg.pod.Labels["networking.liqo.io/active"] != "true" {
				continue
			}
			text, err := e.scrape(ctx, tg)
			if err != nil {
				return 0
			}
			return tunnelMTU(text, "effective")
		}
		return 0
	}
	var mtus [2]int
	took := e.waitFor(ctx, 30*time.Second, "both gateways' effective tunnel MTU below 1340 on the narrowed WAN", func() bool {
		mtus = [2]int{effective(0), effective(1)}
		return mtus[0] > 0 && mtus[0] < 1340 && mtus[1] > 0 && mtus[1] < 1340
	})
	if max(mtus[0], mtus[1])+60 > narrowWANMTU {
		e.t.Errorf("effective tunnel MTUs %v: their packets (+60) do not fit the %d-byte WAN", mtus, narrowWANMTU)
	}
	e.reportf("narrow-wan: WAN at %d, ICMP dropped: gateways at %d and %d after %.1fs", narrowWANMTU, mtus[0], mtus[1], took.Seconds())
	// skeinctl diagnose names it, with the fix.
	if out, err := e.l.Exec(ctx, 0, "skeinctl", "diagnose"); !strings.Contains(out, fmt.Sprintf("forces the tunnel down from 1340 to %d", mtus[0])) ||
		!strings.Contains(out, fmt.Sprintf("--mtu %d", mtus[0])) {
		e.t.Errorf("narrow-wan: skeinctl diagnose does not name the lowered tunnel MTU %d (%v):\n%s", mtus[0], err, out)
	} else {
		e.reportf("narrow-wan: skeinctl diagnose names the path MTU: %s", firstLine(out, "path MTU"))
	}

	src := e.probePods(ctx, 0)[0]
	dstAs, _ := e.peerView(ctx, 0)
	dst := e.probePods(ctx, 1)[0]
	target := dstAs.of(netip.MustParseAddr(dst.Status.PodIP)).String()
	for _, rev := range []bool{false, true} {
		args := []string{"tput", "--duration", "3s"}
		way := "c0 -> c1"
		if rev {
			args, way = append(args, "--reverse"), "c1 -> c0"
		}
		out, err := e.probeIn(ctx, 0, src, append(args, target)...)
		var tp probe.Throughput
		if err == nil {
			err = json.Unmarshal([]byte(out), &tp)
		}
		// 1 Mbit/s is far below any working path here and far above a stalled one (0 bytes).
		if err != nil || tp.BitsPerSecond < 1e6 {
			e.t.Errorf("narrow-wan: bulk TCP %s: %v: %s", way, err, out)
			continue
		}
		e.reportf("narrow-wan: bulk TCP %s: %.0f Mbit/s", way, tp.BitsPerSecond/1e6)
	}
	// Request/response of 1300 bytes (the default tunnel's full TCP payload) each way.
	out, err := e.probeIn(ctx, 0, src, "latency", "--duration", "2s", "--size", "1300", target)
	var lat probe.Latency
	if err == nil {
		err = json.Unmarshal([]byte(out), &lat)
	}
	if err != nil || lat.Count == 0 {
		e.t.Errorf("narrow-wan: request/response of 1300 bytes: %v: %s", err, out)
		return
	}
	e.reportf("narrow-wan: request/response of 1300 bytes: %d round trips, p50 %d us, p99 %d us", lat.Count, lat.P50Micro, lat.P99Micro)
}

// tunnelMTU reads skein_gateway_tunnel_mtu_bytes{kind="..."} from a gateway's /metrics (0: absent).
func tunnelMTU(text, kind string) int {
	prefix := fmt.Sprintf("skein_gateway_tunnel_mtu_bytes{kind=%q} ", kind)
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f)
		}
	}
	return 0
}

package e2e

import "testing"

// TestParseCounters: the counters of /proc/net/snmp, /proc/net/netstat and /proc/net/dev as a
// namespace shows them, and diff's mean packet sizes.
func TestParseCounters(t *testing.T) {
	text := `Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates
Ip: 1 64 100 0 0 0 0 0 100 100 0 0 0 4 2 0 1 0 2
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 1 0 0 0 1 10 10 7 0 0 0
TcpExt: SyncookiesSent TCPTimeouts
TcpExt: 0 3
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0
liqo.vxlan: 3000000 2000    0    5    0     0          0         0  1500000    1000    0    0    0     0       0          0
`
	m := parseCounters([]byte(text))
	want := map[string]int64{"Ip:ReasmReqds": 4, "Ip:ReasmOKs": 2, "Ip:FragOKs": 1, "Ip:FragCreates": 2, "Tcp:RetransSegs": 7,
		"TcpExt:TCPTimeouts": 3, "dev liqo.vxlan rx-pkts": 2000, "dev liqo.vxlan rx-drop": 5, "dev liqo.vxlan tx-pkts": 1000}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, m[k], v, m)
		}
	}
	if _, ok := m["dev lo rx-pkts"]; ok {
		t.Errorf("loopback counted: %v", m)
	}
	if _, ok := m["Ip:InReceives"]; ok {
		t.Errorf("a counter outside the list was kept: %v", m)
	}
	d := diff(map[string]map[string]int64{"n": {"dev x rx-pkts": 0, "dev x rx-bytes": 0}},
		map[string]map[string]int64{"n": {"dev x rx-pkts": 2000, "dev x rx-bytes": 2000 * 1390, "Ip:FragCreates": 0}})
	if d["n"]["dev x rx-avg"] != 1390 || d["n"]["dev x rx-pkts"] != 2000 || len(d["n"]) != 2 {
		t.Errorf("diff: %v, want 2000 packets of 1390 bytes", d)
	}
}

// TestFragments: a run's fragments are the fragments created and the reassembly requests of
// every namespace, nothing else.
func TestFragments(t *testing.T) {
	k := map[string]map[string]int64{
		"node": {"Ip:FragCreates": 3, "Ip:ReasmReqds": 4, "Ip:FragOKs": 100, "Ip:ReasmOKs": 100},
		"pod":  {"Ip:ReasmReqds": 2, "dev eth0 rx-pkts": 5000},
		"idle": {},
	}
	if n := fragments(k); n != 9 {
		t.Errorf("fragments = %d, want 9 (3 created + 4 + 2 reassembly requests)", n)
	}
	if n := fragments(nil); n != 0 {
		t.Errorf("fragments of nothing = %d", n)
	}
}

package mcs

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/skein-net/skein/dataplane/nat"
)

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func export(age time.Duration) *mcsv1a1.ServiceExport {
	return &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", CreationTimestamp: metav1.NewTime(t0.Add(-age))}}
}

func service(ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", Ports: ports}}
}

func httpPort(port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: port}
}

func ptr[T any](v T) *T { return &v }

// slice is an EndpointSlice of addresses, all ready but the ones prefixed with "!".
func slice(addrs ...string) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr[int32](8080)}}}
	for _, a := range addrs {
		ready := !strings.HasPrefix(a, "!")
		a = strings.TrimPrefix(a, "!")
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: ptr("node-1"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: "p"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready), Serving: ptr(ready), Terminating: ptr(false)}})
	}
	return s
}

func mapping(real, seen string) *nat.PrefixMap {
	m, err := nat.NewPrefixMap(nat.Pair{From: netip.MustParsePrefix(real), To: netip.MustParsePrefix(seen)})
	if err != nil {
		panic(err)
	}
	return m
}

func identity(cidr string) *nat.PrefixMap {
	m, err := Identity(netip.MustParsePrefix(cidr))
	if err != nil {
		panic(err)
	}
	return m
}

// addresses lists the endpoints of the import's slices per source cluster, "!" before the
// ones not ready.
func addresses(imp Import) map[string][]string {
	out := map[string][]string{}
	for _, s := range imp.Slices {
		for _, e := range s.Endpoints {
			a := e.Addresses[0]
			if !*e.Conditions.Ready {
				a = "!" + a
			}
			out[s.Labels[SourceClusterLabel]] = append(out[s.Labels[SourceClusterLabel]], a)
		}
	}
	return out
}

func TestBuildTranslates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sources []Source
		want    map[string][]string
	}{{
		name: "disjoint CIDRs, not remapped",
		sources: []Source{{ClusterID: "b", Export: export(time.Hour), Service: service(httpPort(80)),
			Slices: []discoveryv1.EndpointSlice{slice("10.245.1.5", "!10.245.2.6")}, Map: mapping("10.245.0.0/16", "10.245.0.0/16")}},
		want: map[string][]string{"b": {"10.245.1.5", "!10.245.2.6"}},
	}, {
		name: "overlapping CIDRs, each peer remapped to its own prefix",
		sources: []Source{
			{ClusterID: "b", Export: export(time.Hour), Service: service(httpPort(80)),
				Slices: []discoveryv1.EndpointSlice{slice("10.244.1.5", "10.244.2.6")}, Map: mapping("10.244.0.0/16", "10.71.0.0/16")},
			{ClusterID: "c", Export: export(time.Minute), Service: service(httpPort(80)),
				Slices: []discoveryv1.EndpointSlice{slice("10.244.1.5")}, Map: mapping("10.244.0.0/16", "10.72.0.0/16")},
		},
		want: map[string][]string{"b": {"10.71.1.5", "10.71.2.6"}, "c": {"10.72.1.5"}},
	}, {
		name: "this cluster's own export and a peer's",
		sources: []Source{
			{ClusterID: "a", Export: export(time.Hour), Service: service(httpPort(80)),
				Slices: []discoveryv1.EndpointSlice{slice("10.244.3.3")}, Map: identity("10.244.0.0/16")},
			{ClusterID: "b", Export: export(time.Minute), Service: service(httpPort(80)),
				Slices: []discoveryv1.EndpointSlice{slice("10.244.3.3")}, Map: mapping("10.244.0.0/16", "10.71.0.0/16")},
		},
		want: map[string][]string{"a": {"10.244.3.3"}, "b": {"10.71.3.3"}},
	}, {
		name: "endpoints outside the peer's pod CIDRs are dropped (a host-network pod, or an address of ours)",
		sources: []Source{{ClusterID: "b", Export: export(time.Hour), Service: service(httpPort(80)),
			Slices: []discoveryv1.EndpointSlice{slice("192.168.11.20", "10.96.0.1", "10.244.0.9")}, Map: mapping("10.244.0.0/16", "10.71.0.0/16")}},
		want: map[string][]string{"b": {"10.71.0.9"}},
	}, {
		name: "a peering without an address map yet contributes no endpoint",
		sources: []Source{{ClusterID: "b", Export: export(time.Hour), Service: service(httpPort(80)),
			Slices: []discoveryv1.EndpointSlice{slice("10.244.1.5")}}},
		want: map[string][]string{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			imp := Build("shop", "orders", tc.sources, Limits{})
			got := addresses(imp)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("endpoints %v, want %v", got, tc.want)
			}
			if imp.ServiceImport == nil || imp.Service == nil {
				t.Fatal("no ServiceImport or Service")
			}
			for _, s := range imp.Slices {
				if s.Labels[discoveryv1.LabelServiceName] != imp.Service.Name || s.Labels[discoveryv1.LabelManagedBy] != ManagedBy || s.Labels[ImportLabel] != "orders" {
					t.Errorf("slice %s labels %v", s.Name, s.Labels)
				}
				for _, e := range s.Endpoints {
					if e.NodeName != nil || e.TargetRef != nil {
						t.Errorf("slice %s copies the exporter's node name or pod reference: %+v", s.Name, e)
					}
				}
			}
		})
	}
}

func TestBuildImport(t *testing.T) {
	imp := Build("shop", "orders", []Source{
		{ClusterID: "c", Export: export(time.Minute), Service: service(httpPort(80), corev1.ServicePort{Name: "grpc", Port: 9090}), Map: mapping("10.244.0.0/16", "10.72.0.0/16")},
		{ClusterID: "b", Export: export(time.Hour), Service: service(httpPort(80)), Map: mapping("10.244.0.0/16", "10.71.0.0/16")},
	}, Limits{})
	si := imp.ServiceImport
	if si.Spec.Type != mcsv1a1.ClusterSetIP || len(si.Spec.Ports) != 2 || si.Spec.Ports[0].Name != "grpc" || si.Spec.Ports[0].Protocol != corev1.ProtocolTCP || si.Spec.Ports[1].Port != 80 {
		t.Errorf("ServiceImport spec %+v: want ClusterSetIP, the union of ports (grpc 9090/TCP, http 80)", si.Spec)
	}
	if fmt.Sprint(si.Status.Clusters) != "[{b} {c}]" {
		t.Errorf("status.clusters %v, want b and c", si.Status.Clusters)
	}
	svc := imp.Service
	if svc.Name != DerivedServiceName("orders") || svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.Selector != nil || len(svc.Spec.Ports) != 2 || svc.Labels[ImportLabel] != "orders" {
		t.Errorf("derived Service %+v", svc)
	}
	if len(DerivedServiceName(strings.Repeat("x", 63))) > 63 {
		t.Error("derived name longer than a Service name may be")
	}
	// The Services list different ports: the union is served, and every export reports the
	// conflict (a client may reach b for grpc, which b does not serve).
	for _, r := range imp.Sources {
		if r.Invalid != nil || len(r.Conflicts) != 1 || r.Conflicts[0].Reason != mcsv1a1.ServiceExportReasonPortConflict ||
			!strings.Contains(r.Conflicts[0].Message, "serves their union (grpc, http)") {
			t.Errorf("source %s: %+v, want one PortConflict naming the union", r.ClusterID, r)
		}
	}
	// The same ports everywhere: no conflict.
	same := Build("shop", "orders", []Source{
		{ClusterID: "c", Export: export(time.Minute), Service: service(httpPort(80)), Map: mapping("10.244.0.0/16", "10.72.0.0/16")},
		{ClusterID: "b", Export: export(time.Hour), Service: service(httpPort(80)), Map: mapping("10.244.0.0/16", "10.71.0.0/16")},
	}, Limits{})
	for _, r := range same.Sources {
		if r.Invalid != nil || len(r.Conflicts) != 0 {
			t.Errorf("the same ports: source %s: %+v, want no conflict", r.ClusterID, r)
		}
	}
}

// TestBuildTrafficPolicies: the ServiceImport carries the oldest export's internal traffic
// policy and traffic distribution (KEP-1645); an export that differs reports the conflict, and
// so does the oldest one; unset is Cluster and no distribution.
func TestBuildTrafficPolicies(t *testing.T) {
	local, preferClose := corev1.ServiceInternalTrafficPolicyLocal, "PreferClose"
	cluster := corev1.ServiceInternalTrafficPolicyCluster
	old := service(httpPort(80))
	old.Spec.InternalTrafficPolicy, old.Spec.TrafficDistribution = &local, &preferClose
	same := service(httpPort(80))
	same.Spec.InternalTrafficPolicy, same.Spec.TrafficDistribution = &local, &preferClose
	imp := Build("shop", "orders", []Source{
		{ClusterID: "old", Export: export(time.Hour), Service: old, Map: mapping("10.244.0.0/16", "10.71.0.0/16")},
		{ClusterID: "same", Export: export(30 * time.Minute), Service: same, Map: mapping("10.244.0.0/16", "10.72.0.0/16")},
		{ClusterID: "unset", Export: export(time.Minute), Service: service(httpPort(80)), Map: mapping("10.244.0.0/16", "10.73.0.0/16")},
	}, Limits{})
	spec := imp.ServiceImport.Spec
	if spec.InternalTrafficPolicy == nil || *spec.InternalTrafficPolicy != local || spec.TrafficDistribution == nil || *spec.TrafficDistribution != preferClose {
		t.Errorf("ServiceImport internalTrafficPolicy %v, trafficDistribution %v; want Local, PreferClose", spec.InternalTrafficPolicy, spec.TrafficDistribution)
	}
	reasons := map[string][]mcsv1a1.ServiceExportConditionReason{}
	for _, r := range imp.Sources {
		for _, c := range r.Conflicts {
			reasons[r.ClusterID] = append(reasons[r.ClusterID], c.Reason)
		}
	}
	want := "map[old:[InternalTrafficPolicyConflict TrafficDistributionConflict] unset:[InternalTrafficPolicyConflict TrafficDistributionConflict]]"
	if fmt.Sprint(reasons) != want {
		t.Errorf("conflicts %v, want %s", reasons, want)
	}
	// Cluster written out is the same as unset.
	explicit := service(httpPort(80))
	explicit.Spec.InternalTrafficPolicy = &cluster
	imp = Build("shop", "orders", []Source{
		{ClusterID: "a", Export: export(time.Hour), Service: explicit, Map: mapping("10.244.0.0/16", "10.71.0.0/16")},
		{ClusterID: "b", Export: export(time.Minute), Service: service(httpPort(80)), Map: mapping("10.244.0.0/16", "10.72.0.0/16")},
	}, Limits{})
	for _, r := range imp.Sources {
		if len(r.Conflicts) > 0 {
			t.Errorf("source %s: %+v, want no conflict", r.ClusterID, r.Conflicts)
		}
	}
}

func TestBuildConflicts(t *testing.T) {
	headless := service(httpPort(80))
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	external := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}}
	imp := Build("shop", "orders", []Source{
		{ClusterID: "new-port", Export: export(time.Second), Service: service(corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolUDP, Port: 80}),
			Slices: []discoveryv1.EndpointSlice{slice("10.244.5.5")}, Map: mapping("10.244.0.0/16", "10.73.0.0/16")},
		{ClusterID: "old", Export: export(time.Hour), Service: service(httpPort(80)),
			Slices: []discoveryv1.EndpointSlice{slice("10.244.1.1")}, Map: mapping("10.244.0.0/16", "10.71.0.0/16")},
		{ClusterID: "headless", Export: export(time.Minute), Service: headless,
			Slices: []discoveryv1.EndpointSlice{slice("10.244.2.2")}, Map: mapping("10.244.0.0/16", "10.72.0.0/16")},
		{ClusterID: "gone", Export: export(2 * time.Hour)},
		{ClusterID: "external", Export: export(3 * time.Hour), Service: external},
	}, Limits{})
	want := map[string]mcsv1a1.ServiceExportConditionReason{
		"new-port": mcsv1a1.ServiceExportReasonPortConflict, "headless": mcsv1a1.ServiceExportReasonTypeConflict,
		"gone": mcsv1a1.ServiceExportReasonNoService, "external": mcsv1a1.ServiceExportReasonInvalidServiceType,
		// The oldest export is involved in both conflicts (the MCS API: every export reports a
		// conflict), its type and ports being the ones used.
		"old": mcsv1a1.ServiceExportReasonTypeConflict,
	}
	for _, r := range imp.Sources {
		if r.ClusterID == "old" && (len(r.Conflicts) != 2 || !strings.Contains(r.Conflicts[0].Message, "over the export of cluster(s) headless") ||
			r.Conflicts[1].Reason != mcsv1a1.ServiceExportReasonPortConflict || !strings.Contains(r.Conflicts[1].Message, "new-port")) {
			t.Errorf("the winning export's conflicts: %+v", r.Conflicts)
		}
		var got mcsv1a1.ServiceExportConditionReason
		if r.Invalid != nil {
			got = r.Invalid.Reason
		} else if len(r.Conflicts) > 0 {
			got = r.Conflicts[0].Reason
		}
		if got != want[r.ClusterID] {
			t.Errorf("source %s: %q (%+v), want %q", r.ClusterID, got, r, want[r.ClusterID])
		}
	}
	if imp.ServiceImport.Spec.Type != mcsv1a1.ClusterSetIP || imp.ServiceImport.Spec.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("the oldest valid export did not win: %+v", imp.ServiceImport.Spec)
	}
	// The port conflict drops that port from new-port's slices; the type conflict drops
	// headless's endpoints; invalid exports are not listed as clusters.
	got := addresses(imp)
	if fmt.Sprint(got) != "map[new-port:[10.73.5.5] old:[10.71.1.1]]" {
		t.Errorf("endpoints %v", got)
	}
	for _, s := range imp.Slices {
		if s.Labels[SourceClusterLabel] == "new-port" && len(s.Ports) != 0 {
			t.Errorf("new-port's slice serves the conflicting port: %+v", s.Ports)
		}
	}
	if fmt.Sprint(imp.ServiceImport.Status.Clusters) != "[{headless} {new-port} {old}]" {
		t.Errorf("status.clusters %v", imp.ServiceImport.Status.Clusters)
	}
	if none := Build("shop", "orders", []Source{{ClusterID: "gone", Export: export(time.Hour)}}, Limits{}); none.ServiceImport != nil || none.Service != nil || len(none.Slices) != 0 {
		t.Errorf("no valid export, yet %+v", none)
	}
}

func TestBuildSplitsSlices(t *testing.T) {
	var addrs []string
	for i := range 250 {
		addrs = append(addrs, fmt.Sprintf("10.244.%d.%d", i/200, i%200+1))
	}
	imp := Build("shop", "orders", []Source{{ClusterID: "b", Export: export(time.Hour), Service: service(httpPort(80)),
		Slices: []discoveryv1.EndpointSlice{slice(addrs[:120]...), slice(addrs[120:]...)}, Map: mapping("10.244.0.0/16", "10.71.0.0/16")}}, Limits{})
	var sizes []int
	names := map[string]bool{}
	for _, s := range imp.Slices {
		sizes = append(sizes, len(s.Endpoints))
		names[s.Name] = true
	}
	if fmt.Sprint(sizes) != "[100 100 50]" || len(names) != 3 {
		t.Errorf("slice sizes %v, names %v: want 100, 100, 50 with distinct names", sizes, names)
	}
	capped := Build("shop", "orders", []Source{{ClusterID: "b", Export: export(time.Hour), Service: service(httpPort(80)),
		Slices: []discoveryv1.EndpointSlice{slice(addrs...)}, Map: mapping("10.244.0.0/16", "10.71.0.0/16")}}, Limits{MaxEndpointsPerSource: 30, MaxEndpointsPerSlice: 7})
	if r := capped.Sources[0]; r.Endpoints != 30 || r.Dropped != 220 || len(capped.Slices) != 5 {
		t.Errorf("capped at 30 per source, 7 per slice: %+v, %d slices", r, len(capped.Slices))
	}
}

// TestBuildPortUnionStaysValid (attack review): exports whose ports would merge into a Service
// the API server refuses (an unnamed port beside named ones, one port number under two names)
// get a PortConflict and leave the derived Service valid.
func TestBuildPortUnionStaysValid(t *testing.T) {
	old := Source{ClusterID: "old", Export: export(2 * time.Hour), Service: service(httpPort(80)),
		Slices: []discoveryv1.EndpointSlice{slice("10.244.1.5")}, Map: mapping("10.244.0.0/16", "10.71.0.0/16")}
	for name, svc := range map[string]*corev1.Service{
		"unnamed port":           service(corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: 8080}),
		"same number, new name":  service(corev1.ServicePort{Name: "web", Protocol: corev1.ProtocolTCP, Port: 80}),
		"same number, two ports": service(httpPort(80), corev1.ServicePort{Name: "alt", Protocol: corev1.ProtocolTCP, Port: 80}),
	} {
		t.Run(name, func(t *testing.T) {
			imp := Build("shop", "orders", []Source{old, {ClusterID: "new", Export: export(time.Hour), Service: svc,
				Slices: []discoveryv1.EndpointSlice{slice("10.244.2.5")}, Map: mapping("10.244.0.0/16", "10.72.0.0/16")}}, Limits{})
			ports := imp.Service.Spec.Ports
			if len(ports) != 1 || ports[0].Name != "http" || ports[0].Port != 80 {
				t.Errorf("derived ports %+v, want the oldest export's http 80 alone", ports)
			}
			for _, r := range imp.Sources {
				if r.ClusterID == "new" && (len(r.Conflicts) == 0 || r.Conflicts[0].Reason != mcsv1a1.ServiceExportReasonPortConflict) {
					t.Errorf("new export: %+v, want a PortConflict", r)
				}
			}
		})
	}
}

// TestBuildDuplicateClusterID (attack review): two sources naming one cluster make one set of
// slices and one status entry; the later one is refused.
func TestBuildDuplicateClusterID(t *testing.T) {
	a := Source{ClusterID: "b", Export: export(2 * time.Hour), Service: service(httpPort(80)),
		Slices: []discoveryv1.EndpointSlice{slice("10.244.1.5")}, Map: mapping("10.244.0.0/16", "10.71.0.0/16")}
	b := a
	b.Export = export(time.Hour)
	b.Slices = []discoveryv1.EndpointSlice{slice("10.244.9.9")}
	imp := Build("shop", "orders", []Source{b, a}, Limits{})
	names := map[string]bool{}
	for _, s := range imp.Slices {
		if names[s.Name] {
			t.Errorf("slice %s made twice", s.Name)
		}
		names[s.Name] = true
	}
	if len(imp.ServiceImport.Status.Clusters) != 1 || fmt.Sprint(addresses(imp)) != "map[b:[10.71.1.5]]" {
		t.Errorf("clusters %v, endpoints %v: want b once, with the oldest export's endpoint", imp.ServiceImport.Status.Clusters, addresses(imp))
	}
}

// TestBuildPortLimit (attack review): an import holds at most MaxPortsPerImport ports; the
// export defining more gets a PortConflict saying how many were left out, and its endpoints
// still serve the ports that joined.
func TestBuildPortLimit(t *testing.T) {
	var ports []corev1.ServicePort
	for i := range 150 {
		ports = append(ports, corev1.ServicePort{Name: fmt.Sprintf("p%03d", i), Protocol: corev1.ProtocolTCP, Port: int32(1000 + i)})
	}
	sl := slice("10.244.1.5")
	sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: ptr("p000"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr[int32](1000)},
		discoveryv1.EndpointPort{Name: ptr("p149"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr[int32](1149)})
	imp := Build("shop", "orders", []Source{{ClusterID: "b", Export: export(time.Hour), Service: service(ports...),
		Slices: []discoveryv1.EndpointSlice{sl}, Map: mapping("10.244.0.0/16", "10.71.0.0/16")}}, Limits{})
	if n := len(imp.Service.Spec.Ports); n != DefaultMaxPortsPerImport || len(imp.ServiceImport.Spec.Ports) != n {
		t.Errorf("derived Service with %d ports, ServiceImport %d: want %d", n, len(imp.ServiceImport.Spec.Ports), DefaultMaxPortsPerImport)
	}
	r := imp.Sources[0]
	if r.PortsOverLimit != 50 || len(r.Conflicts) != 1 || r.Conflicts[0].Reason != mcsv1a1.ServiceExportReasonPortConflict || !strings.Contains(r.Conflicts[0].Message, "50 port(s)") {
		t.Errorf("source result %+v: want 50 ports over the limit in one PortConflict", r)
	}
	if len(imp.Slices) != 1 || len(imp.Slices[0].Ports) != 1 || *imp.Slices[0].Ports[0].Name != "p000" {
		t.Errorf("slices %+v: want one, serving p000 alone (p149 is not in the import; http is no port of the Service)", imp.Slices)
	}
	if lifted := Build("shop", "orders", []Source{{ClusterID: "b", Export: export(time.Hour), Service: service(ports...)}}, Limits{MaxPortsPerImport: 150}); len(lifted.Service.Spec.Ports) != 150 {
		t.Errorf("MaxPortsPerImport 150: %d ports", len(lifted.Service.Spec.Ports))
	}
}

// TestBuildValidates (attack review): a peer's API server is not trusted to have validated
// what it serves. An endpoint whose hostname is no DNS-1123 label is dropped and counted (the
// API server would refuse its slice); ports with a number outside 1-65535, an unknown protocol
// or a bad name are left out of the Service and the slices; the rest is imported.
func TestBuildValidates(t *testing.T) {
	bad := slice("10.244.1.5", "10.244.1.6", "10.244.1.7")
	bad.Endpoints[0].Hostname = ptr("Not_A.Label")
	bad.Endpoints[1].Hostname = ptr("web-1")
	bad.Ports = append(bad.Ports,
		discoveryv1.EndpointPort{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr[int32](9090)}, // http twice
		discoveryv1.EndpointPort{Name: ptr("metrics"), Protocol: ptr(corev1.Protocol("ICMP")), Port: ptr[int32](9100)},
		discoveryv1.EndpointPort{Name: ptr("big"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr[int32](70000)})
	svc := service(httpPort(80),
		corev1.ServicePort{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9100},
		corev1.ServicePort{Name: "big", Protocol: corev1.ProtocolTCP, Port: 8443},
		corev1.ServicePort{Name: "zero", Protocol: corev1.ProtocolTCP, Port: 0},
		corev1.ServicePort{Name: "Bad_Name", Protocol: corev1.ProtocolTCP, Port: 81},
		corev1.ServicePort{Name: "icmp", Protocol: "ICMP", Port: 82})
	imp := Build("shop", "orders", []Source{{ClusterID: "b", Export: export(time.Hour), Service: svc,
		Slices: []discoveryv1.EndpointSlice{bad}, Map: mapping("10.244.0.0/16", "10.71.0.0/16")}}, Limits{})
	var names []string
	for _, p := range imp.Service.Spec.Ports {
		names = append(names, p.Name)
	}
	if fmt.Sprint(names) != "[big http metrics]" {
		t.Errorf("derived ports %v, want big, http, metrics (zero, Bad_Name, icmp invalid)", names)
	}
	r := imp.Sources[0]
	if r.InvalidHostname != 1 || r.Endpoints != 2 || r.InvalidPorts != 5 {
		t.Errorf("source result %+v: want 1 invalid hostname, 2 endpoints imported, 5 invalid ports (3 of the Service, 2 of the slice)", r)
	}
	if fmt.Sprint(addresses(imp)) != "map[b:[10.71.1.6 10.71.1.7]]" {
		t.Errorf("endpoints %v", addresses(imp))
	}
	for _, s := range imp.Slices {
		if len(s.Ports) != 1 || *s.Ports[0].Name != "http" || *s.Ports[0].Port != 8080 {
			t.Errorf("slice ports %+v: want http 8080 once", s.Ports)
		}
		for _, e := range s.Endpoints {
			if e.Hostname != nil && *e.Hostname != "web-1" {
				t.Errorf("hostname %q imported", *e.Hostname)
			}
		}
	}
}

// TestBuildEndpointBudget: a source's MaxEndpoints (what is left of its cluster's budget) caps
// its endpoints below the per-source limit; 0 imports none of them, and the import stays.
func TestBuildEndpointBudget(t *testing.T) {
	src := Source{ClusterID: "b", Export: export(time.Hour), Service: service(httpPort(80)),
		Slices: []discoveryv1.EndpointSlice{slice("10.244.1.5", "10.244.1.6", "10.244.1.7")}, Map: mapping("10.244.0.0/16", "10.71.0.0/16")}
	for budget, want := range map[int]int{0: 0, 2: 2, 5: 3} {
		src.MaxEndpoints = &budget
		imp := Build("shop", "orders", []Source{src}, Limits{})
		if r := imp.Sources[0]; r.Endpoints != want || r.OverBudget != 3-want || imp.ServiceImport == nil {
			t.Errorf("budget %d: %+v, import %v; want %d endpoints, %d over budget", budget, r, imp.ServiceImport != nil, want, 3-want)
		}
	}
}

// TestBuildExportedLabels: the ServiceImport carries the oldest export's exported labels and
// annotations (KEP-1645), not the Service's; invalid keys and values, reserved prefixes
// (kubernetes.io/, the MCS API's, skein's, the managed-by label) and oversized annotations are
// left out; an export whose set differs reports LabelsConflict / AnnotationsConflict, and so
// does the oldest.
func TestBuildExportedLabels(t *testing.T) {
	old := export(time.Hour)
	old.Spec.ExportedLabels = map[string]string{"tier": "gold", "bad key!": "x", "ok": "bad value!", "kubernetes.io/service-name": "x",
		"app.kubernetes.io/managed-by": "me", "multicluster.kubernetes.io/service-name": "y"}
	old.Spec.ExportedAnnotations = map[string]string{"owner": "shop-team", "skein.io/x": "y"}
	same := export(30 * time.Minute)
	same.Spec.ExportedLabels = map[string]string{"tier": "gold"}
	same.Spec.ExportedAnnotations = map[string]string{"owner": "shop-team"}
	other := export(time.Minute)
	other.Spec.ExportedLabels = map[string]string{"tier": "silver"}
	other.Spec.ExportedAnnotations = map[string]string{"owner": "shop-team"}
	svc := service(httpPort(80))
	svc.Labels = map[string]string{"not-exported": "x"}
	imp := Build("shop", "orders", []Source{
		{ClusterID: "old", Export: old, Service: svc, Map: mapping("10.244.0.0/16", "10.71.0.0/16")},
		{ClusterID: "same", Export: same, Service: service(httpPort(80)), Map: mapping("10.244.0.0/16", "10.72.0.0/16")},
		{ClusterID: "other", Export: other, Service: service(httpPort(80)), Map: mapping("10.244.0.0/16", "10.73.0.0/16")},
	}, Limits{})
	if fmt.Sprint(imp.ServiceImport.Labels) != "map[tier:gold]" || fmt.Sprint(imp.ServiceImport.Annotations) != "map[owner:shop-team]" {
		t.Errorf("ServiceImport labels %v, annotations %v; want tier=gold, owner=shop-team", imp.ServiceImport.Labels, imp.ServiceImport.Annotations)
	}
	reasons := map[string][]mcsv1a1.ServiceExportConditionReason{}
	for _, r := range imp.Sources {
		for _, c := range r.Conflicts {
			reasons[r.ClusterID] = append(reasons[r.ClusterID], c.Reason)
		}
	}
	if want := "map[old:[LabelsConflict] other:[LabelsConflict]]"; fmt.Sprint(reasons) != want {
		t.Errorf("conflicts %v, want %s", reasons, want)
	}
	// Annotations over the bound are left out whole.
	huge := export(time.Hour)
	huge.Spec.ExportedAnnotations = map[string]string{"a": strings.Repeat("x", MaxExportedAnnotationBytes)}
	imp = Build("shop", "orders", []Source{{ClusterID: "old", Export: huge, Service: service(httpPort(80)), Map: mapping("10.244.0.0/16", "10.71.0.0/16")}}, Limits{})
	if len(imp.ServiceImport.Annotations) != 0 {
		t.Errorf("annotations of %d bytes carried", MaxExportedAnnotationBytes)
	}
}

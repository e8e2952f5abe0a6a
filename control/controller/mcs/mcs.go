// Package mcs computes what one cluster holds for a service exported through the Kubernetes
// Multi-Cluster Services API (multicluster.x-k8s.io/v1alpha1): given every cluster's export of
// one namespace/name (its ServiceExport, Service and EndpointSlices) and how this cluster sees
// each exporter's pods, it returns the ServiceImport, the derived ClusterIP Service and the
// EndpointSlices (addresses translated into this cluster's view), and the conflicts of each
// export. It is pure: no API calls, no clock; the reconciler (serviceimport.go in the parent
// package) reads the inputs and writes the outputs.
//
// Everything from a peer is untrusted: endpoints outside the peer's published pod CIDRs are
// dropped (they could point anywhere in this cluster), node names and target references are
// not copied (a peer's node name may be one of ours), and counts are capped by Limits.
package mcs

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/skein-net/skein/dataplane/nat"
)

// ManagedBy is the endpointslice.kubernetes.io/managed-by value of the slices skein writes.
const ManagedBy = "skein"

// Labels skein puts on what it derives.
const (
	// ImportLabel, on the derived Service and its slices, names the ServiceImport.
	ImportLabel = mcsv1a1.LabelServiceName
	// SourceClusterLabel, on a slice, is the cluster its endpoints live in.
	SourceClusterLabel = mcsv1a1.LabelSourceCluster
)

// DefaultMaxEndpointsPerSlice is what kube-controller-manager puts in one slice by default.
const DefaultMaxEndpointsPerSlice = 100

// DefaultMaxPortsPerImport is how many ports an import holds at most: the ports of its
// EndpointSlices are those of the derived Service, and a slice may list 100 ports.
const DefaultMaxPortsPerImport = 100

// Identity is the address map of this cluster's own exports: its pod CIDRs, as they are.
func Identity(cidrs ...netip.Prefix) (*nat.PrefixMap, error) {
	pairs := make([]nat.Pair, len(cidrs))
	for i, c := range cidrs {
		pairs[i] = nat.Pair{From: c, To: c}
	}
	return nat.NewPrefixMap(pairs...)
}

// Source is one cluster's export of the service.
type Source struct {
	ClusterID string
	Export    *mcsv1a1.ServiceExport
	// Service is the exported Service; nil when the cluster exports a name it has no Service
	// of (the export is then invalid and contributes nothing).
	Service *corev1.Service
	// Slices are the cluster's EndpointSlices of the Service.
	Slices []discoveryv1.EndpointSlice
	// MaxEndpoints, when set, caps the source's endpoints below Limits.MaxEndpointsPerSource:
	// what is left of its cluster's endpoint budget (0: none is left).
	MaxEndpoints *int
	// Map translates the cluster's pod addresses into this cluster's view: the fabric's own
	// NAT (each of the exporter's pod CIDRs onto the prefix this cluster sees it as), so an
	// endpoint is the address the gateway will translate back to that pod. Addresses it maps
	// nothing for are dropped; nil contributes no endpoint (a peering whose Configuration has no
	// status yet).
	Map *nat.PrefixMap
}

// Limits cap what one import may hold.
type Limits struct {
	// MaxEndpointsPerSlice (default DefaultMaxEndpointsPerSlice).
	MaxEndpointsPerSlice int
	// MaxEndpointsPerSource drops a source's endpoints beyond this (0: 10,000).
	MaxEndpointsPerSource int
	// MaxPortsPerImport refuses the ports of the union beyond this (0:
	// DefaultMaxPortsPerImport); the exports defining them get a PortConflict.
	MaxPortsPerImport int
}

// Conflict is why an export's property lost to an older export's.
type Conflict struct {
	Reason  mcsv1a1.ServiceExportConditionReason
	Message string
}

// SourceResult is what became of one source.
type SourceResult struct {
	ClusterID string
	// Invalid is set when the export contributes nothing (no Service, ExternalName).
	Invalid *Conflict
	// Conflicts are the properties where an older export won.
	Conflicts []Conflict
	// Endpoints is how many of its endpoints were imported; Dropped how many were not (outside
	// its published pod CIDRs, no address, invalid, over a limit), with why in DropReasons.
	Endpoints, Dropped int
	DropReasons        []string
	// Of the dropped endpoints, OverBudget were beyond Source.MaxEndpoints and InvalidHostname
	// had a hostname that is no DNS-1123 label. InvalidPorts counts the ports of its Service
	// and slices left out as invalid (number, protocol, name), PortsOverLimit the ports of its
	// Service beyond Limits.MaxPortsPerImport.
	OverBudget, InvalidHostname, InvalidPorts, PortsOverLimit int
}

// Import is what this cluster holds for one exported namespace/name. ServiceImport, Service
// and Slices are nil/empty when no valid source remains (the reconciler deletes them).
type Import struct {
	ServiceImport *mcsv1a1.ServiceImport
	Service       *corev1.Service
	Slices        []*discoveryv1.EndpointSlice
	Sources       []SourceResult
}

// DerivedServiceName is the name of the Service derived from ServiceImport name: a hash (64
// bits: a peer cannot search out a name whose derived Service is another import's), so it never
// takes the name of a Service of this cluster. The reconciler still refuses a derived Service
// labelled for another import.
func DerivedServiceName(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "derived-" + hex.EncodeToString(sum[:])[:16]
}

// clusterHash shortens a cluster id for object names.
func clusterHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])[:8]
}

// Build computes the import of namespace/name from its sources (any order). The oldest valid
// export (creation time, then cluster id) decides the type, session affinity and each named
// port; a later export that differs gets a Conflict and still contributes its endpoints,
// except on a type conflict (its endpoints would answer the wrong kind of service).
func Build(namespace, name string, sources []Source, lim Limits) Import {
	if lim.MaxEndpointsPerSlice <= 0 {
		lim.MaxEndpointsPerSlice = DefaultMaxEndpointsPerSlice
	}
	if lim.MaxEndpointsPerSource <= 0 {
		lim.MaxEndpointsPerSource = 10000
	}
	if lim.MaxPortsPerImport <= 0 {
		lim.MaxPortsPerImport = DefaultMaxPortsPerImport
	}
	srcs := slices.Clone(sources)
	slices.SortFunc(srcs, func(a, b Source) int {
		if c := exportTime(a).Compare(exportTime(b).Time); c != 0 {
			return c
		}
		return strings.Compare(a.ClusterID, b.ClusterID)
	})
	var out Import
	var valid []int
	seenID := map[string]bool{}
	for i, s := range srcs {
		r := SourceResult{ClusterID: s.ClusterID}
		switch {
		case seenID[s.ClusterID]:
			r.Invalid = &Conflict{"DuplicateClusterID", fmt.Sprintf("cluster %s exports it twice (two sets of credentials name that cluster): only the oldest export counts", s.ClusterID)}
		case s.Service == nil:
			r.Invalid = &Conflict{mcsv1a1.ServiceExportReasonNoService, fmt.Sprintf("cluster %s has no Service %s/%s", s.ClusterID, namespace, name)}
		case s.Service.Spec.Type == corev1.ServiceTypeExternalName:
			r.Invalid = &Conflict{mcsv1a1.ServiceExportReasonInvalidServiceType, "an ExternalName Service cannot be exported"}
		default:
			valid = append(valid, i)
		}
		seenID[s.ClusterID] = true
		out.Sources = append(out.Sources, r)
	}
	if len(valid) == 0 {
		return out
	}
	winner := srcs[valid[0]].Service
	typ := importType(winner)
	imp := &mcsv1a1.ServiceImport{
		TypeMeta:   metav1.TypeMeta{APIVersion: mcsv1a1.GroupVersion.String(), Kind: mcsv1a1.ServiceImportKindName},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: mcsv1a1.ServiceImportSpec{Type: typ, SessionAffinity: winner.Spec.SessionAffinity,
			SessionAffinityConfig: winner.Spec.SessionAffinityConfig.DeepCopy(), IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			InternalTrafficPolicy: winner.Spec.InternalTrafficPolicy, TrafficDistribution: winner.Spec.TrafficDistribution},
	}
	if imp.Spec.SessionAffinity == "" {
		imp.Spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	// The oldest export's exported labels and annotations go on the ServiceImport (KEP-1645),
	// those a ServiceImport may carry.
	var winnerLabels, winnerAnnotations map[string]string
	if e := srcs[valid[0]].Export; e != nil {
		winnerLabels, winnerAnnotations = validLabels(e.Spec.ExportedLabels), validAnnotations(e.Spec.ExportedAnnotations)
	}
	imp.Labels, imp.Annotations = winnerLabels, winnerAnnotations
	// Ports: the union by name; the oldest export's definition of a name wins. Each port is
	// looked up by name and by number in maps: linear in the ports of all exports.
	type portDef struct {
		p     corev1.ServicePort
		owner string
	}
	type portNumber struct {
		port  int32
		proto corev1.Protocol
	}
	ports := map[string]portDef{}
	byNumber := map[portNumber]string{}
	var order []string
	// A conflict involves every export of it (the MCS API: each ServiceExport reports it), the
	// one whose setting won too: won[source][reason] lists the clusters it won over.
	index := map[string]int{}
	for _, i := range valid {
		index[srcs[i].ClusterID] = i
	}
	won := map[int]map[mcsv1a1.ServiceExportConditionReason][]string{}
	lost := func(winner int, reason mcsv1a1.ServiceExportConditionReason, loser string) {
		if won[winner] == nil {
			won[winner] = map[mcsv1a1.ServiceExportConditionReason][]string{}
		}
		if !slices.Contains(won[winner][reason], loser) {
			won[winner][reason] = append(won[winner][reason], loser)
		}
	}
	first := valid[0]
	portsOf := map[int]map[string]bool{} // the port names of each export merged
	for _, i := range valid {
		s := srcs[i]
		r := &out.Sources[i]
		if got := importType(s.Service); got != typ {
			r.Conflicts = append(r.Conflicts, Conflict{mcsv1a1.ServiceExportReasonTypeConflict,
				fmt.Sprintf("exported as %s, but the oldest export (cluster %s) is %s", got, srcs[first].ClusterID, typ)})
			lost(first, mcsv1a1.ServiceExportReasonTypeConflict, s.ClusterID)
			continue
		}
		if s.Service.Spec.SessionAffinity != winner.Spec.SessionAffinity && !(s.Service.Spec.SessionAffinity == "" || winner.Spec.SessionAffinity == "") {
			r.Conflicts = append(r.Conflicts, Conflict{mcsv1a1.ServiceExportReasonSessionAffinityConflict,
				fmt.Sprintf("session affinity %s, but the oldest export (cluster %s) has %s", s.Service.Spec.SessionAffinity, srcs[first].ClusterID, winner.Spec.SessionAffinity)})
			lost(first, mcsv1a1.ServiceExportReasonSessionAffinityConflict, s.ClusterID)
		}
		if e := s.Export; i != first && e != nil {
			if !maps.Equal(validLabels(e.Spec.ExportedLabels), winnerLabels) {
				r.Conflicts = append(r.Conflicts, Conflict{mcsv1a1.ServiceExportReasonLabelsConflict,
					fmt.Sprintf("exported labels differ from the oldest export's (cluster %s), which the ServiceImport carries", srcs[first].ClusterID)})
				lost(first, mcsv1a1.ServiceExportReasonLabelsConflict, s.ClusterID)
			}
			if !maps.Equal(validAnnotations(e.Spec.ExportedAnnotations), winnerAnnotations) {
				r.Conflicts = append(r.Conflicts, Conflict{mcsv1a1.ServiceExportReasonAnnotationsConflict,
					fmt.Sprintf("exported annotations differ from the oldest export's (cluster %s), which the ServiceImport carries", srcs[first].ClusterID)})
				lost(first, mcsv1a1.ServiceExportReasonAnnotationsConflict, s.ClusterID)
			}
		}
		if got, want := trafficPolicy(s.Service), trafficPolicy(winner); got != want {
			r.Conflicts = append(r.Conflicts, Conflict{mcsv1a1.ServiceExportReasonInternalTrafficPolicyConflict,
				fmt.Sprintf("internal traffic policy %s, but the oldest export (cluster %s) has %s", got, srcs[first].ClusterID, want)})
			lost(first, mcsv1a1.ServiceExportReasonInternalTrafficPolicyConflict, s.ClusterID)
		}
		if got, want := trafficDistribution(s.Service), trafficDistribution(winner); got != want {
			r.Conflicts = append(r.Conflicts, Conflict{mcsv1a1.ServiceExportReasonTrafficDistributionConflict,
				fmt.Sprintf("traffic distribution %q, but the oldest export (cluster %s) has %q", got, srcs[first].ClusterID, want)})
			lost(first, mcsv1a1.ServiceExportReasonTrafficDistributionConflict, s.ClusterID)
		}
		portsOf[i] = map[string]bool{}
		for _, p := range s.Service.Spec.Ports {
			portsOf[i][p.Name] = true
			proto := cmp.Or(p.Protocol, corev1.ProtocolTCP)
			d, ok := ports[p.Name]
			if !ok {
				// A new name joins only if the derived Service stays valid: every port named
				// when there are several, each port number and protocol once, and no more
				// ports than a slice may list.
				if len(ports) >= lim.MaxPortsPerImport {
					r.PortsOverLimit++ // one conflict for them all, below
					continue
				}
				if why := invalidServicePort(p.Name, p.Port, proto); why != "" {
					r.InvalidPorts++
					r.Conflicts = append(r.Conflicts, Conflict{mcsv1a1.ServiceExportReasonPortConflict, fmt.Sprintf("port %q (%d/%s) left out: %s", p.Name, p.Port, proto, why)})
					continue
				}
				_, unnamed := ports[""]
				clash, clashes := byNumber[portNumber{p.Port, proto}]
				switch {
				case len(ports) > 0 && (p.Name == "" || unnamed):
					r.Conflicts = append(r.Conflicts, Conflict{mcsv1a1.ServiceExportReasonPortConflict,
						fmt.Sprintf("port %d/%s: an unnamed port and named ports cannot be merged (name every port of the Service in every cluster)", p.Port, proto)})
				case clashes:
					r.Conflicts = append(r.Conflicts, Conflict{mcsv1a1.ServiceExportReasonPortConflict,
						fmt.Sprintf("port %q is %d/%s, which the export of cluster %s names %q", p.Name, p.Port, proto, ports[clash].owner, clash)})
					lost(index[ports[clash].owner], mcsv1a1.ServiceExportReasonPortConflict, s.ClusterID)
				default:
					appProtocol := p.AppProtocol
					if appProtocol != nil && len(validation.IsQualifiedName(*appProtocol)) > 0 {
						appProtocol = nil
					}
					ports[p.Name] = portDef{corev1.ServicePort{Name: p.Name, Protocol: proto, Port: p.Port, AppProtocol: appProtocol}, s.ClusterID}
					byNumber[portNumber{p.Port, proto}] = p.Name
					order = append(order, p.Name)
				}
				continue
			}
			if d.p.Port != p.Port || d.p.Protocol != proto {
				r.Conflicts = append(r.Conflicts, Conflict{mcsv1a1.ServiceExportReasonPortConflict,
					fmt.Sprintf("port %q is %d/%s, but the oldest export defining it (cluster %s) has %d/%s", p.Name, p.Port, proto, d.owner, d.p.Port, d.p.Protocol)})
				lost(index[d.owner], mcsv1a1.ServiceExportReasonPortConflict, s.ClusterID)
			}
		}
		if r.PortsOverLimit > 0 {
			r.Conflicts = append(r.Conflicts, Conflict{mcsv1a1.ServiceExportReasonPortConflict,
				fmt.Sprintf("%d port(s) left out: an import holds at most %d ports", r.PortsOverLimit, lim.MaxPortsPerImport)})
		}
	}
	// Exports whose Services list different ports: the import serves the union, so a client
	// may be balanced to a cluster that does not serve the port it calls. Every export
	// involved reports it (the MCS conformance suite: "expose the union of the constituent
	// service ports and raise a conflict").
	union := map[string]bool{}
	for _, names := range portsOf {
		for n := range names {
			union[n] = true
		}
	}
	differ := false
	for _, names := range portsOf {
		differ = differ || len(names) != len(union)
	}
	if differ {
		all := slices.Sorted(maps.Keys(union))
		for i, names := range portsOf {
			out.Sources[i].Conflicts = append(out.Sources[i].Conflicts, Conflict{mcsv1a1.ServiceExportReasonPortConflict,
				fmt.Sprintf("the exports' Services list different ports: the import serves their union (%s), this cluster's Service lists %s; a client may reach a cluster without the port it calls",
					portList(all), portList(slices.Sorted(maps.Keys(names))))})
		}
	}
	// The exports that won: a conflict of theirs too, after their own.
	for i, reasons := range won {
		for _, reason := range []mcsv1a1.ServiceExportConditionReason{mcsv1a1.ServiceExportReasonTypeConflict, mcsv1a1.ServiceExportReasonPortConflict,
			mcsv1a1.ServiceExportReasonSessionAffinityConflict, mcsv1a1.ServiceExportReasonInternalTrafficPolicyConflict, mcsv1a1.ServiceExportReasonTrafficDistributionConflict,
			mcsv1a1.ServiceExportReasonLabelsConflict, mcsv1a1.ServiceExportReasonAnnotationsConflict} {
			if ids := reasons[reason]; len(ids) > 0 {
				slices.Sort(ids)
				out.Sources[i].Conflicts = append(out.Sources[i].Conflicts, Conflict{reason,
					fmt.Sprintf("%s: this export's is used, as the oldest, over the export of cluster(s) %s, which differ", conflictSubject[reason], strings.Join(ids, ", "))})
			}
		}
	}
	slices.Sort(order)
	for _, n := range order {
		imp.Spec.Ports = append(imp.Spec.Ports, mcsv1a1.ServicePort{Name: n, Protocol: ports[n].p.Protocol, Port: ports[n].p.Port, AppProtocol: ports[n].p.AppProtocol})
	}
	derived := DerivedServiceName(name)
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: derived,
			Labels: map[string]string{ImportLabel: name}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, SessionAffinity: imp.Spec.SessionAffinity,
			SessionAffinityConfig: imp.Spec.SessionAffinityConfig.DeepCopy()},
	}
	if typ == mcsv1a1.Headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	for _, n := range order {
		svc.Spec.Ports = append(svc.Spec.Ports, ports[n].p)
	}
	var clusters []string
	for _, i := range valid {
		s := srcs[i]
		r := &out.Sources[i]
		clusters = append(clusters, s.ClusterID)
		if importType(s.Service) != typ {
			continue // its endpoints would answer the wrong kind of service
		}
		// Ports this source may serve: the ones whose definition it agrees with.
		agreed := map[string]bool{}
		for _, p := range s.Service.Spec.Ports {
			if d := ports[p.Name]; d.p.Port == p.Port && d.p.Protocol == cmp.Or(p.Protocol, corev1.ProtocolTCP) {
				agreed[p.Name] = true
			}
		}
		out.Slices = append(out.Slices, sourceSlices(namespace, name, derived, s, agreed, lim, r)...)
	}
	slices.Sort(clusters)
	for _, c := range clusters {
		imp.Status.Clusters = append(imp.Status.Clusters, mcsv1a1.ClusterStatus{Cluster: c})
	}
	out.ServiceImport, out.Service = imp, svc
	return out
}

// portList names ports for a message ("" is the unnamed port).
func portList(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = cmp.Or(n, "(unnamed)")
	}
	return strings.Join(out, ", ")
}

// conflictSubject names what a conflict reason is about.
var conflictSubject = map[mcsv1a1.ServiceExportConditionReason]string{
	mcsv1a1.ServiceExportReasonTypeConflict: "type", mcsv1a1.ServiceExportReasonPortConflict: "ports",
	mcsv1a1.ServiceExportReasonSessionAffinityConflict:       "session affinity",
	mcsv1a1.ServiceExportReasonInternalTrafficPolicyConflict: "internal traffic policy",
	mcsv1a1.ServiceExportReasonTrafficDistributionConflict:   "traffic distribution",
	mcsv1a1.ServiceExportReasonLabelsConflict:                "exported labels",
	mcsv1a1.ServiceExportReasonAnnotationsConflict:           "exported annotations",
}

// MaxExportedAnnotationBytes bounds the exported annotations an import carries (keys and
// values together); an export's annotations beyond it are left out whole.
const MaxExportedAnnotationBytes = 16 << 10

// reservedPrefixes are label and annotation key prefixes an export does not set on a
// ServiceImport: Kubernetes' own and the MCS API's (what controllers act on), skein's.
var reservedPrefixes = []string{"kubernetes.io/", "k8s.io/", "multicluster.kubernetes.io/", "multicluster.x-k8s.io/", "skein.io/", "services.skein.io/", "app.kubernetes.io/managed-by"}

func reserved(key string) bool {
	for _, p := range reservedPrefixes {
		if key == p || strings.HasPrefix(key, p) || strings.Contains(key, "."+p) {
			return true
		}
	}
	return false
}

// validLabels are the labels of l a ServiceImport may carry: valid keys and values, not
// reserved, at most 64 (nil when none).
func validLabels(l map[string]string) map[string]string {
	var out map[string]string
	for k, v := range l {
		if len(out) == 64 || reserved(k) || len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// validAnnotations are the annotations of a a ServiceImport may carry: valid keys, not
// reserved, at most 64 and MaxExportedAnnotationBytes in all (nil when none, or over).
func validAnnotations(a map[string]string) map[string]string {
	var out map[string]string
	size := 0
	for k, v := range a {
		if reserved(k) || len(validation.IsQualifiedName(k)) > 0 {
			continue
		}
		if size += len(k) + len(v); size > MaxExportedAnnotationBytes || len(out) == 64 {
			return nil
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// trafficPolicy is s's internal traffic policy (unset: Cluster, the default).
func trafficPolicy(s *corev1.Service) corev1.ServiceInternalTrafficPolicy {
	if p := s.Spec.InternalTrafficPolicy; p != nil && *p != "" {
		return *p
	}
	return corev1.ServiceInternalTrafficPolicyCluster
}

// trafficDistribution is s's traffic distribution ("" when unset).
func trafficDistribution(s *corev1.Service) string {
	if d := s.Spec.TrafficDistribution; d != nil {
		return *d
	}
	return ""
}

func exportTime(s Source) metav1.Time {
	if s.Export == nil {
		return metav1.Time{}
	}
	return s.Export.CreationTimestamp
}

func importType(s *corev1.Service) mcsv1a1.ServiceImportType {
	if s.Spec.ClusterIP == corev1.ClusterIPNone {
		return mcsv1a1.Headless
	}
	return mcsv1a1.ClusterSetIP
}

// endpoint is one imported endpoint with the ports it serves.
type endpoint struct {
	ep    discoveryv1.Endpoint
	ports []discoveryv1.EndpointPort
	key   string // the port set, for grouping
}

// sourceSlices translates one source's slices: endpoints grouped by port set, sorted by
// address, chunked by lim.MaxEndpointsPerSlice, each chunk a slice named after the derived
// Service, the source cluster and the chunk's index.
func sourceSlices(namespace, name, derived string, s Source, agreed map[string]bool, lim Limits, r *SourceResult) []*discoveryv1.EndpointSlice {
	if s.Map == nil {
		if n := countEndpoints(s.Slices); n > 0 {
			r.Dropped += n
			r.DropReasons = append(r.DropReasons, fmt.Sprintf("%d endpoint(s): no address map for cluster %s yet (its Configuration has no status)", n, s.ClusterID))
		}
		return nil
	}
	seen := map[netip.Addr]bool{}
	var eps []endpoint
	outside := 0
	for _, sl := range s.Slices {
		if sl.AddressType != discoveryv1.AddressTypeIPv4 {
			r.Dropped += len(sl.Endpoints)
			if len(sl.Endpoints) > 0 {
				r.DropReasons = append(r.DropReasons, fmt.Sprintf("%d %s endpoint(s): only IPv4 is imported", len(sl.Endpoints), sl.AddressType))
			}
			continue
		}
		var ports []discoveryv1.EndpointPort
		named := map[string]bool{}
		for _, p := range sl.Ports {
			n := deref(p.Name)
			if !agreed[n] || named[n] {
				continue // a port the import does not serve, or a name listed twice
			}
			if p.Port != nil && invalidServicePort(n, *p.Port, derefProto(p.Protocol)) != "" || p.Port == nil && invalidServicePort(n, 1, derefProto(p.Protocol)) != "" {
				r.InvalidPorts++
				continue
			}
			named[n] = true
			ep := *p.DeepCopy()
			if ep.AppProtocol != nil && len(validation.IsQualifiedName(*ep.AppProtocol)) > 0 {
				ep.AppProtocol = nil
			}
			ports = append(ports, ep)
		}
		slices.SortFunc(ports, func(a, b discoveryv1.EndpointPort) int { return strings.Compare(deref(a.Name), deref(b.Name)) })
		key := portKey(ports)
		for _, e := range sl.Endpoints {
			if len(e.Addresses) == 0 {
				r.Dropped++
				continue
			}
			a, err := netip.ParseAddr(e.Addresses[0])
			if err != nil {
				r.Dropped++
				continue
			}
			t, ok := s.Map.Map(a.Unmap())
			if !ok {
				outside++
				continue
			}
			if seen[t] {
				continue // the same endpoint in two slices (during a slice update)
			}
			if e.Hostname != nil && len(validation.IsDNS1123Label(*e.Hostname)) > 0 {
				// The API server would refuse the slice holding it (and, written with the
				// others, every slice after it).
				r.InvalidHostname++
				continue
			}
			seen[t] = true
			ep := discoveryv1.Endpoint{Addresses: []string{t.String()}, Hostname: e.Hostname,
				Conditions: discoveryv1.EndpointConditions{Ready: boolCopy(e.Conditions.Ready), Serving: boolCopy(e.Conditions.Serving), Terminating: boolCopy(e.Conditions.Terminating)}}
			eps = append(eps, endpoint{ep: ep, ports: ports, key: key})
		}
	}
	if r.InvalidHostname > 0 {
		r.Dropped += r.InvalidHostname
		r.DropReasons = append(r.DropReasons, fmt.Sprintf("%d endpoint(s) whose hostname is not a DNS-1123 label", r.InvalidHostname))
	}
	if r.InvalidPorts > 0 {
		r.DropReasons = append(r.DropReasons, fmt.Sprintf("%d port(s) of its slices left out as invalid (number 1-65535, protocol TCP, UDP or SCTP, name a DNS-1123 label)", r.InvalidPorts))
	}
	if outside > 0 {
		r.Dropped += outside
		r.DropReasons = append(r.DropReasons, fmt.Sprintf("%d endpoint(s) outside cluster %s's published pod CIDRs (host-network or foreign addresses are not reachable through the fabric)", outside, s.ClusterID))
	}
	slices.SortFunc(eps, func(a, b endpoint) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return netip.MustParseAddr(a.ep.Addresses[0]).Compare(netip.MustParseAddr(b.ep.Addresses[0]))
	})
	if len(eps) > lim.MaxEndpointsPerSource {
		r.Dropped += len(eps) - lim.MaxEndpointsPerSource
		r.DropReasons = append(r.DropReasons, fmt.Sprintf("%d endpoint(s) over the limit of %d per cluster", len(eps)-lim.MaxEndpointsPerSource, lim.MaxEndpointsPerSource))
		eps = eps[:lim.MaxEndpointsPerSource]
	}
	if s.MaxEndpoints != nil && len(eps) > max(0, *s.MaxEndpoints) {
		n := max(0, *s.MaxEndpoints)
		r.OverBudget = len(eps) - n
		r.Dropped += r.OverBudget
		r.DropReasons = append(r.DropReasons, fmt.Sprintf("%d endpoint(s) over cluster %s's endpoint budget (%d left for this import)", r.OverBudget, s.ClusterID, n))
		eps = eps[:n]
	}
	r.Endpoints = len(eps)
	var out []*discoveryv1.EndpointSlice
	for start := 0; start < len(eps); {
		end := start + 1
		for end < len(eps) && end-start < lim.MaxEndpointsPerSlice && eps[end].key == eps[start].key {
			end++
		}
		sl := &discoveryv1.EndpointSlice{
			TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("%s-%s-%d", derived, clusterHash(s.ClusterID), len(out)),
				Labels: map[string]string{
					discoveryv1.LabelServiceName: derived,
					discoveryv1.LabelManagedBy:   ManagedBy,
					ImportLabel:                  name,
					SourceClusterLabel:           s.ClusterID,
				}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       eps[start].ports,
		}
		for _, e := range eps[start:end] {
			sl.Endpoints = append(sl.Endpoints, e.ep)
		}
		out = append(out, sl)
		start = end
	}
	return out
}

// invalidServicePort says why a port cannot be in a Service or an EndpointSlice ("" when it
// can): a peer's API server is not trusted to have checked it.
func invalidServicePort(name string, port int32, proto corev1.Protocol) string {
	switch {
	case port < 1 || port > 65535:
		return "the port number is not 1-65535"
	case proto != corev1.ProtocolTCP && proto != corev1.ProtocolUDP && proto != corev1.ProtocolSCTP:
		return "the protocol is not TCP, UDP or SCTP"
	case name != "" && len(validation.IsDNS1123Label(name)) > 0:
		return "the name is not a DNS-1123 label"
	}
	return ""
}

func countEndpoints(sls []discoveryv1.EndpointSlice) int {
	n := 0
	for _, s := range sls {
		n += len(s.Endpoints)
	}
	return n
}

func portKey(ps []discoveryv1.EndpointPort) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "%s/%s/%d,", deref(p.Name), derefProto(p.Protocol), derefInt(p.Port))
	}
	return b.String()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefProto(p *corev1.Protocol) corev1.Protocol {
	if p == nil {
		return corev1.ProtocolTCP
	}
	return *p
}

func derefInt(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func boolCopy(b *bool) *bool {
	if b == nil {
		return nil
	}
	v := *b
	return &v
}

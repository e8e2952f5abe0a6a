package controller

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller/ipam"
	"github.com/skein-net/skein/control/controller/mcs"
)

// Options are this cluster's networks.
type Options struct {
	PodCIDRs, ServiceCIDRs, Reserved []netip.Prefix
	InternalCIDR                     netip.Prefix
	// ExternalCIDR and ExternalCIDR6 are the IPv4 and IPv6 external CIDRs (how peers see the
	// nodes' host-network traffic of each family): each is required when the pod CIDRs have
	// its family, and unset (invalid) otherwise.
	ExternalCIDR, ExternalCIDR6 netip.Prefix
	Pools                       []netip.Prefix // default ipam.DefaultPools and DefaultPools6
	// NodeCIDRs are the networks the nodes' addresses come from: never inside a peer's CIDR as
	// seen here (each node's own addresses are reserved too, from the Node objects).
	NodeCIDRs []netip.Prefix
	// KeepPublicPeerCIDRs uses a peer's CIDR outside ipam.PrivateRanges as it is when it
	// clashes with nothing; false (the default) remaps it, so that a peer cannot have every node
	// send this cluster's traffic to public addresses to its gateway.
	KeepPublicPeerCIDRs bool
	// MinRemotePrefixLength and MinRemotePrefixLength6 refuse peers' IPv4 and IPv6 CIDRs
	// larger than these (0: /8 and /32).
	MinRemotePrefixLength, MinRemotePrefixLength6 int
	// IPv6 maps peers' IPv6 CIDRs (ConfigurationReconciler.IPv6).
	IPv6 bool
	// AllowPrivilegedGateways lets gateway templates render privileged pods (host namespaces,
	// hostPath, privileged containers, added capabilities).
	AllowPrivilegedGateways bool
	// GatewayWatchPods is when gateways watch Pods: PodRoutesAuto (""), PodRoutesAlways or
	// PodRoutesNever (podroutes.go).
	GatewayWatchPods string
	// GatewayPolicy is what gateway templates may choose (gatewaypolicy.go; zero: the default).
	GatewayPolicy GatewayPolicy
	// ClusterID is this cluster's id; with ServicesFrom set, exported services (the MCS API)
	// are imported from the peers and this cluster's own exports.
	ClusterID string
	// ServicesFrom reads this cluster's ServiceExports, Services and EndpointSlices (the
	// manager's configuration); nil turns multi-cluster services off.
	ServicesFrom *rest.Config
	// PublishedNamespace is where this cluster publishes its exports for its peers' services
	// readers (publish.go; "": DefaultPublishedNamespace).
	PublishedNamespace string
	// NoPublishing: this cluster's exports are not published (its peers import none of them);
	// skein-controller sets it when the PublishedService CRD is not installed.
	NoPublishing bool
	// TokenRenewFraction of a peer's services reader token lifetime passes before it is
	// renewed (0: DefaultTokenRenewFraction).
	TokenRenewFraction float64
	// ImportExcludedNamespaces are never imported into (nil: DefaultImportExcludedNamespaces).
	ImportExcludedNamespaces []string
	// ImportRetry is how long reading a cluster's exports waits after a failure before it
	// starts again (0: DefaultExporterRetry).
	ImportRetry time.Duration
	// Per-peer budgets of multi-cluster services (importbudget.go): ImportBudget limits the
	// imports, endpoints and cached objects each peer causes here (zero values: the
	// defaults), MaxPortsPerImport the ports of one import (0: mcs.DefaultMaxPortsPerImport);
	// ImportNamespaces, when set, imports only into the namespaces it selects.
	ImportBudget      PeerBudget
	MaxPortsPerImport int
	ImportNamespaces  labels.Selector
	// Metrics, when set, gets the IPAM gauges (skein_controller_ipam_*); the daemon passes
	// controller-runtime's registry, served on --metrics-listen.
	Metrics prometheus.Registerer
}

// Setup registers every reconciler on mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	if !o.InternalCIDR.IsValid() {
		return fmt.Errorf("controller: the internal CIDR is required")
	}
	if err := checkPodCIDRs(o.PodCIDRs); err != nil {
		return err
	}
	if err := checkExternalCIDRs(o); err != nil {
		return err
	}
	pools := o.Pools
	if len(pools) == 0 {
		pools = slices.Concat(ipam.DefaultPools, ipam.DefaultPools6)
	}
	local := slices.Concat(o.PodCIDRs, o.ServiceCIDRs, o.Reserved, o.NodeCIDRs)
	local = append(local, o.InternalCIDR)
	for _, e := range []netip.Prefix{o.ExternalCIDR, o.ExternalCIDR6} {
		if e.IsValid() {
			local = append(local, e)
		}
	}
	alloc, err := ipam.New(pools, local)
	if err != nil {
		return err
	}
	if !o.KeepPublicPeerCIDRs {
		alloc.SetAsIs(ipam.PrivateRanges)
	}
	overlayHosts, err := ipam.NewHosts(o.InternalCIDR, 0)
	if err != nil {
		return err
	}
	var externalHosts, externalHosts6 *ipam.Hosts
	if o.ExternalCIDR.IsValid() {
		if externalHosts, err = ipam.NewHosts(o.ExternalCIDR, 0); err != nil {
			return err
		}
	}
	if o.ExternalCIDR6.IsValid() {
		if externalHosts6, err = ipam.NewHosts(o.ExternalCIDR6, 0); err != nil {
			return err
		}
	}
	if o.Metrics != nil {
		if err := o.Metrics.Register(&ipamCollector{alloc: alloc, overlay: overlayHosts, external: externalHosts, external6: externalHosts6}); err != nil {
			return fmt.Errorf("controller: registering the IPAM metrics: %w", err)
		}
	}
	mode := o.GatewayWatchPods
	if mode == "" {
		mode = PodRoutesAuto
	}
	podRoutes, err := ParsePodRoutes(mode)
	if err != nil {
		return fmt.Errorf("controller: gateway pod routes %w", err)
	}
	overlay := &OverlayAddresses{Hosts: overlayHosts, Reader: mgr.GetAPIReader()}
	c, reader, ev := mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("skein-controller")
	for _, r := range []interface{ SetupWithManager(ctrl.Manager) error }{
		&ConfigurationReconciler{Client: c, Reader: reader, IPAM: alloc, Events: ev, MinPrefixLength: o.MinRemotePrefixLength, MinPrefixLength6: o.MinRemotePrefixLength6, IPv6: o.IPv6},
		&InternalNodeReconciler{Client: c, Reader: reader, Overlay: overlay, External: externalHosts, External6: externalHosts6},
		&PublicKeyReconciler{Client: c},
		&GatewayReconciler{Client: c, Reader: reader, Overlay: overlay, Server: true, Events: ev, AllowPrivileged: o.AllowPrivilegedGateways, PodRoutes: podRoutes, Policy: o.GatewayPolicy},
		&GatewayReconciler{Client: c, Reader: reader, Overlay: overlay, Server: false, Events: ev, AllowPrivileged: o.AllowPrivilegedGateways, PodRoutes: podRoutes, Policy: o.GatewayPolicy},
	} {
		if err := r.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if o.ServicesFrom != nil {
		if o.ClusterID == "" {
			return fmt.Errorf("controller: multi-cluster services need this cluster's id")
		}
		r := &ServiceImportReconciler{Client: c, Reader: reader, Events: ev, ClusterID: o.ClusterID, PodCIDRs: o.PodCIDRs,
			Local: o.ServicesFrom, Excluded: o.ImportExcludedNamespaces, Retry: o.ImportRetry,
			Budget: o.ImportBudget, Limits: mcs.Limits{MaxPortsPerImport: o.MaxPortsPerImport}, Namespaces: o.ImportNamespaces,
			Published: cmp.Or(o.PublishedNamespace, DefaultPublishedNamespace), RenewFraction: o.TokenRenewFraction}
		if o.NoPublishing {
			r.Published = ""
		}
		if err := r.SetupWithManager(mgr); err != nil {
			return err
		}
		if o.Metrics != nil {
			if err := o.Metrics.Register(r.Collector()); err != nil {
				return fmt.Errorf("controller: registering the import metrics: %w", err)
			}
		}
	}
	return nil
}

// checkPodCIDRs refuses local pod CIDRs that peers would refuse when they are published
// (spec.remote.cidr.pod and additionalPods): host bits, overlaps, more than 16.
func checkPodCIDRs(ps []netip.Prefix) error {
	if len(ps) == 0 || len(ps) > 16 {
		return fmt.Errorf("controller: %d pod CIDRs, want 1 to 16", len(ps))
	}
	for i, p := range ps {
		if !p.IsValid() || p.Addr().Is4In6() {
			return fmt.Errorf("controller: pod CIDR %v is not an IPv4 or IPv6 CIDR", p)
		}
		if p != p.Masked() {
			return fmt.Errorf("controller: pod CIDR %v has host bits set (%v?)", p, p.Masked())
		}
		for _, q := range ps[:i] {
			if q.Overlaps(p) {
				return fmt.Errorf("controller: pod CIDRs %v and %v overlap: list each range once", q, p)
			}
		}
	}
	return nil
}

// checkExternalCIDRs checks that each family of the pod CIDRs has an external CIDR and that
// each external CIDR is of its family with room for nodes.
func checkExternalCIDRs(o Options) error {
	has4 := slices.ContainsFunc(o.PodCIDRs, func(p netip.Prefix) bool { return p.Addr().Is4() })
	has6 := slices.ContainsFunc(o.PodCIDRs, func(p netip.Prefix) bool { return p.Addr().Is6() })
	switch e, e6 := o.ExternalCIDR, o.ExternalCIDR6; {
	case has4 && !e.IsValid():
		return fmt.Errorf("controller: the pod CIDRs include IPv4: an IPv4 external CIDR is required (how peers see the nodes' IPv4 host-network traffic)")
	case has6 && !e6.IsValid():
		return fmt.Errorf("controller: the pod CIDRs include IPv6: an IPv6 external CIDR is required (how peers see the nodes' IPv6 host-network traffic)")
	case e.IsValid() && (!e.Addr().Is4() || e.Bits() > 30 || e != e.Masked()):
		return fmt.Errorf("controller: IPv4 external CIDR %v: want an IPv4 CIDR without host bits, /30 or larger", e)
	case e6.IsValid() && (!e6.Addr().Is6() || e6.Addr().Is4In6() || e6.Bits() > 126 || e6 != e6.Masked()):
		return fmt.Errorf("controller: IPv6 external CIDR %v: want an IPv6 CIDR without host bits, /126 or larger", e6)
	}
	// Each is published to the peers beside the pod CIDRs: what a peer refuses there (a
	// special range, a prefix shorter than its default bound, an overlap with another of
	// this cluster's CIDRs) would refuse the whole peering. Here the nodes' addresses in it
	// would also be the addresses of pods, services or overlay endpoints, and the gateway
	// routes each to its node.
	for _, e := range []netip.Prefix{o.ExternalCIDR, o.ExternalCIDR6} {
		if !e.IsValid() {
			continue
		}
		if f, ok := netv1alpha1.ForbiddenRange(e); ok {
			return fmt.Errorf("controller: external CIDR %v overlaps %s (%s): peers refuse it; pick a private range", e, f.Prefix, f.Why)
		}
		minLen := netv1alpha1.DefaultMinRemotePrefixLength
		if e.Addr().Is6() {
			minLen = netv1alpha1.DefaultMinRemotePrefixLength6
		}
		if e.Bits() < minLen {
			return fmt.Errorf("controller: external CIDR %v is larger than a /%d: peers refuse it; one address per node is all it needs", e, minLen)
		}
		for _, x := range []struct {
			what string
			ps   []netip.Prefix
		}{{"pod CIDR", o.PodCIDRs}, {"service CIDR", o.ServiceCIDRs}, {"internal CIDR", []netip.Prefix{o.InternalCIDR}}} {
			if i := slices.IndexFunc(x.ps, e.Overlaps); i >= 0 {
				return fmt.Errorf("controller: external CIDR %v overlaps the %s %v: pick a range of its own", e, x.what, x.ps[i])
			}
		}
	}
	return nil
}

package controller

import (
	"fmt"
	"net/netip"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/skein-net/skein/control/controller/ipam"
)

// Options are this cluster's networks.
type Options struct {
	PodCIDRs, ServiceCIDRs, Reserved []netip.Prefix
	ExternalCIDR, InternalCIDR       netip.Prefix
	Pools                            []netip.Prefix // default ipam.DefaultPools
}

// Setup registers every reconciler on mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	if !o.ExternalCIDR.IsValid() || !o.InternalCIDR.IsValid() {
		return fmt.Errorf("controller: the external and internal CIDRs are required")
	}
	pools := o.Pools
	if len(pools) == 0 {
		pools = ipam.DefaultPools
	}
	local := append(append(append([]netip.Prefix{}, o.PodCIDRs...), o.ServiceCIDRs...), o.Reserved...)
	local = append(local, o.ExternalCIDR, o.InternalCIDR)
	alloc, err := ipam.New(pools, local)
	if err != nil {
		return err
	}
	overlayHosts, err := ipam.NewHosts(o.InternalCIDR, 0)
	if err != nil {
		return err
	}
	externalHosts, err := ipam.NewHosts(o.ExternalCIDR, 0)
	if err != nil {
		return err
	}
	overlay := &OverlayAddresses{Hosts: overlayHosts, Reader: mgr.GetAPIReader()}
	c, reader, ev := mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("skein-controller")
	for _, r := range []interface{ SetupWithManager(ctrl.Manager) error }{
		&ConfigurationReconciler{Client: c, Reader: reader, IPAM: alloc, Events: ev},
		&InternalNodeReconciler{Client: c, Reader: reader, Overlay: overlay, External: externalHosts},
		&PublicKeyReconciler{Client: c},
		&GatewayReconciler{Client: c, Reader: reader, Overlay: overlay, Server: true, Events: ev},
		&GatewayReconciler{Client: c, Reader: reader, Overlay: overlay, Server: false, Events: ev},
	} {
		if err := r.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	return nil
}

// Package controller assembles skein-controller's reconcilers on a controller-runtime
// manager: Configuration IPAM, InternalNodes, PublicKeys, GatewayServers and GatewayClients.
package controller

import (
	"fmt"
	"net/netip"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/skein-net/skein/control/addrs"
	"github.com/skein-net/skein/control/configctl"
	"github.com/skein-net/skein/control/gwctl"
	"github.com/skein-net/skein/control/ipam"
	"github.com/skein-net/skein/control/keyctl"
	"github.com/skein-net/skein/control/nodectl"
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
	overlay := &addrs.Overlay{Hosts: overlayHosts, Reader: mgr.GetAPIReader()}
	c, reader, ev := mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("skein-controller")
	for _, r := range []interface{ SetupWithManager(ctrl.Manager) error }{
		&configctl.Reconciler{Client: c, Reader: reader, IPAM: alloc, Events: ev},
		&nodectl.Reconciler{Client: c, Reader: reader, Overlay: overlay, External: externalHosts},
		&keyctl.Reconciler{Client: c},
		&gwctl.Reconciler{Client: c, Overlay: overlay, Server: true, Events: ev},
		&gwctl.Reconciler{Client: c, Overlay: overlay, Server: false, Events: ev},
	} {
		if err := r.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	return nil
}

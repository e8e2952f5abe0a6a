// OverlayAddresses is the controller's table of overlay addresses (from the internal CIDR), shared
// by the reconcilers that hand them out: nodes (InternalNode spec.overlayIP) and gateways
// (status.internalEndpoint.ip). It is rebuilt from the API once, before the first assignment,
// so no reconciler can give out an address another one already recorded.

package controller

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller/ipam"
)

// OverlayAddresses hands out overlay addresses. Keys: "node/<name>" and "gw/<namespace>/<name>".
type OverlayAddresses struct {
	Hosts  *ipam.Hosts
	Reader client.Reader

	once sync.Once
	err  error
}

// NodeKey and GatewayKey name an address holder.
func NodeKey(name string) string               { return "node/" + name }
func GatewayKey(namespace, name string) string { return "gw/" + namespace + "/" + name }

// Restore loads what the API records, once.
func (o *OverlayAddresses) Restore(ctx context.Context) error {
	o.once.Do(func() { o.err = o.restore(ctx) })
	return o.err
}

func (o *OverlayAddresses) restore(ctx context.Context) error {
	var nodes netv1alpha1.InternalNodeList
	if err := o.Reader.List(ctx, &nodes); err != nil {
		return fmt.Errorf("restore overlay addresses: %w", err)
	}
	for _, n := range nodes.Items {
		if n.Spec.OverlayIP != nil {
			if a, err := netip.ParseAddr(string(*n.Spec.OverlayIP)); err == nil {
				o.Hosts.Restore(NodeKey(n.Name), a)
			}
		}
	}
	var servers netv1alpha1.GatewayServerList
	if err := o.Reader.List(ctx, &servers); err != nil {
		return fmt.Errorf("restore overlay addresses: %w", err)
	}
	for _, g := range servers.Items {
		o.restoreGateway(g.Namespace, g.Name, g.Status.InternalEndpoint)
	}
	var clients netv1alpha1.GatewayClientList
	if err := o.Reader.List(ctx, &clients); err != nil {
		return fmt.Errorf("restore overlay addresses: %w", err)
	}
	for _, g := range clients.Items {
		o.restoreGateway(g.Namespace, g.Name, g.Status.InternalEndpoint)
	}
	return nil
}

func (o *OverlayAddresses) restoreGateway(ns, name string, ie *netv1alpha1.InternalEndpoint) {
	if ie == nil || ie.IP == nil {
		return
	}
	if a, err := netip.ParseAddr(string(*ie.IP)); err == nil {
		o.Hosts.Restore(GatewayKey(ns, name), a)
	}
}

// Assign returns key's address, restoring the table first if needed.
func (o *OverlayAddresses) Assign(ctx context.Context, key string) (netip.Addr, error) {
	if err := o.Restore(ctx); err != nil {
		return netip.Addr{}, err
	}
	return o.Hosts.Assign(key)
}

// Release frees key's address.
func (o *OverlayAddresses) Release(key string) { o.Hosts.Release(key) }

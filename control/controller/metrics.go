package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/skein-net/skein/control/controller/ipam"
)

// ipamCollector exports how full the remap pools and the overlay and external address ranges
// are, read at scrape time.
type ipamCollector struct {
	alloc                        *ipam.Allocator
	overlay, external, external6 *ipam.Hosts // external and external6 may be nil
}

var (
	descPoolSize     = prometheus.NewDesc("skein_controller_ipam_pool_size_addresses", "Addresses in a remap pool.", []string{"pool"}, nil)
	descPoolReserved = prometheus.NewDesc("skein_controller_ipam_pool_reserved_addresses", "Addresses of a remap pool inside this cluster's own CIDRs and reserved ranges (never given out).", []string{"pool"}, nil)
	descPoolAssigned = prometheus.NewDesc("skein_controller_ipam_pool_assigned_addresses", "Addresses of a remap pool inside a peer's CIDR as this cluster sees it (remapped or kept as-is).", []string{"pool"}, nil)
	descHostsSize    = prometheus.NewDesc("skein_controller_ipam_range_size_addresses", "Addresses the controller can give out in a range (internal: overlay addresses of nodes and gateways; external, external6: nodes' addresses in the IPv4 and IPv6 external CIDRs).", []string{"range"}, nil)
	descHostsUsed    = prometheus.NewDesc("skein_controller_ipam_range_assigned_addresses", "Addresses given out in a range.", []string{"range"}, nil)
)

func (c *ipamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPoolSize, descPoolReserved, descPoolAssigned, descHostsSize, descHostsUsed} {
		ch <- d
	}
}

func (c *ipamCollector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.alloc.Usage() {
		pool := u.Pool.String()
		ch <- prometheus.MustNewConstMetric(descPoolSize, prometheus.GaugeValue, float64(u.Size), pool)
		ch <- prometheus.MustNewConstMetric(descPoolReserved, prometheus.GaugeValue, float64(u.Reserved), pool)
		ch <- prometheus.MustNewConstMetric(descPoolAssigned, prometheus.GaugeValue, float64(u.Assigned), pool)
	}
	for name, h := range map[string]*ipam.Hosts{"internal": c.overlay, "external": c.external, "external6": c.external6} {
		if h == nil {
			continue // a family the cluster has no pods of
		}
		size, used := h.Usage()
		ch <- prometheus.MustNewConstMetric(descHostsSize, prometheus.GaugeValue, float64(size), name)
		ch <- prometheus.MustNewConstMetric(descHostsUsed, prometheus.GaugeValue, float64(used), name)
	}
}

// Package buildmetric exports the running build (buildinfo) as the constant
// skein_<component>_build_info gauge, for the daemons that use Prometheus's Go client (the
// controller and the agent; the gateway writes it without the library).
package buildmetric

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/skein-net/skein/control/buildinfo"
)

// Collector returns the skein_<component>_build_info gauge: value 1, labels version, commit
// and goversion.
func Collector(component string) prometheus.Collector {
	i := buildinfo.Get()
	name, help := buildinfo.Metric(component)
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        name,
		Help:        help,
		ConstLabels: prometheus.Labels{"version": i.Version, "commit": i.Commit, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}

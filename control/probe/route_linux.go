package probe

import (
	"net/netip"

	"github.com/skein-net/skein/dataplane/kernel"
)

// routeTo asks this namespace's kernel where it sends a packet to dst (RTM_GETROUTE, which
// needs no privilege).
func routeTo(dst netip.Addr) *Route {
	k, err := kernel.NewNetlink("", nil)
	if err != nil {
		return &Route{Error: err.Error()}
	}
	defer k.Close()
	dev, table, err := k.RouteGet(dst)
	if err != nil {
		return &Route{Error: err.Error()}
	}
	return &Route{Device: dev, Table: kernel.TableName(table)}
}

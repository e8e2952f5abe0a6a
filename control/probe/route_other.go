//go:build !linux

package probe

import "net/netip"

func routeTo(netip.Addr) *Route { return &Route{Error: "route look-ups need Linux"} }

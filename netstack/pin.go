//go:build pin

package netstack

// This file only keeps the pinned gVisor version in go.mod until the netstack glue imports it
// for real; `go build -tags pin ./...` proves the pinned versions compile together.
import (
	_ "gvisor.dev/gvisor/pkg/tcpip/link/channel"
	_ "gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	_ "gvisor.dev/gvisor/pkg/tcpip/stack"
	_ "gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
)

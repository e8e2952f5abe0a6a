package v1alpha1

// The spec's defaults, written once: flags, the gateway's configuration builder, the node
// agent's plan and skeinctl take them from here. The kubebuilder default markers on the types
// repeat MTU and port as literals (markers cannot name a constant); a test checks that the
// generated CRDs agree with these.
const (
	// DefaultMTU is the tunnel MTU of GatewayServer and GatewayClient (spec.mtu).
	DefaultMTU = 1340
	// DefaultPort is the gateway server's WireGuard port (spec.endpoint.port).
	DefaultPort = 51820
	// DefaultVNI is the overlay's VXLAN/Geneve network identifier; the number of the table.
	DefaultVNI = 18952
	// RouteTable is the routing table the node agent fills with routes to the gateways.
	RouteTable = 18952
	// DefaultOverlayDevice is the node's overlay device.
	DefaultOverlayDevice = "liqo.vxlan"
	// DefaultInternalCIDR holds the overlay addresses of nodes and gateways.
	DefaultInternalCIDR = "10.80.0.0/16"
)

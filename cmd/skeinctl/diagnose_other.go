//go:build !linux

package main

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// diagnoseNode needs Linux netlink: on other systems it says so.
func (g *globals) diagnoseNode(_ context.Context, r *report, _ client.Client, _ *peerings, _ nodeCheckFlags) {
	r.warn("kernel", "", "node checks read a Linux kernel: run skeinctl diagnose --node on the node", "")
}

// Package control is skein's control plane, grouped by the binary each part serves:
//
//   - api/networking/v1alpha1: the networking.liqo.io/v1alpha1 types, their markers and
//     generated code, and the spec's defaults (MTU, port, VNI, device, table, internal CIDR);
//   - controller: skein-controller's reconcilers, a file per kind, with ipam and render
//     (gateway templates) beneath it;
//   - gateway: how a gateway gets its configuration (the leaf gateway/config, the file and API
//     front-ends, the watcher, the election);
//   - agent: skein-agent's loop, with plan (API objects to kernel state) and apiclient (a
//     client-go reader that keeps the agent small) beneath it;
//   - kube and identity: shared by all of them.
//
// It talks to Kubernetes with client-go and controller-runtime. It never imports appliance,
// netstack or gvisor.dev, and the three binaries' folders do not import one another (a layout
// test enforces both); tests that need an API server use internal/apitest.
package control

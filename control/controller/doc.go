// Package controller is skein-controller: the reconcilers of the networking.liqo.io kinds on one
// controller-runtime manager, a file per kind, level-based, each writing only its own kind's
// status and the objects it owns:
//
//   - configuration.go: Configuration IPAM (status.remote, remapped through ipam when a peer's
//     CIDR clashes with anything local or another peer's);
//   - internalnode.go: one InternalNode per Node, with its overlay and external addresses;
//   - publickey.go: PublicKeys checked (a valid key, one per peer cluster);
//   - gateway.go: GatewayServers and GatewayClients rendered from their templates (render) into
//     a Deployment, Service, ServiceAccount and RoleBinding, with a key pair in a Secret;
//   - overlay.go: the overlay addresses (internal CIDR) nodes and gateways share;
//   - serviceimport.go: multi-cluster services imported from every exporter (mcs computes
//     them), within each peer's budget (importbudget.go: its one write to another kind's
//     status, the condition ServicesWithinBudget of the peer's Configuration, under a field
//     owner of its own), from caches that hold what an import uses (peercache.go);
//   - setup.go: all of them registered on a manager.
//
// Status conditions use netv1alpha1.ConditionReady. Allocations live in the API (status and
// spec fields), so a restarted controller restores them before it hands out new ones.
package controller

// Package gateway is how a skein gateway gets its configuration: from a standalone YAML file
// (File, LoadFile) or, in a cluster, from its GatewayServer or GatewayClient and the objects
// around it (FromObjects, kept current by Watcher). Both front-ends only map their input onto
// config.Spec; config.Build fills every default and validates, so the two cannot drift. The
// package also runs the active/standby election of in-cluster replicas (RunElection), reports
// the Connection status, and builds the PublicKey a peer applies for this gateway
// (PeerPublicKey).
//
// The appliance runs what it produces; nothing here touches packets.
package gateway

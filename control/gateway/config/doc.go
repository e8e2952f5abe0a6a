// Package config is the gateway's one configuration type, Gateway, with the WireGuard key type
// and the UAPI text wireguard-go is configured with. It is a leaf: no Kubernetes, no files, no
// flags; the front-ends in control/gateway (a YAML file, the API objects) map their input onto
// it. The controller uses it for the key type and the key Secret's field names only.
package config

//go:build pin

package dataplane

// This file only keeps the pinned wireguard-go version in go.mod until the dataplane implements
// its tun.Device for real; `go build -tags pin ./...` proves the pinned versions compile together.
import (
	_ "golang.zx2c4.com/wireguard/conn"
	_ "golang.zx2c4.com/wireguard/device"
	_ "golang.zx2c4.com/wireguard/tun"
)

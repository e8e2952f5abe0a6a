// Command skein-gateway is skein's gateway: wireguard-go, the userspace dataplane and a gVisor
// netstack in one unprivileged process. This build runs from a config file (standalone mode).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/skein-net/skein/appliance"
	"github.com/skein-net/skein/control/gwconfig"
)

const usage = `skein-gateway connects this cluster's pods to a peer cluster's through WireGuard,
without the kernel WireGuard module, a TUN device or any privilege.

Usage:
  skein-gateway --config FILE [--log-level LEVEL]
  skein-gateway --check --config FILE

It needs two UDP ports (WireGuard, and the overlay where the nodes' liqo.vxlan devices send
traffic for the peer cluster) and, unless httpListen is off, a TCP port for /healthz,
/readyz and /metrics. See README.md for a complete two-host example.

Flags:
`

func main() {
	fs := flag.NewFlagSet("skein-gateway", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	configPath := fs.String("config", "", "path of the gateway's YAML config file (required)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	check := fs.Bool("check", false, "validate the config file, print the public key, and exit")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "skein-gateway: unexpected arguments %q (see --help)\n", fs.Args())
		os.Exit(2)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "skein-gateway: --log-level %q: want debug, info, warn or error\n", *logLevel)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if *configPath == "" {
		fmt.Fprintln(os.Stderr, "skein-gateway: --config is required (see --help)")
		os.Exit(2)
	}
	cfg, err := gwconfig.LoadFile(*configPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "skein-gateway: %v\n", err)
		os.Exit(1)
	}
	plan, err := cfg.Resolve()
	if err != nil {
		fmt.Fprintf(os.Stderr, "skein-gateway: %s: %v\n", *configPath, err)
		os.Exit(1)
	}
	if *check {
		fmt.Printf("config ok; public key %s\n", plan.PrivateKey.Public())
		return
	}
	gw, err := appliance.Start(plan, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "skein-gateway: %v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	log.Info("stopping")
	gw.Close()
}

// Command skeinctl is skein's CLI: the network workflows of Liqo's liqoctl (spec/003) against
// skein's API.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func main() {
	// skeinctl's API clients log nothing through controller-runtime (without a logger it
	// prints a stack trace once a command has run 30 s).
	ctrllog.SetLogger(logr.Discard())
	// Ctrl-C (or SIGTERM) cancels the command's context: commands that created something
	// (the probe pods of test network and bench) remove it before they exit, and say so. A
	// second Ctrl-C exits at once, leaving what is not removed yet.
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel()
		fmt.Fprintln(os.Stderr, "INFO   interrupted: removing what this command created (Ctrl-C again to exit at once and leave it)")
		<-sigs
		fmt.Fprintf(os.Stderr, "ERRO   interrupted twice: exiting; probe namespaces may be left in either cluster: kubectl delete namespace -l %s (in both)\n", probeRunLabel)
		os.Exit(130)
	}()
	if err := newRoot(os.Stdout, os.Stderr).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "ERRO  ", err)
		os.Exit(1)
	}
}

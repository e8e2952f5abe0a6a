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
	// (test network's probe pods) remove it before they exit. A second Ctrl-C exits at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	if err := newRoot(os.Stdout, os.Stderr).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "ERRO  ", err)
		os.Exit(1)
	}
}

// Command skeinctl is skein's CLI: the network workflows of Liqo's liqoctl (spec/003) against
// skein's API.
package main

import (
	"fmt"
	"os"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func main() {
	// skeinctl's API clients log nothing through controller-runtime (without a logger it
	// prints a stack trace once a command has run 30 s).
	ctrllog.SetLogger(logr.Discard())
	if err := newRoot(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ERRO  ", err)
		os.Exit(1)
	}
}

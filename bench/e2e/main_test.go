package e2e

import (
	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// The suite's clients log nothing through controller-runtime (without a logger it prints a
// stack trace once 30 s have passed).
func init() { ctrllog.SetLogger(logr.Discard()) }

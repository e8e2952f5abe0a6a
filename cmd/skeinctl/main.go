// Command skeinctl is skein's CLI: the network workflows of Liqo's liqoctl (spec/003) against
// skein's API.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRoot(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ERRO  ", err)
		os.Exit(1)
	}
}

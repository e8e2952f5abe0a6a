// Command pause is the lab's pod sandbox image (10.255.0.1:5000/skein-net/pause): it holds a
// pod's namespaces open, reaps the zombies a pod whose processes share its PID namespace leaves
// to it, and exits 0 on SIGINT or SIGTERM. containerd pulls it from the lab's registry, which
// serves it from this binary (the lab has no access to registry.k8s.io).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		fmt.Println("skein lab pause")
		return
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
